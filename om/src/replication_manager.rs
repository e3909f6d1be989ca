//! The ReplicationManager (Ozone's SCM `ReplicationManager`, HDFS's `RedundancyMonitor`): an om
//! background service that finds every block group below full redundancy — an EC index or a
//! replicated copy whose only locations are on DEAD datanodes — and repairs it: EC indexes are
//! rebuilt by a target datanode ([`crate::reconstruct_ec_indexes`]), replicated copies are copied
//! from a live one with checksums verified ([`crate::replication::copy_block`]). Each repair
//! commits with [`OzoneManager::replace_locations`], which logs the replaced replicas for
//! deletion in the same transaction.
//!
//! A pass scans every committed key (in pages), orders the deficits by the failures the group
//! can still survive (fewest first), and starts repairs up to `max_in_flight` in total and
//! `max_per_datanode` per target. Targets are HEALTHY datanodes that hold no block of the group
//! and have no deletion of it pending, least busy first. A repair that fails is retried after a
//! back-off (doubling from the service interval, at most [`MAX_RETRY_BACKOFF`]); a group with
//! too few readable sources is *unrecoverable*: logged once, counted, and tried again only when
//! the set of live datanodes changes (a datanode came back). Passes run every service interval
//! and as soon as a repair ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto_crate::wire::admin as admin_pb;
use proto_crate::wire::om as pb;
use proto_crate::{BlockLocation, DatanodeDetails, DatanodeId, KeyInfo, ReplicaIndex};
use redb::ReadableDatabase;

use crate::manager::{KEYS, decode};
use crate::repair_plan::{Deficit, Lack, assess};
use crate::{NodeState, OmError, OperationalState, OzoneManager};

/// Repairs running at once in the whole cluster, by default.
pub const DEFAULT_MAX_REPAIRS_IN_FLIGHT: usize = 8;
/// Repairs targeting one datanode at once, by default.
pub const DEFAULT_MAX_REPAIRS_PER_DATANODE: usize = 2;
/// Longest wait before a failed repair is tried again.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(300);
/// Keys read per database transaction while scanning.
const SCAN_PAGE: usize = 1000;
/// Deficits kept per pass; the rest wait for a later pass.
const MAX_DEFICITS_PER_PASS: usize = 10_000;

/// Limits of the ReplicationManager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairConfig {
    /// Repairs running at once (default [`DEFAULT_MAX_REPAIRS_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Repairs writing to one datanode at once (default [`DEFAULT_MAX_REPAIRS_PER_DATANODE`]).
    pub max_per_datanode: usize,
}

impl Default for RepairConfig {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_REPAIRS_IN_FLIGHT,
            max_per_datanode: DEFAULT_MAX_REPAIRS_PER_DATANODE,
        }
    }
}

/// What the ReplicationManager sees and has done (`cargo xtask admin repair-status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairStatus {
    /// Groups below full redundancy at the last pass, unrecoverable ones excluded.
    pub under_replicated: u64,
    /// `under_replicated` by the failures each group can still survive (`p - missing` for EC,
    /// `copies - 1` replicated).
    pub by_remaining: BTreeMap<i64, u64>,
    /// Repairs running now.
    pub in_flight: u64,
    /// Repairs that committed, since the om started.
    pub completed: u64,
    /// Repair attempts that failed (and will be retried), since the om started.
    pub failed: u64,
    /// Groups with too few readable sources, waiting for a datanode to return.
    pub unrecoverable: u64,
    /// Passes run since the om started.
    pub passes: u64,
}

impl From<RepairStatus> for admin_pb::RepairStatusResponse {
    fn from(s: RepairStatus) -> Self {
        Self {
            under_replicated: s.under_replicated,
            by_remaining: s
                .by_remaining
                .into_iter()
                .map(|(remaining, groups)| admin_pb::RemainingRedundancy { remaining, groups })
                .collect(),
            in_flight: s.in_flight,
            completed: s.completed,
            failed: s.failed,
            unrecoverable: s.unrecoverable,
            passes: s.passes,
        }
    }
}

impl From<admin_pb::RepairStatusResponse> for RepairStatus {
    fn from(s: admin_pb::RepairStatusResponse) -> Self {
        Self {
            under_replicated: s.under_replicated,
            by_remaining: s
                .by_remaining
                .into_iter()
                .map(|r| (r.remaining, r.groups))
                .collect(),
            in_flight: s.in_flight,
            completed: s.completed,
            failed: s.failed,
            unrecoverable: s.unrecoverable,
            passes: s.passes,
        }
    }
}

/// Why a group is not retried yet.
#[derive(Debug, Clone)]
enum Hold {
    /// A failed attempt: retry at `at` (back-off doubles with `attempts`).
    Backoff { at: Instant, attempts: u32 },
    /// Too few sources: retry when the live set differs from `live`.
    Unrecoverable { live: BTreeSet<DatanodeId> },
}

/// The ReplicationManager's state, inside the om.
#[derive(Debug)]
pub(crate) struct RepairState {
    inner: Mutex<Inner>,
    /// Repairs running; aborted when the service stops.
    tasks: Mutex<tokio::task::JoinSet<()>>,
    pub(crate) wakeup: tokio::sync::Notify,
    /// Passes completed, published after each.
    passes: tokio::sync::watch::Sender<u64>,
}

impl Default for RepairState {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            tasks: Mutex::default(),
            wakeup: tokio::sync::Notify::new(),
            passes: tokio::sync::watch::Sender::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    status: RepairStatus,
    /// Groups being repaired -> their targets.
    running: HashMap<(u64, u64), Vec<DatanodeId>>,
    holds: HashMap<(u64, u64), Hold>,
}

impl RepairState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, tokio::task::JoinSet<()>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl OzoneManager {
    /// The ReplicationManager's counters.
    #[must_use]
    pub fn repair_status(&self) -> RepairStatus {
        let inner = self.repair.lock();
        let mut s = inner.status.clone();
        s.in_flight = inner.running.len() as u64;
        s
    }

    /// A receiver of the number of ReplicationManager passes run (to wait for the next status
    /// without polling).
    #[must_use]
    pub fn watch_repair_passes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.repair.passes.subscribe()
    }

    /// Committed keys after `after` (bucket, key), at most `limit`, in one read transaction.
    fn keys_page(
        &self,
        after: Option<&(String, String)>,
        limit: usize,
    ) -> Result<Vec<KeyInfo>, OmError> {
        let read = self.db.begin_read()?;
        let t = read.open_table(KEYS)?;
        let mut out = Vec::new();
        let range = match after {
            Some((b, k)) => t.range((b.as_str(), k.as_str())..)?,
            None => t.range::<(&str, &str)>(..)?,
        };
        for entry in range {
            let (k, v) = entry?;
            let (b, name) = k.value();
            if after.is_some_and(|(ab, ak)| ab == b && ak == name) {
                continue;
            }
            out.push(decode::<pb::KeyInfo, _>(v.value(), "key")?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// One ReplicationManager pass: scans, counts and starts repairs (which run on their own
    /// tasks and wake the service when they end).
    ///
    /// # Errors
    /// Database errors of the scan.
    pub async fn repair_once(self: &Arc<Self>) -> Result<RepairStatus, OmError> {
        let statuses = self.datanode_statuses();
        // Readable: not DEAD. Counting: readable and in service.
        let live: BTreeSet<DatanodeId> = statuses
            .iter()
            .filter(|s| s.state != NodeState::Dead)
            .map(|s| s.details.uuid.clone())
            .collect();
        let counting: BTreeSet<DatanodeId> = statuses
            .iter()
            .filter(|s| s.state != NodeState::Dead && s.op_state == OperationalState::InService)
            .map(|s| s.details.uuid.clone())
            .collect();
        let healthy: Vec<DatanodeDetails> = statuses
            .into_iter()
            .filter(|s| s.state == NodeState::Healthy && s.op_state == OperationalState::InService)
            .map(|s| s.details)
            .collect();

        let om = Arc::clone(self);
        let readable = live.clone();
        let (mut deficits, referenced, complete) = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut referenced: BTreeSet<DatanodeId> = BTreeSet::new();
            let mut after = None;
            loop {
                let page = om.keys_page(after.as_ref(), SCAN_PAGE)?;
                let Some(last) = page.last() else {
                    return Ok::<_, OmError>((out, referenced, true));
                };
                after = Some((last.bucket.clone(), last.name.clone()));
                for k in &page {
                    referenced.extend(
                        k.block_groups
                            .iter()
                            .flat_map(|g| g.pipeline.locations.iter())
                            .map(|l| l.datanode.uuid.clone()),
                    );
                    out.extend(assess(
                        k,
                        |d| counting.contains(d),
                        |d| readable.contains(d),
                    ));
                }
                if page.len() < SCAN_PAGE {
                    return Ok((out, referenced, true));
                }
                if out.len() >= MAX_DEFICITS_PER_PASS {
                    return Ok((out, referenced, false));
                }
            }
        })
        .await??;
        if complete {
            self.finish_decommissions(&referenced)?;
        }
        deficits.sort_by_key(|d| d.remaining);

        let now = self.config.clock.now();
        let cfg = self.config.repair;
        let mut starts = Vec::new();
        {
            let mut inner = self.repair.lock();
            // Holds of groups that are healthy again (or gone) are dropped.
            let found: BTreeSet<(u64, u64)> = deficits.iter().map(|d| d.block).collect();
            inner.holds.retain(|b, _| found.contains(b));
            let mut by_remaining = BTreeMap::new();
            let mut unrecoverable = 0;
            let mut busy: HashMap<DatanodeId, usize> = HashMap::new();
            for targets in inner.running.values() {
                for t in targets {
                    *busy.entry(t.clone()).or_default() += 1;
                }
            }
            for d in deficits {
                let held = match inner.holds.get(&d.block) {
                    Some(Hold::Unrecoverable { live: then }) if *then == live => {
                        unrecoverable += 1;
                        continue;
                    }
                    Some(Hold::Backoff { at, .. }) => *at > now,
                    _ => false,
                };
                *by_remaining.entry(d.remaining).or_insert(0u64) += 1;
                if held
                    || inner.running.contains_key(&d.block)
                    || inner.running.len() + starts.len() >= cfg.max_in_flight
                {
                    continue;
                }
                let wanted = match &d.lack {
                    Lack::Indexes { rebuild, copy } => rebuild.len() + copy.len(),
                    Lack::Copies { needed, .. } => *needed,
                };
                let mut candidates: Vec<&DatanodeDetails> = healthy
                    .iter()
                    .filter(|t| !d.holders.contains(&t.uuid))
                    .filter(|t| busy.get(&t.uuid).copied().unwrap_or(0) < cfg.max_per_datanode)
                    .filter(|t| !self.deletion_pending(&t.uuid, d.block).unwrap_or(true))
                    .collect();
                candidates.sort_by_key(|t| busy.get(&t.uuid).copied().unwrap_or(0));
                let targets: Vec<DatanodeDetails> =
                    candidates.into_iter().take(wanted).cloned().collect();
                if targets.is_empty() {
                    continue;
                }
                for t in &targets {
                    *busy.entry(t.uuid.clone()).or_default() += 1;
                }
                starts.push((d, targets));
            }
            for (d, targets) in &starts {
                inner
                    .running
                    .insert(d.block, targets.iter().map(|t| t.uuid.clone()).collect());
            }
            let s = &mut inner.status;
            s.under_replicated = by_remaining.values().sum();
            s.by_remaining = by_remaining;
            s.unrecoverable = unrecoverable;
            s.passes += 1;
            self.repair.passes.send_replace(s.passes);
        }
        let mut tasks = self.repair.tasks();
        while tasks.try_join_next().is_some() {}
        for (d, targets) in starts {
            let om = Arc::clone(self);
            let live = live.clone();
            tasks.spawn(async move {
                let outcome = om.repair(&d, &targets).await;
                om.finish_repair(&d, outcome, live);
            });
        }
        drop(tasks);
        Ok(self.repair_status())
    }

    /// Whether a deletion of `block` on `uuid` is logged (a target then would lose the repair).
    fn deletion_pending(&self, uuid: &DatanodeId, block: (u64, u64)) -> Result<bool, OmError> {
        let read = self.db.begin_read()?;
        crate::deletion::is_logged_read(&read, uuid.as_str(), block)
    }

    /// Runs one repair to its commit.
    async fn repair(&self, d: &Deficit, targets: &[DatanodeDetails]) -> Result<(), OmError> {
        match &d.lack {
            Lack::Indexes { rebuild, copy } => {
                let mut targets = targets.iter();
                // Readable indexes (on decommissioning datanodes) are copied, one commit each.
                for (from, to) in copy.iter().zip(targets.by_ref()) {
                    let block = proto_crate::BlockId {
                        container_id: d.block.0,
                        local_id: d.block.1,
                        replica_index: from.replica_index,
                    };
                    let added = [BlockLocation {
                        datanode: to.clone(),
                        replica_index: from.replica_index,
                    }];
                    let outcome = async {
                        crate::replication::copy_block(&from.datanode, to, block).await?;
                        self.replace_locations(
                            &d.bucket,
                            &d.key,
                            d.group,
                            d.block,
                            std::slice::from_ref(from),
                            &added,
                        )
                    }
                    .await;
                    if let Err(e) = outcome {
                        if let Err(le) = self.log_orphans(d.block, &added) {
                            tracing::warn!(error = %le, "logging a failed copy's target for deletion");
                        }
                        return Err(e);
                    }
                }
                let plan: Vec<(ReplicaIndex, DatanodeId)> = rebuild
                    .iter()
                    .copied()
                    .zip(targets.map(|t| t.uuid.clone()))
                    .collect();
                if !plan.is_empty() {
                    crate::reconstruct_ec_indexes(self, &d.bucket, &d.key, d.group, &plan).await?;
                }
            }
            Lack::Copies {
                sources, retire, ..
            } => {
                let source = sources.first().ok_or_else(|| {
                    OmError::ReplicationFailed(format!(
                        "{}/{} group {}: no live copy to copy from (INSUFFICIENT_SOURCES)",
                        d.bucket, d.key, d.group
                    ))
                })?;
                let block = proto_crate::BlockId {
                    container_id: d.block.0,
                    local_id: d.block.1,
                    replica_index: None,
                };
                let added: Vec<BlockLocation> = targets
                    .iter()
                    .map(|t| BlockLocation {
                        datanode: t.clone(),
                        replica_index: None,
                    })
                    .collect();
                let outcome = async {
                    for t in targets {
                        crate::replication::copy_block(&source.datanode, t, block).await?;
                    }
                    // Copies that do not count go as the new ones arrive, one for one.
                    let removed: Vec<BlockLocation> =
                        retire.iter().take(added.len()).cloned().collect();
                    self.replace_locations(&d.bucket, &d.key, d.group, d.block, &removed, &added)
                }
                .await;
                if let Err(e) = outcome {
                    // Targets may hold partial or unreferenced copies: free them.
                    if let Err(le) = self.log_orphans(d.block, &added) {
                        tracing::warn!(error = %le, "logging a failed copy's targets for deletion");
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn finish_repair(&self, d: &Deficit, outcome: Result<(), OmError>, live: BTreeSet<DatanodeId>) {
        let now = self.config.clock.now();
        let mut inner = self.repair.lock();
        inner.running.remove(&d.block);
        match outcome {
            Ok(()) => {
                inner.status.completed += 1;
                inner.holds.remove(&d.block);
                tracing::info!(bucket = %d.bucket, key = %d.key, group = d.group, "repaired");
            }
            Err(OmError::ReplicationFailed(m)) if m.contains("INSUFFICIENT_SOURCES") => {
                inner.status.failed += 1;
                tracing::warn!(bucket = %d.bucket, key = %d.key, group = d.group, reason = %m,
                    "block group unrecoverable until a datanode returns");
                inner.holds.insert(d.block, Hold::Unrecoverable { live });
            }
            Err(e) => {
                inner.status.failed += 1;
                let attempts = match inner.holds.get(&d.block) {
                    Some(Hold::Backoff { attempts, .. }) => attempts.saturating_add(1),
                    _ => 1,
                };
                let wait = self
                    .config
                    .service_interval
                    .saturating_mul(1 << attempts.min(16))
                    .min(MAX_RETRY_BACKOFF);
                tracing::warn!(bucket = %d.bucket, key = %d.key, group = d.group, error = %e,
                    retry_in = ?wait, "repair failed");
                inner.holds.insert(
                    d.block,
                    Hold::Backoff {
                        at: now + wait,
                        attempts,
                    },
                );
            }
        }
        drop(inner);
        self.repair.wakeup.notify_one();
    }
}

/// Runs the ReplicationManager until `shutdown` resolves: a pass every `interval` and as soon
/// as a repair ends.
pub async fn run_replication_manager(
    om: Arc<OzoneManager>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        if let Err(e) = om.repair_once().await {
            tracing::warn!(error = %e, "ReplicationManager pass failed");
        }
        tokio::select! {
            () = &mut shutdown => {
                om.repair.tasks().abort_all();
                return;
            }
            () = om.repair.wakeup.notified() => {}
            () = tokio::time::sleep(interval) => {}
        }
    }
}
