//! Block reports, end to end: a datanode that stays alive but loses a block (its file removed
//! or cut short on disk) leaves the block out of its next report; the om checks with the
//! datanode, and the ReplicationManager rebuilds (EC) or copies (replicated) the block
//! elsewhere. A report taken before a block was written does not make the om repair it.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{
    STRIPE, data, ec_bucket, node_of, plant, read_all, replicated_bucket, ri, test_config,
    wait_first_reports, wait_repair,
};
use datanode::RpcKind;
use ec_client::Client;
use minicluster::{MiniCluster, MiniClusterConfig};
use om::NodeState;

/// `n` datanodes reporting their blocks every `reports`, an om service interval of 100 ms.
async fn cluster(n: usize, reports: Duration) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_datanodes(n)
            .with_block_report_interval(reports)
            .with_service_interval(Duration::from_millis(100))
            .with_deletion_grace(Duration::ZERO),
    )
    .await
    .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    (cluster, client)
}

/// The file of block (container id, local id) on datanode `n`.
fn block_file(cluster: &MiniCluster, n: usize, block: (u64, u64)) -> PathBuf {
    cluster.datanodes()[n]
        .data_dir()
        .join("containers")
        .join(block.0.to_string())
        .join(format!("{}.block", block.1))
}

fn all_healthy(cluster: &MiniCluster) -> bool {
    cluster
        .om()
        .datanode_statuses()
        .iter()
        .all(|s| s.state == NodeState::Healthy)
}

/// The datanode of index 2 keeps running but its block file disappears: the next report lacks
/// it, the om confirms with the datanode, index 2 is rebuilt on the spare datanode, and two
/// more of the original five can stop with the key still reading exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ec_index_lost_on_a_live_datanode_is_rebuilt() {
    let (mut cluster, client) = cluster(6, Duration::from_millis(200)).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(2 * STRIPE + 1, 7);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let g = &info.block_groups[0];
    let victim = node_of(&cluster, &info, 0, 2);
    let victim_uuid = cluster.datanodes()[victim].uuid().to_string();
    std::fs::remove_file(block_file(&cluster, victim, (g.container_id, g.local_id)))
        .expect("remove the block file");

    let s = wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0 && s.missing_replicas == 0
    })
    .await;
    assert_eq!(s.unrecoverable, 0, "{s:?}");
    assert!(s.checked_replicas >= 1, "{s:?}");
    assert!(
        all_healthy(&cluster),
        "nothing was DEAD: the loss came from the report"
    );
    let repaired = client.key_info("b", "k").await.expect("info");
    let holders: Vec<_> = repaired.block_groups[0].pipeline.nodes_for(ri(2)).collect();
    assert_eq!(holders.len(), 1);
    assert_ne!(holders[0].uuid.as_str(), victim_uuid);
    assert_eq!(
        repaired.block_groups[0].length, g.length,
        "the group is the same"
    );
    let store = cluster.datanodes()[victim].node().expect("running").store();
    assert!(store.get_block(g.block_id(ri(2))).is_err());
    for r in [1, 3] {
        let n = node_of(&cluster, &repaired, 0, r);
        cluster.datanode_mut(n).expect("dn").stop().await;
    }
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}

/// A replica of a THREE key cut short on disk: the datanode drops it at its next scan, and the
/// key is back to three full copies, none on that datanode; the new copy alone reads exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_short_on_disk_is_copied_again() {
    let (mut cluster, client) = cluster(4, Duration::from_millis(200)).await;
    replicated_bucket(&client, "r", 1 << 20).await;
    let src = data((1 << 20) / 2 + 3, 8);
    let info = client.put_key("r", "k", None, &src).await.expect("put");
    let g = &info.block_groups[0];
    let victim_uuid = g.pipeline.locations[0].datanode.uuid.to_string();
    let victim = cluster
        .datanode_by_uuid(&victim_uuid)
        .expect("holder")
        .index();
    std::fs::File::options()
        .write(true)
        .open(block_file(&cluster, victim, (g.container_id, g.local_id)))
        .and_then(|f| f.set_len(10))
        .expect("truncate the block file");

    wait_repair(&cluster, |s| {
        s.completed >= 1 && s.under_replicated == 0 && s.in_flight == 0 && s.missing_replicas == 0
    })
    .await;
    let repaired = client.key_info("r", "k").await.expect("info");
    let locations = &repaired.block_groups[0].pipeline.locations;
    assert_eq!(locations.len(), 3, "{locations:?}");
    assert!(
        locations
            .iter()
            .all(|l| l.datanode.uuid != victim_uuid.as_str())
    );
    for l in &g.pipeline.locations {
        let n = cluster
            .datanode_by_uuid(l.datanode.uuid.as_str())
            .expect("holder")
            .index();
        cluster.datanode_mut(n).expect("dn").stop().await;
    }
    assert!(read_all(&client, "r", "k").await == src);
    cluster.shutdown().await;
}

/// A report is a snapshot: one that lacks a block the datanode does hold (taken before the
/// block was written) makes the om ask the datanode once — exactly one GetBlock — and repair
/// nothing; later passes and full scans do not ask again until the datanode sends a newer
/// report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_older_than_a_block_does_not_trigger_a_repair() {
    // Reports every hour: only the one each datanode sends at registration arrives during the
    // test. (With reports every minute the second round could replace the registration
    // reports before a scan looked at them: the test then waited for checks that never came.)
    // A commit does not make the ReplicationManager scan — its keys were placed on healthy
    // datanodes (see the om's `Picture`) — so the checks come with the next full scan: every
    // 2 s here.
    let cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_datanodes(5)
            .with_block_report_interval(Duration::from_secs(3600))
            .with_service_interval(Duration::from_millis(100))
            .with_full_scan_interval(Duration::from_secs(2))
            .with_deletion_grace(Duration::ZERO),
    )
    .await
    .expect("minicluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "k", None, &data(STRIPE, 9))
        .await
        .expect("put");
    // Each datanode's first report (sent at registration) may predate the write: every
    // holder whose report lacks the block is checked once, and found to hold it.
    let g = &info.block_groups[0];
    let block = (g.container_id, g.local_id);
    let holders: Vec<_> = g
        .pipeline
        .locations
        .iter()
        .map(|l| l.datanode.uuid.clone())
        .collect();
    wait_first_reports(&cluster, &holders).await;
    let stale = holders
        .iter()
        .filter(|u| {
            cluster
                .om()
                .block_report(u)
                .is_some_and(|r| !r.contains(block))
        })
        .count() as u64;
    let before = wait_repair(&cluster, |s| s.checked_replicas == stale).await;

    let n = node_of(&cluster, &info, 0, 1);
    let dn = &cluster.datanodes()[n];
    let details = dn.node().expect("running").details().clone();
    let get_blocks = dn.metrics().rpcs(RpcKind::GetBlock);
    cluster
        .om()
        .record_block_report(&details, Vec::new())
        .expect("report");

    let s = wait_repair(&cluster, |s| {
        s.checked_replicas == before.checked_replicas + 1
    })
    .await;
    // Several more full scans: no repair, no further question.
    let scans = s.scans;
    let s = wait_repair(&cluster, |s| s.scans >= scans + 3).await;
    assert_eq!(s.missing_replicas, 0, "{s:?}");
    assert_eq!(s.under_replicated, 0, "{s:?}");
    assert_eq!(s.completed, before.completed, "{s:?}");
    assert_eq!(s.checked_replicas, before.checked_replicas + 1, "{s:?}");
    assert_eq!(dn.metrics().rpcs(RpcKind::GetBlock), get_blocks + 1);
    assert_eq!(
        client.key_info("b", "k").await.expect("info").block_groups,
        info.block_groups
    );
    cluster.shutdown().await;
}

/// Waits until `n` more block reports than `rx` has seen arrived and a pass ran after them.
async fn wait_reports(cluster: &MiniCluster, rx: &mut tokio::sync::watch::Receiver<u64>, n: u64) {
    let target = *rx.borrow_and_update() + n;
    tokio::time::timeout(Duration::from_secs(30), async {
        while *rx.borrow_and_update() < target {
            rx.changed().await.expect("om alive");
        }
    })
    .await
    .expect("block reports keep arriving");
    let passes = cluster.om().repair_status().passes;
    wait_repair(cluster, |s| s.passes >= passes + 2).await;
}

/// What an om crash between a repair's writes and its commit leaves — a committed replica no
/// record names — is deleted after two sweeps; a replica an open session wrote is not, nor is
/// any replica of a committed key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreferenced_replicas_are_deleted_but_not_an_open_sessions() {
    let (cluster, client) = cluster(5, Duration::from_millis(200)).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(STRIPE + 5, 10);
    let info = client.put_key("b", "k", None, &src).await.expect("put");

    let om = cluster.om();
    let open = om.open_key("b", "pending", None).await.expect("open");
    let g = om
        .allocate_block_group(open.session_id, &[])
        .await
        .expect("allocate");
    let first = &g.pipeline.locations[0];
    let pending = g.block_id(first.replica_index);
    let n = cluster
        .datanode_by_uuid(first.datanode.uuid.as_str())
        .expect("holder")
        .index();
    let store = cluster.datanodes()[n].node().expect("running").store();
    plant(store, pending, b"not committed yet").await;
    // A block id the om allocated (below its next id) that nothing references: local id 0
    // is never handed out, so nothing ever will.
    let orphan = proto_crate::BlockId {
        container_id: info.block_groups[0].container_id,
        local_id: 0,
        replica_index: Some(ri(1)),
    };
    // One the om never allocated (a restored om database would see such blocks): kept.
    let unknown = proto_crate::BlockId {
        container_id: info.block_groups[0].container_id,
        local_id: u64::MAX / 2,
        replica_index: Some(ri(1)),
    };
    // One in the om's last reserved batch of ids (below its id counter, which is the end of
    // the range, but not handed out here): an om whose records this one lacks may have
    // handed it out, so it is kept too.
    let recent = proto_crate::BlockId {
        container_id: info.block_groups[0].container_id,
        local_id: om::LOCAL_ID_BATCH,
        replica_index: Some(ri(1)),
    };
    plant(store, unknown, b"from a newer om").await;
    plant(store, recent, b"recent").await;
    plant(store, orphan, b"an orphan").await;

    let s = wait_repair(&cluster, |s| s.orphan_replicas >= 1).await;
    assert_eq!(s.orphan_replicas, 1, "{s:?}");
    tokio::time::timeout(
        Duration::from_secs(30),
        om.wait_pending_deletions(|n| n == 0),
    )
    .await
    .expect("the orphan's deletion is sent")
    .expect("om alive");
    assert!(store.get_block(orphan).is_err(), "the orphan is deleted");
    // More sweeps: nothing else is taken.
    let mut reports = om.watch_block_reports();
    wait_reports(&cluster, &mut reports, 3).await;
    assert_eq!(om.repair_status().orphan_replicas, 1);
    assert_eq!(store.get_block(pending).expect("kept").size, 17);
    assert_eq!(store.get_block(unknown).expect("kept").size, 15);
    assert_eq!(store.get_block(recent).expect("kept").size, 6);
    assert!(read_all(&client, "b", "k").await == src);
    cluster.shutdown().await;
}
