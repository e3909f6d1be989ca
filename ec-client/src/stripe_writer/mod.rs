//! The flush stage of EC writes: puts encoded stripes into block groups.
//!
//! For each stripe: every non-empty data cell and every parity cell goes out
//! as a WriteChunk to its replica index's datanode, then PutBlock commits the
//! cumulative chunk list with `blockGroupLength` on all d+p indexes (indexes
//! past the data get an empty record). Pipelined writes have several stripes
//! in flight, each index on a lane of its own ([`window`]); serial mode
//! ([`StripeWriter::write_stripe`]) writes one stripe at a time, its cells one
//! after another. These per-stripe PutBlocks are `BlockCommit::Flush`:
//! published on the datanodes, not synced. A full group (d × block size data
//! bytes) is closed, once its last stripe is acknowledged everywhere, with an
//! eof PutBlock (`BlockCommit::Close`: synced and durable; at least d indexes
//! must close) and the om allocates the next; so is the last group at `close`.
//!
//! When a stripe fails on any index (unavailable, deadline, error code) the
//! writer excludes the failed datanodes, seals the group at its last
//! acknowledged length (a closing PutBlock of what the last fully successful
//! stripe committed, on every index that did not fail and, best effort, on a
//! failed one whose datanode answered with an error code that is not
//! transient; a group with nothing
//! acknowledged is dropped), allocates a new group and rewrites the whole
//! stripe there — up to `ec_write_retries` times (Ozone's
//! `EcKeyOutputStream` stripe-retry behaviour). A group kept in the key is
//! durable on at least d indexes, or the write fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use block_stream::{BlockOutputStream, BlockStreamError};
use bytes::Bytes;
use ec_codec::{EcReplicationConfig, ReplicaIndex};
use futures::future::join_all;
use proto_crate::{BLOCK_GROUP_LENGTH_KEY, BlockCommit, BlockGroup, DatanodeId};

use crate::client::ClientShared;
use crate::{ClientError, Result};

mod window;

/// One encoded stripe: d data cells (the last ones possibly short or empty)
/// and p parity cells, each as long as the first data cell.
#[derive(Debug, Clone)]
pub(crate) struct EncodedStripe {
    /// Position of the stripe in the key, from 0.
    pub(crate) seq: u64,
    /// Data bytes in the stripe.
    pub(crate) len: u64,
    /// d data cells then p parity cells.
    pub(crate) cells: Vec<Bytes>,
}

/// How long the seal of a failed group waits for the best-effort close of a
/// failed index ([`StripeWriter::seal_group_at_acked`]) once it is sent.
const CUT_BACK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The error a best-effort close of `stream` that missed [`CUT_BACK_GRACE`]
/// is logged with. The close is abandoned: its datanode may or may not have
/// applied it, so the replica holds the group's length or what it published.
fn cut_back_late(stream: &BlockOutputStream) -> BlockStreamError {
    BlockStreamError::Timeout {
        kind: proto_crate::RpcKind::PutBlock,
        datanode: stream.locations().collect::<Vec<_>>().join(","),
        block: Some(stream.block_id()),
        after: CUT_BACK_GRACE,
    }
}

/// The failures of one stripe on the open group, as
/// [`StripeWriter::seal_group_at_acked`] needs them.
#[derive(Debug)]
struct GroupFailure {
    /// 0-based stream indexes that failed.
    failed: BTreeSet<usize>,
    /// Those of them whose datanode answered with a result code that is not
    /// transient (`IO_EXCEPTION`, `BLOCK_CLOSED`, `CHUNK_OFFSET_MISMATCH`, a
    /// refused token, …: anything but `UNAVAILABLE`, and not a broken
    /// connection or a deadline): it is up, may accept a close, and may hold
    /// stripes past the group's acknowledged length.
    answered: BTreeSet<usize>,
    /// The first failure.
    cause: ClientError,
}

/// Progress counters of one EC writer, for tests and the benchmark.
#[derive(Debug, Default)]
pub(crate) struct WriteCounters {
    /// Stripes encoded by the producer.
    pub(crate) encoded: AtomicU64,
    /// Stripes acknowledged by the flush stage.
    pub(crate) flushed: AtomicU64,
    /// Largest `encoded - flushed` seen.
    pub(crate) max_in_flight: AtomicU64,
    /// Largest number of stripes handed to the lanes and not yet acknowledged.
    pub(crate) max_window: AtomicU64,
    /// Stripes encoded at the moment the first stripe was acknowledged.
    pub(crate) encoded_when_first_flushed: AtomicU64,
    /// Stripes rewritten on a new block group after a failure.
    pub(crate) rewritten: AtomicU64,
    /// Block groups allocated.
    pub(crate) groups_allocated: AtomicU64,
    /// The group being written, if any.
    pub(crate) current_group: std::sync::Mutex<Option<BlockGroup>>,
    /// Flush-stage progress, for callers that wait on it.
    pub(crate) progress: tokio::sync::watch::Sender<EcWriteProgress>,
}

/// Progress of an EC writer's flush stage, observable through
/// [`EcKeyOutputStream::progress`](crate::EcKeyOutputStream::progress).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EcWriteProgress {
    /// Stripes acknowledged by every datanode (after PutBlock).
    pub stripes_flushed: u64,
    /// Whether the flush stage has ended (queue closed, or a failure it
    /// could not recover from; the next `write` or `close` reports which).
    pub flush_stage_ended: bool,
}

impl WriteCounters {
    pub(crate) fn note_encoded(&self) {
        let e = self.encoded.fetch_add(1, Ordering::SeqCst) + 1;
        let f = self.flushed.load(Ordering::SeqCst);
        self.max_in_flight
            .fetch_max(e.saturating_sub(f), Ordering::SeqCst);
    }

    fn note_flushed(&self) {
        let f = self.flushed.fetch_add(1, Ordering::SeqCst);
        if f == 0 {
            self.encoded_when_first_flushed
                .store(self.encoded.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        self.progress.send_modify(|p| p.stripes_flushed = f + 1);
    }

    pub(crate) fn note_flush_stage_ended(&self) {
        self.progress.send_modify(|p| p.flush_stage_ended = true);
    }
}

/// The block group being written.
#[derive(Debug)]
struct OpenGroup {
    group: BlockGroup,
    /// One stream per replica index 1..=d+p.
    streams: Vec<BlockOutputStream>,
    /// Data bytes acknowledged (committed by PutBlock on every index).
    acked: u64,
    /// Each index's block length when `acked` was acknowledged.
    acked_lens: Vec<u64>,
}

/// Writes encoded stripes into block groups, surviving datanode failures.
#[derive(Debug)]
pub(crate) struct StripeWriter {
    shared: Arc<ClientShared>,
    session_id: u64,
    ec: EcReplicationConfig,
    group_capacity: u64,
    parallel: bool,
    max_retries: u32,
    group: Option<OpenGroup>,
    finished: Vec<BlockGroup>,
    excluded: BTreeSet<DatanodeId>,
    acked: u64,
    counters: Arc<WriteCounters>,
}

impl StripeWriter {
    pub(crate) fn new(
        shared: Arc<ClientShared>,
        session_id: u64,
        ec: EcReplicationConfig,
        group_capacity: u64,
        parallel: bool,
        counters: Arc<WriteCounters>,
    ) -> Self {
        let max_retries = shared.read.config.ec_write_retries;
        Self {
            shared,
            session_id,
            ec,
            group_capacity,
            parallel,
            max_retries,
            group: None,
            finished: Vec::new(),
            excluded: BTreeSet::new(),
            acked: 0,
            counters,
        }
    }

    async fn open_group(&mut self) -> Result<&mut OpenGroup> {
        if self.group.is_none() {
            let group = self
                .shared
                .om
                .allocate_block_group(self.session_id, self.excluded.iter().cloned().collect())
                .await?;
            self.counters
                .groups_allocated
                .fetch_add(1, Ordering::Relaxed);
            *self
                .counters
                .current_group
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(group.clone());
            let cfg = self.shared.read.xceivers.config();
            let token = crate::block_tokens::for_writer(&self.shared.om, self.session_id, &group);
            let mut streams = Vec::with_capacity(self.ec.total());
            for ri in self.ec.replica_indexes() {
                let node = group.pipeline.nodes_for(ri).next().ok_or_else(|| {
                    ClientError::Internal(format!(
                        "om allocated group {} without replica index {ri}",
                        group.id()
                    ))
                })?;
                streams.push(BlockOutputStream::new(
                    group.block_id(ri),
                    vec![
                        self.shared
                            .read
                            .xceivers
                            .client(&node.address)?
                            .with_token(token.clone()),
                    ],
                    cfg.checksum_type,
                    cfg.bytes_per_checksum,
                )?);
            }
            self.group = Some(OpenGroup {
                group,
                acked_lens: vec![0; streams.len()],
                streams,
                acked: 0,
            });
        }
        self.group
            .as_mut()
            .ok_or_else(|| ClientError::Internal("no open block group".into()))
    }

    /// Writes one stripe, rewriting it on a new group after failures.
    ///
    /// # Errors
    /// The last failure once `ec_write_retries` rewrites failed; om errors
    /// (e.g. not enough datanodes left outside the exclude list).
    pub(crate) async fn write_stripe(&mut self, stripe: &EncodedStripe) -> Result<()> {
        let mut attempts = 0u32;
        let mut last_cause: Option<String> = None;
        loop {
            let parallel = self.parallel;
            let capacity = self.group_capacity;
            let group = match self.open_group().await {
                Ok(g) => g,
                // No new group after a failure (say, too few datanodes left
                // outside the exclude list): report the failure that caused
                // the exclusions, not just the om's refusal.
                Err(e) if attempts > 0 => {
                    return Err(ClientError::WriteFailed {
                        stripe: stripe.seq,
                        attempts,
                        excluded: self.excluded.iter().cloned().collect(),
                        previous: last_cause,
                        cause: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            };
            match Self::try_write(group, stripe, parallel).await {
                Ok(()) => {
                    if self.group.as_ref().is_some_and(|g| g.acked >= capacity) {
                        self.close_open_group().await?;
                    }
                    break;
                }
                Err(failures) => {
                    attempts += 1;
                    let failure = self.note_failures(failures, stripe.seq);
                    self.seal_group_at_acked(&failure, attempts).await?;
                    if attempts > self.max_retries {
                        return Err(ClientError::WriteFailed {
                            stripe: stripe.seq,
                            attempts,
                            excluded: self.excluded.iter().cloned().collect(),
                            previous: None,
                            cause: Box::new(failure.cause),
                        });
                    }
                    last_cause = Some(failure.cause.to_string());
                    self.counters.rewritten.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.acked += stripe.len;
        self.counters.note_flushed();
        Ok(())
    }

    /// WriteChunks then a publishing PutBlock on every index; returns the
    /// failed (0-based stream index, error) pairs, or `Ok` when all
    /// succeeded.
    async fn try_write(
        group: &mut OpenGroup,
        stripe: &EncodedStripe,
        parallel: bool,
    ) -> std::result::Result<(), Vec<(usize, BlockStreamError)>> {
        let mut failures = Vec::new();
        {
            let writes = group
                .streams
                .iter_mut()
                .zip(stripe.cells.iter().cloned())
                .enumerate()
                .filter(|(_, (_, cell))| !cell.is_empty())
                .map(|(i, (s, cell))| async move { (i, s.write_chunk(cell).await) });
            let results = if parallel {
                join_all(writes).await
            } else {
                let mut out = Vec::new();
                for w in writes {
                    out.push(w.await);
                }
                out
            };
            failures.extend(
                results
                    .into_iter()
                    .filter_map(|(i, r)| r.err().map(|e| (i, e))),
            );
        }
        if !failures.is_empty() {
            return Err(failures);
        }
        let length = group.acked + stripe.len;
        let mut meta = BTreeMap::new();
        meta.insert(BLOCK_GROUP_LENGTH_KEY.to_string(), length.to_string());
        // Published only, also for the stripe that fills the group: its
        // close follows once every index acknowledged it, so that a failure
        // here leaves no index closed past what the group keeps.
        let results = join_all(
            group
                .streams
                .iter_mut()
                .map(|s| s.put_block(&meta, BlockCommit::Flush)),
        )
        .await;
        failures.extend(
            results
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| r.err().map(|e| (i, e))),
        );
        if !failures.is_empty() {
            return Err(failures);
        }
        group.acked = length;
        group.acked_lens = group
            .streams
            .iter()
            .map(BlockOutputStream::committed)
            .collect();
        Ok(())
    }

    fn failed_uuids(&self, failures: &[(usize, BlockStreamError)]) -> Vec<DatanodeId> {
        let Some(g) = &self.group else {
            return Vec::new();
        };
        failures
            .iter()
            .filter_map(|(i, _)| {
                let ri = ReplicaIndex::from_unit(*i)?;
                g.group
                    .pipeline
                    .nodes_for(ri)
                    .next()
                    .map(|d| d.uuid.clone())
            })
            .collect()
    }

    /// Logs the failures of a stripe (`stripe`: its position in the key) on
    /// the open group, excludes their datanodes from the groups allocated
    /// next, and sums them up for the seal.
    fn note_failures(
        &mut self,
        failures: Vec<(usize, BlockStreamError)>,
        stripe: u64,
    ) -> GroupFailure {
        let failed_uuids = self.failed_uuids(&failures);
        let failed = failures.iter().map(|(i, _)| *i).collect();
        let answered = failures
            .iter()
            .filter(|(_, e)| matches!(e, BlockStreamError::Datanode { .. }) && !e.is_transient())
            .map(|(i, _)| *i)
            .collect();
        let first = failures.into_iter().next().map(|(_, e)| e);
        let group = self.group.as_ref().map(|g| g.group.id().to_string());
        tracing::debug!(stripe, ?group, ?failed_uuids, error = ?first, "stripe write failed; rewriting on a new group");
        self.excluded.extend(failed_uuids);
        let cause = first.map_or_else(
            || ClientError::Internal("a stripe write failed without an error".into()),
            ClientError::from,
        );
        GroupFailure {
            failed,
            answered,
            cause,
        }
    }

    /// Gives up on the open group after a failed stripe: it keeps what the
    /// last fully acknowledged stripe committed (nothing, if nothing was, in
    /// which case it is dropped), made durable by a closing PutBlock at that
    /// length on every index that did not fail. A failed index whose
    /// datanode answered ([`GroupFailure::answered`]) is closed at that
    /// length too, best effort, so that it keeps no stripe the group does
    /// not (a lane that ran ahead of the others published more); it does not
    /// count towards the d closes the group needs, and the seal waits for it
    /// at most [`CUT_BACK_GRACE`] (its datanode just failed a call). Such an
    /// index, once closed, is a replica of the group like the others: the
    /// datanode's own checks (a failed sync refuses the close; the block
    /// scanner reports a lost file) decide whether it is healthy, not the
    /// client.
    ///
    /// # Errors
    /// [`ClientError::WriteFailed`] when fewer than d of the other indexes
    /// closed, with the last closing failure as `cause` and the stripe's
    /// failure as `previous`: the group's acknowledged bytes are not durable
    /// and cannot be rewritten.
    async fn seal_group_at_acked(&mut self, failure: &GroupFailure, attempts: u32) -> Result<()> {
        if let Some(g) = self.group.as_mut()
            && g.acked > 0
        {
            let mut meta = BTreeMap::new();
            meta.insert(BLOCK_GROUP_LENGTH_KEY.to_string(), g.acked.to_string());
            let meta = &meta;
            let closing = g
                .streams
                .iter_mut()
                .zip(&g.acked_lens)
                .enumerate()
                .filter(|(i, _)| !failure.failed.contains(i) || failure.answered.contains(i))
                .map(|(i, (s, len))| async move {
                    if !failure.failed.contains(&i) {
                        return (i, s.close_at(*len, meta).await);
                    }
                    let late = cut_back_late(s);
                    let bounded = tokio::time::timeout(CUT_BACK_GRACE, s.close_at(*len, meta));
                    (i, bounded.await.unwrap_or(Err(late)))
                });
            let (cut_back, results): (Vec<_>, Vec<_>) = join_all(closing)
                .await
                .into_iter()
                .partition(|(i, _)| failure.failed.contains(i));
            for (index, r) in cut_back {
                if let Err(e) = r {
                    tracing::debug!(index, error = %e, "a failed index was not cut back to the group's acknowledged length");
                }
            }
            if let Err(e) = self.require_durable(results) {
                return Err(ClientError::WriteFailed {
                    stripe: self.acked / self.ec.stripe_size(),
                    attempts,
                    excluded: self.excluded.iter().cloned().collect(),
                    previous: Some(failure.cause.to_string()),
                    cause: Box::new(e),
                });
            }
        }
        self.finish_group();
        Ok(())
    }

    /// Closes the open group with an eof PutBlock on every index (its bytes
    /// become durable) and moves it to the finished groups.
    ///
    /// # Errors
    /// [`ClientError::WriteFailed`] when fewer than d indexes closed (the
    /// group's bytes are not durable; the key must not commit).
    async fn close_open_group(&mut self) -> Result<()> {
        if let Some(g) = self.group.as_mut()
            && g.acked > 0
        {
            let mut meta = BTreeMap::new();
            meta.insert(BLOCK_GROUP_LENGTH_KEY.to_string(), g.acked.to_string());
            let meta = &meta;
            let results = join_all(
                g.streams
                    .iter_mut()
                    .enumerate()
                    .map(|(i, s)| async move { (i, s.put_block(meta, BlockCommit::Close).await) }),
            )
            .await;
            if let Err(e) = self.require_durable(results) {
                return Err(ClientError::WriteFailed {
                    stripe: self.acked / self.ec.stripe_size(),
                    attempts: 1,
                    excluded: self.excluded.iter().cloned().collect(),
                    previous: None,
                    cause: Box::new(e),
                });
            }
        }
        self.finish_group();
        Ok(())
    }

    /// Checks that at least d indexes of the open group closed durably
    /// (`results`: 0-based stream index and the closing PutBlock's outcome).
    /// The datanodes whose close failed are logged and excluded from the
    /// groups allocated next; the om's ReplicationManager rebuilds such an
    /// index once its datanode reports it missing.
    ///
    /// # Errors
    /// The last closing failure when fewer than d closed.
    fn require_durable(&mut self, results: Vec<(usize, block_stream::Result<()>)>) -> Result<()> {
        let group = self.group.as_ref().map(|g| g.group.id().to_string());
        let mut closed = 0;
        let mut failures = Vec::new();
        for (i, r) in results {
            match r {
                Ok(()) => closed += 1,
                Err(e) => {
                    tracing::warn!(block = ?group, error = %e, "closing PutBlock failed");
                    failures.push((i, e));
                }
            }
        }
        let failed_uuids = self.failed_uuids(&failures);
        self.excluded.extend(failed_uuids);
        if closed >= self.ec.data() {
            return Ok(());
        }
        Err(failures.pop().map_or_else(
            || ClientError::Internal(format!("fewer than d indexes of {group:?} to close")),
            |(_, e)| ClientError::from(e),
        ))
    }

    fn finish_group(&mut self) {
        if let Some(g) = self.group.take()
            && g.acked > 0
        {
            self.finished.push(BlockGroup {
                length: g.acked,
                ..g.group
            });
        }
    }

    /// Closes the open group with an eof PutBlock, which makes its bytes
    /// durable, and returns every group with its acknowledged length, and
    /// the total.
    ///
    /// # Errors
    /// [`ClientError::WriteFailed`] when fewer than d indexes of the open
    /// group closed (its bytes are not durable; the key must not commit).
    pub(crate) async fn finish(mut self) -> Result<(Vec<BlockGroup>, u64)> {
        self.close_open_group().await?;
        Ok((self.finished, self.acked))
    }
}
