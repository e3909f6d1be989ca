//! The om's side of running for weeks, in-process: every change that frees
//! block groups logs each replica for deletion in the same transaction
//! (exact counts), open sessions expire after their lease and are bounded
//! per client, open writes survive a restart (their leases start again), and only HEALTHY
//! datanodes get new groups.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    if om.get_bucket("b").is_err() {
        om.create_bucket("b", Some(ReplicationConfig::default()), Some(1 << 20))
            .expect("bucket");
    }
    om
}

async fn om(dir: &std::path::Path) -> OzoneManager {
    om_with(dir, |c| c).await
}

fn pending(om: &OzoneManager) -> u64 {
    om.pending_deletions().expect("deletion log")
}

/// Opens `key`, allocates `groups` groups and commits the last one with
/// `len` bytes (the others are left behind, as after a failover).
fn put(om: &OzoneManager, key: &str, groups: usize, len: u64) -> Vec<BlockGroup> {
    let s = om.open_key("b", key, None).expect("open");
    let allocated: Vec<BlockGroup> = (0..groups)
        .map(|_| {
            om.allocate_block_group(s.session_id, &[])
                .expect("allocate")
        })
        .collect();
    let last = BlockGroup {
        length: len,
        ..allocated.last().expect("a group").clone()
    };
    om.commit_key(s.session_id, &[last], len, BTreeMap::new())
        .expect("commit");
    allocated
}

#[tokio::test]
async fn every_freeing_change_logs_each_replica_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    put(&om, "k", 1, 100);
    assert_eq!(pending(&om), 0, "a clean write frees nothing");
    put(&om, "k", 1, 100);
    assert_eq!(
        pending(&om),
        REPLICAS,
        "overwrite frees the old key's group"
    );
    put(&om, "k", 3, 100);
    assert_eq!(
        pending(&om),
        REPLICAS * 4,
        "the two groups left behind on failover, and the overwritten group"
    );
    om.delete_key("b", "k").expect("delete");
    assert_eq!(pending(&om), REPLICAS * 5, "delete frees the key's group");
    assert!(matches!(
        om.delete_key("b", "k"),
        Err(OmError::KeyNotFound { .. })
    ));
    assert_eq!(pending(&om), REPLICAS * 5, "a failed delete logs nothing");

    let s = om.open_key("b", "aborted", None).expect("open");
    om.allocate_block_group(s.session_id, &[])
        .expect("allocate");
    om.allocate_block_group(s.session_id, &[])
        .expect("allocate");
    om.abort_key(s.session_id).expect("abort");
    assert_eq!(
        pending(&om),
        REPLICAS * 7,
        "abort frees every allocated group"
    );

    // A commit refused for a bad length ends the session and frees its groups.
    let s = om.open_key("b", "bad", None).expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .expect("allocate");
    let refused = om.commit_key(
        s.session_id,
        &[BlockGroup { length: 10, ..g }],
        11,
        BTreeMap::new(),
    );
    assert!(matches!(refused, Err(OmError::InvalidArgument(_))));
    assert_eq!(pending(&om), REPLICAS * 8);
    assert_eq!(om.open_sessions(), 0);
}

#[tokio::test]
async fn multipart_frees_replaced_unlisted_and_aborted_parts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om(dir.path()).await;
    let part = |upload: &str, n: u32, etag: &str| {
        let s = om.open_part(upload, n).expect("open part");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .expect("allocate");
        om.commit_part(s.session_id, &[BlockGroup { length: 10, ..g }], 10, etag)
            .expect("commit part");
    };
    let up = om
        .initiate_multipart_upload("b", "mp", None, BTreeMap::new())
        .expect("initiate");
    part(&up, 1, "a");
    part(&up, 2, "b");
    part(&up, 3, "c");
    assert_eq!(pending(&om), 0);
    part(&up, 2, "b2");
    assert_eq!(pending(&om), REPLICAS, "a replaced part is freed");
    om.complete_multipart_upload(
        &up,
        &[(1, "a".into()), (2, "b2".into())],
        0,
        BTreeMap::new(),
    )
    .expect("complete");
    assert_eq!(pending(&om), REPLICAS * 2, "part 3, left out, is freed");
    assert_eq!(om.lookup_key("b", "mp").expect("key").block_groups.len(), 2);

    let up = om
        .initiate_multipart_upload("b", "mp2", None, BTreeMap::new())
        .expect("initiate");
    part(&up, 1, "x");
    part(&up, 2, "y");
    om.abort_multipart_upload(&up).expect("abort");
    assert_eq!(pending(&om), REPLICAS * 4, "abort frees every part");

    // Completing over an existing key frees that key's groups.
    let up = om
        .initiate_multipart_upload("b", "mp", None, BTreeMap::new())
        .expect("initiate");
    part(&up, 1, "z");
    om.complete_multipart_upload(&up, &[(1, "z".into())], 0, BTreeMap::new())
        .expect("complete");
    assert_eq!(pending(&om), REPLICAS * 6, "the two groups of the old mp");
}

#[tokio::test]
async fn sessions_expire_after_their_lease_and_are_bounded_per_client() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om_with(dir.path(), |c| {
        c.with_open_key_lease(Duration::from_secs(60))
            .with_max_sessions_per_client(2)
    })
    .await;
    let a = om.open_key_as("client-a", "b", "k1", None).expect("open");
    om.allocate_block_group(a.session_id, &[])
        .expect("allocate");
    om.open_key_as("client-a", "b", "k2", None).expect("open");
    let third = om.open_key_as("client-a", "b", "k3", None);
    assert!(
        matches!(third, Err(OmError::TooManyOpenSessions { ref client, limit: 2 }) if client == "client-a"),
        "{third:?}"
    );
    om.open_key_as("client-b", "b", "k3", None)
        .expect("another client has its own allowance");

    assert_eq!(om.expire_sessions(Instant::now()).expect("expire"), 0);
    let later = Instant::now() + Duration::from_secs(61);
    assert_eq!(om.expire_sessions(later).expect("expire"), 3);
    assert_eq!(om.open_sessions(), 0);
    assert_eq!(
        pending(&om),
        REPLICAS,
        "the expired session's group is freed"
    );
    assert!(matches!(
        om.commit_key(a.session_id, &[], 0, BTreeMap::new()),
        Err(OmError::NoSuchSession(_))
    ));
    om.open_key_as("client-a", "b", "k1", None)
        .expect("expired sessions no longer count");
}

#[tokio::test]
async fn a_renewed_session_outlives_its_lease() {
    let dir = tempfile::tempdir().expect("temp dir");
    let om = om_with(dir.path(), |c| {
        c.with_open_key_lease(Duration::from_secs(60))
    })
    .await;
    let s = om.open_key("b", "k", None).expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .expect("allocate");
    om.renew_key(s.session_id).expect("renew");
    let renewed_at = Instant::now();
    assert_eq!(
        om.expire_sessions(renewed_at + Duration::from_secs(59))
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
    .expect("the renewed session commits");
    assert!(matches!(
        om.renew_key(s.session_id),
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
        let s = om.open_key_as("writer-1", "b", "k", None).expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .expect("allocate");
        let upload = om
            .initiate_multipart_upload("b", "mpu", None, BTreeMap::new())
            .expect("initiate");
        let p = om.open_part(&upload, 3).expect("open part");
        put(om, "done", 1, 5);
        (s.session_id, g, p.session_id, upload)
    };
    let second = om(dir.path()).await;
    assert_eq!(pending(&second), 0, "nothing reclaimed");
    assert_eq!(second.open_sessions(), 2, "both writes are still open");
    let g2 = second
        .allocate_block_group(key_session, &[])
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
        .expect("and commits");
    assert_eq!(second.lookup_key("b", "k").expect("visible"), info);
    let pg = second
        .allocate_block_group(part_session, &[])
        .expect("the part writer too");
    second
        .commit_part(part_session, &[BlockGroup { length: 2, ..pg }], 2, "e3")
        .expect("part commits");
    let (u, _) = second.list_parts(&upload, 0, 10).expect("parts");
    assert_eq!(u.parts.len(), 1);
    assert_eq!(pending(&second), 0, "every group is referenced");
    assert_eq!(second.lookup_key("b", "done").expect("kept").length, 5);
    // A session ended before a restart stays ended.
    assert!(matches!(
        second.commit_key(key_session, &[], 0, BTreeMap::new()),
        Err(OmError::NoSuchSession(_))
    ));
    drop(second);
    let third = om(dir.path()).await;
    assert_eq!(third.open_sessions(), 0);
    assert_eq!(pending(&third), 0);
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
        let a = om.open_key_as("c", "b", "x", None).expect("open");
        om.allocate_block_group(a.session_id, &[])
            .expect("allocate");
        om.open_key_as("c", "b", "y", None).expect("open");
        clock.advance(lease - Duration::from_secs(1));
        a.session_id
    };
    let om = om_with(dir.path(), config).await;
    assert!(matches!(
        om.open_key_as("c", "b", "z", None),
        Err(OmError::TooManyOpenSessions { .. })
    ));
    let fresh = om.open_key("b", "k", None).expect("another client");
    assert_ne!(fresh.session_id, stale);
    // The lease runs from the restart, not from the first om's last allocation.
    clock.advance(Duration::from_secs(2));
    assert_eq!(om.expire_sessions(clock.now()).expect("expire"), 0);
    clock.advance(lease);
    assert_eq!(om.expire_sessions(clock.now()).expect("expire"), 3);
    assert_eq!(pending(&om), REPLICAS, "the one allocated group");
}

/// Rows of `table` (an om's own, read after it closed).
fn rows<K: redb::Key + 'static>(dir: &std::path::Path, table: &str) -> u64 {
    use redb::{ReadableDatabase, ReadableTableMetadata};
    let db = redb::Database::create(dir.join("om.redb")).expect("db");
    let read = db.begin_read().expect("read");
    read.open_table(redb::TableDefinition::<K, &[u8]>::new(table))
        .expect("table")
        .len()
        .expect("len")
}

/// A file of the old layout (the groups of open sessions as rows of `open_groups`) converts
/// at open: a session's groups move into its row, and it commits them after the restart;
/// groups of no session are staged for deletion; the table is dropped.
#[tokio::test]
async fn an_old_files_open_groups_move_into_their_sessions_at_open() {
    use prost::Message;
    use proto_crate::wire::om as pb;
    let open_sessions = redb::TableDefinition::<u64, &[u8]>::new("open_sessions");
    let open_groups = redb::TableDefinition::<(u64, u64, u64), &[u8]>::new("open_groups");
    let dir = tempfile::tempdir().expect("temp dir");
    let (kept, kept_groups) = {
        let om = om(dir.path()).await;
        let kept = om.open_key("b", "k", None).expect("open");
        let groups: Vec<BlockGroup> = (0..2)
            .map(|_| {
                om.allocate_block_group(kept.session_id, &[])
                    .expect("allocate")
            })
            .collect();
        let gone = om.open_key("b", "gone", None).expect("open");
        om.allocate_block_group(gone.session_id, &[])
            .expect("allocate");
        (kept.session_id, groups)
    };
    {
        // Rewrite into the old layout: session rows without their groups, a row per group.
        let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
        let txn = db.begin_write().expect("write");
        {
            let mut sessions = txn.open_table(open_sessions).expect("table");
            let mut groups = txn.open_table(open_groups).expect("table");
            let rows: Vec<(u64, pb::OpenSessionRecord)> = redb::ReadableTable::iter(&sessions)
                .expect("iter")
                .map(|e| {
                    let (k, v) = e.expect("row");
                    (
                        k.value(),
                        pb::OpenSessionRecord::decode(v.value()).expect("decode"),
                    )
                })
                .collect();
            assert_eq!(rows.len(), 2);
            for (id, mut row) in rows {
                for g in std::mem::take(&mut row.allocated) {
                    groups
                        .insert(
                            (id, g.container_id, g.local_id),
                            g.encode_to_vec().as_slice(),
                        )
                        .expect("group row");
                }
                if id == kept {
                    sessions
                        .insert(id, row.encode_to_vec().as_slice())
                        .expect("old row");
                } else {
                    sessions.remove(id).expect("no session");
                }
            }
        }
        txn.commit().expect("commit");
    }
    let om2 = om(dir.path()).await;
    assert_eq!(om2.open_sessions(), 1);
    assert_eq!(pending(&om2), REPLICAS, "the group of no session is staged");
    let committed: Vec<BlockGroup> = kept_groups
        .iter()
        .map(|g| BlockGroup {
            length: 3,
            ..g.clone()
        })
        .collect();
    om2.commit_key(kept, &committed, 6, BTreeMap::new())
        .expect("the resumed session commits its groups from the old rows");
    assert_eq!(om2.lookup_key("b", "k").expect("key").block_groups.len(), 2);
    drop(om2);
    let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
    let read = redb::ReadableDatabase::begin_read(&db).expect("read");
    assert!(
        read.open_table(open_groups).is_err(),
        "the old table is dropped"
    );
}

/// A session row that does not decode is given up (with a warning) instead of keeping the om
/// from starting; its groups are unknown, so they are left to the orphan sweep.
#[tokio::test]
async fn an_unreadable_session_row_is_given_up_at_open() {
    let open_sessions = redb::TableDefinition::<u64, &[u8]>::new("open_sessions");
    let dir = tempfile::tempdir().expect("temp dir");
    let id = {
        let om = om(dir.path()).await;
        let s = om.open_key("b", "k", None).expect("open");
        om.allocate_block_group(s.session_id, &[])
            .expect("allocate");
        s.session_id
    };
    {
        let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
        let txn = db.begin_write().expect("write");
        txn.open_table(open_sessions)
            .expect("table")
            .insert(id, [0xff_u8, 0xff, 0xff].as_slice())
            .expect("garble");
        txn.commit().expect("commit");
    }
    let om2 = om(dir.path()).await;
    assert_eq!(om2.open_sessions(), 0);
    assert!(matches!(
        om2.commit_key(id, &[], 0, BTreeMap::new()),
        Err(OmError::NoSuchSession(_))
    ));
    drop(om2);
    assert_eq!(rows::<u64>(dir.path(), "open_sessions"), 0);
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
        let s = om.open_key("b", "big", None).expect("open");
        let all: Vec<BlockGroup> = (0..groups)
            .map(|_| {
                om.allocate_block_group(s.session_id, &[])
                    .expect("allocate")
            })
            .collect();
        let committed: Vec<BlockGroup> = all
            .iter()
            .map(|g| BlockGroup {
                length: 1,
                ..g.clone()
            })
            .collect();
        om.commit_key(s.session_id, &committed, groups, BTreeMap::new())
            .expect("commit");
        all
    };
    assert_eq!(allocated.len() as u64, groups);
    om.delete_key("b", "big").expect("delete");
    assert_eq!(
        om.staged_deletions().expect("staged"),
        1,
        "one row for 60 groups"
    );
    assert_eq!(pending(&om), groups * REPLICAS, "counted before they move");
    let moved = om.expand_staged_deletions().expect("expand");
    assert_eq!(moved, groups * REPLICAS);
    assert_eq!(om.staged_deletions().expect("staged"), 0);
    assert_eq!(pending(&om), groups * REPLICAS, "and after");
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
    let s = om.open_key("b", "k", None).expect("open");
    match om.allocate_block_group(s.session_id, &[]) {
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
    om.create_bucket("mpb", None, None).expect("bucket");
    let up = om
        .initiate_multipart_upload("mpb", "k", None, BTreeMap::new())
        .expect("initiate");
    assert!(matches!(
        om.delete_bucket("mpb"),
        Err(OmError::BucketNotEmpty(_))
    ));
    om.abort_multipart_upload(&up).expect("abort");
    om.delete_bucket("mpb").expect("empty now");
    om.create_bucket("mpb", None, None).expect("created again");
    assert!(
        om.list_multipart_uploads("mpb", "", &om::UploadsMarker::default(), 1000)
            .expect("uploads")
            .0
            .is_empty(),
        "a bucket created again inherits nothing"
    );
    assert!(matches!(
        om.initiate_multipart_upload("gone", "k", None, BTreeMap::new()),
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
    let ids: Vec<u64> = (0..64)
        .map(|i| {
            om.open_key("b", &format!("k{i}"), None)
                .expect("open")
                .session_id
        })
        .collect();
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
