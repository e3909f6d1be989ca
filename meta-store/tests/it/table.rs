//! Typed tables on both back ends: a `(bucket, key) -> (size, generation)`
//! table (the shape of the om's key table) scanned by bucket and paged with
//! `after`, against a BTreeMap of the same rows.

use std::collections::BTreeMap;

use meta_store::{MetaStore, Table, Txn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: Table<(String, String), (u64, u64)> = Table::new("keys");
/// A second table whose name starts with the first's: their ranges stay apart.
const KEYS_BY_TIME: Table<(u64, String), ()> = Table::new("keys_by_time");

async fn exercise(store: &MetaStore) {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut model = BTreeMap::new();
    let buckets = ["b", "b\0", "b\0x", "ba"];
    for round in 0..4 {
        let mut txn = Txn::new();
        for i in 0..30u64 {
            let bucket = buckets[rng.random_range(0..buckets.len())].to_string();
            let key = format!("k{}", rng.random_range(0..1000));
            if model.contains_key(&(bucket.clone(), key.clone())) {
                continue;
            }
            txn = KEYS.put(txn, &(bucket.clone(), key.clone()), &(i, round));
            txn = KEYS_BY_TIME.put(txn, &(round * 100 + i, key.clone()), &());
            model.insert((bucket, key), (i, round));
        }
        assert!(store.commit(txn).await.expect("commit").committed());
    }
    for bucket in buckets {
        let want: Vec<_> = model
            .iter()
            .filter(|((b, _), _)| b == bucket)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let rows = KEYS
                .scan(store, &bucket.to_string(), after.as_ref(), 7)
                .await
                .expect("scan");
            got.extend(rows.rows.iter().map(|r| (r.key.clone(), r.value)));
            after = rows.rows.last().map(|r| r.key.clone());
            if !rows.more {
                break;
            }
        }
        assert_eq!(got, want, "bucket {bucket:?}");
    }
    let whole = KEYS.scan(store, &(), None, 10_000).await.expect("scan");
    assert_eq!(whole.rows.len(), model.len());
    let row = &whole.rows[3];
    let got = KEYS.get(store, &row.key).await.expect("get").expect("row");
    assert_eq!(&got, row);
    // A guarded update on the row read commits once; the same guard again conflicts.
    let txn = KEYS.when_as_read(Txn::new(), &row.key, Some(row));
    let txn = KEYS.put(txn, &row.key, &(9, 9));
    assert!(store.commit(txn.clone()).await.expect("commit").committed());
    assert!(!store.commit(txn).await.expect("commit").committed());
}

#[tokio::test]
async fn typed_tables_scan_in_key_order_on_redb() {
    let dir = tempfile::tempdir().expect("tempdir");
    exercise(&crate::redb_store(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_tables_scan_in_key_order_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_etcd, store) = crate::etcd_store(dir.path()).await;
    exercise(&store).await;
}
