//! Positioned reads: exact RPC counts once warm, and correctness under
//! concurrency (ARCHITECTURE.md, read path).

use crate::common;

use std::sync::Arc;

use common::{
    CELL, Failure, STRIPE, cluster, data, ec_bucket, fail, failure_cluster, failure_config, node_of,
};
use datanode::{FaultKind, FaultRule};
use ec_client::RpcKind;
use minicluster::MiniCluster;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// After warm-up, 100 preads add zero GetBlock RPCs, create no EC reader and
/// issue nothing but ReadChunk RPCs (HDDS-10135's regression guard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_preads_cost_read_chunk_only() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 1 << 20).await;
    let len = 10 * STRIPE + 123;
    let src = data(len, 3);
    client.put_key("b", "k", None, &src).await.expect("put");
    let readers_before_open = client.ec_metrics();
    let stream = client.open_key("b", "k").await.expect("open");
    let after_open = client.metrics();
    assert_eq!(
        client
            .ec_metrics()
            .since(&readers_before_open)
            .ec_readers_created,
        1,
        "one EC reader per block group at open"
    );
    // Warm-up: touch every data index once.
    let mut buf = vec![0u8; 3 * CELL as usize];
    stream.read_exact_at(0, &mut buf).await.expect("warm-up");
    let warm = client.metrics();
    assert_eq!(
        warm.since(&after_open).rpcs(RpcKind::GetBlock),
        3,
        "one GetBlock per data index"
    );
    let readers = client.ec_metrics();

    let mut rng = SmallRng::seed_from_u64(9);
    let mut expected_read_chunks = 0;
    for _ in 0..100 {
        let n = rng.random_range(1..=CELL);
        let pos = rng.random_range(0..len - n);
        let mut buf = vec![0u8; n as usize];
        stream.read_exact_at(pos, &mut buf).await.expect("pread");
        assert!(buf[..] == src[pos as usize..(pos + n) as usize]);
        // One ReadChunk per cell touched (each cell is one chunk).
        expected_read_chunks += (pos + n - 1) / CELL - pos / CELL + 1;
    }
    let delta = client.metrics().since(&warm);
    assert_eq!(delta.rpcs(RpcKind::GetBlock), 0);
    assert_eq!(delta.rpcs(RpcKind::ReadChunk), expected_read_chunks);
    let other: u64 = delta
        .rpcs_total
        .iter()
        .filter(|(k, _)| **k != RpcKind::ReadChunk)
        .map(|(_, v)| v)
        .sum();
    assert_eq!(other, 0, "only ReadChunk after warm-up: {delta:?}");
    assert_eq!(client.ec_metrics().since(&readers).ec_readers_created, 0);
    cluster.shutdown().await;
}

/// 16 tasks issuing random preads at once on one open key all get the right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_pread_tasks_get_correct_bytes() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 4 * CELL).await;
    let len = 9 * STRIPE + 77; // spans several block groups
    let src = Arc::new(data(len, 4));
    client.put_key("b", "k", None, &src).await.expect("put");
    let stream = Arc::new(client.open_key("b", "k").await.expect("open"));
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let stream = Arc::clone(&stream);
            let src = Arc::clone(&src);
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(t);
                for _ in 0..50 {
                    let pos = rng.random_range(0..len);
                    let n = rng.random_range(1..=(len - pos).min(2 * STRIPE));
                    let mut buf = vec![0u8; n as usize];
                    stream.read_exact_at(pos, &mut buf).await.expect("pread");
                    assert!(
                        buf[..] == src[pos as usize..(pos + n) as usize],
                        "task {t}: {pos}+{n}"
                    );
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    cluster.shutdown().await;
}

/// Checksum verification on reads (Ozone's `ozone.client.verify.checksum`):
/// on (the default), a 100-byte pread inside a 1 KiB bytesPerChecksum window
/// fetches its 100 bytes and the checksums of the window's other bytes
/// (edges), checks the window, and a corrupt replica is a failed location,
/// read around by reconstruction; a datanode that answers without edges (as
/// one from before them) is asked again for the whole window, which is
/// verified as it is, and for the probe interval after that for whole
/// windows at once; off, the pread fetches its 100 bytes and hands back
/// what the datanode sent, corrupt or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_verification_fetches_only_the_range_and_can_be_turned_off() {
    /// Longer than any test runs: the mark does not expire here.
    const EDGES_PROBE: std::time::Duration = std::time::Duration::from_secs(3600);
    let (mut cluster, _) = failure_cluster(5).await;
    let verifying = cluster
        .client_with(failure_config().with_edges_probe_interval(EDGES_PROBE))
        .await
        .expect("client");
    let trusting = cluster
        .client_with(failure_config().with_verify_checksum(false))
        .await
        .expect("client");
    ec_bucket(&verifying, "b", 1 << 20).await;
    let src = data(2 * STRIPE, 21);
    let info = verifying.put_key("b", "k", None, &src).await.expect("put");
    // 100 bytes inside index 1's first cell, in its second 1 KiB window.
    let (pos, len) = (1500u64, 100usize);
    let want = &src[pos as usize..pos as usize + len];
    let on = verifying.open_key("b", "k").await.expect("open");
    let off = trusting.open_key("b", "k").await.expect("open");
    let holder = node_of(&cluster, &info, 0, 1);
    let sent = |cluster: &MiniCluster| cluster.datanodes()[holder].metrics().read_bytes();
    // The key is closed, so its datanodes kept fine checksums, and the edges
    // of a verified pread come from them (with these 1 KiB windows the
    // 512-byte pieces around 1500+100 are the window itself; what they save
    // on 16 KiB windows is counted by the datanode's store tests). An
    // unverified pread asks for no edges.
    let fine_reads = |cluster: &MiniCluster| {
        let node = cluster.datanodes()[holder].node().expect("running");
        node.store().stats().fine_edge_reads
    };
    for (stream, client, fine) in [(&on, &verifying, 1), (&off, &trusting, 0)] {
        let fine_before = fine_reads(&cluster);
        let before = (client.metrics(), sent(&cluster));
        let mut buf = vec![0u8; len];
        stream.read_exact_at(pos, &mut buf).await.expect("pread");
        assert!(buf[..] == *want);
        let delta = client.metrics().since(&before.0);
        assert_eq!(delta.rpcs(RpcKind::ReadChunk), 1);
        assert_eq!(delta.read_bytes, len as u64, "bytes fetched by one pread");
        assert_eq!(
            sent(&cluster) - before.1,
            len as u64,
            "bytes the datanode sent"
        );
        assert_eq!(fine_reads(&cluster) - fine_before, fine);
    }

    cluster.datanodes()[holder]
        .inject(FaultRule::new(RpcKind::ReadChunk, FaultKind::NoEdges).expect("rule"));
    let before = (verifying.metrics(), verifying.ec_metrics());
    let mut buf = vec![0u8; len];
    on.read_exact_at(pos, &mut buf).await.expect("pread");
    assert!(buf[..] == *want, "read through a datanode without edges");
    let delta = verifying.metrics().since(&before.0);
    assert_eq!(
        delta.rpcs(RpcKind::ReadChunk),
        2,
        "the range, then its window"
    );
    assert_eq!(delta.read_bytes, len as u64 + 1024);
    assert_eq!(verifying.ec_metrics().since(&before.1).failovers, 0);
    cluster.datanodes()[holder].clear_faults();
    // The client remembers (its probe interval is an hour): that datanode
    // is asked for the window at once.
    let before = verifying.metrics();
    on.read_exact_at(pos, &mut buf).await.expect("pread");
    assert!(buf[..] == *want);
    let delta = verifying.metrics().since(&before);
    assert_eq!(delta.rpcs(RpcKind::ReadChunk), 1);
    assert_eq!(delta.read_bytes, 1024);
    // Once the interval is over (here at once: a zero interval), edges are
    // asked for again: a datanode upgraded in place keeps its address and
    // so its cached client. (Which read probes when many run at once is the
    // unit test `one_read_probes_when_the_interval_is_over`.)
    let probing = cluster
        .client_with(failure_config().with_edges_probe_interval(std::time::Duration::ZERO))
        .await
        .expect("client");
    let stream = probing.open_key("b", "k").await.expect("open");
    let fault = FaultRule::new(RpcKind::ReadChunk, FaultKind::NoEdges).expect("rule");
    cluster.datanodes()[holder].inject(fault);
    stream.read_exact_at(pos, &mut buf).await.expect("pread");
    cluster.datanodes()[holder].clear_faults();
    let before = probing.metrics();
    stream.read_exact_at(pos, &mut buf).await.expect("pread");
    assert!(buf[..] == *want);
    let delta = probing.metrics().since(&before);
    assert_eq!(delta.rpcs(RpcKind::ReadChunk), 1);
    assert_eq!(delta.read_bytes, len as u64, "the range alone, with edges");

    fail(&mut cluster, holder, Failure::Corrupt).await;
    let before = verifying.ec_metrics();
    let mut buf = vec![0u8; len];
    on.read_exact_at(pos, &mut buf).await.expect("pread");
    assert!(
        buf[..] == *want,
        "verified read reconstructs the right bytes"
    );
    assert_eq!(verifying.ec_metrics().since(&before).failovers, 1);
    let before = trusting.ec_metrics();
    off.read_exact_at(pos, &mut buf).await.expect("pread");
    assert!(
        buf[..] != *want,
        "an unverified read returns the corrupt bytes"
    );
    assert_eq!(buf[0], !want[0], "the fault flips the answer's first byte");
    assert_eq!(buf[1..], want[1..]);
    assert_eq!(trusting.ec_metrics().since(&before).failovers, 0);
    cluster.shutdown().await;
}
