//! Unit tests of the container store: write, commit, read, reopen, and the
//! WriteChunk/PutBlock rules.

use super::*;
use proto_crate::{BlockCommit, ChecksumData, ChecksumType};

fn id(ri: u32) -> BlockId {
    BlockId {
        container_id: 7,
        local_id: 42,
        replica_index: ReplicaIndex::new(ri),
    }
}

fn chunk(offset: u64, len: u64) -> ChunkInfo {
    ChunkInfo {
        name: format!("c{offset}"),
        offset,
        len,
        checksum: ChecksumData {
            ty: ChecksumType::None,
            bytes_per_checksum: 0,
            checksums: vec![],
        },
    }
}

fn block(ri: u32, chunks: Vec<ChunkInfo>) -> BlockData {
    BlockData {
        block_id: id(ri),
        size: chunks.iter().map(|c| c.len).sum(),
        chunks,
        metadata: BTreeMap::new(),
    }
}

#[tokio::test]
async fn write_commit_read_and_reopen() {
    let dir = tempfile::tempdir().expect("store operation on a temp dir");
    {
        let s = ContainerStore::open(dir.path()).expect("store operation on a temp dir");
        s.write_chunk(id(2), &chunk(0, 5), Bytes::from_static(b"hello"))
            .await
            .expect("store operation on a temp dir");
        s.write_chunk(id(2), &chunk(5, 6), Bytes::from_static(b" world"))
            .await
            .expect("store operation on a temp dir");
        // Not committed yet: invisible.
        assert!(matches!(
            s.get_block(id(2)),
            Err(DatanodeError::NoSuchBlock { .. })
        ));
        let size = s
            .put_block(block(2, vec![chunk(0, 5), chunk(5, 6)]), BlockCommit::Sync)
            .await
            .expect("store operation on a temp dir");
        assert_eq!(size, 11);
        let got = s
            .read(id(2), &chunk(5, 6), 6, 5)
            .await
            .expect("store operation on a temp dir");
        assert_eq!(&got[..], b"world");
    }
    let s = ContainerStore::open(dir.path()).expect("store operation on a temp dir");
    let d = s.get_block(id(2)).expect("store operation on a temp dir");
    assert_eq!(d.size, 11);
    assert_eq!(
        &s.read(id(2), &chunk(0, 5), 0, 5)
            .await
            .expect("store operation on a temp dir")[..],
        b"hello"
    );
    assert!(matches!(
        s.get_block(id(3)),
        Err(DatanodeError::ReplicaIndexMismatch { stored: Some(r), .. }) if r.get() == 2
    ));
    assert!(matches!(
        s.read(id(2), &chunk(5, 6), 8, 4).await,
        Err(DatanodeError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.read(id(2), &chunk(0, 5), 0, MAX_READ_LEN + 1).await,
        Err(DatanodeError::LengthTooLarge { .. })
    ));
    assert!(matches!(
        s.get_block(BlockId {
            container_id: 99,
            ..id(2)
        }),
        Err(DatanodeError::ContainerNotFound { container_id: 99 })
    ));
    assert_eq!(
        s.list_blocks(7, 0, 0)
            .expect("store operation on a temp dir")
            .len(),
        1
    );
}

#[tokio::test]
async fn write_chunk_must_continue_the_block() {
    let dir = tempfile::tempdir().expect("store operation on a temp dir");
    let s = ContainerStore::open(dir.path()).expect("store operation on a temp dir");
    s.write_chunk(id(1), &chunk(0, 3), Bytes::from_static(b"abc"))
        .await
        .expect("store operation on a temp dir");
    assert!(matches!(
        s.write_chunk(id(1), &chunk(4, 1), Bytes::from_static(b"x"))
            .await,
        Err(DatanodeError::ChunkOffsetMismatch { .. })
    ));
    assert!(matches!(
        s.write_chunk(id(1), &chunk(3, 2), Bytes::from_static(b"x"))
            .await,
        Err(DatanodeError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.write_chunk(id(4), &chunk(3, 1), Bytes::from_static(b"x"))
            .await,
        Err(DatanodeError::ReplicaIndexMismatch { .. })
    ));
    s.put_block(block(1, vec![chunk(0, 3)]), BlockCommit::Sync)
        .await
        .expect("store operation on a temp dir");
    // Rewriting the committed prefix is refused.
    assert!(matches!(
        s.write_chunk(id(1), &chunk(0, 3), Bytes::from_static(b"xyz"))
            .await,
        Err(DatanodeError::ChunkOffsetMismatch { .. })
    ));
    // A PutBlock claiming unwritten bytes is refused.
    assert!(
        s.put_block(block(1, vec![chunk(0, 3), chunk(3, 4)]), BlockCommit::Sync)
            .await
            .is_err()
    );
    // An empty record (EC index beyond the data) needs no file.
    let empty = BlockData {
        block_id: BlockId {
            local_id: 43,
            ..id(3)
        },
        chunks: vec![],
        size: 0,
        metadata: BTreeMap::new(),
    };
    assert_eq!(
        s.put_block(empty, BlockCommit::Close)
            .await
            .expect("store operation on a temp dir"),
        0
    );
    // eof closes the block: no more chunks, no more PutBlocks.
    s.write_chunk(id(1), &chunk(3, 1), Bytes::from_static(b"d"))
        .await
        .expect("store operation on a temp dir");
    s.put_block(block(1, vec![chunk(0, 3), chunk(3, 1)]), BlockCommit::Close)
        .await
        .expect("store operation on a temp dir");
    assert!(matches!(
        s.write_chunk(id(1), &chunk(4, 1), Bytes::from_static(b"e"))
            .await,
        Err(DatanodeError::BlockClosed { .. })
    ));
    drop(s);
    let s = ContainerStore::open(dir.path()).expect("store operation on a temp dir");
    assert!(matches!(
        s.write_chunk(id(1), &chunk(4, 1), Bytes::from_static(b"e"))
            .await,
        Err(DatanodeError::BlockClosed { .. })
    ));
}

#[tokio::test]
async fn a_chunk_longer_than_one_read_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("store operation on a temp dir");
    let len = MAX_READ_LEN + 1;
    let err = s
        .write_chunk(id(1), &chunk(0, len), Bytes::from(vec![0u8; len as usize]))
        .await
        .expect_err("a chunk no ReadChunk could return");
    assert!(matches!(err, DatanodeError::InvalidArgument(_)), "{err}");
}

/// A crash between WriteChunk and PutBlock (the store dropped without a
/// commit stands for the killed process): on reopen, a block file with no
/// committed record is removed and a committed block's uncommitted tail is
/// truncated; the committed prefix still reads back and nothing past it is
/// served, before or after the restart.
#[tokio::test]
async fn reopen_reclaims_bytes_no_put_block_committed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let orphan = BlockId {
        local_id: 43,
        ..id(1)
    };
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        s.write_chunk(id(2), &chunk(0, 5), Bytes::from_static(b"hello"))
            .await
            .expect("write");
        s.put_block(block(2, vec![chunk(0, 5)]), BlockCommit::Sync)
            .await
            .expect("commit");
        s.write_chunk(id(2), &chunk(5, 6), Bytes::from_static(b" world"))
            .await
            .expect("uncommitted tail");
        s.write_chunk(orphan, &chunk(0, 4), Bytes::from_static(b"lost"))
            .await
            .expect("uncommitted block");
        assert!(matches!(
            s.read(id(2), &chunk(5, 6), 5, 6).await,
            Err(DatanodeError::OutOfRange { .. })
        ));
        assert_eq!(s.recovery(), crate::RecoveryReport::default());
    }
    let file_len = |local: u64| {
        std::fs::metadata(dir.path().join(format!("containers/7/{local}.block"))).map(|m| m.len())
    };
    assert_eq!(file_len(42).expect("tail on disk"), 11);
    assert_eq!(file_len(43).expect("orphan on disk"), 4);
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert_eq!(
        s.recovery(),
        crate::RecoveryReport {
            orphans_removed: 1,
            tails_truncated: 1,
            bytes_reclaimed: 4 + 6,
            short_files: 0,
            fine_orphans_removed: 0,
        }
    );
    assert_eq!(file_len(42).expect("committed file"), 5);
    assert!(file_len(43).is_err(), "the orphan file is gone");
    assert_eq!(
        &s.read(id(2), &chunk(0, 5), 0, 5)
            .await
            .expect("committed prefix")[..],
        b"hello"
    );
    assert!(matches!(
        s.get_block(orphan),
        Err(DatanodeError::NoSuchBlock { .. })
    ));
    // The block goes on from its committed length.
    s.write_chunk(id(2), &chunk(5, 3), Bytes::from_static(b"!!!"))
        .await
        .expect("continue after recovery");
    s.put_block(block(2, vec![chunk(0, 5), chunk(5, 3)]), BlockCommit::Close)
        .await
        .expect("commit");
    assert_eq!(
        &s.read(id(2), &chunk(5, 3), 5, 3).await.expect("new chunk")[..],
        b"!!!"
    );
    drop(s);
    let s = ContainerStore::open(dir.path()).expect("reopen clean");
    assert_eq!(s.recovery(), crate::RecoveryReport::default());
}

fn other(local_id: u64, ri: u32) -> BlockId {
    BlockId {
        container_id: 7,
        local_id,
        replica_index: ReplicaIndex::new(ri),
    }
}

async fn commit(s: &ContainerStore, b: BlockId, bytes: &'static [u8]) {
    let len = bytes.len() as u64;
    if len > 0 {
        s.write_chunk(b, &chunk(0, len), Bytes::from_static(bytes))
            .await
            .expect("write");
    }
    let chunks = if len > 0 { vec![chunk(0, len)] } else { vec![] };
    s.put_block(
        BlockData {
            block_id: b,
            size: len,
            chunks,
            metadata: BTreeMap::new(),
        },
        BlockCommit::Close,
    )
    .await
    .expect("put block");
}

/// The block scan behind block reports: a block whose file is gone or shorter than its
/// committed length in two scans in a row is lost (dropped from memory and the database, so
/// GetBlock says NO_SUCH_BLOCK, also after a restart); intact and empty blocks are reported
/// with their lengths.
#[tokio::test]
async fn the_block_scan_drops_blocks_whose_files_are_gone_or_short() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let s = Arc::new(ContainerStore::open(dir.path()).expect("open"));
        commit(&s, other(1, 1), b"intact").await;
        commit(&s, other(2, 2), b"removed").await;
        commit(&s, other(3, 3), b"truncated").await;
        commit(&s, other(4, 4), b"").await;
        let before = s.stats();
        std::fs::remove_file(s.path_of(7, 2)).expect("remove");
        File::options()
            .write(true)
            .open(s.path_of(7, 3))
            .and_then(|f| f.set_len(4))
            .expect("truncate");

        // The first scan only suspects: nothing is dropped, the two stay out of the report.
        let first = s.scan_blocks().await.expect("scan");
        assert!(first.lost.is_empty());
        assert_eq!(first.present.len(), 2);
        assert_eq!(s.get_block(other(2, 2)).expect("kept for now").size, 7);
        let scan = s.scan_blocks().await.expect("scan");
        let mut present = scan.present.clone();
        present.sort_by_key(|(b, _)| b.local_id);
        assert_eq!(present, vec![(other(1, 1), 6), (other(4, 4), 0)]);
        let mut lost = scan.lost.clone();
        lost.sort_by_key(|b| b.local_id);
        assert_eq!(lost, vec![other(2, 2), other(3, 3)]);
        for b in [other(2, 2), other(3, 3)] {
            assert!(matches!(
                s.get_block(b),
                Err(DatanodeError::NoSuchBlock { .. })
            ));
        }
        let after = s.stats();
        assert_eq!(after.blocks, before.blocks - 2);
        assert_eq!(after.used_bytes, before.used_bytes - 7 - 9);
        // Nothing more is lost on a second scan.
        let again = s.scan_blocks().await.expect("scan");
        assert!(again.lost.is_empty());
        assert_eq!(again.present.len(), 2);
    }
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert!(matches!(
        s.get_block(other(2, 2)),
        Err(DatanodeError::NoSuchBlock { .. })
    ));
    assert_eq!(s.get_block(other(1, 1)).expect("intact").size, 6);
    assert_eq!(s.stats().blocks, 2);
}

/// A volume-sized failure is not lost blocks: with most block files gone at once, the scans
/// drop no record (and a file that cannot be checked is never counted lost).
#[tokio::test]
async fn a_mass_disappearance_drops_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = Arc::new(ContainerStore::open(dir.path()).expect("open"));
    for l in 0..20u64 {
        commit(&s, other(100 + l, 1), b"some bytes").await;
    }
    for l in 0..15u64 {
        std::fs::remove_file(s.path_of(7, 100 + l)).expect("remove");
    }
    for _ in 0..3 {
        let scan = s.scan_blocks().await.expect("scan");
        assert!(scan.lost.is_empty(), "{:?}", scan.lost);
        assert_eq!(scan.present.len(), 5);
    }
    assert_eq!(s.stats().blocks, 20, "every record kept");
}

/// What each PutBlock guarantees: a Flush publishes its record for reads at
/// once but syncs nothing, so a restart rolls the block back to its last
/// durable (Sync) record and cuts the file there; no file sync or record
/// commit is counted for it.
#[tokio::test]
async fn a_flushed_record_is_visible_at_once_and_rolled_back_by_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        s.write_chunk(id(2), &chunk(0, 5), Bytes::from_static(b"hello"))
            .await
            .expect("write");
        s.put_block(block(2, vec![chunk(0, 5)]), BlockCommit::Sync)
            .await
            .expect("sync");
        let synced = s.stats();
        assert_eq!(
            (
                synced.block_file_syncs,
                synced.record_commits,
                synced.durable_records
            ),
            (1, 1, 1)
        );
        s.write_chunk(id(2), &chunk(5, 6), Bytes::from_static(b" world"))
            .await
            .expect("write");
        s.put_block(block(2, vec![chunk(0, 5), chunk(5, 6)]), BlockCommit::Flush)
            .await
            .expect("flush");
        assert_eq!(s.get_block(id(2)).expect("published").size, 11);
        assert_eq!(
            &s.read(id(2), &chunk(5, 6), 5, 6)
                .await
                .expect("flushed bytes")[..],
            b" world"
        );
        let flushed = s.stats();
        assert_eq!(
            (
                flushed.block_file_syncs,
                flushed.record_commits,
                flushed.used_bytes
            ),
            (1, 1, 11),
            "a Flush touches no disk"
        );
    }
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert_eq!(s.get_block(id(2)).expect("durable record").size, 5);
    assert_eq!(s.recovery().tails_truncated, 1);
    let len = std::fs::metadata(dir.path().join("containers/7/42.block"))
        .expect("block file")
        .len();
    assert_eq!(len, 5, "the file is cut to the durable record");
    // The block goes on from its durable length.
    s.write_chunk(id(2), &chunk(5, 1), Bytes::from_static(b"!"))
        .await
        .expect("continue");
    s.put_block(block(2, vec![chunk(0, 5), chunk(5, 1)]), BlockCommit::Close)
        .await
        .expect("close");
}

/// A close may cut a block below a length that was only published (a writer
/// sealing a block group at its last acknowledged stripe) — the file is cut
/// too — but never below a durable length.
#[tokio::test]
async fn a_close_rolls_back_published_bytes_but_never_durable_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("open");
    s.write_chunk(id(1), &chunk(0, 3), Bytes::from_static(b"abc"))
        .await
        .expect("write");
    s.put_block(block(1, vec![chunk(0, 3)]), BlockCommit::Sync)
        .await
        .expect("sync");
    s.write_chunk(id(1), &chunk(3, 2), Bytes::from_static(b"de"))
        .await
        .expect("write");
    s.write_chunk(id(1), &chunk(5, 2), Bytes::from_static(b"fg"))
        .await
        .expect("write");
    s.put_block(
        block(1, vec![chunk(0, 3), chunk(3, 2), chunk(5, 2)]),
        BlockCommit::Flush,
    )
    .await
    .expect("flush");
    // Below the durable length: refused, and nothing changes.
    assert!(matches!(
        s.put_block(block(1, vec![]), BlockCommit::Close).await,
        Err(DatanodeError::InvalidArgument(_))
    ));
    // A Flush below the published length is refused too.
    assert!(matches!(
        s.put_block(block(1, vec![chunk(0, 3), chunk(3, 2)]), BlockCommit::Flush)
            .await,
        Err(DatanodeError::InvalidArgument(_))
    ));
    assert_eq!(s.get_block(id(1)).expect("record").size, 7);
    assert_eq!(s.stats().used_bytes, 7);
    let size = s
        .put_block(block(1, vec![chunk(0, 3), chunk(3, 2)]), BlockCommit::Close)
        .await
        .expect("close at the acknowledged length");
    assert_eq!(size, 5);
    assert_eq!(s.get_block(id(1)).expect("closed record").size, 5);
    assert_eq!(s.stats().used_bytes, 5);
    let len = std::fs::metadata(dir.path().join("containers/7/42.block"))
        .expect("block file")
        .len();
    assert_eq!(len, 5, "the unacknowledged tail is cut at close");
    assert!(matches!(
        s.write_chunk(id(1), &chunk(5, 1), Bytes::from_static(b"x"))
            .await,
        Err(DatanodeError::BlockClosed { .. })
    ));
}

/// Group commit: durable PutBlocks queued before a leader drains the queue
/// share one database commit. On this single-threaded runtime the eight
/// concurrent closes all queue their requests before any leader task runs,
/// so they cost eight file syncs and one record commit.
#[tokio::test]
async fn concurrent_closes_share_one_record_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = ContainerStore::open(dir.path()).expect("open");
    s.create_container(7).await.expect("container");
    let ids: Vec<BlockId> = (0..8).map(|i| other(100 + i, 1)).collect();
    for b in &ids {
        s.write_chunk(*b, &chunk(0, 4), Bytes::from_static(b"data"))
            .await
            .expect("write");
    }
    let closes = ids.iter().map(|b| {
        s.put_block(
            BlockData {
                block_id: *b,
                size: 4,
                chunks: vec![chunk(0, 4)],
                metadata: BTreeMap::new(),
            },
            BlockCommit::Close,
        )
    });
    for r in futures::future::join_all(closes).await {
        assert_eq!(r.expect("close"), 4);
    }
    let st = s.stats();
    assert_eq!(
        (st.block_file_syncs, st.durable_records, st.record_commits),
        (8, 8, 1)
    );
    drop(s);
    let s = ContainerStore::open(dir.path()).expect("reopen");
    for b in &ids {
        assert_eq!(s.get_block(*b).expect("durable").size, 4);
    }
}

/// A failed fsync is never retried over: the Close that hit it fails, the
/// block is not recorded as durable, and every later write or commit of the
/// block is refused (even though the next sync would succeed), so its writer
/// fails over instead of committing bytes the kernel may have dropped. A
/// restart rolls the block back to its last durable record.
#[tokio::test]
async fn a_failed_sync_is_never_retried_over() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let s = ContainerStore::open(dir.path()).expect("open");
        s.write_chunk(id(1), &chunk(0, 3), Bytes::from_static(b"abc"))
            .await
            .expect("write");
        s.put_block(block(1, vec![chunk(0, 3)]), BlockCommit::Sync)
            .await
            .expect("sync");
        s.write_chunk(id(1), &chunk(3, 2), Bytes::from_static(b"de"))
            .await
            .expect("write");
        s.fail_next_file_syncs(1);
        let full = || block(1, vec![chunk(0, 3), chunk(3, 2)]);
        assert!(matches!(
            s.put_block(full(), BlockCommit::Close).await,
            Err(DatanodeError::Io { .. })
        ));
        assert_eq!(s.get_block(id(1)).expect("durable record").size, 3);
        assert!(matches!(
            s.put_block(full(), BlockCommit::Close).await,
            Err(DatanodeError::SyncFailed { .. })
        ));
        assert!(matches!(
            s.put_block(full(), BlockCommit::Flush).await,
            Err(DatanodeError::SyncFailed { .. })
        ));
        assert!(matches!(
            s.write_chunk(id(1), &chunk(5, 1), Bytes::from_static(b"f"))
                .await,
            Err(DatanodeError::SyncFailed { .. })
        ));
        let st = s.stats();
        assert_eq!((st.block_file_syncs, st.durable_records), (1, 1));
    }
    let s = ContainerStore::open(dir.path()).expect("reopen");
    assert_eq!(s.get_block(id(1)).expect("durable record").size, 3);
    s.write_chunk(id(1), &chunk(3, 1), Bytes::from_static(b"x"))
        .await
        .expect("writable again after the restart");
}

#[test]
fn read_exact_at_fills_exactly_or_says_where_the_file_ended() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("f");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    std::fs::write(&path, &bytes).expect("write");
    let f = File::open(&path).expect("open");
    for (offset, n) in [(0usize, 300_000usize), (1, 1), (4095, 70_001), (299_999, 1)] {
        let got = super::read_exact_at(&f, n, offset as u64).expect("read");
        assert!(
            got[..] == bytes[offset..offset + n],
            "{n} bytes at {offset}"
        );
    }
    let e = super::read_exact_at(&f, 10, 299_995).expect_err("past the end");
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("5 bytes into a 10-byte read"), "{e}");
}
