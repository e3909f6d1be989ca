//! Spare replicas: copy one replica index's internal block of a committed
//! key's block group to another datanode and record it as an extra location.
//!
//! Models Ozone's replication of a replica (e.g. while its datanode is
//! decommissioning): the copy is read with ReadChunk from the current
//! location, verified against its checksums, and written with WriteChunk +
//! PutBlock, chunk by chunk, keeping the chunk list and checksums
//! byte-for-byte ([`copy_block`], also used by the ReplicationManager).

use block_stream::{BlockStreamError, WriteOrigin, XceiverClientManager, checksum};
use ec_codec::BlockGroupLayout;
use proto_crate::{
    BlockGroup, BlockId, BlockLocation, DatanodeDetails, ReplicaIndex, ReplicationConfig,
};

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
    let info = om.lookup_key(bucket, key).await?;
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
    )
    .await?;
    Ok(size)
}
