//! [`transact`] on both back ends: a body sees its own writes and repeats
//! its first reads; a commit meets any change to what the body read (a key
//! changed, a key put into a scanned range, a key deleted from one) and runs
//! the body again; write skew — the anomaly plain per-key guards let
//! through — does not happen; concurrent transfers conserve money; an error
//! decided on torn reads is retried, a true one is returned; contention and
//! etcd's limits are typed errors.

use std::sync::atomic::{AtomicU32, Ordering};

use meta_store::local_etcd::LocalEtcd;
use meta_store::{
    EtcdConfig, EtcdStore, MAX_ATTEMPTS, MAX_TXN_OPS, MetaStore, RedbStore, StoreError, Table, Txn,
    prefix_end, transact,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A back end under test and what keeps it alive.
struct Backend {
    name: &'static str,
    store: MetaStore,
    _etcd: Option<LocalEtcd>,
    _dir: tempfile::TempDir,
}

async fn both() -> [Backend; 2] {
    let dir = tempfile::tempdir().expect("tempdir");
    let redb = MetaStore::Redb(RedbStore::open(&dir.path().join("m.redb")).expect("redb"));
    let edir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(edir.path(), 1)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    let store = EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()).with_namespace("/txn"))
        .await
        .expect("etcd store");
    [
        Backend {
            name: "redb",
            store: redb,
            _etcd: None,
            _dir: dir,
        },
        Backend {
            name: "etcd",
            store: MetaStore::Etcd(store),
            _etcd: Some(etcd),
            _dir: edir,
        },
    ]
}

/// A body's own error type: the store's, or a decision.
#[derive(Debug, PartialEq)]
enum Refused {
    Store(String),
    Torn { a: u8, b: u8 },
    Missing,
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Self {
        Self::Store(e.to_string())
    }
}

async fn put(store: &MetaStore, k: &str, v: &[u8]) {
    let out = store.commit(Txn::new().put(k, v)).await.expect("put");
    assert!(out.committed());
}

fn byte(v: Option<Vec<u8>>) -> Option<u8> {
    v.and_then(|v| v.first().copied())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sees_its_writes_and_its_first_reads() {
    for b in both().await {
        let s = &b.store;
        put(s, "r/a", b"1").await;
        put(s, "r/c", b"3").await;
        let runs = AtomicU32::new(0);
        let runs = &runs;
        let done = transact(s, |tx| {
            Box::pin(async move {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                let a = tx.get(b"r/a").await?;
                if run == 0 {
                    // Another writer changes `r/a` after this run read it.
                    put(tx.store(), "r/a", b"9").await;
                }
                // A second read answers as the first did.
                assert_eq!(tx.get(b"r/a").await?, a);
                tx.put("r/b", "2");
                tx.delete("r/c");
                assert_eq!(tx.get(b"r/b").await?, Some(b"2".to_vec()));
                assert_eq!(tx.get(b"r/c").await?, None);
                let page = tx.scan(b"r/", prefix_end(b"r/").as_deref(), 10).await?;
                let keys: Vec<_> = page.entries.iter().map(|(k, _)| k.clone()).collect();
                assert_eq!(keys, [b"r/a".to_vec(), b"r/b".to_vec()], "{}", b.name);
                Ok::<_, StoreError>(a)
            })
        })
        .await
        .expect("transact");
        // The first run's commit met the change to `r/a`; the second saw it.
        assert_eq!(done.attempts, 2, "{}", b.name);
        assert_eq!(done.value, Some(b"9".to_vec()), "{}", b.name);
        let rev = done.revision.expect("wrote");
        let e = s.get(b"r/b").await.expect("get").expect("written");
        assert_eq!(e.mod_revision, rev, "{}: the commit's revision", b.name);
        assert_eq!(s.get(b"r/c").await.expect("get"), None, "{}", b.name);
    }
}

/// A commit guards each scanned range against keys put into it and each
/// key seen there against deletion: a body that scanned runs again after
/// either, and not after a change outside the range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_meets_puts_and_deletes_in_its_range_only() {
    for b in both().await {
        let s = &b.store;
        put(s, "s/1", b"x").await;
        for (what, change) in [
            ("put into the range", Txn::new().put("s/2", "y")),
            ("delete from the range", Txn::new().delete("s/1")),
            ("put outside the range", Txn::new().put("t/1", "z")),
        ] {
            let runs = AtomicU32::new(0);
            let runs = &runs;
            let change = &change;
            let done = transact(s, |tx| {
                Box::pin(async move {
                    let page = tx.scan(b"s/", prefix_end(b"s/").as_deref(), 10).await?;
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        let out = tx.store().commit(change.clone()).await?;
                        assert!(out.committed());
                    }
                    tx.put("seen", page.entries.len().to_string());
                    Ok::<_, StoreError>(())
                })
            })
            .await
            .expect("transact");
            let want = if what == "put outside the range" {
                1
            } else {
                2
            };
            assert_eq!(done.attempts, want, "{}: {what}", b.name);
        }
    }
}

/// Write skew: eight tasks each join a group only while it has fewer than
/// three members, and four members each leave only while another stays.
/// Per-key guards alone let every task act on the same view; with range
/// guards exactly three join and exactly one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_skew_does_not_happen() {
    for b in both().await {
        let joins: Vec<_> = (0..8)
            .map(|i| {
                let s = b.store.clone();
                tokio::spawn(async move {
                    transact(&s, |tx| {
                        Box::pin(async move {
                            let group = tx.scan(b"g/", prefix_end(b"g/").as_deref(), 10).await?;
                            if group.entries.len() < 3 {
                                tx.put(format!("g/{i}"), "member");
                            }
                            Ok::<_, StoreError>(())
                        })
                    })
                    .await
                    .expect("join")
                })
            })
            .collect();
        for j in joins {
            j.await.expect("task");
        }
        let group = b.store.scan_prefix(b"g/", 100).await.expect("scan");
        assert_eq!(group.entries.len(), 3, "{}: members", b.name);

        for i in 0..4 {
            put(&b.store, &format!("oncall/{i}"), b"on").await;
        }
        let leaves: Vec<_> = (0..4)
            .map(|i| {
                let s = b.store.clone();
                tokio::spawn(async move {
                    transact(&s, |tx| {
                        Box::pin(async move {
                            let on = tx
                                .scan(b"oncall/", prefix_end(b"oncall/").as_deref(), 10)
                                .await?;
                            if on.entries.len() > 1 {
                                tx.delete(format!("oncall/{i}"));
                            }
                            Ok::<_, StoreError>(())
                        })
                    })
                    .await
                    .expect("leave")
                })
            })
            .collect();
        for l in leaves {
            l.await.expect("task");
        }
        let on = b.store.scan_prefix(b"oncall/", 100).await.expect("scan");
        assert_eq!(on.entries.len(), 1, "{}: on call", b.name);
    }
}

/// Six tasks making 15 seeded transfers each between four accounts of 100
/// (a typed table), each transfer moving money only from an account that
/// holds it: every transfer returns Ok and the total stays 400 (a lost
/// update would create or destroy money).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_conserve_the_total() {
    const ACCOUNTS: Table<u64, u64> = Table::new("account");
    for b in both().await {
        let mut init = Txn::new();
        for a in 0..4 {
            init = ACCOUNTS.put(init, &a, &100);
        }
        assert!(b.store.commit(init).await.expect("init").committed());
        let tasks: Vec<_> = (0..6u64)
            .map(|t| {
                let s = b.store.clone();
                tokio::spawn(async move {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut committed = 0;
                    for _ in 0..15 {
                        let from = rng.random_range(0..4u64);
                        let to = (from + rng.random_range(1..4u64)) % 4;
                        let amount = rng.random_range(1..=60u64);
                        transact(&s, |tx| {
                            Box::pin(async move {
                                let f = ACCOUNTS.get_in(&tx, &from).await?.unwrap_or(0);
                                let g = ACCOUNTS.get_in(&tx, &to).await?.unwrap_or(0);
                                if f >= amount {
                                    ACCOUNTS.put_in(&tx, &from, &(f - amount));
                                    ACCOUNTS.put_in(&tx, &to, &(g + amount));
                                }
                                Ok::<_, StoreError>(())
                            })
                        })
                        .await
                        .expect("transfer");
                        committed += 1;
                    }
                    committed
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.expect("task"), 15);
        }
        let rows = ACCOUNTS.scan(&b.store, &(), None, 10).await.expect("scan");
        let total: u64 = rows.rows.iter().map(|r| r.value).sum();
        assert_eq!(rows.rows.len(), 4, "{}", b.name);
        assert_eq!(total, 400, "{}: balances {:?}", b.name, rows.rows);
        // The typed scan inside a transaction sees the same rows.
        let seen = transact(&b.store, |tx| {
            Box::pin(async move { ACCOUNTS.scan_in(&tx, &(), None, 10).await })
        })
        .await
        .expect("scan_in");
        let sum: u64 = seen.value.rows.iter().map(|(_, v)| v).sum();
        assert_eq!(sum, 400, "{}", b.name);
    }
}

/// A body that read `a` before another writer changed `a` and `b` together,
/// and `b` after, sees a torn pair and refuses; its reads are no longer
/// true, so it runs again and succeeds. A refusal on true reads is returned
/// after one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_torn_reads_is_retried_a_true_one_returned() {
    for b in both().await {
        let s = &b.store;
        let pair = Txn::new().put("p/a", [0]).put("p/b", [0]);
        assert!(s.commit(pair).await.expect("pair").committed());
        let runs = AtomicU32::new(0);
        let runs = &runs;
        let done = transact(s, |tx| {
            Box::pin(async move {
                let a = byte(tx.get(b"p/a").await?).unwrap_or(0);
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    let both = Txn::new().put("p/a", [1]).put("p/b", [1]);
                    assert!(tx.store().commit(both).await?.committed());
                }
                let b = byte(tx.get(b"p/b").await?).unwrap_or(0);
                if a == b {
                    Ok(a)
                } else {
                    Err(Refused::Torn { a, b })
                }
            })
        })
        .await;
        assert_eq!(done.expect("retried").value, 1, "{}", b.name);
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{}", b.name);

        let runs = AtomicU32::new(0);
        let runs = &runs;
        let missing = transact(s, |tx| {
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tx.get(b"p/a").await?;
                match tx.get(b"p/none").await? {
                    Some(_) => Ok(()),
                    None => Err(Refused::Missing),
                }
            })
        })
        .await;
        assert_eq!(missing, Err(Refused::Missing), "{}", b.name);
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{}", b.name);
    }
}

/// A body whose key another writer changes on every run gives up after
/// [`MAX_ATTEMPTS`] runs, having written nothing; reading more keys than
/// etcd's compare limit is refused at the read that passes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_and_the_read_limit_are_typed_errors() {
    for b in both().await {
        let s = &b.store;
        let runs = AtomicU32::new(0);
        let runs = &runs;
        let out = transact(s, |tx| {
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tx.get(b"hot").await?;
                put(tx.store(), "hot", b"other").await;
                tx.put("cold", "mine");
                Ok::<_, StoreError>(())
            })
        })
        .await;
        assert!(
            matches!(out, Err(StoreError::Contention { attempts }) if attempts == MAX_ATTEMPTS),
            "{}: {out:?}",
            b.name
        );
        assert_eq!(runs.load(Ordering::SeqCst), MAX_ATTEMPTS, "{}", b.name);
        assert_eq!(s.get(b"cold").await.expect("get"), None, "{}", b.name);

        let out = transact(s, |tx| {
            Box::pin(async move {
                for i in 0..=MAX_TXN_OPS {
                    tx.get(format!("many/{i}").as_bytes()).await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .await;
        assert!(
            matches!(out, Err(StoreError::TooManyOps { compares, .. }) if compares == MAX_TXN_OPS + 1),
            "{}: {out:?}",
            b.name
        );
    }
}

/// `more` rests on a guarded key: a body that scanned one entry of two and
/// acted on "there are more" runs again when the second is deleted before
/// its commit. A scan pages past entries its own deletes hide, and a key
/// read before the scan keeps its first value in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_guard_more_and_page_past_own_deletes() {
    for b in both().await {
        let s = &b.store;
        put(s, "duty/a", b"on").await;
        put(s, "duty/b", b"on").await;
        let runs = AtomicU32::new(0);
        let runs = &runs;
        let done = transact(s, |tx| {
            Box::pin(async move {
                let page = tx
                    .scan(b"duty/", prefix_end(b"duty/").as_deref(), 1)
                    .await?;
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    // The other member leaves meanwhile.
                    tx.store().commit(Txn::new().delete("duty/b")).await?;
                }
                if page.more {
                    tx.delete("duty/a");
                }
                Ok::<_, StoreError>(page.more)
            })
        })
        .await
        .expect("transact");
        assert_eq!((done.attempts, done.value), (2, false), "{}", b.name);
        assert!(s.get(b"duty/a").await.expect("get").is_some(), "{}", b.name);

        for i in 0..5 {
            put(s, &format!("m/{i}"), format!("v{i}").as_bytes()).await;
        }
        let pages = std::sync::Mutex::new(Vec::new());
        let pages = &pages;
        let runs = AtomicU32::new(0);
        let runs = &runs;
        transact(s, |tx| {
            Box::pin(async move {
                tx.get(b"m/4").await?;
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    put(tx.store(), "m/4", b"new").await;
                }
                for i in 0..3 {
                    tx.delete(format!("m/{i}"));
                }
                let page = tx.scan(b"m/", prefix_end(b"m/").as_deref(), 2).await?;
                pages.lock().expect("pages").push(page);
                Ok::<_, StoreError>(())
            })
        })
        .await
        .expect("transact");
        let pages = pages.lock().expect("pages").clone();
        let entry = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
        assert_eq!(
            pages.len(),
            2,
            "{}: m/4 changed after the first run read it",
            b.name
        );
        assert_eq!(
            pages[0].entries,
            [entry("m/3", "v3"), entry("m/4", "v4")],
            "{}",
            b.name
        );
        assert!(!pages[0].more, "{}", b.name);
        assert_eq!(
            pages[1].entries,
            [entry("m/3", "v3"), entry("m/4", "new")],
            "{}",
            b.name
        );
    }
}

/// A key assumed absent without a read guards the commit like a read that found nothing:
/// the body that assumed a taken key runs again and takes the next; a key the
/// transaction already knows answers from what it knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_assumed_absent_guards_the_commit() {
    for b in both().await {
        let s = &b.store;
        put(s, "id/1", b"taken").await;
        let runs = AtomicU32::new(0);
        let committed = transact(s, |tx| {
            let runs = &runs;
            Box::pin(async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                // The first run picks a taken id without reading it.
                let id = format!("id/{run}");
                assert!(tx.assume_absent(id.as_bytes())?, "{}", b.name);
                tx.put(id.clone(), "mine");
                Ok::<_, StoreError>(id)
            })
        })
        .await
        .expect("commit");
        assert_eq!(committed.value, "id/2", "{}", b.name);
        assert_eq!(committed.attempts, 2, "{}", b.name);
        assert_eq!(
            s.get(b"id/1").await.expect("get").map(|e| e.value),
            Some(b"taken".to_vec()),
            "{}: the taken id is untouched",
            b.name
        );
        let known = transact(s, |tx| {
            Box::pin(async move {
                let read = tx.get(b"id/2").await?;
                tx.put("id/3", "x");
                Ok::<_, StoreError>((
                    read.is_some(),
                    tx.assume_absent(b"id/2")?,
                    tx.assume_absent(b"id/3")?,
                ))
            })
        })
        .await
        .expect("commit")
        .value;
        assert_eq!(known, (true, false, false), "{}", b.name);
    }
}
