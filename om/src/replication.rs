//! Spare replicas: copy one replica index's internal block of a committed
//! key's block group to another datanode and record it as an extra location.
//!
//! Models Ozone's replication of a replica (e.g. while its datanode is
//! decommissioning): the copy is read with ReadChunk from the current
//! location, verified against its checksums, and written with WriteChunk +
//! PutBlock, chunk by chunk, keeping the chunk list and checksums
//! byte-for-byte ([`copy_block`], also used by the ReplicationManager).

use std::sync::Arc;

use block_stream::{BlockStreamError, WriteOrigin, XceiverClientManager, checksum};
use ec_codec::BlockGroupLayout;
use proto_crate::wire::admin as admin_pb;
use proto_crate::wire::admin::om_admin_service_server::OmAdminService;
use proto_crate::{
    BlockGroup, BlockId, BlockLocation, DatanodeDetails, ReplicaIndex, ReplicationConfig,
};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::{OmError, OzoneManager};

/// Copies `block` to `target` from the first of `sources` that answers GetBlock with a
/// block of `expected` bytes, chunk by chunk, keeping its chunk list and checksums and
/// verifying every chunk against its checksums before it is written (a corrupt source fails
/// the copy instead of spreading). The writes are a repair's ([`WriteOrigin::Repair`]): they
/// may replace a copy the target deleted earlier. Commits the copy with an eof PutBlock and
/// returns its length in bytes. Memory: one chunk.
///
/// # Errors
/// [`OmError::ReplicationFailed`] when no source has the block at the expected length, or
/// naming the datanode and call that failed mid-copy (the target may then hold part of the
/// block), a checksum mismatch, or a target that committed another length.
pub(crate) async fn copy_block(
    om: &OzoneManager,
    sources: &[DatanodeDetails],
    target: &DatanodeDetails,
    block: BlockId,
    expected: u64,
) -> Result<u64, OmError> {
    // With security on, the copy's reads and writes carry the service token.
    let token = om.service_token()?;
    let failed = |d: &DatanodeDetails, e: BlockStreamError| {
        OmError::ReplicationFailed(format!("copy of {block} via {d}: {e}"))
    };
    let mut refused = Vec::new();
    let mut chosen = None;
    for source in sources {
        let src = match XceiverClientManager::direct_with(&source.address, om.xceiver_config()) {
            Ok(c) => c.with_fixed_token(token.as_ref()),
            Err(e) => {
                refused.push(format!("{source}: {e}"));
                continue;
            }
        };
        match src.get_block(block).await {
            Ok(data) if data.size == expected => {
                chosen = Some((source, src, data));
                break;
            }
            Ok(data) => refused.push(format!(
                "{source} holds {} bytes, the key's layout gives {expected}",
                data.size
            )),
            Err(e) => refused.push(format!("{source}: {e}")),
        }
    }
    let Some((source, src, data)) = chosen else {
        return Err(OmError::ReplicationFailed(format!(
            "copy of {block}: no usable source ({})",
            refused.join("; ")
        )));
    };
    let dst = XceiverClientManager::direct_with(&target.address, om.xceiver_config())
        .map_err(|e| failed(target, e))?
        .with_fixed_token(token.as_ref());
    for chunk in &data.chunks {
        let bytes = src
            .read_chunk(block, chunk, chunk.offset, chunk.len)
            .await
            .map_err(|e| failed(source, e))?;
        checksum::verify(block, src.address(), chunk, chunk.offset, &bytes)
            .map_err(|e| failed(source, e))?;
        dst.write_chunk_from(WriteOrigin::Repair, block, chunk.clone(), bytes)
            .await
            .map_err(|e| failed(target, e))?;
    }
    let size = data.size;
    let committed = dst
        .put_block_from(WriteOrigin::Repair, data, proto_crate::BlockCommit::Close)
        .await
        .map_err(|e| failed(target, e))?;
    if committed != size {
        return Err(OmError::ReplicationFailed(format!(
            "copy of {block}: {target} committed {committed} of {size} bytes"
        )));
    }
    Ok(size)
}

/// The registered datanode `uuid`, which must hold no block of group `g` (position `group`):
/// the target of a copy or rebuild.
///
/// # Errors
/// [`OmError::InvalidArgument`] for an unregistered datanode or one that holds a block of the
/// group.
pub(crate) fn target_outside(
    om: &OzoneManager,
    g: &BlockGroup,
    group: usize,
    uuid: &str,
) -> Result<DatanodeDetails, OmError> {
    let d = om
        .datanode(uuid)
        .ok_or_else(|| OmError::InvalidArgument(format!("no registered datanode {uuid}")))?;
    if g.pipeline
        .locations
        .iter()
        .any(|l| l.datanode.uuid == d.uuid)
    {
        return Err(OmError::InvalidArgument(format!(
            "datanode {d} already holds a block of group {group}"
        )));
    }
    Ok(d)
}

/// Length in bytes of replica `replica_index` of group `g` of a key of `replication`: the
/// internal block length for EC, the group length for a replicated block.
pub(crate) fn replica_len(
    replication: &ReplicationConfig,
    g: &BlockGroup,
    replica_index: Option<ReplicaIndex>,
) -> Result<u64, OmError> {
    match (replication, replica_index) {
        (ReplicationConfig::Ec(ec), Some(r)) => BlockGroupLayout::new(*ec, g.length)
            .internal_block_len(r)
            .map_err(|e| OmError::InvalidArgument(e.to_string())),
        (ReplicationConfig::Replicated { .. }, None) => Ok(g.length),
        (r, i) => Err(OmError::InvalidArgument(format!(
            "a {r} key has no replica index {}",
            ReplicaIndex::to_wire(i)
        ))),
    }
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
    let target = target_outside(om, g, group, target)?;
    let block = g.block_id(replica_index);
    let expected = replica_len(&info.replication, g, replica_index)?;
    let size = copy_block(om, std::slice::from_ref(&source), &target, block, expected).await?;
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

    /// With TLS on, a call that changes the cluster (`AddReplica`,
    /// `Decommission`) needs an admin credential: a client certificate the
    /// cluster CA signed (`cluster.json`'s `tls.admin_cert`). Without TLS
    /// every caller passes (README: "Security").
    fn require_admin<T>(&self, request: &Request<T>, call: &str) -> Result<(), Status> {
        if self.om.config().tls.is_none() || proto_crate::tls::peer_is_verified(request) {
            return Ok(());
        }
        Err(Status::from(OmError::PermissionDenied(format!(
            "{call} needs an admin credential: a client certificate the cluster CA signed \
             (ozone --tls-cert/--tls-key; a minicluster's cluster.json names one)"
        ))))
    }
}

#[tonic::async_trait]
impl OmAdminService for OmAdminGrpc {
    async fn add_replica(
        &self,
        req: Request<admin_pb::AddReplicaRequest>,
    ) -> Result<Response<admin_pb::AddReplicaResponse>, Status> {
        self.require_admin(&req, "AddReplica")?;
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

    async fn repair_status(
        &self,
        _req: Request<admin_pb::RepairStatusRequest>,
    ) -> Result<Response<admin_pb::RepairStatusResponse>, Status> {
        Ok(Response::new(self.om.repair_status().into()))
    }

    async fn decommission(
        &self,
        req: Request<admin_pb::DecommissionRequest>,
    ) -> Result<Response<admin_pb::DecommissionResponse>, Status> {
        self.require_admin(&req, "Decommission")?;
        let uuid = req.into_inner().datanode_uuid;
        let uuid: proto_crate::DatanodeId = uuid
            .parse()
            .map_err(|e| OmError::InvalidArgument(format!("`{uuid}` is not a datanode id: {e}")))?;
        let state = self.om.decommission(&uuid)?;
        Ok(Response::new(admin_pb::DecommissionResponse {
            op_state: state.to_string(),
        }))
    }
}

/// A failed call of the om's admin service, worded for a person: the call,
/// the gRPC status code and the om's message (not the raw status).
#[derive(Debug, thiserror::Error)]
#[error("om {op} failed ({code}): {message}")]
pub struct AdminCallError {
    /// The admin RPC (`AddReplica`, `Decommission`, `RepairStatus`).
    pub op: &'static str,
    /// The gRPC status code.
    pub code: tonic::Code,
    /// The om's message.
    pub message: String,
}

impl AdminCallError {
    fn of(op: &'static str) -> impl FnOnce(Status) -> Self {
        move |s| Self {
            op,
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

/// Client of the om's admin service (used by `cargo xtask key add-replica`).
#[derive(Debug, Clone)]
pub struct OmAdminClient {
    inner: proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient<Channel>,
}

impl OmAdminClient {
    /// Connects to the om at `address` (`HOST:PORT`), over TLS with `tls`.
    ///
    /// # Errors
    /// [`OmError::Unreachable`](crate::OmError::Unreachable) naming the om
    /// and why (a malformed address, no connection, a TLS handshake refused).
    pub async fn connect(
        address: &str,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self, crate::OmError> {
        let channel = crate::nodes::om_channel(address, tls).await?;
        Ok(Self {
            inner: proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient::new(
                channel,
            ),
        })
    }

    /// Starts decommissioning datanode `uuid`; returns its state after the call.
    ///
    /// # Errors
    /// The om's refusal (an unknown datanode).
    pub async fn decommission(
        &mut self,
        uuid: &str,
    ) -> Result<crate::OperationalState, AdminCallError> {
        let state = self
            .inner
            .decommission(admin_pb::DecommissionRequest {
                datanode_uuid: uuid.to_string(),
            })
            .await
            .map_err(AdminCallError::of("Decommission"))?
            .into_inner()
            .op_state;
        state
            .parse()
            .map_err(|e: String| AdminCallError::of("Decommission")(Status::internal(e)))
    }

    /// The om's ReplicationManager status.
    ///
    /// # Errors
    /// The call's failure.
    pub async fn repair_status(&mut self) -> Result<crate::RepairStatus, AdminCallError> {
        Ok(self
            .inner
            .repair_status(admin_pb::RepairStatusRequest {})
            .await
            .map_err(AdminCallError::of("RepairStatus"))?
            .into_inner()
            .into())
    }

    /// Asks the om to copy replica `replica_index` (`None` for a replicated key) of group
    /// `group` of `bucket/key` to datanode `target` (uuid); returns the bytes copied.
    ///
    /// # Errors
    /// The om's refusal or the copy's failure.
    pub async fn add_replica(
        &mut self,
        bucket: &str,
        key: &str,
        group: u32,
        replica_index: Option<ReplicaIndex>,
        target: &str,
    ) -> Result<u64, AdminCallError> {
        Ok(self
            .inner
            .add_replica(admin_pb::AddReplicaRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                group,
                replica_index: ReplicaIndex::to_wire(replica_index),
                target_datanode: target.to_string(),
            })
            .await
            .map_err(AdminCallError::of("AddReplica"))?
            .into_inner()
            .length)
    }
}
