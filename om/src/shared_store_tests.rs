//! Two oms serving one etcd store at once (issue 18): a session opened through one is served
//! by the other, its lease and its client's bound are the store's, and of two oms racing to
//! commit the same session, to write the same key conditionally or to complete the same
//! multipart upload, exactly one wins. Each om has its own data directory and memory; all
//! they share is the store, as two om processes do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proto_crate::{BlockGroup, WriteCondition};

use crate::test_oms::{Backend, Kept, TestOm};
use crate::{Clock, ManualClock, OmConfig, OmError, OzoneManager};

/// Replicas of one rs-3-2 group.
const REPLICAS: u64 = 5;

/// Two oms on one fresh etcd member, each with five datanodes registered and `config`
/// applied, and bucket `b`.
async fn two_oms(
    config: impl Fn(OmConfig) -> OmConfig,
) -> (Arc<OzoneManager>, Arc<OzoneManager>, Kept) {
    let first = TestOm::start_with(Backend::Etcd, &config).await;
    let second = first.another(&config).await;
    crate::test_oms::register_five(&first).await;
    crate::test_oms::register_five(&second).await;
    first.create_bucket("b", None, None).await.expect("bucket");
    let (a, kept) = first.split();
    (Arc::new(a), Arc::new(second), kept)
}

#[tokio::test]
async fn a_session_opened_on_one_om_is_written_and_committed_through_another() {
    let (a, b, _kept) = two_oms(|c| c).await;
    let s = a.open_key("b", "k", None).await.expect("open on a");
    let g1 = a
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate on a");
    // The writer's om dies; it goes on through the other.
    let g2 = b
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate on b");
    b.renew_key(s.session_id).await.expect("renew on b");
    assert_eq!(a.open_sessions().await.expect("count"), 1);
    assert_eq!(b.open_sessions().await.expect("count"), 1);
    let info = b
        .commit_key(
            s.session_id,
            &[
                BlockGroup { length: 4, ..g1 },
                BlockGroup { length: 3, ..g2 },
            ],
            7,
            BTreeMap::new(),
        )
        .await
        .expect("commit on b, with a group a allocated");
    assert_eq!(a.lookup_key("b", "k").await.expect("visible on a"), info);
    assert!(matches!(
        a.commit_key(s.session_id, &[], 0, BTreeMap::new()).await,
        Err(OmError::NoSuchSession(_))
    ));
    assert!(matches!(
        a.renew_key(s.session_id).await,
        Err(OmError::NoSuchSession(_))
    ));
    assert_eq!(a.open_sessions().await.expect("count"), 0);
    assert_eq!(b.pending_deletions().await.expect("pending"), 0);
}

#[tokio::test]
async fn two_oms_committing_one_session_at_once_commit_it_once() {
    let (a, b, _kept) = two_oms(|c| c).await;
    for round in 0..5 {
        let key = format!("k{round}");
        let s = a.open_key("b", &key, None).await.expect("open");
        let g = a
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let other = b
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        // Each commits a different group: the one that loses must not free the winner's.
        let commit = |om: Arc<OzoneManager>, g: BlockGroup, len: u64| async move {
            om.commit_key(
                s.session_id,
                &[BlockGroup { length: len, ..g }],
                len,
                BTreeMap::new(),
            )
            .await
        };
        let (x, y) = tokio::join!(
            tokio::spawn(commit(Arc::clone(&a), g, 5)),
            tokio::spawn(commit(Arc::clone(&b), other, 6)),
        );
        let outcomes = [x.expect("task"), y.expect("task")];
        let won: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, Err(OmError::NoSuchSession(_)))),
            "round {round}: {outcomes:?}"
        );
        let stored = b.lookup_key("b", &key).await.expect("committed");
        assert_eq!(&&stored, won.first().expect("one"));
        // The group the winner did not commit is freed, once.
        assert_eq!(
            a.pending_deletions().await.expect("pending"),
            REPLICAS * (round + 1),
            "round {round}"
        );
    }
    assert_eq!(a.open_sessions().await.expect("count"), 0);
}

#[tokio::test]
async fn two_oms_writing_one_key_if_absent_at_once_write_it_once() {
    let (a, b, _kept) = two_oms(|c| c).await;
    for round in 0..5u64 {
        let key = format!("k{round}");
        let mut writes = Vec::new();
        for (om, len) in [(&a, 5), (&b, 6)] {
            let s = om.open_key("b", &key, None).await.expect("open");
            let g = om
                .allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            let om = Arc::clone(om);
            writes.push(async move {
                om.commit_key_if(
                    s.session_id,
                    &[BlockGroup { length: len, ..g }],
                    len,
                    BTreeMap::new(),
                    Some(WriteCondition::NotExists),
                )
                .await
            });
        }
        let second = writes.pop().expect("two");
        let first = writes.pop().expect("two");
        let (x, y) = tokio::join!(tokio::spawn(first), tokio::spawn(second));
        let outcomes = [x.expect("task"), y.expect("task")];
        let won: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, Err(OmError::ConditionFailed { .. }))),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(
            &&a.lookup_key("b", &key).await.expect("written"),
            won.first().expect("one")
        );
        assert_eq!(
            b.pending_deletions().await.expect("pending"),
            REPLICAS * (round + 1),
            "round {round}: the loser's group is freed"
        );
    }
}

#[tokio::test]
async fn two_oms_completing_one_upload_at_once_complete_it_once() {
    let (a, b, _kept) = two_oms(|c| c).await;
    for round in 0..4u64 {
        let key = format!("mpu{round}");
        let id = a
            .initiate_multipart_upload("b", &key, None, BTreeMap::new())
            .await
            .expect("initiate");
        crate::test_oms::commit_part(&a, &id, 1, 10, "e1").await;
        crate::test_oms::commit_part(&b, &id, 2, 20, "e2").await;
        crate::test_oms::commit_part(&a, &id, 3, 30, "e3").await;
        // Different part lists: a retry of one cannot pass for the other.
        let complete = |om: Arc<OzoneManager>, listed: Vec<(u32, String)>| {
            let id = id.clone();
            async move {
                loop {
                    match om
                        .complete_multipart_upload(&id, &listed, 0, BTreeMap::new())
                        .await
                    {
                        // Another completion took the upload over: retry, as a client does.
                        Err(OmError::Busy(_)) => tokio::task::yield_now().await,
                        other => return other,
                    }
                }
            }
        };
        let on_a = vec![(1, "e1".to_string()), (2, "e2".to_string())];
        let on_b = vec![(1, "e1".to_string()), (3, "e3".to_string())];
        let (x, y) = tokio::join!(
            tokio::spawn(complete(Arc::clone(&a), on_a)),
            tokio::spawn(complete(Arc::clone(&b), on_b)),
        );
        let outcomes = [x.expect("task"), y.expect("task")];
        let won: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {outcomes:?}");
        let stored = b.lookup_key("b", &key).await.expect("completed");
        assert_eq!(&&stored, won.first().expect("one"));
        assert!(stored.length == 30 || stored.length == 40, "{stored:?}");
        assert!(matches!(
            a.list_parts(&id, 0, 10).await,
            Err(OmError::NoSuchUpload(_))
        ));
    }
}

#[tokio::test]
async fn a_lease_renewed_through_one_om_holds_on_the_other() {
    let lease = Duration::from_secs(60);
    let clock = Arc::new(ManualClock::default());
    let (a, b, _kept) = two_oms(|c| {
        c.with_open_key_lease(lease)
            .with_clock(Arc::clone(&clock) as Arc<dyn Clock>)
    })
    .await;
    let s = a.open_key("b", "k", None).await.expect("open on a");
    a.allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate on a");
    clock.advance(lease - Duration::from_secs(10));
    b.renew_key(s.session_id).await.expect("renew on b");
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        a.expire_sessions(clock.wall()).await.expect("expire on a"),
        0,
        "renewed through b within the lease"
    );
    clock.advance(lease);
    assert_eq!(
        a.expire_sessions(clock.wall()).await.expect("expire on a"),
        1
    );
    assert_eq!(b.open_sessions().await.expect("count"), 0);
    assert_eq!(
        b.pending_deletions().await.expect("pending"),
        REPLICAS,
        "the expired session's group is freed"
    );
    assert!(matches!(
        b.commit_key(s.session_id, &[], 0, BTreeMap::new()).await,
        Err(OmError::NoSuchSession(_))
    ));
}

#[tokio::test]
async fn a_clients_bound_counts_its_sessions_on_every_om() {
    let (a, b, _kept) = two_oms(|c| c.with_max_sessions_per_client(2)).await;
    let first = a.open_key_as("c", "b", "x", None).await.expect("open on a");
    b.open_key_as("c", "b", "y", None).await.expect("open on b");
    for om in [&a, &b] {
        assert!(matches!(
            om.open_key_as("c", "b", "z", None).await,
            Err(OmError::TooManyOpenSessions { limit: 2, .. })
        ));
    }
    b.abort_key(first.session_id).await.expect("abort on b");
    a.open_key_as("c", "b", "z", None)
        .await
        .expect("an ended session no longer counts");
}

/// The background services run on one of the oms at a time: the one elected runs them (its
/// watch says so, and only it answers the ReplicationManager's status; the other answers
/// NOT_LEADER naming it), and when it stops they move to the other at once (it resigned).
#[tokio::test]
async fn the_services_run_on_one_om_and_move_when_it_stops() {
    let first = TestOm::start(Backend::Etcd).await;
    let store = first.shared_store();
    let second = Arc::new(first.another(|c| c).await);
    let (first, _kept) = first.split();
    let first = Arc::new(first);
    let lead = |om: &Arc<OzoneManager>, name: &str| {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(crate::lead_services(
            Arc::clone(om),
            store.clone(),
            crate::ServiceLeadConfig {
                candidate: name.to_string(),
                ttl: meta_store::MIN_TTL,
                history: Duration::from_secs(3600),
            },
            stopped,
        ));
        (stop, task)
    };
    let (stop_first, first_task) = lead(&first, "om-1:9862");
    let (stop_second, second_task) = lead(&second, "om-2:9862");
    let (mut on_first, mut on_second) = (first.watch_service_lead(), second.watch_service_lead());
    // One wins.
    let winner_is_first = tokio::select! {
        r = on_first.wait_for(|l| *l) => { r.expect("om alive"); true }
        r = on_second.wait_for(|l| *l) => { r.expect("om alive"); false }
    };
    let (winner, loser, loser_name, winner_name) = if winner_is_first {
        (&first, &second, "om-2:9862", "om-1:9862")
    } else {
        (&second, &first, "om-1:9862", "om-2:9862")
    };
    assert!(!*loser.watch_service_lead().borrow(), "only one runs them");
    winner
        .lead
        .require("the status")
        .await
        .expect("the elected om answers");
    let refused = loser
        .lead
        .require("the status")
        .await
        .expect_err("the other does not");
    assert_eq!(
        proto_crate::OmErrorCode::of(&refused),
        proto_crate::OmErrorCode::NotLeader
    );
    assert!(refused.message().contains(winner_name), "{refused:?}");
    // The elected om stops: it resigns, and the other takes the services over.
    let (stop_winner, winner_task, stop_loser, loser_task) = if winner_is_first {
        (stop_first, first_task, stop_second, second_task)
    } else {
        (stop_second, second_task, stop_first, first_task)
    };
    stop_winner.send_replace(true);
    assert_eq!(winner_task.await.expect("task").expect("led"), 1);
    assert!(!*winner.watch_service_lead().borrow());
    let mut on_loser = loser.watch_service_lead();
    tokio::time::timeout(Duration::from_secs(30), on_loser.wait_for(|l| *l))
        .await
        .expect("taken over well within a lease")
        .expect("om alive");
    let store_leader = store.leader(crate::OM_ELECTION).await.expect("leader");
    assert_eq!(store_leader.as_deref(), Some(loser_name));
    stop_loser.send_replace(true);
    assert_eq!(loser_task.await.expect("task").expect("led"), 1);
}

/// A datanode one om takes out of service gets no new group from the other, even before
/// the other's periodic re-read of the states (regression: it placed groups from its own
/// copy, so a decommission could finish while such a group was being written).
#[tokio::test]
async fn a_datanode_decommissioned_through_one_om_gets_no_group_from_the_other() {
    let (a, b, _kept) = two_oms(|c| c).await;
    let sixth = proto_crate::DatanodeDetails {
        uuid: proto_crate::DatanodeId::from_u128(5),
        address: "127.0.0.1:10005".to_string(),
    };
    for om in [&a, &b] {
        om.register_datanode(sixth.clone()).await.expect("register");
    }
    let out = proto_crate::DatanodeId::from_u128(0);
    a.decommission(&out).await.expect("decommission through a");
    let s = b.open_key("b", "k", None).await.expect("open on b");
    for _ in 0..10 {
        let g = b
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate on b");
        assert!(
            g.pipeline.locations.iter().all(|l| l.datanode.uuid != out),
            "{g:?}"
        );
    }
    assert_eq!(
        b.datanode_statuses()
            .iter()
            .find(|d| d.details.uuid == out)
            .map(|d| d.op_state),
        Some(crate::OperationalState::Decommissioning),
        "b read the states again"
    );
}
