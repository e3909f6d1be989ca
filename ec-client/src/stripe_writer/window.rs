//! The pipelined flush stage: a window of stripes in flight, each replica index on a lane of
//! its own (ARCHITECTURE.md, "One EC write").
//!
//! Written one stripe at a time, every stripe waited for its slowest index and then for a
//! round of PutBlocks before the next stripe's cells left: the datanodes' writes of one stripe
//! and the transfer of the next never overlapped. `cargo xtask bench write` measured the
//! cells' WriteChunks at 13–14 ms of each rs-3-2-1024k stripe's 15 ms, with the process
//! using 1.3 of the machine's 2 cores.
//!
//! - **Lanes.** Each lane owns its index's [`BlockOutputStream`] and takes the group's
//!   stripes in order: the stripe's cell as a WriteChunk, then a publishing PutBlock
//!   ([`BlockCommit::Flush`]) of its chunks so far, carrying the group's length as of that
//!   stripe. That order is what a datanode needs: a chunk at the end of what it holds, a
//!   PutBlock after its chunk, PutBlocks in order (it refuses one below what it published).
//!   Lanes do not wait for each other, so a fast index goes on to the next stripe while a
//!   slow one is still writing this one.
//! - **Window.** At most `ec_stripes_in_flight` stripes are handed to the lanes and not yet
//!   published by all of them ([`Window`]); a stripe is acknowledged once every lane
//!   published it, in order. The group's acknowledged length is its acknowledged stripes'.
//!   One stripe in flight is the old behaviour: every index then waits for the others.
//! - **Failures.** A failure on any lane stops the group: each lane finishes the operation in
//!   hand and gives its stream back, the group is sealed at its acknowledged length on every
//!   index that did not fail and, best effort, on a failed one whose datanode answered
//!   ([`StripeWriter::seal_group_at_acked`]; it may have run ahead), the failed datanodes
//!   are excluded, and every stripe not acknowledged is written again, in order, on a new
//!   group. A stripe is rewritten at most `ec_write_retries` times (Ozone's
//!   `EcKeyOutputStream` stripe retries).
//! - **Groups.** A full group is closed (eof PutBlock on every index, synced) once all its
//!   stripes are acknowledged, before the next group's first stripe is written.
//!
//! Bounds: the window's stripes (each d+p cells) are held until acknowledged, besides the
//! producer's queue (`ec_stripe_queue_size`) and the stripe being encoded: with the defaults
//! (4 + 2 + 1 stripes) about 35 MiB per rs-3-2-1024k writer and 63 MiB per rs-6-3-1024k one.
//! Each lane's queue holds at most the window. The window drains at each group's end (the
//! group closes once all its stripes are acknowledged), so a key of many small groups
//! pipelines less.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use block_stream::{BlockOutputStream, BlockStreamError};
use proto_crate::{BLOCK_GROUP_LENGTH_KEY, BlockCommit, BlockGroup};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{EncodedStripe, StripeWriter};
use crate::{ClientError, Result};

/// A stripe handed to the lanes: the stripe, and the metadata its PutBlocks publish (the
/// group's length as of this stripe).
#[derive(Debug)]
struct LaneOp {
    stripe: Arc<EncodedStripe>,
    meta: BTreeMap<String, String>,
}

/// A stripe to write, with the times it was rewritten on a new group after failures.
#[derive(Debug)]
struct Queued {
    stripe: Arc<EncodedStripe>,
    rewrites: u32,
}

/// One lane's outcome for one stripe.
#[derive(Debug)]
struct LaneEvent {
    /// 0-based stream index.
    unit: usize,
    seq: u64,
    outcome: Outcome,
}

/// What a lane reports of a stripe.
#[derive(Debug)]
enum Outcome {
    /// The cell is written and a PutBlock published it.
    Published,
    /// The cell's WriteChunk or its PutBlock failed; the lane stopped.
    Failed(BlockStreamError),
    /// The lane's task panicked (a bug, not a datanode's failure): the write fails.
    Lost,
}

/// Reports [`Outcome::Lost`] for the stripe in hand if the lane unwinds, so that the flush
/// stage does not wait forever for a stripe no lane will publish (the other lanes keep the
/// event channel open).
struct LaneGuard {
    unit: usize,
    seq: u64,
    events: mpsc::UnboundedSender<LaneEvent>,
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.events.send(LaneEvent {
                unit: self.unit,
                seq: self.seq,
                outcome: Outcome::Lost,
            });
        }
    }
}

/// The stripes handed to the open group's lanes and not yet published by all of them, in
/// order, and what each lane published last.
#[derive(Debug)]
struct Window<T> {
    pending: VecDeque<(u64, T)>,
    published: Vec<Option<u64>>,
}

impl<T> Window<T> {
    fn new(lanes: usize) -> Self {
        Self {
            pending: VecDeque::new(),
            published: vec![None; lanes],
        }
    }

    fn len(&self) -> usize {
        self.pending.len()
    }

    fn push(&mut self, seq: u64, item: T) {
        self.pending.push_back((seq, item));
    }

    /// Records that lane `unit` published stripe `seq` (lanes publish in order) and returns
    /// the stripes every lane has now published, oldest first.
    fn published(&mut self, unit: usize, seq: u64) -> Vec<T> {
        if let Some(p) = self.published.get_mut(unit) {
            *p = Some(seq);
        }
        let mut done = Vec::new();
        while let Some((front, _)) = self.pending.front() {
            let everywhere = self
                .published
                .iter()
                .all(|p| p.is_some_and(|p| p >= *front));
            if !everywhere {
                break;
            }
            if let Some((_, item)) = self.pending.pop_front() {
                done.push(item);
            }
        }
        done
    }

    /// Every stripe not yet published everywhere, oldest first, and a fresh window.
    fn drain(&mut self) -> Vec<T> {
        self.published.fill(None);
        self.pending.drain(..).map(|(_, t)| t).collect()
    }
}

/// The open group's lanes: one task per replica index.
#[derive(Debug)]
struct Lanes {
    senders: Vec<mpsc::UnboundedSender<Arc<LaneOp>>>,
    tasks: Vec<JoinHandle<BlockOutputStream>>,
    events: mpsc::UnboundedReceiver<LaneEvent>,
    /// Set by [`Lanes::stop`]: a lane takes no further stripe from its queue.
    stopping: Arc<AtomicBool>,
}

impl Lanes {
    fn start(streams: Vec<BlockOutputStream>) -> Self {
        let (event_tx, events) = mpsc::unbounded_channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::with_capacity(streams.len());
        let mut tasks = Vec::with_capacity(streams.len());
        for (unit, stream) in streams.into_iter().enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            tasks.push(tokio::spawn(proto_crate::request_id::propagate(lane(
                stream,
                unit,
                rx,
                event_tx.clone(),
                Arc::clone(&stopping),
            ))));
        }
        Self {
            senders,
            tasks,
            events,
            stopping,
        }
    }

    /// Hands `op` to every lane (a lane that stopped after a failure has reported it, and
    /// takes nothing more).
    fn send(&self, op: &Arc<LaneOp>) {
        for s in &self.senders {
            let _ = s.send(Arc::clone(op));
        }
    }

    /// Stops the lanes: each finishes the operation in hand and leaves the stripes queued
    /// behind it. Returns the streams, in index order, and the events not yet received.
    ///
    /// # Errors
    /// [`ClientError::TaskLost`] when a lane panicked.
    async fn stop(mut self) -> Result<(Vec<BlockOutputStream>, Vec<LaneEvent>)> {
        self.stopping.store(true, Ordering::Release);
        self.senders.clear();
        let mut streams = Vec::with_capacity(self.tasks.len());
        // Each handle is awaited in place, so that a cancelled stop leaves the rest to
        // `Drop`, which aborts them.
        while let Some(t) = self.tasks.first_mut() {
            let stream = t
                .await
                .map_err(|e| ClientError::TaskLost(format!("an EC write lane: {e}")))?;
            self.tasks.remove(0);
            streams.push(stream);
        }
        let mut rest = Vec::new();
        while let Ok(ev) = self.events.try_recv() {
            rest.push(ev);
        }
        Ok((streams, rest))
    }

    async fn next_event(lanes: &mut Option<Lanes>) -> Option<LaneEvent> {
        match lanes {
            Some(l) => l.events.recv().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Lanes {
    /// Lanes of a writer that is dropped or failed are aborted, not left writing.
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One replica index's writes: for each stripe, its cell (a no-op when empty) then a
/// publishing PutBlock. Stops at its first failure, when the queue closes, or when `stopping`
/// is set (after the stripe in hand); returns its stream.
async fn lane(
    mut stream: BlockOutputStream,
    unit: usize,
    mut ops: mpsc::UnboundedReceiver<Arc<LaneOp>>,
    events: mpsc::UnboundedSender<LaneEvent>,
    stopping: Arc<AtomicBool>,
) -> BlockOutputStream {
    while let Some(op) = ops.recv().await {
        if stopping.load(Ordering::Acquire) {
            break;
        }
        let guard = LaneGuard {
            unit,
            seq: op.stripe.seq,
            events: events.clone(),
        };
        let cell = op.stripe.cells.get(unit).cloned().unwrap_or_default();
        let result = match stream.write_chunk(cell).await {
            Ok(()) => stream.put_block(&op.meta, BlockCommit::Flush).await,
            Err(e) => Err(e),
        };
        drop(guard);
        let failed = result.is_err();
        let event = LaneEvent {
            unit,
            seq: op.stripe.seq,
            outcome: result.map_or_else(Outcome::Failed, |()| Outcome::Published),
        };
        if events.send(event).is_err() || failed {
            break;
        }
    }
    stream
}

/// The error of a write whose lane `unit` (0-based stream index) panicked.
fn lane_lost(unit: usize) -> ClientError {
    ClientError::TaskLost(format!("the EC write lane of stream index {unit} panicked"))
}

/// The flush stage's state besides the writer's own.
struct Stage {
    window: Window<Queued>,
    lanes: Option<Lanes>,
    /// Stripes to write again on a new group, oldest first; before any new one.
    redo: VecDeque<Queued>,
    /// Data bytes handed to the open group (acknowledged and in the window).
    submitted: u64,
    /// The failure that made the last rewrite, for the error if the rewrite cannot start.
    last_cause: Option<String>,
}

impl StripeWriter {
    /// The pipelined flush stage: writes the stripes `rx` yields, up to `in_flight` at once,
    /// until the queue closes; then closes the last group. Returns every group with its
    /// acknowledged length, and the total.
    ///
    /// # Errors
    /// [`ClientError::WriteFailed`] once a stripe was rewritten `ec_write_retries` times, or a
    /// rewrite finds no group, or fewer than d indexes of a group closed; om errors;
    /// [`ClientError::TaskLost`] when a lane panicked.
    pub(crate) async fn run_windowed(
        mut self,
        mut rx: mpsc::Receiver<EncodedStripe>,
        in_flight: usize,
    ) -> Result<(Vec<BlockGroup>, u64)> {
        let in_flight = in_flight.max(1);
        let mut st = Stage {
            window: Window::new(self.ec.total()),
            lanes: None,
            redo: VecDeque::new(),
            submitted: 0,
            last_cause: None,
        };
        let mut input_open = true;
        loop {
            let room = st.window.len() < in_flight && st.submitted < self.group_capacity;
            if room && let Some(q) = st.redo.pop_front() {
                self.submit(&mut st, q).await?;
                continue;
            }
            if st.window.len() == 0 {
                if st.submitted >= self.group_capacity {
                    // Full and every stripe acknowledged: close it; the next stripe opens
                    // the next group.
                    self.stop_lanes(&mut st).await?;
                    self.close_open_group().await?;
                    st.submitted = 0;
                    continue;
                }
                if !input_open && st.redo.is_empty() {
                    break;
                }
            }
            tokio::select! {
                biased;
                ev = Lanes::next_event(&mut st.lanes), if st.window.len() > 0 => {
                    let ev = ev.ok_or_else(|| {
                        ClientError::TaskLost("the EC write lanes ended with stripes in flight".into())
                    })?;
                    match ev.outcome {
                        Outcome::Published => self.acknowledge(&mut st, ev.unit, ev.seq),
                        Outcome::Failed(e) => self.fail_group(&mut st, (ev.unit, e)).await?,
                        Outcome::Lost => return Err(lane_lost(ev.unit)),
                    }
                }
                s = rx.recv(), if room && input_open => match s {
                    Some(s) => {
                        let q = Queued { stripe: Arc::new(s), rewrites: 0 };
                        self.submit(&mut st, q).await?;
                    }
                    None => input_open = false,
                },
            }
        }
        self.stop_lanes(&mut st).await?;
        self.finish().await
    }

    /// Hands `q` to the open group's lanes, opening a group (and its lanes) first if none is.
    async fn submit(&mut self, st: &mut Stage, q: Queued) -> Result<()> {
        if st.lanes.is_none() {
            let streams = match self.open_group().await {
                Ok(g) => std::mem::take(&mut g.streams),
                // No new group for a rewrite (too few datanodes left outside the exclude
                // list): report the failure that caused the exclusions as well.
                Err(e) if q.rewrites > 0 => {
                    return Err(ClientError::WriteFailed {
                        stripe: q.stripe.seq,
                        attempts: q.rewrites,
                        excluded: self.excluded.iter().cloned().collect(),
                        previous: st.last_cause.clone(),
                        cause: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            };
            st.lanes = Some(Lanes::start(streams));
            st.submitted = 0;
        }
        let group_len = st.submitted + q.stripe.len;
        let op = Arc::new(LaneOp {
            stripe: Arc::clone(&q.stripe),
            meta: BTreeMap::from([(BLOCK_GROUP_LENGTH_KEY.to_string(), group_len.to_string())]),
        });
        if let Some(l) = &st.lanes {
            l.send(&op);
        }
        st.window.push(q.stripe.seq, q);
        st.submitted = group_len;
        self.counters
            .max_window
            .fetch_max(st.window.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Lane `unit` published stripe `seq`: stripes now published everywhere are acknowledged.
    fn acknowledge(&mut self, st: &mut Stage, unit: usize, seq: u64) {
        for q in st.window.published(unit, seq) {
            if let Some(g) = self.group.as_mut() {
                g.acked += q.stripe.len;
                for (len, cell) in g.acked_lens.iter_mut().zip(&q.stripe.cells) {
                    *len += cell.len() as u64;
                }
            }
            self.acked += q.stripe.len;
            self.counters.note_flushed();
        }
    }

    /// Stops the open group's lanes, if running, and gives the group its streams back;
    /// acknowledges what they published meanwhile. Returns the failures they reported.
    async fn stop_lanes(&mut self, st: &mut Stage) -> Result<Vec<(usize, BlockStreamError)>> {
        let Some(lanes) = st.lanes.take() else {
            return Ok(Vec::new());
        };
        let (streams, rest) = lanes.stop().await?;
        if let Some(g) = self.group.as_mut() {
            g.streams = streams;
        }
        let mut failures = Vec::new();
        for ev in rest {
            match ev.outcome {
                Outcome::Published => self.acknowledge(st, ev.unit, ev.seq),
                Outcome::Failed(e) => failures.push((ev.unit, e)),
                Outcome::Lost => return Err(lane_lost(ev.unit)),
            }
        }
        Ok(failures)
    }

    /// A lane failed: stops the group, seals it at its acknowledged length, excludes the
    /// failed datanodes and queues every stripe not acknowledged for a new group.
    ///
    /// Every stripe of the window fails with the group, so each is charged one rewrite; the
    /// oldest has been rewritten at least as often as the others, and it is the one checked
    /// against `ec_write_retries` and named in the error.
    ///
    /// # Errors
    /// [`ClientError::WriteFailed`] naming the oldest unacknowledged stripe (`previous` is
    /// `None`: the failure that caused the last rewrite is this one) when it was already
    /// rewritten `ec_write_retries` times, or the seal left fewer than d indexes durable.
    async fn fail_group(&mut self, st: &mut Stage, first: (usize, BlockStreamError)) -> Result<()> {
        let mut failures = vec![first];
        failures.extend(self.stop_lanes(st).await?);
        let unacked = st.window.drain();
        let oldest = unacked.first().map_or(0, |q| q.stripe.seq);
        let attempts = unacked.first().map_or(1, |q| q.rewrites + 1);
        let failure = self.note_failures(failures, oldest);
        self.seal_group_at_acked(&failure, attempts).await?;
        let cause = failure.cause;
        st.submitted = 0;
        if attempts > self.max_retries {
            return Err(ClientError::WriteFailed {
                stripe: oldest,
                attempts,
                excluded: self.excluded.iter().cloned().collect(),
                previous: None,
                cause: Box::new(cause),
            });
        }
        self.counters
            .rewritten
            .fetch_add(unacked.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for q in unacked.into_iter().rev() {
            st.redo.push_front(Queued {
                stripe: q.stripe,
                rewrites: q.rewrites + 1,
            });
        }
        st.last_cause = Some(cause.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The window acknowledges a stripe exactly when every lane has published it, in order.
    #[test]
    fn a_stripe_is_acknowledged_once_every_lane_published_it() {
        let mut w = Window::new(3);
        for seq in 10..13 {
            w.push(seq, seq);
        }
        assert!(w.published(0, 10).is_empty());
        assert!(
            w.published(1, 11).is_empty(),
            "lane 2 has published nothing"
        );
        assert_eq!(w.published(2, 10), vec![10]);
        assert!(w.published(2, 11).is_empty(), "lane 0 is at 10");
        assert_eq!(w.published(0, 12), vec![11]);
        assert_eq!(w.len(), 1);
        assert_eq!(w.drain(), vec![12]);
        assert_eq!(w.len(), 0);
        w.push(13, 13);
        assert!(
            w.published(0, 13).is_empty(),
            "a drained window starts afresh"
        );
    }

    /// A lane that unwinds reports the stripe in hand as lost, so that the flush stage fails
    /// the write instead of waiting for a stripe no lane will publish; a lane that finishes
    /// its stripe reports nothing through the guard.
    #[tokio::test]
    async fn a_panicking_lane_reports_its_stripe_lost() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let events = tx.clone();
        let task = tokio::spawn(async move {
            let _guard = LaneGuard {
                unit: 2,
                seq: 7,
                events,
            };
            panic!("a bug in a lane");
        });
        assert!(task.await.is_err_and(|e| e.is_panic()));
        drop(LaneGuard {
            unit: 1,
            seq: 8,
            events: tx,
        });
        let ev = rx.recv().await.expect("the lost stripe");
        assert!(matches!(
            ev,
            LaneEvent {
                unit: 2,
                seq: 7,
                outcome: Outcome::Lost
            }
        ));
        assert!(
            rx.recv().await.is_none(),
            "nothing else: {:?}",
            rx.try_recv()
        );
    }

    proptest! {
        /// Against a model: whatever order the lanes' publications interleave in (each lane
        /// in stripe order), the stripes acknowledged are exactly those every lane has
        /// published, in stripe order, each once.
        #[test]
        fn acknowledgements_match_a_model(
            lanes in 1usize..6,
            stripes in 1u64..12,
            picks in proptest::collection::vec(0usize..6, 0..80),
        ) {
            let mut w = Window::new(lanes);
            for seq in 0..stripes {
                w.push(seq, seq);
            }
            let mut next = vec![0u64; lanes];
            let mut acked = Vec::new();
            for p in picks {
                let unit = p % lanes;
                if next[unit] == stripes {
                    continue;
                }
                acked.extend(w.published(unit, next[unit]));
                next[unit] += 1;
                let everywhere = next.iter().copied().min().unwrap_or(0);
                prop_assert_eq!(acked.clone(), (0..everywhere).collect::<Vec<_>>());
            }
        }
    }
}
