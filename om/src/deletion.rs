//! Space reclamation: the deletion log and the block deleting service
//! (the roles of SCM's `DeletedBlockLog` and `SCMBlockDeletingService`).
//!
//! Every om change that drops the last reference to block groups (deleting
//! or overwriting a key, aborting a multipart upload, replacing a part or
//! leaving it out of a completion, aborting or abandoning a write, the groups
//! a writer left behind on failover) stages them as one row of
//! `deleted_groups` — (freed unix ms, random id) -> the groups — in the same
//! transaction as the metadata change, so a crash can neither lose a
//! deletion nor delete a block the metadata still references. A block group
//! is referenced by at most one key, part or open write at a time (copies
//! copy bytes), so "the last reference" is "the reference". The change writes
//! one row however many groups it frees: a key of thousands of groups is
//! deleted by a transaction of a few rows (Ozone's OM moves a deleted key to
//! its deletedTable the same way, and its KeyDeletingService hands the blocks
//! on later). That keeps every om transaction within the metadata store's
//! bounds (`meta_store::MAX_TXN_OPS`).
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

use meta_store::codec::Raw;
use meta_store::{MetaStore, Transaction, transact};
use prost::Message;
use proto_crate::wire::datanode as dn_pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::wire::om as pb;
use proto_crate::{BlockGroup, BlockLocation, DatanodeDetails, DatanodeId, ReplicaIndex};

use crate::tables::{DELETED_GROUPS, DELETION_LOG, DROPPED_UPLOADS, PARTS, each_row};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Most rows one background transaction of the om writes (staged groups moved into the
/// deletion log, whose groups move whole, so one of more locations moves alone; part rows
/// of dropped uploads; acknowledged deletions; expired sessions, two rows each; orphans):
/// within the metadata store's [`meta_store::MAX_TXN_OPS`].
pub const TXN_BATCH: usize = 100;

/// Most staged rows one expansion transaction reads (each a guard of the transaction, which
/// the store bounds with its writes: [`meta_store::MAX_TXN_OPS`]).
const STAGED_ROWS_READ: usize = 16;

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

/// Stages `groups` for deletion as one `deleted_groups` row in `tx` (nothing when empty);
/// the block deleting service moves their replicas into the deletion log.
///
/// # Errors
/// Store errors.
pub(crate) async fn stage_groups<'a>(
    tx: &Transaction,
    groups: impl IntoIterator<Item = &'a BlockGroup>,
) -> Result<()> {
    let groups: Vec<pb::BlockGroup> = groups.into_iter().cloned().map(Into::into).collect();
    if groups.is_empty() {
        return Ok(());
    }
    let now = crate::manager::now_ms();
    let row = Raw(pb::DeletedGroups { groups }.encode_to_vec());
    loop {
        // Two changes in one millisecond get different ids; the row's absence is guarded
        // without a read (a taken id makes the commit conflict, and the next run draws
        // another).
        let key = (now, rand::random::<u64>());
        if DELETED_GROUPS.assume_absent_in(tx, &key)? {
            DELETED_GROUPS.put_in(tx, &key, &row);
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

/// Logs every replica of stored group `g` for deletion in `tx`, freed at `freed_ms`; returns
/// how many. Stored groups are written from domain groups, whose locations all name a
/// datanode (one that does not is skipped).
fn log_stored_group(tx: &Transaction, g: &pb::BlockGroup, freed_ms: u64) -> usize {
    let mut n = 0;
    for (d, l) in g
        .locations
        .iter()
        .filter_map(|l| Some((l.datanode.as_ref()?, l)))
    {
        DELETION_LOG.put_in(
            tx,
            &(d.uuid.clone(), g.container_id, g.local_id),
            &(l.replica_index, freed_ms),
        );
        n += 1;
    }
    n
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

/// Removes the part rows of the oldest dropped uploads in one transaction (`upload_rows.rs`),
/// logging the replicas of parts the upload's completion did not keep, with the drop's time,
/// while the rows written (part rows removed, log entries, dropped rows removed) stay within
/// `budget` (at least one part, so a part of more locations still goes); a dropped upload
/// with no part rows left is forgotten. A dropped row that does not decode is treated as
/// keeping every part (its rows go, nothing is logged: a part it did not keep is left to the
/// orphan sweep, and a kept one is never deleted).
///
/// Its reads are plain reads, not guards: a dropped upload's rows and its parts no longer
/// change (a part commit or repair reads the upload's header in its transaction, and the
/// drop removed it), and what this writes is idempotent (log entries of the same values,
/// removals), so a transaction of any number of parts stays within the store's bounds.
async fn expand_dropped(store: &MetaStore, budget: usize) -> Result<Expanded> {
    let dropped = DROPPED_UPLOADS.scan(store, &(), None, budget).await?;
    let committed = transact(store, |tx| {
        let dropped = &dropped;
        Box::pin(async move {
            let (mut replicas, mut writes) = (0usize, 0usize);
            let done = |replicas, writes, more| {
                Ok::<_, OmError>(Expanded {
                    replicas,
                    writes,
                    more,
                })
            };
            for row in &dropped.rows {
                let id = &row.key;
                let drop_row = pb::DroppedUpload::decode(row.value.0.as_slice()).map_err(|e| {
                    tracing::warn!(upload = %id, error = %e, "a dropped upload's row does not decode; removing its parts without deleting their groups");
                });
                let mut after: Option<(String, u32)> = None;
                loop {
                    let parts = PARTS
                        .scan(tx.store(), &(id.clone(),), after.as_ref(), budget)
                        .await?;
                    for part in &parts.rows {
                        let number = part.key.1;
                        let freed = drop_row
                            .as_ref()
                            .ok()
                            .filter(|d| !d.kept_parts.contains(&number))
                            .map(|d| d.dropped_unix_ms);
                        let stored = match freed {
                            Some(_) => match pb::PartInfo::decode(part.value.0.as_slice()) {
                                Ok(p) => Some(p),
                                Err(e) => {
                                    tracing::warn!(upload = %id, part = number, error = %e, "a dropped part's row does not decode; its replicas are left to the orphan sweep");
                                    None
                                }
                            },
                            None => None,
                        };
                        let groups = stored
                            .as_ref()
                            .map(|p| p.block_groups.clone())
                            .unwrap_or_default();
                        let cost = 1 + groups.iter().map(|g| g.locations.len()).sum::<usize>();
                        if writes + cost > budget {
                            if writes > 0 {
                                return done(replicas, writes, true);
                            }
                            // A part larger than the budget on its own: whole groups within
                            // it go, and the row is rewritten with the rest (it no longer
                            // changes otherwise, so the next transaction goes on from it).
                            let mut rest = groups.into_iter().peekable();
                            let mut took = false;
                            while let Some(g) = rest.peek() {
                                if took && writes + 1 + g.locations.len() > budget {
                                    break;
                                }
                                let Some(g) = rest.next() else { break };
                                took = true;
                                let n = log_stored_group(&tx, &g, freed.unwrap_or_default());
                                replicas += n;
                                writes += n;
                            }
                            let mut left = stored.unwrap_or_default();
                            left.block_groups = rest.collect();
                            PARTS.put_in(&tx, &part.key, &Raw(left.encode_to_vec()));
                            return done(replicas, writes + 1, true);
                        }
                        PARTS.delete_in(&tx, &part.key);
                        for g in &groups {
                            replicas += log_stored_group(&tx, g, freed.unwrap_or_default());
                        }
                        writes += cost;
                        after = Some(part.key.clone());
                    }
                    if !parts.more {
                        break;
                    }
                }
                if writes > 0 && writes + 1 > budget {
                    return done(replicas, writes, true);
                }
                DROPPED_UPLOADS.delete_in(&tx, id);
                writes += 1;
            }
            done(replicas, writes, dropped.more)
        })
    })
    .await?;
    Ok(committed.value)
}

/// Moves the oldest staged groups into the deletion log in one transaction: whole groups,
/// while the rows written (log entries, and each staged row removed or rewritten) stay within
/// `budget` (at least one group, so a group of more locations still moves); a row emptied
/// is removed, a row left with groups is rewritten with them. A row that does not decode is
/// dropped with a warning (its replicas are left to the orphan sweep).
async fn expand(store: &MetaStore, budget: usize) -> Result<Expanded> {
    let committed = transact(store, |tx| {
        Box::pin(async move {
            let staged = DELETED_GROUPS
                .scan_in(&tx, &(), None, STAGED_ROWS_READ)
                .await?;
            let (mut replicas, mut writes) = (0usize, 0usize);
            for (key, bytes) in &staged.rows {
                // The row is removed or rewritten: one write, and at least one group with it.
                if writes > 0 && writes + 2 > budget {
                    return Ok::<_, OmError>(Expanded {
                        replicas,
                        writes,
                        more: true,
                    });
                }
                writes += 1;
                let Ok(row) = pb::DeletedGroups::decode(bytes.0.as_slice()) else {
                    tracing::warn!(
                        freed_ms = key.0,
                        "a staged deletion row does not decode; dropped (the orphan sweep finds its replicas)"
                    );
                    DELETED_GROUPS.delete_in(&tx, key);
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
                    let n = log_stored_group(&tx, &g, key.0);
                    replicas += n;
                    writes += n;
                }
                let rest: Vec<pb::BlockGroup> = rest.collect();
                if rest.is_empty() {
                    DELETED_GROUPS.delete_in(&tx, key);
                } else {
                    DELETED_GROUPS.put_in(&tx, key, &Raw(pb::DeletedGroups { groups: rest }.encode_to_vec()));
                    return Ok(Expanded {
                        replicas,
                        writes,
                        more: true,
                    });
                }
            }
            Ok(Expanded {
                replicas,
                writes,
                more: staged.more,
            })
        })
    })
    .await?;
    Ok(committed.value)
}

fn log_key(uuid: &str, block: (u64, u64)) -> (String, u64, u64) {
    (uuid.to_string(), block.0, block.1)
}

/// Whether a deletion of block `block` (container id, local id) on datanode `uuid` is
/// pending, as `tx` sees it.
pub(crate) async fn is_logged_in(tx: &Transaction, uuid: &str, block: (u64, u64)) -> Result<bool> {
    Ok(DELETION_LOG
        .get_in(tx, &log_key(uuid, block))
        .await?
        .is_some())
}

/// [`is_logged_in`], now.
pub(crate) async fn is_logged(store: &MetaStore, uuid: &str, block: (u64, u64)) -> Result<bool> {
    Ok(DELETION_LOG
        .get(store, &log_key(uuid, block))
        .await?
        .is_some())
}

/// Logs the replicas of block `(container_id, local_id)` at `locations` for deletion in `tx`
/// (a location replaced by repair: its datanode may come back holding a stale copy).
pub(crate) fn log_locations_in<'a>(
    tx: &Transaction,
    container_id: u64,
    local_id: u64,
    locations: impl IntoIterator<Item = &'a BlockLocation>,
) {
    let now = crate::manager::now_ms();
    for l in locations {
        DELETION_LOG.put_in(
            tx,
            &(l.datanode.uuid.to_string(), container_id, local_id),
            &(ReplicaIndex::to_wire(l.replica_index), now),
        );
    }
}

/// Ends session `session_id` in `tx`: its row goes, and the groups it allocated that are
/// not in `committed` are staged for deletion: those of `leftovers` (what the caller's read
/// of the session held; nothing when the row is gone already, as whoever removed it staged them) and any
/// other the stored row holds (a group allocated while the session was ending:
/// its allocation's transaction put it in the row, and staging it here leaves nothing to a
/// clean-up that a crash could prevent). A row that does not decode adds nothing. Returns
/// whether the session's row was there: a commit of a session whose row is gone (another om
/// expired it, or it ended meanwhile) must fail, since its groups may be staged already.
pub(crate) async fn end_session(
    tx: &Transaction,
    session_id: u64,
    leftovers: &[BlockGroup],
    committed: &[BlockGroup],
) -> Result<bool> {
    let mut freed = leftovers.to_vec();
    let present = match crate::session_rows::get_in(tx, session_id).await {
        Ok(Some(row)) => {
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
            true
        }
        // Whoever removed the row staged what it held: every group the session allocated
        // (each allocation writes the row).
        Ok(None) => {
            freed.clear();
            false
        }
        Err(OmError::CorruptRecord { source, .. }) => {
            tracing::warn!(session = session_id, error = %source, "an open session's row does not decode; only the groups the om knew are reclaimed");
            true
        }
        Err(e) => return Err(e),
    };
    crate::session_rows::remove_in(tx, session_id).await?;
    stage_groups(tx, &freed).await?;
    Ok(present)
}

/// Stages the groups of key `bucket/key` if it exists (it is being replaced or deleted in
/// `tx`); returns whether it did.
pub(crate) async fn stage_key_groups(tx: &Transaction, bucket: &str, key: &str) -> Result<bool> {
    match crate::keys::key_in(tx, bucket, key).await? {
        Some(k) => {
            stage_groups(tx, &k.block_groups).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

impl OzoneManager {
    /// Replicas waiting for deletion: in the deletion log, in staged rows not yet moved into
    /// it, and in parts of completed or aborted uploads that their completion did not keep
    /// (0 once every datanode has acknowledged every deletion), read at one snapshot.
    ///
    /// # Errors
    /// Store errors.
    pub async fn pending_deletions(&self) -> Result<u64> {
        let snapshot = self.store.snapshot().await?;
        let mut n = 0u64;
        each_row(&snapshot, DELETION_LOG, &(), |_, _| {
            n += 1;
            Ok(())
        })
        .await?;
        each_row(&snapshot, DELETED_GROUPS, &(), |_, v| {
            n += staged_replicas(&v.0);
            Ok(())
        })
        .await?;
        let mut dropped = Vec::new();
        each_row(&snapshot, DROPPED_UPLOADS, &(), |id, v| {
            if let Ok(d) = pb::DroppedUpload::decode(v.0.as_slice()) {
                dropped.push((id, d));
            }
            Ok(())
        })
        .await?;
        for (id, d) in dropped {
            each_row(&snapshot, PARTS, &(id,), |(_, number), v| {
                if !d.kept_parts.contains(&number)
                    && let Ok(p) = pb::PartInfo::decode(v.0.as_slice())
                {
                    n += p
                        .block_groups
                        .iter()
                        .map(|g| g.locations.len() as u64)
                        .sum::<u64>();
                }
                Ok(())
            })
            .await?;
        }
        Ok(n)
    }

    /// Rows waiting for the block deleting service to expand: staged deletions, and part
    /// rows of completed or aborted uploads.
    ///
    /// # Errors
    /// Store errors.
    pub async fn staged_deletions(&self) -> Result<u64> {
        let mut n = DELETED_GROUPS.count(&self.store, &()).await?;
        let mut after = None;
        loop {
            let rows = DROPPED_UPLOADS
                .scan(&self.store, &(), after.as_ref(), crate::MAX_LIST_PAGE)
                .await?;
            for row in &rows.rows {
                n += PARTS.count(&self.store, &(row.key.clone(),)).await?;
            }
            match rows.rows.into_iter().last() {
                Some(last) if rows.more => after = Some(last.key),
                _ => return Ok(n),
            }
        }
    }

    /// Moves every staged deletion into the deletion log, and removes the part rows of
    /// completed or aborted uploads (logging the replicas of parts not kept), at most
    /// [`TXN_BATCH`] replicas and rows per transaction (each durable on its own; a crash
    /// between two leaves the rest for the next pass). Returns the replicas logged.
    ///
    /// # Errors
    /// Store errors (what moved before stays moved).
    pub async fn expand_staged_deletions(&self) -> Result<u64> {
        let mut total = 0u64;
        loop {
            let step = expand(&self.store, TXN_BATCH).await?;
            total += step.replicas as u64;
            if !step.more {
                break;
            }
        }
        loop {
            let step = expand_dropped(&self.store, TXN_BATCH).await?;
            total += step.replicas as u64;
            if !step.more {
                break;
            }
        }
        Ok(total)
    }

    /// A receiver of [`pending_deletions`](Self::pending_deletions), published at open and
    /// by every pass of the block deleting service, which every freeing change wakes (to wait
    /// on without polling; an om without the service publishes only at open).
    #[must_use]
    pub fn watch_pending_deletions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.deletions_pending.subscribe()
    }

    /// Tells session waiters of a change (a session ends with the transaction that stages
    /// its groups, so a waiter that sees the session gone finds its deletions staged) and
    /// wakes the deleting service, which publishes
    /// [`pending_deletions`](Self::pending_deletions) on its pass: called after every commit
    /// that may have freed groups. The count is not read here: it reads the whole backlog,
    /// which a commit should not pay for (a datanode down for days keeps its entries).
    pub(crate) fn deletions_changed(&self) {
        self.sessions_changed();
        self.deletion_wakeup.notify_one();
    }

    /// Waits until `done` holds for [`pending_deletions`](Self::pending_deletions), read
    /// exactly now and again after every pass of the block deleting service (what
    /// [`watch_pending_deletions`](Self::watch_pending_deletions) publishes may be older than
    /// the last freeing change). Returns the count that satisfied it.
    ///
    /// # Errors
    /// Store errors.
    pub async fn wait_pending_deletions(&self, mut done: impl FnMut(u64) -> bool) -> Result<u64> {
        let mut passes = self.deletions_pending.subscribe();
        loop {
            passes.borrow_and_update();
            let n = self.pending_deletions().await?;
            if done(n) {
                return Ok(n);
            }
            // The sender lives as long as `self`.
            let _ = passes.changed().await;
        }
    }

    /// Reads [`pending_deletions`](Self::pending_deletions) and publishes it to
    /// [`watch_pending_deletions`](Self::watch_pending_deletions).
    pub(crate) async fn publish_pending_deletions(&self) {
        match self.pending_deletions().await {
            Ok(n) => {
                self.deletions_pending.send_replace(n);
            }
            Err(e) => tracing::warn!(error = %e, "reading the deletion log size"),
        }
    }

    /// Logs the replicas of block `block` (container id, local id) at `locations` for
    /// deletion in a transaction of its own: the targets of a repair that did not commit may
    /// hold a partial or unreferenced copy. A location whose datanode group `group` of
    /// `owner` (a key or an upload's part) now references (someone else registered a copy there meanwhile) is left alone: a
    /// deletion is by block, whatever the index, and would take that copy too.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn log_orphans(
        &self,
        owner: &crate::group_owner::GroupOwner,
        group: usize,
        block: (u64, u64),
        locations: &[BlockLocation],
    ) -> Result<()> {
        transact(&self.store, |tx| {
            Box::pin(async move {
                let holders: Vec<DatanodeId> = match owner.group(&tx, group).await {
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
                log_locations_in(&tx, block.0, block.1, orphans);
                Ok(())
            })
        })
        .await?;
        self.deletions_changed();
        Ok(())
    }

    /// Datanode uuids with entries logged before `before_ms` (unix ms), and
    /// up to `limit` such entries of each: (container id, local id, replica
    /// index). Also returns, per uuid, the time its oldest entry was logged.
    async fn deletion_batches(&self, limit: usize, before_ms: u64) -> Result<Vec<Batch>> {
        let mut out: Vec<Batch> = Vec::new();
        let mut after: Option<(String, u64, u64)> = None;
        loop {
            let rows = DELETION_LOG
                .scan(&self.store, &(), after.as_ref(), crate::MAX_LIST_PAGE)
                .await?;
            let mut skip_to = None;
            for row in &rows.rows {
                let (uuid, c, l) = &row.key;
                let (r, logged) = row.value;
                let fresh = out.last().is_none_or(|b| b.uuid != *uuid);
                if fresh {
                    out.push(Batch {
                        uuid: uuid.clone(),
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
                    b.blocks.push((*c, *l, r));
                } else {
                    // Skip the rest of this datanode's entries.
                    skip_to = Some((uuid.clone(), u64::MAX, u64::MAX));
                    break;
                }
            }
            match (skip_to, rows.rows.into_iter().last()) {
                (Some(skip), _) => after = Some(skip),
                (None, Some(last)) if rows.more => after = Some(last.key),
                _ => return Ok(out),
            }
        }
    }

    /// Removes acknowledged entries of `uuid`, [`TXN_BATCH`] per transaction.
    async fn ack_deletions(&self, uuid: &str, blocks: &[Pending]) -> Result<()> {
        for chunk in blocks.chunks(TXN_BATCH) {
            transact(&self.store, |tx| {
                Box::pin(async move {
                    for &(c, l, _) in chunk {
                        DELETION_LOG.delete_in(&tx, &log_key(uuid, (c, l)));
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await?;
        }
        Ok(())
    }

    /// Drops every entry of `uuid` (a datanode no longer registered), [`TXN_BATCH`] per
    /// transaction.
    async fn forget_deletions(&self, uuid: &str) -> Result<()> {
        loop {
            let rows = DELETION_LOG
                .scan(&self.store, &(uuid.to_string(),), None, TXN_BATCH)
                .await?;
            if rows.rows.is_empty() {
                return Ok(());
            }
            transact(&self.store, |tx| {
                let rows = &rows;
                Box::pin(async move {
                    for row in &rows.rows {
                        DELETION_LOG.delete_in(&tx, &row.key);
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await?;
            if !rows.more {
                return Ok(());
            }
        }
    }

    /// One pass of the service: every HEALTHY datanode with entries past
    /// the grace period gets one batch, all datanodes at once. Returns the
    /// replicas acknowledged.
    ///
    /// # Errors
    /// Store errors (a datanode that cannot be reached is not an error:
    /// its entries wait for the next pass).
    pub async fn delete_blocks_once(self: &Arc<Self>) -> Result<u64> {
        let grace = u64::try_from(self.config.deletion_grace.as_millis()).unwrap_or(u64::MAX);
        let now = crate::manager::now_ms();
        let due = now.saturating_sub(grace);
        self.expand_staged_deletions().await?;
        self.publish_pending_deletions().await;
        let batches = self.deletion_batches(DELETE_BATCH, due).await?;
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
                    self.forget_deletions(&b.uuid).await?;
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
                    self.ack_deletions(dn.uuid.as_str(), &blocks).await?;
                }
                Err(e) => {
                    tracing::debug!(datanode = %dn, error = %e, "DeleteBlocks failed; will retry");
                }
            }
        }
        if acked > 0 {
            self.publish_pending_deletions().await;
        }
        Ok(acked)
    }
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

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().expect("temp dir");
        let redb = meta_store::RedbStore::open(&dir.path().join("t.redb")).expect("store");
        (dir, MetaStore::Redb(redb))
    }

    /// Stages each of `rows` as a row of its own, in one transaction.
    async fn stage(store: &MetaStore, rows: &[Vec<BlockGroup>]) {
        transact(store, |tx| {
            Box::pin(async move {
                for groups in rows {
                    stage_groups(&tx, groups).await?;
                }
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("stage");
    }

    /// One expansion transaction of the default budget, committed.
    async fn expand_once(store: &MetaStore) -> Expanded {
        expand(store, TXN_BATCH).await.expect("expand")
    }

    /// Entries in the log, and the groups of each staged row.
    async fn lens(store: &MetaStore) -> (u64, Vec<usize>) {
        let log = DELETION_LOG.count(store, &()).await.expect("log");
        let staged = DELETED_GROUPS
            .scan(store, &(), None, 1000)
            .await
            .expect("staged")
            .rows
            .iter()
            .map(|r| {
                pb::DeletedGroups::decode(r.value.0.as_slice())
                    .expect("decode")
                    .groups
                    .len()
            })
            .collect();
        (log, staged)
    }

    #[tokio::test]
    async fn expansion_moves_whole_groups_within_the_budget_and_keeps_the_freeing_time() {
        let (_dir, store) = store();
        let groups: Vec<BlockGroup> = (1..=60).map(|i| group(i, 5)).collect();
        stage(&store, &[groups]).await;
        assert_eq!(lens(&store).await, (0, vec![60]));

        let step = expand_once(&store).await;
        // The row's rewrite and 19 groups of 5: 96 writes; a 20th would pass 100.
        assert_eq!(
            step,
            Expanded {
                replicas: 95,
                writes: 96,
                more: true
            }
        );
        assert_eq!(lens(&store).await, (95, vec![41]), "the row kept the rest");
        let mut total = step.replicas;
        loop {
            let step = expand_once(&store).await;
            assert!(step.writes <= TXN_BATCH, "{step:?}");
            total += step.replicas;
            if !step.more {
                break;
            }
        }
        assert_eq!(total, 300);
        assert_eq!(lens(&store).await, (300, vec![]));

        let staged_at: Vec<u64> = DELETION_LOG
            .scan(&store, &(), None, 1000)
            .await
            .expect("log")
            .rows
            .iter()
            .map(|r| r.value.1)
            .collect();
        let first = staged_at[0];
        assert!(
            first > 0 && staged_at.iter().all(|&t| t == first),
            "the freeing time travels"
        );
    }

    /// Regression: rows removed counted against no budget, so 100 one-replica keys' rows
    /// made 200 writes in one transaction.
    #[tokio::test]
    async fn removing_many_small_rows_stays_within_the_budget() {
        let (_dir, store) = store();
        let rows: Vec<Vec<BlockGroup>> = (1..=100).map(|i| vec![group(i, 1)]).collect();
        stage(&store, &rows).await;
        let step = expand_once(&store).await;
        // At most `STAGED_ROWS_READ` rows read a transaction: 16 rows of one replica, two
        // writes each.
        assert_eq!(
            step,
            Expanded {
                replicas: STAGED_ROWS_READ,
                writes: 2 * STAGED_ROWS_READ,
                more: true
            }
        );
        let step = expand(&store, 10).await.expect("expand");
        assert_eq!(
            step,
            Expanded {
                replicas: 5,
                writes: 10,
                more: true
            }
        );
    }

    #[tokio::test]
    async fn a_group_larger_than_the_budget_moves_alone_and_bad_rows_are_dropped() {
        let (_dir, store) = store();
        stage(&store, &[vec![group(1, 14), group(2, 14)]]).await;
        transact(&store, |tx| {
            Box::pin(async move {
                // A garbled row, last in order.
                DELETED_GROUPS.put_in(&tx, &(u64::MAX, 1), &Raw(vec![0xff, 0xff]));
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("garble");
        let mut steps = Vec::new();
        for _ in 0..3 {
            let e = expand(&store, 10).await.expect("expand");
            steps.push((e.replicas, e.more));
        }
        assert_eq!(steps, [(14, true), (14, true), (0, false)]);
        assert_eq!(lens(&store).await, (28, vec![]));
    }

    /// Dropped uploads without parts cost one write each (their row's removal), within the
    /// budget.
    #[tokio::test]
    async fn dropped_uploads_are_forgotten_within_the_budget() {
        let (_dir, store) = store();
        for chunk in (0..150).collect::<Vec<u32>>().chunks(50) {
            transact(&store, |tx| {
                Box::pin(async move {
                    for i in chunk {
                        DROPPED_UPLOADS.put_in(
                            &tx,
                            &format!("u{i:03}"),
                            &Raw(pb::DroppedUpload::default().encode_to_vec()),
                        );
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await
            .expect("dropped rows");
        }
        let first = expand_dropped(&store, TXN_BATCH).await.expect("expand");
        let second = expand_dropped(&store, TXN_BATCH).await.expect("expand");
        assert_eq!((first.writes, first.more), (100, true));
        assert_eq!((second.writes, second.more), (50, false));
        assert_eq!(DROPPED_UPLOADS.count(&store, &()).await.expect("count"), 0);
    }

    /// Regression: a dropped part of more replicas than one transaction may write stopped
    /// the deleting service (every pass failed on it). Now its groups go a budget at a time.
    #[tokio::test]
    async fn a_dropped_part_larger_than_the_budget_goes_in_pieces() {
        let (_dir, store) = store();
        let part = pb::PartInfo {
            part_number: 1,
            block_groups: (1..=40).map(|i| group(i, 5).into()).collect(),
            ..pb::PartInfo::default()
        };
        transact(&store, |tx| {
            let part = &part;
            Box::pin(async move {
                DROPPED_UPLOADS.put_in(
                    &tx,
                    &"u".to_string(),
                    &Raw(pb::DroppedUpload {
                        dropped_unix_ms: 7,
                        kept_parts: Vec::new(),
                    }
                    .encode_to_vec()),
                );
                PARTS.put_in(&tx, &("u".to_string(), 1), &Raw(part.encode_to_vec()));
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("a dropped upload of one large part");
        let mut total = 0;
        let mut passes = 0;
        loop {
            let step = expand_dropped(&store, TXN_BATCH).await.expect("expand");
            assert!(step.writes <= TXN_BATCH, "{step:?}");
            total += step.replicas;
            passes += 1;
            if !step.more {
                break;
            }
        }
        assert_eq!((total, passes), (200, 3));
        assert_eq!(lens(&store).await, (200, vec![]));
        assert_eq!(PARTS.count(&store, &()).await.expect("parts"), 0);
    }

    #[tokio::test]
    async fn nothing_freed_stages_nothing() {
        let (_dir, store) = store();
        stage(&store, &[vec![]]).await;
        assert_eq!(lens(&store).await, (0, vec![]));
    }
}
