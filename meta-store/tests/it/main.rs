//! The integration tests of this crate, in one binary: each module is one
//! area (its own doc comment says what it covers). One binary instead of one
//! per file links the cluster, the transport and TLS once rather than dozens
//! of times, which is most of a fresh `cargo test`'s time and disk.

mod conformance;
mod election;
mod secure;
mod snapshot;
mod space;
mod table;
mod transaction;

/// A fresh redb store in `dir`.
fn redb_store(dir: &std::path::Path) -> meta_store::MetaStore {
    meta_store::MetaStore::Redb(meta_store::RedbStore::open(&dir.join("m.redb")).expect("open"))
}

/// One etcd member started under `dir`, and a store on it (default namespace).
async fn etcd_store(
    dir: &std::path::Path,
) -> (meta_store::local_etcd::LocalEtcd, meta_store::MetaStore) {
    let etcd = meta_store::local_etcd::LocalEtcd::start(dir, 1)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    let store = meta_store::EtcdStore::connect(&meta_store::EtcdConfig::new(etcd.endpoints()))
        .await
        .expect("connect");
    (etcd, meta_store::MetaStore::Etcd(store))
}
