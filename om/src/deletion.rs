//! Space reclamation: the deletion log and the block deleting service
//! (the roles of SCM's `DeletedBlockLog` and `SCMBlockDeletingService`).
//!
//! Every om change that drops the last reference to block groups (deleting
//! or overwriting a key, aborting a multipart upload, replacing a part or
//! leaving it out of a completion, aborting or abandoning a write, the groups
//! a writer left behind on failover) stages them as one row of
//! `deleted_groups` — (freed unix ms, random id) -> the groups — in the same
//! write transaction as the metadata change, so a crash can neither lose a
//! deletion nor delete a block the metadata still references. A block group
//! is referenced by at most one key, part or open write at a time (copies
//! copy bytes), so "the last reference" is "the reference". The change writes
//! one row however many groups it frees: a key of thousands of groups is
//! deleted by a transaction of a few rows (Ozone's OM moves a deleted key to
//! its deletedTable the same way, and its KeyDeletingService hands the blocks
//! on later). That keeps every om transaction within the metadata store's
//! bounds (`meta_store::MAX_TXN_OPS`), which the move onto the store needs.
//!
//! The service below first moves staged rows into the per-replica deletion
//! log — (datanode uuid, container id, local id) -> (replica index, freed
//! unix ms) — at most [`TXN_BATCH`] replicas per transaction, oldest
//! first; the freeing time travels with them, so the grace period counts from
//! the change that freed the block. Replicas a repair replaced, and orphans,
//! are few per change and go straight into the log.
//!
//! Open writes are persisted too (their sessions' rows hold the groups
//! allocated to them, `session_rows.rs`): they survive an om restart.
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
/// Staged deletions (Ozone OM's deletedTable): (freed unix ms, random id) -> encoded
/// `DeletedGroups`, the groups one change freed.
pub(crate) const DELETED_GROUPS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("deleted_groups");

/// Most rows one background transaction of the om writes (staged groups moved into the
/// deletion log, whose groups move whole, so one of more locations moves alone; part rows
/// of dropped uploads; acknowledged deletions; expired sessions, two rows each; orphans):
/// within the metadata store's [`meta_store::MAX_TXN_OPS`].
pub const TXN_BATCH: usize = 100;

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

/// Stages `groups` for deletion as one `deleted_groups` row (nothing when empty); the
/// block deleting service moves their replicas into the deletion log.
pub(crate) fn stage_groups<'a>(
    txn: &WriteTransaction,
    groups: impl IntoIterator<Item = &'a BlockGroup>,
) -> Result<()> {
    let groups: Vec<pb::BlockGroup> = groups.into_iter().cloned().map(Into::into).collect();
    if groups.is_empty() {
        return Ok(());
    }
    let mut staged = txn.open_table(DELETED_GROUPS)?;
    let now = crate::manager::now_ms();
    let row = pb::DeletedGroups { groups }.encode_to_vec();
    loop {
        // Two changes in one millisecond get different ids.
        let id: u64 = rand::random();
        if staged.get((now, id))?.is_none() {
            staged.insert((now, id), row.as_slice())?;
            return Ok(());
        }
    }
}

/// Replicas of the groups of one staged row (0 for a row that does not decode).
fn staged_replicas(bytes: &[u8]) -> u64 {
    pb::DeletedGroups::decode(bytes).map_or(0, |d| {
        d.groups.iter().map(|g| g.locations.len() as u64).sum()
    })
}

/// Removes the part rows of the oldest dropped uploads in `txn` (`upload_rows.rs`), logging
/// the replicas of parts the upload's completion did not keep, with the drop's time, while
/// the rows written (part rows removed, log entries, dropped rows removed) stay within
/// `budget` (at least one part, so a part of more locations still goes); a dropped upload
/// with no part rows left is forgotten. A dropped row that does not decode is treated as
/// keeping every part (its rows go, nothing is logged: a part it did not keep is left to the
/// orphan sweep, and a kept one is never deleted).
fn expand_dropped_in(txn: &WriteTransaction, budget: usize) -> Result<Expanded> {
    use crate::upload_rows::{DROPPED_UPLOADS, PARTS};
    let mut dropped = txn.open_table(DROPPED_UPLOADS)?;
    let mut parts = txn.open_table(PARTS)?;
    let mut log = txn.open_table(DELETION_LOG)?;
    let (mut replicas, mut writes) = (0usize, 0usize);
    let done = |replicas, writes, more| {
        Ok(Expanded {
            replicas,
            writes,
            more,
        })
    };
    loop {
        let head = dropped
            .first()?
            .map(|(k, v)| (k.value().to_string(), v.value().to_vec()));
        let Some((id, bytes)) = head else {
            return done(replicas, writes, false);
        };
        let drop_row = pb::DroppedUpload::decode(bytes.as_slice()).map_err(|e| {
            tracing::warn!(upload = %id, error = %e, "a dropped upload's row does not decode; removing its parts without deleting their groups");
        });
        loop {
            let next = parts
                .range((id.as_str(), 0)..=(id.as_str(), u32::MAX))?
                .next()
                .transpose()?
                .map(|(k, v)| (k.value().1, v.value().to_vec()));
            let Some((number, value)) = next else {
                if writes > 0 && writes + 1 > budget {
                    return done(replicas, writes, true);
                }
                dropped.remove(id.as_str())?;
                writes += 1;
                break;
            };
            let freed = drop_row
                .as_ref()
                .ok()
                .filter(|d| !d.kept_parts.contains(&number))
                .map(|d| d.dropped_unix_ms);
            let groups = match freed {
                Some(_) => match pb::PartInfo::decode(value.as_slice()) {
                    Ok(p) => p.block_groups,
                    Err(e) => {
                        tracing::warn!(upload = %id, part = number, error = %e, "a dropped part's row does not decode; its replicas are left to the orphan sweep");
                        Vec::new()
                    }
                },
                None => Vec::new(),
            };
            let cost = 1 + groups.iter().map(|g| g.locations.len()).sum::<usize>();
            if writes > 0 && writes + cost > budget {
                return done(replicas, writes, true);
            }
            parts.remove((id.as_str(), number))?;
            for g in &groups {
                replicas += log_stored_group(&mut log, g, freed.unwrap_or_default())?;
            }
            writes += cost;
        }
    }
}

/// Replicas of parts of dropped uploads that are still to be logged.
fn dropped_replicas(read: &redb::ReadTransaction) -> Result<u64> {
    use crate::upload_rows::{DROPPED_UPLOADS, PARTS};
    let parts = read.open_table(PARTS)?;
    let mut n = 0u64;
    for entry in read.open_table(DROPPED_UPLOADS)?.iter()? {
        let (k, v) = entry?;
        let Ok(d) = pb::DroppedUpload::decode(v.value()) else {
            continue;
        };
        let id = k.value();
        for part in parts.range((id, 0)..=(id, u32::MAX))? {
            let (pk, pv) = part?;
            if d.kept_parts.contains(&pk.value().1) {
                continue;
            }
            if let Ok(p) = pb::PartInfo::decode(pv.value()) {
                n += p
                    .block_groups
                    .iter()
                    .map(|g| g.locations.len() as u64)
                    .sum::<u64>();
            }
        }
    }
    Ok(n)
}

/// Logs every replica of stored group `g` for deletion, freed at `freed_ms`; returns how
/// many. Stored groups are written from domain groups, whose locations all name a datanode
/// (one that does not is skipped).
fn log_stored_group(
    log: &mut redb::Table<'_, (&'static str, u64, u64), (u32, u64)>,
    g: &pb::BlockGroup,
    freed_ms: u64,
) -> Result<usize> {
    let mut n = 0;
    for (d, l) in g
        .locations
        .iter()
        .filter_map(|l| Some((l.datanode.as_ref()?, l)))
    {
        log.insert(
            (d.uuid.as_str(), g.container_id, g.local_id),
            (l.replica_index, freed_ms),
        )?;
        n += 1;
    }
    Ok(n)
}

/// What one expansion transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expanded {
    /// Replicas written into the deletion log.
    replicas: usize,
    /// Rows the transaction writes: log entries, and rows removed or rewritten.
    writes: usize,
    /// Whether work remains.
    more: bool,
}

/// Moves the oldest staged groups into the deletion log in `txn`: whole groups, while the
/// rows written (log entries, and each staged row removed or rewritten) stay within
/// `budget` (at least one group, so a group of more locations still moves); a row emptied
/// is removed, a row left with groups is rewritten with them. A row that does not decode is
/// dropped with a warning (its replicas are left to the orphan sweep).
fn expand_in(txn: &WriteTransaction, budget: usize) -> Result<Expanded> {
    let mut staged = txn.open_table(DELETED_GROUPS)?;
    let mut log = txn.open_table(DELETION_LOG)?;
    let (mut replicas, mut writes) = (0usize, 0usize);
    loop {
        let head = staged
            .first()?
            .map(|(k, v)| (k.value(), v.value().to_vec()));
        let Some((key, bytes)) = head else {
            return Ok(Expanded {
                replicas,
                writes,
                more: false,
            });
        };
        // The row is removed or rewritten: one write, and at least one group with it.
        if writes > 0 && writes + 2 > budget {
            return Ok(Expanded {
                replicas,
                writes,
                more: true,
            });
        }
        writes += 1;
        let Ok(row) = pb::DeletedGroups::decode(bytes.as_slice()) else {
            tracing::warn!(
                freed_ms = key.0,
                "a staged deletion row does not decode; dropped (the orphan sweep finds its replicas)"
            );
            staged.remove(key)?;
            continue;
        };
        let mut rest = row.groups.into_iter().peekable();
        let mut took = false;
        while let Some(g) = rest.peek() {
            if (took || replicas > 0) && writes + g.locations.len() > budget {
                break;
            }
            let Some(g) = rest.next() else { break };
            took = true;
            let n = log_stored_group(&mut log, &g, key.0)?;
            replicas += n;
            writes += n;
        }
        let rest: Vec<pb::BlockGroup> = rest.collect();
        if rest.is_empty() {
            staged.remove(key)?;
        } else {
            staged.insert(
                key,
                pb::DeletedGroups { groups: rest }
                    .encode_to_vec()
                    .as_slice(),
            )?;
            return Ok(Expanded {
                replicas,
                writes,
                more: true,
            });
        }
    }
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

/// Ends session `session_id` in `txn`: its row goes, and the groups it allocated that are
/// not in `committed` are staged for deletion: those of `leftovers` (what the om's memory
/// knew) and any other the stored row holds (a group allocated while the session was ending:
/// its allocation's transaction put it in the row, and staging it here leaves nothing to a
/// clean-up that a crash could prevent). A row that does not decode adds nothing.
pub(crate) fn end_session(
    txn: &WriteTransaction,
    session_id: u64,
    leftovers: &[BlockGroup],
    committed: &[BlockGroup],
) -> Result<()> {
    let mut freed = leftovers.to_vec();
    let stored = {
        let t = txn.open_table(crate::session_rows::OPEN_SESSIONS)?;
        t.get(session_id)?
            .map(|v| pb::OpenSessionRecord::decode(v.value()))
    };
    match stored {
        Some(Ok(row)) => {
            for g in row.allocated {
                let id = (g.container_id, g.local_id);
                if freed
                    .iter()
                    .chain(committed)
                    .any(|f| (f.container_id, f.local_id) == id)
                {
                    continue;
                }
                match BlockGroup::try_from(g) {
                    Ok(g) => freed.push(g),
                    Err(e) => {
                        tracing::warn!(session = session_id, error = %e, "a group in an open session's row does not decode; left to the orphan sweep");
                    }
                }
            }
        }
        Some(Err(e)) => {
            tracing::warn!(session = session_id, error = %e, "an open session's row does not decode; only the groups the om knew are reclaimed");
        }
        None => {}
    }
    crate::session_rows::remove(txn, session_id)?;
    stage_groups(txn, &freed)
}

/// Logs the groups of key `bucket/key` if it exists (it is being replaced
/// or deleted in `txn`).
pub(crate) fn stage_key_groups(txn: &WriteTransaction, bucket: &str, key: &str) -> Result<bool> {
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
            stage_groups(txn, &k.block_groups)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

impl OzoneManager {
    /// Replicas waiting for deletion: in the deletion log, in staged rows not yet moved into
    /// it, and in parts of completed or aborted uploads that their completion did not keep
    /// (0 once every datanode has acknowledged every deletion).
    ///
    /// # Errors
    /// Database errors.
    pub fn pending_deletions(&self) -> Result<u64> {
        let read = self.db.begin_read()?;
        let mut n = read.open_table(DELETION_LOG)?.len()?;
        for entry in read.open_table(DELETED_GROUPS)?.iter()? {
            n += staged_replicas(entry?.1.value());
        }
        Ok(n + dropped_replicas(&read)?)
    }

    /// Rows waiting for the block deleting service to expand: staged deletions, and part
    /// rows of completed or aborted uploads.
    ///
    /// # Errors
    /// Database errors.
    pub fn staged_deletions(&self) -> Result<u64> {
        let read = self.db.begin_read()?;
        let mut n = read.open_table(DELETED_GROUPS)?.len()?;
        let parts = read.open_table(crate::upload_rows::PARTS)?;
        for entry in read
            .open_table(crate::upload_rows::DROPPED_UPLOADS)?
            .iter()?
        {
            let (k, _) = entry?;
            let id = k.value();
            n += parts.range((id, 0)..=(id, u32::MAX))?.count() as u64;
        }
        Ok(n)
    }

    /// Moves every staged deletion into the deletion log, and removes the part rows of
    /// completed or aborted uploads (logging the replicas of parts not kept), at most
    /// [`TXN_BATCH`] replicas and rows per transaction (each durable on its own; a crash
    /// between two leaves the rest for the next pass). Returns the replicas logged.
    ///
    /// # Errors
    /// Database errors (what moved before stays moved).
    pub fn expand_staged_deletions(&self) -> Result<u64> {
        let mut total = 0u64;
        for expand in [expand_in, expand_dropped_in] {
            loop {
                let txn = self.db.begin_write()?;
                let step = expand(&txn, TXN_BATCH)?;
                txn.commit()?;
                total += step.replicas as u64;
                if !step.more {
                    break;
                }
            }
        }
        Ok(total)
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

    /// Removes acknowledged entries of `uuid`, [`TXN_BATCH`] per transaction.
    fn ack_deletions(&self, uuid: &str, blocks: &[Pending]) -> Result<()> {
        for chunk in blocks.chunks(TXN_BATCH) {
            let txn = self.db.begin_write()?;
            {
                let mut t = txn.open_table(DELETION_LOG)?;
                for &(c, l, _) in chunk {
                    t.remove((uuid, c, l))?;
                }
            }
            txn.commit()?;
        }
        Ok(())
    }

    /// Drops every entry of `uuid` (a datanode no longer registered), [`TXN_BATCH`] per
    /// transaction.
    fn forget_deletions(&self, uuid: &str) -> Result<()> {
        loop {
            let txn = self.db.begin_write()?;
            let removed = {
                let mut t = txn.open_table(DELETION_LOG)?;
                let batch: Vec<(u64, u64)> = t
                    .range((uuid, 0, 0)..=(uuid, u64::MAX, u64::MAX))?
                    .take(TXN_BATCH)
                    .map(|e| e.map(|(k, _)| (k.value().1, k.value().2)))
                    .collect::<std::result::Result<_, _>>()?;
                for &(c, l) in &batch {
                    t.remove((uuid, c, l))?;
                }
                batch.len()
            };
            txn.commit()?;
            if removed < TXN_BATCH {
                return Ok(());
            }
        }
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
        let batches = tokio::task::spawn_blocking(move || {
            om.expand_staged_deletions()?;
            om.deletion_batches(DELETE_BATCH, due)
        })
        .await??;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proto_crate::Pipeline;

    /// Group `i` with `replicas` locations, on datanodes `0..replicas`.
    fn group(i: u64, replicas: usize) -> BlockGroup {
        BlockGroup {
            container_id: 1,
            local_id: i,
            length: 1,
            pipeline: Pipeline {
                locations: (0..replicas)
                    .map(|r| BlockLocation {
                        datanode: DatanodeDetails {
                            uuid: DatanodeId::from_u128(r as u128 + 1),
                            address: format!("127.0.0.1:{}", 40_000 + r),
                        },
                        replica_index: ReplicaIndex::from_wire(r as u32 + 1),
                    })
                    .collect(),
            },
            token: None,
        }
    }

    fn db() -> (tempfile::TempDir, redb::Database) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = redb::Database::create(dir.path().join("t.redb")).expect("db");
        let txn = db.begin_write().expect("write");
        txn.open_table(DELETION_LOG).expect("log");
        txn.open_table(DELETED_GROUPS).expect("staged");
        crate::upload_rows::create_tables(&txn).expect("upload tables");
        txn.commit().expect("commit");
        (dir, db)
    }

    /// One expansion transaction of the default budget, committed.
    fn expand_once(db: &redb::Database) -> Expanded {
        let txn = db.begin_write().expect("write");
        let step = expand_in(&txn, TXN_BATCH).expect("expand");
        txn.commit().expect("commit");
        step
    }

    fn lens(db: &redb::Database) -> (u64, Vec<usize>) {
        let read = db.begin_read().expect("read");
        let log = read
            .open_table(DELETION_LOG)
            .expect("log")
            .len()
            .expect("len");
        let staged = read
            .open_table(DELETED_GROUPS)
            .expect("staged")
            .iter()
            .expect("iter")
            .map(|e| {
                let (_, v) = e.expect("row");
                pb::DeletedGroups::decode(v.value())
                    .expect("decode")
                    .groups
                    .len()
            })
            .collect();
        (log, staged)
    }

    #[test]
    fn expansion_moves_whole_groups_within_the_budget_and_keeps_the_freeing_time() {
        let (_dir, db) = db();
        let groups: Vec<BlockGroup> = (1..=60).map(|i| group(i, 5)).collect();
        let txn = db.begin_write().expect("write");
        stage_groups(&txn, &groups).expect("stage");
        txn.commit().expect("commit");
        assert_eq!(lens(&db), (0, vec![60]));

        let step = expand_once(&db);
        // The row's rewrite and 19 groups of 5: 96 writes; a 20th would pass 100.
        assert_eq!(
            step,
            Expanded {
                replicas: 95,
                writes: 96,
                more: true
            }
        );
        assert_eq!(lens(&db), (95, vec![41]), "the row kept the rest");
        let mut total = step.replicas;
        loop {
            let step = expand_once(&db);
            assert!(step.writes <= TXN_BATCH, "{step:?}");
            total += step.replicas;
            if !step.more {
                break;
            }
        }
        assert_eq!(total, 300);
        assert_eq!(lens(&db), (300, vec![]));

        let read = db.begin_read().expect("read");
        let staged_at: Vec<u64> = read
            .open_table(DELETION_LOG)
            .expect("log")
            .iter()
            .expect("iter")
            .map(|e| e.expect("row").1.value().1)
            .collect();
        let first = staged_at[0];
        assert!(
            first > 0 && staged_at.iter().all(|&t| t == first),
            "the freeing time travels"
        );
    }

    /// Regression: rows removed counted against no budget, so 100 one-replica keys' rows
    /// made 200 writes in one transaction.
    #[test]
    fn removing_many_small_rows_stays_within_the_budget() {
        let (_dir, db) = db();
        let txn = db.begin_write().expect("write");
        for i in 1..=100 {
            stage_groups(&txn, &[group(i, 1)]).expect("stage");
        }
        txn.commit().expect("commit");
        let step = expand_once(&db);
        assert_eq!(
            step,
            Expanded {
                replicas: 50,
                writes: 100,
                more: true
            }
        );
    }

    #[test]
    fn a_group_larger_than_the_budget_moves_alone_and_bad_rows_are_dropped() {
        let (_dir, db) = db();
        let txn = db.begin_write().expect("write");
        stage_groups(&txn, &[group(1, 14), group(2, 14)]).expect("stage");
        txn.open_table(DELETED_GROUPS)
            .expect("staged")
            .insert((u64::MAX, 1), [0xff_u8, 0xff].as_slice())
            .expect("garbled row, last in order");
        txn.commit().expect("commit");
        let txn = db.begin_write().expect("write");
        let steps: Vec<(usize, bool)> = (0..3)
            .map(|_| {
                let e = expand_in(&txn, 10).expect("expand");
                (e.replicas, e.more)
            })
            .collect();
        txn.commit().expect("commit");
        assert_eq!(steps, [(14, true), (14, true), (0, false)]);
        assert_eq!(lens(&db), (28, vec![]));
    }

    /// Dropped uploads without parts cost one write each (their row's removal), within the
    /// budget.
    #[test]
    fn dropped_uploads_are_forgotten_within_the_budget() {
        let (_dir, db) = db();
        let txn = db.begin_write().expect("write");
        {
            let mut dropped = txn
                .open_table(crate::upload_rows::DROPPED_UPLOADS)
                .expect("dropped");
            for i in 0..150 {
                dropped
                    .insert(
                        format!("u{i:03}").as_str(),
                        pb::DroppedUpload::default().encode_to_vec().as_slice(),
                    )
                    .expect("row");
            }
        }
        txn.commit().expect("commit");
        let txn = db.begin_write().expect("write");
        let first = expand_dropped_in(&txn, TXN_BATCH).expect("expand");
        let second = expand_dropped_in(&txn, TXN_BATCH).expect("expand");
        txn.commit().expect("commit");
        assert_eq!((first.writes, first.more), (100, true));
        assert_eq!((second.writes, second.more), (50, false));
    }

    #[test]
    fn nothing_freed_stages_nothing() {
        let (_dir, db) = db();
        let txn = db.begin_write().expect("write");
        stage_groups(&txn, &[]).expect("stage");
        txn.commit().expect("commit");
        assert_eq!(lens(&db), (0, vec![]));
    }
}
