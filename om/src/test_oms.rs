//! Test support: an om on each metadata store back end, so that the
//! operation-level tests of the modules already on the store run on redb
//! (the om's own file) and on a real etcd member alike.

use meta_store::local_etcd::LocalEtcd;
use meta_store::{EtcdConfig, EtcdStore, MetaStore};

use crate::{OmConfig, OzoneManager};

/// Where the moved modules keep their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The om's own `om.redb`.
    Redb,
    /// One local etcd member (the `etcd` binary of the distribution).
    Etcd,
}

/// Every back end, in the order tests run them.
pub(crate) const BACKENDS: [Backend; 2] = [Backend::Redb, Backend::Etcd];

/// An om in a temporary data dir, with its etcd member when on etcd
/// (fields drop in order: the om, then etcd, then the directory).
pub(crate) struct TestOm {
    pub(crate) om: OzoneManager,
    shared: Option<MetaStore>,
    kept: Kept,
}

/// What outlives an om split off a [`TestOm`]: its etcd member and its
/// directory.
pub(crate) struct Kept {
    _etcd: Option<LocalEtcd>,
    dir: tempfile::TempDir,
}

impl TestOm {
    /// Opens a fresh om on `backend`.
    pub(crate) async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |c| c).await
    }

    /// [`start`](Self::start) with `config` applied to the om's settings.
    pub(crate) async fn start_with(
        backend: Backend,
        config: impl FnOnce(OmConfig) -> OmConfig,
    ) -> Self {
        eprintln!("om on {backend:?}");
        let dir = tempfile::tempdir().expect("temp dir");
        let (shared, etcd) = match backend {
            Backend::Redb => (None, None),
            Backend::Etcd => {
                let (store, etcd) = etcd_store(dir.path()).await;
                (Some(store), Some(etcd))
            }
        };
        let om =
            OzoneManager::open_on(config(OmConfig::new(dir.path().join("om"))), shared.clone())
                .await
                .expect("open the om");
        Self {
            om,
            shared,
            kept: Kept { _etcd: etcd, dir },
        }
    }

    /// Stops the om and opens it again on the same data dir and store.
    pub(crate) async fn restart(self) -> Self {
        let Self { om, shared, kept } = self;
        drop(om);
        let om = OzoneManager::open_on(OmConfig::new(kept.dir.path().join("om")), shared.clone())
            .await
            .expect("reopen the om");
        Self { om, shared, kept }
    }

    /// A second om on this one's store, in a data dir of its own, with `config` applied (an
    /// etcd store only: a redb file has one om).
    pub(crate) async fn another(&self, config: impl FnOnce(OmConfig) -> OmConfig) -> OzoneManager {
        let shared = self
            .shared
            .clone()
            .expect("another om needs a shared (etcd) store");
        OzoneManager::open_on(
            config(OmConfig::new(self.kept.dir.path().join("om-2"))),
            Some(shared),
        )
        .await
        .expect("open another om")
    }

    /// The etcd store this om is on (an etcd test om only).
    pub(crate) fn shared_store(&self) -> MetaStore {
        self.shared.clone().expect("an etcd store")
    }

    /// Moves the om out (to share it between tasks); the returned [`Kept`]
    /// keeps its etcd member and directory until it is dropped.
    pub(crate) fn split(self) -> (OzoneManager, Kept) {
        (self.om, self.kept)
    }
}

/// A bare store on `backend` (a fresh redb file, or a fresh etcd member),
/// for tests of a module's storage functions.
pub(crate) async fn store_on(backend: Backend) -> (MetaStore, Kept) {
    eprintln!("store on {backend:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    match backend {
        Backend::Redb => {
            let store = meta_store::RedbStore::open(&dir.path().join("meta.redb")).expect("redb");
            (MetaStore::Redb(store), Kept { _etcd: None, dir })
        }
        Backend::Etcd => {
            let (store, etcd) = etcd_store(dir.path()).await;
            (
                store,
                Kept {
                    _etcd: Some(etcd),
                    dir,
                },
            )
        }
    }
}

async fn etcd_store(dir: &std::path::Path) -> (MetaStore, LocalEtcd) {
    let etcd = LocalEtcd::start(&dir.join("etcd"), 1)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    let store = EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()))
        .await
        .expect("etcd store");
    (MetaStore::Etcd(store), etcd)
}

impl std::ops::Deref for TestOm {
    type Target = OzoneManager;
    fn deref(&self) -> &OzoneManager {
        &self.om
    }
}

/// An om opened on `dir` with five datanodes registered (uuids 0..5, ports 10000..10005):
/// enough for the default rs-3-2 allocations of the tests.
pub(crate) async fn with_five_datanodes(dir: &std::path::Path) -> OzoneManager {
    let om = OzoneManager::open(OmConfig::new(dir)).await.expect("open");
    register_five(&om).await;
    om
}

/// Registers five datanodes (uuids 0..5, ports 10000..10005) with `om`.
pub(crate) async fn register_five(om: &OzoneManager) {
    for i in 0..5 {
        om.register_datanode(proto_crate::DatanodeDetails {
            uuid: proto_crate::DatanodeId::from_u128(i),
            address: format!("127.0.0.1:{}", 10_000 + i),
        })
        .await
        .expect("register");
    }
}

/// Writes part `n` of `upload` as one group of `len` bytes with ETag `etag`; returns the
/// group.
pub(crate) async fn commit_part(
    om: &OzoneManager,
    upload: &str,
    n: u32,
    len: u64,
    etag: &str,
) -> proto_crate::BlockGroup {
    let s = om.open_part(upload, n).await.expect("open part");
    let g = om
        .allocate_block_group(s.session_id, &[])
        .await
        .expect("allocate");
    let g = proto_crate::BlockGroup { length: len, ..g };
    om.commit_part(s.session_id, std::slice::from_ref(&g), len, etag)
        .await
        .expect("commit part");
    g
}
