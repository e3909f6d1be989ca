//! [`EcKeyOutputStream`]: writes a key as erasure-coded block groups.
//!
//! Models Ozone's `ECKeyOutputStream`, pipelined (ARCHITECTURE.md, write path):
//! - the producer (the caller's [`write`](EcKeyOutputStream::write)) fills the
//!   d cells of a stripe; when the stripe is full it computes the p parity
//!   cells on tokio's blocking pool (so the reactor never stalls on GF(2^8)
//!   work) and queues the stripe;
//! - the queue is a bounded tokio `mpsc` channel of `ec_stripe_queue_size`
//!   stripes (default 2): an async channel, because both ends are async tasks
//!   on one runtime and a full queue must suspend the producer, not block a
//!   worker thread as a `crossbeam-channel` send would;
//! - the flush stage, a task owned by the writer, drains the queue through a
//!   [`StripeWriter`]: up to `ec_stripes_in_flight` stripes at once, each
//!   replica index writing its cells and publishing them with PutBlock on a
//!   lane of its own (`stripe_writer/window.rs`); while it waits on the
//!   datanodes the producer encodes the next stripe.
//!
//! A flush error ends the flush task; the producer reports it, with its
//! original cause, at the next `write` or at `close`. Dropping the writer
//! without `close` aborts the task and the om session: no key appears.
//! [`EcWriteMode::Serial`](crate::EcWriteMode) keeps the old behaviour — no
//! queue, parity computed inline, cells written one after another — for the
//! benchmark.
//!
//! The last stripe may be partial: its parity is as long as its first cell,
//! shorter cells are zero-padded for encoding only, padding is never written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ec_codec::{EcReplicationConfig, ErasureCoder};
use proto_crate::KeyInfo;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::ClientShared;
use crate::lease::LeaseKeeper;
use crate::om_client::{Commit, Committed};
use crate::stripe_writer::{EcWriteProgress, EncodedStripe, StripeWriter, WriteCounters};
use crate::write_state::WriteState;
use crate::{ClientError, EcWriteMode, Result};

/// What the flush task hands back when the queue closes.
type FlushOutcome = Result<(Vec<proto_crate::BlockGroup>, u64)>;

/// Where encoded stripes go.
#[derive(Debug)]
enum Sink {
    /// Flushed inline by the caller's task.
    Serial(Box<StripeWriter>),
    /// Queued to the flush task.
    Pipelined {
        queue: Option<mpsc::Sender<EncodedStripe>>,
        task: Option<JoinHandle<FlushOutcome>>,
    },
}

/// Progress of an EC writer (see [`EcKeyOutputStream::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EcWriteStats {
    /// Stripes encoded so far.
    pub stripes_encoded: u64,
    /// Stripes acknowledged by the datanodes so far.
    pub stripes_flushed: u64,
    /// Largest number of stripes encoded but not yet acknowledged at once.
    pub max_in_flight: u64,
    /// Largest number of stripes the flush stage was writing at once (handed to
    /// the replica indexes and not yet published by all of them): at most
    /// `ec_stripes_in_flight`.
    pub max_stripes_written_at_once: u64,
    /// Stripes already encoded when the first stripe was acknowledged: above
    /// 1 means encoding overlapped the first flush.
    pub encoded_when_first_flushed: u64,
    /// Stripes rewritten on a new block group after a failure.
    pub stripes_rewritten: u64,
    /// Block groups allocated.
    pub groups_allocated: u64,
}

/// Writer of one EC key. Driven by one task (`&mut self`).
#[derive(Debug)]
pub struct EcKeyOutputStream {
    shared: Arc<ClientShared>,
    /// Failure, cancellation and the om session.
    state: WriteState,
    ec: EcReplicationConfig,
    coder: ErasureCoder,
    stripe: Vec<u8>,
    stripe_size: usize,
    next_seq: u64,
    written: u64,
    sink: Sink,
    counters: Arc<WriteCounters>,
    /// Keeps the om session alive while the writer lives.
    _lease: LeaseKeeper,
}

impl EcKeyOutputStream {
    pub(crate) fn new(
        shared: Arc<ClientShared>,
        state: WriteState,
        ec: EcReplicationConfig,
        block_size: u64,
        lease: LeaseKeeper,
    ) -> Result<Self> {
        if block_size == 0 || !block_size.is_multiple_of(ec.cell_size()) {
            return Err(ClientError::InvalidArgument(format!(
                "block size {block_size} is not a positive multiple of the {ec} cell size {}",
                ec.cell_size()
            )));
        }
        let group_capacity = block_size.checked_mul(ec.data() as u64).ok_or_else(|| {
            ClientError::InvalidArgument(format!("block size {block_size} too large"))
        })?;
        let stripe_size = usize::try_from(ec.stripe_size())
            .map_err(|_| ClientError::InvalidArgument(format!("stripe of {ec} too large")))?;
        let counters = Arc::new(WriteCounters::default());
        let config = &shared.read.config;
        let mode = config.ec_write_mode;
        let queue_size = config.ec_stripe_queue_size.max(1);
        let in_flight = config.ec_stripes_in_flight.max(1);
        let writer = StripeWriter::new(
            Arc::clone(&shared),
            state.session_id(),
            ec,
            group_capacity,
            mode == EcWriteMode::Pipelined,
            Arc::clone(&counters),
        );
        let sink = match mode {
            EcWriteMode::Serial => Sink::Serial(Box::new(writer)),
            EcWriteMode::Pipelined => {
                let (tx, rx) = mpsc::channel(queue_size);
                Sink::Pipelined {
                    queue: Some(tx),
                    task: Some(tokio::spawn(proto_crate::request_id::propagate(
                        flush_stage(writer, rx, in_flight, Arc::clone(&counters)),
                    ))),
                }
            }
        };
        Ok(Self {
            shared,
            state,
            coder: ec.coder(),
            ec,
            stripe: Vec::with_capacity(stripe_size),
            stripe_size,
            next_seq: 0,
            written: 0,
            sink,
            counters,
            _lease: lease,
        })
    }

    /// Data bytes accepted so far (acknowledged, queued or buffered).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.written
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.written == 0
    }

    /// A receiver of the flush stage's progress (stripes acknowledged, and
    /// whether the stage ended), to wait on without polling, e.g.
    /// `rx.wait_for(|p| p.stripes_flushed >= 2).await`. In serial mode
    /// stripes are acknowledged inside `write` and the stage never "ends".
    #[must_use]
    pub fn progress(&self) -> tokio::sync::watch::Receiver<EcWriteProgress> {
        self.counters.progress.subscribe()
    }

    /// Progress counters of this writer.
    #[must_use]
    pub fn stats(&self) -> EcWriteStats {
        let c = &self.counters;
        EcWriteStats {
            stripes_encoded: c.encoded.load(Ordering::SeqCst),
            stripes_flushed: c.flushed.load(Ordering::SeqCst),
            max_in_flight: c.max_in_flight.load(Ordering::SeqCst),
            max_stripes_written_at_once: c.max_window.load(Ordering::SeqCst),
            encoded_when_first_flushed: c.encoded_when_first_flushed.load(Ordering::SeqCst),
            stripes_rewritten: c.rewritten.load(Ordering::SeqCst),
            groups_allocated: c.groups_allocated.load(Ordering::SeqCst),
        }
    }

    /// The block group the flush stage is writing (or last wrote), with the
    /// datanode of each replica index; `None` before the first allocation.
    #[must_use]
    pub fn current_block_group(&self) -> Option<proto_crate::BlockGroup> {
        self.counters
            .current_group
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Appends `buf` to the key. Returns once the bytes are buffered or
    /// queued; full stripes are encoded here and flushed by the flush stage.
    ///
    /// # Errors
    /// A flush-stage failure (with its original cause), reported at the first
    /// call after it happened; after that every call fails and the key is
    /// never committed. [`ClientError::WriteCancelled`] after an earlier
    /// call was cancelled (its future dropped before it finished).
    pub async fn write(&mut self, buf: &[u8]) -> Result<()> {
        self.state.begin()?;
        let result = self.buffer_and_emit(buf).await;
        self.state.end(result)
    }

    async fn buffer_and_emit(&mut self, mut buf: &[u8]) -> Result<()> {
        self.poll_flush_failure().await?;
        while !buf.is_empty() {
            let take = (self.stripe_size - self.stripe.len()).min(buf.len());
            self.stripe.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            self.written += take as u64;
            if self.stripe.len() == self.stripe_size {
                self.emit_stripe().await?;
            }
        }
        Ok(())
    }

    /// A no-op: EC data reaches the datanodes a whole stripe at a time (as in Ozone).
    ///
    /// # Errors
    /// Only a failure recorded earlier.
    pub fn flush(&mut self) -> Result<()> {
        self.state.check()
    }

    /// hflush/hsync durability for a partial stripe is not supported on EC
    /// keys (Ozone's `ECKeyOutputStream` refuses it as well).
    ///
    /// # Errors
    /// Always [`ClientError::Unsupported`].
    pub fn hsync(&mut self) -> Result<()> {
        Err(ClientError::Unsupported(
            "hsync/hflush on an erasure-coded key".into(),
        ))
    }

    /// If the flush task already ended with an error, collect it now.
    async fn poll_flush_failure(&mut self) -> Result<()> {
        // The stage flags its end before its task returns: either sign means
        // it stopped (before close, only a failure stops it), and joining
        // the task then takes no longer than its last instructions.
        let ended = self.counters.progress.borrow().flush_stage_ended;
        let finished =
            matches!(&self.sink, Sink::Pipelined { task: Some(t), .. } if ended || t.is_finished());
        if finished {
            let e = match self.join_flush_task().await {
                Err(e) => e,
                Ok(_) => ClientError::Internal("flush stage ended before close".into()),
            };
            return Err(self.state.fail(e));
        }
        Ok(())
    }

    async fn join_flush_task(&mut self) -> FlushOutcome {
        let Sink::Pipelined { queue, task } = &mut self.sink else {
            return Err(ClientError::Internal(
                "serial writer has no flush task".into(),
            ));
        };
        queue.take();
        // Await the handle in place: if this future is dropped (a cancelled
        // close), the handle is still here and the writer's drop aborts the
        // task, instead of a detached flush stage writing on.
        let Some(t) = task.as_mut() else {
            return Err(ClientError::Internal("flush stage already joined".into()));
        };
        let outcome = t.await;
        *task = None;
        outcome.map_err(|e| ClientError::TaskLost(format!("the EC flush stage: {e}")))?
    }

    /// Encodes the buffered stripe and hands it to the sink.
    async fn emit_stripe(&mut self) -> Result<()> {
        if self.stripe.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::replace(
            &mut self.stripe,
            Vec::with_capacity(self.stripe_size),
        ));
        let seq = self.next_seq;
        self.next_seq += 1;
        let coder = self.coder.clone();
        let ec = self.ec;
        let stripe = match &self.sink {
            Sink::Serial(_) => encode(&coder, ec, seq, &data),
            Sink::Pipelined { .. } => {
                tokio::task::spawn_blocking(move || encode(&coder, ec, seq, &data))
                    .await
                    .map_err(|e| ClientError::TaskLost(format!("the stripe encoding task: {e}")))?
            }
        };
        let stripe = match stripe {
            Ok(s) => s,
            Err(e) => return Err(self.state.fail(e)),
        };
        self.counters.note_encoded();
        match &mut self.sink {
            Sink::Serial(writer) => {
                if let Err(e) = writer.write_stripe(&stripe).await {
                    return Err(self.state.fail(e));
                }
            }
            Sink::Pipelined { queue, .. } => {
                let sent = match queue {
                    Some(q) => q.send(stripe).await.is_ok(),
                    None => false,
                };
                if !sent {
                    // The flush task is gone: it ended with an error.
                    let e = match self.join_flush_task().await {
                        Err(e) => e,
                        Ok(_) => ClientError::Internal("flush stage ended early".into()),
                    };
                    return Err(self.state.fail(e));
                }
            }
        }
        Ok(())
    }

    /// Flushes the partial last stripe, waits for the flush stage, closes the
    /// last group and commits the key with its exact length. Returns the key.
    ///
    /// # Errors
    /// A flush failure (now or earlier): the key is not committed, the om
    /// session is aborted, and no key becomes visible.
    pub async fn close(self) -> Result<KeyInfo> {
        self.finish(Commit::Key(BTreeMap::new(), None))
            .await?
            .into_key()
    }

    /// Gives the key up: the flush stage stops and the session is aborted
    /// now, waiting for the om.
    pub(crate) async fn abort(mut self) {
        if let Sink::Pipelined { task: Some(t), .. } = &self.sink {
            t.abort();
        }
        self.state.abort().await;
    }

    /// Like [`close`](Self::close), ending the session as `commit` says (a
    /// key with metadata, or a multipart upload's part with its ETag).
    pub(crate) async fn finish(mut self, commit: Commit) -> Result<Committed> {
        let result = self.try_close(commit).await;
        self.state.settle(&result).await;
        result
    }

    async fn try_close(&mut self, commit: Commit) -> Result<Committed> {
        self.state.check()?;
        self.emit_stripe().await?;
        let flushed = match std::mem::replace(
            &mut self.sink,
            Sink::Pipelined {
                queue: None,
                task: None,
            },
        ) {
            Sink::Serial(writer) => writer.finish().await,
            sink @ Sink::Pipelined { .. } => {
                self.sink = sink;
                self.join_flush_task().await
            }
        };
        let (groups, acked) = flushed.map_err(|e| self.state.fail(e))?;
        if acked != self.written {
            return Err(ClientError::Internal(format!(
                "{} bytes written but {acked} acknowledged",
                self.written
            )));
        }
        self.shared
            .om
            .commit(self.state.session_id(), groups, acked, commit)
            .await
    }
}

/// The flush stage: writes queued stripes in order until the queue closes
/// (normal end: returns the groups) or a stripe fails for good (returns the
/// error; the receiver is dropped so the producer's next send fails).
async fn flush_stage(
    writer: StripeWriter,
    rx: mpsc::Receiver<EncodedStripe>,
    in_flight: usize,
    counters: Arc<WriteCounters>,
) -> FlushOutcome {
    let outcome = writer.run_windowed(rx, in_flight).await;
    counters.note_flush_stage_ended();
    outcome
}

/// Splits a stripe's data into d cells and computes p parity cells as long
/// as the first cell (shorter cells zero-padded for encoding only).
fn encode(
    coder: &ErasureCoder,
    ec: EcReplicationConfig,
    seq: u64,
    data: &Bytes,
) -> Result<EncodedStripe> {
    let len = data.len();
    let cell = usize::try_from(ec.cell_size()).unwrap_or(usize::MAX);
    let d = ec.data();
    let cells: Vec<Bytes> = (0..d)
        .map(|i| data.slice((i * cell).min(len)..((i + 1) * cell).min(len)))
        .collect();
    let parity_len = cells.first().map_or(0, Bytes::len);
    let padded: Vec<Vec<u8>> = cells
        .iter()
        .filter(|c| c.len() < parity_len)
        .map(|c| {
            let mut v = c.to_vec();
            v.resize(parity_len, 0);
            v
        })
        .collect();
    let mut padded_iter = padded.iter();
    let inputs: Vec<&[u8]> = cells
        .iter()
        .map(|c| {
            if c.len() < parity_len {
                padded_iter.next().map_or(&c[..], Vec::as_slice)
            } else {
                &c[..]
            }
        })
        .collect();
    let mut parity: Vec<Vec<u8>> = vec![vec![0u8; parity_len]; ec.parity()];
    {
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        coder.encode(&inputs, &mut outs)?;
    }
    let mut all = cells;
    all.extend(parity.into_iter().map(Bytes::from));
    Ok(EncodedStripe {
        seq,
        len: len as u64,
        cells: all,
    })
}

impl Drop for EcKeyOutputStream {
    /// A writer dropped without `close` commits nothing: the flush task is
    /// aborted, and the session is aborted as `state` drops.
    fn drop(&mut self) {
        if let Sink::Pipelined { task: Some(t), .. } = &self.sink {
            t.abort();
        }
    }
}
