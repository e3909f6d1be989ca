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
//! and as soon as a repair ends; a pass reads the keys only when something it depends on changed
//! since a scan that found nothing to do (datanode states, block reports, missing locations; a
//! decommission in progress always scans) or the full-scan interval
//! ([`crate::OmConfig::full_scan_interval`], default [`DEFAULT_FULL_SCAN_INTERVAL`]) passed,
//! so an idle cluster does not decode every key every second.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto_crate::wire::admin as admin_pb;
use proto_crate::wire::om as pb;
use proto_crate::{BlockLocation, DatanodeDetails, DatanodeId, KeyInfo, ReplicaIndex};

use crate::group_owner::GroupOwner;
use crate::manager::decode;
use crate::repair_plan::{Deficit, Lack, assess_groups};
use crate::{NodeState, OmError, OperationalState, OzoneManager};

/// Repairs running at once in the whole cluster, by default.
pub const DEFAULT_MAX_REPAIRS_IN_FLIGHT: usize = 8;
/// Repairs targeting one datanode at once, by default.
pub const DEFAULT_MAX_REPAIRS_PER_DATANODE: usize = 2;
/// Longest wait before a failed repair is tried again.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(300);
/// Default longest time between two full scans while nothing the ReplicationManager watches
/// changes ([`crate::OmConfig::full_scan_interval`]; see [`OzoneManager::repair_once`]).
/// Ozone's ReplicationManager runs every 300 s by default; a full scan here is cheaper (keys
/// only, no container reports to merge), so it runs more often.
pub const DEFAULT_FULL_SCAN_INTERVAL: Duration = Duration::from_secs(60);
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
    /// Groups among `under_replicated` that no datanode could take at the last pass: every
    /// HEALTHY, in-service datanode already holds a block of the group, is busy, or has a
    /// deletion of it pending (e.g. a decommission with no spare datanode).
    pub waiting_for_target: u64,
    /// Locations whose live datanode no longer holds the block (absent from its block report
    /// and confirmed by asking it), not yet repaired. Each makes its group under-replicated.
    pub missing_replicas: u64,
    /// Locations absent from their datanode's block report that were checked with the
    /// datanode (it held the block, or not), since the om started. A report is a snapshot: a
    /// block written after it was taken is absent from it and still held.
    pub checked_replicas: u64,
    /// Replicas found on datanodes that no key, multipart part or open session references
    /// (in two consecutive sweeps), logged for deletion, since the om started.
    pub orphan_replicas: u64,
    /// Passes run since the om started.
    pub passes: u64,
    /// Passes that scanned every key, since the om started. A pass skips the scan while
    /// nothing changed since a scan that found nothing to do (datanode states, block reports,
    /// missing locations), for at most [`crate::OmConfig::full_scan_interval`].
    pub scans: u64,
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
            scans: s.scans,
            waiting_for_target: s.waiting_for_target,
            missing_replicas: s.missing_replicas,
            checked_replicas: s.checked_replicas,
            orphan_replicas: s.orphan_replicas,
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
            scans: s.scans,
            waiting_for_target: s.waiting_for_target,
            missing_replicas: s.missing_replicas,
            checked_replicas: s.checked_replicas,
            orphan_replicas: s.orphan_replicas,
        }
    }
}

/// What a scan's outcome depends on besides the keys themselves. Keys committed after a scan
/// were placed on HEALTHY, in-service datanodes, so while this picture holds they need no repair
/// — except a key whose datanode changed state between placement and commit, which the next
/// full scan (at most [`crate::OmConfig::full_scan_interval`] later) finds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Picture {
    nodes: Vec<(DatanodeId, NodeState, OperationalState)>,
    /// Block reports received.
    reports: u64,
    /// Locations known missing.
    missing: u64,
}

/// What one pass's scan found.
#[derive(Debug, Default)]
struct Scan {
    deficits: Vec<Deficit>,
    /// Deficits neither running nor held back.
    actionable: usize,
    /// Datanodes some location or multipart part names.
    referenced: BTreeSet<DatanodeId>,
    /// Whether every key was scanned (not cut short by the per-pass cap).
    complete: bool,
    /// Locations absent from their datanode's last block report, to check.
    candidates: Vec<crate::block_reports::Candidate>,
    /// Locations known missing that are still recorded.
    still_missing: BTreeSet<((u64, u64), DatanodeId)>,
    /// The last key scanned when the per-pass cap cut the scan short.
    resume_after: Option<(String, String)>,
}

/// Why a group is not retried yet.
#[derive(Debug, Clone)]
enum Hold {
    /// A failed attempt: retry at `at` (back-off doubles with `attempts`).
    Backoff { at: Instant, attempts: u32 },
    /// Too few sources: retry when the set of HEALTHY datanodes differs from `healthy` (a
    /// source that was STALE or unreachable may be back) or, at the latest, at `until`.
    Unrecoverable {
        healthy: BTreeSet<DatanodeId>,
        until: Instant,
    },
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
    /// Decommissioning datanodes found unreferenced by the last complete scan.
    unreferenced: BTreeSet<DatanodeId>,
    /// The picture of the last complete scan that found nothing to do, and when it ran.
    clean: Option<(Picture, Instant)>,
    /// Where the next pass continues a scan the per-pass cap cut short.
    resume: Option<(String, String)>,
}

impl RepairState {
    /// Groups being repaired now.
    pub(crate) fn running_blocks(&self) -> BTreeSet<(u64, u64)> {
        self.lock().running.keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the decommissioning datanodes a complete scan found unreferenced; returns those
    /// the previous complete scan found unreferenced too.
    pub(crate) fn clean_pass(&self, unreferenced: &[DatanodeId]) -> Vec<DatanodeId> {
        let mut inner = self.lock();
        let twice = unreferenced
            .iter()
            .filter(|u| inner.unreferenced.contains(*u))
            .cloned()
            .collect();
        inner.unreferenced = unreferenced.iter().cloned().collect();
        twice
    }

    /// Ends a term of the background services on this om (`service_lead.rs`): aborts the
    /// repairs and block checks in flight and forgets what the passes learned (groups under
    /// repair, holds, the last clean scan, decommissioning datanodes seen unreferenced, where
    /// a scan stopped), so that a later term here starts from the store as another om would;
    /// the counters since the om started stay.
    pub(crate) fn end_term(&self) {
        self.tasks().abort_all();
        let mut inner = self.lock();
        let status = RepairStatus {
            in_flight: 0,
            ..std::mem::take(&mut inner.status)
        };
        *inner = Inner {
            status,
            ..Inner::default()
        };
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

    /// Multipart uploads in progress, with their uploaded parts, as of `snapshot`.
    async fn uploads(
        &self,
        snapshot: &meta_store::Snapshot,
    ) -> Result<Vec<proto_crate::MultipartUpload>, OmError> {
        let mut out = std::collections::BTreeMap::new();
        crate::tables::each_row(snapshot, crate::tables::UPLOADS, &(), |id, v| {
            let u: proto_crate::MultipartUpload =
                decode::<pb::MultipartUploadInfo, _>(&v.0, "multipart upload")?;
            out.insert(id, u);
            Ok(())
        })
        .await?;
        crate::tables::each_row(snapshot, crate::tables::PARTS, &(), |(id, _), v| {
            if let Some(u) = out.get_mut(&id) {
                let mut p: proto_crate::PartInfo =
                    decode::<pb::PartInfo, _>(&v.0, "multipart part")?;
                self.current_addresses(&mut p.block_groups);
                u.parts.push(p);
            }
            Ok(())
        })
        .await?;
        Ok(out.into_values().collect())
    }

    /// Committed keys after `after` (bucket, key), at most `limit`, as of `snapshot`.
    async fn keys_page(
        &self,
        snapshot: &meta_store::Snapshot,
        after: Option<&(String, String)>,
        limit: usize,
    ) -> Result<Vec<KeyInfo>, OmError> {
        let rows = crate::tables::KEYS
            .scan_at(snapshot, &(), after, limit)
            .await?;
        rows.rows
            .iter()
            .map(|r| {
                let mut k = crate::keys::key_of(&r.value, Some(r.mod_revision))?;
                self.current_addresses(&mut k.block_groups);
                Ok(k)
            })
            .collect()
    }

    /// One ReplicationManager pass: scans, counts and starts repairs (which run on their own
    /// tasks and wake the service when they end).
    ///
    /// # Errors
    /// Database errors of the scan.
    pub async fn repair_once(self: &Arc<Self>) -> Result<RepairStatus, OmError> {
        let statuses = self.datanode_statuses();
        let now = self.config.clock.now();
        let picture = Picture {
            nodes: statuses
                .iter()
                .map(|s| (s.details.uuid.clone(), s.state, s.op_state))
                .collect(),
            reports: *self.block_reports.received.borrow(),
            missing: self.block_reports.counts().0,
        };
        {
            // Nothing changed since a scan that found nothing to do: no need to read every key
            // again (a decommission needs its scans, so it always scans).
            let mut inner = self.repair.lock();
            let unchanged = inner.clean.as_ref().is_some_and(|(p, at)| {
                *p == picture && now.saturating_duration_since(*at) < self.config.full_scan_interval
            });
            let decommissioning = picture
                .nodes
                .iter()
                .any(|(_, _, op)| *op == OperationalState::Decommissioning);
            if unchanged && !decommissioning && inner.running.is_empty() && inner.holds.is_empty() {
                inner.status.passes += 1;
                self.repair.passes.send_replace(inner.status.passes);
                drop(inner);
                return Ok(self.repair_status());
            }
        }
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

        let healthy_set: BTreeSet<DatanodeId> = healthy.iter().map(|d| d.uuid.clone()).collect();
        let cfg = self.config.repair;

        // What is running or held, copied out: the lock is not held across the scan or the
        // database reads below.
        let (running, holds, mut busy) = {
            let inner = self.repair.lock();
            let mut busy: HashMap<DatanodeId, usize> = HashMap::new();
            for t in inner.running.values().flatten() {
                *busy.entry(t.clone()).or_default() += 1;
            }
            let running: BTreeSet<(u64, u64)> = inner.running.keys().copied().collect();
            (running, inner.holds.clone(), busy)
        };
        let waiting = |block: &(u64, u64)| match holds.get(block) {
            Some(Hold::Backoff { at, .. }) => *at > now,
            Some(Hold::Unrecoverable { healthy, until }) => *healthy == healthy_set && *until > now,
            None => false,
        };
        // Groups running or waiting do not count toward the per-pass cap, so they cannot
        // crowd out groups further on.
        let skip: BTreeSet<(u64, u64)> = running
            .iter()
            .chain(holds.keys())
            .filter(|b| running.contains(*b) || waiting(b))
            .copied()
            .collect();

        let reports = self.block_reports.snapshot();
        let missing = self.block_reports.missing();
        let seen_missing = self.block_reports.missing_pairs();
        // A pass cut short by the per-pass cap is continued by the next one, so groups late
        // in key order are not starved by many early ones.
        let resume_from = self.repair.lock().resume.take();
        let om = Arc::clone(self);
        let readable = live.clone();
        // One snapshot: every upload before the first key page, and every key page, see one
        // state of the store, so a key renamed or an upload completed meanwhile is seen once,
        // in one place or the other.
        let snapshot = self.store.snapshot().await?;
        let scan = async {
            let mut scan = Scan::default();
            let lost =
                |d: &DatanodeId, b: (u64, u64)| missing.get(&b).is_some_and(|s| s.contains(d));
            // One key or part: its locations against the block reports, then its deficits.
            let visit = |scan: &mut Scan,
                         owner: GroupOwner,
                         replication: proto_crate::ReplicationConfig,
                         groups: &[proto_crate::BlockGroup]| {
                for g in groups {
                    let b = (g.container_id, g.local_id);
                    for l in &g.pipeline.locations {
                        let u = &l.datanode.uuid;
                        scan.referenced.insert(u.clone());
                        if lost(u, b) {
                            scan.still_missing.insert((b, u.clone()));
                            continue;
                        }
                        let Some(r) = reports.get(u) else { continue };
                        if scan.candidates.len() < crate::MAX_CHECKS_PER_PASS
                            && readable.contains(u)
                            && !r.contains(b)
                        {
                            // Asked at its registered address now, not the one recorded
                            // with the key (a datanode may have moved).
                            let Some(datanode) = om.datanode(u.as_str()) else {
                                continue;
                            };
                            let c = crate::block_reports::Candidate {
                                datanode,
                                block: g.block_id(l.replica_index),
                                report: r.received,
                            };
                            if !om.block_reports.checked(&c) {
                                scan.candidates.push(c);
                            }
                        }
                    }
                }
                let counts = |d: &DatanodeId, b| counting.contains(d) && !lost(d, b);
                let reads = |d: &DatanodeId, b| readable.contains(d) && !lost(d, b);
                for d in assess_groups(&owner, replication, groups, counts, reads) {
                    if !skip.contains(&d.block) {
                        scan.actionable += 1;
                    }
                    scan.deficits.push(d);
                }
            };
            if resume_from.is_none() {
                for u in om.uploads(&snapshot).await? {
                    for p in &u.parts {
                        let owner = GroupOwner::Part {
                            upload_id: u.upload_id.clone(),
                            part_number: p.part_number,
                        };
                        visit(&mut scan, owner, u.replication, &p.block_groups);
                    }
                }
            }
            let resumed = resume_from.is_some();
            let mut after = resume_from;
            loop {
                let page = om.keys_page(&snapshot, after.as_ref(), SCAN_PAGE).await?;
                for k in &page {
                    let owner = GroupOwner::key(&k.bucket, &k.name);
                    visit(&mut scan, owner, k.replication, &k.block_groups);
                }
                let Some(last) = page.last() else { break };
                if page.len() < SCAN_PAGE {
                    break;
                }
                after = Some((last.bucket.clone(), last.name.clone()));
                if scan.actionable >= MAX_DEFICITS_PER_PASS {
                    scan.resume_after = after;
                    return Ok::<_, OmError>(scan);
                }
            }
            // Complete only when one pass saw every part and key.
            scan.complete = !resumed;
            Ok::<_, OmError>(scan)
        }
        .await?;
        drop(snapshot);
        let Scan {
            mut deficits,
            actionable: _,
            referenced,
            complete,
            candidates,
            still_missing,
            resume_after,
        } = scan;
        self.repair.lock().resume = resume_after;
        if complete {
            self.finish_decommissions(&referenced).await?;
            self.block_reports.prune(&seen_missing, &still_missing);
            // At most one sweep per ten service intervals.
            let gap = self.config.service_interval.saturating_mul(10);
            if self.block_reports.sweep_due(now, gap) {
                // Before this pass starts repairs: every repair that could commit during
                // the sweep is in `running` already.
                self.sweep_orphans(&running).await?;
            }
        }
        let checks_pending = !candidates.is_empty();
        self.check_in_background(candidates);
        deficits.sort_by_key(|d| d.remaining);

        let mut by_remaining = BTreeMap::new();
        let mut unrecoverable = 0;
        let mut no_target = 0;
        let mut starts = Vec::new();
        let mut in_flight = running.len();
        for d in &deficits {
            if matches!(holds.get(&d.block), Some(Hold::Unrecoverable { .. })) && waiting(&d.block)
            {
                unrecoverable += 1;
                continue;
            }
            *by_remaining.entry(d.remaining).or_insert(0u64) += 1;
            if waiting(&d.block) || running.contains(&d.block) || in_flight >= cfg.max_in_flight {
                continue;
            }
            let wanted = match &d.lack {
                Lack::Indexes { rebuild, copy } => rebuild.len() + copy.len(),
                Lack::Copies { needed, .. } => *needed,
            };
            let mut candidates = Vec::new();
            for t in &healthy {
                if d.holders.contains(&t.uuid)
                    || busy.get(&t.uuid).copied().unwrap_or(0) >= cfg.max_per_datanode
                    || crate::deletion::is_logged(&self.store, t.uuid.as_str(), d.block).await?
                {
                    continue;
                }
                candidates.push(t);
            }
            candidates.sort_by_key(|t| busy.get(&t.uuid).copied().unwrap_or(0));
            let targets: Vec<DatanodeDetails> =
                candidates.into_iter().take(wanted).cloned().collect();
            if targets.is_empty() {
                no_target += 1;
                continue;
            }
            for t in &targets {
                *busy.entry(t.uuid.clone()).or_default() += 1;
            }
            let attempt = match holds.get(&d.block) {
                Some(Hold::Backoff { attempts, .. }) => *attempts,
                _ => 0,
            };
            in_flight += 1;
            starts.push((d.clone(), targets, attempt));
        }
        {
            let mut inner = self.repair.lock();
            let nothing_to_do = deficits.is_empty() && running.is_empty() && !checks_pending;
            inner.clean = (complete && nothing_to_do).then_some((picture, now));
            if complete {
                // Holds of groups that are healthy again (or gone) are dropped.
                let found: BTreeSet<(u64, u64)> = deficits.iter().map(|d| d.block).collect();
                inner.holds.retain(|b, _| found.contains(b));
            }
            starts.retain(|(d, _, _)| !inner.running.contains_key(&d.block));
            for (d, targets, _) in &starts {
                inner
                    .running
                    .insert(d.block, targets.iter().map(|t| t.uuid.clone()).collect());
            }
            let s = &mut inner.status;
            s.under_replicated = by_remaining.values().sum();
            s.by_remaining = by_remaining;
            if no_target > 0 && s.waiting_for_target == 0 {
                tracing::warn!(
                    groups = no_target,
                    "under-replicated groups wait: no healthy in-service datanode outside them can take a copy"
                );
            }
            s.unrecoverable = unrecoverable;
            s.waiting_for_target = no_target;
            (s.missing_replicas, s.checked_replicas, s.orphan_replicas) =
                self.block_reports.counts();
            s.passes += 1;
            s.scans += 1;
            self.repair.passes.send_replace(s.passes);
        }
        let mut tasks = self.repair.tasks();
        while tasks.try_join_next().is_some() {}
        for (d, targets, attempt) in starts {
            let om = Arc::clone(self);
            let healthy = healthy_set.clone();
            tasks.spawn(async move {
                let outcome = om.repair(&d, &targets, attempt).await;
                om.finish_repair(&d, outcome, healthy);
            });
        }
        drop(tasks);
        Ok(self.repair_status())
    }

    /// Checks `candidates` with their datanodes on the ReplicationManager's task set, one batch
    /// at a time (a pass that finds candidates while a batch runs leaves them to a later pass),
    /// and wakes the service when some location turned out missing.
    fn check_in_background(self: &Arc<Self>, candidates: Vec<crate::block_reports::Candidate>) {
        use std::sync::atomic::Ordering;
        if candidates.is_empty() || self.block_reports.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let om = Arc::clone(self);
        self.repair.tasks().spawn(async move {
            let found = om.check_candidates(candidates).await;
            om.block_reports.checking.store(false, Ordering::Release);
            if found > 0 {
                om.repair.wakeup.notify_one();
            }
        });
    }

    /// Runs one repair to its commit. `attempt` counts earlier failed attempts: a retry reads
    /// from the next source first, and rebuilds an EC index whose copy failed.
    async fn repair(
        &self,
        d: &Deficit,
        targets: &[DatanodeDetails],
        attempt: u32,
    ) -> Result<(), OmError> {
        let block_id = |replica_index| proto_crate::BlockId {
            container_id: d.block.0,
            local_id: d.block.1,
            replica_index,
        };
        match &d.lack {
            Lack::Indexes { rebuild, copy } => {
                let mut rebuild = rebuild.clone();
                let copy: &[BlockLocation] = if attempt == 0 {
                    copy
                } else {
                    rebuild.extend(copy.iter().filter_map(|l| l.replica_index));
                    rebuild.sort_unstable();
                    &[]
                };
                let mut targets = targets.iter();
                // Readable indexes (on decommissioning datanodes) are copied, one commit each.
                for (from, to) in copy.iter().zip(targets.by_ref()) {
                    let added = [BlockLocation {
                        datanode: to.clone(),
                        replica_index: from.replica_index,
                    }];
                    let outcome = async {
                        let expected = crate::replication::replica_len(
                            &d.replication,
                            &d.group_info,
                            from.replica_index,
                        )?;
                        crate::replication::copy_block(
                            self,
                            std::slice::from_ref(&from.datanode),
                            to,
                            block_id(from.replica_index),
                            expected,
                        )
                        .await?;
                        self.replace_group_locations(
                            &d.owner,
                            d.group,
                            d.block,
                            std::slice::from_ref(from),
                            &added,
                        )
                        .await
                    }
                    .await;
                    if let Err(e) = outcome {
                        self.free_targets(d, &added).await;
                        return Err(e);
                    }
                }
                let plan: Vec<(ReplicaIndex, DatanodeId)> = rebuild
                    .iter()
                    .copied()
                    .zip(targets.map(|t| t.uuid.clone()))
                    .collect();
                if !plan.is_empty() {
                    crate::reconstruction::reconstruct_group(self, &d.owner, d.group, &plan)
                        .await?;
                }
            }
            Lack::Copies {
                sources, retire, ..
            } => {
                if sources.is_empty() {
                    return Err(OmError::InsufficientSources(format!(
                        "{} group {}: no readable copy",
                        d.owner, d.group
                    )));
                }
                let mut from: Vec<DatanodeDetails> =
                    sources.iter().map(|l| l.datanode.clone()).collect();
                let turn = usize::try_from(attempt).unwrap_or(0) % from.len();
                from.rotate_left(turn);
                let added: Vec<BlockLocation> = targets
                    .iter()
                    .map(|t| BlockLocation {
                        datanode: t.clone(),
                        replica_index: None,
                    })
                    .collect();
                let outcome = async {
                    for t in targets {
                        crate::replication::copy_block(
                            self,
                            &from,
                            t,
                            block_id(None),
                            d.group_info.length,
                        )
                        .await?;
                    }
                    // Copies that do not count go as the new ones arrive, one for one.
                    let removed: Vec<BlockLocation> =
                        retire.iter().take(added.len()).cloned().collect();
                    self.replace_group_locations(&d.owner, d.group, d.block, &removed, &added)
                        .await
                }
                .await;
                if let Err(e) = outcome {
                    self.free_targets(d, &added).await;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Logs the targets of a failed copy for deletion (they may hold part of a block).
    async fn free_targets(&self, d: &Deficit, added: &[BlockLocation]) {
        if let Err(e) = self.log_orphans(&d.owner, d.group, d.block, added).await {
            tracing::warn!(error = %e, "logging a failed copy's targets for deletion");
        }
    }

    fn finish_repair(
        &self,
        d: &Deficit,
        outcome: Result<(), OmError>,
        healthy: BTreeSet<DatanodeId>,
    ) {
        let now = self.config.clock.now();
        let mut inner = self.repair.lock();
        inner.running.remove(&d.block);
        match outcome {
            Ok(()) => {
                inner.status.completed += 1;
                inner.holds.remove(&d.block);
                tracing::info!(owner = %d.owner, group = d.group, "repaired");
            }
            Err(OmError::InsufficientSources(m)) => {
                inner.status.failed += 1;
                tracing::warn!(owner = %d.owner, group = d.group, reason = %m,
                    "block group unrecoverable until a datanode returns");
                inner.holds.insert(
                    d.block,
                    Hold::Unrecoverable {
                        healthy,
                        until: now + MAX_RETRY_BACKOFF,
                    },
                );
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
                tracing::warn!(owner = %d.owner, group = d.group, error = %e,
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
