//! The om's gRPC service: wire <-> domain conversion around [`OzoneManager`].
//! Database work runs on the blocking pool so that fsyncs never stall the reactor.

use std::sync::Arc;

use proto_crate::wire::om as pb;
use proto_crate::wire::om::ozone_manager_service_server::OzoneManagerService;
use proto_crate::{
    BlockGroup, CannedAcl, DatanodeDetails, DatanodeId, ProtocolError, ReplicationConfig,
    WriteCondition,
};
use tonic::{Request, Response, Status};

use crate::{NodeStats, OmError, OzoneManager, TokenOwner};

/// `OzoneManagerService` over an in-process [`OzoneManager`].
#[derive(Debug, Clone)]
pub struct OmGrpcService {
    om: Arc<OzoneManager>,
}

impl OmGrpcService {
    /// Serves `om`.
    #[must_use]
    pub fn new(om: Arc<OzoneManager>) -> Self {
        Self { om }
    }

    /// Refuses a datanode call unless, with TLS on, its peer presented a
    /// certificate the cluster CA signed (mutual TLS) that names the host of
    /// the address `d` claims: these calls hand out block-token secrets and
    /// change what the om believes a datanode holds, so a certificate for
    /// other hosts (an admin's, a gateway's) cannot speak for a datanode
    /// here. `peer` is the request's verified chain. Without TLS every peer
    /// passes (README: "Security").
    fn require_datanode_peer(
        &self,
        peer: Option<&[tonic::transport::CertificateDer<'static>]>,
        d: &DatanodeDetails,
        call: &str,
    ) -> Result<(), Status> {
        if self.om.config().tls.is_none() {
            return Ok(());
        }
        let why = match peer {
            None | Some([]) => "presented no client certificate".to_string(),
            Some(chain) if !proto_crate::tls::certificate_names_host(chain, &d.address) => {
                format!(
                    "presented a certificate that does not name the host of {}",
                    d.address
                )
            }
            Some(_) => return Ok(()),
        };
        Err(Status::from(OmError::PermissionDenied(format!(
            "{call} for datanode {d} {why}: datanode calls need a certificate the cluster CA \
             signed for the datanode's host (its --tls-cert and --tls-key)"
        ))))
    }

    async fn run<T, F>(&self, f: impl FnOnce(Arc<OzoneManager>) -> F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, OmError>> + Send + 'static,
    {
        run_to_completion(&self.om, f).await
    }
}

/// Runs the operation `f` makes on a task of its own, so that a client that cancels its
/// call (or whose connection drops) does not cut an operation off between its steps (a
/// commit whose transaction ran but whose reply did not); its error becomes the status the
/// client sees.
pub(crate) async fn run_to_completion<T, F>(
    om: &Arc<OzoneManager>,
    f: impl FnOnce(Arc<OzoneManager>) -> F,
) -> Result<T, Status>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, OmError>> + Send + 'static,
{
    tokio::spawn(f(Arc::clone(om)))
        .await
        .map_err(|e| Status::from(OmError::Task(e)))?
        .map_err(Status::from)
}

fn bad(e: ProtocolError) -> Status {
    Status::from(OmError::InvalidArgument(e.to_string()))
}

fn condition(c: Option<pb::WriteCondition>) -> Result<Option<WriteCondition>, Status> {
    c.map(WriteCondition::try_from).transpose().map_err(bad)
}

fn replication(s: &str) -> Result<Option<ReplicationConfig>, Status> {
    if s.is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(bad)
    }
}

#[tonic::async_trait]
impl OzoneManagerService for OmGrpcService {
    async fn register_datanode(
        &self,
        req: Request<pb::RegisterDatanodeRequest>,
    ) -> Result<Response<pb::RegisterDatanodeResponse>, Status> {
        let peer = req.peer_certs();
        let req = req.into_inner();
        let d = req
            .datanode
            .ok_or(ProtocolError::MissingField("datanode"))
            .and_then(DatanodeDetails::try_from)
            .map_err(bad)?;
        self.require_datanode_peer(peer.as_deref().map(Vec::as_slice), &d, "RegisterDatanode")?;
        self.om.check_cluster(&req.cluster_id, &d)?;
        self.om.register_datanode(d).await?;
        let secrets = self.om.block_token_secrets().await?;
        Ok(Response::new(pb::RegisterDatanodeResponse {
            block_token_secrets: secrets.iter().map(Into::into).collect(),
            cluster_id: self.om.cluster_id().to_string(),
        }))
    }

    async fn list_datanodes(
        &self,
        _req: Request<pb::ListDatanodesRequest>,
    ) -> Result<Response<pb::ListDatanodesResponse>, Status> {
        let statuses = self.om.datanode_statuses();
        Ok(Response::new(pb::ListDatanodesResponse {
            datanodes: statuses.iter().map(|s| s.details.clone().into()).collect(),
            status: statuses.into_iter().map(Into::into).collect(),
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let peer = req.peer_certs();
        let req = req.into_inner();
        let d = req
            .datanode
            .ok_or(ProtocolError::MissingField("datanode"))
            .and_then(DatanodeDetails::try_from)
            .map_err(bad)?;
        self.require_datanode_peer(peer.as_deref().map(Vec::as_slice), &d, "Heartbeat")?;
        self.om.check_cluster(&req.cluster_id, &d)?;
        let stats = NodeStats::from(req.stats.unwrap_or_default());
        self.om.heartbeat(&d, stats).await?;
        // Reads the store only when the om's copy of the keys is behind.
        let secrets = self.om.block_token_secrets().await?;
        Ok(Response::new(pb::HeartbeatResponse {
            block_token_secrets: secrets.iter().map(Into::into).collect(),
            cluster_id: self.om.cluster_id().to_string(),
        }))
    }

    async fn block_report(
        &self,
        req: Request<tonic::Streaming<pb::BlockReportPage>>,
    ) -> Result<Response<pb::BlockReportResponse>, Status> {
        let peer = req.peer_certs();
        let mut pages = req.into_inner();
        let mut datanode: Option<DatanodeDetails> = None;
        let mut blocks: Vec<(u64, u64, u32)> = Vec::new();
        let mut _stream = None;
        // Only a stream that ends cleanly is a complete report; an error drops what came.
        while let Some(page) = pages.message().await? {
            if datanode.is_none() {
                let d = page
                    .datanode
                    .ok_or(ProtocolError::MissingField("datanode"))
                    .and_then(DatanodeDetails::try_from)
                    .map_err(bad)?;
                self.require_datanode_peer(peer.as_deref().map(Vec::as_slice), &d, "BlockReport")?;
                self.om.check_cluster(&page.cluster_id, &d)?;
                // Refused at the first page, before anything is buffered: a datanode the om
                // does not know there, or one already streaming a report.
                if self.om.datanode(&d.uuid).as_ref() != Some(&d) {
                    return Err(Status::from(OmError::InvalidArgument(format!(
                        "block report from {d}, which is not registered at that address"
                    ))));
                }
                _stream = Some(
                    self.om
                        .block_reports
                        .begin_stream(&d.uuid)
                        .map_err(Status::from)?,
                );
                datanode = Some(d);
            }
            if blocks.len().saturating_add(page.blocks.len()) > crate::MAX_REPORTED_BLOCKS {
                return Err(Status::from(OmError::InvalidArgument(format!(
                    "block report of more than {} blocks",
                    crate::MAX_REPORTED_BLOCKS
                ))));
            }
            blocks.extend(
                page.blocks
                    .iter()
                    .map(|b| (b.container_id, b.local_id, b.replica_index)),
            );
        }
        let d = datanode.ok_or_else(|| bad(ProtocolError::MissingField("datanode")))?;
        let n = self
            .run(move |om| async move { om.record_block_report(&d, blocks) })
            .await?;
        Ok(Response::new(pb::BlockReportResponse { blocks: n as u64 }))
    }

    async fn create_bucket(
        &self,
        req: Request<pb::CreateBucketRequest>,
    ) -> Result<Response<pb::CreateBucketResponse>, Status> {
        let req = req.into_inner();
        let r = replication(&req.default_replication)?;
        let size = (req.block_size > 0).then_some(req.block_size);
        let acl = CannedAcl::parse(&req.acl).map_err(bad)?;
        let b = self
            .run(move |om| async move {
                om.create_bucket_as(&req.name, r, size, &req.owner, acl)
                    .await
            })
            .await?;
        Ok(Response::new(pb::CreateBucketResponse {
            bucket: Some(b.into()),
        }))
    }

    async fn get_bucket(
        &self,
        req: Request<pb::GetBucketRequest>,
    ) -> Result<Response<pb::GetBucketResponse>, Status> {
        let name = req.into_inner().name;
        let b = self
            .run(move |om| async move { om.get_bucket(&name).await })
            .await?;
        Ok(Response::new(pb::GetBucketResponse {
            bucket: Some(b.into()),
        }))
    }

    async fn list_buckets(
        &self,
        req: Request<pb::ListBucketsRequest>,
    ) -> Result<Response<pb::ListBucketsResponse>, Status> {
        let req = req.into_inner();
        let filter = crate::BucketFilter {
            owner: req.owner,
            prefix: req.prefix,
            after: req.start_after,
        };
        let limit = match req.max_buckets {
            0 => crate::MAX_BUCKET_PAGE,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let (b, truncated) = self
            .run(move |om| async move { om.list_buckets_page(&filter, limit).await })
            .await?;
        Ok(Response::new(pb::ListBucketsResponse {
            buckets: b.into_iter().map(Into::into).collect(),
            truncated,
        }))
    }

    async fn delete_bucket(
        &self,
        req: Request<pb::DeleteBucketRequest>,
    ) -> Result<Response<pb::DeleteBucketResponse>, Status> {
        let name = req.into_inner().name;
        self.run(move |om| async move { om.delete_bucket(&name).await })
            .await?;
        Ok(Response::new(pb::DeleteBucketResponse {}))
    }

    async fn set_bucket_acl(
        &self,
        req: Request<pb::SetBucketAclRequest>,
    ) -> Result<Response<pb::SetBucketAclResponse>, Status> {
        let req = req.into_inner();
        let acl = CannedAcl::parse(&req.acl).map_err(bad)?;
        let b = self
            .run(move |om| async move { om.set_bucket_acl(&req.name, acl).await })
            .await?;
        Ok(Response::new(pb::SetBucketAclResponse {
            bucket: Some(b.into()),
        }))
    }

    async fn get_s3_secret(
        &self,
        req: Request<pb::GetS3SecretRequest>,
    ) -> Result<Response<pb::GetS3SecretResponse>, Status> {
        // With TLS, secrets go only to the S3 gateway: a peer whose certificate
        // the cluster CA signed for the name `s3-gateway`.
        if self.om.config().tls.is_some()
            && !proto_crate::tls::peer_names_host(&req, proto_crate::tls::S3_GATEWAY_NAME)
        {
            return Err(Status::from(OmError::PermissionDenied(format!(
                "GetS3Secret needs the S3 gateway's client certificate: one the cluster CA \
                 signed for the DNS name `{}` (the gateway's --om-cert and --om-key)",
                proto_crate::tls::S3_GATEWAY_NAME
            ))));
        }
        let access_key = req.into_inner().access_key;
        let (user, secret_key) = self.om.s3_secret(&access_key).await?;
        Ok(Response::new(pb::GetS3SecretResponse { user, secret_key }))
    }

    async fn open_key(
        &self,
        req: Request<pb::OpenKeyRequest>,
    ) -> Result<Response<pb::OpenKeyResponse>, Status> {
        let req = req.into_inner();
        let r = replication(&req.replication)?;
        let k = self
            .run(move |om| async move {
                om.open_key_as(&req.client_id, &req.bucket, &req.key, r)
                    .await
            })
            .await?;
        Ok(Response::new(pb::OpenKeyResponse {
            session_id: k.session_id,
            replication: k.replication.to_string(),
            block_size: k.block_size,
            lease_ms: u64::try_from(self.om.config().open_key_lease.as_millis())
                .unwrap_or(u64::MAX),
        }))
    }

    async fn allocate_block_group(
        &self,
        req: Request<pb::AllocateBlockGroupRequest>,
    ) -> Result<Response<pb::AllocateBlockGroupResponse>, Status> {
        let req = req.into_inner();
        let exclude = req
            .exclude_datanodes
            .iter()
            .map(|u| {
                u.parse::<DatanodeId>().map_err(|e| {
                    OmError::InvalidArgument(format!(
                        "exclude list: `{u}` is not a datanode id: {e}"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let g = self
            .run(move |om| async move {
                let (g, client) = om.allocate_for(req.session_id, &exclude).await?;
                om.with_session_token(&client, g)
            })
            .await?;
        Ok(Response::new(pb::AllocateBlockGroupResponse {
            block_group: Some(g.into()),
        }))
    }

    async fn commit_key(
        &self,
        req: Request<pb::CommitKeyRequest>,
    ) -> Result<Response<pb::CommitKeyResponse>, Status> {
        let req = req.into_inner();
        let groups = req
            .block_groups
            .into_iter()
            .map(BlockGroup::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        let condition = condition(req.condition)?;
        let k = self
            .run(move |om| async move {
                let k = om
                    .commit_key_if(
                        req.session_id,
                        &groups,
                        req.length,
                        req.metadata.into_iter().collect(),
                        condition,
                    )
                    .await?;
                om.with_read_tokens(k, "")
            })
            .await?;
        Ok(Response::new(pb::CommitKeyResponse {
            key: Some(k.into()),
        }))
    }

    async fn abort_key(
        &self,
        req: Request<pb::AbortKeyRequest>,
    ) -> Result<Response<pb::AbortKeyResponse>, Status> {
        let id = req.into_inner().session_id;
        self.run(move |om| async move { om.abort_key(id).await })
            .await?;
        Ok(Response::new(pb::AbortKeyResponse {}))
    }

    async fn renew_key(
        &self,
        req: Request<pb::RenewKeyRequest>,
    ) -> Result<Response<pb::RenewKeyResponse>, Status> {
        let session_id = req.into_inner().session_id;
        self.run(move |om| async move { om.renew_key(session_id).await })
            .await?;
        Ok(Response::new(pb::RenewKeyResponse {}))
    }

    async fn lookup_key(
        &self,
        req: Request<pb::LookupKeyRequest>,
    ) -> Result<Response<pb::LookupKeyResponse>, Status> {
        let req = req.into_inner();
        let k = self
            .run(move |om| async move {
                om.with_read_tokens(om.lookup_key(&req.bucket, &req.key).await?, "")
            })
            .await?;
        Ok(Response::new(pb::LookupKeyResponse {
            key: Some(k.into()),
        }))
    }

    async fn list_keys(
        &self,
        req: Request<pb::ListKeysRequest>,
    ) -> Result<Response<pb::ListKeysResponse>, Status> {
        let req = req.into_inner();
        let keys = self
            .run(move |om| async move {
                om.list_keys(
                    &req.bucket,
                    &req.prefix,
                    &req.start_after,
                    req.max_keys as usize,
                )
                .await?
                .into_iter()
                .map(|k| om.with_read_tokens(k, ""))
                .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        Ok(Response::new(pb::ListKeysResponse {
            keys: keys.into_iter().map(Into::into).collect(),
        }))
    }

    async fn delete_key(
        &self,
        req: Request<pb::DeleteKeyRequest>,
    ) -> Result<Response<pb::DeleteKeyResponse>, Status> {
        let req = req.into_inner();
        let condition = condition(req.condition)?;
        self.run(move |om| async move { om.delete_key_if(&req.bucket, &req.key, condition).await })
            .await?;
        Ok(Response::new(pb::DeleteKeyResponse {}))
    }

    async fn rename_key(
        &self,
        req: Request<pb::RenameKeyRequest>,
    ) -> Result<Response<pb::RenameKeyResponse>, Status> {
        let req = req.into_inner();
        let condition = condition(req.condition)?;
        let k = self
            .run(move |om| async move {
                let k = om
                    .rename_key(&req.bucket, &req.from_key, &req.to_key, condition)
                    .await?;
                om.with_read_tokens(k, "")
            })
            .await?;
        Ok(Response::new(pb::RenameKeyResponse {
            key: Some(k.into()),
        }))
    }

    async fn set_key_metadata(
        &self,
        req: Request<pb::SetKeyMetadataRequest>,
    ) -> Result<Response<pb::SetKeyMetadataResponse>, Status> {
        let req = req.into_inner();
        let k = self
            .run(move |om| async move {
                let k = om
                    .set_key_metadata(
                        &req.bucket,
                        &req.key,
                        &req.prefix,
                        req.entries.into_iter().collect(),
                    )
                    .await?;
                om.with_read_tokens(k, "")
            })
            .await?;
        Ok(Response::new(pb::SetKeyMetadataResponse {
            key: Some(k.into()),
        }))
    }

    async fn get_block_token(
        &self,
        req: Request<pb::GetBlockTokenRequest>,
    ) -> Result<Response<pb::GetBlockTokenResponse>, Status> {
        let req = req.into_inner();
        let owner = match req.owner {
            Some(pb::get_block_token_request::Owner::SessionId(id)) => TokenOwner::Session(id),
            Some(pb::get_block_token_request::Owner::Key(k)) => TokenOwner::Key {
                bucket: k.bucket,
                key: k.key,
            },
            None => return Err(bad(ProtocolError::MissingField("owner"))),
        };
        let token = self
            .run(move |om| async move {
                om.block_token_for(&owner, req.container_id, req.local_id)
                    .await
            })
            .await?;
        Ok(Response::new(pb::GetBlockTokenResponse {
            token: token.map(|t| t.as_bytes().clone()).unwrap_or_default(),
        }))
    }

    async fn initiate_multipart_upload(
        &self,
        req: Request<pb::InitiateMultipartUploadRequest>,
    ) -> Result<Response<pb::InitiateMultipartUploadResponse>, Status> {
        let req = req.into_inner();
        let r = replication(&req.replication)?;
        let upload_id = self
            .run(move |om| async move {
                om.initiate_multipart_upload(
                    &req.bucket,
                    &req.key,
                    r,
                    req.metadata.into_iter().collect(),
                )
                .await
            })
            .await?;
        Ok(Response::new(pb::InitiateMultipartUploadResponse {
            upload_id,
        }))
    }

    async fn open_part(
        &self,
        req: Request<pb::OpenPartRequest>,
    ) -> Result<Response<pb::OpenKeyResponse>, Status> {
        let req = req.into_inner();
        let k = self
            .run(move |om| async move {
                om.open_part_as(&req.client_id, &req.upload_id, req.part_number)
                    .await
            })
            .await?;
        Ok(Response::new(pb::OpenKeyResponse {
            session_id: k.session_id,
            replication: k.replication.to_string(),
            block_size: k.block_size,
            lease_ms: u64::try_from(self.om.config().open_key_lease.as_millis())
                .unwrap_or(u64::MAX),
        }))
    }

    async fn commit_part(
        &self,
        req: Request<pb::CommitPartRequest>,
    ) -> Result<Response<pb::CommitPartResponse>, Status> {
        let req = req.into_inner();
        let groups = req
            .block_groups
            .into_iter()
            .map(BlockGroup::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        let p = self
            .run(move |om| async move {
                om.commit_part_with(
                    req.session_id,
                    &groups,
                    req.length,
                    &req.etag,
                    req.metadata.into_iter().collect(),
                )
                .await
            })
            .await?;
        Ok(Response::new(pb::CommitPartResponse {
            part: Some(p.into()),
        }))
    }

    async fn list_parts(
        &self,
        req: Request<pb::ListPartsRequest>,
    ) -> Result<Response<pb::ListPartsResponse>, Status> {
        let req = req.into_inner();
        let limit = usize::try_from(req.max_parts).unwrap_or(usize::MAX);
        let (u, truncated) = self
            .run(move |om| async move {
                om.list_parts(&req.upload_id, req.part_number_marker, limit)
                    .await
            })
            .await?;
        Ok(Response::new(pb::ListPartsResponse {
            upload: Some(u.into()),
            truncated,
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: Request<pb::ListMultipartUploadsRequest>,
    ) -> Result<Response<pb::ListMultipartUploadsResponse>, Status> {
        let req = req.into_inner();
        let marker = crate::UploadsMarker {
            key: req.key_marker,
            upload_id: Some(req.upload_id_marker).filter(|id| !id.is_empty()),
            initiated_unix_ms: Some(req.initiated_unix_ms_marker).filter(|ms| *ms > 0),
        };
        let limit = match req.max_uploads {
            0 => crate::MAX_LIST_PAGE,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let (uploads, truncated) = self
            .run(move |om| async move {
                om.list_multipart_uploads(&req.bucket, &req.prefix, &marker, limit)
                    .await
            })
            .await?;
        Ok(Response::new(pb::ListMultipartUploadsResponse {
            uploads: uploads.into_iter().map(Into::into).collect(),
            truncated,
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: Request<pb::CompleteMultipartUploadRequest>,
    ) -> Result<Response<pb::CompleteMultipartUploadResponse>, Status> {
        let req = req.into_inner();
        let parts: Vec<(u32, String)> = req
            .parts
            .into_iter()
            .map(|p| (p.part_number, p.etag))
            .collect();
        let condition = condition(req.condition)?;
        let k = self
            .run(move |om| async move {
                let k = om
                    .complete_multipart_upload_if(
                        &req.upload_id,
                        &parts,
                        req.min_part_size,
                        req.metadata.into_iter().collect(),
                        condition,
                    )
                    .await?;
                om.with_read_tokens(k, "")
            })
            .await?;
        Ok(Response::new(pb::CompleteMultipartUploadResponse {
            key: Some(k.into()),
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: Request<pb::AbortMultipartUploadRequest>,
    ) -> Result<Response<pb::AbortMultipartUploadResponse>, Status> {
        let id = req.into_inner().upload_id;
        self.run(move |om| async move { om.abort_multipart_upload(&id).await })
            .await?;
        Ok(Response::new(pb::AbortMultipartUploadResponse {}))
    }
}
