//! Block reports: each datanode periodically sends the full list of blocks its scan found intact
//! (HDFS's block report; Ozone's container reports, at block grain), and the om keeps the last
//! complete one per datanode in memory. The ReplicationManager compares the locations it scans
//! with them: a location whose live datanode's report lacks the block is a *candidate*, and
//! becomes *missing* only when the datanode, asked directly (GetBlock), answers that it does
//! not have the block. The check is needed because a report is a snapshot: a block written
//! after the datanode listed its blocks is in the om's records and not in the report. The
//! reverse cannot happen — the om records a location only after the datanode committed the
//! block — so a datanode answering NO_SUCH_BLOCK for a recorded location has lost it. A missing
//! location is neither readable nor counted, so the group is repaired as if that one datanode
//! were DEAD.
//!
//! Memory: one sorted `(container id, local id, replica index)` per reported block (24 bytes), at most
//! [`MAX_REPORTED_BLOCKS`] per datanode, for registered datanodes only; candidates checked per
//! pass are capped at [`MAX_CHECKS_PER_PASS`].

use proto_crate::block_token::BlockToken;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto_crate::wire::datanode as dn_pb;
use proto_crate::{BlockId, DatanodeDetails, DatanodeId, ResultCode};

use crate::{OmError, OzoneManager};

/// Most blocks one datanode's report may list; a longer report is refused (the datanode logs
/// the refusal and the om keeps its previous report).
pub const MAX_REPORTED_BLOCKS: usize = 10_000_000;
/// Most candidate locations checked with the datanodes per ReplicationManager pass; the rest
/// wait for the next pass.
pub const MAX_CHECKS_PER_PASS: usize = 1000;
/// Deadline of one GetBlock check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Checks running at once.
const CHECKS_IN_FLIGHT: usize = 16;

/// A datanode's last complete block report.
#[derive(Debug)]
pub struct BlockReport {
    /// (container id, local id, wire replica index) of every block reported, sorted by block,
    /// one entry per block.
    pub(crate) blocks: Vec<(u64, u64, u32)>,
    /// When the om received the report's end (the om's clock).
    pub received: Instant,
}

impl BlockReport {
    /// Whether the report lists block (container id, local id).
    #[must_use]
    pub fn contains(&self, block: (u64, u64)) -> bool {
        self.position(block).is_some()
    }

    /// Where block (container id, local id) is in `blocks`.
    pub(crate) fn position(&self, block: (u64, u64)) -> Option<usize> {
        self.blocks
            .binary_search_by(|&(c, l, _)| (c, l).cmp(&block))
            .ok()
    }

    /// Blocks listed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether the report lists no block.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// The reports, and what the checks concluded.
#[derive(Debug, Default)]
pub(crate) struct BlockReports {
    inner: Mutex<Inner>,
    /// Complete reports received, published on each.
    pub(crate) received: tokio::sync::watch::Sender<u64>,
    /// A batch of checks is running.
    pub(crate) checking: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    reports: HashMap<DatanodeId, Arc<BlockReport>>,
    /// Locations the datanode said it does not hold: (block, datanode).
    missing: BTreeSet<((u64, u64), DatanodeId)>,
    /// Candidates the datanode said it holds, with the report they were missing from: not
    /// checked again until a newer report.
    held: HashMap<((u64, u64), DatanodeId), Instant>,
    /// Candidates the datanodes answered about.
    checked: u64,
    /// Replicas the last orphan sweep found unreferenced, with when the report that listed
    /// them then was received.
    suspects: HashMap<((u64, u64), DatanodeId), Instant>,
    /// Replicas logged for deletion as orphans.
    orphans: u64,
    /// Reports received when the last orphan sweep ran.
    swept_at: u64,
    /// When the last orphan sweep ran.
    last_sweep: Option<Instant>,
    /// Datanodes whose report stream is being received.
    streaming: std::collections::HashSet<DatanodeId>,
}

/// A report stream being received; ends it when dropped.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    reports: Arc<BlockReports>,
    uuid: DatanodeId,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.reports.lock().streaming.remove(&self.uuid);
    }
}

/// A reported replica: (container id, local id) and its datanode.
pub(crate) type Replica = ((u64, u64), DatanodeId);

/// A location to check: absent from its datanode's last report.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) datanode: DatanodeDetails,
    pub(crate) block: BlockId,
    /// When the report it is missing from was received.
    pub(crate) report: Instant,
}

impl BlockReports {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The last complete report of every datanode that sent one.
    pub(crate) fn snapshot(&self) -> HashMap<DatanodeId, Arc<BlockReport>> {
        self.lock().reports.clone()
    }

    /// Locations found missing, by block.
    pub(crate) fn missing(&self) -> HashMap<(u64, u64), BTreeSet<DatanodeId>> {
        let mut out: HashMap<(u64, u64), BTreeSet<DatanodeId>> = HashMap::new();
        for (b, d) in &self.lock().missing {
            out.entry(*b).or_default().insert(d.clone());
        }
        out
    }

    /// Whether `c` was already found held since the report it is missing from.
    pub(crate) fn checked(&self, c: &Candidate) -> bool {
        let k = (
            (c.block.container_id, c.block.local_id),
            c.datanode.uuid.clone(),
        );
        self.lock().held.get(&k) == Some(&c.report)
    }

    /// After a complete scan: forgets what no longer applies — missing locations the scan
    /// knew of (`seen`) but no longer found recorded (`still_missing` lacks them: repaired or
    /// deleted), and checks made against a report since replaced. Locations found missing
    /// while the scan ran are kept for the next pass.
    pub(crate) fn prune(
        &self,
        seen: &BTreeSet<((u64, u64), DatanodeId)>,
        still_missing: &BTreeSet<((u64, u64), DatanodeId)>,
    ) {
        let mut inner = self.lock();
        let Inner {
            reports,
            missing,
            held,
            ..
        } = &mut *inner;
        missing.retain(|e| !seen.contains(e) || still_missing.contains(e));
        held.retain(|(_, d), at| reports.get(d).is_some_and(|r| r.received == *at));
    }

    /// Locations found missing, as (block, datanode) pairs.
    pub(crate) fn missing_pairs(&self) -> BTreeSet<((u64, u64), DatanodeId)> {
        self.lock().missing.clone()
    }

    /// Starts receiving a report stream from `uuid`: one at a time per datanode.
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] while another stream of that datanode runs.
    pub(crate) fn begin_stream(
        self: &Arc<Self>,
        uuid: &DatanodeId,
    ) -> Result<StreamGuard, OmError> {
        let mut inner = self.lock();
        if !inner.streaming.insert(uuid.clone()) {
            return Err(OmError::InvalidArgument(format!(
                "a block report from {uuid} is already being received"
            )));
        }
        Ok(StreamGuard {
            reports: Arc::clone(self),
            uuid: uuid.clone(),
        })
    }

    /// Missing locations known, candidates checked and orphans logged since the om started.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let inner = self.lock();
        (inner.missing.len() as u64, inner.checked, inner.orphans)
    }

    /// Whether an orphan sweep is due at `now`: a report arrived since the last one, and at
    /// least `gap` passed (a sweep reads every key; reports of many datanodes must not make it
    /// run on every pass). Marks it done when due.
    pub(crate) fn sweep_due(&self, now: Instant, gap: Duration) -> bool {
        let received = *self.received.borrow();
        let mut inner = self.lock();
        if inner.swept_at == received
            || inner
                .last_sweep
                .is_some_and(|at| now.saturating_duration_since(at) < gap)
        {
            return false;
        }
        inner.swept_at = received;
        inner.last_sweep = Some(now);
        true
    }

    /// Of the replicas a sweep found `unreferenced` (each with when the report listing it was
    /// received), the orphans: those the previous sweep found unreferenced too, in an older
    /// report of the same datanode. The rest become the suspects of the next sweep.
    pub(crate) fn confirm_orphans(&self, unreferenced: Vec<(Replica, Instant)>) -> Vec<Replica> {
        let mut inner = self.lock();
        let mut orphans = Vec::new();
        let mut suspects = HashMap::new();
        for (replica, report) in unreferenced {
            match inner.suspects.get(&replica) {
                Some(first) if *first < report => orphans.push(replica),
                Some(first) => {
                    suspects.insert(replica, *first);
                }
                None => {
                    suspects.insert(replica, report);
                }
            }
        }
        inner.suspects = suspects;
        orphans
    }

    /// Counts `n` orphans logged for deletion.
    pub(crate) fn orphans_logged(&self, n: u64) {
        self.lock().orphans += n;
    }
}

/// What a datanode answered about a block it was recorded to hold.
enum Check {
    Held,
    Missing,
    Unknown,
}

async fn check(
    c: &Candidate,
    token: Option<&BlockToken>,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Check {
    let ask = async {
        let mut client = crate::reconstruction::datanode_client(&c.datanode, tls)
            .await
            .ok()?;
        Some(
            client
                .get_block(proto_crate::block_token::request(
                    dn_pb::GetBlockRequest {
                        block_id: Some(c.block.into()),
                    },
                    token,
                ))
                .await,
        )
    };
    match tokio::time::timeout(CHECK_TIMEOUT, ask).await {
        Ok(Some(Ok(_))) => Check::Held,
        Ok(Some(Err(status))) => match proto_crate::result_code(&status) {
            // A replica of another index is not the one recorded either.
            ResultCode::NoSuchBlock
            | ResultCode::ContainerNotFound
            | ResultCode::ReplicaIndexMismatch => Check::Missing,
            _ => Check::Unknown,
        },
        _ => Check::Unknown,
    }
}

impl OzoneManager {
    /// Records a complete block report of `datanode` listing `blocks` (container id, local
    /// id, wire replica index: 0 for a replicated block), replacing its previous report. Returns the number of distinct blocks recorded.
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a datanode not registered at that address, or a report
    /// of more than [`MAX_REPORTED_BLOCKS`] blocks.
    pub fn record_block_report(
        &self,
        datanode: &DatanodeDetails,
        mut blocks: Vec<(u64, u64, u32)>,
    ) -> Result<usize, OmError> {
        if self.datanode(&datanode.uuid).as_ref() != Some(datanode) {
            return Err(OmError::InvalidArgument(format!(
                "block report from {datanode}, which is not registered at that address"
            )));
        }
        if blocks.len() > MAX_REPORTED_BLOCKS {
            return Err(OmError::InvalidArgument(format!(
                "block report of {} blocks; at most {MAX_REPORTED_BLOCKS}",
                blocks.len()
            )));
        }
        blocks.sort_unstable();
        blocks.dedup_by_key(|&mut (c, l, _)| (c, l));
        let n = blocks.len();
        let report = Arc::new(BlockReport {
            blocks,
            received: self.config.clock.now(),
        });
        {
            let registered: BTreeSet<DatanodeId> = self
                .datanode_statuses()
                .into_iter()
                .map(|s| s.details.uuid)
                .collect();
            let mut inner = self.block_reports.lock();
            inner.reports.retain(|d, _| registered.contains(d));
            // A block the datanode lists again is not missing there any more.
            inner
                .missing
                .retain(|(b, d)| *d != datanode.uuid || !report.contains(*b));
            inner.reports.insert(datanode.uuid.clone(), report);
        }
        self.block_reports.received.send_modify(|n| *n += 1);
        tracing::debug!(datanode = %datanode, blocks = n, "block report");
        Ok(n)
    }

    /// The last complete block report of `uuid`, if it sent one.
    #[must_use]
    pub fn block_report(&self, uuid: &DatanodeId) -> Option<Arc<BlockReport>> {
        self.block_reports.lock().reports.get(uuid).cloned()
    }

    /// A receiver of the number of complete block reports received (to wait for the next one
    /// without polling).
    #[must_use]
    pub fn watch_block_reports(&self) -> tokio::sync::watch::Receiver<u64> {
        self.block_reports.received.subscribe()
    }

    /// Asks each candidate's datanode whether it holds the block; records the ones it does not
    /// hold as missing and the ones it does as checked against their report. Returns how many
    /// were found missing.
    pub(crate) async fn check_candidates(&self, candidates: Vec<Candidate>) -> usize {
        // With security on, the checks carry the om's service token.
        let token = match self.service_token() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "no service token; block report checks skipped");
                return 0;
            }
        };
        let mut found = 0;
        for batch in candidates.chunks(CHECKS_IN_FLIGHT) {
            let mut set = tokio::task::JoinSet::new();
            for c in batch.iter().cloned() {
                let token = token.clone();
                let tls = self.config().tls.clone();
                set.spawn(async move {
                    let answer = check(&c, token.as_ref(), tls.as_ref()).await;
                    (c, answer)
                });
            }
            while let Some(done) = set.join_next().await {
                let Ok((c, answer)) = done else { continue };
                let k = (
                    (c.block.container_id, c.block.local_id),
                    c.datanode.uuid.clone(),
                );
                let mut inner = self.block_reports.lock();
                if !matches!(answer, Check::Unknown) {
                    inner.checked += 1;
                }
                match answer {
                    Check::Held => {
                        inner.held.insert(k, c.report);
                    }
                    Check::Missing => {
                        tracing::warn!(datanode = %c.datanode, block = %c.block,
                            "block missing from a live datanode: it will be repaired");
                        inner.missing.insert(k);
                        found += 1;
                    }
                    Check::Unknown => {}
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(l: u64, d: u128) -> ((u64, u64), DatanodeId) {
        ((1, l), DatanodeId::from_u128(d))
    }

    /// A location found missing while a scan ran survives that scan's prune; one the scan knew
    /// of and no longer found recorded goes.
    #[test]
    fn prune_keeps_what_the_scan_did_not_see() {
        let r = BlockReports::default();
        r.lock().missing.insert(replica(1, 1));
        let seen = r.missing_pairs();
        r.lock().missing.insert(replica(2, 1)); // found by a check during the scan
        r.prune(&seen, &BTreeSet::new());
        assert_eq!(r.missing_pairs(), BTreeSet::from([replica(2, 1)]));
    }

    /// An orphan needs two sweeps, the second on a newer report of its datanode.
    #[test]
    fn an_orphan_needs_a_newer_report() {
        let r = BlockReports::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        assert!(r.confirm_orphans(vec![(replica(1, 1), t0)]).is_empty());
        assert!(
            r.confirm_orphans(vec![(replica(1, 1), t0)]).is_empty(),
            "the same report twice is not two looks"
        );
        assert_eq!(
            r.confirm_orphans(vec![(replica(1, 1), t1)]),
            vec![replica(1, 1)]
        );
        // A replica referenced again in between starts over.
        assert!(r.confirm_orphans(vec![(replica(2, 1), t0)]).is_empty());
        assert!(r.confirm_orphans(vec![]).is_empty());
        assert!(r.confirm_orphans(vec![(replica(2, 1), t1)]).is_empty());
    }
}
