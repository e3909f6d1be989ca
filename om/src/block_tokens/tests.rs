//! The block token schedule on both stores: redb (one om) and one etcd
//! member (several oms sharing the keys).

use std::future::Future;
use std::pin::Pin;

use meta_store::local_etcd::LocalEtcd;
use meta_store::{EtcdConfig, EtcdStore, RedbStore};
use proto_crate::block_token::verify;

use redb::{ReadableDatabase, TableError};

use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn config(lifetime: Duration) -> BlockTokenConfig {
    BlockTokenConfig { lifetime }
}

fn verifies(keys: &[BlockTokenSecret], t: &BlockToken, now: u64) -> BlockTokenIdentifier {
    verify(
        keys,
        Some(t.as_bytes()),
        None,
        AccessModes::READ,
        "ListBlock",
        now,
    )
    .expect("the token verifies with the keys datanodes are sent")
}

async fn stored(store: &MetaStore) -> Vec<BlockTokenSecret> {
    KEYS.scan(store, &(), None, 100)
        .await
        .expect("scan")
        .rows
        .iter()
        .map(|r| decode_secret(&r.value).expect("decodes"))
        .collect()
}

/// A signer and an announced next key exist, and a second om (or the same
/// om reopened) on the store signs with the same keys.
async fn keys_are_made_once_and_shared(store: MetaStore) {
    let a = BlockTokenSecretManager::open(&store, config(HOUR))
        .await
        .expect("open");
    let keys = a.secrets(&store).await.expect("secrets");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let now = now_unix_ms();
    assert!(keys[0].active_from_unix_ms <= now && keys[1].active_from_unix_ms > now);
    assert_eq!(
        keys[1].active_from_unix_ms,
        keys[0].active_from_unix_ms + 3_600_000
    );
    let t = a
        .mint(TokenScope::AllBlocks, AccessModes::READ, "")
        .expect("mint");
    let id = verifies(&keys, &t, now);
    assert_eq!(id.key_id, keys[0].key_id);
    assert_eq!(id.owner, "anonymous");
    let b = BlockTokenSecretManager::open(&store, config(HOUR))
        .await
        .expect("a second om opens");
    assert_eq!(
        b.secrets(&store).await.expect("secrets"),
        keys,
        "read from the store, not made again"
    );
    assert_eq!(stored(&store).await, keys);
}

/// Two and a half lifetimes on, the first key is dropped, its successor
/// still verifies, a third signs and a fourth is announced; the store and
/// the copy agree.
async fn keys_rotate_on_schedule(store: MetaStore) {
    let m = BlockTokenSecretManager::open(&store, config(Duration::from_secs(1)))
        .await
        .expect("open");
    let first = m.secrets(&store).await.expect("secrets");
    let t0 = first[0].active_from_unix_ms;
    let later = m.rotate(&store, t0 + 2_500).await.expect("rotate");
    assert!(
        later.iter().all(|k| k.key_id != first[0].key_id),
        "{later:?}"
    );
    assert!(later.iter().any(|k| k.key_id == first[1].key_id));
    assert!(BlockTokenSecretManager::current(&later, t0 + 2_500));
    assert_eq!(*m.keys.read().expect("lock"), later);
    assert_eq!(stored(&store).await, later);
    // Nothing is due: a rotation writes nothing and keeps the keys.
    assert_eq!(m.rotate(&store, t0 + 2_500).await.expect("again"), later);
}

/// Two oms rotating at the same moment commit one set of keys, and both
/// sign with it.
async fn concurrent_rotations_agree(store: MetaStore) {
    let lifetime = Duration::from_secs(1);
    let (a, b) = tokio::join!(
        BlockTokenSecretManager::open(&store, config(lifetime)),
        BlockTokenSecretManager::open(&store, config(lifetime)),
    );
    let (a, b) = (a.expect("a opens"), b.expect("b opens"));
    let keys = stored(&store).await;
    assert_eq!(keys.len(), 2, "one signer and one next key: {keys:?}");
    assert_eq!(*a.keys.read().expect("lock"), keys);
    assert_eq!(*b.keys.read().expect("lock"), keys);
    let at = keys[0].active_from_unix_ms + 1_500;
    let (ra, rb) = tokio::join!(a.rotate(&store, at), b.rotate(&store, at));
    let (ra, rb) = (ra.expect("a rotates"), rb.expect("b rotates"));
    assert_eq!(ra, rb);
    assert_eq!(stored(&store).await, ra);
    assert_eq!(ra.len(), 3, "last signer, signer, next: {ra:?}");
}

/// An om whose copy missed another om's rotation still signs tokens the
/// new key set verifies, and picks up the new key at its next rotation.
async fn a_stale_copy_signs_valid_tokens(store: MetaStore) {
    let lifetime = Duration::from_secs(2);
    let a = BlockTokenSecretManager::open(&store, config(lifetime))
        .await
        .expect("a");
    let b = BlockTokenSecretManager::open(&store, config(lifetime))
        .await
        .expect("b");
    let before = b.keys.read().expect("lock").clone();
    // `a` rotates as if the announced key had started signing.
    let at = before[1].active_from_unix_ms;
    let after = a.rotate(&store, at).await.expect("rotate");
    assert_eq!(after.len(), 3, "{after:?}");
    // At the switch-over `b`'s copy lacks the key `a` just announced, and
    // signs with the one that starts now: datanodes sent `after` accept it.
    let t = b
        .mint_at(TokenScope::AllBlocks, AccessModes::READ, "", at + 1)
        .expect("b signs from its copy");
    assert_eq!(verifies(&after, &t, at + 1).key_id, before[1].key_id);
    b.rotate(&store, now_unix_ms()).await.expect("b rotates");
    assert_eq!(*b.keys.read().expect("lock"), after, "b re-read the store");
}

/// An om whose clock runs behind the one that made the keys finds none
/// active yet: it signs with the first of them and adds none of its own.
async fn a_slower_clock_uses_the_keys_it_finds(store: MetaStore) {
    let m = BlockTokenSecretManager::open(&store, config(HOUR))
        .await
        .expect("open");
    let keys = stored(&store).await;
    let behind = keys[0].active_from_unix_ms - 5;
    let b = BlockTokenSecretManager {
        lifetime_ms: m.lifetime_ms,
        keys: RwLock::new(Vec::new()),
        rotations: tokio::sync::Mutex::new(()),
    };
    assert_eq!(b.rotate(&store, behind).await.expect("rotate"), keys);
    assert_eq!(stored(&store).await, keys, "nothing added");
    assert_eq!(signer(&keys, behind), Some(&keys[0]));
}

/// A store that went back (restored from a snapshot) is what the om signs
/// with after its next rotation, not the newer keys it had read before.
async fn a_store_that_went_back_is_followed(store: MetaStore) {
    let lifetime = Duration::from_secs(1);
    let m = BlockTokenSecretManager::open(&store, config(lifetime))
        .await
        .expect("open");
    let snapshot = stored(&store).await;
    let t0 = snapshot[0].active_from_unix_ms;
    let later = m.rotate(&store, t0 + 1_500).await.expect("rotate");
    assert!(later.last().map(|k| k.key_id) > snapshot.last().map(|k| k.key_id));
    // The restore: the later keys go, the snapshot's come back.
    let mut restore = meta_store::Txn::new();
    for k in &later {
        match snapshot.iter().find(|s| s.key_id == k.key_id) {
            Some(s) => restore = KEYS.put(restore, &s.key_id, &encode_secret(s)),
            None => restore = KEYS.delete(restore, &k.key_id),
        }
    }
    for k in snapshot
        .iter()
        .filter(|s| later.iter().all(|l| l.key_id != s.key_id))
    {
        restore = KEYS.put(restore, &k.key_id, &encode_secret(k));
    }
    store.commit(restore).await.expect("restore");
    let back = m.rotate(&store, t0 + 500).await.expect("rotate");
    assert_eq!(back, snapshot);
    assert_eq!(*m.keys.read().expect("lock"), snapshot, "the copy follows");
}

type Case = fn(MetaStore) -> Pin<Box<dyn Future<Output = ()> + Send>>;

const CASES: [(&str, Case); 6] = [
    ("keys_are_made_once_and_shared", |s| {
        Box::pin(keys_are_made_once_and_shared(s))
    }),
    ("keys_rotate_on_schedule", |s| {
        Box::pin(keys_rotate_on_schedule(s))
    }),
    ("concurrent_rotations_agree", |s| {
        Box::pin(concurrent_rotations_agree(s))
    }),
    ("a_stale_copy_signs_valid_tokens", |s| {
        Box::pin(a_stale_copy_signs_valid_tokens(s))
    }),
    ("a_slower_clock_uses_the_keys_it_finds", |s| {
        Box::pin(a_slower_clock_uses_the_keys_it_finds(s))
    }),
    ("a_store_that_went_back_is_followed", |s| {
        Box::pin(a_store_that_went_back_is_followed(s))
    }),
];

/// The newest key whose signing began signs; an expired one never does.
#[test]
fn the_signer_is_the_newest_live_active_key() {
    let key = |key_id, active_from_unix_ms: u64| BlockTokenSecret {
        key_id,
        secret: [key_id as u8; SECRET_LEN],
        active_from_unix_ms,
        expires_unix_ms: active_from_unix_ms + 2_000,
    };
    let keys = [key(1, 1_000), key(2, 2_000), key(3, 3_000)];
    assert_eq!(signer(&keys, 2_500).map(|k| k.key_id), Some(2));
    assert_eq!(signer(&keys, 3_000).map(|k| k.key_id), Some(3));
    assert_eq!(
        signer(&keys, 500).map(|k| k.key_id),
        Some(1),
        "clock behind"
    );
    assert_eq!(signer(&keys, 5_000), None, "all expired");
    assert_eq!(
        signer(&keys[..1], 3_000),
        None,
        "a key is expired at its expiry"
    );
}

#[tokio::test]
async fn schedule_on_redb() {
    for (name, case) in CASES {
        let dir = tempfile::tempdir().expect("dir");
        let store = RedbStore::open(&dir.path().join("t.redb")).expect("redb");
        eprintln!("case {name} on redb");
        case(MetaStore::Redb(store)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_on_etcd() {
    let dir = tempfile::tempdir().expect("dir");
    let etcd = LocalEtcd::start(dir.path(), 1)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    for (i, (name, case)) in CASES.into_iter().enumerate() {
        let store = EtcdStore::connect(
            &EtcdConfig::new(etcd.endpoints()).with_namespace(format!("/bt/{i}")),
        )
        .await
        .expect("etcd store");
        eprintln!("case {name} on etcd");
        case(MetaStore::Etcd(store)).await;
    }
}

#[tokio::test]
async fn a_copy_with_no_live_key_refuses_to_sign() {
    let dir = tempfile::tempdir().expect("dir");
    let store = MetaStore::Redb(RedbStore::open(&dir.path().join("t.redb")).expect("redb"));
    let m = BlockTokenSecretManager::open(&store, config(Duration::from_secs(1)))
        .await
        .expect("open");
    for k in m.keys.write().expect("lock").iter_mut() {
        k.expires_unix_ms = 1;
    }
    let err = m
        .mint(TokenScope::AllBlocks, AccessModes::READ, "")
        .expect_err("every key expired");
    assert!(matches!(err, OmError::Internal(_)), "{err}");
}

#[tokio::test]
async fn a_lifetime_below_the_minimum_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let store = MetaStore::Redb(RedbStore::open(&dir.path().join("t.redb")).expect("redb"));
    let err = BlockTokenSecretManager::open(&store, config(Duration::from_millis(10)))
        .await
        .expect_err("too short");
    assert!(matches!(err, OmError::InvalidArgument(_)), "{err}");
    assert!(stored(&store).await.is_empty(), "nothing written");
}

/// Keys of an `om.redb` from before the store are moved into it at open,
/// once, and keep signing.
#[tokio::test]
async fn keys_in_the_old_table_move_onto_the_store() {
    let dir = tempfile::tempdir().expect("dir");
    let db = std::sync::Arc::new(Database::create(dir.path().join("om.redb")).expect("db"));
    let lifetime = Duration::from_secs(3600);
    let old = {
        let m = BlockTokenSecretManager {
            lifetime_ms: 3_600_000,
            keys: RwLock::new(Vec::new()),
            rotations: tokio::sync::Mutex::new(()),
        };
        let now = now_unix_ms();
        let keys = m.plan(&[], now).expect("a first start adds keys").added;
        let txn = db.begin_write().expect("txn");
        {
            let mut t = txn.open_table(OLD_KEYS).expect("table");
            for k in &keys {
                t.insert(k.key_id, encode_secret(k).as_slice())
                    .expect("insert");
            }
        }
        txn.commit().expect("commit");
        keys
    };
    let own = RedbStore::with_database(std::sync::Arc::clone(&db)).expect("store");
    let store = MetaStore::Redb(own.clone());
    move_onto_store(&db, Some(&own)).expect("move");
    move_onto_store(&db, Some(&own)).expect("a second open finds nothing to move");
    let read = db.begin_read().expect("read");
    assert!(matches!(
        read.open_table(OLD_KEYS),
        Err(TableError::TableDoesNotExist(_))
    ));
    let m = BlockTokenSecretManager::open(&store, config(lifetime))
        .await
        .expect("open");
    assert_eq!(
        m.secrets(&store).await.expect("secrets"),
        old,
        "kept, not made anew"
    );
}
