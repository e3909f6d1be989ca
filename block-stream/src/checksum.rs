//! Chunk checksums: one CRC per bytesPerChecksum window, as Ozone's `Checksum`
//! computes them (CRC32 by default, CRC32C optionally).
//!
//! Windows are counted from the start of the chunk; the last one may be short.
//! A reader that wants bytes `[a, b)` of a chunk first [`widen`]s the range to
//! whole windows, fetches that, then [`verify`]s every window it received.

use proto_crate::{BlockId, ChecksumData, ChecksumType, ChunkInfo};

use crate::BlockStreamError;

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
/// (a window boundary, as [`widen`] returns), against the chunk's checksums.
///
/// # Errors
/// [`BlockStreamError::ChecksumMismatch`] for the first window that differs,
/// naming `block`, `datanode` and the window's block offset;
/// [`BlockStreamError::Protocol`]-like `InvalidArgument` if the chunk lists too
/// few checksums for the range.
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
    let first = usize::try_from(rel / bpc).unwrap_or(usize::MAX);
    for (i, window) in data.chunks(cs.bytes_per_checksum as usize).enumerate() {
        let idx = first.saturating_add(i);
        let window_offset = offset + (i as u64) * bpc;
        let Some(&expected) = cs.checksums.get(idx) else {
            return Err(BlockStreamError::Protocol {
                datanode: datanode.to_string(),
                source: proto_crate::ProtocolError::InvalidField {
                    field: "chunk.checksum_data.checksums",
                    reason: format!(
                        "chunk {} of block {block} lists {} checksums, window {idx} needed",
                        chunk.name,
                        cs.checksums.len()
                    ),
                },
            });
        };
        let computed = checksum_of(cs.ty, window);
        if computed != expected {
            return Err(BlockStreamError::ChecksumMismatch {
                block,
                datanode: datanode.to_string(),
                offset: window_offset,
                len: window.len() as u64,
                expected,
                computed,
            });
        }
    }
    Ok(())
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

    proptest! {
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
