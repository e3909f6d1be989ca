//! Sessions' unit tests: ids, rows ended elsewhere, expiry in pieces, the record's bound.

use super::ids::CONTAINER_ID_BATCH;
use super::leases::EXPIRED_PER_TXN;
use super::*;
use crate::tables::COUNTERS;

async fn counter(om: &OzoneManager, name: &str) -> Option<u64> {
    COUNTERS
        .get(&om.store, &name.to_string())
        .await
        .expect("get")
        .map(|r| r.value)
}

/// A commit whose session's row another writer ended (another om expiring it, on a
/// shared store) fails and commits nothing: the groups are staged for deletion already.
/// Before the commit checked the row, the key was committed onto groups on their way to
/// deletion.
#[tokio::test]
async fn a_commit_whose_session_row_was_ended_elsewhere_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let om = crate::test_oms::with_five_datanodes(dir.path()).await;
    om.create_bucket("b", None, None).await.expect("bucket");
    let s = om.open_key("b", "k", None).await.expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    transact(&om.store, |tx| {
        Box::pin(async move {
            end_session(&tx, s.session_id, &[], &[]).await?;
            Ok::<(), OmError>(())
        })
    })
    .await
    .expect("ended elsewhere");
    let g = BlockGroup { length: 1, ..g };
    assert!(matches!(
        om.commit_key(s.session_id, &[g], 1, BTreeMap::new()).await,
        Err(OmError::NoSuchSession(_))
    ));
    assert!(matches!(
        om.lookup_key("b", "k").await,
        Err(OmError::KeyNotFound { .. })
    ));
    assert_eq!(
        om.pending_deletions().await.expect("pending"),
        5,
        "the group is staged once"
    );
}

/// A group the session's row holds but the caller's read of the session does not (its
/// allocation's transaction committed between a commit's or abort's read of the row and
/// its own transaction) is staged by the transaction that ends the session, once.
#[tokio::test]
async fn ending_a_session_frees_the_groups_its_row_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let om = crate::test_oms::with_five_datanodes(dir.path()).await;
    om.create_bucket("b", None, None).await.expect("bucket");
    for end in ["abort", "commit"] {
        let s = om.open_key("b", end, None).await.expect("open");
        let known = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let read = om.session(s.session_id).await.expect("open");
        om.allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let before = om.pending_deletions().await.expect("pending");
        let committed = match end {
            "abort" => Vec::new(),
            _ => vec![BlockGroup {
                length: 1,
                ..known.clone()
            }],
        };
        let leftovers: Vec<BlockGroup> = read
            .allocated
            .iter()
            .filter(|g| committed.iter().all(|c| c.local_id != g.local_id))
            .cloned()
            .collect();
        let ended = transact(&om.store, |tx| {
            let (leftovers, committed) = (&leftovers, &committed);
            Box::pin(async move { end_session(&tx, s.session_id, leftovers, committed).await })
        })
        .await
        .expect("end");
        assert!(ended.value, "{end}: the session was open");
        let freed = match end {
            "abort" => 2,
            _ => 1,
        };
        assert_eq!(
            om.pending_deletions().await.expect("pending") - before,
            freed * 5,
            "{end}: the row's group is staged too"
        );
    }
}

/// Ids come from reserved ranges: the counters are written once per batch, ids follow
/// one another within it, and a restarted om starts past everything reserved before.
#[tokio::test]
async fn ids_come_from_reserved_ranges_and_never_repeat_across_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first: Vec<BlockGroup> = {
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let s = om.open_key("b", "k", None).await.expect("open");
        let mut groups: Vec<BlockGroup> = Vec::new();
        for _ in 0..3 {
            groups.push(
                om.allocate_block_group(s.session_id, &[])
                    .await
                    .expect("allocate"),
            );
        }
        assert_eq!(
            counter(&om, "next_local_id").await,
            Some(1 + LOCAL_ID_BATCH)
        );
        assert_eq!(
            counter(&om, "next_container_id").await,
            Some(1 + CONTAINER_ID_BATCH)
        );
        groups
    };
    let locals: Vec<u64> = first.iter().map(|g| g.local_id).collect();
    assert_eq!(locals, [1, 2, 3]);
    let om = crate::test_oms::with_five_datanodes(dir.path()).await;
    let s = om.open_key("b", "k2", None).await.expect("open");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    assert_eq!(
        g.local_id,
        1 + LOCAL_ID_BATCH,
        "the rest of the first range is skipped"
    );
    assert_eq!(g.container_id, 1 + CONTAINER_ID_BATCH);
    assert_eq!(
        counter(&om, "next_local_id").await,
        Some(1 + 2 * LOCAL_ID_BATCH)
    );
}

/// An om on a fresh etcd member with five datanodes and bucket `b`.
async fn on_etcd(
    config: impl FnOnce(crate::OmConfig) -> crate::OmConfig,
) -> crate::test_oms::TestOm {
    let om = crate::test_oms::TestOm::start_with(crate::test_oms::Backend::Etcd, config).await;
    crate::test_oms::register_five(&om).await;
    om.create_bucket("b", None, None).await.expect("bucket");
    om
}

/// Bytes `group` takes in a session's record (with its field tag and length).
fn record_bytes(group: &BlockGroup) -> usize {
    prost::Message::encoded_len(&proto_crate::wire::om::BlockGroup::from(group.clone())) + 4
}

/// Sets session `id`'s groups to `n` copies of `group` with local ids from `first`,
/// written straight into its row.
async fn grow(om: &OzoneManager, id: u64, group: &BlockGroup, first: u64, n: u64) {
    transact(&om.store, |tx| {
        Box::pin(async move {
            let mut row = crate::session_rows::get_in(&tx, id)
                .await?
                .ok_or(OmError::NoSuchSession(id))?;
            row.allocated = (first..first + n)
                .map(|local_id| {
                    BlockGroup {
                        local_id,
                        ..group.clone()
                    }
                    .into()
                })
                .collect();
            crate::session_rows::put_in(&tx, id, &row);
            Ok::<(), OmError>(())
        })
    })
    .await
    .expect("grow the session");
}

/// Sessions whose staged rows together pass etcd's 1.5 MiB request limit are ended one
/// per transaction (regression: the pass failed at that chunk, every pass, and the
/// sessions after it in id order never expired).
#[tokio::test]
async fn sessions_too_large_to_expire_together_expire_one_at_a_time() {
    let lease = std::time::Duration::from_secs(60);
    let clock = std::sync::Arc::new(crate::ManualClock::default());
    let om = on_etcd(|c| {
        c.with_open_key_lease(lease)
            .with_clock(std::sync::Arc::clone(&clock) as std::sync::Arc<dyn crate::Clock>)
    })
    .await;
    let first = om.open_key("b", "template", None).await.expect("open");
    let group = om
        .allocate_block_group(first.session_id, &[])
        .await
        .expect("allocate");
    // 30 sessions of 300 groups each (about 90 KB a row): 25 of them are over 1.5 MiB.
    for i in 0..30u64 {
        let s = om
            .open_key("b", &format!("k{i}"), None)
            .await
            .expect("open");
        grow(&om, s.session_id, &group, 10_000_000 + i * 1000, 300).await;
    }
    let row = OPEN_SESSIONS
        .get(&om.store, &first.session_id)
        .await
        .expect("read")
        .expect("row");
    let last = OPEN_SESSIONS
        .scan(&om.store, &(), None, 100)
        .await
        .expect("scan")
        .rows
        .into_iter()
        .map(|r| r.value.0.len())
        .max()
        .expect("rows");
    assert!(
        row.value.0.len() < last && last * EXPIRED_PER_TXN > 3 * 1024 * 1024 / 2,
        "{last} bytes a session"
    );
    clock.advance(lease + std::time::Duration::from_secs(1));
    assert_eq!(
        om.expire_sessions(crate::Clock::wall(&*clock))
            .await
            .expect("expire"),
        31
    );
    assert_eq!(om.open_sessions().await.expect("count"), 0);
    assert_eq!(
        om.pending_deletions().await.expect("pending"),
        (30 * 300 + 1) * 5,
        "every group is staged, once"
    );
}

/// A session whose groups outgrow its bound (one etcd request, less room for its end):
/// the allocation that would pass it is refused as an invalid argument naming the way
/// out, not an internal error, and the session still commits what it has (regression:
/// a session grown to the request limit could be neither committed nor ended).
#[tokio::test]
async fn a_session_past_the_request_limit_is_refused_as_too_large() {
    let om = on_etcd(|c| c).await;
    let s = om.open_key("b", "big", None).await.expect("open");
    let group = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    // Groups up to near the bound, written straight into the row; allocations then take
    // it over.
    let fit = MAX_SESSION_ROW_BYTES / record_bytes(&group) - 64;
    grow(&om, s.session_id, &group, 10_000_000, fit as u64).await;
    let mut refused = Ok(group.clone());
    for _ in 0..200 {
        refused = om.allocate_block_group(s.session_id, &[]).await;
        if refused.is_err() {
            break;
        }
    }
    assert!(
        matches!(&refused, Err(OmError::InvalidArgument(m)) if m.contains("larger block size")),
        "{refused:?}"
    );
    assert_eq!(
        refused.map_err(|e| e.code()).err(),
        Some(proto_crate::OmErrorCode::InvalidArgument)
    );
    let first = BlockGroup {
        local_id: 10_000_000,
        length: 3,
        ..group
    };
    om.commit_key(s.session_id, &[first], 3, BTreeMap::new())
        .await
        .expect("the session commits what it has");
}

/// A key of a session's largest record overwritten by another as large: the commit, which
/// stages the old key's groups beside the new key's, fits one etcd request (regression: with
/// the bound at the request limit, the overwrite was refused and the written data reclaimed).
#[tokio::test]
async fn a_largest_key_overwritten_by_another_commits() {
    let om = on_etcd(|c| c).await;
    let mut written = 0;
    for round in 0..2u64 {
        let s = om.open_key("b", "big", None).await.expect("open");
        let group = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let n = (MAX_SESSION_ROW_BYTES / record_bytes(&group) - 16) as u64;
        let first = 10_000_000 + round * 1_000_000;
        grow(&om, s.session_id, &group, first, n).await;
        let groups: Vec<BlockGroup> = (first..first + n)
            .map(|local_id| BlockGroup {
                local_id,
                length: 1,
                ..group.clone()
            })
            .collect();
        let info = om
            .commit_key(s.session_id, &groups, n, BTreeMap::new())
            .await
            .expect("the commit fits");
        assert_eq!(info.block_groups.len() as u64, n);
        written = n;
    }
    assert_eq!(
        om.pending_deletions().await.expect("pending"),
        written * 5,
        "the first key's groups are staged"
    );
}
