//! Fine checksums: a closed block's CRC of its first `n` bytes at every
//! 512-byte boundary, so that a ReadChunk with edges reads its range and
//! at most 511 bytes on either side instead of whole checksum windows.
//!
//! A reader verifies the bytes it gets against the writer's checksums, one
//! per bytesPerChecksum window (16 KiB by default): the datanode sends the
//! CRCs of the window bytes around the range (`EdgeChecksums`), and the
//! client combines them with the CRC of the range. Summing those edges from
//! the block file means reading the whole window (two when the range
//! crosses a boundary): a 4 KiB read at a random offset costs the page-cache
//! copy and the CRC of 20 KiB on average. (HDFS keeps a CRC per 512 bytes
//! in a `.meta` file beside each block.)
//!
//! Here the datanode computes, while a block is written from offset 0, its
//! *prefix* CRCs `P(x)` = CRC of block bytes `[0, x)` at every multiple of
//! 512 and at the block's end ([`FineBuilder`], in the block's write
//! state). The CRC of any range between two such points is one combination:
//! `crc([x, y)) = combine(P(x), P(y), y - x)` (for CRC32 and CRC32C, whose
//! initial value and final XOR are equal, `crc(A ‖ B) = crc(A)·x^(8|B|) ⊕
//! crc(B)`, so the same XOR recovers `crc(B)`). The edges of a range then
//! need only the bytes between the range and the nearest points.
//!
//! Storage and trust:
//! - At the block's close the points are checked against the writer's window
//!   checksums ([`FineChecksums::agrees_with`]: one combination per window)
//!   and written to `<local id>.fine` beside the block file, once the
//!   closing record is durable and before it is published. The file is not
//!   synced: it ends with a CRC32C of its own bytes, so a crash that leaves
//!   it torn or empty is detected, and a missing one only costs whole-window
//!   reads. A block whose write was interrupted by a restart, rewritten at
//!   an offset that is not a multiple of 512, mixed checksum types,
//!   exceeded [`MAX_FINE_BLOCK`] or whose bytes disagree with its writer's
//!   checksums gets no file and is read in whole windows, as before.
//! - Reads load a block's file once (on the blocking pool; reads that miss
//!   together share one load, and a few run at once), check it again
//!   against the record they serve, and keep it in a byte-bounded LRU
//!   ([`StoreOptions::fine_checksum_cache_bytes`](super::StoreOptions)),
//!   keyed by the record it was checked against: a block without usable
//!   fine checksums is remembered as such until its record changes.
//! - Deletion removes the file with the block file, the block scan's drop
//!   of a lost block removes it too, and start-up removes any whose block
//!   has no record (`recovery.rs`).
//!
//! Trust is the same as with window reads: the client still checks every
//! byte it receives against the writer's checksums; the points only replace
//! the datanode's CRC of bytes the client does not receive.

use std::ops::Range;
use std::sync::Arc;

use block_stream::checksum::{
    EdgeChecksums, checksum_append, checksum_combine, checksum_of, edge_lens,
};
use proto_crate::{BlockData, ChecksumType, ChunkInfo};

/// Bytes between two fine checksum points (HDFS's bytesPerChecksum).
pub const FINE_GRANULE: u64 = 512;

/// Largest block a writer keeps fine checksums for, bytes (1 GiB, whose
/// points take 8 MiB of the block's write state). Ozone's default block
/// size is 256 MiB.
pub(crate) const MAX_FINE_BLOCK: u64 = 1 << 30;

/// Name suffix of a block's fine checksums file (`<local id>.fine`).
pub(crate) const FINE_SUFFIX: &str = ".fine";

/// Format tag of a fine checksums file: `b'F'`, then the version.
const ROW_TAG: [u8; 2] = [b'F', 1];
/// Tag, checksum type (1 byte), block size (8 bytes).
const ROW_HEADER: usize = 2 + 1 + 8;
/// The CRC32C of everything before it, at the end of the file.
const ROW_TRAILER: usize = 4;
/// Longest fine checksums file, bytes: that of a [`MAX_FINE_BLOCK`] block
/// (8 MiB of points).
pub(crate) const MAX_FINE_FILE: u64 =
    (ROW_HEADER + ROW_TRAILER) as u64 + 4 * MAX_FINE_BLOCK / FINE_GRANULE;

/// Why a block's fine checksums cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FineError {
    /// The file is shorter than its header and trailer.
    #[error("{len} bytes, shorter than the header")]
    Short { len: usize },
    /// The trailing CRC32C does not match the bytes before it.
    #[error("the file's CRC32C is {computed:#010x}, it ends with {stored:#010x} (torn or damaged)")]
    Damaged { computed: u32, stored: u32 },
    /// Not a fine checksums file of a version this datanode reads.
    #[error("unknown tag {0:?}")]
    Tag([u8; 2]),
    /// A checksum type other than CRC32 (1) and CRC32C (2).
    #[error("unknown checksum type {0}")]
    Type(u8),
    /// The points do not number one per 512 bytes of the size named.
    #[error("{body} bytes of points for a {size}-byte block")]
    Length { body: usize, size: u64 },
    /// The points describe a block of another size than the record's.
    #[error("points for {points} bytes, the block holds {block}")]
    Size { points: u64, block: u64 },
    /// A window's CRC from the points is not the writer's.
    #[error(
        "window {start}+{len} of chunk {chunk} has CRC {crc:#010x}, the writer's is {expected:#010x}"
    )]
    Window {
        start: u64,
        len: u64,
        chunk: String,
        crc: u32,
        expected: u32,
    },
}

/// Prefix CRCs of a block being written from offset 0: follows each
/// WriteChunk, and yields [`FineChecksums`] at the close.
#[derive(Debug, Clone, Default)]
pub(crate) struct FineBuilder {
    /// The chunks' checksum type, from the first chunk.
    ty: Option<ChecksumType>,
    /// Bytes of the block followed so far.
    len: u64,
    /// CRC of bytes `[0, len)`.
    running: u32,
    /// `P(512·(k+1))` for every multiple of 512 up to `len`.
    points: Vec<u32>,
}

impl FineBuilder {
    /// Follows `data` written at block offset `offset` by a chunk of
    /// checksum type `ty`. A write before the end replaces the tail from
    /// there (a retried WriteChunk). Returns false when the points can no
    /// longer follow the file (no checksums, a second checksum type, a
    /// rewrite at an offset that is not a multiple of 512, past
    /// [`MAX_FINE_BLOCK`]); the caller then drops the builder.
    pub(crate) fn write(&mut self, ty: ChecksumType, offset: u64, data: &[u8]) -> bool {
        if ty == ChecksumType::None || self.ty.is_some_and(|t| t != ty) {
            return false;
        }
        self.ty = Some(ty);
        if offset != self.len && !self.rewind(offset) {
            return false;
        }
        if offset.saturating_add(data.len() as u64) > MAX_FINE_BLOCK {
            return false;
        }
        let mut rest = data;
        while !rest.is_empty() {
            let room = FINE_GRANULE - self.len % FINE_GRANULE;
            let n = usize::try_from(room).map_or(rest.len(), |r| r.min(rest.len()));
            let (piece, tail) = rest.split_at(n);
            self.running = checksum_append(ty, self.running, piece);
            self.len += n as u64;
            if self.len.is_multiple_of(FINE_GRANULE) {
                self.points.push(self.running);
            }
            rest = tail;
        }
        true
    }

    /// Cuts the points back to `offset` (a multiple of 512 below the end).
    fn rewind(&mut self, offset: u64) -> bool {
        if offset > self.len || !offset.is_multiple_of(FINE_GRANULE) {
            return false;
        }
        let Ok(keep) = usize::try_from(offset / FINE_GRANULE) else {
            return false;
        };
        self.points.truncate(keep);
        self.running = keep.checked_sub(1).map_or(0, |i| self.points[i]);
        self.len = offset;
        true
    }

    /// The points of the block closed at `size` bytes (at most what was
    /// followed); `None` for an empty block or when `size` cuts the file at
    /// an offset that is not a multiple of 512.
    pub(crate) fn finish(mut self, size: u64) -> Option<FineChecksums> {
        let ty = self.ty?;
        if size == 0 || (size < self.len && !self.rewind(size)) || size > self.len {
            return None;
        }
        if !size.is_multiple_of(FINE_GRANULE) {
            self.points.push(self.running);
        }
        // Kept for the block's life: no spare capacity.
        self.points.shrink_to_fit();
        Some(FineChecksums {
            ty,
            size,
            points: self.points,
        })
    }
}

/// A closed block's fine checksums: `points[k]` is the CRC of block bytes
/// `[0, min(512·(k+1), size))`, so there is one point per 512 bytes and one
/// at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FineChecksums {
    ty: ChecksumType,
    size: u64,
    points: Vec<u32>,
}

impl FineChecksums {
    /// `P(x)`, the CRC of block bytes `[0, x)`, when `x` is 0, a multiple of
    /// 512 inside the block or the block's end.
    fn prefix(&self, x: u64) -> Option<u32> {
        if x == 0 {
            return Some(0);
        }
        if x > self.size || (!x.is_multiple_of(FINE_GRANULE) && x != self.size) {
            return None;
        }
        let k = usize::try_from(x.div_ceil(FINE_GRANULE)).ok()?;
        self.points.get(k - 1).copied()
    }

    /// CRC of block bytes `[x, y)` (both points as [`prefix`](Self::prefix)
    /// takes them).
    fn range(&self, x: u64, y: u64) -> Option<u32> {
        if y < x {
            return None;
        }
        Some(checksum_combine(
            self.ty,
            self.prefix(x)?,
            self.prefix(y)?,
            y - x,
        ))
    }

    /// Bytes this value holds, for the cache's bound.
    pub(crate) fn weight(&self) -> u64 {
        (std::mem::size_of::<Self>() + 4 * self.points.len()) as u64
    }

    /// Checks the points against the writer's checksums in `data`: every
    /// window of a chunk of this checksum type whose both ends are points
    /// must have the CRC the chunk lists (windows the points cannot bound
    /// are never read through them). One combination per window.
    ///
    /// # Errors
    /// Why they disagree: [`FineError::Size`], or [`FineError::Window`] for
    /// the first window whose CRC differs.
    pub(crate) fn agrees_with(&self, data: &BlockData) -> Result<(), FineError> {
        if data.size != self.size {
            return Err(FineError::Size {
                points: self.size,
                block: data.size,
            });
        }
        for chunk in &data.chunks {
            let cs = &chunk.checksum;
            if cs.ty != self.ty || cs.bytes_per_checksum == 0 {
                continue;
            }
            let bpc = u64::from(cs.bytes_per_checksum);
            for (i, &expected) in cs.checksums.iter().enumerate() {
                let start = chunk.offset.saturating_add((i as u64).saturating_mul(bpc));
                let end = start.saturating_add(bpc).min(chunk.end());
                if start >= end {
                    break;
                }
                if let Some(crc) = self.range(start, end)
                    && crc != expected
                {
                    return Err(FineError::Window {
                        start,
                        len: end - start,
                        chunk: chunk.name.clone(),
                        crc,
                        expected,
                    });
                }
            }
        }
        Ok(())
    }

    /// The file's bytes: tag, checksum type, block size, the points, then
    /// the CRC32C of all that; integers little-endian.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut row = Vec::with_capacity(ROW_HEADER + 4 * self.points.len() + ROW_TRAILER);
        row.extend_from_slice(&ROW_TAG);
        // A builder never takes `None` (no points without checksums), and
        // `decode` refuses a 0.
        row.push(match self.ty {
            ChecksumType::None => 0,
            ChecksumType::Crc32 => 1,
            ChecksumType::Crc32c => 2,
        });
        row.extend_from_slice(&self.size.to_le_bytes());
        for p in &self.points {
            row.extend_from_slice(&p.to_le_bytes());
        }
        let crc = checksum_of(ChecksumType::Crc32c, &row);
        row.extend_from_slice(&crc.to_le_bytes());
        row
    }

    /// Decodes a file's bytes.
    ///
    /// # Errors
    /// What is wrong with them: [`FineError::Short`],
    /// [`FineError::Damaged`] (the trailing CRC: a torn or damaged file),
    /// [`FineError::Tag`], [`FineError::Type`], [`FineError::Length`] (not
    /// one point per 512 bytes of the size it names).
    pub(crate) fn decode(file: &[u8]) -> Result<Self, FineError> {
        let split = file
            .len()
            .checked_sub(ROW_TRAILER)
            .ok_or(FineError::Short { len: file.len() })?;
        let (row, trailer) = file.split_at(split);
        let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        let crc = checksum_of(ChecksumType::Crc32c, row);
        if crc != stored {
            return Err(FineError::Damaged {
                computed: crc,
                stored,
            });
        }
        let header = row
            .get(..ROW_HEADER)
            .ok_or(FineError::Short { len: file.len() })?;
        if header[..2] != ROW_TAG {
            return Err(FineError::Tag([header[0], header[1]]));
        }
        let ty = match header[2] {
            1 => ChecksumType::Crc32,
            2 => ChecksumType::Crc32c,
            t => return Err(FineError::Type(t)),
        };
        let mut size = [0u8; 8];
        size.copy_from_slice(&header[3..ROW_HEADER]);
        let size = u64::from_le_bytes(size);
        let body = &row[ROW_HEADER..];
        let count = size.div_ceil(FINE_GRANULE);
        if size == 0 || body.len() as u64 != count.saturating_mul(4) {
            return Err(FineError::Length {
                body: body.len(),
                size,
            });
        }
        let points = body
            .chunks_exact(4)
            .map(|p| u32::from_le_bytes([p[0], p[1], p[2], p[3]]))
            .collect();
        Ok(Self { ty, size, points })
    }

    /// How to read `len` bytes at block offset `offset` of `chunk` with the
    /// edges of their `bpc`-byte `ty` windows through these points: `None`
    /// when they cannot serve it (another checksum type, a window end that
    /// is not a point), and the read goes by whole windows.
    pub(crate) fn plan(
        self: &Arc<Self>,
        chunk: &ChunkInfo,
        ty: ChecksumType,
        bpc: u32,
        offset: u64,
        len: u64,
    ) -> Option<EdgePlan> {
        if ty != self.ty {
            return None;
        }
        let (head_len, tail_len) = edge_lens(chunk.offset, chunk.len, bpc, offset, len);
        let end = offset.checked_add(len)?;
        let window_start = offset.checked_sub(head_len)?;
        let window_end = end.checked_add(tail_len)?;
        let lo = window_start.max(offset / FINE_GRANULE * FINE_GRANULE);
        let hi = window_end.min(end.div_ceil(FINE_GRANULE).checked_mul(FINE_GRANULE)?);
        // Both outer ranges must be computable from points.
        let head_outer = self.range(window_start, lo)?;
        let tail_outer = self.range(hi, window_end)?;
        Some(EdgePlan {
            start: lo,
            len: hi - lo,
            head: offset - lo,
            edges: PlanEdges::Fine {
                ty,
                head_outer,
                head_len,
                tail_outer,
                tail_outer_len: window_end - hi,
                tail_len,
            },
        })
    }
}

/// How a ReadChunk with edges reads the block file: `len` bytes at block
/// offset `start`, of which the requested range begins `head` bytes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EdgePlan {
    /// Block offset of the read, bytes.
    pub(crate) start: u64,
    /// Bytes to read.
    pub(crate) len: u64,
    /// Bytes read before the requested range.
    head: u64,
    edges: PlanEdges,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PlanEdges {
    /// The read spans whole windows: the edges are the CRCs of the bytes
    /// read around the range.
    Window(ChecksumType),
    /// The read stops at fine checksum points: each edge is the CRC of the
    /// bytes read on that side combined with the CRC (from points) of the
    /// rest of its window.
    Fine {
        ty: ChecksumType,
        /// CRC of the window bytes before the read.
        head_outer: u32,
        /// Window bytes before the range.
        head_len: u64,
        /// CRC of the window bytes after the read.
        tail_outer: u32,
        /// Window bytes after the read.
        tail_outer_len: u64,
        /// Window bytes after the range.
        tail_len: u64,
    },
}

impl EdgePlan {
    /// The whole-window read of `len` bytes at `offset` of `chunk` for
    /// `bpc`-byte `ty` windows (a datanode without fine checksums for the
    /// block).
    pub(crate) fn windows(
        chunk: &ChunkInfo,
        ty: ChecksumType,
        bpc: u32,
        offset: u64,
        len: u64,
    ) -> Self {
        let (head_len, tail_len) = edge_lens(chunk.offset, chunk.len, bpc, offset, len);
        Self {
            start: offset.saturating_sub(head_len),
            len: len.saturating_add(head_len).saturating_add(tail_len),
            head: head_len,
            edges: PlanEdges::Window(ty),
        }
    }

    /// Whether the plan reads through fine checksums.
    pub(crate) fn is_fine(&self) -> bool {
        matches!(self.edges, PlanEdges::Fine { .. })
    }

    /// Bytes read before the requested range.
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// From `read`, the bytes this plan read: where the `len` requested
    /// bytes lie in it, and their edges. `None` when `read` is shorter than
    /// the plan.
    pub(crate) fn edges(&self, read: &[u8], len: u64) -> Option<(Range<usize>, EdgeChecksums)> {
        let from = usize::try_from(self.head).ok()?;
        let to = usize::try_from(self.head.checked_add(len)?).ok()?;
        let (before, rest) = (read.get(..from)?, read.get(to..)?);
        let edges = match self.edges {
            PlanEdges::Window(ty) => EdgeChecksums {
                head: checksum_of(ty, before),
                head_len: self.head,
                tail: checksum_of(ty, rest),
                tail_len: rest.len() as u64,
            },
            PlanEdges::Fine {
                ty,
                head_outer,
                head_len,
                tail_outer,
                tail_outer_len,
                tail_len,
            } => EdgeChecksums {
                head: checksum_append(ty, head_outer, before),
                head_len,
                tail: checksum_combine(ty, checksum_of(ty, rest), tail_outer, tail_outer_len),
                tail_len,
            },
        };
        Some((from..to, edges))
    }
}

mod cache;

pub use cache::DEFAULT_FINE_CHECKSUM_CACHE_BYTES;
pub(crate) use cache::FineCache;

#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod tests;
