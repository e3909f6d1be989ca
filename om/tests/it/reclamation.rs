//! The om's side of running for weeks, in-process: every change that frees
//! block groups logs each replica for deletion in the same transaction
//! (exact counts), open sessions expire after their lease and are bounded
//! per client, open writes survive a restart (their leases start again), and only HEALTHY
//! datanodes get new groups.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use om::{Clock, NodeState, NodeStats, OmConfig, OmError, OzoneManager};
use proto_crate::{BlockGroup, DatanodeDetails, ReplicationConfig};

/// Replicas per rs-3-2 group: one deletion-log entry each.
const REPLICAS: u64 = 5;

fn dn(i: usize) -> DatanodeDetails {
    DatanodeDetails {
        uuid: proto_crate::DatanodeId::from_u128(i as u128),
        address: format!("127.0.0.1:{}", 40_000 + i),
    }
}

async fn om_with(dir: &std::path::Path, config: impl FnOnce(OmConfig) -> OmConfig) -> OzoneManager {
    let om = OzoneManager::open(config(OmConfig::new(dir)))
        .await
        .expect("om opens");
    for i in 0..5 {
        om.register_datanode(dn(i)).await.expect("register");
    }
    if om.get_bucket("b").await.is_err() {
        om.create_bucket("b", Some(ReplicationConfig::default()), Some(1 << 20))
            .await
            .expect("bucket");
    }
    om
}

async fn om(dir: &std::path::Path) -> OzoneManager {
    om_with(dir, |c| c).await
}

async fn pending(om: &OzoneManager) -> u64 {
    om.pending_deletions().await.expect("deletion log")
}

/// Opens `key`, allocates `groups` groups and commits the last one with
/// `len` bytes (the others are left behind, as after a failover).
async fn put(om: &OzoneManager, key: &str, groups: usize, len: u64) -> Vec<BlockGroup> {
    let s = om.open_key("b", key, None).await.expect("open");
    let mut allocated: Vec<BlockGroup> = Vec::new();
    for _ in 0..groups {
        allocated.push(
            om.allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate"),
        );
    }
    let last = BlockGroup {
        length: len,
        ..allocated.last().expect("a group").clone()
    };
    om.commit_key(s.session_id, &[last], len, BTreeMap::new())
        .await
        .expect("commit");
    allocated
}

#[tokio::test]
async fn every_freeing_change_logs_each_replica_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    put(&om, "k", 1, 100).await;
    assert_eq!(pending(&om).await, 0, "a clean write frees nothing");
    put(&om, "k", 1, 100).await;
    assert_eq!(
        pending(&om).await,
        REPLICAS,
        "overwrite frees the old key's group"
    );
    put(&om, "k", 3, 100).await;
    assert_eq!(
        pending(&om).await,
        REPLICAS * 4,
        "the two groups left behind on failover, and the overwritten group"
    );
    om.delete_key("b", "k").await.expect("delete");
    assert_eq!(
        pending(&om).await,
        REPLICAS * 5,
        "delete frees the key's group"
    );
    assert!(matches!(
        om.delete_key("b", "k").await,
        Err(OmError::KeyNotFound { .. })
    ));
    assert_eq!(
        pending(&om).await,
        REPLICAS * 5,
        "a failed delete logs nothing"
    );

    let s = om.open_key("b", "aborted", None).await.expect("open");
    om.allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    om.allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    om.abort_key(s.session_id).await.expect("abort");
    assert_eq!(
        pending(&om).await,
        REPLICAS * 7,
        "abort frees every allocated group"
    );

    // A commit refused for a bad length ends the session and frees its groups.
    let s = om.open_key("b", "bad", None).await.expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    let refused = om
        .commit_key(
            s.session_id,
            &[BlockGroup { length: 10, ..g }],
            11,
            BTreeMap::new(),
        )
        .await;
    assert!(matches!(refused, Err(OmError::InvalidArgument(_))));
    assert_eq!(pending(&om).await, REPLICAS * 8);
    assert_eq!(om.open_sessions().await.expect("count"), 0);
}

#[tokio::test]
async fn multipart_frees_replaced_unlisted_and_aborted_parts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    let part = async |upload: &str, n: u32, etag: &str| {
        let s = om.open_part(upload, n).await.expect("open part");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        om.commit_part(s.session_id, &[BlockGroup { length: 10, ..g }], 10, etag)
            .await
            .expect("commit part");
    };
    let up = om
        .initiate_multipart_upload("b", "mp", None, BTreeMap::new())
        .await
        .expect("initiate");
    part(&up, 1, "a").await;
    part(&up, 2, "b").await;
    part(&up, 3, "c").await;
    assert_eq!(pending(&om).await, 0);
    part(&up, 2, "b2").await;
    assert_eq!(pending(&om).await, REPLICAS, "a replaced part is freed");
    om.complete_multipart_upload(
        &up,
        &[(1, "a".into()), (2, "b2".into())],
        0,
        BTreeMap::new(),
    )
    .await
    .expect("complete");
    assert_eq!(
        pending(&om).await,
        REPLICAS * 2,
        "part 3, left out, is freed"
    );
    assert_eq!(
        om.lookup_key("b", "mp")
            .await
            .expect("key")
            .block_groups
            .len(),
        2
    );

    let up = om
        .initiate_multipart_upload("b", "mp2", None, BTreeMap::new())
        .await
        .expect("initiate");
    part(&up, 1, "x").await;
    part(&up, 2, "y").await;
    om.abort_multipart_upload(&up).await.expect("abort");
    assert_eq!(pending(&om).await, REPLICAS * 4, "abort frees every part");

    // Completing over an existing key frees that key's groups.
    let up = om
        .initiate_multipart_upload("b", "mp", None, BTreeMap::new())
        .await
        .expect("initiate");
    part(&up, 1, "z").await;
    om.complete_multipart_upload(&up, &[(1, "z".into())], 0, BTreeMap::new())
        .await
        .expect("complete");
    assert_eq!(
        pending(&om).await,
        REPLICAS * 6,
        "the two groups of the old mp"
    );
}

#[tokio::test]
async fn sessions_expire_after_their_lease_and_are_bounded_per_client() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om_with(dir.path(), |c| {
        c.with_open_key_lease(Duration::from_secs(60))
            .with_max_sessions_per_client(2)
    })
    .await;
    let a = om
        .open_key_as("client-a", "b", "k1", None)
        .await
        .expect("open");
    om.allocate_block_group(a.session_id, &[])
        .await
        .expect("allocate");
    om.open_key_as("client-a", "b", "k2", None)
        .await
        .expect("open");
    let third = om.open_key_as("client-a", "b", "k3", None).await;
    assert!(
        matches!(third, Err(OmError::TooManyOpenSessions { ref client, limit: 2 }) if client == "client-a"),
        "{third:?}"
    );
    om.open_key_as("client-b", "b", "k3", None)
        .await
        .expect("another client has its own allowance");

    assert_eq!(
        om.expire_sessions(SystemTime::now()).await.expect("expire"),
        0
    );
    let later = SystemTime::now() + Duration::from_secs(61);
    assert_eq!(om.expire_sessions(later).await.expect("expire"), 3);
    assert_eq!(om.open_sessions().await.expect("count"), 0);
    assert_eq!(
        pending(&om).await,
        REPLICAS,
        "the expired session's group is freed"
    );
    assert!(matches!(
        om.commit_key(a.session_id, &[], 0, BTreeMap::new()).await,
        Err(OmError::NoSuchSession(_))
    ));
    om.open_key_as("client-a", "b", "k1", None)
        .await
        .expect("expired sessions no longer count");
}

#[tokio::test]
async fn a_renewed_session_outlives_its_lease() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om_with(dir.path(), |c| {
        c.with_open_key_lease(Duration::from_secs(60))
    })
    .await;
    let s = om.open_key("b", "k", None).await.expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    om.renew_key(s.session_id).await.expect("renew");
    let renewed_at = SystemTime::now();
    assert_eq!(
        om.expire_sessions(renewed_at + Duration::from_secs(59))
            .await
            .expect("expire"),
        0,
        "within the renewed lease"
    );
    om.commit_key(
        s.session_id,
        &[BlockGroup { length: 9, ..g }],
        9,
        BTreeMap::new(),
    )
    .await
    .expect("the renewed session commits");
    assert!(matches!(
        om.renew_key(s.session_id).await,
        Err(OmError::NoSuchSession(_))
    ));
}

/// Regression: a write in progress was lost to an om restart (its session lived in
/// memory only; the restart logged its groups for deletion and its commit answered
/// NoSuchSession). Sessions are rows now: after a restart the writer allocates and commits
/// under the same session id, the part session of an upload too, and nothing is logged.
#[tokio::test]
async fn open_writes_survive_a_restart_and_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (key_session, first_group, part_session, upload) = {
        let first = om(dir.path()).await;
        let om = &first;
        let s = om
            .open_key_as("writer-1", "b", "k", None)
            .await
            .expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let upload = om
            .initiate_multipart_upload("b", "mpu", None, BTreeMap::new())
            .await
            .expect("initiate");
        let p = om.open_part(&upload, 3).await.expect("open part");
        put(om, "done", 1, 5).await;
        (s.session_id, g, p.session_id, upload)
    };
    let second = om(dir.path()).await;
    assert_eq!(pending(&second).await, 0, "nothing reclaimed");
    assert_eq!(
        second.open_sessions().await.expect("count"),
        2,
        "both writes are still open"
    );
    let g2 = second
        .allocate_block_group(key_session, &[])
        .await
        .expect("the writer goes on allocating");
    let info = second
        .commit_key(
            key_session,
            &[
                BlockGroup {
                    length: 4,
                    ..first_group
                },
                BlockGroup { length: 3, ..g2 },
            ],
            7,
            BTreeMap::new(),
        )
        .await
        .expect("and commits");
    assert_eq!(second.lookup_key("b", "k").await.expect("visible"), info);
    let pg = second
        .allocate_block_group(part_session, &[])
        .await
        .expect("the part writer too");
    second
        .commit_part(part_session, &[BlockGroup { length: 2, ..pg }], 2, "e3")
        .await
        .expect("part commits");
    let (u, _) = second.list_parts(&upload, 0, 10).await.expect("parts");
    assert_eq!(u.parts.len(), 1);
    assert_eq!(pending(&second).await, 0, "every group is referenced");
    assert_eq!(
        second.lookup_key("b", "done").await.expect("kept").length,
        5
    );
    // A session ended before a restart stays ended.
    assert!(matches!(
        second
            .commit_key(key_session, &[], 0, BTreeMap::new())
            .await,
        Err(OmError::NoSuchSession(_))
    ));
    drop(second);
    let third = om(dir.path()).await;
    assert_eq!(third.open_sessions().await.expect("count"), 0);
    assert_eq!(pending(&third).await, 0);
}

/// A resumed session counts against its client's bound and expires one lease after the
/// restart, its groups logged; session ids never repeat across restarts.
#[tokio::test]
async fn resumed_sessions_keep_their_bounds_and_expire_from_the_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lease = Duration::from_secs(60);
    let clock = std::sync::Arc::new(om::ManualClock::default());
    let config = |c: OmConfig| {
        c.with_open_key_lease(lease)
            .with_max_sessions_per_client(2)
            .with_clock(clock.clone())
    };
    let stale = {
        let om = om_with(dir.path(), config).await;
        let a = om.open_key_as("c", "b", "x", None).await.expect("open");
        om.allocate_block_group(a.session_id, &[])
            .await
            .expect("allocate");
        om.open_key_as("c", "b", "y", None).await.expect("open");
        clock.advance(lease - Duration::from_secs(1));
        a.session_id
    };
    let om = om_with(dir.path(), config).await;
    assert!(matches!(
        om.open_key_as("c", "b", "z", None).await,
        Err(OmError::TooManyOpenSessions { .. })
    ));
    let fresh = om.open_key("b", "k", None).await.expect("another client");
    assert_ne!(fresh.session_id, stale);
    // The lease runs from the restart, not from the first om's last allocation.
    clock.advance(Duration::from_secs(2));
    assert_eq!(om.expire_sessions(clock.wall()).await.expect("expire"), 0);
    clock.advance(lease);
    assert_eq!(om.expire_sessions(clock.wall()).await.expect("expire"), 3);
    assert_eq!(pending(&om).await, REPLICAS, "the one allocated group");
}

/// Freeing groups writes one staged row whatever their number, so every om transaction stays
/// within the metadata store's bound of operations; the deleting service then moves them into
/// the per-replica log at most `TXN_BATCH` replicas per transaction.
#[tokio::test]
async fn freeing_many_groups_stages_one_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    let groups = 60u64;
    let allocated = {
        let s = om.open_key("b", "big", None).await.expect("open");
        let mut all: Vec<BlockGroup> = Vec::new();
        for _ in 0..groups {
            all.push(
                om.allocate_block_group(s.session_id, &[])
                    .await
                    .expect("allocate"),
            );
        }
        let committed: Vec<BlockGroup> = all
            .iter()
            .map(|g| BlockGroup {
                length: 1,
                ..g.clone()
            })
            .collect();
        om.commit_key(s.session_id, &committed, groups, BTreeMap::new())
            .await
            .expect("commit");
        all
    };
    assert_eq!(allocated.len() as u64, groups);
    om.delete_key("b", "big").await.expect("delete");
    assert_eq!(
        om.staged_deletions().await.expect("staged"),
        1,
        "one row for 60 groups"
    );
    assert_eq!(
        pending(&om).await,
        groups * REPLICAS,
        "counted before they move"
    );
    let moved = om.expand_staged_deletions().await.expect("expand");
    assert_eq!(moved, groups * REPLICAS);
    assert_eq!(om.staged_deletions().await.expect("staged"), 0);
    assert_eq!(pending(&om).await, groups * REPLICAS, "and after");
}

#[tokio::test]
async fn a_second_om_on_a_data_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let _first = om(dir.path()).await;
    let second = OzoneManager::open(OmConfig::new(dir.path())).await;
    match second {
        Err(OmError::DataDirInUse(msg)) => {
            assert!(
                msg.contains(&format!("pid {} (om)", std::process::id())),
                "{msg}"
            );
        }
        other => panic!("expected DataDirInUse, got {other:?}"),
    }
}

#[tokio::test]
async fn only_healthy_datanodes_get_new_groups() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stale = Duration::from_secs(30);
    let clock = std::sync::Arc::new(om::ManualClock::default());
    let om = om_with(dir.path(), |c| {
        c.with_liveness(stale, stale * 3).with_clock(clock.clone())
    })
    .await;
    clock.advance(stale + Duration::from_secs(1));
    // Four of five speak up again.
    for i in 0..4 {
        om.heartbeat(&dn(i), NodeStats::default())
            .await
            .expect("heartbeat");
    }
    let states: Vec<NodeState> = om.datanode_statuses().iter().map(|s| s.state).collect();
    assert_eq!(
        states.iter().filter(|s| **s == NodeState::Healthy).count(),
        4
    );
    let s = om.open_key("b", "k", None).await.expect("open");
    match om.allocate_block_group(s.session_id, &[]).await {
        Err(e @ OmError::NotEnoughDatanodes { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("4 of 5 registered datanodes are healthy"),
                "{msg}"
            );
        }
        other => panic!("expected NotEnoughDatanodes, got {other:?}"),
    }
    om.heartbeat(
        &dn(4),
        NodeStats {
            used_bytes: 7,
            blocks: 1,
            ..NodeStats::default()
        },
    )
    .await
    .expect("heartbeat");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("all five healthy");
    assert_eq!(g.pipeline.locations.len(), 5);
    let st = om
        .datanode_statuses()
        .into_iter()
        .find(|s| s.details == dn(4))
        .expect("listed");
    assert_eq!((st.stats.used_bytes, st.stats.blocks), (7, 1));
}

#[tokio::test]
async fn a_new_id_at_a_known_address_replaces_the_old_entry_durably() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let om = om(dir.path()).await;
        let wiped = DatanodeDetails {
            uuid: "ffffffff-0000-0000-0000-000000000000"
                .parse()
                .expect("a UUID"),
            address: dn(2).address,
        };
        om.register_datanode(wiped.clone()).await.expect("register");
        let all = om.datanodes();
        assert_eq!(all.len(), 5, "never two entries for one address");
        assert!(all.contains(&wiped));
        assert!(!all.contains(&dn(2)));
    }
    let om = OzoneManager::open(OmConfig::new(dir.path()))
        .await
        .expect("reopen");
    assert_eq!(om.datanodes().len(), 5, "the replacement was persisted");
    assert!(!om.datanodes().contains(&dn(2)));
}

#[tokio::test]
async fn a_bucket_with_an_upload_in_progress_is_not_empty() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    om.create_bucket("mpb", None, None).await.expect("bucket");
    let up = om
        .initiate_multipart_upload("mpb", "k", None, BTreeMap::new())
        .await
        .expect("initiate");
    assert!(matches!(
        om.delete_bucket("mpb").await,
        Err(OmError::BucketNotEmpty(_))
    ));
    om.abort_multipart_upload(&up).await.expect("abort");
    om.delete_bucket("mpb").await.expect("empty now");
    om.create_bucket("mpb", None, None)
        .await
        .expect("created again");
    assert!(
        om.list_multipart_uploads("mpb", "", &om::UploadsMarker::default(), 1000)
            .await
            .expect("uploads")
            .0
            .is_empty(),
        "a bucket created again inherits nothing"
    );
    assert!(matches!(
        om.initiate_multipart_upload("gone", "k", None, BTreeMap::new())
            .await,
        Err(OmError::BucketNotFound(_))
    ));
}

/// A session id says nothing of the next one: of 64 sessions opened in a
/// row, none is within 2^32 of the one before (ids were a counter, so a
/// client could commit into or abort the next writer's session by adding
/// one), and none is 0.
#[tokio::test]
async fn session_ids_are_not_guessable_from_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let om = om_with(dir.path(), |c| c.with_max_sessions_per_client(100)).await;
    let mut ids: Vec<u64> = Vec::new();
    for i in 0..64 {
        ids.push(
            om.open_key("b", &format!("k{i}"), None)
                .await
                .expect("open")
                .session_id,
        );
    }
    assert!(ids.iter().all(|&id| id != 0));
    for w in ids.windows(2) {
        assert!(
            w[0].abs_diff(w[1]) >= 1 << 32,
            "consecutive session ids {} and {}",
            w[0],
            w[1]
        );
    }
}
