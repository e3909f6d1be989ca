//! What an EC write makes durable, and when (ARCHITECTURE.md, durability):
//! per-stripe PutBlocks only publish; the close of each internal block syncs
//! its file once and commits its record; a group given up after a failed
//! stripe is sealed durably at its acknowledged length on every index that
//! did not fail. Counts are the datanodes' own (`StoreStats`), exact.

use crate::common;

use std::time::Duration;

use common::{
    CELL, STRIPE, check_stored_lengths, check_stored_lengths_after_losses, data, ec_bucket,
    failure_config, read_all, ri,
};
use datanode::{FaultKind, FaultRule, RpcKind, StoreStats};
use ec_client::{Client, KeyOutputStream};
use minicluster::{MiniCluster, MiniClusterConfig};

async fn cluster(n: usize) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_datanodes(n))
        .await
        .expect("minicluster");
    let client = cluster.client_with(failure_config()).await.expect("client");
    (cluster, client)
}

/// The durable-path counters summed over every running datanode.
fn durable_counts(cluster: &MiniCluster) -> (u64, u64, u64) {
    cluster
        .datanodes()
        .iter()
        .filter_map(|d| d.node())
        .map(|n| n.store().stats())
        .fold((0, 0, 0), |(f, r, c), s: StoreStats| {
            (
                f + s.block_file_syncs,
                r + s.durable_records,
                c + s.record_commits,
            )
        })
}

async fn wait_flushed(w: &KeyOutputStream, n: u64) {
    let Some(ec) = w.as_ec() else {
        panic!("expected an EC writer");
    };
    let mut progress = ec.progress();
    tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|p| p.stripes_flushed >= n),
    )
    .await
    .expect("the flush stage acknowledges the stripes")
    .expect("writer alive");
}

/// Makes every PutBlock fail on the datanode holding index `r` of the
/// writer's current group; returns that group and the datanode.
fn fail_put_blocks_of_index(
    cluster: &MiniCluster,
    w: &KeyOutputStream,
    r: u32,
) -> (proto_crate::BlockGroup, proto_crate::DatanodeId) {
    let Some(ec) = w.as_ec() else {
        panic!("expected an EC writer");
    };
    let group = ec.current_block_group().expect("group");
    let victim = group
        .pipeline
        .nodes_for(ri(r))
        .next()
        .expect("the index has a datanode")
        .uuid
        .clone();
    cluster
        .datanode_by_uuid(&victim)
        .expect("dn")
        .inject(FaultRule::new(RpcKind::PutBlock, FaultKind::Unavailable).expect("rule"));
    (group, victim)
}

/// Four full stripes acknowledged by the datanodes sync nothing; the close
/// syncs each of the five internal block files once and commits each
/// record once (one datanode per index, so no batch holds two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ec_write_syncs_each_internal_block_once_at_close() {
    let (cluster, client) = cluster(5).await;
    ec_bucket(&client, "b", 64 * CELL).await;
    let src = data(4 * STRIPE + CELL, 7);
    let mut w = client.create_key("b", "k", None).await.expect("create");
    w.write(&src).await.expect("write");
    wait_flushed(&w, 4).await;
    assert_eq!(
        durable_counts(&cluster),
        (0, 0, 0),
        "per-stripe PutBlocks sync nothing"
    );
    let info = w.close().await.expect("close");
    assert_eq!(info.block_groups.len(), 1);
    assert_eq!(
        durable_counts(&cluster),
        (5, 5, 5),
        "one file sync and one record commit per internal block"
    );
    check_stored_lengths(&info).await;
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// A PutBlock failing on one index at the second stripe (after the other
/// four published it): the writer seals the group at the one acknowledged
/// stripe — a close that cuts the four back from two stripes — and rewrites
/// the stripe on a new group. After every datanode of the first group
/// restarts, the sealed indexes hold exactly one stripe's lengths (durable),
/// the failed index is gone (it was only published), and the key reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_given_up_is_sealed_durably_at_its_acknowledged_length() {
    let (mut cluster, client) = cluster(7).await;
    ec_bucket(&client, "b", 64 * CELL).await;
    let src = data(3 * STRIPE, 11);
    let mut w = client.create_key("b", "k", None).await.expect("create");
    w.write(&src[..STRIPE as usize])
        .await
        .expect("first stripe");
    wait_flushed(&w, 1).await;
    let (group, victim) = fail_put_blocks_of_index(&cluster, &w, 2);
    w.write(&src[STRIPE as usize..]).await.expect("rest");
    let info = w.close().await.expect("close");
    assert_eq!(info.block_groups.len(), 2);
    assert_eq!(info.block_groups[0].length, STRIPE, "sealed at one stripe");
    check_stored_lengths(&info).await;
    let first: Vec<usize> = group
        .pipeline
        .locations
        .iter()
        .map(|l| {
            cluster
                .datanode_by_uuid(&l.datanode.uuid)
                .expect("dn")
                .index()
        })
        .collect();
    for n in first {
        let dn = cluster.datanode_mut(n).expect("dn");
        dn.stop().await;
        dn.restart().await.expect("restart");
    }
    check_stored_lengths_after_losses(&info, &[victim]).await;
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// A PutBlock failing on one index at the stripe that fills the group: the
/// group's other indexes published that stripe but none closed past the
/// first stripe, so the group is sealed at one stripe and the stripe is
/// rewritten on a new group (regression: the filling stripe's PutBlocks
/// closed the blocks at once, the seal was then refused as BlockClosed and
/// the key failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_the_stripe_that_fills_the_group_is_rewritten() {
    let (cluster, client) = cluster(7).await;
    // Two cells per internal block: a group holds two stripes.
    ec_bucket(&client, "b", 2 * CELL).await;
    let src = data(3 * STRIPE + 5, 13);
    let mut w = client.create_key("b", "k", None).await.expect("create");
    w.write(&src[..STRIPE as usize])
        .await
        .expect("first stripe");
    wait_flushed(&w, 1).await;
    fail_put_blocks_of_index(&cluster, &w, 3);
    w.write(&src[STRIPE as usize..]).await.expect("rest");
    let info = w.close().await.expect("close");
    assert_eq!(info.block_groups[0].length, STRIPE, "sealed at one stripe");
    assert_eq!(info.length, src.len() as u64);
    // Durable records: the sealed group on its four other indexes, the
    // full second group on five, the 5-byte third group on five (two of
    // them empty records).
    assert_eq!(info.block_groups.len(), 3);
    assert_eq!(durable_counts(&cluster).1, 4 + 5 + 5);
    check_stored_lengths(&info).await;
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// The closing PutBlock failing on one index (after every stripe was
/// acknowledged): d or more indexes closed, so the key commits; the failed
/// index held its bytes only published, and after its datanode restarts the
/// block is gone (the ReplicationManager's to rebuild) while the key reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_closes_with_one_index_failing_its_close() {
    let (mut cluster, client) = cluster(5).await;
    ec_bucket(&client, "b", 64 * CELL).await;
    let src = data(2 * STRIPE, 17);
    let mut w = client.create_key("b", "k", None).await.expect("create");
    w.write(&src).await.expect("write");
    wait_flushed(&w, 2).await;
    let (_, victim) = fail_put_blocks_of_index(&cluster, &w, 5);
    let n = cluster.datanode_by_uuid(&victim).expect("dn").index();
    let info = w.close().await.expect("close with four indexes closed");
    assert_eq!(info.block_groups.len(), 1);
    assert_eq!(durable_counts(&cluster).1, 4, "four records made durable");
    let dn = cluster.datanode_mut(n).expect("dn");
    dn.stop().await;
    dn.restart().await.expect("restart");
    check_stored_lengths_after_losses(&info, &[victim]).await;
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}
