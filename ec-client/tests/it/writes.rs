//! EC writes (pipelined by default) and replicated writes: round trips at
//! every stripe shape, stored lengths on every datanode, failures mid-key,
//! pipelining proven by counters, and writers dropped without close.

use crate::common;

use std::time::Duration;

use common::{
    CELL, STRIPE, check_stored_lengths, check_stored_lengths_after_losses, data, ec_bucket,
    failure_config, read_all, replicated_bucket, ri,
};
use datanode::{FaultKind, FaultRule, RpcKind};
use ec_client::{Client, ClientError, EcWriteMode, KeyOutputStream, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};

async fn cluster(n: usize, mode: EcWriteMode) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_datanodes(n))
        .await
        .expect("minicluster");
    let client = cluster
        .client_with(failure_config().with_ec_write_mode(mode))
        .await
        .expect("client");
    (cluster, client)
}

fn ec(w: &KeyOutputStream) -> &ec_client::EcKeyOutputStream {
    w.as_ec().expect("expected an EC writer")
}

/// Waits until the writer's flush stage acknowledged `n` stripes.
async fn wait_flushed(w: &KeyOutputStream, n: u64) {
    let mut progress = ec(w).progress();
    tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|p| p.stripes_flushed >= n),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "flush stage never acknowledged {n} stripes: {:?}",
            ec(w).stats()
        )
    })
    .expect("writer alive");
}

/// Round trips of the shapes Ozone's EC write tests use, in both write
/// modes, with exact stored lengths on every datanode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_of_every_stripe_shape() {
    for mode in [EcWriteMode::Pipelined, EcWriteMode::Serial] {
        let (cluster, client) = cluster(5, mode).await;
        ec_bucket(&client, "b", 2 * CELL).await;
        let c = CELL as usize;
        let mut cases: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
        for cells in [4, 5, 6, 7, 9, 10, 12] {
            let d = data(cells * CELL, cells);
            cases.push((format!("cells-{cells}"), d.clone(), vec![d.len()]));
        }
        let big = data(20 * CELL, 99);
        cases.push((
            "offset-100".into(),
            big[100..100 + 11 * c].to_vec(),
            vec![11 * c],
        ));
        cases.push((
            "9-cells-10".into(),
            data(9 * CELL + 10, 3),
            vec![9 * c + 10],
        ));
        cases.push(("byte-at-a-time".into(), data(CELL, 4), vec![1; c]));
        cases.push((
            "2-cells-minus".into(),
            data(3 * CELL - 1, 5),
            vec![3 * c - 1],
        ));
        cases.push((
            "3-groups".into(),
            data(2 * 6 * CELL + 7, 6),
            vec![5000, 7000, 2 * 6 * c + 7 - 12000],
        ));
        for (name, src, writes) in cases {
            let mut w = client.create_key("b", &name, None).await.expect("create");
            let mut at = 0;
            for n in writes {
                w.write(&src[at..at + n]).await.expect("write");
                at += n;
            }
            let info = w.close().await.expect("close");
            assert_eq!(info.length, src.len() as u64, "{name}");
            assert!(
                read_all(&client, "b", &name).await == src,
                "{name} ({mode:?}) reads back differently"
            );
            check_stored_lengths(&info).await;
            if name == "3-groups" {
                assert_eq!(info.block_groups.len(), 3);
            }
        }
        cluster.shutdown().await;
    }
}

/// A datanode failing after one good stripe, for each index: the key reads
/// back exactly, has 2 block groups, and the failed node is not in the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datanode_failing_after_one_stripe_for_each_index() {
    let (mut cluster, client) = cluster(7, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    for r in 1..=5u32 {
        let key = format!("k{r}");
        let src = data(3 * STRIPE + 17, u64::from(r));
        let mut w = client.create_key("b", &key, None).await.expect("create");
        w.write(&src[..STRIPE as usize])
            .await
            .expect("first stripe");
        wait_flushed(&w, 1).await;
        let group = ec(&w).current_block_group().expect("group");
        let uuid = group
            .pipeline
            .nodes_for(ri(r))
            .next()
            .expect("node")
            .uuid
            .clone();
        let n = cluster.datanode_by_uuid(&uuid).expect("dn").index();
        cluster.datanode_mut(n).expect("dn").stop().await;
        w.write(&src[STRIPE as usize..]).await.expect("rest");
        let info = w.close().await.expect("close");
        assert_eq!(info.length, src.len() as u64);
        assert_eq!(info.block_groups.len(), 2, "index {r}");
        assert_eq!(info.block_groups[0].length, STRIPE);
        assert!(
            info.block_groups[1]
                .pipeline
                .locations
                .iter()
                .all(|l| l.datanode.uuid != uuid),
            "failed datanode reused"
        );
        cluster
            .datanode_mut(n)
            .expect("dn")
            .restart()
            .await
            .expect("restart");
        assert!(read_all(&client, "b", &key).await == src, "index {r}");
        check_stored_lengths_after_losses(&info, &[uuid]).await;
    }
    cluster.shutdown().await;
}

/// One index failing while the others have run ahead of it: with stripes
/// 2..=5 in flight, every index but 2 publishes them while index 2's
/// WriteChunk of stripe 2 is held up and then fails. The group keeps only
/// what every index published (stripe 1): the others are cut back to it by
/// the seal, exactly the stripes in flight are rewritten on a new group
/// without index 2's datanode, and the key reads back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_behind_stripes_published_elsewhere_rewrites_them_all() {
    let (cluster, client) = cluster(7, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let window = client.config().ec_stripes_in_flight as u64;
    assert!(window >= 2, "the default window has stripes in flight");
    let src = data((window + 2) * STRIPE, 9);
    let (mut w, group) = first_stripe_flushed(&client, "ahead", &src).await;
    let node = |r: u32| node_of(&group, r);
    let slow = node(2);
    let block = group.block_id(ri(2));
    let dn = cluster.datanode_by_uuid(&slow.uuid).expect("dn");
    for kind in [
        FaultKind::Delay(Duration::from_millis(1500)),
        FaultKind::Unavailable,
    ] {
        dn.inject(
            FaultRule::new(RpcKind::WriteChunk, kind)
                .expect("rule")
                .for_block(block.container_id, block.local_id),
        );
    }
    w.write(&src[STRIPE as usize..]).await.expect("rest queued");
    // While index 2 is held up, index 1 publishes every stripe of the window.
    wait_published(&group, &node(1).address, 1, (1 + window) * CELL).await;
    let info = w.close().await.expect("close");
    assert_eq!(info.length, src.len() as u64);
    assert_eq!(info.block_groups.len(), 2);
    assert_eq!(
        info.block_groups[0].length, STRIPE,
        "only what every index published"
    );
    assert!(
        info.block_groups[1]
            .pipeline
            .locations
            .iter()
            .all(|l| l.datanode.uuid != slow.uuid),
        "failed datanode reused"
    );
    assert!(read_all(&client, "b", "ahead").await == src);
    // Index 1 (and 3, 4, 5) were cut back from 1 + window stripes to one.
    check_stored_lengths(&info).await;
    cluster.shutdown().await;
}

/// Creates EC key `key` in bucket `b`, writes the first stripe of `src` and
/// waits until it is acknowledged; returns the writer and its block group.
async fn first_stripe_flushed(
    client: &Client,
    key: &str,
    src: &[u8],
) -> (KeyOutputStream, proto_crate::BlockGroup) {
    let mut w = client.create_key("b", key, None).await.expect("create");
    w.write(&src[..STRIPE as usize])
        .await
        .expect("first stripe");
    wait_flushed(&w, 1).await;
    let group = ec(&w).current_block_group().expect("group");
    (w, group)
}

/// The datanode that holds index `r` of `group`.
fn node_of(group: &proto_crate::BlockGroup, r: u32) -> proto_crate::DatanodeDetails {
    group
        .pipeline
        .nodes_for(ri(r))
        .next()
        .expect("node")
        .clone()
}

/// Waits until index `r` of `group`, on the datanode at `address`, has
/// published `len` bytes.
async fn wait_published(group: &proto_crate::BlockGroup, address: &str, r: u32, len: u64) {
    let dn = block_stream::XceiverClientManager::direct(address)
        .expect("client")
        .with_fixed_token(group.token.as_ref());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = dn
            .get_committed_block_length(group.block_id(ri(r)))
            .await
            .expect("the index's block");
        if now == len {
            return;
        }
        assert!(now < len, "index {r} went past {len} bytes: {now}");
        assert!(
            std::time::Instant::now() < deadline,
            "index {r} stayed at {now} bytes, not {len}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An index that ran ahead of the others and then failed on a datanode that
/// still answers is cut back with them: with index 2 held up, index 1
/// publishes every stripe of the window, then its datanode refuses the next
/// WriteChunk with an I/O error. The seal closes index 1 at the group's
/// acknowledged length as well, so that no replica of the group holds a
/// stripe the group does not (it held 1 + window cells before the seal cut
/// it back). Index 2 finishes only the stripe in hand when the lanes stop,
/// so the group keeps less than what index 1 published. When index 1's
/// datanode also holds its PutBlocks for longer than the RPC deadline
/// allows, the seal abandons that close after its grace period: the write
/// completes and index 1 keeps what it published (a seal that waited would
/// have cut it back after the delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_that_ran_ahead_then_failed_is_cut_back_too() {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_datanodes(7))
        .await
        .expect("minicluster");
    // Index 2 is slow, not failed: its deadline is well past the delay.
    let client = cluster
        .client_with(failure_config().with_rpc_timeout(Duration::from_secs(30)))
        .await
        .expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let window = client.config().ec_stripes_in_flight as u64;
    for slow_close in [false, true] {
        let key = format!("ran-ahead-{slow_close}");
        let src = data((window + 3) * STRIPE, 11);
        let (mut w, group) = first_stripe_flushed(&client, &key, &src).await;
        let node = |r: u32| node_of(&group, r);
        let rule = |r: u32, rpc, kind| {
            let block = group.block_id(ri(r));
            FaultRule::new(rpc, kind)
                .expect("rule")
                .for_block(block.container_id, block.local_id)
        };
        cluster
            .datanode_by_uuid(&node(2).uuid)
            .expect("dn")
            .inject(rule(
                2,
                RpcKind::WriteChunk,
                FaultKind::Delay(Duration::from_secs(3)),
            ));
        w.write(&src[STRIPE as usize..]).await.expect("rest queued");
        let ahead = node(1);
        wait_published(&group, &ahead.address, 1, (1 + window) * CELL).await;
        let dn = cluster.datanode_by_uuid(&ahead.uuid).expect("dn");
        if slow_close {
            dn.inject(rule(
                1,
                RpcKind::PutBlock,
                FaultKind::Delay(Duration::from_secs(20)),
            ));
        }
        dn.inject(rule(
            1,
            RpcKind::WriteChunk,
            FaultKind::Code(proto_crate::ResultCode::IoException),
        ));
        let info = w.close().await.expect("close");
        assert_eq!(info.length, src.len() as u64);
        assert_eq!(info.block_groups.len(), 2);
        let kept = info.block_groups[0].length;
        assert!(
            kept > STRIPE && kept < (1 + window) * STRIPE,
            "the group keeps what index 2 published after the first stripe, less than index \
             1 published: {kept} bytes"
        );
        assert!(
            info.block_groups[1]
                .pipeline
                .locations
                .iter()
                .all(|l| l.datanode.uuid != ahead.uuid),
            "failed datanode reused"
        );
        assert!(read_all(&client, "b", &key).await == src);
        if slow_close {
            // The abandoned close did not land; nothing else was cut short.
            wait_published(&group, &ahead.address, 1, (1 + window) * CELL).await;
        } else {
            // Index 1 too holds exactly the first group's share.
            check_stored_lengths(&info).await;
        }
    }
    cluster.shutdown().await;
}

/// Two datanodes failing while a partial stripe is pending: it is rewritten
/// on a new group at close and the key reads back exactly. Parity datanodes
/// failing after two stripes: the first group keeps its two stripes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_failures_with_a_partial_stripe_and_parity_failures() {
    let (mut cluster, client) = cluster(7, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    for (key, failing) in [("partial", [1u32, 3]), ("parity", [4, 5])] {
        let src = data(2 * STRIPE + CELL + 5, 42);
        let mut w = client.create_key("b", key, None).await.expect("create");
        w.write(&src).await.expect("write");
        wait_flushed(&w, 2).await;
        let group = ec(&w).current_block_group().expect("group");
        let mut stopped = Vec::new();
        let mut lost = Vec::new();
        for r in failing {
            let uuid = &group.pipeline.nodes_for(ri(r)).next().expect("node").uuid;
            let n = cluster.datanode_by_uuid(uuid).expect("dn").index();
            cluster.datanode_mut(n).expect("dn").stop().await;
            stopped.push(n);
            lost.push(uuid.clone());
        }
        let info = w.close().await.expect("close");
        assert_eq!(info.block_groups.len(), 2, "{key}");
        assert_eq!(
            info.block_groups[0].length,
            2 * STRIPE,
            "{key}: first group keeps its stripes"
        );
        assert_eq!(info.length, src.len() as u64);
        for n in stopped {
            cluster
                .datanode_mut(n)
                .expect("dn")
                .restart()
                .await
                .expect("restart");
        }
        assert!(read_all(&client, "b", key).await == src, "{key}");
        check_stored_lengths_after_losses(&info, &lost).await;
    }
    cluster.shutdown().await;
}

/// Every datanode failing: the error comes after the retry limit, close does
/// not commit, the key is not visible; the error surfaces at the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_datanode_failing_commits_nothing() {
    let (cluster, client) = cluster(5, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    for dn in cluster.datanodes() {
        dn.inject(FaultRule::new(RpcKind::WriteChunk, FaultKind::Unavailable).expect("rule"));
    }
    let mut w = client
        .create_key("b", "doomed", None)
        .await
        .expect("create");
    w.write(&data(STRIPE, 1)).await.expect("queued");
    // The flush error surfaces at a later write (bounded wait).
    // Wait (on the writer's progress, not a clock) for the flush stage to
    // give up; the very next write reports its failure.
    let mut progress = ec(&w).progress();
    tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|p| p.flush_stage_ended),
    )
    .await
    .expect("flush stage ends within the retry limit")
    .expect("writer alive");
    let err = w
        .write(b"x")
        .await
        .expect_err("flush error surfaces at the next write");
    // The writer's failure, with the flush stage's as its source.
    let text = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(
        matches!(&err, ClientError::WriteAborted { cause, .. }
            if matches!(**cause, ClientError::WriteFailed { .. })),
        "{text}"
    );
    assert!(
        err.is_retryable(),
        "datanodes down: worth writing again later"
    );
    assert!(w.write(b"y").await.is_err(), "writer stays failed");
    assert!(w.close().await.is_err());
    assert!(matches!(
        client.key_info("b", "doomed").await,
        Err(ClientError::KeyNotFound { .. })
    ));
    cluster.shutdown().await;
}

/// A writer dropped mid-key leaves no key (pipelined and replicated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_writer_leaves_no_key() {
    let (cluster, client) = cluster(5, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let mut w = client
        .create_key("b", "dropped", None)
        .await
        .expect("create");
    w.write(&data(3 * STRIPE + 5, 2)).await.expect("write");
    drop(w);
    let mut r = client
        .create_key(
            "b",
            "dropped-rep",
            Some(ReplicationConfig::Replicated { factor: 3 }),
        )
        .await
        .expect("create");
    r.write(&data(5 * CELL, 2)).await.expect("write");
    drop(r);
    // Both sessions are aborted in the background (bounded wait), and nothing
    // was ever committed.
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_open_sessions(|n| n == 0),
    )
    .await
    .expect("dropped writers abort their om sessions")
    .expect("count");
    assert!(
        client
            .list_keys("b", "", "", 0)
            .await
            .expect("list")
            .is_empty()
    );
    cluster.shutdown().await;
}

/// With slow datanodes, stripe N+1 is encoded while stripe N is in flight,
/// the flush stage writes `ec_stripes_in_flight` stripes at once (one at a
/// time before the window), and the queue and window bounds hold (counters,
/// not timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoding_overlaps_flushing_and_the_queue_is_bounded() {
    let (cluster, client) = cluster(5, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    for dn in cluster.datanodes() {
        dn.inject(
            FaultRule::new(
                RpcKind::WriteChunk,
                FaultKind::Delay(Duration::from_millis(300)),
            )
            .expect("rule"),
        );
    }
    let src = data(8 * STRIPE, 3);
    let mut w = client.create_key("b", "slow", None).await.expect("create");
    w.write(&src).await.expect("write");
    let stats = ec(&w).stats();
    let queue = client.config().ec_stripe_queue_size as u64;
    let window = client.config().ec_stripes_in_flight as u64;
    w.close().await.expect("close");
    assert!(
        stats.encoded_when_first_flushed >= 2,
        "no overlap: {stats:?}"
    );
    // Encoded and not acknowledged: the window, the queue, and one stripe
    // encoded and waiting for room in the queue.
    assert!(
        stats.max_in_flight <= queue + window + 1,
        "queue bound broken: {stats:?}"
    );
    assert_eq!(
        stats.max_stripes_written_at_once, window,
        "every stripe of the window was written at once: {stats:?}"
    );
    assert!(read_all(&client, "b", "slow").await == src);
    cluster.shutdown().await;
}

/// hsync on EC is an explicit Unsupported error; flush is a no-op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsync_on_ec_is_unsupported() {
    let (cluster, client) = cluster(5, EcWriteMode::Pipelined).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let mut w = client.create_key("b", "k", None).await.expect("create");
    w.write(b"abc").await.expect("write");
    w.flush().expect("flush is a no-op");
    assert!(matches!(w.hsync().await, Err(ClientError::Unsupported(_))));
    w.close().await.expect("close");
    assert_eq!(read_all(&client, "b", "k").await, b"abc");
    cluster.shutdown().await;
}

/// Replicated THREE keys: round trip across several blocks, a replica
/// failing mid-key is excluded and the chunk rewritten on a new block, and
/// reads fail over to the other replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_writes_survive_a_failed_replica() {
    let (mut cluster, _) = cluster(5, EcWriteMode::Pipelined).await;
    let client = cluster
        .client_with(failure_config().with_replicated_chunk_size(4096))
        .await
        .expect("client");
    replicated_bucket(&client, "r", 3 * 4096).await;
    let src = data(10 * 4096 + 123, 7);
    let info = client.put_key("r", "plain", None, &src).await.expect("put");
    assert_eq!(info.block_groups.len(), 4);
    assert!(read_all(&client, "r", "plain").await == src);

    let mut w = client
        .create_key("r", "failing", None)
        .await
        .expect("create");
    w.write(&src[..2 * 4096]).await.expect("two chunks");
    // Stop one replica of the current block: the next chunk moves on.
    let Some(rw) = w.as_replicated() else {
        panic!("expected a replicated writer")
    };
    let block = rw.current_block().expect("open block");
    let victim_uuid = block.pipeline.locations[1].datanode.uuid.clone();
    let victim = cluster.datanode_by_uuid(&victim_uuid).expect("dn").index();
    cluster.datanode_mut(victim).expect("dn").stop().await;
    w.write(&src[2 * 4096..]).await.expect("rest");
    let info = w.close().await.expect("close");
    assert_eq!(info.length, src.len() as u64);
    assert_eq!(
        info.block_groups[0].length,
        2 * 4096,
        "first block closed at its acknowledged length"
    );
    for g in &info.block_groups[1..] {
        assert!(
            g.pipeline
                .locations
                .iter()
                .all(|l| l.datanode.uuid != victim_uuid),
            "victim reused"
        );
    }
    // Reads fail over while the victim is down, and after it returns.
    assert!(read_all(&client, "r", "failing").await == src);
    cluster
        .datanode_mut(victim)
        .expect("dn")
        .restart()
        .await
        .expect("restart");
    assert!(read_all(&client, "r", "plain").await == src);
    cluster.shutdown().await;
}

/// A replica failing PutBlock (after its WriteChunk succeeded) makes the
/// chunk move to a new block; the old block keeps only what was committed,
/// so the key's length stays exact (regression: the uncommitted chunk was
/// counted in the old block and the commit was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_put_block_failure_rewrites_the_chunk() {
    let (cluster, _) = cluster(5, EcWriteMode::Pipelined).await;
    let client = cluster
        .client_with(failure_config().with_replicated_chunk_size(4096))
        .await
        .expect("client");
    replicated_bucket(&client, "r", 1 << 20).await;
    let src = data(6 * 4096 + 9, 8);
    let mut w = client.create_key("r", "k", None).await.expect("create");
    w.write(&src[..2 * 4096]).await.expect("two chunks");
    let Some(rw) = w.as_replicated() else {
        panic!("expected a replicated writer")
    };
    let victim = rw.current_block().expect("open block").pipeline.locations[2]
        .datanode
        .uuid
        .clone();
    cluster
        .datanode_by_uuid(&victim)
        .expect("dn")
        .inject(FaultRule::new(RpcKind::PutBlock, FaultKind::Unavailable).expect("rule"));
    w.write(&src[2 * 4096..]).await.expect("rest");
    let info = w.close().await.expect("close");
    assert_eq!(info.length, src.len() as u64);
    assert_eq!(
        info.block_groups[0].length,
        2 * 4096,
        "old block ends at its committed length"
    );
    assert_eq!(
        info.block_groups.iter().map(|g| g.length).sum::<u64>(),
        src.len() as u64
    );
    assert!(read_all(&client, "r", "k").await == src);
    cluster.shutdown().await;
}
