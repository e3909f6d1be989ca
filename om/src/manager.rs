//! [`OzoneManager`]: the metadata service as an in-process library.
//!
//! Holds the datanode registry (SCM's role) and buckets and keys (OM's role)
//! as rows of the metadata store (`tables.rs`; redb in the om's own
//! `om.redb`, or etcd), every change one guarded transaction; open-key
//! sessions are rows with their allocated groups and leases (`session_rows.rs`: a key
//! being written when the om restarts is written on after it, through any om that shares
//! the store, and never half-visible). Keys become
//! visible only at commit, as in Ozone's open-key / allocate / commit flow.
//! Sessions are in `sessions.rs`, the registry's liveness in `nodes.rs`,
//! block deletion in `deletion.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;
use proto_crate::{BlockGroup, DatanodeDetails, DatanodeId, DirLock, ReplicationConfig};
use redb::Database;

use crate::OmError;
use crate::clock::{Clock, SystemClock};
use crate::nodes::{DatanodeStatus, Liveness, NodeRegistry, NodeStats};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Blocks placed in one container before the om opens a new one on the same
/// pipeline (a stand-in for Ozone's 5 GB container size).
pub(crate) const BLOCKS_PER_CONTAINER: u32 = 1000;

/// Default open-key lease (`--open-key-lease`): 1 h.
pub const DEFAULT_OPEN_KEY_LEASE: Duration = Duration::from_secs(3600);
/// Default most open sessions of one client.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 1024;
/// Default interval of the om's background services (lease expiry, retries
/// of block deletion): 5 s.
pub const DEFAULT_SERVICE_INTERVAL: Duration = Duration::from_secs(5);
/// Default delay between freeing a block and deleting it (`--deletion-grace`): 60 s.
pub const DEFAULT_DELETION_GRACE: Duration = Duration::from_secs(60);

/// Settings of an om.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OmConfig {
    /// Where the database lives.
    pub data_dir: PathBuf,
    /// Replication of buckets created without one (default `rs-3-2-1024k`).
    pub default_replication: ReplicationConfig,
    /// Internal block size of buckets created without one (default 256 MiB).
    pub default_block_size: u64,
    /// Stale and dead intervals of datanode liveness (default 30 s / 90 s).
    pub liveness: Liveness,
    /// An open session unused (no allocation) for this long is aborted and
    /// its blocks reclaimed (default [`DEFAULT_OPEN_KEY_LEASE`]).
    pub open_key_lease: Duration,
    /// Most sessions one client (by client id) holds open at once (default
    /// [`DEFAULT_MAX_SESSIONS_PER_CLIENT`]).
    pub max_sessions_per_client: usize,
    /// How often the background services run at the latest (default
    /// [`DEFAULT_SERVICE_INTERVAL`]); block deletion also runs as soon as
    /// the deletion log grows.
    pub service_interval: Duration,
    /// How long a freed block is kept before the deleting service sends its
    /// deletion (default [`DEFAULT_DELETION_GRACE`]): a reader that opened
    /// the key before it was overwritten or deleted can finish.
    pub deletion_grace: Duration,
    /// The clock of leases, liveness and the full-scan interval (default [`SystemClock`]).
    pub clock: Arc<dyn Clock>,
    /// Limits of the ReplicationManager's repairs.
    pub repair: crate::RepairConfig,
    /// Longest time between two full ReplicationManager scans while nothing it watches
    /// changes (default [`crate::DEFAULT_FULL_SCAN_INTERVAL`]), measured on
    /// [`OmConfig::clock`]: a key committed after a clean scan onto a datanode that has
    /// changed state since its placement, or a block absent from a datanode's report taken
    /// before the block was written, waits at most this long. [`Duration::ZERO`]: every pass
    /// scans.
    pub full_scan_interval: Duration,
    /// Security (`--security`): block tokens with every block location
    /// handed out, checked by datanodes that run with security too. `None`
    /// (the default): no tokens.
    pub block_tokens: Option<crate::BlockTokenConfig>,
    /// TLS (`--tls-ca`, `--tls-cert`, `--tls-key`): the om serves over TLS
    /// with this certificate, answers `RegisterDatanode`, `Heartbeat` and
    /// `BlockReport` only to peers presenting a certificate the CA signed
    /// (mutual TLS), and dials datanodes over TLS. `None` (the default):
    /// plaintext.
    pub tls: Option<proto_crate::tls::TlsConfig>,
}

impl OmConfig {
    /// Defaults (rs-3-2-1024k, 256 MiB blocks) storing under `data_dir`.
    #[must_use]
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            default_replication: ReplicationConfig::default(),
            default_block_size: 256 * 1024 * 1024,
            liveness: Liveness::default(),
            open_key_lease: DEFAULT_OPEN_KEY_LEASE,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            service_interval: DEFAULT_SERVICE_INTERVAL,
            deletion_grace: DEFAULT_DELETION_GRACE,
            clock: Arc::new(SystemClock),
            repair: crate::RepairConfig::default(),
            full_scan_interval: crate::DEFAULT_FULL_SCAN_INTERVAL,
            block_tokens: None,
            tls: None,
        }
    }

    /// Turns security on: block tokens as `tokens` says.
    #[must_use]
    pub fn with_security(mut self, tokens: crate::BlockTokenConfig) -> Self {
        self.block_tokens = Some(tokens);
        self
    }

    /// Turns TLS on with `tls` (which must hold the om's own certificate to
    /// serve; see [`OmConfig::tls`]).
    #[must_use]
    pub fn with_tls(mut self, tls: proto_crate::tls::TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets the ReplicationManager's limits.
    #[must_use]
    pub fn with_repair(mut self, repair: crate::RepairConfig) -> Self {
        self.repair = repair;
        self
    }

    /// Sets the longest time between two full ReplicationManager scans.
    #[must_use]
    pub fn with_full_scan_interval(mut self, interval: Duration) -> Self {
        self.full_scan_interval = interval;
        self
    }

    /// Sets the clock of leases and liveness (tests: a [`crate::ManualClock`]).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets how long freed blocks wait before they are deleted.
    #[must_use]
    pub fn with_deletion_grace(mut self, grace: Duration) -> Self {
        self.deletion_grace = grace;
        self
    }

    /// Sets the stale and dead intervals of datanode liveness.
    #[must_use]
    pub fn with_liveness(mut self, stale_after: Duration, dead_after: Duration) -> Self {
        self.liveness = Liveness {
            stale_after,
            dead_after,
        };
        self
    }

    /// Sets the open-key lease.
    #[must_use]
    pub fn with_open_key_lease(mut self, lease: Duration) -> Self {
        self.open_key_lease = lease;
        self
    }

    /// Sets the most open sessions per client.
    #[must_use]
    pub fn with_max_sessions_per_client(mut self, n: usize) -> Self {
        self.max_sessions_per_client = n;
        self
    }

    /// Sets the background services' interval.
    #[must_use]
    pub fn with_service_interval(mut self, interval: Duration) -> Self {
        self.service_interval = interval;
        self
    }

    /// Sets the default internal block size, bytes.
    #[must_use]
    pub fn with_default_block_size(mut self, bytes: u64) -> Self {
        self.default_block_size = bytes;
        self
    }

    /// Sets the default replication.
    #[must_use]
    pub fn with_default_replication(mut self, r: ReplicationConfig) -> Self {
        self.default_replication = r;
        self
    }
}

/// What an open session commits into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionTarget {
    /// A key (`commit_key`).
    Key,
    /// A part of a multipart upload (`commit_part`).
    Part { upload_id: String, part_number: u32 },
}

/// An open session as its row holds it (`session_rows.rs`).
#[derive(Debug)]
pub(crate) struct OpenKeySession {
    /// The client that opened it (bounded per client).
    pub(crate) client: String,
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) replication: ReplicationConfig,
    pub(crate) block_size: u64,
    pub(crate) allocated: Vec<BlockGroup>,
    pub(crate) target: SessionTarget,
}

/// The om's in-memory state. Bounds: one registry entry per datanode; one open container
/// per pipeline (datanode set) used. (Open sessions are rows, bounded per client and in all,
/// `sessions.rs`.)
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) nodes: NodeRegistry,
    pub(crate) allocations: u64,
    /// Open container per pipeline (its datanodes in location order) and the blocks it holds.
    pub(crate) open_containers: HashMap<Vec<DatanodeId>, (u64, u32)>,
    /// Datanodes not in service (decommissioning or decommissioned).
    pub(crate) op_states: std::collections::BTreeMap<DatanodeId, crate::OperationalState>,
    /// The stored `op_states_version` that `op_states` was read at (`decommission.rs`).
    pub(crate) op_states_version: u64,
}

/// What an opened key session tells the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenKey {
    /// Id to allocate groups and commit with.
    pub session_id: u64,
    /// Replication of the key.
    pub replication: ReplicationConfig,
    /// Internal block size, bytes.
    pub block_size: u64,
}

/// The metadata service.
#[derive(Debug)]
pub struct OzoneManager {
    pub(crate) config: OmConfig,
    /// The metadata store over the same file (`meta_kv` beside the tables
    /// above): the modules that have moved onto it keep their rows here
    /// (S3 users and keys so far; ARCHITECTURE.md, "Moving the om onto the
    /// store").
    pub(crate) store: meta_store::MetaStore,
    /// The cluster id kept in `store` (`cluster_id.rs`).
    cluster_id: String,
    state: Mutex<State>,
    /// Block and container ids reserved for this om (`sessions.rs`).
    pub(crate) id_ranges: Mutex<crate::sessions::IdRanges>,
    /// Open sessions as last counted (`sessions.rs`, [`Self::open_sessions`]).
    pub(crate) sessions_open: tokio::sync::watch::Sender<u64>,
    /// When [`Self::sessions_open`] was last counted from the rows.
    pub(crate) sessions_counted: Mutex<Option<Instant>>,
    /// Sessions this om opened or ended, published on each.
    pub(crate) session_changes: tokio::sync::watch::Sender<u64>,
    /// When this om opened, unix ms on its clock: no lease it judges runs out before one
    /// lease after this (a writer could not renew while no om served).
    pub(crate) opened_wall_ms: u64,
    /// Entries in the deletion log, published on every change.
    pub(crate) deletions_pending: tokio::sync::watch::Sender<u64>,
    /// Registrations and heartbeats received, published on each.
    pub(crate) heartbeats: tokio::sync::watch::Sender<u64>,
    /// Registrations, heartbeats and block reports refused because the
    /// datanode belongs to another cluster (`cluster_id.rs`).
    pub(crate) other_cluster_refusals: tokio::sync::watch::Sender<u64>,
    /// Lease renewals received, published on each.
    pub(crate) renewals: tokio::sync::watch::Sender<u64>,
    /// Multipart uploads in progress, published after every change.
    pub(crate) uploads_open: tokio::sync::watch::Sender<u64>,
    /// Wakes the block deleting service when the log grows.
    pub(crate) deletion_wakeup: Arc<tokio::sync::Notify>,
    /// The ReplicationManager's state.
    pub(crate) repair: crate::replication_manager::RepairState,
    /// The datanodes' last block reports and what checking them found.
    pub(crate) block_reports: Arc<crate::block_reports::BlockReports>,
    /// Serialises this om's operational-state changes and reloads, so a
    /// reload never installs a read older than a change made here.
    pub(crate) op_state_writes: tokio::sync::Mutex<()>,
    /// Serialises this om's registrations (store, then memory).
    registry_writes: tokio::sync::Mutex<()>,
    /// Block token secrets, with security on.
    pub(crate) tokens: Option<crate::block_tokens::BlockTokenSecretManager>,
    /// Whether this om runs the store-wide background services (`service_lead.rs`).
    pub(crate) lead: crate::service_lead::ServiceLead,
    /// Exclusive ownership of the data dir; released with the om.
    _lock: DirLock,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn decode<M: Message + Default, T: TryFrom<M, Error = proto_crate::ProtocolError>>(
    bytes: &[u8],
    what: &str,
) -> Result<T> {
    let corrupt = |source: Box<dyn std::error::Error + Send + Sync>| OmError::CorruptRecord {
        what: what.to_string(),
        source,
    };
    let m = M::decode(bytes).map_err(|e| corrupt(Box::new(e)))?;
    T::try_from(m).map_err(|e| corrupt(Box::new(e)))
}

/// Refuses replication the om does not place: a replicated factor other than 1 (`ONE`) or 3
/// (`THREE`), as Ozone's RATIS replication offers (EC schemes are checked when parsed).
pub(crate) fn check_replication(r: &ReplicationConfig) -> Result<()> {
    match r {
        ReplicationConfig::Replicated { factor } if *factor != 1 && *factor != 3 => {
            Err(OmError::InvalidArgument(format!(
                "replication factor {factor} is not offered: ONE or THREE"
            )))
        }
        _ => Ok(()),
    }
}

pub(crate) fn validate_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(OmError::InvalidArgument(format!("{kind} name is empty")));
    }
    if name.len() > 1024 || name.contains('\0') {
        return Err(OmError::InvalidArgument(format!(
            "{kind} name must be at most 1024 bytes and contain no NUL"
        )));
    }
    Ok(())
}

impl OzoneManager {
    /// Opens (or creates) the om's database under `config.data_dir`, taking
    /// the directory's lock, and loads the datanode registry and the open
    /// sessions (each lease starting again, `session_rows.rs`). A file from
    /// before the metadata store has its tables moved into it first
    /// (`old_layout.rs`).
    ///
    /// The redb work at open (creating the file, moving old tables) runs on
    /// the caller's thread.
    ///
    /// # Errors
    /// [`OmError::DataDirInUse`] when another process owns the directory;
    /// I/O, database and store errors.
    pub async fn open(config: OmConfig) -> Result<Self> {
        Self::open_on(config, None).await
    }

    /// [`open`](Self::open) as one of several oms serving the etcd metadata store `store`
    /// at once (`service_lead.rs`): every row is kept there, every om serves every call,
    /// and the background services run only where [`crate::lead_services`] (which the
    /// caller runs beside the om's server) has won the lead. The om's own `om.redb` under
    /// the data directory must hold no rows (a new directory).
    ///
    /// # Errors
    /// As [`open`](Self::open); [`OmError::Internal`] for `om.redb` with rows of its own.
    pub async fn open_shared(config: OmConfig, store: &meta_store::MetaStore) -> Result<Self> {
        Self::open_on(config, Some(store.clone())).await
    }

    /// [`open`](Self::open), keeping every row in `shared` instead of the
    /// om's own file when given (then one of several oms on it, running the
    /// background services only when elected: [`open_shared`](Self::open_shared)).
    ///
    /// # Errors
    /// As [`open`](Self::open); [`OmError::Internal`] when `om.redb` holds
    /// rows of its own (in an old table, or in its own store's table): they
    /// are copied only into the om's own file.
    pub(crate) async fn open_on(
        config: OmConfig,
        shared: Option<meta_store::MetaStore>,
    ) -> Result<Self> {
        check_replication(&config.default_replication)?;
        // Acquiring may wait (at most `FORK_WINDOW_WAIT`) for a forked child's copy of the
        // lock to close: off the async threads.
        let dir = config.data_dir.clone();
        let lock = tokio::task::spawn_blocking(move || DirLock::acquire(&dir, "om"))
            .await?
            .map_err(|e| match e {
                proto_crate::DirLockError::InUse { .. } => OmError::DataDirInUse(e.to_string()),
                other => OmError::DataDirLock(other),
            })?;
        let db_path = config.data_dir.join("om.redb");
        let db = Arc::new(Database::create(&db_path)?);
        // The database holds secrets (block-token keys, S3 secret keys): the
        // om's user only.
        std::fs::set_permissions(
            &db_path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .map_err(|e| OmError::Internal(format!("restricting {}: {e}", db_path.display())))?;
        // Old tables are copied into the om's own file only.
        let own = meta_store::RedbStore::with_database(Arc::clone(&db))?;
        let shared_store = shared.clone();
        let (store, own) = match shared {
            // Rows the om's own file already holds would be stranded.
            Some(_) if !own.is_empty()? => {
                return Err(OmError::Internal(
                    "om.redb holds metadata-store rows of its own; this om cannot open on \
                     another store"
                        .into(),
                ));
            }
            Some(store) => (store, None),
            None => (meta_store::MetaStore::Redb(own.clone()), Some(own)),
        };
        crate::s3_users::move_onto_store(&db, own.as_ref())?;
        crate::block_tokens::move_onto_store(&db, own.as_ref())?;
        crate::decommission::move_onto_store(&db, own.as_ref())?;
        crate::registrations::move_onto_store(&db, own.as_ref())?;
        crate::old_layout::move_onto_store(&db, own.as_ref())?;
        let now = config.clock.now();
        let opened_wall_ms = crate::clock::unix_ms(config.clock.wall());
        let sessions = crate::session_rows::index_unleased(&store, opened_wall_ms).await?;
        if sessions > 0 {
            tracing::info!(
                sessions,
                "open writes resume; none expires before one lease from now"
            );
        }
        let (op_states, op_states_version) = crate::decommission::load(&store).await?;
        let mut state = State {
            op_states,
            op_states_version,
            ..State::default()
        };
        for d in crate::registrations::load(&store).await? {
            state.nodes.load(d, now);
        }
        let tokens = match config.block_tokens {
            Some(c) => Some(crate::block_tokens::BlockTokenSecretManager::open(&store, c).await?),
            None => None,
        };
        let cluster_id = crate::cluster_id::load_or_create(&store).await?;
        let om = Self {
            tokens,
            cluster_id,
            config,
            store,
            state: Mutex::new(state),
            id_ranges: Mutex::default(),
            sessions_open: tokio::sync::watch::Sender::new(sessions as u64),
            sessions_counted: Mutex::new(Some(now)),
            session_changes: tokio::sync::watch::Sender::new(0),
            opened_wall_ms,
            lead: match &shared_store {
                Some(store) => crate::service_lead::ServiceLead::elected(store.clone()),
                None => crate::service_lead::ServiceLead::Sole,
            },
            deletions_pending: tokio::sync::watch::Sender::new(0),
            heartbeats: tokio::sync::watch::Sender::new(0),
            other_cluster_refusals: tokio::sync::watch::Sender::new(0),
            renewals: tokio::sync::watch::Sender::new(0),
            uploads_open: tokio::sync::watch::Sender::new(0),
            deletion_wakeup: Arc::new(tokio::sync::Notify::new()),
            repair: crate::replication_manager::RepairState::default(),
            block_reports: Arc::default(),
            op_state_writes: tokio::sync::Mutex::new(()),
            registry_writes: tokio::sync::Mutex::new(()),
            _lock: lock,
        };
        om.publish_pending_deletions().await;
        om.publish_uploads().await;
        Ok(om)
    }

    /// The om's own redb file, when its store is that file (tests look at its tables).
    #[cfg(test)]
    pub(crate) fn own_file(&self) -> Arc<Database> {
        match &self.store {
            meta_store::MetaStore::Redb(r) => Arc::clone(r.database()),
            meta_store::MetaStore::Etcd(_) => panic!("the om's store is etcd"),
        }
    }

    /// The cluster id (`CID-` and 32 hex digits), made with the metadata
    /// store and the same on every om that shares it; datanodes of another
    /// cluster are refused (Ozone's clusterID).
    #[must_use]
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The om's settings.
    #[must_use]
    pub fn config(&self) -> &OmConfig {
        &self.config
    }

    /// Settings of the om's own datanode clients (replica copies): the
    /// defaults, over TLS when the om has it.
    pub(crate) fn xceiver_config(&self) -> block_stream::XceiverConfig {
        block_stream::XceiverConfig::default().with_tls(self.config.tls.clone())
    }

    /// The directory holding the database.
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds or updates (same uuid, new address) a datanode in the registry
    /// and counts it as heard from now. An entry of another uuid at the same
    /// address is replaced (one entry per address).
    ///
    /// # Errors
    /// Store errors.
    pub async fn register_datanode(&self, d: DatanodeDetails) -> Result<()> {
        self.heard_from(&d, None).await
    }

    /// Records a heartbeat of `d` with its usage figures; registers `d` if
    /// the om does not know it at this address (a heartbeat of a known
    /// datanode touches memory only).
    ///
    /// # Errors
    /// Store errors.
    pub async fn heartbeat(&self, d: &DatanodeDetails, stats: NodeStats) -> Result<()> {
        self.heard_from(d, Some(stats)).await
    }

    async fn heard_from(&self, d: &DatanodeDetails, stats: Option<NodeStats>) -> Result<()> {
        let known = {
            let mut st = self.state();
            let known = st.nodes.knows(d);
            if known {
                st.nodes.upsert(d, stats, self.config.clock.now());
            }
            known
        };
        if !known {
            // Registrations are recorded one at a time, and memory updated
            // before the next, so memory and store agree whatever
            // registrations run at once (they are rare).
            let _writes = self.registry_writes.lock().await;
            if !self.state().nodes.knows(d) {
                for uuid in crate::registrations::record(&self.store, d).await? {
                    tracing::info!(old = %uuid, datanode = %d, "a new datanode id took over an address; replacing the old entry");
                }
                tracing::info!(datanode = %d, "datanode registered");
            }
            self.state().nodes.upsert(d, stats, self.config.clock.now());
        }
        self.heartbeats.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Every registered datanode with its liveness state, in uuid order.
    #[must_use]
    pub fn datanode_statuses(&self) -> Vec<DatanodeStatus> {
        let st = self.state();
        let mut all = st
            .nodes
            .statuses(self.config.clock.now(), self.config.liveness);
        for s in &mut all {
            s.op_state = st
                .op_states
                .get(&s.details.uuid)
                .copied()
                .unwrap_or_default();
        }
        all
    }

    /// A receiver of the number of registrations and heartbeats received
    /// (to wait for the next round of reports without polling).
    #[must_use]
    pub fn watch_heartbeats(&self) -> tokio::sync::watch::Receiver<u64> {
        self.heartbeats.subscribe()
    }

    /// A receiver of the number of lease renewals (`RenewKey`) received.
    #[must_use]
    pub fn watch_renewals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.renewals.subscribe()
    }

    /// The registered datanode `uuid`.
    #[must_use]
    pub fn datanode(&self, uuid: &str) -> Option<DatanodeDetails> {
        self.state().nodes.get(uuid)
    }

    /// Open key and part sessions (written but neither committed nor aborted), counted
    /// from the rows now, whichever om opened them.
    ///
    /// # Errors
    /// Store errors.
    pub async fn open_sessions(&self) -> Result<u64> {
        let n = crate::tables::OPEN_SESSIONS.count(&self.store, &()).await?;
        *self
            .sessions_counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.config.clock.now());
        self.sessions_open.send_replace(n);
        Ok(n)
    }

    /// Waits until `done` holds for [`open_sessions`](Self::open_sessions), counted now and
    /// again after every session this om opens or ends (its own writers' commits and aborts,
    /// and its expiring service's passes; sessions another om ends are seen at this om's
    /// next change). Returns the count that satisfied it.
    ///
    /// # Errors
    /// Store errors.
    pub async fn wait_open_sessions(&self, mut done: impl FnMut(u64) -> bool) -> Result<u64> {
        let mut changes = self.session_changes.subscribe();
        loop {
            changes.borrow_and_update();
            let n = self.open_sessions().await?;
            if done(n) {
                return Ok(n);
            }
            // The sender lives as long as `self`.
            let _ = changes.changed().await;
        }
    }

    /// Whether this om runs the store-wide background services (block deletion, the
    /// ReplicationManager, lease expiry), and when that changes: always for an om alone on
    /// its store; for one of several on etcd, while it leads them ([`crate::lead_services`]).
    #[must_use]
    pub fn watch_service_lead(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lead.watch()
    }

    /// Open sessions as last counted, without reading the store (metrics).
    #[must_use]
    pub fn open_sessions_counted(&self) -> u64 {
        *self.sessions_open.borrow()
    }

    /// Tells waiters a session opened or ended here.
    pub(crate) fn sessions_changed(&self) {
        self.session_changes.send_modify(|n| *n += 1);
    }

    /// Sets each location of `groups` to the address its datanode is registered at now. Key
    /// and part rows keep the address a group was written to; a datanode that starts again
    /// elsewhere (another host or port, the same uuid and blocks) is then found at its new
    /// one by readers and by repair, as Ozone's pipelines name datanodes by uuid and SCM
    /// resolves them. A datanode the om does not know keeps the stored address.
    pub(crate) fn current_addresses<'a>(
        &self,
        groups: impl IntoIterator<Item = &'a mut BlockGroup>,
    ) {
        let st = self.state();
        for g in groups {
            for l in &mut g.pipeline.locations {
                if let Some(a) = st.nodes.address(l.datanode.uuid.as_str())
                    && a != l.datanode.address
                {
                    a.clone_into(&mut l.datanode.address);
                }
            }
        }
    }

    /// Every registered datanode, whatever its state, by uuid.
    #[must_use]
    pub fn datanodes(&self) -> Vec<DatanodeDetails> {
        self.state().nodes.all()
    }
}
