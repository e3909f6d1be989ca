//! Space reclamation: the deletion log and the block deleting service
//! (the roles of SCM's `DeletedBlockLog` and `SCMBlockDeletingService`).
//!
//! Every om change that drops the last reference to a block group (deleting
//! or overwriting a key, aborting a multipart upload, replacing a part or
//! leaving it out of a completion, aborting or abandoning a write, the groups
//! a writer left behind on failover) records one log entry per replica —
//! (datanode uuid, container id, local id) — in the same write transaction
//! as the metadata change, so a crash can neither lose a deletion nor delete
//! a block the metadata still references. A block group is referenced by at
//! most one key, part or open write at a time (copies copy bytes), so "the
//! last reference" is "the reference".
//!
//! Open writes are persisted too (`open_groups`: a row per allocated group,
//! removed when its session ends; the sessions themselves in
//! `session_rows.rs`): they survive an om restart, and groups of no session
//! are logged at the next start.
//!
//! The service ([`run_block_deleting_service`]) wakes whenever the log grows
//! and at least every interval; entries older than the grace period
//! (`OmConfig::deletion_grace`, so that readers that opened a key before it
//! was overwritten can finish) go to each HEALTHY datanode in batches of
//! [`DELETE_BATCH`] as `DeleteBlocks`, all datanodes at once, naming the
//! datanode's uuid (a different process now at that address refuses), and
//! the entries a datanode acknowledged are removed. A datanode that is down
//! keeps its entries until it answers; deletion is idempotent on the
//! datanode, so a repeat after a lost acknowledgement is harmless. Entries of
//! a uuid no longer registered (another datanode took over its address) wait
//! a week for it to return under its uuid, then are dropped.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use proto_crate::wire::datanode as dn_pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::wire::om as pb;
use proto_crate::{BlockGroup, BlockLocation, DatanodeDetails, DatanodeId, ReplicaIndex};
use redb::{
    ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};

use crate::manager::{KEYS, decode};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Replicas to delete: (datanode uuid, container id, local id) ->
/// (replica index, when it was logged, unix ms).
pub(crate) const DELETION_LOG: TableDefinition<(&str, u64, u64), (u32, u64)> =
    TableDefinition::new("deletion_log");
/// Groups allocated to open sessions: (session id, container id, local id) ->
/// encoded `BlockGroup`.
pub(crate) const OPEN_GROUPS: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("open_groups");

/// A block to delete on one datanode: (container id, local id, replica index).
type Pending = (u64, u64, u32);

/// One datanode's due deletions.
#[derive(Debug)]
struct Batch {
    uuid: String,
    /// Entries past the grace period, at most a batch.
    blocks: Vec<Pending>,
    /// When its oldest entry (due or not) was logged, unix ms.
    oldest_ms: u64,
}

/// Most blocks sent to one datanode in one `DeleteBlocks` call.
pub const DELETE_BATCH: usize = 1000;

/// Deadline of one `DeleteBlocks` call.
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline of connecting to a datanode.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Entries of a datanode uuid that is no longer registered are kept this
/// long (it may come back under its uuid at another address), then dropped:
/// 7 days, ms.
const FORGET_UNREGISTERED_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Logs every replica of `groups` for deletion.
pub(crate) fn log_groups<'a>(
    txn: &WriteTransaction,
    groups: impl IntoIterator<Item = &'a BlockGroup>,
) -> Result<()> {
    for g in groups {
        log_locations(txn, g.container_id, g.local_id, &g.pipeline.locations)?;
    }
    Ok(())
}

/// Whether a deletion of block `block` (container id, local id) on datanode `uuid` is pending.
pub(crate) fn is_logged(txn: &WriteTransaction, uuid: &str, block: (u64, u64)) -> Result<bool> {
    Ok(txn
        .open_table(DELETION_LOG)?
        .get((uuid, block.0, block.1))?
        .is_some())
}

/// [`is_logged`] in a read transaction.
pub(crate) fn is_logged_read(
    read: &redb::ReadTransaction,
    uuid: &str,
    block: (u64, u64),
) -> Result<bool> {
    Ok(read
        .open_table(DELETION_LOG)?
        .get((uuid, block.0, block.1))?
        .is_some())
}

/// Logs the replicas of block `(container_id, local_id)` at `locations` for deletion (a
/// location replaced by repair: its datanode may come back holding a stale copy).
pub(crate) fn log_locations<'a>(
    txn: &WriteTransaction,
    container_id: u64,
    local_id: u64,
    locations: impl IntoIterator<Item = &'a BlockLocation>,
) -> Result<()> {
    let mut log = txn.open_table(DELETION_LOG)?;
    let now = crate::manager::now_ms();
    for l in locations {
        log.insert(
            (l.datanode.uuid.as_str(), container_id, local_id),
            (ReplicaIndex::to_wire(l.replica_index), now),
        )?;
    }
    Ok(())
}

/// Removes the open-group row of `g` alone (the rest of the session's rows
/// belong to whoever ends the session).
pub(crate) fn forget_open_group(
    txn: &WriteTransaction,
    session_id: u64,
    g: &BlockGroup,
) -> Result<()> {
    txn.open_table(OPEN_GROUPS)?
        .remove((session_id, g.container_id, g.local_id))?;
    Ok(())
}

/// Records group `g` as allocated to session `session_id`.
pub(crate) fn record_open_group(
    txn: &WriteTransaction,
    session_id: u64,
    g: &BlockGroup,
) -> Result<()> {
    txn.open_table(OPEN_GROUPS)?.insert(
        (session_id, g.container_id, g.local_id),
        pb::BlockGroup::from(g.clone()).encode_to_vec().as_slice(),
    )?;
    Ok(())
}

/// Ends session `session_id` in `txn`: its row and open-group rows go, and
/// the groups in `leftovers` (allocated but not committed) are logged.
pub(crate) fn end_session(
    txn: &WriteTransaction,
    session_id: u64,
    leftovers: &[BlockGroup],
) -> Result<()> {
    crate::session_rows::remove(txn, session_id)?;
    txn.open_table(OPEN_GROUPS)?.retain_in(
        (session_id, 0, 0)..=(session_id, u64::MAX, u64::MAX),
        |_, _| false,
    )?;
    log_groups(txn, leftovers)
}

/// Logs the groups of key `bucket/key` if it exists (it is being replaced
/// or deleted in `txn`).
pub(crate) fn log_key_groups(txn: &WriteTransaction, bucket: &str, key: &str) -> Result<bool> {
    let old = {
        let t = txn.open_table(KEYS)?;
        let v = t.get((bucket, key))?;
        match v {
            Some(v) => Some(decode::<pb::KeyInfo, proto_crate::KeyInfo>(
                v.value(),
                "key",
            )?),
            None => None,
        }
    };
    match old {
        Some(k) => {
            log_groups(txn, &k.block_groups)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

impl OzoneManager {
    /// Replicas waiting in the deletion log (0 once every datanode has
    /// acknowledged every deletion).
    ///
    /// # Errors
    /// Database errors.
    pub fn pending_deletions(&self) -> Result<u64> {
        let read = self.db.begin_read()?;
        Ok(read.open_table(DELETION_LOG)?.len()?)
    }

    /// A receiver of [`pending_deletions`](Self::pending_deletions),
    /// republished after every change of the log (to wait on without polling).
    #[must_use]
    pub fn watch_pending_deletions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.deletions_pending.subscribe()
    }

    /// Publishes the log's size (and the number of open sessions: a session
    /// ends with the transaction that logs its groups, so a watcher that sees
    /// the session gone also sees its deletions logged) and wakes the
    /// deleting service; called after every commit that may have added
    /// entries.
    pub(crate) fn deletions_changed(&self) {
        {
            let st = self.state();
            self.publish_sessions(&st);
        }
        match self.pending_deletions() {
            Ok(n) => {
                self.deletions_pending.send_replace(n);
            }
            Err(e) => tracing::warn!(error = %e, "reading the deletion log size"),
        }
        self.deletion_wakeup.notify_one();
    }

    /// Logs the replicas of block `block` (container id, local id) at `locations` for
    /// deletion in a transaction of its own: the targets of a repair that did not commit may
    /// hold a partial or unreferenced copy. A location whose datanode group `group` of
    /// `owner` (a key or an upload's part) now references (someone else registered a copy there meanwhile) is left alone: a
    /// deletion is by block, whatever the index, and would take that copy too.
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn log_orphans(
        &self,
        owner: &crate::group_owner::GroupOwner,
        group: usize,
        block: (u64, u64),
        locations: &[BlockLocation],
    ) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let holders: Vec<DatanodeId> = match owner.group(&txn, group) {
                Ok((_, g)) if (g.container_id, g.local_id) == block => g
                    .pipeline
                    .locations
                    .iter()
                    .map(|l| l.datanode.uuid.clone())
                    .collect(),
                Ok(_)
                | Err(
                    OmError::KeyNotFound { .. }
                    | OmError::NoSuchUpload(_)
                    | OmError::InvalidArgument(_),
                ) => Vec::new(),
                Err(e) => return Err(e),
            };
            let orphans = locations
                .iter()
                .filter(|l| !holders.contains(&l.datanode.uuid));
            log_locations(&txn, block.0, block.1, orphans)?;
        }
        txn.commit()?;
        self.deletions_changed();
        Ok(())
    }

    /// Datanode uuids with entries logged before `before_ms` (unix ms), and
    /// up to `limit` such entries of each: (container id, local id, replica
    /// index). Also returns, per uuid, the time its oldest entry was logged.
    fn deletion_batches(&self, limit: usize, before_ms: u64) -> Result<Vec<Batch>> {
        let read = self.db.begin_read()?;
        let t = read.open_table(DELETION_LOG)?;
        let mut out: Vec<Batch> = Vec::new();
        let mut iter = t.iter()?;
        while let Some(entry) = iter.next() {
            let (k, v) = entry?;
            let (uuid, c, l) = k.value();
            let (r, logged) = v.value();
            let fresh = out.last().is_none_or(|b| b.uuid != uuid);
            if fresh {
                out.push(Batch {
                    uuid: uuid.to_string(),
                    blocks: Vec::new(),
                    oldest_ms: logged,
                });
            }
            let Some(b) = out.last_mut() else { break };
            b.oldest_ms = b.oldest_ms.min(logged);
            if logged > before_ms {
                continue;
            }
            if b.blocks.len() < limit {
                b.blocks.push((c, l, r));
            } else {
                // Skip the rest of this datanode's entries.
                let next = format!("{uuid}\u{0}");
                drop(iter);
                iter = t.range((next.as_str(), 0, 0)..)?;
            }
        }
        Ok(out)
    }

    /// Removes acknowledged entries of `uuid`.
    fn ack_deletions(&self, uuid: &str, blocks: &[Pending]) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(DELETION_LOG)?;
            for &(c, l, _) in blocks {
                t.remove((uuid, c, l))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Drops every entry of `uuid` (a datanode no longer registered).
    fn forget_deletions(&self, uuid: &str) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(DELETION_LOG)?
            .retain_in((uuid, 0, 0)..=(uuid, u64::MAX, u64::MAX), |_, _| false)?;
        txn.commit()?;
        Ok(())
    }

    /// One pass of the service: every HEALTHY datanode with entries past
    /// the grace period gets one batch, all datanodes at once. Returns the
    /// replicas acknowledged.
    ///
    /// # Errors
    /// Database errors (a datanode that cannot be reached is not an error:
    /// its entries wait for the next pass).
    pub async fn delete_blocks_once(self: &Arc<Self>) -> Result<u64> {
        let om = Arc::clone(self);
        let grace = u64::try_from(self.config.deletion_grace.as_millis()).unwrap_or(u64::MAX);
        let now = crate::manager::now_ms();
        let due = now.saturating_sub(grace);
        let batches =
            tokio::task::spawn_blocking(move || om.deletion_batches(DELETE_BATCH, due)).await??;
        let healthy: std::collections::HashSet<DatanodeId> = self
            .datanode_statuses()
            .into_iter()
            .filter(|s| s.state == crate::NodeState::Healthy)
            .map(|s| s.details.uuid)
            .collect();
        // With security on, DeleteBlocks carries the om's service token.
        let token = self.service_token()?;
        let mut sends = tokio::task::JoinSet::new();
        for b in batches {
            let Some(dn) = self.datanode(&b.uuid) else {
                if now.saturating_sub(b.oldest_ms) > FORGET_UNREGISTERED_MS {
                    tracing::warn!(uuid = %b.uuid, "dropping week-old deletions of a datanode no longer registered");
                    let om = Arc::clone(self);
                    spawn_db(move || om.forget_deletions(&b.uuid)).await?;
                }
                continue;
            };
            if b.blocks.is_empty() || !healthy.contains(dn.uuid.as_str()) {
                continue;
            }
            let token = token.clone();
            let tls = self.config().tls.clone();
            sends.spawn(async move {
                let r = send_delete(&dn, &b.blocks, token.as_ref(), tls.as_ref()).await;
                (dn, b.blocks, r)
            });
        }
        let mut acked = 0u64;
        while let Some(joined) = sends.join_next().await {
            let Ok((dn, blocks, r)) = joined else {
                continue;
            };
            match r {
                Ok(()) => {
                    acked += blocks.len() as u64;
                    let om = Arc::clone(self);
                    spawn_db(move || om.ack_deletions(&dn.uuid, &blocks)).await?;
                }
                Err(e) => {
                    tracing::debug!(datanode = %dn, error = %e, "DeleteBlocks failed; will retry");
                }
            }
        }
        if acked > 0 {
            self.deletions_changed();
        }
        Ok(acked)
    }
}

async fn spawn_db(f: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    tokio::task::spawn_blocking(f).await?
}

async fn send_delete(
    dn: &DatanodeDetails,
    blocks: &[Pending],
    token: Option<&proto_crate::block_token::BlockToken>,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let call = async {
        let channel = proto_crate::tls::endpoint(&dn.address, tls)?
            .connect_timeout(CONNECT_TIMEOUT)
            .connect()
            .await?;
        let mut c = DatanodeServiceClient::new(channel);
        c.delete_blocks(proto_crate::block_token::request(
            dn_pb::DeleteBlocksRequest {
                datanode_uuid: dn.uuid.to_string(),
                block_ids: blocks
                    .iter()
                    .map(|&(container_id, local_id, replica_index)| dn_pb::BlockId {
                        container_id,
                        local_id,
                        replica_index,
                    })
                    .collect(),
            },
            token,
        ))
        .await?;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    };
    tokio::time::timeout(DELETE_TIMEOUT, call)
        .await
        .map_err(|_| "DeleteBlocks timed out")?
}

/// Runs the block deleting service until `shutdown` resolves: a pass after
/// every change of the log and at least every `interval` (retries).
pub async fn run_block_deleting_service(
    om: Arc<OzoneManager>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let wakeup = Arc::clone(&om.deletion_wakeup);
    loop {
        if let Err(e) = om.delete_blocks_once().await {
            tracing::warn!(error = %e, "block deleting service pass failed");
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = wakeup.notified() => {}
            () = tokio::time::sleep(interval) => {}
        }
    }
}
