use std::sync::Arc;

use block_stream::checksum::{self, checksum_of, edge_checksums, edge_lens};
use proptest::prelude::*;
use proto_crate::{BlockData, BlockId, ChecksumType, ChunkInfo};

use super::{EdgePlan, FINE_GRANULE, FineBuilder, FineChecksums, MAX_FINE_BLOCK};

fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The block's chunks, `chunk_len` bytes each, with the writer's checksums.
pub(super) fn chunks(ty: ChecksumType, bpc: u32, data: &[u8], chunk_len: usize) -> Vec<ChunkInfo> {
    data.chunks(chunk_len)
        .enumerate()
        .map(|(i, c)| ChunkInfo {
            name: format!("c{i}"),
            offset: (i * chunk_len) as u64,
            len: c.len() as u64,
            checksum: checksum::compute(ty, bpc, c),
        })
        .collect()
}

fn record(chunks: Vec<ChunkInfo>, size: u64) -> BlockData {
    BlockData {
        block_id: BlockId {
            container_id: 1,
            local_id: 1,
            replica_index: None,
        },
        chunks,
        size,
        metadata: Default::default(),
    }
}

fn built(ty: ChecksumType, data: &[u8], pieces: &[usize]) -> FineChecksums {
    let mut b = FineBuilder::default();
    let mut at = 0;
    for &n in pieces.iter().chain(std::iter::once(&data.len())) {
        let end = (at + n).min(data.len());
        assert!(b.write(ty, at as u64, &data[at..end]), "write at {at}");
        at = end;
        if at == data.len() {
            break;
        }
    }
    b.finish(data.len() as u64)
        .expect("points for a nonempty block")
}

fn both_types() -> impl Strategy<Value = ChecksumType> {
    prop_oneof![Just(ChecksumType::Crc32), Just(ChecksumType::Crc32c)]
}

proptest! {
    /// Every point is the CRC of the block's bytes up to it, however the
    /// writes split the block.
    #[test]
    fn points_are_prefix_crcs(
        ty in both_types(),
        len in 1usize..5000,
        pieces in proptest::collection::vec(1usize..1500, 0..6),
        seed in any::<u64>(),
    ) {
        let data = bytes(len, seed);
        let fine = built(ty, &data, &pieces);
        prop_assert_eq!(fine.points.len() as u64, (len as u64).div_ceil(FINE_GRANULE));
        for (k, &p) in fine.points.iter().enumerate() {
            let upto = ((k + 1) * FINE_GRANULE as usize).min(len);
            prop_assert_eq!(p, checksum_of(ty, &data[..upto]), "point {}", k);
        }
    }

    /// A ReadChunk with edges served through points sends the same edges as
    /// one that reads whole windows, and reads at most 511 bytes on each
    /// side of the range, for any range of any chunk layout whose windows
    /// start on points; layouts whose windows do not are left to window
    /// reads.
    #[test]
    fn fine_edges_equal_window_edges(
        ty in both_types(),
        bpc_granules in 1u32..40,
        bpc_odd in 0u32..2,
        chunk_granules in 1usize..80,
        chunk_odd in 0usize..2,
        len in 1usize..40_000,
        seed in any::<u64>(),
        picks in proptest::collection::vec((any::<u64>(), 0u64..9000), 1..20),
    ) {
        // Windows on points (a multiple of 512), or not (one byte more).
        let bpc = bpc_granules * FINE_GRANULE as u32 + bpc_odd;
        let data = bytes(len, seed);
        // Chunks on points, or not (their windows then start off points).
        let chunk_len = chunk_granules * FINE_GRANULE as usize + chunk_odd;
        let chunks = chunks(ty, bpc, &data, chunk_len);
        let fine = Arc::new(built(ty, &data, &[chunk_len; 80]));
        prop_assert_eq!(fine.agrees_with(&record(chunks.clone(), len as u64)), Ok(()));
        for (at, n) in picks {
            let offset = at % len as u64;
            let chunk = &chunks[(offset / chunk_len as u64) as usize];
            let n = n.min(chunk.end() - offset);
            let window = EdgePlan::windows(chunk, ty, bpc, offset, n);
            let read = |p: &EdgePlan| &data[p.start as usize..(p.start + p.len) as usize];
            let (w_range, w_edges) = window.edges(read(&window), n).expect("window read");
            let (h, t) = edge_lens(chunk.offset, chunk.len, bpc, offset, n);
            let direct = edge_checksums(ty, read(&window), h, n).expect("direct edges");
            prop_assert_eq!(w_edges, direct);
            let point = |x: u64| x.is_multiple_of(FINE_GRANULE) || x == len as u64;
            let ends_on_points = point(offset - h) && point(offset + n + t);
            prop_assert!(bpc_odd == 1 || chunk_odd == 1 || ends_on_points);
            match fine.plan(chunk, ty, bpc, offset, n) {
                Some(plan) => {
                    prop_assert!(ends_on_points, "served only between points");
                    prop_assert!(plan.start <= offset && offset - plan.start < FINE_GRANULE);
                    prop_assert!(plan.start + plan.len - (offset + n) < FINE_GRANULE);
                    let (range, edges) = plan.edges(read(&plan), n).expect("fine read");
                    prop_assert_eq!(edges, direct, "{}+{} of chunk {}", offset, n, chunk.name);
                    prop_assert_eq!(
                        &read(&plan)[range],
                        &read(&window)[w_range],
                    );
                }
                None => prop_assert!(!ends_on_points, "windows between points are served"),
            }
        }
        // Another checksum type is never served from these points.
        let other = if ty == ChecksumType::Crc32 { ChecksumType::Crc32c } else { ChecksumType::Crc32 };
        prop_assert!(fine.plan(&chunks[0], other, bpc, 0, 1).is_none());
    }
}

#[test]
fn a_retried_write_replaces_the_tail() {
    let ty = ChecksumType::Crc32;
    let data = bytes(3000, 7);
    let junk = bytes(1500, 8);
    let mut b = FineBuilder::default();
    assert!(b.write(ty, 0, &data[..1024]));
    assert!(b.write(ty, 1024, &junk));
    assert!(b.write(ty, 1024, &data[1024..]), "a rewrite at a point");
    let fine = b.finish(3000).expect("points");
    assert_eq!(fine, built(ty, &data, &[]));

    let mut b = FineBuilder::default();
    assert!(b.write(ty, 0, &data[..2000]));
    assert!(
        !b.write(ty, 1000, &data[1000..]),
        "a rewrite between points"
    );
    let mut b = FineBuilder::default();
    assert!(b.write(ty, 0, &data[..2000]));
    assert!(
        !b.write(ChecksumType::Crc32c, 2000, &data[2000..]),
        "a second type"
    );
    assert!(!FineBuilder::default().write(ChecksumType::None, 0, &data));
    assert!(
        !FineBuilder::default().write(ty, MAX_FINE_BLOCK - 10, &data[..11]),
        "past the largest block followed"
    );
}

#[test]
fn a_close_may_cut_at_a_point_only() {
    let ty = ChecksumType::Crc32c;
    let data = bytes(3000, 9);
    let mut b = FineBuilder::default();
    assert!(b.write(ty, 0, &data));
    assert_eq!(b.clone().finish(2048), Some(built(ty, &data[..2048], &[])));
    assert_eq!(b.clone().finish(2000), None, "cut between points");
    assert_eq!(b.clone().finish(3001), None, "more than was written");
    assert_eq!(b.finish(0), None);
    assert_eq!(FineBuilder::default().finish(0), None);
}

/// `body` with a trailing CRC32C of its own, as `encode` ends a file.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut file = body.to_vec();
    file.extend_from_slice(&checksum_of(ChecksumType::Crc32c, body).to_le_bytes());
    file
}

#[test]
fn files_round_trip_and_bad_files_are_refused() {
    let data = bytes(1300, 3);
    for ty in [ChecksumType::Crc32, ChecksumType::Crc32c] {
        let fine = built(ty, &data, &[]);
        let file = fine.encode();
        assert_eq!(file.len(), 11 + 3 * 4 + 4);
        assert_eq!(FineChecksums::decode(&file), Ok(fine));
    }
    let file = built(ChecksumType::Crc32, &data, &[]).encode();
    let body = &file[..file.len() - 4];
    let refused = |r: &[u8]| FineChecksums::decode(r).expect_err("refused").to_string();
    assert!(refused(&file[..3]).contains("shorter than the header"));
    assert!(refused(&sealed(&body[..5])).contains("shorter than the header"));
    // Torn (cut short, or a page of zeros) or flipped: the trailer says so.
    for damaged in [file[..file.len() - 1].to_vec(), vec![0; file.len()], {
        let mut f = file.clone();
        f[20] ^= 4;
        f
    }] {
        assert!(refused(&damaged).contains("torn or damaged"), "{damaged:?}");
    }
    assert!(refused(&sealed(&body[..body.len() - 1])).contains("for a 1300-byte block"));
    let mut bad = body.to_vec();
    bad[0] = b'X';
    assert!(refused(&sealed(&bad)).contains("unknown tag"));
    let mut bad = body.to_vec();
    bad[2] = 9;
    assert!(refused(&sealed(&bad)).contains("unknown checksum type 9"));
}

#[test]
fn points_that_disagree_with_the_writer_are_named() {
    let ty = ChecksumType::Crc32;
    let data = bytes(40_000, 5);
    let chunks = chunks(ty, 16 * 1024, &data, 32 * 1024);
    let mut fine = built(ty, &data, &[]);
    assert_eq!(fine.agrees_with(&record(chunks.clone(), 40_000)), Ok(()));
    assert!(
        fine.agrees_with(&record(chunks.clone(), 39_999))
            .expect_err("another size")
            .to_string()
            .contains("points for 40000 bytes, the block holds 39999")
    );
    // The point at the end of the second window (32 KiB).
    fine.points[63] ^= 1;
    let why = fine
        .agrees_with(&record(chunks, 40_000))
        .expect_err("a wrong point")
        .to_string();
    assert!(why.contains("window 16384+16384 of chunk c0"), "{why}");
}
