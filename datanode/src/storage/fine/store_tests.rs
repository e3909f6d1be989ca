//! The store's use of fine checksums: kept at a block's close, used by
//! ReadChunks with edges, loaded back after a restart, and refused or
//! skipped whenever they could not describe the block's bytes.

use crate::storage::{ContainerStore, StoreOptions};
use block_stream::checksum::verify_with_edges;
use bytes::Bytes;
use proto_crate::{BlockCommit, BlockData, BlockId, ChecksumType, ChunkInfo};

const BPC: u32 = 16 * 1024;
const CHUNK: usize = 64 * 1024;
/// Not a multiple of 512: the block's last point is its end.
const SIZE: usize = 200_000;

fn id(local_id: u64) -> BlockId {
    BlockId {
        container_id: 9,
        local_id,
        replica_index: None,
    }
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn chunks(ty: ChecksumType, data: &[u8]) -> Vec<ChunkInfo> {
    super::tests::chunks(ty, BPC, data, CHUNK)
}

fn record(b: BlockId, chunks: &[ChunkInfo]) -> BlockData {
    BlockData {
        block_id: b,
        size: chunks.iter().map(|c| c.len).sum(),
        chunks: chunks.to_vec(),
        metadata: Default::default(),
    }
}

/// Writes `data` as `b` in `CHUNK`-byte chunks and commits it as `commit`.
async fn write_block(
    s: &ContainerStore,
    b: BlockId,
    ty: ChecksumType,
    data: &[u8],
    commit: BlockCommit,
) -> Vec<ChunkInfo> {
    let chunks = chunks(ty, data);
    for c in &chunks {
        let bytes = Bytes::copy_from_slice(&data[c.offset as usize..c.end() as usize]);
        s.write_chunk(b, c, bytes).await.expect("WriteChunk");
    }
    s.put_block(record(b, &chunks), commit)
        .await
        .expect("PutBlock");
    chunks
}

/// WriteChunk of `c`, its bytes from the block's `data`.
async fn write(
    s: &ContainerStore,
    b: BlockId,
    c: &ChunkInfo,
    data: &[u8],
) -> Result<(), crate::DatanodeError> {
    let part = Bytes::copy_from_slice(&data[c.offset as usize..c.end() as usize]);
    s.write_chunk(b, c, part).await
}

/// Writes `data` as `b` with a WriteChunk retried 100 bytes before the end
/// of the first chunk (between points) and closes it; returns its chunks.
async fn close_after_a_retry_between_points(
    s: &ContainerStore,
    b: BlockId,
    ty: ChecksumType,
    data: &[u8],
) -> Vec<ChunkInfo> {
    let chunks = chunks(ty, data);
    write(s, b, &chunks[0], data).await.expect("WriteChunk");
    let mut retried = chunks[1].clone();
    retried.offset -= 100;
    write(s, b, &retried, data)
        .await
        .expect("a retry before the end");
    for c in &chunks[1..] {
        write(s, b, c, data).await.expect("WriteChunk");
    }
    s.put_block(record(b, &chunks), BlockCommit::Close)
        .await
        .expect("close");
    chunks
}

/// One ReadChunk with edges as the service answers it, checked as a
/// client checks it; returns the bytes it read from the block file.
async fn edge_read(
    s: &ContainerStore,
    b: BlockId,
    chunks: &[ChunkInfo],
    ty: ChecksumType,
    offset: u64,
    len: u64,
) -> u64 {
    let chunk = chunks
        .iter()
        .find(|c| c.offset <= offset && offset < c.end())
        .expect("a chunk holds the offset");
    let plan = s
        .edge_plan(b, chunk, ty, BPC, offset, len)
        .await
        .expect("plan");
    let read = s.read(b, chunk, plan.start, plan.len).await.expect("read");
    let (range, edges) = plan.edges(&read, len).expect("edges");
    verify_with_edges(b, "here", chunk, offset, &read[range], edges)
        .unwrap_or_else(|e| panic!("{len} bytes at {offset} verify: {e}"));
    plan.len
}

/// The block's fine checksums file, if it has one.
fn fine_file(s: &ContainerStore, b: BlockId) -> Option<Vec<u8>> {
    std::fs::read(s.fine_path_of(b.container_id, b.local_id)).ok()
}

#[tokio::test]
async fn a_closed_block_is_read_through_its_fine_checksums() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = data(SIZE, 1);
    let mut written = Vec::new();
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        for (i, ty) in [ChecksumType::Crc32, ChecksumType::Crc32c]
            .into_iter()
            .enumerate()
        {
            let b = id(i as u64 + 1);
            let chunks = write_block(&s, b, ty, &bytes, BlockCommit::Close).await;
            assert!(fine_file(&s, b).is_some(), "{ty:?}: a file at the close");
            // 4 KiB at an odd offset: the pieces 4608..9216, not the
            // window 0..16384.
            assert_eq!(edge_read(&s, b, &chunks, ty, 5000, 4096).await, 4608);
            // Across a window boundary (16384): 15872..17408, not 0..32768.
            assert_eq!(edge_read(&s, b, &chunks, ty, 16_000, 1000).await, 1536);
            // Up to the block's end, which is no multiple of 512: from the
            // point 199168 to the end.
            assert_eq!(
                edge_read(&s, b, &chunks, ty, SIZE as u64 - 700, 700).await,
                832
            );
            for (offset, len) in [(0, 1), (65_535, 1), (65_536, 65_536), (131_073, 65_535)] {
                edge_read(&s, b, &chunks, ty, offset, len).await;
            }
            written.push((b, ty, chunks));
        }
        let stats = s.stats();
        assert_eq!((stats.fine_edge_reads, stats.window_edge_reads), (14, 0));
        // 2 blocks × 391 points of 4 bytes, and the entries' own size.
        assert!(stats.fine_cache_bytes >= 2 * 391 * 4, "{stats:?}");
    }
    // After a restart the rows are loaded back on the first read.
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert_eq!(s.stats().fine_cache_bytes, 0);
    for (b, ty, chunks) in &written {
        assert_eq!(edge_read(&s, *b, chunks, *ty, 5000, 4096).await, 4608);
    }
    assert_eq!(s.stats().fine_edge_reads, 2);
    assert_eq!(s.stats().fine_loads, 2, "one file read per block");
    assert!(s.stats().fine_cache_bytes > 0);

    // Reads that miss together share one load.
    drop(s);
    let s = ContainerStore::open(dir.path()).expect("reopen");
    let (b, ty, chunks) = &written[0];
    let reads = (0..8u64).map(|i| edge_read(&s, *b, chunks, *ty, 5000 + 9000 * i, 4096));
    let lens = futures::future::join_all(reads).await;
    assert!(lens.iter().all(|&n| n == 4608), "{lens:?}");
    let stats = s.stats();
    assert_eq!((stats.fine_loads, stats.fine_edge_reads), (1, 8));
}

#[tokio::test]
async fn blocks_without_usable_fine_checksums_are_read_by_whole_windows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("open");
    let ty = ChecksumType::Crc32;
    let bytes = data(SIZE, 2);

    // Synced, not closed: no row yet.
    let open = write_block(&s, id(1), ty, &bytes, BlockCommit::Sync).await;
    assert_eq!(fine_file(&s, id(1)), None);
    assert_eq!(edge_read(&s, id(1), &open, ty, 5000, 4096).await, 16_384);

    // A WriteChunk retried at an offset between points.
    let b = id(2);
    let chunks = close_after_a_retry_between_points(&s, b, ty, &bytes).await;
    assert_eq!(fine_file(&s, b), None);
    assert_eq!(edge_read(&s, b, &chunks, ty, 5000, 4096).await, 16_384);

    // A writer whose checksums do not match its bytes: nothing is kept.
    let b = id(3);
    let mut lying = chunks.clone();
    lying[1].checksum.checksums[2] ^= 1;
    for c in &lying {
        let part = Bytes::copy_from_slice(&bytes[c.offset as usize..c.end() as usize]);
        s.write_chunk(b, c, part).await.expect("WriteChunk");
    }
    s.put_block(record(b, &lying), BlockCommit::Close)
        .await
        .expect("close");
    assert_eq!(fine_file(&s, b), None);

    // A read of another checksum type than the block's.
    let good = write_block(&s, id(4), ty, &bytes, BlockCommit::Close).await;
    let plan = s
        .edge_plan(id(4), &good[0], ChecksumType::Crc32c, BPC, 5000, 4096)
        .await
        .expect("plan");
    assert_eq!((plan.start, plan.len), (0, 16_384));
    assert_eq!(s.stats().fine_edge_reads, 0);
    assert_eq!(s.stats().window_edge_reads, 3);
    drop(s);

    // With no cache the rows are not used.
    let s = ContainerStore::open_with(
        dir.path(),
        StoreOptions::default().with_fine_checksum_cache_bytes(0),
    )
    .expect("reopen");
    assert_eq!(edge_read(&s, id(4), &good, ty, 5000, 4096).await, 16_384);
    assert_eq!(s.stats().fine_cache_bytes, 0);
}

#[tokio::test]
async fn a_file_that_is_torn_or_disagrees_with_its_record_is_not_used() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ty = ChecksumType::Crc32c;
    let bytes = data(SIZE, 3);
    let (replaced, torn) = {
        let s = ContainerStore::open(dir.path()).expect("open");
        let replaced = write_block(&s, id(1), ty, &bytes, BlockCommit::Close).await;
        let torn = write_block(&s, id(3), ty, &bytes, BlockCommit::Close).await;
        // The points of other bytes of the same length put in its place:
        // a whole file, whose windows disagree with the record.
        write_block(&s, id(2), ty, &data(SIZE, 4), BlockCommit::Close).await;
        let other = fine_file(&s, id(2)).expect("a file");
        std::fs::write(s.fine_path_of(9, 1), other).expect("replace");
        // A file a crash cut short.
        let path = s.fine_path_of(9, 3);
        let whole = std::fs::read(&path).expect("a file");
        std::fs::write(&path, &whole[..whole.len() / 2]).expect("cut");
        (replaced, torn)
    };
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert_eq!(
        edge_read(&s, id(1), &replaced, ty, 5000, 4096).await,
        16_384
    );
    assert_eq!(edge_read(&s, id(1), &replaced, ty, 9000, 100).await, 16_384);
    assert_eq!(edge_read(&s, id(3), &torn, ty, 5000, 4096).await, 16_384);
    assert_eq!(
        edge_read(&s, id(2), &chunks(ty, &data(SIZE, 4)), ty, 5000, 4096).await,
        4608
    );
    let stats = s.stats();
    assert_eq!((stats.fine_edge_reads, stats.window_edge_reads), (1, 3));
}

#[tokio::test]
async fn deletion_removes_a_blocks_fine_checksums() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("open");
    let ty = ChecksumType::Crc32;
    let chunks = write_block(&s, id(1), ty, &data(SIZE, 5), BlockCommit::Close).await;
    assert_eq!(edge_read(&s, id(1), &chunks, ty, 5000, 4096).await, 4608);
    assert!(s.stats().fine_cache_bytes > 0);
    s.delete_blocks(&[id(1)]).await.expect("delete");
    assert_eq!(fine_file(&s, id(1)), None);
    assert_eq!(s.stats().fine_cache_bytes, 0);
}

#[tokio::test]
async fn start_up_removes_fine_checksums_whose_block_has_no_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ty = ChecksumType::Crc32;
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        write_block(&s, id(1), ty, &data(SIZE, 6), BlockCommit::Close).await;
        // As a crash between a lost block's drop and its file's removal
        // leaves it: another block's file under a block id with no record.
        let kept = fine_file(&s, id(1)).expect("a file");
        std::fs::write(s.fine_path_of(9, 77), kept).expect("an orphan");
    }
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert!(
        fine_file(&s, id(1)).is_some(),
        "a closed block keeps its file"
    );
    assert_eq!(fine_file(&s, id(77)), None, "the orphan is gone");
    assert_eq!(s.recovery().fine_orphans_removed, 1);
}

#[tokio::test]
async fn a_block_reopened_mid_write_or_refused_after_its_close() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ty = ChecksumType::Crc32;
    let bytes = data(SIZE, 7);
    let chunks = chunks(ty, &bytes);
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        write(&s, id(1), &chunks[0], &bytes)
            .await
            .expect("WriteChunk");
        s.put_block(record(id(1), &chunks[..1]), BlockCommit::Sync)
            .await
            .expect("hsync");
    }
    // Restarted over bytes already on disk: the rest of the block is
    // written and closed, and it keeps no fine checksums.
    let s = ContainerStore::open(dir.path()).expect("reopen");
    for c in &chunks[1..] {
        write(&s, id(1), c, &bytes).await.expect("WriteChunk");
    }
    s.put_block(record(id(1), &chunks), BlockCommit::Close)
        .await
        .expect("close");
    assert_eq!(fine_file(&s, id(1)), None);
    assert_eq!(edge_read(&s, id(1), &chunks, ty, 5000, 4096).await, 16_384);

    // A write retried after the close is refused and leaves write state
    // behind; the block is still read through its fine checksums once the
    // cache has let them go.
    write_block(&s, id(2), ty, &bytes, BlockCommit::Close).await;
    assert!(matches!(
        write(&s, id(2), &chunks[3], &bytes).await,
        Err(crate::DatanodeError::BlockClosed { .. })
    ));
    s.fine.remove((9, 2));
    assert_eq!(edge_read(&s, id(2), &chunks, ty, 5000, 4096).await, 4608);
}

#[tokio::test]
async fn a_close_without_fine_checksums_removes_an_earlier_lifes_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("open");
    let ty = ChecksumType::Crc32;
    let bytes = data(SIZE, 8);
    write_block(&s, id(1), ty, &bytes, BlockCommit::Close).await;
    let old = fine_file(&s, id(1)).expect("a file");
    s.delete_blocks(&[id(1)]).await.expect("delete");
    // As a removal that failed leaves it.
    std::fs::write(s.fine_path_of(9, 1), old).expect("put back");
    assert!(s.revive(id(1)).await.expect("revive"));
    // Written again with a retried WriteChunk between points: no points.
    close_after_a_retry_between_points(&s, id(1), ty, &bytes).await;
    assert_eq!(
        fine_file(&s, id(1)),
        None,
        "the earlier life's file is gone"
    );
}
