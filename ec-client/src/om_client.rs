//! Typed calls to the om over gRPC, each bounded by the om deadline.

use proto_crate::block_token::BlockToken;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use proto_crate::request_id;
use proto_crate::wire::om as pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use proto_crate::{
    BlockGroup, BucketInfo, DatanodeDetails, DatanodeId, KeyInfo, MultipartUpload, OmErrorCode,
    PartInfo, ProtocolError, ReplicationConfig, WriteCondition,
};
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::session::{OpenedKey, SessionGrant, Undo, guarded, open_guarded};
use crate::{ClientError, Result};

/// A connected om client (Ozone's `OzoneManagerProtocolClientSideTranslatorPB`, reduced).
#[derive(Debug, Clone)]
pub(crate) struct OmClient {
    /// Every call carries the current request id ([`request_id::attach`]).
    inner: OzoneManagerServiceClient<InterceptedService<Channel, request_id::Attach>>,
    timeout: Duration,
    /// Random per connected client: the om bounds the sessions one client
    /// holds open by this id.
    client_id: String,
}

/// How a writer's om session ends.
#[derive(Debug, Clone)]
pub(crate) enum Commit {
    /// As a key, with object metadata, provided the condition (if any) holds.
    Key(BTreeMap<String, String>, Option<WriteCondition>),
    /// As a part of a multipart upload, with the part's ETag and metadata.
    Part {
        /// Hex MD5 of the part's bytes.
        etag: String,
        /// Part metadata.
        metadata: BTreeMap<String, String>,
    },
}

/// What a writer committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// A key, now visible.
    Key(KeyInfo),
    /// A part of a multipart upload.
    Part(PartInfo),
}

impl Committed {
    /// The key, or an error if a part was committed.
    pub(crate) fn into_key(self) -> Result<KeyInfo> {
        match self {
            Self::Key(k) => Ok(k),
            Self::Part(_) => Err(ClientError::InvalidArgument(
                "a key commit returned a part".into(),
            )),
        }
    }

    /// The part, or an error if a key was committed.
    pub(crate) fn into_part(self) -> Result<PartInfo> {
        match self {
            Self::Part(p) => Ok(p),
            Self::Key(_) => Err(ClientError::InvalidArgument(
                "a part commit returned a key".into(),
            )),
        }
    }
}

fn bucket_not_found(e: ClientError, bucket: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::BucketNotFound,
            ..
        } => ClientError::BucketNotFound(bucket.to_string()),
        e => e,
    }
}

fn key_not_found(e: ClientError, bucket: &str, key: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::KeyNotFound,
            ..
        } => ClientError::KeyNotFound {
            bucket: bucket.to_string(),
            key: key.to_string(),
        },
        e => e,
    }
}

fn om_error(op: &'static str, s: &Status) -> ClientError {
    let code = OmErrorCode::of(s);
    let message = if code == OmErrorCode::Unspecified || code == OmErrorCode::Unavailable {
        // No om code, or a transport failure: keep the gRPC code in view.
        format!("{:?}: {}", s.code(), s.message())
    } else {
        s.message().to_string()
    };
    ClientError::Om { op, code, message }
}

/// Refuses an om address that is not `HOST:PORT` (a scheme, a path, or no
/// port, which would otherwise mean port 80 or a DNS lookup of `http`).
///
/// # Errors
/// [`ClientError::InvalidArgument`] naming the address and the expected form.
fn check_address(address: &str) -> Result<()> {
    let bad = |why: &str| {
        ClientError::InvalidArgument(format!(
            "om address `{address}` {why}: expected HOST:PORT, e.g. 127.0.0.1:9862"
        ))
    };
    if address.contains("://") || address.contains('/') {
        return Err(bad("has a scheme or a path"));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(bad("has no port"));
    };
    if host.is_empty()
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .is_empty()
    {
        return Err(bad("has no host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad("has an IPv6 host outside brackets ([::1]:9862)"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("has no valid port")),
    }
}

/// An error and its sources as one line (`a: b: c`), each message once.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

impl OmClient {
    pub(crate) async fn connect(
        address: &str,
        timeout: Duration,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self> {
        check_address(address)?;
        let endpoint = proto_crate::tls::endpoint(address, tls)
            .map_err(|e| ClientError::Connect {
                address: address.to_string(),
                message: e.to_string(),
            })?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true);
        let channel = endpoint.connect().await.map_err(|e| ClientError::Connect {
            address: address.to_string(),
            message: error_chain(&e),
        })?;
        let id: u128 = rand::random();
        Ok(Self {
            inner: OzoneManagerServiceClient::with_interceptor(
                channel,
                request_id::attach as request_id::Attach,
            )
            .max_decoding_message_size(64 * 1024 * 1024),
            timeout,
            client_id: format!("{id:032x}"),
        })
    }

    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, fut).await {
            Err(_) => Err(ClientError::OmTimeout {
                op,
                after: self.timeout,
            }),
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(om_error(op, &s)),
        }
    }

    pub(crate) async fn list_datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "ListDatanodes",
                c.list_datanodes(pb::ListDatanodesRequest {}),
            )
            .await?;
        Ok(r.datanodes
            .into_iter()
            .map(DatanodeDetails::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn create_bucket(
        &self,
        name: &str,
        options: &crate::BucketOptions,
    ) -> Result<BucketInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "CreateBucket",
                c.create_bucket(pb::CreateBucketRequest {
                    name: name.to_string(),
                    default_replication: options
                        .replication
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    block_size: options.block_size.unwrap_or(0),
                    owner: options.owner.clone(),
                    acl: options.acl.name().to_string(),
                }),
            )
            .await?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn set_bucket_acl(
        &self,
        name: &str,
        acl: proto_crate::CannedAcl,
    ) -> Result<BucketInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "SetBucketAcl",
                c.set_bucket_acl(pb::SetBucketAclRequest {
                    name: name.to_string(),
                    acl: acl.name().to_string(),
                }),
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "GetS3Secret",
                c.get_s3_secret(pb::GetS3SecretRequest {
                    access_key: access_key.to_string(),
                }),
            )
            .await?;
        Ok((r.user, r.secret_key))
    }

    pub(crate) async fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "GetBucket",
                c.get_bucket(pb::GetBucketRequest {
                    name: name.to_string(),
                }),
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let mut c = self.inner.clone();
        let r = self
            .call("ListBuckets", c.list_buckets(pb::ListBucketsRequest {}))
            .await?;
        Ok(r.buckets
            .into_iter()
            .map(BucketInfo::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn delete_bucket(&self, name: &str) -> Result<()> {
        let mut c = self.inner.clone();
        self.call(
            "DeleteBucket",
            c.delete_bucket(pb::DeleteBucketRequest {
                name: name.to_string(),
            }),
        )
        .await?;
        Ok(())
    }

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
            let mut c = this.inner.clone();
            let r = this
                .call("OpenKey", c.open_key(req))
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
        let mut c = self.inner.clone();
        let r = self
            .call(
                "AllocateBlockGroup",
                c.allocate_block_group(pb::AllocateBlockGroupRequest {
                    session_id,
                    exclude_datanodes: exclude.into_iter().map(String::from).collect(),
                }),
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
        let mut c = self.inner.clone();
        let block_groups = groups.into_iter().map(Into::into).collect();
        match commit {
            Commit::Key(metadata, condition) => {
                let r = self
                    .call(
                        "CommitKey",
                        c.commit_key(pb::CommitKeyRequest {
                            session_id,
                            block_groups,
                            length,
                            metadata: metadata.into_iter().collect(),
                            condition: condition.map(Into::into),
                        }),
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
                        c.commit_part(pb::CommitPartRequest {
                            session_id,
                            block_groups,
                            length,
                            etag,
                            metadata: metadata.into_iter().collect(),
                        }),
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
            let mut c = this.inner.clone();
            let r = this
                .call("InitiateMultipartUpload", c.initiate_multipart_upload(req))
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
            let mut c = this.inner.clone();
            let r = this.call("OpenPart", c.open_part(req)).await?;
            Ok(SessionGrant {
                session_id: r.session_id,
                replication: r.replication,
                block_size: r.block_size,
                lease_ms: r.lease_ms,
            })
        })
        .await
    }

    pub(crate) async fn list_parts(&self, upload_id: &str) -> Result<MultipartUpload> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "ListParts",
                c.list_parts(pb::ListPartsRequest {
                    upload_id: upload_id.to_string(),
                }),
            )
            .await?;
        Ok(r.upload
            .ok_or(ProtocolError::MissingField("upload"))?
            .try_into()?)
    }

    pub(crate) async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<MultipartUpload>> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "ListMultipartUploads",
                c.list_multipart_uploads(pb::ListMultipartUploadsRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                }),
            )
            .await
            .map_err(|e| bucket_not_found(e, bucket))?;
        Ok(r.uploads
            .into_iter()
            .map(MultipartUpload::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "CompleteMultipartUpload",
                c.complete_multipart_upload(pb::CompleteMultipartUploadRequest {
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
                }),
            )
            .await?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        let mut c = self.inner.clone();
        self.call(
            "AbortMultipartUpload",
            c.abort_multipart_upload(pb::AbortMultipartUploadRequest {
                upload_id: upload_id.to_string(),
            }),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn abort_key(&self, session_id: u64) -> Result<()> {
        let mut c = self.inner.clone();
        self.call("AbortKey", c.abort_key(pb::AbortKeyRequest { session_id }))
            .await?;
        Ok(())
    }

    pub(crate) async fn renew_key(&self, session_id: u64) -> Result<()> {
        let mut c = self.inner.clone();
        self.call("RenewKey", c.renew_key(pb::RenewKeyRequest { session_id }))
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
        let mut c = self.inner.clone();
        let r = self
            .call(
                "GetBlockToken",
                c.get_block_token(pb::GetBlockTokenRequest {
                    owner: Some(owner),
                    container_id,
                    local_id,
                }),
            )
            .await?;
        Ok((!r.token.is_empty()).then(|| BlockToken::from_bytes(r.token)))
    }

    pub(crate) async fn lookup_key(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "LookupKey",
                c.lookup_key(pb::LookupKeyRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                }),
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: u32,
    ) -> Result<Vec<KeyInfo>> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "ListKeys",
                c.list_keys(pb::ListKeysRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                    start_after: start_after.to_string(),
                    max_keys,
                }),
            )
            .await?;
        Ok(r.keys
            .into_iter()
            .map(KeyInfo::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn rename_key(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "RenameKey",
                c.rename_key(pb::RenameKeyRequest {
                    bucket: bucket.to_string(),
                    from_key: from.to_string(),
                    to_key: to.to_string(),
                    condition: condition.map(Into::into),
                }),
            )
            .await
            .map_err(|e| key_not_found(e, bucket, from))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn set_key_metadata(
        &self,
        bucket: &str,
        key: &str,
        prefix: &str,
        entries: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        let mut c = self.inner.clone();
        let r = self
            .call(
                "SetKeyMetadata",
                c.set_key_metadata(pb::SetKeyMetadataRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    prefix: prefix.to_string(),
                    entries: entries.into_iter().collect(),
                }),
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn delete_key(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<WriteCondition>,
    ) -> Result<()> {
        let mut c = self.inner.clone();
        self.call(
            "DeleteKey",
            c.delete_key(pb::DeleteKeyRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                condition: condition.map(Into::into),
            }),
        )
        .await
        .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn om_addresses_must_be_host_and_port() {
        for ok in ["127.0.0.1:9862", "localhost:1", "[::1]:9862"] {
            assert!(check_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "http://127.0.0.1:9862",
            "127.0.0.1:0",
            ":9862",
            "h:port",
            "h:99999",
            "::1:9862",
        ] {
            let e = check_address(bad).expect_err(bad);
            assert!(e.to_string().contains("expected HOST:PORT"), "{e}");
        }
    }
}
