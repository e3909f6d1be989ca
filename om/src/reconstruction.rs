//! EC repair of one block group: the om asks a target datanode to rebuild lost indexes
//! (`ReconstructEcGroup`, run by the datanode's `EcReconstructionCoordinator`) and, once every
//! target committed, points the group's locations of those indexes at the targets in one
//! transaction that logs the replaced replicas for deletion.
//!
//! The command goes to the datanode as a direct RPC rather than in a heartbeat response (as
//! Ozone's SCM sends its commands): the om then learns the outcome of each task when it ends,
//! so it can bound the tasks in flight per datanode and in total and retry a failed one at once,
//! without a report channel or a heartbeat interval of latency.

use std::collections::BTreeSet;
use std::time::Duration;

use proto_crate::wire::datanode as dn_pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::{
    BlockLocation, DatanodeDetails, DatanodeId, KeyInfo, ReplicaIndex, ReplicationConfig,
};
use tonic::transport::Channel;

use crate::group_owner::GroupOwner;
use crate::{OmError, OzoneManager};

/// A client of datanode `d` at its registered address, over TLS when the om has it.
pub(crate) async fn datanode_client(
    d: &DatanodeDetails,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Result<DatanodeServiceClient<Channel>, OmError> {
    let endpoint = proto_crate::tls::endpoint(&d.address, tls)
        .map_err(|e| OmError::ReplicationFailed(format!("datanode {d}: {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| OmError::ReplicationFailed(format!("connecting to {d}: {e}")))?;
    Ok(DatanodeServiceClient::new(channel))
}

/// Deadline of one `ReconstructEcGroup` call: the rebuild of a whole internal block.
pub const RECONSTRUCTION_TIMEOUT: Duration = Duration::from_secs(600);

/// Rebuilds the EC indexes of `targets` (each index with the datanode that is to hold it) of
/// group `group` (from 0) of `bucket/key`, reading from every other location of the group, and
/// records the targets as those indexes' locations (the old ones are logged for deletion).
/// Returns the key as recorded afterwards. The first target coordinates the rebuild.
///
/// # Errors
/// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] for a key that is not EC, a group or
/// index it does not have, no target or an index named twice, an unregistered target or one
/// that already holds a block of the group; [`OmError::InsufficientSources`] when fewer than
/// d indexes could be read; [`OmError::ReplicationFailed`] when the rebuild failed otherwise
/// (its message says why). Nothing is recorded unless every target committed; the targets of
/// a failed rebuild are logged for deletion (they may hold part of a block).
pub async fn reconstruct_ec_indexes(
    om: &OzoneManager,
    bucket: &str,
    key: &str,
    group: usize,
    targets: &[(ReplicaIndex, DatanodeId)],
) -> Result<KeyInfo, OmError> {
    reconstruct_group(om, &GroupOwner::key(bucket, key), group, targets).await?;
    // The key as a client would see it: with READ tokens when security is on.
    om.with_read_tokens(om.lookup_key(bucket, key).await?, "om")
}

/// [`reconstruct_ec_indexes`] for group `group` of any owner: a committed key or a part of a
/// multipart upload in progress.
///
/// # Errors
/// As `reconstruct_ec_indexes`, and [`OmError::NoSuchUpload`] for an upload or part that is
/// gone.
pub(crate) async fn reconstruct_group(
    om: &OzoneManager,
    owner: &GroupOwner,
    group: usize,
    targets: &[(ReplicaIndex, DatanodeId)],
) -> Result<(), OmError> {
    let (replication, g) = om.owned_group(owner, group).await?;
    let ReplicationConfig::Ec(ec) = replication else {
        return Err(OmError::InvalidArgument(format!(
            "{owner} is {replication}, not EC"
        )));
    };
    let indexes: BTreeSet<ReplicaIndex> = targets.iter().map(|(i, _)| *i).collect();
    if targets.is_empty() || indexes.len() != targets.len() {
        return Err(OmError::InvalidArgument(
            "name each index to rebuild once, with its target".into(),
        ));
    }
    if let Some(i) = indexes.iter().find(|i| i.unit() >= ec.total()) {
        return Err(OmError::InvalidArgument(format!(
            "{ec} has no replica index {i}"
        )));
    }
    let mut placed = Vec::with_capacity(targets.len());
    for (index, uuid) in targets {
        let d = crate::replication::target_outside(om, &g, group, uuid)?;
        placed.push(BlockLocation {
            datanode: d,
            replica_index: Some(*index),
        });
    }
    let sources: Vec<dn_pb::IndexAddress> = g
        .pipeline
        .locations
        .iter()
        .filter_map(|l| {
            let i = l.replica_index?;
            (!indexes.contains(&i)).then(|| dn_pb::IndexAddress {
                replica_index: i.get(),
                address: l.datanode.address.clone(),
            })
        })
        .collect();
    let request = dn_pb::ReconstructEcGroupRequest {
        container_id: g.container_id,
        local_id: g.local_id,
        group_length: g.length,
        replication: ec.to_string(),
        sources,
        targets: placed
            .iter()
            .map(|l| dn_pb::IndexAddress {
                replica_index: ReplicaIndex::to_wire(l.replica_index),
                address: l.datanode.address.clone(),
            })
            .collect(),
    };
    let block = (g.container_id, g.local_id);
    // The coordinator reads and writes the group's indexes with this token.
    let token = om.mint(
        proto_crate::block_token::TokenScope::group_of(g.id()),
        proto_crate::block_token::AccessModes::READ_WRITE,
        "om",
    )?;
    let tls = om.config().tls.as_ref();
    let outcome = match rebuild(request, token.as_ref(), &placed[0].datanode, tls).await {
        Ok(()) => {
            let removed: Vec<BlockLocation> = g
                .pipeline
                .locations
                .iter()
                .filter(|l| l.replica_index.is_some_and(|i| indexes.contains(&i)))
                .cloned()
                .collect();
            om.replace_group_locations(owner, group, block, &removed, &placed)
                .await
        }
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        // Targets may hold partial or committed but unreferenced blocks: free them.
        if let Err(e) = om.log_orphans(owner, group, block, &placed).await {
            tracing::warn!(error = %e, "logging a failed rebuild's targets for deletion");
        }
    }
    outcome
}

/// Sends `request` to `coordinator` and waits for its answer.
async fn rebuild(
    request: dn_pb::ReconstructEcGroupRequest,
    token: Option<&proto_crate::block_token::BlockToken>,
    coordinator: &DatanodeDetails,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Result<(), OmError> {
    let mut client = datanode_client(coordinator, tls).await?;
    let request = proto_crate::block_token::request(request, token);
    let answer = tokio::time::timeout(RECONSTRUCTION_TIMEOUT, client.reconstruct_ec_group(request))
        .await
        .map_err(|_| {
            OmError::ReplicationFailed(format!(
                "ReconstructEcGroup on {coordinator} took over {RECONSTRUCTION_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| {
            let code = proto_crate::result_code(&e);
            let m = format!(
                "ReconstructEcGroup on {coordinator}: {}: {}",
                code.name(),
                e.message()
            );
            if code == proto_crate::ResultCode::InsufficientSources {
                OmError::InsufficientSources(m)
            } else {
                OmError::ReplicationFailed(m)
            }
        })?
        .into_inner();
    tracing::info!(
        %coordinator,
        rebuilt = answer.rebuilt.len(),
        bytes_read = answer.bytes_read,
        skipped = answer.skipped.len(),
        "EC indexes rebuilt"
    );
    Ok(())
}
