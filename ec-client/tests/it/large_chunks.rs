//! Reads of chunks and cells larger than one read piece (16 MiB): the block
//! reader splits such a chunk into several ReadChunks and must finish it
//! before it moves on (issue 11, part 1). Examples as regression tests, then
//! a property test of random chunk sizes up to the 32 MiB cap, random block
//! lengths and random ranges against the flat source, through real
//! datanodes.

use crate::common;

use common::{Failure, data, fail, failure_config, node_of};
use ec_client::{BucketOptions, Client, ClientConfig, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const MIB: u64 = 1 << 20;

async fn replicated(client: &Client, bucket: &str) {
    client
        .create_bucket(
            bucket,
            BucketOptions {
                replication: Some(ReplicationConfig::Replicated { factor: 3 }),
                block_size: Some(256 * MIB),
                ..Default::default()
            },
        )
        .await
        .expect("bucket");
}

async fn check(client: &Client, bucket: &str, key: &str, src: &[u8], a: u64, n: u64) {
    let stream = client.open_key(bucket, key).await.expect("open");
    let mut buf = vec![0u8; n as usize];
    stream
        .read_exact_at(a, &mut buf)
        .await
        .unwrap_or_else(|e| panic!("{bucket}/{key} {a}+{n}: {e}"));
    assert!(
        buf[..] == src[a as usize..(a + n) as usize],
        "{bucket}/{key} {a}+{n}: wrong bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_32_mib_chunk_reads_past_one_piece() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    let client = cluster
        .client_with(ClientConfig::default().with_replicated_chunk_size(32 * MIB as usize))
        .await
        .expect("client");
    replicated(&client, "rep").await;
    // Two chunks (32 MiB + 8 MiB): the read crosses a piece inside chunk 0
    // and then goes on into chunk 1.
    let two = data(40 * MIB, 1);
    client.put_key("rep", "two", None, &two).await.expect("put");
    check(&client, "rep", "two", &two, 0, 20 * MIB).await;
    check(&client, "rep", "two", &two, 10 * MIB, 30 * MIB).await;
    // One chunk: the read needs two pieces of it.
    let one = data(20 * MIB + 1, 2);
    client.put_key("rep", "one", None, &one).await.expect("put");
    check(&client, "rep", "one", &one, 0, 20 * MIB).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_32_mib_cell_reads_past_one_piece_healthy_and_degraded() {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    // The write uses the default 30 s RPC deadline: one 20 MiB WriteChunk
    // with its fsync missed failure_config's 1 s on a loaded CI machine. The
    // reads below use failure_config (the lost datanode is refused at once).
    let writer = cluster
        .client_with(common::test_config())
        .await
        .expect("client");
    let client = cluster.client_with(failure_config()).await.expect("client");
    let ec = "rs-3-2-32768k".parse().expect("config");
    writer
        .create_bucket(
            "ec",
            BucketOptions {
                replication: Some(ReplicationConfig::Ec(ec)),
                block_size: Some(32 * MIB),
                ..Default::default()
            },
        )
        .await
        .expect("bucket");
    let src = data(20 * MIB + 5, 3);
    let info = writer.put_key("ec", "k", None, &src).await.expect("put");
    check(&client, "ec", "k", &src, 0, 20 * MIB).await;
    let before = client.ec_metrics();
    let n = node_of(&cluster, &info, 0, 1);
    fail(&mut cluster, n, Failure::Down).await;
    check(&client, "ec", "k", &src, 0, 20 * MIB + 5).await;
    assert!(client.ec_metrics().since(&before).stripes_reconstructed > 0);
    cluster.shutdown().await;
}

#[derive(Debug, Clone)]
struct Case {
    chunk: u64,
    len: u64,
    reads: Vec<(u64, u64)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(16 * MIB),
            Just(16 * MIB + 1),
            Just(32 * MIB),
            (16 * MIB..=32 * MIB),
            (MIB..=32 * MIB),
        ],
        prop_oneof![1..=48 * MIB, 17 * MIB..=48 * MIB],
    )
        .prop_flat_map(|(chunk, len)| {
            (
                Just(chunk),
                Just(len),
                proptest::collection::vec(
                    (
                        // Starts near the front leave room for long reads.
                        prop_oneof![0..len.min(2 * MIB), 0..len],
                        prop_oneof![1..=MIB, 16 * MIB..=40 * MIB],
                    ),
                    1..4,
                ),
            )
        })
        .prop_map(|(chunk, len, reads)| Case {
            chunk,
            len,
            reads: reads
                .into_iter()
                .map(|(a, n)| (a, n.min(len - a)))
                .collect(),
        })
}

/// Random replicated chunk sizes (many above one 16 MiB piece), key lengths
/// and ranges: every read returns exactly the source bytes.
#[test]
fn random_chunk_sizes_and_ranges_read_exactly() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = rt.block_on(async {
        MiniCluster::start(MiniClusterConfig::default())
            .await
            .expect("minicluster")
    });
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        // Seeded: a failure replays.
        rng_seed: proptest::test_runner::RngSeed::Fixed(11),
        ..Config::default()
    });
    let counter = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&case(), |c| {
            let i = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(async {
                let client = cluster
                    .client_with(
                        ClientConfig::default().with_replicated_chunk_size(c.chunk as usize),
                    )
                    .await
                    .expect("client");
                let bucket = format!("b{i}");
                replicated(&client, &bucket).await;
                let src = data(c.len, i);
                client.put_key(&bucket, "k", None, &src).await.expect("put");
                let stream = client.open_key(&bucket, "k").await.expect("open");
                for &(a, n) in &c.reads {
                    let mut buf = vec![0u8; n as usize];
                    let r = stream.read_exact_at(a, &mut buf).await;
                    prop_assert!(r.is_ok(), "{c:?} {a}+{n}: {r:?}");
                    prop_assert!(
                        buf[..] == src[a as usize..(a + n) as usize],
                        "{c:?} {a}+{n}: wrong bytes"
                    );
                }
                client.delete_key(&bucket, "k").await.expect("delete");
                Ok(())
            })
        })
        .expect("property holds");
    rt.block_on(cluster.shutdown());
}
