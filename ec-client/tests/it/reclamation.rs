//! Running for weeks, through a real minicluster: deleted, overwritten and
//! abandoned data frees its space on the datanodes (the om's deletion log
//! and block deleting service, DeleteBlocks on the datanodes), a model-based
//! test that no block leaks and none referenced is lost across random
//! operations and datanode restarts, datanode liveness as the om reports it,
//! and one minicluster per data dir.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{data, ec_bucket, replicated_bucket, test_config, wait_statuses};
use ec_client::{Client, ClientError};
use minicluster::{MiniCluster, MiniClusterConfig, MiniClusterError};
use om::NodeState;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Waits (bounded) until the om's deletion log is empty: every freed replica
/// acknowledged by its datanode.
async fn quiesce(cluster: &MiniCluster) {
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_pending_deletions(|n| n == 0),
    )
    .await
    .expect("deletions finish within 60 s")
    .expect("om alive");
}

/// Bytes of every file under `dir`.
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("readable dir").flatten() {
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            du(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// (datanode uuid, container id, local id) of every block file on disk;
/// fails on any other file, and on fine checksums without a block file.
fn blocks_on_disk(cluster: &MiniCluster) -> BTreeSet<(String, u64, u64)> {
    let mut out = BTreeSet::new();
    let mut fine = BTreeSet::new();
    for d in cluster.datanodes() {
        let containers = d.data_dir().join("containers");
        for c in std::fs::read_dir(&containers)
            .expect("containers dir")
            .flatten()
        {
            let cid: u64 = c
                .file_name()
                .to_string_lossy()
                .parse()
                .expect("container id");
            for f in std::fs::read_dir(c.path())
                .expect("container dir")
                .flatten()
            {
                let name = f.file_name().to_string_lossy().into_owned();
                // A closed block's fine checksums sit beside its file.
                let (suffix, set) = if name.ends_with(".fine") {
                    (".fine", &mut fine)
                } else {
                    (".block", &mut out)
                };
                let lid: u64 = name
                    .strip_suffix(suffix)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("unexpected file {name}"));
                set.insert((d.uuid().to_string(), cid, lid));
            }
        }
    }
    let orphans: Vec<_> = fine.difference(&out).collect();
    assert!(
        orphans.is_empty(),
        "fine checksums without a block file: {orphans:?}"
    );
    out
}

/// Every replica the om references: committed keys and uploaded parts.
async fn referenced(client: &Client, buckets: &[&str]) -> BTreeSet<(String, u64, u64)> {
    let mut out = BTreeSet::new();
    let mut add = |g: &proto_crate::BlockGroup| {
        for l in &g.pipeline.locations {
            out.insert((l.datanode.uuid.to_string(), g.container_id, g.local_id));
        }
    };
    for b in buckets {
        for k in client.list_keys(b, "", "", 0).await.expect("list") {
            k.block_groups.iter().for_each(&mut add);
        }
        for u in client.list_multipart_uploads(b, "").await.expect("uploads") {
            for p in client.list_parts(&u.upload_id).await.expect("parts").parts {
                p.block_groups.iter().for_each(&mut add);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_overwrite_delete_cycles_give_the_space_back() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    // Ozone's default rs-3-2-1024k: 8 MiB is under three stripes.
    client
        .create_bucket(
            "ec",
            ec_client::BucketOptions {
                replication: Some(ec_client::ReplicationConfig::default()),
                block_size: Some(4 << 20),
                ..Default::default()
            },
        )
        .await
        .expect("bucket");
    replicated_bucket(&client, "rep", 4 << 20).await;
    let size = |c: &MiniCluster| -> u64 { c.datanodes().iter().map(|d| du(d.data_dir())).sum() };
    let before = size(&cluster);
    let mb8 = 8 << 20;
    for cycle in 0..20u64 {
        for bucket in ["ec", "rep"] {
            client
                .put_key(bucket, "k", None, &data(mb8, cycle))
                .await
                .expect("put");
            client
                .put_key(bucket, "k", None, &data(mb8, cycle + 100))
                .await
                .expect("overwrite");
            if cycle == 0 || cycle == 19 {
                let got = common::read_all(&client, bucket, "k").await;
                assert!(got == data(mb8, cycle + 100), "cycle {cycle} {bucket}");
            }
            client.delete_key(bucket, "k").await.expect("delete");
        }
    }
    quiesce(&cluster).await;
    let after = size(&cluster);
    assert!(
        after <= before + (1 << 20),
        "data dirs grew from {before} to {after} bytes over 20 cycles"
    );
    assert!(blocks_on_disk(&cluster).is_empty(), "no block file is left");
    for d in cluster.datanodes() {
        let stats = d.node().expect("running").store().stats();
        assert_eq!(
            (stats.used_bytes, stats.blocks),
            (0, 0),
            "datanode {}",
            d.index()
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_writer_frees_what_it_wrote() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "ec", 1 << 20).await;
    let mut w = client
        .create_key("ec", "partial", None)
        .await
        .expect("create");
    w.write(&data(200_000, 1)).await.expect("write");
    let Some(ec) = w.as_ec() else {
        panic!("an EC bucket gives an EC writer");
    };
    let mut progress = ec.progress();
    tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|p| p.stripes_flushed >= 4),
    )
    .await
    .expect("stripes reach the datanodes")
    .expect("writer alive");
    assert!(
        !blocks_on_disk(&cluster).is_empty(),
        "the writer stored blocks"
    );
    drop(w);
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_open_sessions(|n| n == 0),
    )
    .await
    .expect("the session is aborted")
    .expect("count");
    // The abort's transaction stages the groups as it removes the session,
    // but the files go only once the deleting service has sent the
    // deletions: wait on the log's changes until the files are gone (a
    // write that outlived the abort can only have been refused or deleted
    // after it), not just for an empty log.
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        cluster
            .om()
            .wait_pending_deletions(|n| n == 0 && blocks_on_disk(&cluster).is_empty()),
    )
    .await;
    let left = blocks_on_disk(&cluster);
    assert!(
        waited.is_ok() && left.is_empty(),
        "nothing of the abandoned write is left, but {left:?} is"
    );
    cluster.shutdown().await;
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: usize,
        len: u64,
        ec: bool,
    },
    Delete {
        key: usize,
    },
    Multipart {
        key: usize,
        parts: Vec<u64>,
        complete: bool,
    },
    Abandon {
        key: usize,
        len: u64,
    },
    RestartDatanode {
        n: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, 1u64..60_000, any::<bool>()).prop_map(|(key, len, ec)| Op::Put { key, len, ec }),
        2 => (0..4usize).prop_map(|key| Op::Delete { key }),
        1 => (0..4usize, proptest::collection::vec(1u64..30_000, 1..4), any::<bool>())
            .prop_map(|(key, parts, complete)| Op::Multipart { key, parts, complete }),
        1 => (0..4usize, 1u64..60_000).prop_map(|(key, len)| Op::Abandon { key, len }),
        1 => (0..5usize).prop_map(|n| Op::RestartDatanode { n }),
    ]
}

/// Model-based: random puts, overwrites, deletes, multipart uploads
/// (completed or aborted), abandoned writes and datanode restarts against a
/// map of key -> bytes. After quiescence every key reads back exactly as the
/// model says, and the block files on disk are exactly those the om
/// references: none leaked, none referenced lost.
#[test]
fn random_operations_leave_exactly_the_referenced_blocks() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (cluster, client) = rt.block_on(async {
        let cluster = MiniCluster::start(MiniClusterConfig::default())
            .await
            .expect("minicluster");
        let client = cluster.client_with(test_config()).await.expect("client");
        ec_bucket(&client, "ec", 1 << 20).await;
        replicated_bucket(&client, "rep", 1 << 20).await;
        (cluster, client)
    });
    let cluster = std::sync::Mutex::new(cluster);
    let mut runner = TestRunner::new(Config {
        cases: 4,
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&proptest::collection::vec(op(), 4..14), |ops| {
            let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let mut cluster = cluster.lock().expect("cluster");
            rt.block_on(async {
                // Each case starts from empty buckets.
                for b in ["ec", "rep"] {
                    for k in client.list_keys(b, "", "", 0).await.expect("list") {
                        client.delete_key(b, &k.name).await.expect("clean");
                    }
                }
                let mut model: BTreeMap<(String, String), Vec<u8>> = BTreeMap::new();
                for (i, op) in ops.iter().enumerate() {
                    let seed = case * 1000 + i as u64;
                    match op {
                        Op::Put { key, len, ec } => {
                            let bucket = if *ec { "ec" } else { "rep" };
                            let bytes = data(*len, seed);
                            client
                                .put_key(bucket, &format!("k{key}"), None, &bytes)
                                .await
                                .expect("put");
                            model.insert((bucket.into(), format!("k{key}")), bytes);
                        }
                        Op::Delete { key } => {
                            for bucket in ["ec", "rep"] {
                                let name = format!("k{key}");
                                let r = client.delete_key(bucket, &name).await;
                                match model.remove(&(bucket.to_string(), name)) {
                                    Some(_) => r.expect("delete"),
                                    None => assert!(
                                        matches!(r, Err(ClientError::KeyNotFound { .. })),
                                        "{r:?}"
                                    ),
                                }
                            }
                        }
                        Op::Multipart {
                            key,
                            parts,
                            complete,
                        } => {
                            let name = format!("k{key}");
                            let up = client
                                .initiate_multipart_upload("ec", &name, None, BTreeMap::new())
                                .await
                                .expect("initiate");
                            let mut listed = Vec::new();
                            let mut whole = Vec::new();
                            for (n, len) in parts.iter().enumerate() {
                                let bytes = data(*len, seed * 10 + n as u64);
                                let mut w =
                                    client.upload_part(&up, n as u32 + 1).await.expect("part");
                                w.write(&bytes).await.expect("write part");
                                let p = w.close_part(&format!("e{n}")).await.expect("close part");
                                listed.push((p.part_number, p.etag));
                                whole.extend_from_slice(&bytes);
                            }
                            if *complete {
                                client
                                    .complete_multipart_upload(&up, &listed, 0, BTreeMap::new())
                                    .await
                                    .expect("complete");
                                model.insert(("ec".into(), name), whole);
                            } else {
                                client.abort_multipart_upload(&up).await.expect("abort");
                            }
                        }
                        Op::Abandon { key, len } => {
                            let mut w = client
                                .create_key("rep", &format!("k{key}"), None)
                                .await
                                .expect("create");
                            w.write(&data(*len, seed)).await.expect("write");
                            drop(w);
                        }
                        Op::RestartDatanode { n } => {
                            let d = cluster.datanode_mut(*n).expect("datanode");
                            d.stop().await;
                            d.restart().await.expect("restart");
                        }
                    }
                }
                tokio::time::timeout(
                    Duration::from_secs(60),
                    cluster.om().wait_open_sessions(|n| n == 0),
                )
                .await
                .expect("abandoned sessions are aborted")
                .expect("count");
                quiesce(&cluster).await;
                for ((bucket, key), bytes) in &model {
                    let got = common::read_all(&client, bucket, key).await;
                    prop_assert!(got == *bytes, "{bucket}/{key} after {ops:?}");
                }
                let on_disk = blocks_on_disk(&cluster);
                let refs = referenced(&client, &["ec", "rep"]).await;
                let leaked: Vec<_> = on_disk.difference(&refs).collect();
                prop_assert!(leaked.is_empty(), "leaked {leaked:?} after {ops:?}");
                Ok(())
            })
        })
        .expect("property holds");
    let cluster = cluster.into_inner().expect("cluster");
    rt.block_on(cluster.shutdown());
}

/// Liveness with the om's clock stepped by the test: silence for the stale
/// and dead intervals is a step, not a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_datanode_turns_dead_and_gets_no_new_groups_until_it_returns() {
    let clock = std::sync::Arc::new(om::ManualClock::default());
    let mut cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_liveness(
                Duration::from_millis(100),
                Duration::from_secs(5),
                Duration::from_secs(10),
            )
            .with_om_clock(clock.clone()),
    )
    .await
    .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "ec", 1 << 20).await;
    let om_addr = cluster.om_address();
    let victim = cluster.datanodes()[2].uuid().to_string();
    cluster.datanode_mut(2).expect("dn").stop().await;
    let state_of = |statuses: &[om::DatanodeStatus], uuid: &str| {
        statuses
            .iter()
            .find(|s| s.details.uuid == uuid)
            .map(|s| s.state)
    };
    let others_healthy = |statuses: &[om::DatanodeStatus], uuid: &str| {
        statuses
            .iter()
            .filter(|s| s.details.uuid != uuid)
            .all(|s| s.state == NodeState::Healthy)
    };
    let statuses = om::list_datanode_statuses(&om_addr, None)
        .await
        .expect("ListDatanodes");
    assert_eq!(state_of(&statuses, &victim), Some(NodeState::Healthy));
    // Six seconds of om time: the silent datanode is STALE once the others
    // have heartbeated again.
    clock.advance(Duration::from_secs(6));
    wait_statuses(&cluster, |s| {
        state_of(s, &victim) == Some(NodeState::Stale) && others_healthy(s, &victim)
    })
    .await;
    clock.advance(Duration::from_secs(5));
    wait_statuses(&cluster, |s| {
        state_of(s, &victim) == Some(NodeState::Dead) && others_healthy(s, &victim)
    })
    .await;
    let statuses = om::list_datanode_statuses(&om_addr, None)
        .await
        .expect("ListDatanodes");
    assert_eq!(
        state_of(&statuses, &victim),
        Some(NodeState::Dead),
        "over RPC too"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| s.state == NodeState::Healthy)
            .count(),
        4
    );
    let err = client
        .put_key("ec", "k", None, &data(10_000, 1))
        .await
        .expect_err("rs-3-2 needs five healthy datanodes");
    // The om's refusal is the source of the writer's failure.
    let mut msg = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        msg = format!("{msg}: {s}");
        source = s.source();
    }
    assert!(
        msg.contains("4 of 5 registered datanodes are healthy"),
        "{msg}"
    );
    cluster
        .datanode_mut(2)
        .expect("dn")
        .restart()
        .await
        .expect("restart");
    // Registration on restart makes it HEALTHY at once.
    let statuses = om::list_datanode_statuses(&om_addr, None)
        .await
        .expect("ListDatanodes");
    assert_eq!(state_of(&statuses, &victim), Some(NodeState::Healthy));
    let bytes = data(10_000, 2);
    client.put_key("ec", "k", None, &bytes).await.expect("put");
    assert!(common::read_all(&client, "ec", "k").await == bytes);
    // Heartbeats carry the datanodes' figures: the next round reports the
    // group's five blocks.
    wait_statuses(&cluster, |s| {
        s.iter().map(|d| d.stats.blocks).sum::<u64>() == 5
            && s.iter().all(|d| d.stats.capacity_bytes > 0)
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_minicluster_on_a_data_dir_is_refused_and_the_first_keeps_serving() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("cluster");
    let first = MiniCluster::start(
        MiniClusterConfig::default()
            .with_base_dir(&base)
            .with_clean(true),
    )
    .await
    .expect("first minicluster");
    let client = first.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "ec", 1 << 20).await;
    client
        .put_key("ec", "k", None, &data(50_000, 3))
        .await
        .expect("put");
    // Something of the user's in the directory: never removed.
    std::fs::create_dir_all(base.join("dn-notes")).expect("user dir");
    let second = MiniCluster::start(
        MiniClusterConfig::default()
            .with_base_dir(&base)
            .with_clean(true),
    )
    .await;
    match second {
        Err(MiniClusterError::DirInUse(e)) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("pid {} (minicluster)", std::process::id())),
                "{msg}"
            );
        }
        other => panic!("expected DirInUse, got {other:?}"),
    }
    assert!(
        common::read_all(&client, "ec", "k").await == data(50_000, 3),
        "the first cluster still serves"
    );
    client
        .put_key("ec", "k2", None, &data(50_000, 4))
        .await
        .expect("and writes");
    first.shutdown().await;
    // A later clean start removes only what a minicluster made.
    let third = MiniCluster::start(
        MiniClusterConfig::default()
            .with_base_dir(&base)
            .with_clean(true),
    )
    .await
    .expect("a clean restart");
    assert!(
        base.join("dn-notes").is_dir(),
        "the user's directory is kept"
    );
    let client = third.client_with(test_config()).await.expect("client");
    assert!(
        client.list_buckets().await.expect("buckets").is_empty(),
        "old data is gone"
    );
    third.shutdown().await;
}

/// A writer that allocates nothing for longer than the om's lease (it
/// streams into one block group) keeps its session: it renews the lease in
/// the background. The om's clock is stepped by most of a lease at a time,
/// each step followed by the writer's next renewal, while the lease reaper
/// runs against the same clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_writer_outlives_the_open_key_lease() {
    let clock = std::sync::Arc::new(om::ManualClock::default());
    let lease = Duration::from_millis(600);
    let cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_open_key_lease(lease)
            .with_service_interval(Duration::from_millis(100))
            .with_om_clock(clock.clone()),
    )
    .await
    .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    replicated_bucket(&client, "rep", 64 << 20).await;
    let mut w = client
        .create_key("rep", "slow", None)
        .await
        .expect("create");
    let first = data(1000, 1);
    w.write(&first).await.expect("write");
    // Four steps of 500 ms: three leases pass with no allocation (the data
    // is still buffered).
    let mut renewals = cluster.om().watch_renewals();
    for _ in 0..4 {
        clock.advance(lease * 5 / 6);
        renewals.borrow_and_update();
        tokio::time::timeout(Duration::from_secs(60), renewals.changed())
            .await
            .expect("the writer renews")
            .expect("om alive");
    }
    let second = data(1000, 2);
    w.write(&second).await.expect("write");
    w.close().await.expect("the session is still open");
    let mut all = first.clone();
    all.extend_from_slice(&second);
    assert!(common::read_all(&client, "rep", "slow").await == all);
    cluster.shutdown().await;
}

/// A datanode that is down when its blocks are freed gets their deletion
/// when it returns; the others are not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_for_a_stopped_datanode_wait_for_it() {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "ec", 1 << 20).await;
    let info = client
        .put_key("ec", "k", None, &data(20_000, 9))
        .await
        .expect("put");
    let down = common::node_of(&cluster, &info, 0, 2);
    cluster.datanode_mut(down).expect("dn").stop().await;
    client.delete_key("ec", "k").await.expect("delete");
    // The four running datanodes acknowledge; one replica waits.
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_pending_deletions(|n| n == 1),
    )
    .await
    .expect("the running datanodes acknowledge within 60 s")
    .expect("om alive");
    let left = blocks_on_disk(&cluster);
    let down_uuid = cluster.datanodes()[down].uuid().to_string();
    assert_eq!(
        left.len(),
        1,
        "only the stopped datanode's block is left: {left:?}"
    );
    assert!(left.iter().all(|(uuid, _, _)| *uuid == down_uuid));
    cluster
        .datanode_mut(down)
        .expect("dn")
        .restart()
        .await
        .expect("restart");
    quiesce(&cluster).await;
    assert!(
        blocks_on_disk(&cluster).is_empty(),
        "delivered after the restart"
    );
    cluster.shutdown().await;
}
