//! Leader election on real etcd members: one leader at a time, a hand-over
//! on resign, a bounded take-over after the leader dies, and a leader that
//! learns it lost its lease when etcd is gone; a deposed leader's fenced
//! writes are refused; a service run by whichever candidate leads, on one
//! at a time, moving when its runner stops; a campaign given up leaves no
//! ghost candidate.

use std::time::{Duration, Instant};

use meta_store::local_etcd::LocalEtcd;
use meta_store::{
    EtcdConfig, EtcdStore, MetaStore, RedbStore, StoreError, Txn, run_while_leading, transact,
    transact_fenced,
};

const TTL: Duration = Duration::from_secs(3);

async fn store(etcd: &LocalEtcd) -> MetaStore {
    MetaStore::Etcd(
        EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()))
            .await
            .expect("connect"),
    )
}

/// The first candidate leads; a second waits (past the 5 s call deadline)
/// until the first resigns, then leads at once; `leader` names each in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_candidate_leads_once_the_leader_resigns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
    let (a, b) = (store(&etcd).await, store(&etcd).await);
    let first = a.campaign("services", "om-a", TTL).await.expect("a leads");
    assert!(first.is_held());
    assert_eq!(
        a.leader("services").await.expect("leader").as_deref(),
        Some("om-a")
    );
    let mut waiting = tokio::spawn(async move { b.campaign("services", "om-b", TTL).await });
    // The campaign must still be waiting after 6 s, longer than a call's 5 s
    // deadline: waiting to lead is not a call that times out, and b must not
    // lead while a does.
    if let Ok(r) = tokio::time::timeout(Duration::from_secs(6), &mut waiting).await {
        panic!("b's campaign ended while a leads: {r:?}");
    }
    let resigned = Instant::now();
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("b leads at once after a resigns")
        .expect("task")
        .expect("campaign");
    assert!(second.is_held());
    assert!(resigned.elapsed() < Duration::from_secs(2));
    assert_eq!(
        a.leader("services").await.expect("leader").as_deref(),
        Some("om-b")
    );
    drop(second);
}

/// A leader that dies without resigning (its runtime stops: no revoke, no
/// renewal) is replaced once its lease expires, within its TTL plus a
/// little.
#[test]
fn the_next_candidate_leads_within_the_ttl_after_the_leader_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = tokio::runtime::Runtime::new().expect("runtime");
    let etcd = main
        .block_on(LocalEtcd::start(dir.path(), 1))
        .expect("etcd");
    let endpoints = etcd.endpoints();
    // The first om: a runtime of its own, shut down below as a crash would.
    let crashing = tokio::runtime::Runtime::new().expect("runtime");
    let leadership = crashing.block_on(async {
        let a = MetaStore::Etcd(
            EtcdStore::connect(&EtcdConfig::new(endpoints))
                .await
                .expect("connect"),
        );
        a.campaign("services", "om-a", TTL).await.expect("a leads")
    });
    main.block_on(async {
        let b = store(&etcd).await;
        assert_eq!(
            b.leader("services").await.expect("leader").as_deref(),
            Some("om-a")
        );
        // No resign and no revoke: the leader's process is gone.
        std::mem::forget(leadership);
        let died = Instant::now();
        crashing.shutdown_background();
        let second = b.campaign("services", "om-b", TTL).await.expect("b leads");
        let took = died.elapsed();
        assert!(second.is_held());
        // Not at once (nothing revoked the lease: it had to expire), and
        // within the TTL plus a little.
        assert!(
            took >= Duration::from_millis(1000) && took < TTL + Duration::from_secs(3),
            "took {took:?} to replace a dead leader"
        );
        assert_eq!(
            b.leader("services").await.expect("leader").as_deref(),
            Some("om-b")
        );
    });
}

/// A leader whose etcd is gone learns it may have lost the lease within
/// two thirds of its TTL (it must stop acting before another could lead):
/// with the member killed (connections refused at once) and with it frozen
/// by SIGSTOP (renewals go unanswered, the harder case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_of_a_lost_lease_within_the_ttl() {
    for freeze in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
        let a = store(&etcd).await;
        let mut leadership = a.campaign("services", "om-a", TTL).await.expect("a leads");
        let pid = etcd.pids()[0];
        let stopped = Instant::now();
        if freeze {
            signal("-STOP", pid);
        } else {
            etcd.kill(0).await.expect("kill");
        }
        tokio::time::timeout(TTL, leadership.lost())
            .await
            .expect("the loss is seen within the TTL");
        let took = stopped.elapsed();
        assert!(!leadership.is_held());
        // Two thirds of the TTL after the last renewal was sent, which was
        // at most a third of the TTL before the member stopped; plus slack
        // for a loaded machine.
        assert!(
            took < TTL * 2 / 3 + Duration::from_millis(700),
            "freeze {freeze}: took {took:?}"
        );
        if freeze {
            signal("-CONT", pid);
        }
    }
}

/// A leader keeps its lease while one of three etcd members is down:
/// killing each member in turn (restarting it before the next) kills the
/// one its renewals go through at least once (they stay on a member until
/// it fails), and the renewals move to another member instead of giving
/// the lease up. Regression: a broken keep-alive stream ended the
/// leadership at once, so an om lost the lead whenever its etcd member did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_its_lease_through_the_loss_of_an_etcd_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = LocalEtcd::start(dir.path(), 3).await.expect("etcd");
    let s = store(&etcd).await;
    // Long enough to ride out a new raft leader's election (etcd's 1 s
    // election timeout) when the member killed led the raft group: the
    // renewals go unanswered until then.
    let ttl = Duration::from_secs(6);
    let mut leadership = s.campaign("steady", "om-a", ttl).await.expect("a leads");
    let fenced = s
        .fenced(leadership.fence().expect("fence"))
        .expect("fenced");
    for member in 0..3 {
        etcd.kill(member).await.expect("kill");
        // Past two thirds of the TTL since the last renewal before the kill.
        let kept = tokio::time::timeout(ttl * 5 / 6, leadership.lost()).await;
        assert!(
            kept.is_err(),
            "the lease was lost with member {member} down"
        );
        fenced
            .commit(Txn::new().put(format!("while-{member}-down"), "v"))
            .await
            .expect("the leader still writes");
        etcd.restart(member).await.expect("restart");
    }
    assert!(leadership.is_held());
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid` with kill(1).
fn signal(sig: &str, pid: u32) {
    let status = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Election names are checked: empty or with `/` (which would share
/// candidates with another election) is refused on both back ends.
#[tokio::test]
async fn bad_election_names_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = MetaStore::Redb(RedbStore::open(&dir.path().join("m.redb")).expect("open"));
    for name in ["", "a/b"] {
        let err = s.campaign(name, "om-a", TTL).await.expect_err("refused");
        assert!(matches!(err, StoreError::InvalidElectionName(_)), "{err}");
    }
}

/// On redb (one om holds the file) the candidate leads at once, for good.
#[tokio::test]
async fn on_redb_the_one_om_leads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = MetaStore::Redb(RedbStore::open(&dir.path().join("m.redb")).expect("open"));
    let l = s.campaign("services", "om-a", TTL).await.expect("leads");
    assert!(l.is_held());
    assert_eq!(s.leader("services").await.expect("leader"), None);
    let mut l = l;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), l.lost())
            .await
            .is_err(),
        "a redb leadership is never lost"
    );
    assert!(l.is_held());
}

/// A leader's fenced writes commit while it leads. Once it has resigned and
/// another candidate leads, a write under its old fence — a deposed leader
/// that did not notice — is refused with `NotLeader` and writes nothing,
/// while the new leader's fence works; a plain transaction is unaffected.
/// On redb a leadership has no fence, and an etcd fence there is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_fenced_writes_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
    let s = store(&etcd).await;
    let put = |key: &'static str| {
        move |tx: meta_store::Transaction| {
            Box::pin(async move {
                tx.put(key, "v");
                Ok::<_, StoreError>(())
            }) as meta_store::TxnFuture<'static, (), StoreError>
        }
    };
    let a = s.campaign("fenced", "om-a", TTL).await.expect("a leads");
    let fence_a = a.fence().expect("an etcd leadership has a fence");
    assert_eq!(fence_a.election(), "fenced");
    transact_fenced(&s, Some(&fence_a), put("by-a"))
        .await
        .expect("a leads: its write commits");
    a.resign().await.expect("resign");
    let b = s.campaign("fenced", "om-b", TTL).await.expect("b leads");
    let late = transact_fenced(&s, Some(&fence_a), put("late-a")).await;
    assert!(
        matches!(&late, Err(StoreError::NotLeader { election }) if election == "fenced"),
        "{late:?}"
    );
    assert_eq!(s.get(b"late-a").await.expect("get"), None);
    let fence_b = b.fence().expect("fence");
    transact_fenced(&s, Some(&fence_b), put("by-b"))
        .await
        .expect("b's write commits");
    transact(&s, put("anyone")).await.expect("unfenced");
    assert!(s.get(b"by-a").await.expect("get").is_some());
    assert!(s.get(b"by-b").await.expect("get").is_some());

    let rdir = tempfile::tempdir().expect("tempdir");
    let redb = MetaStore::Redb(RedbStore::open(&rdir.path().join("m.redb")).expect("redb"));
    let only = redb.campaign("fenced", "om", TTL).await.expect("leads");
    assert!(only.fence().is_none());
    let foreign = redb
        .commit(Txn::new().when_leading(&fence_b).put("k", "v"))
        .await;
    assert!(
        matches!(foreign, Err(StoreError::ForeignFence { .. })),
        "{foreign:?}"
    );
    drop(b);
}

/// A store fenced by a leadership (`MetaStore::fenced`, what the active om
/// writes through): every write commits while the leadership holds, and
/// once another candidate leads, each write — a plain commit or a
/// `transact` body — is refused with `NotLeader` and writes nothing, while
/// reads go on. The fence takes one compare, so a body may read one key
/// fewer. A redb store cannot be fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_fenced_by_a_lost_leadership_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
    let s = store(&etcd).await;
    let a = s.campaign("whole", "om-a", TTL).await.expect("a leads");
    let fenced = s.fenced(a.fence().expect("fence")).expect("an etcd store");
    assert_eq!(fenced.max_guards(), s.max_guards() - 1);
    fenced
        .commit(Txn::new().put("by-a", "v"))
        .await
        .expect("a leads: a plain commit");
    transact(&fenced, |tx| {
        Box::pin(async move {
            let seen = tx.get(b"by-a").await?;
            tx.put("by-a-too", seen.unwrap_or_default());
            Ok::<_, StoreError>(())
        })
    })
    .await
    .expect("a leads: a transaction");
    // A body at the fenced store's read bound commits; one read more is
    // refused at the read, before anything is sent.
    let reads = |n: usize| {
        move |tx: meta_store::Transaction| {
            Box::pin(async move {
                for i in 0..n {
                    tx.get(format!("r{i}").as_bytes()).await?;
                }
                tx.put("read-many", "v");
                Ok::<_, StoreError>(())
            }) as meta_store::TxnFuture<'static, (), StoreError>
        }
    };
    transact(&fenced, reads(fenced.max_guards()))
        .await
        .expect("reads up to the bound, then the fence");
    let over = transact(&fenced, reads(fenced.max_guards() + 1)).await;
    assert!(
        matches!(over, Err(StoreError::TooManyOps { .. })),
        "{over:?}"
    );

    a.resign().await.expect("resign");
    let b = s.campaign("whole", "om-b", TTL).await.expect("b leads");
    let late = fenced.commit(Txn::new().put("late-a", "v")).await;
    assert!(
        matches!(&late, Err(StoreError::NotLeader { election }) if election == "whole"),
        "{late:?}"
    );
    let late = transact(&fenced, |tx| {
        Box::pin(async move {
            tx.put("late-a-too", "v");
            Ok::<_, StoreError>(())
        })
    })
    .await;
    assert!(
        matches!(late, Err(StoreError::NotLeader { .. })),
        "{late:?}"
    );
    for key in [&b"late-a"[..], b"late-a-too"] {
        assert_eq!(s.get(key).await.expect("get"), None);
    }
    // Reads are not fenced; the new leader's own fenced store writes.
    assert!(fenced.get(b"by-a-too").await.expect("get").is_some());
    let by_b = s.fenced(b.fence().expect("fence")).expect("fenced");
    by_b.commit(Txn::new().put("by-b", "v"))
        .await
        .expect("b's commit");

    let rdir = tempfile::tempdir().expect("tempdir");
    let redb = MetaStore::Redb(RedbStore::open(&rdir.path().join("m.redb")).expect("redb"));
    let refused = redb.fenced(b.fence().expect("fence"));
    assert!(
        matches!(refused, Err(StoreError::ForeignFence { .. })),
        "{refused:?}"
    );
    drop(b);
}

/// Polls `cond` every 50 ms until it holds, or panics after `within`.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut cond: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two runners of one service: only the leader's runs (the other's never
/// writes while the leader makes five), its fenced writes land; when its
/// runner is stopped it resigns and the other's service takes over at once.
/// Each led one term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_runs_on_the_leader_only_and_moves_when_it_stops() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
    let s = store(&etcd).await;
    let runner = |name: &'static str| {
        let store = s.clone();
        let writes = Arc::new(AtomicU32::new(0));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let counted = Arc::clone(&writes);
        let task = tokio::spawn(async move {
            run_while_leading(&store, "svc", name, TTL, stopped, |fence| {
                let store = store.clone();
                let counted = Arc::clone(&counted);
                async move {
                    loop {
                        let wrote = transact_fenced(&store, fence.as_ref(), |tx| {
                            Box::pin(async move {
                                tx.put("svc/last", name);
                                Ok::<_, StoreError>(())
                            })
                        })
                        .await;
                        if wrote.is_ok() {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            })
            .await
        });
        (task, stop, writes)
    };
    let last = |s: MetaStore| async move {
        s.get(b"svc/last")
            .await
            .expect("get")
            .map(|e| String::from_utf8_lossy(&e.value).into_owned())
    };
    let (a_task, a_stop, a_writes) = runner("om-a");
    eventually("a's service writes", Duration::from_secs(10), || {
        let s = s.clone();
        async move { last(s).await.as_deref() == Some("om-a") }
    })
    .await;
    let (b_task, b_stop, b_writes) = runner("om-b");
    // A window measured in a's progress, not in time: five more of a's
    // writes while b's runner campaigns.
    let before = a_writes.load(Ordering::SeqCst);
    eventually("a goes on writing", Duration::from_secs(10), || {
        let a_writes = Arc::clone(&a_writes);
        async move { a_writes.load(Ordering::SeqCst) >= before + 5 }
    })
    .await;
    assert_eq!(b_writes.load(Ordering::SeqCst), 0, "b runs while a leads");
    assert_eq!(last(s.clone()).await.as_deref(), Some("om-a"));

    a_stop.send_replace(true);
    // a's runner returns: its service is dropped and writes no more.
    let a_terms = a_task.await.expect("task").expect("a's runner");
    assert_eq!(a_terms, 1);
    eventually("b takes over", Duration::from_secs(5), || {
        let s = s.clone();
        async move { last(s).await.as_deref() == Some("om-b") }
    })
    .await;
    b_stop.send_replace(true);
    assert_eq!(b_task.await.expect("task").expect("b's runner"), 1);
}

/// A candidate whose campaign is dropped while another leads (its runner
/// stopped) holds no lease afterwards: the renewal task stops and the lease
/// is revoked (a dropped campaign used to renew its lease for as long as
/// the process lived), and once the leader resigns the next candidate
/// leads at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_given_up_stops_renewing_its_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), 1).await.expect("etcd");
    let s = store(&etcd).await;
    let raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .expect("a raw etcd client");
    let a = s.campaign("queue", "om-a", TTL).await.expect("a leads");
    let b = s.clone();
    let waiting = tokio::spawn(async move { b.campaign("queue", "om-b", TTL).await });
    eventually("b's lease granted", Duration::from_secs(5), || {
        let mut raw = raw.clone();
        async move { raw.leases().await.expect("leases").leases().len() == 2 }
    })
    .await;
    assert!(!waiting.is_finished(), "b leads while a does");
    waiting.abort();
    let _ = waiting.await;
    eventually("b's lease revoked", Duration::from_secs(5), || {
        let mut raw = raw.clone();
        async move { raw.leases().await.expect("leases").leases().len() == 1 }
    })
    .await;
    a.resign().await.expect("resign");
    let c = tokio::time::timeout(Duration::from_secs(2), s.campaign("queue", "om-c", TTL))
        .await
        .expect("c leads at once")
        .expect("campaign");
    assert_eq!(
        s.leader("queue").await.expect("leader").as_deref(),
        Some("om-c")
    );
    drop(c);
}
