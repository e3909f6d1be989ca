//! Shared set-up for the ec-client integration tests: a minicluster, a
//! deterministic data generator, and a bucket with small cells so that
//! every layout boundary is reachable with little data.

#![allow(dead_code)]

use ec_client::{
    BucketOptions, Client, ClientConfig, EcReplicationConfig, ReplicaIndex, ReplicationConfig,
};
use minicluster::{MiniCluster, MiniClusterConfig};

/// Cell size used by most tests: small, but larger than bytesPerChecksum
/// windows we set (1 KiB), so checksum widening is exercised.
pub const CELL: u64 = 4096;

/// rs-3-2 with [`CELL`]-byte cells.
pub fn rs32() -> EcReplicationConfig {
    format!("rs-3-2-{}k", CELL / 1024)
        .parse()
        .expect("valid config")
}

/// Stripe size of [`rs32`].
pub const STRIPE: u64 = 3 * CELL;

/// Deterministic bytes of `seed` (the minicluster's pattern, so that every
/// test and tool generates data one way).
pub fn data(len: u64, seed: u64) -> Vec<u8> {
    minicluster::pattern::bytes(seed, 0, usize::try_from(len).expect("test sizes fit usize"))
}

/// Client config for tests: 1 KiB bytesPerChecksum so windows are smaller than cells.
pub fn test_config() -> ClientConfig {
    ClientConfig::default().with_bytes_per_checksum(1024)
}

/// A five-datanode cluster and a client on it.
pub async fn cluster() -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster starts");
    let client = cluster
        .client_with(test_config())
        .await
        .expect("client connects");
    (cluster, client)
}

/// Creates `name` replicated THREE with `block_size`.
pub async fn replicated_bucket(client: &Client, name: &str, block_size: u64) {
    client
        .create_bucket(
            name,
            BucketOptions {
                replication: Some(ReplicationConfig::Replicated { factor: 3 }),
                block_size: Some(block_size),
                ..Default::default()
            },
        )
        .await
        .expect("bucket");
}

/// Creates `name` with rs-3-2-4k and `block_size`.
pub async fn ec_bucket(client: &Client, name: &str, block_size: u64) {
    client
        .create_bucket(
            name,
            BucketOptions {
                replication: Some(ReplicationConfig::Ec(rs32())),
                block_size: Some(block_size),
                ..Default::default()
            },
        )
        .await
        .expect("bucket created");
}

/// The ways a location can fail in the failure tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The datanode is stopped.
    Down,
    /// Every GetBlock/ReadChunk takes longer than the client's RPC deadline.
    Slow,
    /// ReadChunk answers carry flipped bytes (checksum mismatch).
    Corrupt,
    /// ReadChunk answers are empty.
    Zero,
    /// The datanode claims to hold another replica index.
    WrongIndex,
}

impl Failure {
    /// Every kind.
    pub const ALL: [Failure; 5] = [
        Failure::Down,
        Failure::Slow,
        Failure::Corrupt,
        Failure::Zero,
        Failure::WrongIndex,
    ];
}

/// RPC deadline used by failure tests: the `Slow` fault delays past it. Generous
/// enough that a healthy datanode never misses it while the whole suite runs
/// in parallel on two cores (a spurious timeout would count as a lost index).
pub const FAILURE_RPC_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Client config for failure tests: short deadline, no back-off.
pub fn failure_config() -> ClientConfig {
    test_config()
        .with_rpc_timeout(FAILURE_RPC_TIMEOUT)
        .with_location_retries(1, std::time::Duration::ZERO)
}

/// A cluster of `n` datanodes and a client with [`failure_config`].
pub async fn failure_cluster(n: usize) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_datanodes(n))
        .await
        .expect("minicluster starts");
    let client = cluster
        .client_with(failure_config())
        .await
        .expect("client connects");
    (cluster, client)
}

/// The replica index numbered `r` (1-based); tests name only real indexes.
pub fn ri(r: u32) -> ReplicaIndex {
    ReplicaIndex::new(r).expect("replica indexes start at 1")
}

/// Position in the cluster of the (first) datanode holding replica `r` of group `g`.
pub fn node_of(cluster: &MiniCluster, info: &ec_client::KeyInfo, g: usize, r: u32) -> usize {
    let uuid = &info.block_groups[g]
        .pipeline
        .nodes_for(ri(r))
        .next()
        .expect("location for index")
        .uuid;
    cluster
        .datanode_by_uuid(uuid)
        .expect("datanode in cluster")
        .index()
}

/// Makes datanode `n` fail in the way `f` says.
pub async fn fail(cluster: &mut MiniCluster, n: usize, f: Failure) {
    use datanode::{FaultKind, FaultRule, RpcKind};
    let dn = cluster.datanode_mut(n).expect("datanode");
    let rules: Vec<FaultRule> = match f {
        Failure::Down => {
            dn.stop().await;
            return;
        }
        Failure::Slow => [RpcKind::GetBlock, RpcKind::ReadChunk]
            .into_iter()
            .map(|r| FaultRule::new(r, FaultKind::Delay(FAILURE_RPC_TIMEOUT * 3)).expect("rule"))
            .collect(),
        Failure::Corrupt => {
            vec![FaultRule::new(RpcKind::ReadChunk, FaultKind::Corrupt).expect("rule")]
        }
        Failure::Zero => vec![FaultRule::new(RpcKind::ReadChunk, FaultKind::Zero).expect("rule")],
        Failure::WrongIndex => [RpcKind::GetBlock, RpcKind::ReadChunk]
            .into_iter()
            .map(|r| {
                FaultRule::new(
                    r,
                    FaultKind::Code(proto_crate::ResultCode::ReplicaIndexMismatch),
                )
                .expect("rule")
            })
            .collect(),
    };
    for r in rules {
        dn.inject(r);
    }
}

/// Undoes [`fail`] on datanode `n`.
pub async fn heal(cluster: &mut MiniCluster, n: usize) {
    let dn = cluster.datanode_mut(n).expect("datanode");
    dn.clear_faults();
    dn.restart().await.expect("restart");
}

/// Asserts that every internal block of every group of `info` (EC) has the
/// committed length ARCHITECTURE.md's layout formulas give, on each of its locations.
pub async fn check_stored_lengths(info: &ec_client::KeyInfo) {
    check_stored_lengths_after_losses(info, &[]).await;
}

/// As [`check_stored_lengths`], except that the blocks on the datanodes in
/// `lost` (restarted after they failed mid-write, before the group's close
/// made anything durable there) must be gone: a restart rolls back what a
/// per-stripe PutBlock only published, and the om's ReplicationManager
/// rebuilds such an index once the datanode reports it missing.
pub async fn check_stored_lengths_after_losses(
    info: &ec_client::KeyInfo,
    lost: &[proto_crate::DatanodeId],
) {
    let ReplicationConfig::Ec(ec) = info.replication else {
        panic!("not an EC key");
    };
    for g in &info.block_groups {
        let layout = ec_codec::BlockGroupLayout::new(ec, g.length);
        for loc in &g.pipeline.locations {
            let r = loc.replica_index.expect("an EC location has an index");
            let dn = block_stream::XceiverClientManager::direct(&loc.datanode.address)
                .expect("client")
                .with_fixed_token(g.token.as_ref());
            if lost.contains(&loc.datanode.uuid) {
                let gone = dn.get_committed_block_length(g.block_id(r)).await;
                assert!(
                    matches!(
                        gone,
                        Err(block_stream::BlockStreamError::Datanode {
                            code: proto_crate::ResultCode::NoSuchBlock,
                            ..
                        })
                    ),
                    "group {} index {r} on a datanode restarted mid-write: {gone:?} (expected NO_SUCH_BLOCK)",
                    g.local_id
                );
                continue;
            }
            let len = dn
                .get_committed_block_length(g.block_id(r))
                .await
                .unwrap_or_else(|e| panic!("group {} index {r}: {e}", g.local_id));
            assert_eq!(
                len,
                layout.internal_block_len(r).expect("index"),
                "group {} (length {}) index {r}",
                g.local_id,
                g.length
            );
        }
    }
}

/// Reads the whole key sequentially.
pub async fn read_all(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut s = client.open_key(bucket, key).await.expect("open");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    out
}

/// Uuid of a datanode that holds no block of the key's first group.
pub fn outside_datanode(cluster: &minicluster::MiniCluster, info: &ec_client::KeyInfo) -> String {
    let used: Vec<&str> = info.block_groups[0]
        .pipeline
        .locations
        .iter()
        .map(|l| l.datanode.uuid.as_str())
        .collect();
    cluster
        .datanodes()
        .iter()
        .find(|d| !used.contains(&d.uuid()))
        .expect("a datanode outside the group")
        .uuid()
        .to_string()
}

/// Waits (at most 60 s) until the om's view of its datanodes satisfies `pred`, re-checking
/// after each heartbeat the om receives.
pub async fn wait_statuses(cluster: &MiniCluster, pred: impl Fn(&[om::DatanodeStatus]) -> bool) {
    let mut beats = cluster.om().watch_heartbeats();
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while !pred(&cluster.om().datanode_statuses()) {
            beats.changed().await.expect("om alive");
        }
    })
    .await
    .expect("the om's view reaches the expected state within 60 s");
}

/// Commits `bytes` as block `b` directly in a datanode's store (as a writer would), in one
/// chunk without checksums, with block metadata `metadata`.
pub async fn plant_with(
    store: &datanode::ContainerStore,
    b: proto_crate::BlockId,
    bytes: impl Into<bytes::Bytes>,
    metadata: std::collections::BTreeMap<String, String>,
) {
    use proto_crate::{BlockData, ChecksumData, ChecksumType, ChunkInfo};
    let bytes: bytes::Bytes = bytes.into();
    let chunk = ChunkInfo {
        name: "c0".into(),
        offset: 0,
        len: bytes.len() as u64,
        checksum: ChecksumData {
            ty: ChecksumType::None,
            bytes_per_checksum: 0,
            checksums: vec![],
        },
    };
    store.write_chunk(b, &chunk, bytes).await.expect("write");
    store
        .put_block(
            BlockData {
                block_id: b,
                size: chunk.len,
                chunks: vec![chunk],
                metadata,
            },
            proto_crate::BlockCommit::Close,
        )
        .await
        .expect("put block");
}

/// [`plant_with`] without metadata.
pub async fn plant(
    store: &datanode::ContainerStore,
    b: proto_crate::BlockId,
    bytes: &'static [u8],
) {
    plant_with(store, b, bytes, std::collections::BTreeMap::new()).await;
}

/// Waits (on the om's report counter, no polling) until every datanode in `uuids` has sent
/// its first block report (each sends one at registration); panics after 30 s.
pub async fn wait_first_reports(cluster: &MiniCluster, uuids: &[proto_crate::DatanodeId]) {
    let mut reports = cluster.om().watch_block_reports();
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !uuids.iter().all(|u| cluster.om().block_report(u).is_some()) {
            reports.changed().await.expect("om alive");
        }
    })
    .await
    .expect("every datanode reports at registration");
}

/// Waits (on the om's pass counter, no polling) until the ReplicationManager's status
/// satisfies `pred`; panics after 60 s.
pub async fn wait_repair(
    cluster: &MiniCluster,
    mut pred: impl FnMut(&om::RepairStatus) -> bool,
) -> om::RepairStatus {
    let limit = std::time::Duration::from_secs(60);
    let mut passes = cluster.om().watch_repair_passes();
    tokio::time::timeout(limit, async {
        loop {
            let s = cluster.om().repair_status();
            if pred(&s) {
                return s;
            }
            passes.changed().await.expect("om alive");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the ReplicationManager did not reach the expected state within {limit:?}: {:?}",
            cluster.om().repair_status()
        )
    })
}
