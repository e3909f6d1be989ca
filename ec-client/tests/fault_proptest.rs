//! Property test against a flat-buffer model: for random key sizes, random
//! pread ranges and random sets of failed indexes (and failure kinds), a
//! read either returns exactly the source bytes or fails with
//! `InsufficientLocations`; with at most p failed indexes it always
//! succeeds, and with more a read that needs a lost data cell always fails.
//! (An index past a short key's data holds nothing, so losing it loses nothing.)

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{Failure, STRIPE, data, ec_bucket, fail, failure_cluster, heal, node_of, ri, rs32};
use ec_client::ClientError;
use ec_codec::BlockGroupLayout;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
struct Case {
    len: u64,
    ranges: Vec<(u64, u64)>,
    failed: Vec<u32>,
    kind: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (1u64..=7 * STRIPE + 3)
        .prop_flat_map(|len| {
            (
                Just(len),
                proptest::collection::vec((0..len, 1u64..=2 * STRIPE), 1..6),
                proptest::sample::subsequence(vec![1u32, 2, 3, 4, 5], 0..=3),
                0usize..Failure::ALL.len(),
            )
        })
        .prop_map(|(len, ranges, failed, kind)| Case {
            len,
            ranges: ranges
                .into_iter()
                .map(|(a, n)| (a, n.min(len - a)))
                .collect(),
            failed,
            kind,
        })
}

/// The model: reading `a..a+n` of a group of `len` with `failed` indexes must
/// fail iff it touches a cell of a failed index in a stripe where more than p
/// failed indexes hold data (a failed index whose cell in that stripe is
/// padding loses nothing: its bytes are zeros by definition).
fn must_fail(len: u64, a: u64, n: u64, failed: &[u32]) -> bool {
    let layout = BlockGroupLayout::new(rs32(), len);
    layout
        .cells_for_range(a..a + n)
        .expect("valid range")
        .any(|s| {
            failed.contains(&s.replica_index.get())
                && failed
                    .iter()
                    .filter(|&&r| layout.cell_len(s.stripe, ri(r)).expect("index") > 0)
                    .count()
                    > 2
        })
}

#[test]
fn random_fault_sets_never_return_wrong_bytes() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (cluster, client) = rt.block_on(async {
        let (cluster, client) = failure_cluster(5).await;
        // One block group per key: the fault set maps to exactly |failed| nodes.
        ec_bucket(&client, "b", 1 << 20).await;
        (cluster, client)
    });
    let cluster = std::sync::Mutex::new(cluster);
    let counter = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |c| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            let mut cluster = cluster.lock().expect("cluster");
            rt.block_on(async {
                let key = format!("k{n}");
                let src = data(c.len, n);
                let info = client.put_key("b", &key, None, &src).await.expect("put");
                let nodes: Vec<usize> = c
                    .failed
                    .iter()
                    .map(|&r| node_of(&cluster, &info, 0, r))
                    .collect();
                for &node in &nodes {
                    fail(&mut cluster, node, Failure::ALL[c.kind]).await;
                }
                let stream = client.open_key("b", &key).await.expect("open");
                let mut ranges = c.ranges.clone();
                ranges.push((0, c.len));
                let mut outcome = Ok(());
                for (a, len) in ranges {
                    let mut buf = vec![0u8; len as usize];
                    let expect_failure = must_fail(c.len, a, len, &c.failed);
                    match (stream.read_exact_at(a, &mut buf).await, expect_failure) {
                        (Ok(()), false) => {
                            if buf[..] != src[a as usize..(a + len) as usize] {
                                outcome = Err(format!("wrong bytes at {a}+{len}"));
                            }
                        }
                        (Err(ClientError::InsufficientLocations { .. }), true) => {}
                        (r, _) => {
                            outcome = Err(format!(
                                "{a}+{len}: expected failure {expect_failure}, got {r:?}"
                            ));
                        }
                    }
                    if outcome.is_err() {
                        break;
                    }
                }
                for &node in &nodes {
                    heal(&mut cluster, node).await;
                }
                prop_assert!(outcome.is_ok(), "{c:?}: {outcome:?}");
                Ok(())
            })
        })
        .expect("property holds");
    let cluster = cluster.into_inner().expect("cluster");
    rt.block_on(cluster.shutdown());
}
