//! A datanode given several oms (`--om a,b`) joins the cluster of the first
//! that takes it; an om of another cluster refuses it, and that om's block
//! tokens are not taken. Two real oms on loopback with security on, each
//! with its own store (so two clusters, whose block-token keys share ids but
//! not secrets), and five datanodes given both; EC keys round-trip. (Oms of
//! one cluster share a store: `om/src/cluster_id.rs` tests a datanode
//! reporting to two of them.)

use std::sync::Arc;
use std::time::Duration;

use block_stream::XceiverClientManager;
use datanode::{Datanode, DatanodeConfig};
use ec_client::{BucketOptions, Client, ClientConfig};
use om::{BlockTokenConfig, NodeState, OmConfig, OmServer, OzoneManager};
use proto_crate::KeyInfo;
use proto_crate::block_token::BlockToken;
use tokio::io::AsyncReadExt;

const STALE: Duration = Duration::from_millis(600);
const DEAD: Duration = Duration::from_millis(1200);
const HEARTBEAT: Duration = Duration::from_millis(100);

async fn om(dir: &std::path::Path) -> OmServer {
    let config = OmConfig::new(dir)
        .with_security(BlockTokenConfig::default())
        .with_liveness(STALE, DEAD);
    let om = OzoneManager::open(config).await.expect("om opens");
    OmServer::start("127.0.0.1:0".parse().expect("addr"), Arc::new(om))
        .await
        .expect("om serves")
}

async fn datanode(dir: &std::path::Path, oms: &str) -> Datanode {
    let config = DatanodeConfig::new("127.0.0.1:0".parse().expect("addr"), dir)
        .with_om(oms)
        .with_security(true)
        .with_heartbeat_interval(HEARTBEAT);
    Datanode::start(config).await.expect("datanode starts")
}

/// An address nothing listens on (bound, then released).
fn refused() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// Waits until `om` lists every one of `addresses` as HEALTHY.
async fn wait_healthy(om: &OmServer, addresses: &[String]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // Liveness changes only when a registration or heartbeat arrives.
    let mut heard = om.om().watch_heartbeats();
    loop {
        let statuses = om.om().datanode_statuses();
        let healthy = addresses.iter().all(|a| {
            statuses
                .iter()
                .any(|s| &s.details.address == a && s.state == NodeState::Healthy)
        });
        if healthy {
            return;
        }
        let next = tokio::time::timeout_at(deadline, heard.changed()).await;
        assert!(
            matches!(next, Ok(Ok(()))),
            "not every datanode is healthy on {}: {statuses:?}",
            om.address()
        );
    }
}

/// Waits until `om` has refused at least `n` calls of datanodes of another
/// cluster.
async fn wait_refusals(om: &OmServer, n: u64) {
    let mut refusals = om.om().watch_other_cluster_refusals();
    tokio::time::timeout(Duration::from_secs(10), refusals.wait_for(|r| *r >= n))
        .await
        .unwrap_or_else(|_| panic!("{} refused fewer than {n} calls in 10 s", om.address()))
        .expect("om alive");
}

/// Writes a key through the om at `om` and reads it back (block tokens
/// from that om, checked by the datanodes); returns what the om recorded.
async fn round_trip(om: &str, bucket: &str) -> KeyInfo {
    let client = Client::connect(om, ClientConfig::default())
        .await
        .expect("connect");
    client
        .create_bucket(bucket, BucketOptions::default())
        .await
        .expect("create bucket");
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    let info = client
        .put_key(bucket, "k", None, &data)
        .await
        .expect("put with this om's tokens");
    let mut back = Vec::new();
    client
        .open_key(bucket, "k")
        .await
        .expect("open")
        .read_to_end(&mut back)
        .await
        .expect("read with this om's tokens");
    assert!(back == data, "bytes read back through {om} differ");
    info
}

/// Reads the block record of every replica of `key` with `token`.
async fn read_records(key: &KeyInfo, token: &BlockToken) {
    for g in &key.block_groups {
        for l in &g.pipeline.locations {
            let address = &l.datanode.address;
            let raw = XceiverClientManager::direct(address)
                .expect("client")
                .with_fixed_token(Some(token));
            raw.get_block(g.block_id(l.replica_index))
                .await
                .unwrap_or_else(|e| panic!("{address} refused the token: {e}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datanodes_join_the_cluster_of_the_first_om_that_takes_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = om(&dir.path().join("a")).await;
    let b = om(&dir.path().join("b")).await;
    assert_ne!(a.om().cluster_id(), b.om().cluster_id(), "two stores");
    let list = format!("{},{}", a.address(), b.address());
    let mut datanodes = Vec::new();
    for i in 0..5 {
        datanodes.push(datanode(&dir.path().join(format!("dn{i}")), &list).await);
    }
    let addresses: Vec<String> = datanodes.iter().map(|d| d.address().to_string()).collect();
    wait_healthy(&a, &addresses).await;

    // They joined a's cluster: EC keys round-trip with a's block tokens,
    // b refuses them, and b's tokens (signed with a key of the same id,
    // but another secret) are not taken.
    let key = round_trip(&a.address().to_string(), "via-a").await;
    let token_of = |om: &OmServer| om.om().service_token().expect("mint").expect("security on");
    let (from_a, from_b) = (token_of(&a), token_of(&b));
    let id = |t: &BlockToken| t.identifier().expect("readable").key_id;
    assert_eq!(id(&from_a), id(&from_b), "both oms' first key has one id");
    read_records(&key, &from_a).await;
    // b has refused them (at least twice each) and recorded none.
    wait_refusals(&b, 10).await;
    assert!(
        b.om().datanode_statuses().is_empty(),
        "b took a's datanodes"
    );
    let g = &key.block_groups[0];
    let l = &g.pipeline.locations[0];
    let e = XceiverClientManager::direct(&l.datanode.address)
        .expect("client")
        .with_fixed_token(Some(&from_b))
        .get_block(g.block_id(l.replica_index))
        .await
        .expect_err("b's token");
    assert!(e.to_string().contains("signature"), "{e}");

    // A datanode whose first om is down joins the next one's cluster, and
    // the om after that (another cluster) refuses it.
    let refused_by_a = *a.om().watch_other_cluster_refusals().borrow();
    let late = datanode(
        &dir.path().join("late"),
        &format!("{},{},{}", refused(), b.address(), a.address()),
    )
    .await;
    wait_healthy(&b, &[late.address().to_string()]).await;
    wait_refusals(&a, refused_by_a + 2).await;
    let on_a = a.om().datanode_statuses();
    assert!(
        on_a.iter().all(|s| s.details.address != late.address()),
        "a took b's datanode: {on_a:?}"
    );

    // It belongs to b's cluster for good (`cluster.id` in its data dir):
    // restarted with a alone, a refuses it and it does not start.
    let late_uuid = late.details().uuid.clone();
    late.shutdown().await;
    let config = DatanodeConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        dir.path().join("late"),
    )
    .with_om(a.address().to_string())
    .with_security(true)
    .with_heartbeat_interval(HEARTBEAT);
    let e = Datanode::start(config)
        .await
        .expect_err("a is another cluster");
    assert!(
        matches!(e, datanode::DatanodeError::InvalidArgument(_))
            && e.to_string().contains(b.om().cluster_id()),
        "{e}"
    );
    let on_a = a.om().datanode_statuses();
    assert!(
        on_a.iter().all(|s| s.details.uuid != late_uuid),
        "a recorded the refused datanode: {on_a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_repeated_om_list_is_refused_before_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    for bad in [
        "127.0.0.1:1,127.0.0.1:1",
        "127.0.0.1:1,",
        "http://127.0.0.1:1",
    ] {
        let config =
            DatanodeConfig::new("127.0.0.1:0".parse().expect("addr"), dir.path()).with_om(bad);
        let e = Datanode::start(config).await.expect_err(bad);
        assert!(
            matches!(e, datanode::DatanodeError::InvalidArgument(_)),
            "{bad}: {e:?}"
        );
        assert!(e.to_string().contains("om address"), "{bad}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_id_that_cannot_be_recorded_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = om(&dir.path().join("a")).await;
    let b = om(&dir.path().join("b")).await;
    let dn_dir = dir.path().join("dn");
    // The cluster id's temporary file name taken by a directory.
    std::fs::create_dir_all(dn_dir.join("cluster.tmp")).expect("mkdir");
    let config = DatanodeConfig::new("127.0.0.1:0".parse().expect("addr"), &dn_dir)
        .with_om(format!("{},{}", a.address(), b.address()))
        .with_heartbeat_interval(HEARTBEAT);
    let e = Datanode::start(config)
        .await
        .expect_err("the id cannot be recorded");
    assert!(
        matches!(e, datanode::DatanodeError::Io { .. }),
        "a local failure, not a refusal: {e:?}"
    );
    // It did not go on to the next om, of another cluster.
    assert!(b.om().datanode_statuses().is_empty(), "b took it");
}
