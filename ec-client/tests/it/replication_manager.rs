//! The om's ReplicationManager, end to end: a datanode that goes DEAD (the om's clock stepped by
//! the test, so silence is a step, not a wait) has everything it held rebuilt (EC) or copied
//! (replicated) elsewhere without anyone asking, and a group with too few sources is reported
//! unrecoverable, not retried in a loop, and repaired once a datanode returns.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    STRIPE, data, ec_bucket, node_of, read_all, replicated_bucket, ri, test_config,
    wait_first_reports, wait_repair, wait_statuses,
};
use ec_client::Client;
use minicluster::{MiniCluster, MiniClusterConfig};
use om::{DatanodeStatus, ManualClock, NodeState};

/// A cluster of `n` datanodes whose om runs on `clock`, with second-scale liveness and a fast
/// service interval.
async fn cluster(n: usize, clock: &Arc<ManualClock>) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_datanodes(n)
            .with_liveness(
                Duration::from_millis(100),
                Duration::from_secs(5),
                Duration::from_secs(10),
            )
            .with_service_interval(Duration::from_millis(100))
            .with_deletion_grace(Duration::ZERO)
            .with_om_clock(clock.clone()),
    )
    .await
    .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    (cluster, client)
}

/// Steps the om's clock past the dead interval in two steps (each shorter than it, so the
/// datanodes still running never look DEAD) and waits until exactly `victims` are DEAD.
async fn kill(cluster: &MiniCluster, clock: &ManualClock, victims: &[String]) {
    let dead_only = |s: &[DatanodeStatus]| {
        s.iter().all(|d| {
            let victim = victims.iter().any(|v| d.details.uuid == v.as_str());
            (d.state == NodeState::Dead) == victim && (victim || d.state == NodeState::Healthy)
        })
    };
    clock.advance(Duration::from_secs(6));
    wait_statuses(cluster, |s| {
        s.iter()
            .filter(|d| !victims.iter().any(|v| d.details.uuid == v.as_str()))
            .all(|d| d.state == NodeState::Healthy)
    })
    .await;
    clock.advance(Duration::from_secs(5));
    wait_statuses(cluster, dead_only).await;
}

/// Test 1 of the repair issue, driven by the ReplicationManager alone: the datanode of index 2
/// dies; once its index is rebuilt, two more of the original five can stop and the key still
/// reads exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_datanodes_ec_indexes_are_rebuilt() {
    let clock = Arc::new(ManualClock::default());
    let (mut cluster, client) = cluster(6, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(2 * STRIPE + 1, 1);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let victim = node_of(&cluster, &info, 0, 2);
    let victim_uuid = cluster.datanodes()[victim].uuid().to_string();
    cluster.datanode_mut(victim).expect("dn").stop().await;
    kill(&cluster, &clock, std::slice::from_ref(&victim_uuid)).await;

    let s = wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0
    })
    .await;
    assert_eq!(s.unrecoverable, 0, "{s:?}");
    let repaired = client.key_info("b", "k").await.expect("info");
    let holders: Vec<_> = repaired.block_groups[0].pipeline.nodes_for(ri(2)).collect();
    assert_eq!(holders.len(), 1);
    assert_ne!(holders[0].uuid.as_str(), victim_uuid);

    // Test 6, the returning half: the dead datanode comes back holding its old copy of index 2.
    // No location names it, and the deletion log (written with the repair) removes the copy.
    cluster
        .datanode_mut(victim)
        .expect("dn")
        .restart()
        .await
        .expect("restart");
    let g = &repaired.block_groups[0];
    let old_copy = g.block_id(ri(2));
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_pending_deletions(|n| n == 0),
    )
    .await
    .expect("the stale copy's deletion is sent within 60 s")
    .expect("om alive");
    let store = cluster.datanodes()[victim].node().expect("running").store();
    assert!(store.get_block(old_copy).is_err(), "the stale copy is gone");
    let again = client.key_info("b", "k").await.expect("info");
    assert_eq!(
        again.block_groups, repaired.block_groups,
        "nothing moved back"
    );
    for r in [1, 3] {
        let n = node_of(&cluster, &repaired, 0, r);
        cluster.datanode_mut(n).expect("dn").stop().await;
    }
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// Test 4: a replicated THREE key that loses a replica is back to three copies, none on the
/// dead datanode, and reads from the new copy alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_key_gets_its_third_copy_back() {
    let clock = Arc::new(ManualClock::default());
    let (mut cluster, client) = cluster(4, &clock).await;
    replicated_bucket(&client, "r", 1 << 20).await;
    let src = data(3 * (1 << 20) / 2, 2);
    let info = client.put_key("r", "k", None, &src).await.expect("put");
    let g = &info.block_groups[0];
    let victim_uuid = g.pipeline.locations[0].datanode.uuid.to_string();
    let victim = cluster
        .datanode_by_uuid(&victim_uuid)
        .expect("holder")
        .index();
    cluster.datanode_mut(victim).expect("dn").stop().await;
    kill(&cluster, &clock, std::slice::from_ref(&victim_uuid)).await;

    wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0
    })
    .await;
    let repaired = client.key_info("r", "k").await.expect("info");
    for g in &repaired.block_groups {
        assert_eq!(g.pipeline.locations.len(), 3, "{g:?}");
        assert!(
            g.pipeline
                .locations
                .iter()
                .all(|l| l.datanode.uuid != victim_uuid.as_str())
        );
    }
    // Only the copy the ReplicationManager made is left running.
    let originals: Vec<String> = info.block_groups[0]
        .pipeline
        .locations
        .iter()
        .map(|l| l.datanode.uuid.to_string())
        .filter(|u| *u != victim_uuid)
        .collect();
    for u in originals {
        let n = cluster.datanode_by_uuid(&u).expect("holder").index();
        cluster.datanode_mut(n).expect("dn").stop().await;
    }
    assert!(read_all(&client, "r", "k").await == src);
    cluster.shutdown().await;
}

/// Test 6, the unrecoverable half: three of five indexes dead is reported unrecoverable, with
/// no further attempts while nothing changes; when one of the dead datanodes returns, the group
/// is repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecoverable_group_waits_for_a_datanode_to_return() {
    let clock = Arc::new(ManualClock::default());
    let (mut cluster, client) = cluster(6, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(2 * STRIPE, 3);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let mut victims = Vec::new();
    let mut uuids = Vec::new();
    for r in [1, 2, 4] {
        let n = node_of(&cluster, &info, 0, r);
        uuids.push(cluster.datanodes()[n].uuid().to_string());
        cluster.datanode_mut(n).expect("dn").stop().await;
        victims.push(n);
    }
    kill(&cluster, &clock, &uuids).await;
    let s = wait_repair(&cluster, |s| s.unrecoverable == 1 && s.in_flight == 0).await;
    let attempts = s.failed;
    // Several more passes: no new attempt while the live set is unchanged.
    let later = wait_repair(&cluster, |t| t.passes >= s.passes + 5).await;
    assert_eq!(later.failed, attempts, "{later:?}");
    assert_eq!(later.unrecoverable, 1);

    // Index 2's datanode returns: indexes 2, 3, 5 are sources again and index 1 is rebuilt on
    // the one datanode outside the group.
    cluster
        .datanode_mut(victims[1])
        .expect("dn")
        .restart()
        .await
        .expect("restart");
    let s = wait_repair(&cluster, |s| s.completed >= 1 && s.in_flight == 0).await;
    assert_eq!(s.unrecoverable, 0, "{s:?}");
    let repaired = client.key_info("b", "k").await.expect("info");
    let holder = repaired.block_groups[0]
        .pipeline
        .nodes_for(ri(1))
        .next()
        .expect("index 1")
        .uuid
        .to_string();
    assert!(
        !uuids.contains(&holder),
        "index 1 moved off the dead datanode"
    );
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// Test 5: decommissioning a datanode that holds replicas of 10 keys (EC and replicated) while
/// a reader reads them all over and over: no read fails, every replica it held is copied (not
/// rebuilt: no ReconstructEcGroup anywhere), and it ends DECOMMISSIONED holding no block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_datanode_is_emptied_while_reads_go_on() {
    let clock = Arc::new(ManualClock::default());
    let (cluster, client) = cluster(6, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    replicated_bucket(&client, "r", 1 << 20).await;
    let mut keys = Vec::new();
    for i in 0..10u64 {
        let bucket = if i % 3 == 2 { "r" } else { "b" };
        let src = data(STRIPE + 1000 * i + 1, 100 + i);
        client
            .put_key(bucket, &format!("k{i}"), None, &src)
            .await
            .expect("put");
        keys.push((bucket, format!("k{i}"), src));
    }
    let leaving = cluster.datanodes()[0].uuid().to_string();
    let leaving_id: proto_crate::DatanodeId = leaving.parse().expect("uuid");
    let held = |infos: &[ec_client::KeyInfo]| {
        infos
            .iter()
            .flat_map(|k| k.block_groups.iter())
            .flat_map(|g| g.pipeline.locations.iter())
            .filter(|l| l.datanode.uuid == leaving.as_str())
            .count()
    };
    let mut before = Vec::new();
    for (b, k, _) in &keys {
        before.push(client.key_info(b, k).await.expect("info"));
    }
    assert!(held(&before) > 0, "the datanode holds replicas");

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (client, keys, stop) = (client.clone(), keys.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut reads, mut failures) = (0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (b, k, src) in &keys {
                    let mut bytes = vec![0u8; src.len()];
                    let got = match client.open_key(b, k).await {
                        Ok(s) => s.read_exact_at(0, &mut bytes).await,
                        Err(e) => Err(e),
                    };
                    reads += 1;
                    match got {
                        Ok(()) if bytes[..] == src[..] => {}
                        Ok(_) => failures.push(format!("{b}/{k}: wrong bytes")),
                        Err(e) => failures.push(format!("{b}/{k}: {e}")),
                    }
                }
            }
            (reads, failures)
        })
    };

    assert_eq!(
        cluster
            .om()
            .decommission(&leaving_id)
            .await
            .expect("decommission"),
        om::OperationalState::Decommissioning
    );
    wait_repair(&cluster, |s| {
        s.in_flight == 0
            && cluster.om().operational_state(&leaving_id) == om::OperationalState::Decommissioned
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, failures) = reader.await.expect("reader");
    assert!(reads >= 10, "the reader ran ({reads} reads)");
    assert!(failures.is_empty(), "failed reads: {failures:?}");

    let mut after = Vec::new();
    for (b, k, src) in &keys {
        after.push(client.key_info(b, k).await.expect("info"));
        assert!(read_all(&client, b, k).await == *src);
    }
    assert_eq!(
        held(&after),
        0,
        "no key references the decommissioned datanode"
    );
    for g in after.iter().flat_map(|k| &k.block_groups) {
        let n = g.pipeline.locations.len();
        assert!(n == 5 || n == 3, "full redundancy: {g:?}");
    }
    let rebuilt: u64 = cluster
        .datanodes()
        .iter()
        .map(|d| d.metrics().rpcs(datanode::RpcKind::ReconstructEcGroup))
        .sum();
    assert_eq!(rebuilt, 0, "decommission copies, it does not rebuild");
    // New groups avoid it.
    let info = client
        .put_key("b", "new", None, &data(STRIPE, 9))
        .await
        .expect("put");
    assert_eq!(held(std::slice::from_ref(&info)), 0);
    // Its replaced copies are deleted.
    tokio::time::timeout(
        Duration::from_secs(60),
        cluster.om().wait_pending_deletions(|n| n == 0),
    )
    .await
    .expect("deletions sent within 60 s")
    .expect("om alive");
    let store = cluster.datanodes()[0].node().expect("running").store();
    assert_eq!(store.stats().blocks, 0, "it holds no block");
    cluster.shutdown().await;
}

/// A decommission with no spare datanode (five datanodes, groups five wide) cannot copy
/// anything: the status says the group waits for a target, and the datanode stays
/// DECOMMISSIONING (nothing is lost or moved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_without_a_spare_datanode_waits_for_a_target() {
    let clock = Arc::new(ManualClock::default());
    let (cluster, client) = cluster(5, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(STRIPE, 5);
    client.put_key("b", "k", None, &src).await.expect("put");
    let leaving: proto_crate::DatanodeId = cluster.datanodes()[0].uuid().parse().expect("uuid");
    cluster
        .om()
        .decommission(&leaving)
        .await
        .expect("decommission");
    let s = wait_repair(&cluster, |s| s.waiting_for_target == 1).await;
    assert_eq!(
        (s.under_replicated, s.in_flight, s.failed),
        (1, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        cluster.om().operational_state(&leaving),
        om::OperationalState::Decommissioning
    );
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// An idle cluster's passes stop reading every key once a scan found nothing to do (counted
/// exactly: `scans` stays while `passes` grows); a datanode turning DEAD brings the scan back
/// and its index is rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_does_not_rescan_every_key() {
    let clock = Arc::new(ManualClock::default());
    let (mut cluster, client) = cluster(6, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "k", None, &data(STRIPE, 4))
        .await
        .expect("put");
    // Every datanode's registration report is in (one arriving later would make a pass
    // scan again; the next reports come a minute after registration). Settled: a pass that
    // did not scan.
    let uuids: Vec<proto_crate::DatanodeId> = cluster
        .datanodes()
        .iter()
        .map(|d| d.uuid().parse().expect("uuid"))
        .collect();
    wait_first_reports(&cluster, &uuids).await;
    let mut last = cluster.om().repair_status();
    let settled = wait_repair(&cluster, move |s| {
        let skipped = s.passes > last.passes && s.scans == last.scans;
        if s.passes != last.passes {
            last = s.clone();
        }
        skipped
    })
    .await;
    let idle = wait_repair(&cluster, |s| s.passes >= settled.passes + 5).await;
    assert_eq!(idle.scans, settled.scans, "{idle:?}");
    assert_eq!(idle.under_replicated, 0);

    let victim = node_of(&cluster, &info, 0, 3);
    let victim_uuid = cluster.datanodes()[victim].uuid().to_string();
    cluster.datanode_mut(victim).expect("dn").stop().await;
    kill(&cluster, &clock, std::slice::from_ref(&victim_uuid)).await;
    let s = wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0
    })
    .await;
    assert!(s.scans > idle.scans, "{s:?}");
    cluster.shutdown().await;
}

/// A part of a multipart upload in progress is repaired like a key (an upload may stay open for
/// days): its index on a DEAD datanode is rebuilt into the part's record, and the key that
/// completing the upload makes carries the rebuilt location and reads exactly with two more of
/// the original datanodes stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_of_an_upload_in_progress_is_repaired() {
    let clock = Arc::new(ManualClock::default());
    let (mut cluster, client) = cluster(6, &clock).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(STRIPE + 7, 5);
    let up = client
        .initiate_multipart_upload("b", "m", None, Default::default())
        .await
        .expect("initiate");
    let mut w = client.upload_part(&up, 1).await.expect("part writer");
    w.write(&src).await.expect("write");
    let part = w.close_part("etag-1").await.expect("part");
    let g = &part.block_groups[0];
    let holder = g
        .pipeline
        .nodes_for(ri(2))
        .next()
        .expect("index 2")
        .uuid
        .clone();
    let victim = cluster
        .datanode_by_uuid(holder.as_str())
        .expect("dn")
        .index();
    cluster.datanode_mut(victim).expect("dn").stop().await;
    kill(&cluster, &clock, &[holder.to_string()]).await;

    wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0
    })
    .await;
    let listed = client.list_parts(&up).await.expect("upload").parts;
    let rebuilt: Vec<_> = listed[0].block_groups[0]
        .pipeline
        .nodes_for(ri(2))
        .collect();
    assert_eq!(rebuilt.len(), 1);
    assert_ne!(
        rebuilt[0].uuid, holder,
        "index 2 moved off the dead datanode"
    );

    let info = client
        .complete_multipart_upload(&up, &[(1, "etag-1".into())], 0, Default::default())
        .await
        .expect("complete");
    assert_eq!(info.block_groups, listed[0].block_groups);
    for r in [1, 3] {
        let n = node_of(&cluster, &info, 0, r);
        cluster.datanode_mut(n).expect("dn").stop().await;
    }
    assert!(read_all(&client, "b", "m").await == src);
    cluster.shutdown().await;
}
