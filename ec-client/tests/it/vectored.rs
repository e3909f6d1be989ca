//! Vectored reads (`KeyInputStream::read_ranges`) on replicated and EC keys:
//! the validation contract, exact ReadChunk counts with and without merging,
//! a property test against the source bytes, concurrency with positioned and
//! sequential readers on one key, and failover in the middle of a call.

// One-range lists are meant: a list holding a single range.
#![allow(clippy::single_range_in_vec_init)]

use crate::common;

use std::ops::Range;
use std::sync::Arc;

use common::{
    CELL, STRIPE, data, ec_bucket, failure_cluster, failure_config, replicated_bucket, ri,
};
use ec_client::{ClientError, RpcKind};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokio::io::AsyncReadExt;

const CHUNK: usize = 4096;

fn expect(src: &[u8], ranges: &[Range<u64>], got: &[bytes::Bytes]) {
    assert_eq!(got.len(), ranges.len());
    for (r, b) in ranges.iter().zip(got) {
        assert!(
            b[..] == src[r.start as usize..r.end as usize],
            "range {r:?}"
        );
    }
}

/// Validation happens before any I/O: empty list, empty range, unsorted
/// input, overlap (InvalidArgument) and past EOF (UnexpectedEof).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_contract() {
    let (cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(3 * STRIPE + 10, 1);
    client.put_key("b", "k", None, &src).await.expect("put");
    let s = client.open_key("b", "k").await.expect("open");
    let len = s.len();
    let before = client.metrics();
    assert!(s.read_ranges(&[]).await.expect("empty").is_empty());
    let got = s.read_ranges(&[5..5]).await.expect("zero-length");
    assert_eq!(got, vec![bytes::Bytes::new()]);
    assert!(matches!(
        s.read_ranges(&[0..10, 5..20]).await,
        Err(ClientError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.read_ranges(&[0..10, len - 5..len + 1]).await,
        Err(ClientError::UnexpectedEof { .. })
    ));
    assert_eq!(
        client.metrics().since(&before).rpcs(RpcKind::ReadChunk),
        0,
        "no I/O before validation passes"
    );
    let ranges = [STRIPE..STRIPE + 10, 0..10, len - 1..len, 10..20];
    expect(
        &src,
        &ranges,
        &s.read_ranges(&ranges).await.expect("unsorted"),
    );
    cluster.shutdown().await;
}

/// Merging cuts ReadChunk RPCs to the predicted number; without merging each
/// chunk piece of each range costs one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_cuts_read_chunks_to_the_prediction() {
    let (cluster, _) = failure_cluster(5).await;
    let ranges = [0..100u64, 200..300, 5000..5100, 8000..9000];
    // Merged (gap <= 4096): [0..300] in chunk 0 -> 1; [5000..9000] spans
    // chunks 1 and 2 -> 2. Unmerged: 1 + 1 + 1 + 2.
    for (merge, expected) in [(true, 3), (false, 5)] {
        let config = failure_config().with_replicated_chunk_size(CHUNK);
        let config = if merge {
            config
        } else {
            config.with_vectored_merge(0, 0)
        };
        let client = cluster.client_with(config).await.expect("client");
        if merge {
            replicated_bucket(&client, "r", 1 << 20).await;
        }
        let key = format!("k{merge}");
        let src = data(16 * CHUNK as u64, 2);
        client.put_key("r", &key, None, &src).await.expect("put");
        let s = client.open_key("r", &key).await.expect("open");
        let mut warm = [0u8; 1];
        s.read_exact_at(0, &mut warm).await.expect("warm-up");
        let before = client.metrics();
        let got = s.read_ranges(&ranges).await.expect("vectored");
        expect(&src, &ranges, &got);
        let d = client.metrics().since(&before);
        assert_eq!(d.rpcs(RpcKind::ReadChunk), expected, "merge={merge}");
        assert_eq!(d.rpcs(RpcKind::GetBlock), 0);
    }
    cluster.shutdown().await;
}

fn range_set(len: u64) -> impl Strategy<Value = Vec<Range<u64>>> {
    // Gaps drawn around the interesting values: adjacent, just below and
    // just above the 4 KiB merge threshold, and arbitrary.
    let gap = prop_oneof![
        Just(0u64),
        Just(4095),
        Just(4096),
        Just(4097),
        0u64..3 * STRIPE
    ];
    let size = prop_oneof![Just(1u64), Just(CELL), Just(STRIPE), 1u64..2 * STRIPE];
    proptest::collection::vec((gap, size), 1..10).prop_map(move |steps| {
        let mut at = 0u64;
        let mut out = Vec::new();
        for (g, n) in steps {
            let start = at + g;
            if start >= len {
                break;
            }
            let end = (start + n).min(len);
            out.push(start..end);
            at = end;
        }
        out.reverse();
        out
    })
}

/// Random non-overlapping range sets on an EC key (cells and stripes of 4 KiB
/// / 12 KiB, 2-stripe groups) and a replicated key (4 KiB chunks, 16 KiB
/// blocks): results always equal the source bytes.
#[test]
fn random_range_sets_equal_the_source() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let len = 10 * STRIPE + 77;
    let src = data(len, 3);
    let (cluster, streams) = rt.block_on(async {
        let (cluster, _) = failure_cluster(5).await;
        let client = cluster
            .client_with(failure_config().with_replicated_chunk_size(CHUNK))
            .await
            .expect("client");
        ec_bucket(&client, "b", 2 * CELL).await;
        replicated_bucket(&client, "r", 4 * CHUNK as u64).await;
        client.put_key("b", "k", None, &src).await.expect("put ec");
        client.put_key("r", "k", None, &src).await.expect("put rep");
        let ec = client.open_key("b", "k").await.expect("open");
        let rep = client.open_key("r", "k").await.expect("open");
        (cluster, vec![ec, rep])
    });
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(range_set(len), 0usize..2), |(ranges, which)| {
            let got = rt
                .block_on(streams[which].read_ranges(&ranges))
                .expect("vectored read");
            for (r, b) in ranges.iter().zip(&got) {
                prop_assert!(b[..] == src[r.start as usize..r.end as usize], "{r:?}");
            }
            Ok(())
        })
        .expect("property holds");
    drop(streams);
    rt.block_on(cluster.shutdown());
}

/// 16 tasks issuing preads and vectored reads on one replicated key while
/// another task reads it sequentially through a second cursor: all correct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_preads_vectored_and_sequential() {
    let (cluster, _) = failure_cluster(5).await;
    let client = cluster
        .client_with(failure_config().with_replicated_chunk_size(CHUNK))
        .await
        .expect("client");
    replicated_bucket(&client, "r", 8 * CHUNK as u64).await;
    let len = 40 * CHUNK as u64 + 11;
    let src = Arc::new(data(len, 4));
    client.put_key("r", "k", None, &src).await.expect("put");
    let stream = Arc::new(client.open_key("r", "k").await.expect("open"));
    let mut seq = stream.new_cursor();
    let src2 = Arc::clone(&src);
    let sequential = tokio::spawn(async move {
        for _ in 0..3 {
            let mut all = Vec::new();
            seq.read_to_end(&mut all).await.expect("sequential");
            assert!(all == *src2);
            tokio::io::AsyncSeekExt::seek(&mut seq, std::io::SeekFrom::Start(0))
                .await
                .expect("seek");
        }
    });
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let (stream, src) = (Arc::clone(&stream), Arc::clone(&src));
            tokio::spawn(async move {
                for i in 0..10u64 {
                    let a = (t * 7919 + i * 104_729) % (len - 3 * CHUNK as u64);
                    if i % 2 == 0 {
                        let mut buf = vec![0u8; 2 * CHUNK];
                        stream.read_exact_at(a, &mut buf).await.expect("pread");
                        assert!(buf[..] == src[a as usize..a as usize + 2 * CHUNK]);
                    } else {
                        let ranges = [a..a + 100, a + 5000..a + 6000, a + 1000..a + 1001];
                        expect(
                            &src,
                            &ranges,
                            &stream.read_ranges(&ranges).await.expect("vectored"),
                        );
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    sequential.await.expect("sequential task");
    cluster.shutdown().await;
}

/// A replica going down during vectored reads: replicated keys fail over,
/// EC keys reconstruct; results stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectored_reads_survive_a_lost_datanode() {
    let (mut cluster, _) = failure_cluster(5).await;
    let client = cluster
        .client_with(failure_config().with_replicated_chunk_size(CHUNK))
        .await
        .expect("client");
    replicated_bucket(&client, "r", 1 << 20).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let len = 6 * STRIPE + 5;
    let src = data(len, 5);
    let rep = client.put_key("r", "k", None, &src).await.expect("put");
    client.put_key("b", "k", None, &src).await.expect("put");
    let ranges: Vec<Range<u64>> = (0..12).map(|i| i * 6000..i * 6000 + 1500).collect();
    let rs = client.open_key("r", "k").await.expect("open");
    let es = client.open_key("b", "k").await.expect("open");
    expect(
        &src,
        &ranges,
        &rs.read_ranges(&ranges).await.expect("healthy"),
    );
    expect(
        &src,
        &ranges,
        &es.read_ranges(&ranges).await.expect("healthy"),
    );
    // Stop the datanode of EC data index 1, and also a replica of the
    // replicated block if that datanode holds none (at most 2 EC indexes lost).
    let ec_info = client.key_info("b", "k").await.expect("info");
    let uuid = ec_info.block_groups[0]
        .pipeline
        .nodes_for(ri(1))
        .next()
        .expect("index 1")
        .uuid
        .clone();
    let n = cluster.datanode_by_uuid(&uuid).expect("dn").index();
    cluster.datanode_mut(n).expect("dn").stop().await;
    let replicas = &rep.block_groups[0].pipeline.locations;
    if !replicas.iter().any(|l| l.datanode.uuid == uuid) {
        let m = cluster
            .datanode_by_uuid(&replicas[0].datanode.uuid)
            .expect("dn")
            .index();
        cluster.datanode_mut(m).expect("dn").stop().await;
    }
    let before = client.ec_metrics();
    expect(
        &src,
        &ranges,
        &rs.read_ranges(&ranges).await.expect("replicated failover"),
    );
    expect(
        &src,
        &ranges,
        &es.read_ranges(&ranges).await.expect("EC reconstruction"),
    );
    let m = client.ec_metrics().since(&before);
    assert!(
        m.stripes_reconstructed > 0,
        "EC ranges were reconstructed: {m:?}"
    );
    cluster.shutdown().await;
}
