//! Both back ends against one behaviour: seeded random sequences checked
//! against an in-memory model of etcd's semantics, races that exactly one
//! writer wins, and etcd's limits. The etcd back end runs against real etcd
//! members (Debian's `etcd-server`) started on loopback for each test.

use std::collections::BTreeMap;

use meta_store::local_etcd::LocalEtcd;
use meta_store::{
    ENTRY_OVERHEAD_BYTES, EtcdConfig, EtcdStore, MAX_REQUEST_BYTES, MAX_TXN_OPS, MetaStore,
    Outcome, RedbStore, StoreError, Txn,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A back end under test, with what keeps it alive.
struct Backend {
    name: &'static str,
    store: MetaStore,
    _etcd: Option<LocalEtcd>,
    _dir: tempfile::TempDir,
}

async fn redb() -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbStore::open(&dir.path().join("meta.redb")).expect("redb store");
    Backend {
        name: "redb",
        store: MetaStore::Redb(store),
        _etcd: None,
        _dir: dir,
    }
}

async fn etcd(members: usize) -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(dir.path(), members)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    // The longest namespace, so that the limits test covers it.
    let namespace = "/ozone/test/0123";
    assert_eq!(namespace.len(), meta_store::MAX_NAMESPACE_BYTES);
    let store = EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()).with_namespace(namespace))
        .await
        .expect("etcd store");
    Backend {
        name: "etcd",
        store: MetaStore::Etcd(store),
        _etcd: Some(etcd),
        _dir: dir,
    }
}

async fn both() -> [Backend; 2] {
    [redb().await, etcd(1).await]
}

/// etcd's semantics in memory: key -> (value, create_revision, mod_revision).
#[derive(Default)]
struct Model {
    kv: BTreeMap<Vec<u8>, (Vec<u8>, u64, u64)>,
    revision: u64,
}

impl Model {
    fn entry(&self, k: &[u8]) -> Option<meta_store::Entry> {
        self.kv.get(k).map(|(v, c, m)| meta_store::Entry {
            key: k.to_vec(),
            value: v.clone(),
            create_revision: *c,
            mod_revision: *m,
        })
    }

    fn commit(&mut self, txn: &Txn) -> Outcome {
        let holds = txn.compares().iter().all(|c| match c {
            meta_store::Compare::Absent(k) => !self.kv.contains_key(k),
            meta_store::Compare::ModRevision(k, r) => {
                self.kv.get(k).is_some_and(|(_, _, m)| m == r)
            }
            meta_store::Compare::RangeUnchangedSince {
                start,
                end,
                revision,
            } => self
                .kv
                .iter()
                .filter(|(k, _)| {
                    k.as_slice() >= start.as_slice()
                        && end.as_ref().is_none_or(|e| k.as_slice() < e.as_slice())
                })
                .all(|(_, (_, _, m))| m <= revision),
            // The model has no elections; random sequences make no fences.
            meta_store::Compare::Leading(_) => false,
        });
        if !holds {
            return Outcome::Conflict;
        }
        let next = self.revision + 1;
        let mut changed = false;
        for op in txn.ops() {
            match op {
                meta_store::Op::Put(k, v) => {
                    let created = self.kv.get(k).map_or(next, |(_, c, _)| *c);
                    self.kv.insert(k.clone(), (v.clone(), created, next));
                    changed = true;
                }
                meta_store::Op::Delete(k) => changed |= self.kv.remove(k).is_some(),
            }
        }
        if changed {
            self.revision = next;
        }
        Outcome::Committed {
            revision: self.revision,
        }
    }
}

const KEYS: [&[u8]; 9] = [
    b"a/0", b"a/1", b"a/2", b"a/3", b"b/0", b"b/1", b"b/2", b"b/3", b"c",
];

fn key(rng: &mut SmallRng) -> Vec<u8> {
    KEYS[rng.random_range(0..KEYS.len())].to_vec()
}

/// A random transaction: up to two compares (absent; the key's current
/// revision or a stale one; a range unchanged since a recent revision,
/// empty and inverted ranges included) and one to three writes of
/// distinct keys.
fn random_txn(rng: &mut SmallRng, model: &Model) -> Txn {
    let mut txn = Txn::new();
    for _ in 0..rng.random_range(0..=2) {
        let k = key(rng);
        txn = match rng.random_range(0..4) {
            0 => txn.when_absent(k),
            3 => {
                let end = rng.random_bool(0.7).then(|| key(rng));
                let back = rng.random_range(0..4);
                txn.when_range_unchanged_since(k, end, model.revision.saturating_sub(back))
            }
            1 => {
                let r = model.kv.get(&k).map_or(2, |(_, _, m)| *m);
                txn.when_unchanged(k, r)
            }
            _ => {
                let r = rng.random_range(1..=model.revision.max(1));
                txn.when_unchanged(k, r)
            }
        };
    }
    let mut used = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let k = key(rng);
        if used.contains(&k) {
            continue;
        }
        used.push(k.clone());
        txn = if rng.random_bool(0.7) {
            let len = rng.random_range(0..20);
            txn.put(k, (0..len).map(|_| rng.random::<u8>()).collect::<Vec<_>>())
        } else {
            txn.delete(k)
        };
    }
    txn
}

async fn check_against_model(b: &Backend, seed: u64, steps: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model {
        revision: b.store.revision().await.expect("revision"),
        ..Model::default()
    };
    let ctx = |step: usize| format!("{} seed {seed} step {step}", b.name);
    for step in 0..steps {
        match rng.random_range(0..10) {
            0..=5 => {
                let txn = random_txn(&mut rng, &model);
                let want = model.commit(&txn);
                let got = b.store.commit(txn.clone()).await.expect("commit");
                assert_eq!(got, want, "{}: {txn:?}", ctx(step));
            }
            6 | 7 => {
                let k = key(&mut rng);
                let got = b.store.get(&k).await.expect("get");
                assert_eq!(got, model.entry(&k), "{}: get", ctx(step));
            }
            _ => {
                let start = key(&mut rng);
                let end = rng.random_bool(0.5).then(|| key(&mut rng));
                let limit = rng.random_range(1..=5);
                let page = b
                    .store
                    .range(&start, end.as_deref(), limit)
                    .await
                    .expect("range");
                let all: Vec<_> = model
                    .kv
                    .keys()
                    .filter(|k| {
                        k.as_slice() >= start.as_slice()
                            && end.as_ref().is_none_or(|e| k.as_slice() < e.as_slice())
                    })
                    .collect();
                let want: Vec<_> = all
                    .iter()
                    .take(limit)
                    .filter_map(|k| model.entry(k))
                    .collect();
                assert_eq!(page.entries, want, "{}: range", ctx(step));
                assert_eq!(page.more, all.len() > limit, "{}: more", ctx(step));
                assert_eq!(page.revision, model.revision, "{}: revision", ctx(step));
            }
        }
    }
}

/// Seeded random gets, ranges and guarded transactions give exactly the
/// model's answers, revisions included, on both back ends (replay a failure
/// with its seed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sequences_match_the_model() {
    for b in both().await {
        for seed in 0..3 {
            // Each seed on keys of its own: clear what the last one left.
            let page = b.store.range(b"\x01", None, 1000).await.expect("range");
            let mut txn = Txn::new();
            for e in page.entries {
                txn = txn.delete(e.key);
            }
            b.store.commit(txn).await.expect("clear");
            check_against_model(&b, seed, 300).await;
        }
    }
}

/// Eight writers creating the same key at once: exactly one commits, and
/// the key holds its value (Ozone: two clients completing one upload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_racing_creator_wins() {
    for b in both().await {
        let tasks: Vec<_> = (0..8u8)
            .map(|i| {
                let store = b.store.clone();
                tokio::spawn(async move {
                    let out = store
                        .commit(Txn::new().when_absent("owner").put("owner", [i]))
                        .await
                        .expect("commit");
                    (i, out)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (i, out) = t.await.expect("task");
            if out.committed() {
                winners.push(i);
            }
        }
        assert_eq!(winners.len(), 1, "{}: winners {winners:?}", b.name);
        let e = b.store.get(b"owner").await.expect("get").expect("present");
        assert_eq!(e.value, vec![winners[0]], "{}", b.name);
    }
}

/// Four tasks each adding 1 to a counter 25 times by compare-and-swap (read,
/// then commit guarded by the revision read; retry on conflict): no
/// increment is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_loses_no_update() {
    for b in both().await {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let store = b.store.clone();
                tokio::spawn(async move {
                    for _ in 0..25 {
                        loop {
                            let seen = store.get(b"counter").await.expect("get");
                            let n = seen.as_ref().map_or(0, |e| {
                                u64::from_be_bytes(e.value.as_slice().try_into().expect("8 bytes"))
                            });
                            let txn = Txn::new()
                                .when_as_read("counter", seen.as_ref())
                                .put("counter", (n + 1).to_be_bytes());
                            if store.commit(txn).await.expect("commit").committed() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let e = b.store.get(b"counter").await.expect("get").expect("set");
        assert_eq!(e.value, 100u64.to_be_bytes(), "{}", b.name);
    }
}

/// The limits are etcd's: the largest transaction the store accepts (128
/// ops; 1.5 MiB counted) commits on real etcd, and one past the ops is
/// refused before it is sent, the same way on both back ends; one past the
/// size is refused on etcd only (redb keeps what one machine's om kept
/// before the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_etcds_and_the_ops_the_same_on_both() {
    for b in both().await {
        let mut txn = Txn::new();
        for i in 0..MAX_TXN_OPS {
            txn = txn.put(format!("k/{i:03}"), "v");
        }
        assert!(
            b.store
                .commit(txn.clone())
                .await
                .expect("128 ops")
                .committed(),
            "{}",
            b.name
        );
        let page = b.store.scan_prefix(b"k/", 1000).await.expect("scan");
        assert_eq!(page.entries.len(), MAX_TXN_OPS);
        let err = b
            .store
            .commit(txn.put("k/x", "v"))
            .await
            .expect_err("129 ops");
        assert!(
            matches!(err, StoreError::TooManyOps { .. }),
            "{}: {err}",
            b.name
        );

        let key = b"big".to_vec();
        let most = MAX_REQUEST_BYTES - key.len() - ENTRY_OVERHEAD_BYTES;
        let txn = Txn::new().put(key.clone(), vec![7u8; most]);
        assert_eq!(txn.request_bytes(), MAX_REQUEST_BYTES);
        assert!(
            b.store
                .commit(txn)
                .await
                .expect("largest value")
                .committed(),
            "{}",
            b.name
        );
        let e = b.store.get(&key).await.expect("get").expect("present");
        assert_eq!(e.value.len(), most);
        let larger = b
            .store
            .commit(Txn::new().put(key.clone(), vec![7u8; 4 * most]))
            .await;
        if b.name == "redb" {
            // etcd's request size is etcd's alone: one machine's om keeps keys of any size.
            assert!(larger.expect("redb takes it").committed());
            let e = b.store.get(&key).await.expect("get").expect("present");
            assert_eq!(e.value.len(), 4 * most);
        } else {
            let err = larger.expect_err("past etcd's request size");
            assert!(
                matches!(err, StoreError::RequestTooLarge { .. }),
                "{}: {err}",
                b.name
            );
        }
        let err = b.store.get(b"").await.expect_err("empty key");
        assert!(matches!(err, StoreError::EmptyKey), "{}: {err}", b.name);
    }
}

/// A prefix of 300 keys reads back in order, page by page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_pages_in_key_order() {
    for b in both().await {
        for part in 0..3 {
            let mut txn = Txn::new();
            for i in 0..100 {
                txn = txn.put(format!("p/{:04}", part * 100 + i), "v");
            }
            b.store.commit(txn).await.expect("commit");
        }
        b.store
            .commit(Txn::new().put("q", "outside"))
            .await
            .expect("commit");
        let mut start = b"p/".to_vec();
        let mut seen = Vec::new();
        loop {
            let page = b
                .store
                .range(&start, Some(b"p0"), 128)
                .await
                .expect("range");
            seen.extend(page.entries.iter().map(|e| e.key.clone()));
            let Some(last) = page.entries.last() else {
                break;
            };
            start = last.key.clone();
            start.push(0);
            if !page.more {
                break;
            }
        }
        let want: Vec<Vec<u8>> = (0..300).map(|i| format!("p/{i:04}").into_bytes()).collect();
        assert_eq!(seen, want, "{}", b.name);
    }
}

/// What the redb store committed is there after it is reopened, revision
/// included.
#[tokio::test]
async fn redb_keeps_commits_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.redb");
    let store = MetaStore::Redb(RedbStore::open(&path).expect("open"));
    let out = store
        .commit(Txn::new().put("k", "v"))
        .await
        .expect("commit");
    drop(store);
    let store = MetaStore::Redb(RedbStore::open(&path).expect("reopen"));
    let e = store.get(b"k").await.expect("get").expect("present");
    assert_eq!(e.value, b"v");
    assert_eq!(
        Outcome::Committed {
            revision: e.mod_revision
        },
        out
    );
    assert_eq!(store.revision().await.expect("revision"), e.mod_revision);
}

/// On three etcd members, commits go on with one member killed, and what
/// was committed reads back after it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_survive_one_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = LocalEtcd::start(dir.path(), 3)
        .await
        .expect("three members");
    let store = MetaStore::Etcd(
        EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()))
            .await
            .expect("connect"),
    );
    store
        .commit(Txn::new().put("k/0", "before"))
        .await
        .expect("commit");
    etcd.kill(0).await.expect("kill");
    let mut unknown = 0;
    for i in 1..=20 {
        let key = format!("k/{i}");
        loop {
            let r = store
                .commit(
                    Txn::new()
                        .when_absent(key.clone())
                        .put(key.clone(), "during"),
                )
                .await;
            match r {
                Ok(_) => break,
                // Sent on the killed member's broken connection: read to
                // tell whether it was applied (the guard makes a retry safe).
                Err(StoreError::CommitOutcomeUnknown(_)) => unknown += 1,
                Err(e) => panic!("commit with one member down: {e}"),
            }
        }
        let e = store
            .get(key.as_bytes())
            .await
            .expect("read")
            .expect("committed");
        assert_eq!(e.value, b"during");
    }
    eprintln!("{unknown} commits of unknown outcome while a member was down");
    etcd.restart(0).await.expect("restart");
    let page = store.scan_prefix(b"k/", 100).await.expect("scan");
    assert_eq!(page.entries.len(), 21);
}
