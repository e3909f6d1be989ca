//! Bounded datanode resources over real gRPC: open block files (an LRU of
//! `--max-open-files`, and `EMFILE` handled in a process whose descriptor
//! limit is lowered), in-flight payload bytes, the data dir lock,
//! DeleteBlocks, and the connections one client opens.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use datanode::{Datanode, DatanodeConfig};
use futures::StreamExt;
use proto_crate::wire::datanode as pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::{BlockData, BlockId, ChecksumData, ChecksumType, ChunkInfo, ResultCode};
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::transport::Channel;

fn id(local_id: u64) -> BlockId {
    BlockId {
        container_id: 1,
        local_id,
        replica_index: None,
    }
}

fn chunk(len: u64) -> ChunkInfo {
    ChunkInfo {
        name: "c0".into(),
        offset: 0,
        len,
        checksum: ChecksumData {
            ty: ChecksumType::None,
            bytes_per_checksum: 0,
            checksums: vec![],
        },
    }
}

/// Bytes of block `local_id`: distinct per block.
fn payload(local_id: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (local_id as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

async fn connect(address: &str) -> DatanodeServiceClient<Channel> {
    DatanodeServiceClient::connect(format!("http://{address}"))
        .await
        .expect("connecting to the datanode")
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

/// Writes and commits block `local_id` as one chunk of `data`.
async fn put(c: &mut DatanodeServiceClient<Channel>, local_id: u64, data: Vec<u8>) {
    let info = chunk(data.len() as u64);
    put_chunk(c, local_id, info, data).await;
}

/// Writes and commits block `local_id` as the one chunk `info`, storing
/// `data` (which its checksums need not match: the datanode does not check).
async fn put_chunk(
    c: &mut DatanodeServiceClient<Channel>,
    local_id: u64,
    info: ChunkInfo,
    data: Vec<u8>,
) {
    let len = data.len() as u64;
    c.write_chunk(pb::WriteChunkRequest {
        block_id: Some(id(local_id).into()),
        chunk: Some(info.clone().into()),
        data: data.into(),
        repair: false,
    })
    .await
    .expect("WriteChunk");
    c.put_block(pb::PutBlockRequest {
        block_data: Some(
            BlockData {
                block_id: id(local_id),
                chunks: vec![info],
                size: len,
                metadata: Default::default(),
            }
            .into(),
        ),
        eof: true,
        sync: true,
        repair: false,
    })
    .await
    .expect("PutBlock");
}

async fn read(
    c: &mut DatanodeServiceClient<Channel>,
    local_id: u64,
    len: u64,
) -> Result<Vec<u8>, tonic::Status> {
    c.read_chunk(pb::ReadChunkRequest {
        block_id: Some(id(local_id).into()),
        chunk: Some(chunk(len).into()),
        offset: 0,
        len,
        edges: None,
    })
    .await
    .map(|r| r.into_inner().data.to_vec())
}

fn localhost() -> std::net::SocketAddr {
    ([127, 0, 0, 1], 0).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_open_files_serve_500_distinct_blocks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()).with_max_open_files(16))
        .await
        .expect("datanode starts");
    let mut c = connect(dn.address()).await;
    for b in 0..500u64 {
        put(&mut c, b, payload(b, 4096)).await;
    }
    for round in 0..2 {
        for b in 0..500u64 {
            let got = read(&mut c, b, 4096).await.expect("ReadChunk");
            assert!(got == payload(b, 4096), "block {b} round {round}");
            assert!(
                dn.store().stats().open_files <= 16,
                "the cache stays bounded"
            );
        }
    }
    assert_eq!(
        dn.store().stats().open_files,
        16,
        "the cache is full, not over"
    );
    assert_eq!(dn.store().stats().blocks, 500);
    dn.shutdown().await;
}

/// The repro of issue 10, at process level: a datanode binary whose
/// descriptor limit (64) is far below its `--max-open-files` (default 256)
/// must still serve reads of 2,000 distinct blocks — `EMFILE` empties the
/// handle cache and retries instead of failing the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_process_with_64_descriptors_reads_2000_blocks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_datanode"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning the datanode binary");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let address = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("reading stdout") {
            if let Some((_, addr)) = line.split_once(" serving on ") {
                return addr.trim().to_string();
            }
        }
        panic!("the datanode exited before serving");
    })
    .await
    .expect("the datanode serves within 60 s");
    let mut c = connect(&address).await;
    for b in 0..2000u64 {
        put(&mut c, b, payload(b, 1024)).await;
    }
    for b in 0..2000u64 {
        let got = read(&mut c, b, 1024)
            .await
            .unwrap_or_else(|e| panic!("block {b}: {e}"));
        assert!(got == payload(b, 1024), "block {b}");
    }
    // A write still opens files after all those reads.
    put(&mut c, 5000, payload(5000, 1024)).await;
    assert_eq!(
        read(&mut c, 5000, 1024).await.expect("read"),
        payload(5000, 1024)
    );
    child.kill().await.expect("killing the datanode");
}

/// A client opens one connection to a datanode for small calls and a second,
/// on the first transfer of `bulk_transfer_bytes` or more, for bulk data
/// (so that small reads never queue behind, or inherit the congestion
/// control state of, MiB-sized answers); with the split off, one. Exact
/// counts of the connections the datanode accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfers_get_a_connection_of_their_own() {
    use block_stream::{DEFAULT_BULK_TRANSFER_BYTES, XceiverClientManager, XceiverConfig};
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()))
        .await
        .expect("datanode starts");
    let mut c = connect(dn.address()).await;
    let data = payload(1, MIB as usize);
    put(&mut c, 1, data.clone()).await;
    let whole = chunk(MIB);
    for (bulk, connections_at_1m) in [(Some(DEFAULT_BULK_TRANSFER_BYTES), 2), (None, 1)] {
        let client = XceiverClientManager::direct_with(
            dn.address(),
            XceiverConfig::default().with_bulk_transfer_bytes(bulk),
        )
        .expect("client");
        let before = dn.metrics().connections_accepted();
        let opened = || dn.metrics().connections_accepted() - before;
        // (offset, length, connections opened by this client once it is read)
        let reads = [
            (0, 64 * 1024, 1),
            (64 * 1024, 4096, 1),
            (MIB / 2, DEFAULT_BULK_TRANSFER_BYTES - 1, 1),
            (0, MIB, connections_at_1m),
            (0, DEFAULT_BULK_TRANSFER_BYTES, connections_at_1m),
            (100, 64 * 1024, connections_at_1m),
            (0, MIB, connections_at_1m),
        ];
        for (offset, len, expected) in reads {
            let got = client
                .read_chunk(id(1), &whole, offset, len)
                .await
                .expect("ReadChunk");
            let (from, to) = (offset as usize, (offset + len) as usize);
            assert!(got == data[from..to], "bytes of {len} at {offset}");
            assert_eq!(
                opened(),
                expected,
                "bulk from {bulk:?}: connections after reading {len} bytes at {offset}"
            );
        }
    }
}

/// A verified read off the checksum window boundaries gets exactly its bytes
/// and the datanode's checksums of the rest of each window it touches, summed
/// over the bytes the datanode stores: a corrupt byte outside the range but
/// inside its window fails the window. Edge requests the datanode cannot
/// serve are refused; chunks whose windows are larger than a datanode sums
/// for edges are verified through whole windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_reads_get_edge_checksums_over_the_stored_windows() {
    use block_stream::config::MAX_BYTES_PER_CHECKSUM;
    use block_stream::{BlockStreamError, XceiverClientManager, checksum};
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()))
        .await
        .expect("datanode starts");
    let mut c = connect(dn.address()).await;
    let good = payload(3, 8192);
    let info = ChunkInfo {
        checksum: checksum::compute(ChecksumType::Crc32c, 1024, &good),
        ..chunk(8192)
    };
    // One bad byte on disk: in window 2 (bytes 2048..3072), before 2100.
    let mut stored = good.clone();
    stored[2058] ^= 1;
    put_chunk(&mut c, 3, info.clone(), stored).await;
    let client = XceiverClientManager::direct(dn.address()).expect("client");
    let sent = || dn.metrics().read_bytes();

    let before = sent();
    let got = client
        .read_chunk_verified(id(3), &info, 100, 1900)
        .await
        .expect("windows 0 and 1 are intact");
    assert!(got == good[100..2000]);
    assert_eq!(sent() - before, 1900, "only the range is sent");
    for (offset, len) in [(2100, 100), (1500, 1000), (3000, 100)] {
        match client.read_chunk_verified(id(3), &info, offset, len).await {
            Err(BlockStreamError::ChecksumMismatch { offset, len, .. }) => {
                assert_eq!((offset, len), (2048, 1024), "the bad window is named");
            }
            other => panic!("{len} bytes at {offset}: expected a mismatch, got {other:?}"),
        }
    }
    // A range past the chunk's end is refused by its own offsets, not by
    // the windows' the datanode would have read around it (7168+1332).
    let e = client
        .read_chunk_verified(id(3), &info, 8000, 500)
        .await
        .expect_err("past the chunk");
    assert!(e.to_string().contains("range 8000+500 is outside"), "{e}");

    for (ty, bpc) in [
        (pb::ChecksumType::None, 1024),
        (pb::ChecksumType::Unspecified, 1024),
        (pb::ChecksumType::Crc32c, 0),
        (pb::ChecksumType::Crc32c, MAX_BYTES_PER_CHECKSUM + 1),
    ] {
        let e = c
            .read_chunk(pb::ReadChunkRequest {
                block_id: Some(id(3).into()),
                chunk: Some(chunk(8192).into()),
                offset: 100,
                len: 100,
                edges: Some(pb::EdgeChecksumRequest {
                    r#type: ty.into(),
                    bytes_per_checksum: bpc,
                }),
            })
            .await
            .expect_err("edges the datanode cannot sum");
        assert_eq!(
            proto_crate::result_code(&e),
            ResultCode::InvalidArgument,
            "{ty:?} {bpc}"
        );
    }

    const MIB: u64 = 1 << 20;
    let big = payload(4, MIB as usize);
    let wide = ChunkInfo {
        checksum: checksum::compute(ChecksumType::Crc32, 8 << 20, &big),
        ..chunk(MIB)
    };
    put_chunk(&mut c, 4, wide.clone(), big.clone()).await;
    let before = sent();
    let got = client
        .read_chunk_verified(id(4), &wide, 100, 1000)
        .await
        .expect("a read in an 8 MiB window");
    assert!(got == big[100..1100]);
    assert_eq!(sent() - before, MIB, "the whole (1 MiB, short) window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_reads_stay_within_the_inflight_budget() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(
        DatanodeConfig::new(localhost(), dir.path()).with_max_inflight_bytes(64 * MIB),
    )
    .await
    .expect("datanode starts");
    let mut c = connect(dn.address()).await;
    let data = payload(7, (16 * MIB) as usize);
    put(&mut c, 7, data.clone()).await;
    let data = Arc::new(data);
    let results: Vec<bool> = futures::stream::iter(0..64)
        .map(|_| {
            let mut c = c.clone();
            let data = Arc::clone(&data);
            async move {
                let got = read(&mut c, 7, 16 * MIB).await.expect("ReadChunk");
                got == *data
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    assert_eq!(results.len(), 64);
    assert!(results.iter().all(|ok| *ok), "every read returns the block");
    let peak = dn.metrics().peak_inflight_bytes();
    assert!(peak <= 64 * MIB, "peak {peak} exceeds the 64 MiB budget");
    assert!(peak >= 16 * MIB, "reads were charged (peak {peak})");
    assert_eq!(dn.metrics().inflight_bytes(), 0, "every charge returned");
    dn.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_blocks_frees_space_refuses_rewrites_and_survives_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()))
        .await
        .expect("datanode starts");
    let mut c = connect(dn.address()).await;
    put(&mut c, 1, payload(1, 8192)).await;
    put(&mut c, 2, payload(2, 8192)).await;
    read(&mut c, 1, 8192).await.expect("a cached handle exists");
    assert_eq!(dn.store().stats().used_bytes, 16384);
    let file1 = dir.path().join("containers/1/1.block");
    assert!(file1.is_file());
    // Meant for another datanode (another process now at this address):
    // refused, nothing deleted.
    let e = c
        .delete_blocks(pb::DeleteBlocksRequest {
            block_ids: vec![id(1).into()],
            datanode_uuid: "someone-else".into(),
        })
        .await
        .expect_err("another datanode's deletions");
    assert_eq!(proto_crate::result_code(&e), ResultCode::InvalidArgument);
    assert!(file1.is_file());
    let r = c
        .delete_blocks(pb::DeleteBlocksRequest {
            block_ids: vec![id(1).into(), id(99).into()],
            datanode_uuid: dn.details().uuid.to_string(),
        })
        .await
        .expect("DeleteBlocks")
        .into_inner();
    assert_eq!(
        r.deleted, 1,
        "block 99 never existed: deleted, but held no data"
    );
    assert!(!file1.exists(), "the file is gone");
    assert_eq!(dn.store().stats().used_bytes, 8192);
    assert_eq!(dn.store().stats().blocks, 1);
    let e = read(&mut c, 1, 8192).await.expect_err("deleted");
    assert_eq!(proto_crate::result_code(&e), ResultCode::NoSuchBlock);
    // A writer whose session the om expired cannot bring the block back.
    for local_id in [1, 99] {
        let e = c
            .write_chunk(pb::WriteChunkRequest {
                block_id: Some(id(local_id).into()),
                chunk: Some(chunk(4).into()),
                data: vec![1, 2, 3, 4].into(),
                repair: false,
            })
            .await
            .expect_err("writing a deleted block");
        assert_eq!(proto_crate::result_code(&e), ResultCode::NoSuchBlock);
    }
    assert!(!dir.path().join("containers/1/99.block").exists());
    dn.shutdown().await;
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()))
        .await
        .expect("datanode restarts");
    let mut c = connect(dn.address()).await;
    assert!(
        read(&mut c, 1, 8192).await.is_err(),
        "still deleted after restart"
    );
    assert_eq!(read(&mut c, 2, 8192).await.expect("kept"), payload(2, 8192));
    let again = c
        .delete_blocks(pb::DeleteBlocksRequest {
            block_ids: vec![id(1).into()],
            datanode_uuid: String::new(),
        })
        .await
        .expect("deleting again is fine")
        .into_inner();
    assert_eq!(again.deleted, 0);
    assert_eq!(dn.store().stats().used_bytes, 8192);
    // An EC reconstruction the om ordered may make this datanode the block's holder again:
    // its writes lift the tombstone.
    c.write_chunk(pb::WriteChunkRequest {
        block_id: Some(id(1).into()),
        chunk: Some(chunk(4).into()),
        data: vec![1, 2, 3, 4].into(),
        repair: true,
    })
    .await
    .expect("a reconstruction's write to a deleted block");
    c.put_block(pb::PutBlockRequest {
        block_data: Some(
            BlockData {
                block_id: id(1),
                chunks: vec![chunk(4)],
                size: 4,
                metadata: Default::default(),
            }
            .into(),
        ),
        eof: true,
        sync: true,
        repair: true,
    })
    .await
    .expect("its commit");
    assert_eq!(read(&mut c, 1, 4).await.expect("revived"), vec![1, 2, 3, 4]);
    dn.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_datanode_process_on_a_data_dir_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dn = Datanode::start(DatanodeConfig::new(localhost(), dir.path()))
        .await
        .expect("datanode starts");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_datanode"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .output(),
    )
    .await
    .expect("the second datanode exits at once")
    .expect("running the datanode binary");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("in use by pid {} (datanode)", std::process::id())),
        "{stderr}"
    );
    // The first one still serves.
    let mut c = connect(dn.address()).await;
    put(&mut c, 1, payload(1, 10)).await;
    dn.shutdown().await;
}
