//! [`KeyInputStream`]: reads a whole key across its block groups.
//!
//! Models Ozone's `KeyInputStream`. Opening costs one key lookup and no
//! datanode RPC: each group gets an [`EcBlockInputStreamProxy`] (EC) or a
//! [`BlockInputStream`] (replicated) whose I/O starts lazily.
//!
//! Two ways to read:
//! - positioned: [`read_at`](KeyInputStream::read_at) /
//!   [`read_exact_at`](KeyInputStream::read_exact_at) take `&self`, are safe
//!   from many tasks at once, and never move the cursor;
//! - sequential: `tokio::io::AsyncRead + AsyncSeek` on `&mut self`, fetching
//!   `sequential_read_ahead`-byte windows through the same readers (an EC
//!   key's as one read of its cells, a replicated key's as up to four
//!   concurrent reads of at least 1 MiB each).

use std::future::Future;
use std::io::SeekFrom;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use block_stream::BlockInputStream;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use proto_crate::{KeyInfo, ReplicationConfig};
use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};

use crate::ec_proxy::EcBlockInputStreamProxy;
use crate::read_context::ReadContext;
use crate::{ClientError, Result};

/// The reader of one block group.
#[derive(Debug)]
enum GroupReader {
    Ec(EcBlockInputStreamProxy),
    Replicated(BlockInputStream),
}

impl GroupReader {
    async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        match self {
            Self::Ec(p) => p.read_at(pos, buf).await,
            Self::Replicated(b) => Ok(b.read_at(pos, buf).await?),
        }
    }
}

/// The shared, immutable part of a key stream: its groups' readers.
#[derive(Debug)]
struct KeyReader {
    info: KeyInfo,
    /// (key offset of the group's first byte, reader), in key order.
    groups: Vec<(u64, GroupReader)>,
    /// Largest piece of a replicated key's read-ahead window, bytes (see
    /// [`window_piece`]).
    window_piece: u64,
}

impl KeyReader {
    fn open(ctx: &Arc<ReadContext>, info: KeyInfo) -> Result<Self> {
        let mut groups = Vec::with_capacity(info.block_groups.len());
        let mut offset = 0u64;
        for g in &info.block_groups {
            let reader = match info.replication {
                ReplicationConfig::Ec(ec) => GroupReader::Ec(EcBlockInputStreamProxy::new(
                    Arc::clone(ctx),
                    (info.bucket.clone(), info.name.clone()),
                    g.clone(),
                    ec,
                )?),
                ReplicationConfig::Replicated { .. } => {
                    let token =
                        crate::block_tokens::for_reader(&ctx.om, (&info.bucket, &info.name), g);
                    let locations = g
                        .pipeline
                        .datanodes()
                        .into_iter()
                        .map(|d| {
                            ctx.xceivers
                                .client(&d.address)
                                .map(|c| c.with_token(token.clone()))
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    GroupReader::Replicated(BlockInputStream::new(
                        g.id(),
                        g.length,
                        locations,
                        ctx.config.xceiver.retry,
                    )?)
                }
            };
            groups.push((offset, reader));
            offset = offset.checked_add(g.length).ok_or_else(|| {
                ClientError::Internal(format!("block group lengths of {} overflow u64", info.name))
            })?;
        }
        Ok(Self {
            info,
            groups,
            window_piece: window_piece(
                ctx.config.sequential_read_ahead,
                ctx.config.xceiver.bytes_per_checksum,
            ),
        })
    }

    async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        let len = self.info.length;
        if pos >= len || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from((len - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let mut done = 0usize;
        // Last group whose start is <= pos.
        let mut idx = self
            .groups
            .partition_point(|(start, _)| *start <= pos)
            .saturating_sub(1);
        while done < want {
            let Some((start, reader)) = self.groups.get(idx) else {
                break;
            };
            let at = pos + done as u64;
            let n = reader.read_at(at - start, &mut buf[done..want]).await?;
            if n == 0 {
                // A group shorter than the key's metadata claims: never loop.
                return Err(ClientError::UnexpectedEof {
                    pos: at,
                    len: (want - done) as u64,
                    key_len: len,
                });
            }
            done += n;
            idx += 1;
        }
        Ok(done)
    }

    async fn read_range(&self, pos: u64, len: u64) -> Result<Bytes> {
        let n = usize::try_from(len)
            .map_err(|_| ClientError::InvalidArgument(format!("length {len} too large")))?;
        let mut buf = vec![0u8; n];
        let got = self.read_at(pos, &mut buf).await?;
        buf.truncate(got);
        Ok(Bytes::from(buf))
    }

    /// A read-ahead window: the `len` bytes at key offset `pos` (inside the
    /// key). An EC key's window is one read: on the healthy path it already
    /// sends one ReadChunk per cell at once, so pieces could add no
    /// concurrency (split, degraded sequential reads measured slower, 0.42
    /// against 0.55 of healthy). A replicated key's window is fetched as
    /// concurrent reads of at most `window_piece` bytes, cut at its multiples
    /// (key offsets), so that one window keeps several ReadChunks in flight: a
    /// 4 MiB chunk comes as four 1 MiB reads, the datanode reading the next
    /// piece while the client takes in the last.
    ///
    /// # Errors
    /// [`ClientError::UnexpectedEof`] if the window comes back short (the
    /// key's groups hold fewer bytes than its metadata says); read failures.
    async fn read_window(&self, pos: u64, len: u64) -> Result<Bytes> {
        let short = |start: u64, want: u64, got: u64| ClientError::UnexpectedEof {
            pos: start + got,
            len: want - got,
            key_len: self.info.length,
        };
        if matches!(self.info.replication, ReplicationConfig::Ec(_)) {
            let bytes = self.read_range(pos, len).await?;
            return match bytes.len() as u64 {
                got if got == len => Ok(bytes),
                got => Err(short(pos, len, got)),
            };
        }
        let n = usize::try_from(len)
            .map_err(|_| ClientError::InvalidArgument(format!("length {len} too large")))?;
        let mut buf = vec![0u8; n];
        let end = pos + len;
        let piece = self.window_piece;
        let mut starts = vec![pos];
        let mut at = (pos / piece + 1) * piece;
        while at < end {
            starts.push(at);
            at += piece;
        }
        let lens = starts
            .iter()
            .zip(starts.iter().skip(1).copied().chain([end]))
            .map(|(s, e)| e - s);
        let pieces = crate::ec_input::split_pieces(&mut buf, lens);
        let reads = starts.iter().zip(pieces).map(|(&start, piece)| async move {
            let want = piece.len();
            let got = self.read_at(start, piece).await?;
            if got == want {
                Ok(())
            } else {
                Err(short(start, want as u64, got as u64))
            }
        });
        futures::future::try_join_all(reads).await?;
        Ok(Bytes::from(buf))
    }
}

/// Smallest piece a replicated key's read-ahead window is cut into, bytes.
const MIN_WINDOW_PIECE: u64 = 1024 * 1024;

/// Most pieces of one read-ahead window (and so ReadChunks in flight for it).
const MAX_WINDOW_PIECES: u64 = 4;

/// The piece size of a replicated key's read-ahead windows of `read_ahead`
/// bytes: at least 1 MiB, at most four pieces per window, rounded up to a
/// multiple of `bytes_per_checksum` so that cuts fall on checksum window
/// boundaries when the chunks start on them (4 MiB windows and 16 KiB
/// bytesPerChecksum: 1 MiB pieces).
fn window_piece(read_ahead: u64, bytes_per_checksum: u32) -> u64 {
    let bpc = u64::from(bytes_per_checksum).max(1);
    MIN_WINDOW_PIECE
        .max(read_ahead.div_ceil(MAX_WINDOW_PIECES))
        .div_ceil(bpc)
        .saturating_mul(bpc)
}

type Fetch = Pin<Box<dyn Future<Output = (u64, Result<Bytes>)> + Send>>;

/// The next read-ahead window, fetched on a task of its own while the caller consumes the
/// current one (sequential reads only); aborted when dropped.
struct Prefetch {
    /// Key offset the window starts at.
    start: u64,
    task: tokio::task::JoinHandle<Result<Bytes>>,
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts fetching the read-ahead window at key offset `start` (up to the next multiple of
/// `read_ahead`, at most `len`) on a task of its own; `None` at the end of the key or outside
/// a runtime.
fn spawn_window(
    reader: &Arc<KeyReader>,
    start: u64,
    read_ahead: u64,
    len: u64,
) -> Option<Prefetch> {
    if start >= len {
        return None;
    }
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let end = ((start / read_ahead + 1) * read_ahead).min(len);
    let reader = Arc::clone(reader);
    let task = rt.spawn(proto_crate::request_id::propagate(async move {
        reader.read_window(start, end - start).await
    }));
    Some(Prefetch { start, task })
}

/// A readable key: positioned reads on `&self`, sequential reads and seeks on
/// `&mut self` (`AsyncRead + AsyncSeek`).
pub struct KeyInputStream {
    reader: Arc<KeyReader>,
    ctx: Arc<ReadContext>,
    read_ahead: u64,
    /// Sequential cursor, key-relative bytes.
    pos: u64,
    /// Bytes fetched for the cursor, starting at key offset `buffer_start`.
    buffer: Bytes,
    buffer_start: u64,
    /// The sequential fetch in flight. Only touched through `&mut self`
    /// (`Mutex::get_mut`, never locked); the mutex just makes the stream `Sync`
    /// so that `Arc<KeyInputStream>` can be shared for positioned reads.
    pending: std::sync::Mutex<Option<Fetch>>,
    /// The window after the one being fetched, in flight at the same time: started when a
    /// fetch continued the previous one or began the key (a sequential reader). With the
    /// buffer, at most three windows (three times `read_ahead` bytes) are held.
    prefetch: std::sync::Mutex<Option<Prefetch>>,
    /// Where the last sequential fetch ended (key offset), to tell a sequential reader.
    fetched_to: Option<u64>,
}

impl std::fmt::Debug for KeyInputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyInputStream")
            .field(
                "key",
                &format!("{}/{}", self.reader.info.bucket, self.reader.info.name),
            )
            .field("len", &self.reader.info.length)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl KeyInputStream {
    pub(crate) fn open(ctx: &Arc<ReadContext>, info: KeyInfo) -> Result<Self> {
        let read_ahead = ctx.config.sequential_read_ahead.max(1);
        Ok(Self {
            reader: Arc::new(KeyReader::open(ctx, info)?),
            ctx: Arc::clone(ctx),
            read_ahead,
            pos: 0,
            buffer: Bytes::new(),
            buffer_start: 0,
            pending: std::sync::Mutex::new(None),
            prefetch: std::sync::Mutex::new(None),
            fetched_to: None,
        })
    }

    /// A second stream over the same open key: it shares every cached reader
    /// (no new om lookup, no new GetBlock) and has its own cursor at 0, so one
    /// task can read sequentially while others issue positioned reads.
    #[must_use]
    pub fn new_cursor(&self) -> KeyInputStream {
        Self {
            reader: Arc::clone(&self.reader),
            ctx: Arc::clone(&self.ctx),
            read_ahead: self.read_ahead,
            pos: 0,
            buffer: Bytes::new(),
            buffer_start: 0,
            pending: std::sync::Mutex::new(None),
            prefetch: std::sync::Mutex::new(None),
            fetched_to: None,
        }
    }

    /// Vectored read: fetches every range of `ranges` (key-relative, any
    /// order) and returns their bytes in the caller's order.
    ///
    /// Ranges are validated before any I/O, then merged (gap at most
    /// `vectored_min_seek`, merged length at most `vectored_max_merged`) and
    /// the merged ranges fetched concurrently, at most
    /// `vectored_parallelism` at a time, through the stateless positioned
    /// read (failover and reconstruction included). Each result is a
    /// zero-copy slice of its merged buffer; gap bytes are never returned.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for overlapping ranges;
    /// [`ClientError::UnexpectedEof`] for a range ending past the key;
    /// otherwise the first fetch failure — never partial results.
    pub async fn read_ranges(&self, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Bytes>> {
        let len = self.len();
        crate::vectored::validate(ranges, len).map_err(|e| match e {
            crate::vectored::RangeError::Overlap { .. } => {
                ClientError::InvalidArgument(e.to_string())
            }
            crate::vectored::RangeError::PastEof { range, len } => ClientError::UnexpectedEof {
                pos: range.start,
                len: range.end.saturating_sub(range.start),
                key_len: len,
            },
        })?;
        let config = &self.ctx.config;
        let merged =
            crate::vectored::merge(ranges, config.vectored_min_seek, config.vectored_max_merged);
        let reader = &self.reader;
        let fetched: Vec<(crate::vectored::MergedRange, Bytes)> = futures::stream::iter(merged)
            .map(|m| async move {
                let bytes = reader
                    .read_range(m.range.start, m.range.end - m.range.start)
                    .await?;
                if bytes.len() as u64 != m.range.end - m.range.start {
                    return Err(ClientError::UnexpectedEof {
                        pos: m.range.start,
                        len: m.range.end - m.range.start,
                        key_len: len,
                    });
                }
                Ok((m, bytes))
            })
            .buffer_unordered(config.vectored_parallelism.max(1))
            .try_collect()
            .await?;
        let mut out = vec![Bytes::new(); ranges.len()];
        for (m, bytes) in fetched {
            for (i, r) in m.parts {
                let from = usize::try_from(r.start - m.range.start).unwrap_or(usize::MAX);
                let to = usize::try_from(r.end - m.range.start).unwrap_or(usize::MAX);
                out[i] = bytes.slice(from..to);
            }
        }
        Ok(out)
    }

    /// The key's metadata as looked up at open.
    #[must_use]
    pub fn info(&self) -> &KeyInfo {
        &self.reader.info
    }

    /// Key length, bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.reader.info.length
    }

    /// Whether the key is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.reader.info.length == 0
    }

    /// The sequential cursor, key-relative bytes.
    #[must_use]
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Positioned read: fills `buf` from key offset `pos` up to the end of the
    /// key and returns the bytes read (fewer than `buf.len()` only at the end;
    /// 0 at or past it). Never moves the cursor; safe from many tasks at once.
    ///
    /// # Errors
    /// A read failure that failover could not mask; the bytes in `buf` are
    /// then unspecified.
    pub async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        self.reader.read_at(pos, buf).await
    }

    /// Positioned read of exactly `buf.len()` bytes at `pos`.
    ///
    /// # Errors
    /// [`ClientError::UnexpectedEof`] if the range ends past the key (checked
    /// before any I/O); read failures as [`read_at`](Self::read_at).
    pub async fn read_exact_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let len = self.len();
        let end = pos.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > len) {
            return Err(ClientError::UnexpectedEof {
                pos,
                len: buf.len() as u64,
                key_len: len,
            });
        }
        let n = self.read_at(pos, buf).await?;
        if n != buf.len() {
            return Err(ClientError::UnexpectedEof {
                pos,
                len: buf.len() as u64,
                key_len: len,
            });
        }
        Ok(())
    }

    /// Reads `len` bytes at `pos` into a new buffer (shorter only at the end
    /// of the key). Does not move the cursor.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at).
    pub async fn read_range(&self, pos: u64, len: u64) -> Result<Bytes> {
        let len = len.min(self.len().saturating_sub(pos));
        self.reader.read_range(pos, len).await
    }
}

impl AsyncRead for KeyInputStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let buf_end = this.buffer_start + this.buffer.len() as u64;
            if this.pos >= this.buffer_start && this.pos < buf_end {
                let from = usize::try_from(this.pos - this.buffer_start).unwrap_or(usize::MAX);
                let n = (this.buffer.len() - from).min(out.remaining());
                out.put_slice(&this.buffer[from..from + n]);
                this.pos += n as u64;
                return Poll::Ready(Ok(()));
            }
            let len = this.reader.info.length;
            if this.pos >= len {
                return Poll::Ready(Ok(()));
            }
            let pending = this
                .pending
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if pending.is_none() {
                let start = this.pos;
                let prefetched = this
                    .prefetch
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                match prefetched {
                    // The window already in flight: take it over, and start the one after
                    // it, so that two windows are always on their way to a sequential reader.
                    Some(mut p) if p.start == start => {
                        let end = ((start / this.read_ahead + 1) * this.read_ahead).min(len);
                        *this
                            .prefetch
                            .get_mut()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            spawn_window(&this.reader, end, this.read_ahead, len);
                        *pending = Some(Box::pin(async move {
                            let r = (&mut p.task).await.unwrap_or_else(|e| {
                                Err(ClientError::TaskLost(format!("a read-ahead fetch: {e}")))
                            });
                            (start, r)
                        }));
                    }
                    // Any other (dropped, so aborted): fetch up to the next read-ahead
                    // boundary so successive fetches stay aligned (to cells, when the size
                    // is a multiple).
                    _ => {
                        let end = ((start / this.read_ahead + 1) * this.read_ahead).min(len);
                        let reader = Arc::clone(&this.reader);
                        *pending = Some(Box::pin(async move {
                            (start, reader.read_window(start, end - start).await)
                        }));
                    }
                }
            }
            let Some(fut) = pending.as_mut() else {
                continue;
            };
            match fut.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready((start, result)) => {
                    *pending = None;
                    match result {
                        Ok(bytes) if bytes.is_empty() => {
                            return Poll::Ready(Err(std::io::Error::from(
                                ClientError::UnexpectedEof {
                                    pos: start,
                                    len: 1,
                                    key_len: len,
                                },
                            )));
                        }
                        Ok(bytes) => {
                            let end = start + bytes.len() as u64;
                            let sequential = this.fetched_to == Some(start)
                                || (this.fetched_to.is_none() && start == 0);
                            this.buffer = bytes;
                            this.buffer_start = start;
                            this.fetched_to = Some(end);
                            // A reader that continued where the last fetch ended (or began the
                            // key) reads on: fetch the next window while it consumes this one.
                            let slot = this
                                .prefetch
                                .get_mut()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            if sequential && slot.is_none() {
                                *slot = spawn_window(&this.reader, end, this.read_ahead, len);
                            }
                        }
                        Err(e) => return Poll::Ready(Err(e.into())),
                    }
                }
            }
        }
    }
}

impl AsyncSeek for KeyInputStream {
    fn start_seek(mut self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        let len = self.reader.info.length;
        let target = match position {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let Some(target) = target else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "seek to {position:?} from {} lands before offset 0",
                    self.pos
                ),
            ));
        };
        // A fetch in flight for another offset is dropped (cancelled); the
        // buffer is kept, since it may still cover the target.
        *self
            .pending
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.pos = target;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

#[cfg(test)]
mod tests {
    use super::window_piece;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn window_pieces_are_at_least_1_mib_at_most_four_and_whole_checksum_windows() {
        assert_eq!(window_piece(4 * MIB, 16 * 1024), MIB);
        assert_eq!(window_piece(MIB / 2, 16 * 1024), MIB);
        assert_eq!(window_piece(64 * MIB, 16 * 1024), 16 * MIB);
        assert_eq!(window_piece(4 * MIB, 4 * 1024 * 1024), 4 * MIB);
        assert_eq!(window_piece(4 * MIB, 3000), 350 * 3000);
        assert_eq!(window_piece(4 * MIB, 0), MIB);
    }
}
