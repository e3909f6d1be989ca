//! Snapshots on both back ends: pages read one after another see the state of one revision
//! while writers delete, change and add rows; on etcd a snapshot whose history is compacted
//! fails with a typed error.

use std::collections::BTreeMap;

use meta_store::{MetaStore, StoreError, Table, Txn};

const ROWS: Table<(String, u64), u64> = Table::new("rows");

async fn exercise(store: &MetaStore) {
    let mut model = BTreeMap::new();
    let mut txn = Txn::new();
    for i in 0..60u64 {
        let key = (format!("g{}", i % 3), i);
        txn = ROWS.put(txn, &key, &i);
        model.insert(key, i);
        if i % 20 == 19 {
            assert!(
                store
                    .commit(std::mem::take(&mut txn))
                    .await
                    .expect("put")
                    .committed()
            );
        }
    }
    let snapshot = store.snapshot().await.expect("snapshot");
    assert_eq!(
        snapshot.revision(),
        store.revision().await.expect("revision")
    );
    // Between the pages of a scan: deletes, changes and new rows, in every group.
    let mut pages = Vec::new();
    let mut after: Option<(String, u64)> = None;
    let mut round = 0u64;
    loop {
        let page = ROWS
            .scan_at(&snapshot, &(), after.as_ref(), 7)
            .await
            .expect("snapshot page");
        pages.extend(page.rows.iter().map(|r| (r.key.clone(), r.value)));
        after = page.rows.last().map(|r| r.key.clone());
        let mut change = Txn::new();
        for g in 0..3 {
            let group = format!("g{g}");
            change = ROWS.delete(change, &(group.clone(), round * 3 + g));
            change = ROWS.put(change, &(group.clone(), round * 3 + g + 1), &999);
            change = ROWS.put(change, &(group, 1000 + round), &7);
        }
        assert!(store.commit(change).await.expect("change").committed());
        round += 1;
        if !page.more {
            break;
        }
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(pages, want, "every page shows the snapshot's rows");
    // Point reads and prefix scans answer at the snapshot too; the store itself has moved on.
    let gone = ("g0".to_string(), 0u64);
    assert!(ROWS.get(store, &gone).await.expect("get").is_none());
    let then = ROWS
        .get_at(&snapshot, &gone)
        .await
        .expect("get at")
        .expect("there then");
    assert_eq!(then.value, 0);
    let g1 = ROWS
        .scan_at(&snapshot, &"g1".to_string(), None, 1000)
        .await
        .expect("group");
    assert_eq!(g1.rows.len(), 20);
    assert!(g1.rows.iter().all(|r| r.value == r.key.1));
    let now = ROWS.scan(store, &(), None, 1000).await.expect("now");
    assert_ne!(now.rows.len(), model.len());
    let raw = snapshot.scan_prefix(b"rows/", 1000).await.expect("raw");
    assert_eq!(raw.revision, snapshot.revision());
    assert_eq!(raw.entries.len(), model.len());
}

#[tokio::test]
async fn a_snapshot_pages_through_one_revision_on_redb() {
    let dir = tempfile::tempdir().expect("tempdir");
    exercise(&crate::redb_store(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_pages_through_one_revision_on_etcd_until_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_etcd, store) = crate::etcd_store(dir.path()).await;
    exercise(&store).await;
    let snapshot = store.snapshot().await.expect("snapshot");
    assert!(
        store
            .commit(ROWS.put(Txn::new(), &("x".into(), 1), &1))
            .await
            .expect("put")
            .committed()
    );
    store.compact_history(0).await.expect("compact");
    let err = ROWS
        .scan_at(&snapshot, &(), None, 10)
        .await
        .expect_err("compacted");
    assert!(
        matches!(err, StoreError::Compacted { revision } if revision == snapshot.revision()),
        "{err}"
    );
    assert!(matches!(
        snapshot.get(b"rows/x").await,
        Err(StoreError::Compacted { .. })
    ));
}
