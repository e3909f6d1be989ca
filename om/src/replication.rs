//! Spare replicas: copy one replica index's internal block of a committed
//! key's block group to another datanode and record it as an extra location.
//!
//! Models Ozone's replication of an EC replica (e.g. while its datanode is
//! decommissioning): the copy is read with ReadChunk from the current
//! location and written with WriteChunk + PutBlock, chunk by chunk, keeping
//! the chunk list and checksums byte-for-byte.

use std::sync::Arc;
use std::time::Duration;

use proto_crate::wire::admin as admin_pb;
use proto_crate::wire::admin::om_admin_service_server::OmAdminService;
use proto_crate::wire::datanode as dn_pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::{BlockData, BlockLocation, DatanodeDetails, ReplicaIndex};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::{OmError, OzoneManager};

/// Deadline of each datanode call made while copying.
const COPY_RPC_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) async fn datanode_client(
    d: &DatanodeDetails,
) -> Result<DatanodeServiceClient<Channel>, OmError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", d.address))
        .map_err(|e| OmError::ReplicationFailed(format!("address of {d}: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| OmError::ReplicationFailed(format!("connecting to {d}: {e}")))?;
    let c = DatanodeServiceClient::new(channel);
    Ok(c.max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024))
}

fn failed(what: &str, d: &DatanodeDetails, e: &Status) -> OmError {
    OmError::ReplicationFailed(format!("{what} on {d}: {} {}", e.code(), e.message()))
}

fn timed<T>(r: Result<Result<T, Status>, tokio::time::error::Elapsed>) -> Result<T, Status> {
    r.unwrap_or_else(|_| Err(Status::deadline_exceeded("copy RPC timed out")))
}

/// Copies replica `replica_index` (`None` for a replicated key) of group `group` (counting
/// from 0) of `bucket/key` to the datanode `target` (uuid) and registers the copy as a
/// spare location. Returns the bytes copied.
///
/// # Errors
/// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] for a group or
/// index the key does not have, an unknown target, or a target that already
/// holds a block of the group; [`OmError::ReplicationFailed`] when a datanode
/// call fails (nothing is registered then).
pub async fn add_replica(
    om: &OzoneManager,
    bucket: &str,
    key: &str,
    group: usize,
    replica_index: Option<ReplicaIndex>,
    target: &str,
) -> Result<u64, OmError> {
    let info = om.lookup_key(bucket, key)?;
    let g = info.block_groups.get(group).ok_or_else(|| {
        OmError::InvalidArgument(format!(
            "{bucket}/{key} has {} block groups, no group {group}",
            info.block_groups.len()
        ))
    })?;
    let source = g
        .pipeline
        .nodes_for(replica_index)
        .next()
        .cloned()
        .ok_or_else(|| {
            OmError::InvalidArgument(format!(
                "group {group} has no replica index {}",
                ReplicaIndex::to_wire(replica_index)
            ))
        })?;
    let target = om
        .datanodes()
        .into_iter()
        .find(|d| d.uuid == target)
        .ok_or_else(|| OmError::InvalidArgument(format!("no registered datanode {target}")))?;
    if g.pipeline
        .locations
        .iter()
        .any(|l| l.datanode.uuid == target.uuid)
    {
        return Err(OmError::InvalidArgument(format!(
            "datanode {target} already holds a block of group {group}"
        )));
    }
    let block = g.block_id(replica_index);
    let mut src = datanode_client(&source).await?;
    let mut dst = datanode_client(&target).await?;
    let data = timed(
        tokio::time::timeout(
            COPY_RPC_TIMEOUT,
            src.get_block(dn_pb::GetBlockRequest {
                block_id: Some(block.into()),
            }),
        )
        .await,
    )
    .map_err(|e| failed("GetBlock", &source, &e))?
    .into_inner()
    .block_data
    .ok_or_else(|| {
        OmError::ReplicationFailed(format!("GetBlock on {source} returned no block data"))
    })?;
    let data = BlockData::try_from(data)
        .map_err(|e| OmError::ReplicationFailed(format!("block data from {source}: {e}")))?;
    for chunk in &data.chunks {
        let bytes = timed(
            tokio::time::timeout(
                COPY_RPC_TIMEOUT,
                src.read_chunk(dn_pb::ReadChunkRequest {
                    block_id: Some(block.into()),
                    chunk: Some(chunk.clone().into()),
                    offset: chunk.offset,
                    len: chunk.len,
                }),
            )
            .await,
        )
        .map_err(|e| failed("ReadChunk", &source, &e))?
        .into_inner()
        .data;
        if bytes.len() as u64 != chunk.len {
            return Err(OmError::ReplicationFailed(format!(
                "ReadChunk on {source} returned {} of {} bytes",
                bytes.len(),
                chunk.len
            )));
        }
        timed(
            tokio::time::timeout(
                COPY_RPC_TIMEOUT,
                dst.write_chunk(dn_pb::WriteChunkRequest {
                    block_id: Some(block.into()),
                    chunk: Some(chunk.clone().into()),
                    data: bytes,
                }),
            )
            .await,
        )
        .map_err(|e| failed("WriteChunk", &target, &e))?;
    }
    let size = data.size;
    timed(
        tokio::time::timeout(
            COPY_RPC_TIMEOUT,
            dst.put_block(dn_pb::PutBlockRequest {
                block_data: Some(data.into()),
                eof: true,
            }),
        )
        .await,
    )
    .map_err(|e| failed("PutBlock", &target, &e))?;
    om.add_location(
        bucket,
        key,
        group,
        (block.container_id, block.local_id),
        BlockLocation {
            datanode: target,
            replica_index,
        },
    )?;
    Ok(size)
}

/// `OmAdminService`: spare-replica creation.
#[derive(Debug, Clone)]
pub struct OmAdminGrpc {
    om: Arc<OzoneManager>,
}

impl OmAdminGrpc {
    /// Serves `om`.
    #[must_use]
    pub fn new(om: Arc<OzoneManager>) -> Self {
        Self { om }
    }
}

#[tonic::async_trait]
impl OmAdminService for OmAdminGrpc {
    async fn add_replica(
        &self,
        req: Request<admin_pb::AddReplicaRequest>,
    ) -> Result<Response<admin_pb::AddReplicaResponse>, Status> {
        let r = req.into_inner();
        let length = add_replica(
            &self.om,
            &r.bucket,
            &r.key,
            r.group as usize,
            ReplicaIndex::from_wire(r.replica_index),
            &r.target_datanode,
        )
        .await?;
        Ok(Response::new(admin_pb::AddReplicaResponse { length }))
    }
}

/// Client of the om's admin service (used by `cargo xtask key add-replica`).
#[derive(Debug, Clone)]
pub struct OmAdminClient {
    inner: proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient<Channel>,
}

impl OmAdminClient {
    /// Connects to the om at `address` (`HOST:PORT`).
    ///
    /// # Errors
    /// The connection error.
    pub async fn connect(address: &str) -> Result<Self, tonic::transport::Error> {
        Ok(Self {
            inner:
                proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient::connect(
                    format!("http://{address}"),
                )
                .await?,
        })
    }

    /// Asks the om to copy replica `replica_index` (`None` for a replicated key) of group
    /// `group` of `bucket/key` to datanode `target` (uuid); returns the bytes copied.
    ///
    /// # Errors
    /// The om's refusal or the copy's failure, as a status.
    pub async fn add_replica(
        &mut self,
        bucket: &str,
        key: &str,
        group: u32,
        replica_index: Option<ReplicaIndex>,
        target: &str,
    ) -> Result<u64, Status> {
        Ok(self
            .inner
            .add_replica(admin_pb::AddReplicaRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                group,
                replica_index: ReplicaIndex::to_wire(replica_index),
                target_datanode: target.to_string(),
            })
            .await?
            .into_inner()
            .length)
    }
}
