//! The om's write calls: open-key and part sessions, block group
//! allocation, commits, multipart uploads, aborts, lease renewals and
//! fresh block tokens.

use proto_crate::block_token::BlockToken;
use proto_crate::wire::om as pb;
use proto_crate::{
    BlockGroup, DatanodeId, KeyInfo, MultipartUpload, ReplicationConfig, WriteCondition,
};
use std::collections::BTreeMap;

use super::*;

impl OmClient {
    /// Opens a session writing `bucket/key` (see [`open_guarded`]: a
    /// caller cancelled mid-call aborts the session instead of leaking it).
    pub(crate) async fn open_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<OpenedKey> {
        let this = self.clone();
        let req = pb::OpenKeyRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication: replication.map(|r| r.to_string()).unwrap_or_default(),
            client_id: self.client_id.clone(),
        };
        let bucket = bucket.to_string();
        open_guarded(self, async move {
            let r = this
                .call("OpenKey", Resend::IfNotSent, req, |mut c, r| async move {
                    c.open_key(r).await
                })
                .await
                .map_err(|e| bucket_not_found(e, &bucket))?;
            Ok(SessionGrant {
                session_id: r.session_id,
                replication: r.replication,
                block_size: r.block_size,
                lease_ms: r.lease_ms,
            })
        })
        .await
    }

    pub(crate) async fn allocate_block_group(
        &self,
        session_id: u64,
        exclude: Vec<DatanodeId>,
    ) -> Result<BlockGroup> {
        let r = self
            .call(
                "AllocateBlockGroup",
                Resend::Repeatable,
                pb::AllocateBlockGroupRequest {
                    session_id,
                    exclude_datanodes: exclude.into_iter().map(String::from).collect(),
                },
                |mut c, r| async move { c.allocate_block_group(r).await },
            )
            .await?;
        Ok(r.block_group
            .ok_or(ProtocolError::MissingField("block_group"))?
            .try_into()?)
    }

    /// Ends a writer's session: commits the key (with metadata) or the part
    /// (with its ETag).
    pub(crate) async fn commit(
        &self,
        session_id: u64,
        groups: Vec<BlockGroup>,
        length: u64,
        commit: Commit,
    ) -> Result<Committed> {
        let block_groups = groups.into_iter().map(Into::into).collect();
        match commit {
            Commit::Key(metadata, condition) => {
                let r = self
                    .call(
                        "CommitKey",
                        Resend::Commit,
                        pb::CommitKeyRequest {
                            session_id,
                            block_groups,
                            length,
                            metadata: metadata.into_iter().collect(),
                            condition: condition.map(Into::into),
                        },
                        |mut c, r| async move { c.commit_key(r).await },
                    )
                    .await?;
                Ok(Committed::Key(
                    r.key
                        .ok_or(ProtocolError::MissingField("key"))?
                        .try_into()?,
                ))
            }
            Commit::Part { etag, metadata } => {
                let r = self
                    .call(
                        "CommitPart",
                        Resend::Commit,
                        pb::CommitPartRequest {
                            session_id,
                            block_groups,
                            length,
                            etag,
                            metadata: metadata.into_iter().collect(),
                        },
                        |mut c, r| async move { c.commit_part(r).await },
                    )
                    .await?;
                Ok(Committed::Part(
                    r.part
                        .ok_or(ProtocolError::MissingField("part"))?
                        .try_into()?,
                ))
            }
        }
    }

    /// Starts a multipart upload, guarded like [`open_key`](Self::open_key):
    /// a caller cancelled mid-call aborts the upload instead of leaving one
    /// whose id it never learnt (and that keeps its bucket from deletion).
    pub(crate) async fn initiate_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String> {
        let this = self.clone();
        let req = pb::InitiateMultipartUploadRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication: replication.map(|r| r.to_string()).unwrap_or_default(),
            metadata: metadata.into_iter().collect(),
        };
        let bucket = bucket.to_string();
        let (id, guard) = guarded(self, async move {
            let r = this
                .call(
                    "InitiateMultipartUpload",
                    Resend::IfNotSent,
                    req,
                    |mut c, r| async move { c.initiate_multipart_upload(r).await },
                )
                .await
                .map_err(|e| bucket_not_found(e, &bucket))?;
            let undo = Undo::Upload(r.upload_id.clone());
            Ok((r.upload_id, undo))
        })
        .await?;
        guard.disarm();
        Ok(id)
    }

    /// Opens a session writing part `part_number` of `upload_id` (guarded
    /// as [`open_key`](Self::open_key)).
    pub(crate) async fn open_part(&self, upload_id: &str, part_number: u32) -> Result<OpenedKey> {
        let this = self.clone();
        let req = pb::OpenPartRequest {
            upload_id: upload_id.to_string(),
            part_number,
            client_id: self.client_id.clone(),
        };
        open_guarded(self, async move {
            let r = this
                .call("OpenPart", Resend::IfNotSent, req, |mut c, r| async move {
                    c.open_part(r).await
                })
                .await?;
            Ok(SessionGrant {
                session_id: r.session_id,
                replication: r.replication,
                block_size: r.block_size,
                lease_ms: r.lease_ms,
            })
        })
        .await
    }

    /// ListParts: the upload and its parts numbered above `after`, at most `max` (0: the
    /// header alone); and whether more follow.
    pub(crate) async fn list_parts(
        &self,
        upload_id: &str,
        after: u32,
        max: u32,
    ) -> Result<(MultipartUpload, bool)> {
        let r = self
            .call(
                "ListParts",
                Resend::Read,
                pb::ListPartsRequest {
                    upload_id: upload_id.to_string(),
                    part_number_marker: after,
                    max_parts: max,
                },
                |mut c, r| async move { c.list_parts(r).await },
            )
            .await?;
        let upload = r
            .upload
            .ok_or(ProtocolError::MissingField("upload"))?
            .try_into()?;
        Ok((upload, r.truncated))
    }

    /// ListMultipartUploads: a page of uploads after `marker` (key, upload id and that
    /// upload's initiation time, 0 when unknown), at most `max`; and whether more follow.
    pub(crate) async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        marker: (&str, &str, u64),
        max: u32,
    ) -> Result<(Vec<MultipartUpload>, bool)> {
        let (key_marker, upload_id_marker, initiated_unix_ms_marker) = marker;
        let r = self
            .call(
                "ListMultipartUploads",
                Resend::Read,
                pb::ListMultipartUploadsRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                    key_marker: key_marker.to_string(),
                    upload_id_marker: upload_id_marker.to_string(),
                    max_uploads: max,
                    initiated_unix_ms_marker,
                },
                |mut c, r| async move { c.list_multipart_uploads(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, bucket))?;
        let uploads = r
            .uploads
            .into_iter()
            .map(MultipartUpload::try_from)
            .collect::<std::result::Result<_, _>>()?;
        Ok((uploads, r.truncated))
    }

    pub(crate) async fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "CompleteMultipartUpload",
                Resend::IfNotSent,
                pb::CompleteMultipartUploadRequest {
                    upload_id: upload_id.to_string(),
                    parts: parts
                        .iter()
                        .map(|(n, e)| pb::CompletedPart {
                            part_number: *n,
                            etag: e.clone(),
                        })
                        .collect(),
                    min_part_size,
                    metadata: metadata.into_iter().collect(),
                    condition: condition.map(Into::into),
                },
                |mut c, r| async move { c.complete_multipart_upload(r).await },
            )
            .await?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        self.call(
            "AbortMultipartUpload",
            Resend::IfNotSent,
            pb::AbortMultipartUploadRequest {
                upload_id: upload_id.to_string(),
            },
            |mut c, r| async move { c.abort_multipart_upload(r).await },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn abort_key(&self, session_id: u64) -> Result<()> {
        self.call(
            "AbortKey",
            Resend::Repeatable,
            pb::AbortKeyRequest { session_id },
            |mut c, r| async move { c.abort_key(r).await },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn renew_key(&self, session_id: u64) -> Result<()> {
        self.call(
            "RenewKey",
            Resend::Repeatable,
            pb::RenewKeyRequest { session_id },
            |mut c, r| async move { c.renew_key(r).await },
        )
        .await?;
        Ok(())
    }

    /// A fresh block token of group `container_id:local_id` for `owner`
    /// (the om's `GetBlockToken`); `None` when the om runs without security.
    pub(crate) async fn get_block_token(
        &self,
        owner: pb::get_block_token_request::Owner,
        container_id: u64,
        local_id: u64,
    ) -> Result<Option<BlockToken>> {
        let r = self
            .call(
                "GetBlockToken",
                Resend::Read,
                pb::GetBlockTokenRequest {
                    owner: Some(owner),
                    container_id,
                    local_id,
                },
                |mut c, r| async move { c.get_block_token(r).await },
            )
            .await?;
        Ok((!r.token.is_empty()).then(|| BlockToken::from_bytes(r.token)))
    }
}
