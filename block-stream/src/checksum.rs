//! Chunk checksums: one CRC per bytesPerChecksum window, as Ozone's `Checksum`
//! computes them (CRC32 by default, CRC32C optionally).
//!
//! Windows are counted from the start of the chunk; the last one may be short.
//! A reader that wants bytes `[a, b)` of a chunk fetches exactly them with the
//! datanode's [`EdgeChecksums`] of the window bytes around them and
//! [`verify_with_edges`]; against a datanode that sends no edges it
//! [`widen`]s the range to whole windows, fetches that and [`verify`]s every
//! window it received.

use proto_crate::{BlockId, ChecksumData, ChecksumType, ChunkInfo};

use crate::{BlockStreamError, crc_combine};

/// Checksum of one window of bytes.
#[must_use]
pub fn checksum_of(ty: ChecksumType, bytes: &[u8]) -> u32 {
    match ty {
        ChecksumType::None => 0,
        ChecksumType::Crc32 => crc32fast::hash(bytes),
        ChecksumType::Crc32c => crc32c::crc32c(bytes),
    }
}

/// Computes the checksums of a whole chunk's bytes.
///
/// `bytes_per_checksum` must be positive unless `ty` is `None` (a 0 is treated
/// as "one window for the whole chunk").
#[must_use]
pub fn compute(ty: ChecksumType, bytes_per_checksum: u32, data: &[u8]) -> ChecksumData {
    if ty == ChecksumType::None {
        return ChecksumData {
            ty,
            bytes_per_checksum,
            checksums: Vec::new(),
        };
    }
    let window = if bytes_per_checksum == 0 {
        data.len().max(1)
    } else {
        bytes_per_checksum as usize
    };
    ChecksumData {
        ty,
        bytes_per_checksum: u32::try_from(window).unwrap_or(u32::MAX),
        checksums: data.chunks(window).map(|w| checksum_of(ty, w)).collect(),
    }
}

/// Checksum of `bytes` following earlier bytes whose checksum is `crc`
/// (the checksum of the two runs together; `crc` 0 is "no earlier bytes").
#[must_use]
pub fn checksum_append(ty: ChecksumType, crc: u32, bytes: &[u8]) -> u32 {
    match ty {
        ChecksumType::None => 0,
        ChecksumType::Crc32 => {
            let mut h = crc32fast::Hasher::new_with_initial(crc);
            h.update(bytes);
            h.finalize()
        }
        ChecksumType::Crc32c => crc32c::crc32c_append(crc, bytes),
    }
}

/// Checksum of bytes A followed by bytes B, from A's checksum `a`, B's
/// checksum `b` and B's length in bytes (no byte is read; a few carry-less
/// multiplications, [`crc_combine`]).
#[must_use]
pub fn checksum_combine(ty: ChecksumType, a: u32, b: u32, len_b: u64) -> u32 {
    // A 32-bit CRC's combination has no bits above 32: the casts drop zeros.
    match ty {
        ChecksumType::None => 0,
        ChecksumType::Crc32 => crc_combine::CRC32.combine(a.into(), b.into(), len_b) as u32,
        ChecksumType::Crc32c => crc_combine::CRC32C.combine(a.into(), b.into(), len_b) as u32,
    }
}

/// Checksums of the bytes around a read range inside the checksum windows it
/// touches, as a datanode answers them (`EdgeChecksums` in
/// `datanode.proto`): `head` covers the `head_len` bytes from the first
/// window's start up to the range, `tail` the `tail_len` bytes from the
/// range's end up to the last window's end (or the chunk's). A range on
/// window boundaries has both lengths 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EdgeChecksums {
    /// Checksum of the head bytes.
    pub head: u32,
    /// Head bytes.
    pub head_len: u64,
    /// Checksum of the tail bytes.
    pub tail: u32,
    /// Tail bytes.
    pub tail_len: u64,
}

/// Bytes between the block-relative range `[offset, offset + len)` and the
/// edges of the `bytes_per_checksum` windows around it, in a chunk that
/// starts at block offset `chunk_offset` and holds `chunk_len` bytes:
/// `(head_len, tail_len)`. The range must lie inside the chunk and
/// `bytes_per_checksum` be positive (0 gives `(0, 0)`).
#[must_use]
pub fn edge_lens(
    chunk_offset: u64,
    chunk_len: u64,
    bytes_per_checksum: u32,
    offset: u64,
    len: u64,
) -> (u64, u64) {
    let bpc = u64::from(bytes_per_checksum);
    if bpc == 0 {
        return (0, 0);
    }
    let rel_start = offset.saturating_sub(chunk_offset);
    let rel_end = rel_start.saturating_add(len);
    let window_end = rel_end.div_ceil(bpc).saturating_mul(bpc).min(chunk_len);
    (rel_start % bpc, window_end.saturating_sub(rel_end))
}

/// The [`EdgeChecksums`] of a range, from `widened`: the bytes of the
/// windows around it, starting `head_len` bytes before the range, which is
/// `len` bytes long (what a datanode computes). `None` if `widened` is
/// shorter than `head_len + len`.
#[must_use]
pub fn edge_checksums(
    ty: ChecksumType,
    widened: &[u8],
    head_len: u64,
    len: u64,
) -> Option<EdgeChecksums> {
    let head_end = usize::try_from(head_len).ok()?;
    let tail_start = usize::try_from(head_len.checked_add(len)?).ok()?;
    let head = widened.get(..head_end)?;
    let tail = widened.get(tail_start..)?;
    Some(EdgeChecksums {
        head: checksum_of(ty, head),
        head_len,
        tail: checksum_of(ty, tail),
        tail_len: tail.len() as u64,
    })
}

impl From<proto_crate::wire::datanode::EdgeChecksums> for EdgeChecksums {
    fn from(e: proto_crate::wire::datanode::EdgeChecksums) -> Self {
        Self {
            head: e.head,
            head_len: e.head_len,
            tail: e.tail,
            tail_len: e.tail_len,
        }
    }
}

impl From<EdgeChecksums> for proto_crate::wire::datanode::EdgeChecksums {
    fn from(e: EdgeChecksums) -> Self {
        Self {
            head: e.head,
            head_len: e.head_len,
            tail: e.tail,
            tail_len: e.tail_len,
        }
    }
}

/// Whether a verified read of `[offset, offset + len)` of `chunk` needs bytes
/// outside the range (it does not start and end on window boundaries).
#[must_use]
pub fn needs_edges(chunk: &ChunkInfo, offset: u64, len: u64) -> bool {
    let cs = &chunk.checksum;
    cs.ty != ChecksumType::None
        && cs.bytes_per_checksum != 0
        && edge_lens(chunk.offset, chunk.len, cs.bytes_per_checksum, offset, len) != (0, 0)
}

/// Verifies `data`, exactly the bytes of `chunk` at block-relative `offset`,
/// against the chunk's checksums, with the datanode's `edges` standing in for
/// the window bytes around them that were not sent: each window's checksum is
/// folded from the head checksum, the checksum of the bytes received and the
/// tail checksum ([`checksum_append`], [`checksum_combine`]).
///
/// # Errors
/// [`BlockStreamError::ChecksumMismatch`] for the first window that differs;
/// [`BlockStreamError::Protocol`] if the edges' lengths are not the ones the
/// chunk's windows give or the chunk lists too few checksums.
pub fn verify_with_edges(
    block: BlockId,
    datanode: &str,
    chunk: &ChunkInfo,
    offset: u64,
    data: &[u8],
    edges: EdgeChecksums,
) -> Result<(), BlockStreamError> {
    let cs = &chunk.checksum;
    if cs.ty == ChecksumType::None || cs.bytes_per_checksum == 0 {
        return Ok(());
    }
    let protocol = |field: &'static str, reason: String| BlockStreamError::Protocol {
        datanode: datanode.to_string(),
        source: proto_crate::ProtocolError::InvalidField { field, reason },
    };
    let len = data.len() as u64;
    if offset < chunk.offset || offset.checked_add(len).is_none_or(|end| end > chunk.end()) {
        return Err(BlockStreamError::InvalidArgument(format!(
            "{len} bytes at {offset} of block {block} are not inside chunk {} ({} bytes at {})",
            chunk.name, chunk.len, chunk.offset
        )));
    }
    let expected_lens = edge_lens(chunk.offset, chunk.len, cs.bytes_per_checksum, offset, len);
    if (edges.head_len, edges.tail_len) != expected_lens {
        return Err(protocol(
            "edges",
            format!(
                "edges of {len} bytes at {offset} of block {block} span ({}, {}) bytes, the \
                 chunk's {}-byte windows give {expected_lens:?}",
                edges.head_len, edges.tail_len, cs.bytes_per_checksum
            ),
        ));
    }
    let bpc = u64::from(cs.bytes_per_checksum);
    let rel_start = offset.saturating_sub(chunk.offset);
    let rel_end = rel_start + len;
    let mut pos = rel_start;
    while pos < rel_end {
        let window = pos / bpc;
        let w_start = window * bpc;
        let w_end = (w_start + bpc).min(chunk.len);
        let part_end = w_end.min(rel_end);
        let from = usize::try_from(pos - rel_start).unwrap_or(usize::MAX);
        let to = usize::try_from(part_end - rel_start).unwrap_or(usize::MAX);
        let part = &data[from..to];
        let mut computed = if pos == rel_start {
            checksum_append(cs.ty, edges.head, part)
        } else {
            checksum_of(cs.ty, part)
        };
        if part_end == rel_end {
            computed = checksum_combine(cs.ty, computed, edges.tail, edges.tail_len);
        }
        let idx = usize::try_from(window).unwrap_or(usize::MAX);
        let Some(&expected) = cs.checksums.get(idx) else {
            return Err(protocol(
                "chunk.checksum_data.checksums",
                format!(
                    "chunk {} of block {block} lists {} checksums, window {idx} needed",
                    chunk.name,
                    cs.checksums.len()
                ),
            ));
        };
        if computed != expected {
            return Err(BlockStreamError::ChecksumMismatch {
                block,
                datanode: datanode.to_string(),
                offset: chunk.offset + w_start,
                len: w_end - w_start,
                expected,
                computed,
            });
        }
        pos = part_end;
    }
    Ok(())
}

/// Widens the block-relative range `[offset, offset + len)` (which must lie in
/// `chunk`) to whole checksum windows of the chunk. Returns the widened
/// block-relative `(offset, len)`; with no checksums the range is unchanged.
#[must_use]
pub fn widen(chunk: &ChunkInfo, offset: u64, len: u64) -> (u64, u64) {
    let bpc = u64::from(chunk.checksum.bytes_per_checksum);
    if chunk.checksum.ty == ChecksumType::None || bpc == 0 {
        return (offset, len);
    }
    let rel_start = offset.saturating_sub(chunk.offset);
    let rel_end = rel_start.saturating_add(len);
    let start = rel_start / bpc * bpc;
    let end = rel_end.div_ceil(bpc).saturating_mul(bpc).min(chunk.len);
    (chunk.offset + start, end.saturating_sub(start))
}

/// Verifies `data`, the bytes of `chunk` starting at block-relative `offset`
/// (a window boundary, as [`widen`] returns) and ending on one or at the
/// chunk's end, against the chunk's checksums: [`verify_with_edges`] with no
/// edges.
///
/// # Errors
/// [`BlockStreamError::ChecksumMismatch`] for the first window that differs,
/// naming `block`, `datanode` and the window's block offset;
/// [`BlockStreamError::Protocol`] if the chunk lists too few checksums for
/// the range or `data` ends inside a window;
/// [`BlockStreamError::InvalidArgument`] if `offset` is not on a window
/// boundary or the range is not inside the chunk.
pub fn verify(
    block: BlockId,
    datanode: &str,
    chunk: &ChunkInfo,
    offset: u64,
    data: &[u8],
) -> Result<(), BlockStreamError> {
    let cs = &chunk.checksum;
    if cs.ty == ChecksumType::None || cs.bytes_per_checksum == 0 {
        return Ok(());
    }
    let bpc = u64::from(cs.bytes_per_checksum);
    let rel = offset.saturating_sub(chunk.offset);
    if !rel.is_multiple_of(bpc) {
        return Err(BlockStreamError::InvalidArgument(format!(
            "verify of block {block} at offset {offset} is not aligned to {bpc}-byte windows"
        )));
    }
    // Whole windows from a window boundary: no edges to fold in.
    verify_with_edges(
        block,
        datanode,
        chunk,
        offset,
        data,
        EdgeChecksums::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk_of(ty: ChecksumType, bpc: u32, offset: u64, data: &[u8]) -> ChunkInfo {
        ChunkInfo {
            name: "c".into(),
            offset,
            len: data.len() as u64,
            checksum: compute(ty, bpc, data),
        }
    }

    #[test]
    fn known_crc_values() {
        // Check values of the two polynomials over "123456789".
        assert_eq!(checksum_of(ChecksumType::Crc32, b"123456789"), 0xCBF4_3926);
        assert_eq!(checksum_of(ChecksumType::Crc32c, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn flipped_byte_is_caught_in_its_window() {
        let data: Vec<u8> = (0..100u8).collect();
        let chunk = chunk_of(ChecksumType::Crc32c, 16, 1000, &data);
        assert_eq!(chunk.checksum.checksums.len(), 7);
        let mut bad = data.clone();
        bad[37] ^= 1;
        let id = BlockId {
            container_id: 1,
            local_id: 1,
            replica_index: proto_crate::ReplicaIndex::new(1),
        };
        verify(id, "dn", &chunk, 1000, &data).expect("untouched window verifies");
        match verify(id, "dn", &chunk, 1000, &bad) {
            Err(BlockStreamError::ChecksumMismatch { offset, len, .. }) => {
                assert_eq!(offset, 1032);
                assert_eq!(len, 16);
            }
            other => panic!("expected mismatch, got {other:?}"),
        }
    }

    const ID: BlockId = BlockId {
        container_id: 0,
        local_id: 0,
        replica_index: None,
    };

    /// What a datanode answers for `[lo, hi)` (chunk-relative) with edges:
    /// the edges computed over `stored`, its bytes.
    fn edges_over(chunk: &ChunkInfo, stored: &[u8], lo: usize, hi: usize) -> EdgeChecksums {
        let cs = &chunk.checksum;
        let (head, tail) = edge_lens(
            0,
            chunk.len,
            cs.bytes_per_checksum,
            lo as u64,
            (hi - lo) as u64,
        );
        let from = lo - head as usize;
        let to = hi + tail as usize;
        edge_checksums(cs.ty, &stored[from..to], head, (hi - lo) as u64).expect("in range")
    }

    proptest! {
        /// Exactly the bytes of any sub-range, with the edges a datanode
        /// computes, verify against the writer's checksums; a flipped bit in
        /// the bytes received or in the stored bytes around them (the
        /// datanode's edges then cover the bad byte) is a mismatch; edges of
        /// the wrong lengths are a protocol error.
        #[test]
        fn ranges_verify_with_edges(
            len in 1usize..300,
            bpc in 1u32..64,
            a in 0usize..300,
            b in 0usize..300,
            base in 0u64..1000,
            crc32c in any::<bool>(),
            flip in 0usize..300,
        ) {
            let ty = if crc32c { ChecksumType::Crc32c } else { ChecksumType::Crc32 };
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let chunk = chunk_of(ty, bpc, base, &data);
            let lo = a.min(b) % len;
            let hi = (a.max(b) % len).max(lo) + 1;
            let at = base + lo as u64;
            let edges = edges_over(&chunk, &data, lo, hi);
            prop_assert_eq!(
                needs_edges(&chunk, at, (hi - lo) as u64),
                (edges.head_len, edges.tail_len) != (0, 0)
            );
            prop_assert!(verify_with_edges(ID, "dn", &chunk, at, &data[lo..hi], edges).is_ok());

            // A byte anywhere in the windows the range touches.
            let bpc = bpc as usize;
            let window_lo = lo / bpc * bpc;
            let window_hi = (hi.div_ceil(bpc) * bpc).min(len);
            let flip = window_lo + flip % (window_hi - window_lo);
            let mut stored = data.clone();
            stored[flip] ^= 0x10;
            let bad_edges = edges_over(&chunk, &stored, lo, hi);
            let caught = matches!(
                verify_with_edges(ID, "dn", &chunk, at, &stored[lo..hi], bad_edges),
                Err(BlockStreamError::ChecksumMismatch { .. })
            );
            prop_assert!(caught, "flipped byte {} of [{}, {}) passed", flip, lo, hi);

            let wrong = EdgeChecksums { head_len: edges.head_len + 1, ..edges };
            let refused = matches!(
                verify_with_edges(ID, "dn", &chunk, at, &data[lo..hi], wrong),
                Err(BlockStreamError::Protocol { .. })
            );
            prop_assert!(refused);
        }

        /// Any sub-range widened to windows verifies and covers the sub-range.
        #[test]
        fn widened_ranges_verify(len in 1usize..300, bpc in 1u32..64, a in 0usize..300, b in 0usize..300, base in 0u64..1000) {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let chunk = chunk_of(ChecksumType::Crc32, bpc, base, &data);
            let (lo, hi) = (a.min(b) % len, (a.max(b) % len).max(a.min(b) % len));
            let (w_off, w_len) = widen(&chunk, base + lo as u64, (hi - lo) as u64);
            prop_assert!(w_off <= base + lo as u64);
            prop_assert!(w_off + w_len >= base + hi as u64);
            prop_assert!(w_off + w_len <= chunk.end());
            let rel = (w_off - base) as usize;
            let id = BlockId { container_id: 0, local_id: 0, replica_index: None };
            prop_assert!(verify(id, "dn", &chunk, w_off, &data[rel..rel + w_len as usize]).is_ok());
        }
    }
}
