//! EC reads through datanode failures (ARCHITECTURE.md, read path):
//! reader reuse counts, spare replicas, reconstruction of every pattern of up
//! to p lost indexes for every kind of failed location, more than p lost, and
//! recovery after a restart. All over real gRPC against the minicluster.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    CELL, Failure, STRIPE, data, ec_bucket, fail, failure_cluster, failure_config, heal, node_of,
    outside_datanode, ri,
};
use ec_client::{ClientError, ReadMode, RpcKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Key length used by most tests: five full stripes and a partial one.
const LEN: u64 = 5 * STRIPE + CELL + 100;

async fn read_all_sequential(
    client: &ec_client::Client,
    key: &str,
) -> Result<Vec<u8>, std::io::Error> {
    let mut s = client
        .open_key("b", key)
        .await
        .map_err(std::io::Error::from)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(out)
}

/// Random preads plus a few boundary preads, all compared with `src`.
async fn check_preads(stream: &ec_client::KeyInputStream, src: &[u8], seed: u64) {
    let len = src.len() as u64;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ranges: Vec<(u64, u64)> = vec![
        (0, len),
        (len - 1, 1),
        (CELL - 1, 2),
        (STRIPE - 1, CELL + 2),
    ];
    for _ in 0..20 {
        let a = rng.random_range(0..len);
        let n = rng.random_range(1..=(len - a).min(2 * STRIPE));
        ranges.push((a, n));
    }
    for (a, n) in ranges {
        let mut buf = vec![0u8; n as usize];
        stream
            .read_exact_at(a, &mut buf)
            .await
            .unwrap_or_else(|e| panic!("pread {a}+{n}: {e}"));
        assert!(
            buf[..] == src[a as usize..(a + n) as usize],
            "pread {a}+{n} returned wrong bytes"
        );
    }
}

/// 100 preads create one EC reader in Reuse mode and 101 in ReaderPerCall
/// mode; after warm-up Reuse issues no GetBlock, ReaderPerCall one per cell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_reuse_versus_reader_per_call() {
    let (cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 1);
    client.put_key("b", "k", None, &src).await.expect("put");
    for (mode, readers) in [(ReadMode::Reuse, 1), (ReadMode::ReaderPerCall, 101)] {
        let c = cluster
            .client_with(failure_config().with_read_mode(mode))
            .await
            .expect("client");
        let before = c.ec_metrics();
        let stream = c.open_key("b", "k").await.expect("open");
        let mut rng = SmallRng::seed_from_u64(2);
        let mut cells = 0;
        let mut rpc_before = c.metrics();
        // Data indexes whose stream exists (Reuse mode creates each once).
        let mut warm = std::collections::BTreeSet::new();
        let mut first_touches = 0u64;
        for i in 0..100 {
            if i == 1 {
                rpc_before = c.metrics();
                cells = 0;
                first_touches = 0;
            }
            let n = rng.random_range(1..=CELL);
            let a = rng.random_range(0..LEN - n);
            let mut buf = vec![0u8; n as usize];
            stream.read_exact_at(a, &mut buf).await.expect("pread");
            assert!(buf[..] == src[a as usize..(a + n) as usize]);
            cells += (a + n - 1) / CELL - a / CELL + 1;
            for cell in a / CELL..=(a + n - 1) / CELL {
                if warm.insert(cell % 3) {
                    first_touches += 1;
                }
            }
        }
        let rpcs = c.metrics().since(&rpc_before);
        assert_eq!(
            c.ec_metrics().since(&before).ec_readers_created,
            readers,
            "{mode:?}"
        );
        match mode {
            ReadMode::Reuse => assert_eq!(
                rpcs.rpcs(RpcKind::GetBlock),
                first_touches,
                "one GetBlock per data index, on its first touch only: {rpcs:?}"
            ),
            ReadMode::ReaderPerCall => assert_eq!(
                rpcs.rpcs(RpcKind::GetBlock),
                cells,
                "one GetBlock per touched cell"
            ),
        }
        assert_eq!(rpcs.rpcs(RpcKind::ReadChunk), cells);
    }
    // Strictly after warm-up (every data index touched), Reuse costs no GetBlock.
    let stream = client.open_key("b", "k").await.expect("open");
    let mut buf = vec![0u8; STRIPE as usize];
    stream.read_exact_at(0, &mut buf).await.expect("warm-up");
    let warm = client.metrics();
    check_preads(&stream, &src, 3).await;
    assert_eq!(client.metrics().since(&warm).rpcs(RpcKind::GetBlock), 0);
    cluster.shutdown().await;
}

/// 16 tasks on one stream, healthy and then with index 1 down, all get the
/// right bytes; the degraded reader is shared, not rebuilt per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_preads_healthy_and_degraded() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = Arc::new(data(LEN, 4));
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    for degraded in [false, true] {
        if degraded {
            let n = node_of(&cluster, &info, 0, 1);
            fail(&mut cluster, n, Failure::Down).await;
        }
        let before = client.ec_metrics();
        let stream = Arc::new(client.open_key("b", "k").await.expect("open"));
        let tasks: Vec<_> = (0..16u64)
            .map(|t| {
                let (stream, src) = (Arc::clone(&stream), Arc::clone(&src));
                tokio::spawn(async move { check_preads(&stream, &src, t).await })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let m = client.ec_metrics().since(&before);
        if degraded {
            assert!(
                m.reconstruction_readers_created >= 1 && m.reconstruction_readers_created <= 16,
                "{m:?}"
            );
            assert!(m.stripes_reconstructed > 0);
            // Once degraded, later preads reuse the degraded reader.
            let settled = client.ec_metrics();
            check_preads(&stream, &src, 99).await;
            let m = client.ec_metrics().since(&settled);
            assert_eq!(
                (
                    m.ec_readers_created,
                    m.reconstruction_readers_created,
                    m.failovers
                ),
                (0, 0, 0),
                "{m:?}"
            );
        } else {
            assert_eq!(m.reconstruction_readers_created, 0);
            assert_eq!(m.failovers, 0);
        }
    }
    cluster.shutdown().await;
}

/// Boundary preads (cell and stripe edges, partial last stripe, a key below
/// one cell, a key that is an exact number of stripes, EOF, the cursor)
/// healthy and with one datanode down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_preads_healthy_and_degraded() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let sizes = [100, CELL, 4 * STRIPE, LEN];
    let mut infos = Vec::new();
    for len in sizes {
        infos.push(
            client
                .put_key("b", &format!("k{len}"), None, &data(len, len))
                .await
                .expect("put"),
        );
    }
    for degraded in [false, true] {
        if degraded {
            // One datanode down: index 1 of the largest key, some index of each other key.
            let n = node_of(&cluster, &infos[infos.len() - 1], 0, 1);
            fail(&mut cluster, n, Failure::Down).await;
        }
        for len in sizes {
            let src = data(len, len);
            let mut stream = client
                .open_key("b", &format!("k{len}"))
                .await
                .expect("open");
            stream
                .seek(std::io::SeekFrom::Start(len / 3))
                .await
                .expect("seek");
            let mut ranges = vec![(0, len), (len - 1, 1)];
            for edge in [
                CELL,
                STRIPE,
                2 * STRIPE,
                4 * STRIPE - CELL,
                4 * STRIPE - 1,
                4 * STRIPE,
            ] {
                for (a, n) in [
                    (edge.saturating_sub(1), 2),
                    (edge, CELL),
                    (edge.saturating_sub(CELL), CELL),
                ] {
                    if a + n <= len && n > 0 {
                        ranges.push((a, n));
                    }
                }
            }
            if len == 4 * STRIPE {
                ranges.push((len - CELL, CELL)); // its last cell
                ranges.push((len - STRIPE - 10, 20)); // across its last stripe boundary
            }
            for (a, n) in ranges {
                let mut buf = vec![0u8; n as usize];
                stream.read_exact_at(a, &mut buf).await.expect("pread");
                assert!(
                    buf[..] == src[a as usize..(a + n) as usize],
                    "len {len}: {a}+{n} degraded={degraded}"
                );
            }
            let mut tail = [0u8; 8];
            assert_eq!(stream.read_at(len, &mut tail).await.expect("eof"), 0);
            assert!(matches!(
                stream.read_exact_at(len - 1, &mut tail).await,
                Err(ClientError::UnexpectedEof { .. })
            ));
            assert_eq!(stream.position(), len / 3, "preads moved the cursor");
        }
    }
    cluster.shutdown().await;
}

/// A failure after part of a pread's output was already copied still yields
/// exactly the right bytes (the first cell is read, the second fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_output_of_a_failed_attempt_is_discarded() {
    let (mut cluster, _) = failure_cluster(5).await;
    let client = cluster
        .client_with(failure_config().with_parallel_cell_reads(false))
        .await
        .expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 5);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let n = node_of(&cluster, &info, 0, 2);
    fail(&mut cluster, n, Failure::Corrupt).await;
    let stream = client.open_key("b", "k").await.expect("open");
    let (a, len) = (CELL - 1000, 2000); // 1000 bytes of index 1, then 1000 of index 2
    let mut buf = vec![0xAAu8; len];
    stream.read_exact_at(a, &mut buf).await.expect("pread");
    assert!(buf[..] == src[a as usize..a as usize + len]);
    assert_eq!(client.ec_metrics().failovers, 1);
    cluster.shutdown().await;
}

/// An index whose primary is down is served by its spare replica, with zero
/// stripes reconstructed (Ozone's EC replication during decommission).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_replica_serves_a_failed_index() {
    let (mut cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 6);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let spare = outside_datanode(&cluster, &info);
    let copied = om::add_replica(cluster.om(), "b", "k", 0, Some(ri(1)), &spare)
        .await
        .expect("add replica");
    let layout = ec_codec::BlockGroupLayout::new(common::rs32(), LEN);
    assert_eq!(copied, layout.internal_block_len(ri(1)).expect("index 1"));
    let info = client.key_info("b", "k").await.expect("info");
    assert_eq!(info.block_groups[0].pipeline.nodes_for(ri(1)).count(), 2);
    let primary = node_of(&cluster, &info, 0, 1);
    fail(&mut cluster, primary, Failure::Down).await;
    let before = client.ec_metrics();
    let stream = client.open_key("b", "k").await.expect("open");
    check_preads(&stream, &src, 7).await;
    let m = client.ec_metrics().since(&before);
    assert_eq!(m.stripes_reconstructed, 0);
    assert_eq!(m.spare_switches, 1);
    assert_eq!(m.reconstruction_readers_created, 0);
    assert!(read_all_sequential(&client, "k").await.expect("sequential") == src);
    cluster.shutdown().await;
}

/// A degraded read moves each surviving byte it needs once: a healthy cell
/// that is also a decode input is read once and serves both (it was read
/// twice, (d-1)/d more bytes for a whole stripe). Exact ReadChunk payload
/// bytes, with index 1 down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_reads_fetch_each_surviving_byte_once() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 8);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let n = node_of(&cluster, &info, 0, 1);
    fail(&mut cluster, n, Failure::Down).await;
    let stream = client.open_key("b", "k").await.expect("open");
    // The first read fails over to the reconstructing reader.
    let mut warm = [0u8; 10];
    stream
        .read_exact_at(0, &mut warm)
        .await
        .expect("warm pread");
    assert_eq!(client.ec_metrics().reconstruction_readers_created, 1);
    let fetched = |a: u64, len: u64| {
        let (client, stream, src) = (&client, &stream, &src);
        async move {
            let before = client.metrics();
            let mut buf = vec![0u8; usize::try_from(len).expect("len")];
            stream.read_exact_at(a, &mut buf).await.expect("pread");
            let at = usize::try_from(a).expect("offset");
            assert!(buf[..] == src[at..at + buf.len()], "bytes at {a}+{len}");
            client.metrics().since(&before).read_bytes
        }
    };
    // A whole stripe: d cells (indexes 2, 3 and parity 4), not d + 2.
    assert_eq!(fetched(2 * STRIPE, STRIPE).await, 3 * CELL);
    // The last 1000 bytes of index 1's cell, all of index 2's, 500 of
    // index 3's: 1000 bytes of each decode input (2, 3, 4), the rest of
    // index 2's cell before them, and index 3's 500 (outside the window).
    assert_eq!(
        fetched(STRIPE + CELL - 1000, CELL + 1000 + 500).await,
        3 * 1000 + (CELL - 1000) + 500
    );
    // A sequential read of the whole key moves as many bytes as a healthy
    // one: every stripe's lost cell is replaced by one parity cell. (Counted
    // once the stream has failed over: a striped attempt's healthy cells
    // may land before index 1's refusal does.)
    let mut seq = client.open_key("b", "k").await.expect("open");
    seq.read_exact_at(0, &mut warm).await.expect("warm pread");
    let before = client.metrics();
    let mut all = Vec::new();
    seq.read_to_end(&mut all).await.expect("sequential");
    assert!(all == src);
    assert_eq!(client.metrics().since(&before).read_bytes, LEN);
    cluster.shutdown().await;
}

/// Each single index lost (1..5), for every kind of failed location, by
/// preads and by a sequential read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_single_index_lost_for_every_failure_kind() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 8);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    for kind in Failure::ALL {
        for r in 1..=5 {
            let n = node_of(&cluster, &info, 0, r);
            fail(&mut cluster, n, kind).await;
            let before = client.ec_metrics();
            let stream = client.open_key("b", "k").await.expect("open");
            check_preads(&stream, &src, u64::from(r)).await;
            let all = read_all_sequential(&client, "k")
                .await
                .unwrap_or_else(|e| panic!("{kind:?} index {r}: {e}"));
            assert!(all == src, "{kind:?} index {r}: sequential read differs");
            let m = client.ec_metrics().since(&before);
            if r <= 3 {
                // A data index: each of the two streams failed over once and
                // decoded from parity.
                assert_eq!(m.failovers, 2, "{kind:?} index {r}: {m:?}");
                assert_eq!(
                    m.reconstruction_readers_created, 2,
                    "{kind:?} index {r}: {m:?}"
                );
                assert!(m.stripes_reconstructed > 0, "{kind:?} index {r}: {m:?}");
            } else {
                // A parity index: healthy reads never touch it.
                assert_eq!(
                    (m.failovers, m.stripes_reconstructed),
                    (0, 0),
                    "{kind:?} index {r}: {m:?}"
                );
            }
            heal(&mut cluster, n).await;
        }
    }
    cluster.shutdown().await;
}

/// All ten pairs of two lost indexes, failed before the read and in the
/// middle of a sequential read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pair_of_lost_indexes_before_and_during_the_read() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 9);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    for a in 1..=5u32 {
        for b in a + 1..=5 {
            let (na, nb) = (
                node_of(&cluster, &info, 0, a),
                node_of(&cluster, &info, 0, b),
            );
            // Before.
            fail(&mut cluster, na, Failure::Down).await;
            fail(&mut cluster, nb, Failure::Corrupt).await;
            let stream = client.open_key("b", "k").await.expect("open");
            check_preads(&stream, &src, u64::from(a * 10 + b)).await;
            heal(&mut cluster, na).await;
            heal(&mut cluster, nb).await;
            // During: read the first half healthy, then lose both.
            let mut s = client.open_key("b", "k").await.expect("open");
            let mut head = vec![0u8; (LEN / 2) as usize];
            s.read_exact(&mut head).await.expect("first half");
            fail(&mut cluster, na, Failure::Zero).await;
            fail(&mut cluster, nb, Failure::Down).await;
            let mut rest = Vec::new();
            s.read_to_end(&mut rest)
                .await
                .unwrap_or_else(|e| panic!("pair ({a},{b}) mid-read: {e}"));
            head.extend_from_slice(&rest);
            assert!(head == src, "pair ({a},{b}) mid-read returned wrong bytes");
            heal(&mut cluster, na).await;
            heal(&mut cluster, nb).await;
        }
    }
    cluster.shutdown().await;
}

/// Three lost indexes: `InsufficientLocations` naming them, within a bounded
/// time, and never wrong bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_lost_indexes_are_insufficient() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 10);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    for (r, kind) in [
        (1, Failure::Down),
        (3, Failure::Slow),
        (5, Failure::Corrupt),
    ] {
        let n = node_of(&cluster, &info, 0, r);
        fail(&mut cluster, n, kind).await;
    }
    let stream = client.open_key("b", "k").await.expect("open");
    let mut buf = vec![0u8; LEN as usize];
    let result = tokio::time::timeout(Duration::from_secs(20), stream.read_exact_at(0, &mut buf))
        .await
        .expect("bounded time");
    match result {
        Err(ClientError::InsufficientLocations { failed, needed, .. }) => {
            assert_eq!(needed, 3);
            let mut idx: Vec<u32> = failed.iter().map(|(r, _)| r.get()).collect();
            idx.sort_unstable();
            assert_eq!(idx, vec![1, 3, 5], "{failed:?}");
            // Each lost index says why, naming its datanode.
            for (r, why) in &failed {
                let n = node_of(&cluster, &info, 0, r.get());
                assert!(
                    why.contains(&cluster.datanodes()[n].address()),
                    "index {r}: {why}"
                );
            }
        }
        other => panic!("expected InsufficientLocations, got {other:?}"),
    }
    // The sequential path fails the same way, never with short or wrong data.
    let err = read_all_sequential(&client, "k")
        .await
        .expect_err("must fail");
    assert!(err.to_string().contains("insufficient locations"), "{err}");
    cluster.shutdown().await;
}

/// A datanode that comes back after a restart serves again, and a newly
/// opened reader takes the fast path (no reconstruction, no failover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_datanode_serves_and_new_readers_take_the_fast_path() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 11);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let n = node_of(&cluster, &info, 0, 2);
    fail(&mut cluster, n, Failure::Down).await;
    let degraded = client.open_key("b", "k").await.expect("open");
    check_preads(&degraded, &src, 1).await;
    assert!(client.ec_metrics().stripes_reconstructed > 0);
    heal(&mut cluster, n).await;
    let before = client.ec_metrics();
    let fresh = client.open_key("b", "k").await.expect("open");
    check_preads(&fresh, &src, 2).await;
    let m = client.ec_metrics().since(&before);
    assert_eq!(
        (
            m.failovers,
            m.reconstruction_readers_created,
            m.stripes_reconstructed
        ),
        (0, 0, 0),
        "{m:?}"
    );
    cluster.shutdown().await;
}

/// Reconstruction uses spare replicas too: with index 1 and index 3 down
/// and index 2's primary down but its spare alive, d = 3 units remain
/// (spare 2, 4, 5) and every read succeeds (regression: the reconstruction
/// reader gave each index only its first location).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconstruction_reads_from_spare_replicas() {
    let (mut cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 12);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let spare = outside_datanode(&cluster, &info);
    om::add_replica(cluster.om(), "b", "k", 0, Some(ri(2)), &spare)
        .await
        .expect("spare of index 2");
    let info = client.key_info("b", "k").await.expect("info");
    for r in [1, 2, 3] {
        let n = node_of(&cluster, &info, 0, r);
        fail(&mut cluster, n, Failure::Down).await;
    }
    let stream = client.open_key("b", "k").await.expect("open");
    check_preads(&stream, &src, 13).await;
    assert!(read_all_sequential(&client, "k").await.expect("sequential") == src);
    assert!(client.ec_metrics().stripes_reconstructed > 0);
    cluster.shutdown().await;
}

/// A datanode that starts again at another address (same uuid and blocks: a host moved, a
/// pod given a new IP) is read at its new one: the om answers with the address each datanode
/// is registered at now, not the one a key was written to (Ozone's pipelines name datanodes by
/// uuid and SCM resolves them). Before, every reader went to the old address, failed over and
/// read degraded for good, while the ReplicationManager saw a healthy datanode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_restarted_at_another_address_is_read_there() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 7);
    client.put_key("b", "k", None, &src).await.expect("put");
    let info = client.key_info("b", "k").await.expect("info");
    let n = node_of(&cluster, &info, 0, 1);
    let (uuid, old) = {
        let dn = cluster.datanode_mut(n).expect("datanode");
        let old = dn.address();
        dn.stop().await;
        dn.restart_elsewhere().await.expect("restart elsewhere");
        (dn.uuid().to_string(), old)
    };
    let new = cluster.datanode_mut(n).expect("datanode").address();
    assert_ne!(new, old);
    common::wait_statuses(&cluster, |s| {
        s.iter()
            .any(|d| d.details.uuid.as_str() == uuid && d.details.address == new)
    })
    .await;
    let info = client.key_info("b", "k").await.expect("info");
    for g in &info.block_groups {
        for l in &g.pipeline.locations {
            if l.datanode.uuid.as_str() == uuid {
                assert_eq!(l.datanode.address, new, "the key names the new address");
            }
        }
    }
    let before = client.ec_metrics();
    assert_eq!(read_all_sequential(&client, "k").await.expect("read"), src);
    let after = client.ec_metrics();
    assert_eq!(after.failovers, before.failovers, "no location failed");
    assert_eq!(
        after.reconstruction_readers_created, before.reconstruction_readers_created,
        "nothing was reconstructed"
    );
}
