//! Read streams that recover: an open `KeyInputStream`'s exclusions are not
//! forever. Too few locations make a read look the key up again and retry
//! every location; a reader degraded for longer than the probe interval goes
//! back to the striped fast path; spares added after the open are used.
//! Counts are exact (`location_refreshes`, `degraded_probes`, reconstructed
//! stripes).

use crate::common;

use std::time::Duration;

use common::{
    Failure, STRIPE, data, ec_bucket, fail, failure_cluster, failure_config, heal, node_of,
    outside_datanode, ri,
};
use datanode::RpcKind;
use ec_client::ClientError;
use minicluster::{MiniCluster, MiniClusterConfig};

const LEN: u64 = 5 * STRIPE + 7;

async fn read_whole(stream: &ec_client::KeyInputStream) -> Result<Vec<u8>, ClientError> {
    let mut buf = vec![0u8; LEN as usize];
    stream.read_exact_at(0, &mut buf).await.map(|()| buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_then_back_the_same_stream_reads_exactly() {
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 1);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let stream = client.open_key("b", "k").await.expect("open");
    assert!(read_whole(&stream).await.expect("healthy read") == src);
    let nodes: Vec<usize> = [1, 2, 3]
        .iter()
        .map(|&r| node_of(&cluster, &info, 0, r))
        .collect();
    for &n in &nodes {
        fail(&mut cluster, n, Failure::Down).await;
    }
    let before = client.ec_metrics();
    let err = read_whole(&stream).await.expect_err("three of five lost");
    assert!(
        matches!(err, ClientError::InsufficientLocations { .. }),
        "{err}"
    );
    assert_eq!(
        client.ec_metrics().since(&before).location_refreshes,
        1,
        "the failing read looked the key up once and retried every location"
    );
    for &n in &nodes {
        heal(&mut cluster, n).await;
    }
    let before = client.ec_metrics();
    assert!(
        read_whole(&stream)
            .await
            .expect("the same stream reads again")
            == src,
        "exact bytes after the datanodes return"
    );
    let m = client.ec_metrics().since(&before);
    assert_eq!(
        m.location_refreshes, 1,
        "one refresh brought the stream back"
    );
    // From then on: the fast path, no refresh, no reconstruction.
    let before = client.ec_metrics();
    let mut cursor = stream.new_cursor();
    let mut all = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut cursor, &mut all)
        .await
        .expect("sequential read");
    assert!(all == src);
    assert_eq!(read_whole(&stream).await.expect("pread"), src);
    let m = client.ec_metrics().since(&before);
    assert_eq!(
        (m.location_refreshes, m.failovers, m.stripes_reconstructed),
        (0, 0, 0)
    );
    cluster.shutdown().await;
}

/// A slow index sends a stream to reconstruction. Within the probe interval
/// it stays there (a client with an hour's interval); once the interval has
/// passed (a client with a zero interval: the next read after degrading
/// probes) it goes back to the striped reader with no reconstruction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_index_once_then_the_fast_path_after_the_probe_interval() {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    let patient = cluster
        .client_with(failure_config().with_degraded_probe_interval(Duration::from_secs(3600)))
        .await
        .expect("client");
    let eager = cluster
        .client_with(failure_config().with_degraded_probe_interval(Duration::ZERO))
        .await
        .expect("client");
    ec_bucket(&patient, "b", 1 << 20).await;
    let src = data(LEN, 2);
    let info = patient.put_key("b", "k", None, &src).await.expect("put");
    let waiting = patient.open_key("b", "k").await.expect("open");
    let probing = eager.open_key("b", "k").await.expect("open");
    let slow = node_of(&cluster, &info, 0, 1);
    fail(&mut cluster, slow, Failure::Slow).await;
    for (client, stream) in [(&patient, &waiting), (&eager, &probing)] {
        let before = client.ec_metrics();
        assert!(read_whole(stream).await.expect("degraded read") == src);
        let m = client.ec_metrics().since(&before);
        assert!(m.stripes_reconstructed > 0, "index 1 was reconstructed");
        // A read probes at most once (with a zero interval, right after
        // its own failover).
        assert!(m.degraded_probes <= 1);
    }
    heal(&mut cluster, slow).await;
    // Within the interval the stream stays on its degraded reader.
    let before = patient.ec_metrics();
    assert!(read_whole(&waiting).await.expect("still degraded") == src);
    let m = patient.ec_metrics().since(&before);
    assert_eq!(m.degraded_probes, 0);
    assert!(m.stripes_reconstructed > 0, "still reconstructing");
    // Past the interval: one probe, then the fast path.
    let served_before = cluster.datanodes()[slow].metrics().rpcs(RpcKind::ReadChunk);
    let before = eager.ec_metrics();
    assert!(read_whole(&probing).await.expect("recovered read") == src);
    assert!(read_whole(&probing).await.expect("and again") == src);
    let m = eager.ec_metrics().since(&before);
    assert_eq!(m.degraded_probes, 1, "one probe");
    assert_eq!(
        (m.stripes_reconstructed, m.failovers),
        (0, 0),
        "no reconstruction after recovery"
    );
    assert!(
        cluster.datanodes()[slow].metrics().rpcs(RpcKind::ReadChunk) > served_before,
        "index 1 serves again"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_added_after_the_open_is_used() {
    let (mut cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(LEN, 3);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let stream = client.open_key("b", "k").await.expect("open");
    let spare = outside_datanode(&cluster, &info);
    om::add_replica(cluster.om(), "b", "k", 0, Some(ri(1)), &spare)
        .await
        .expect("spare of index 1");
    let spare_node = cluster
        .datanode_by_uuid(&spare)
        .expect("spare datanode")
        .index();
    for r in [1, 2, 3] {
        let n = node_of(&cluster, &info, 0, r);
        fail(&mut cluster, n, Failure::Down).await;
    }
    let served_before = cluster.datanodes()[spare_node]
        .metrics()
        .rpcs(RpcKind::ReadChunk);
    let before = client.ec_metrics();
    assert!(
        read_whole(&stream)
            .await
            .expect("the spare makes three indexes")
            == src,
        "exact bytes through the spare"
    );
    let m = client.ec_metrics().since(&before);
    assert_eq!(
        m.location_refreshes, 1,
        "the stream learnt of the spare once"
    );
    assert!(m.stripes_reconstructed > 0);
    assert!(
        cluster.datanodes()[spare_node]
            .metrics()
            .rpcs(RpcKind::ReadChunk)
            > served_before,
        "the spare served"
    );
    cluster.shutdown().await;
}
