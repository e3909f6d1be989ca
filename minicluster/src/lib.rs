//! An in-process cluster for tests and local runs: one om and N datanodes
//! (default 5) on 127.0.0.1 with OS-assigned ports, in a temp dir or a given
//! directory.
//!
//! [`MiniCluster::start`] hands out a connected [`ec_client::Client`], one
//! [`DatanodeHandle`] per datanode (address, counters, stop, restart on the
//! same port and data dir) and a clean [`MiniCluster::shutdown`]. The
//! addresses can be written as `cluster.json` ([`ClusterInfo`]) for tools
//! that attach to a running cluster.
//!
//! Layering: the top of the library DAG below `xtask`; uses `om`, `datanode`,
//! `ec-client` and `proto-crate`.

pub mod cancel;
mod cluster_info;
mod control;
#[cfg(feature = "s3")]
pub mod crash;
pub mod pattern;
pub mod process;
#[cfg(feature = "s3")]
mod s3;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use cluster_info::{
    ClusterInfo, DatanodeInfo, MetricsInfo, ProcessIds, S3_ACCESS_KEY, S3_SECRET_KEY, S3Info,
    TlsInfo,
};
pub use control::{ControlClient, ControlServer};
use datanode::{Datanode, DatanodeConfig, DatanodeMetrics, FaultInjector, FaultRule};
use ec_client::{Client, ClientConfig};
use om::{OmConfig, OmServer, OzoneManager};
use proto_crate::ReplicationConfig;

/// Why the minicluster could not start or change state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MiniClusterError {
    /// Creating directories or files failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The om failed to open or serve.
    #[error("om: {0}")]
    Om(#[from] om::OmError),
    /// A datanode failed to start.
    #[error("datanode {index}: {source}")]
    Datanode {
        /// Position in the cluster.
        index: usize,
        /// Why.
        #[source]
        source: datanode::DatanodeError,
    },
    /// The client could not connect.
    #[error("client: {0}")]
    Client(#[from] ec_client::ClientError),
    /// No datanode with this position.
    #[error("no datanode {0} (the cluster has {1})")]
    NoSuchDatanode(usize, usize),
    /// Another process owns the base directory.
    #[error(transparent)]
    DirInUse(#[from] proto_crate::DirLockError),
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> MiniClusterError {
    let context = context.into();
    move |source| MiniClusterError::Io { context, source }
}

/// How to start a minicluster.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MiniClusterConfig {
    /// Number of datanodes (default 5: enough for rs-3-2).
    pub datanodes: usize,
    /// Directory for om and datanode data; `None` uses a temp dir removed at drop.
    pub base_dir: Option<PathBuf>,
    /// Default replication of new buckets (default rs-3-2-1024k).
    pub default_replication: ReplicationConfig,
    /// Default internal block size of new buckets, bytes (default 256 MiB).
    pub block_size: u64,
    /// Remove the om and datanode directories an earlier minicluster left in
    /// `base_dir` before starting (only those: `om/` holding `om.redb`,
    /// `dnN/` holding `datanode.id`). Default false.
    pub clean: bool,
    /// Datanode heartbeat interval (default 1 s).
    pub heartbeat_interval: Duration,
    /// Datanode block report interval (default 60 s; one is sent at each start too).
    pub block_report_interval: Duration,
    /// The om's stale interval (default 5 s).
    pub stale_after: Duration,
    /// The om's dead interval (default 10 s: a stopped datanode is DEAD
    /// within about 11 s).
    pub dead_after: Duration,
    /// The om's open-key lease (default 1 h).
    pub open_key_lease: Duration,
    /// The om's background service interval (default 1 s).
    pub service_interval: Duration,
    /// The om's longest time between two full ReplicationManager scans (default
    /// [`om::DEFAULT_FULL_SCAN_INTERVAL`]).
    pub full_scan_interval: Duration,
    /// Each datanode's `--max-open-files` (default 256).
    pub max_open_files: usize,
    /// The om's deletion grace (default 1 s, so tests see space come back
    /// quickly; the om's own default is a minute).
    pub deletion_grace: Duration,
    /// The om's clock of leases, liveness and full scans (default the system
    /// clock; tests pass an [`om::ManualClock`] to step time instead of
    /// waiting).
    pub om_clock: Option<Arc<dyn om::Clock>>,
    /// Security (default on, with the om's default token lifetime): the om
    /// hands out block tokens and every datanode checks them. `None`: off.
    pub security: Option<om::BlockTokenConfig>,
    /// TLS on every gRPC channel (default off): a throwaway CA and one
    /// loopback certificate for the om and datanodes, written under
    /// `BASE/tls/` (see [`tls`]); the S3 gateway serves HTTPS with it.
    pub tls: bool,
}

impl Default for MiniClusterConfig {
    fn default() -> Self {
        Self {
            datanodes: 5,
            base_dir: None,
            default_replication: ReplicationConfig::default(),
            block_size: 256 * 1024 * 1024,
            clean: false,
            heartbeat_interval: Duration::from_secs(1),
            block_report_interval: Duration::from_secs(60),
            stale_after: Duration::from_secs(5),
            dead_after: Duration::from_secs(10),
            open_key_lease: om::DEFAULT_OPEN_KEY_LEASE,
            service_interval: Duration::from_secs(1),
            full_scan_interval: om::DEFAULT_FULL_SCAN_INTERVAL,
            max_open_files: datanode::DEFAULT_MAX_OPEN_FILES,
            deletion_grace: Duration::from_secs(1),
            om_clock: None,
            security: Some(om::BlockTokenConfig::default()),
            tls: false,
        }
    }
}

impl MiniClusterConfig {
    /// Sets the number of datanodes.
    #[must_use]
    pub fn with_datanodes(mut self, n: usize) -> Self {
        self.datanodes = n;
        self
    }
    /// Keeps data under `dir` instead of a temp dir.
    #[must_use]
    pub fn with_base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }
    /// Sets the default replication of new buckets.
    #[must_use]
    pub fn with_replication(mut self, r: ReplicationConfig) -> Self {
        self.default_replication = r;
        self
    }
    /// Sets the default block size of new buckets, bytes.
    #[must_use]
    pub fn with_block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }
    /// Removes what an earlier minicluster left in the base dir first.
    #[must_use]
    pub fn with_clean(mut self, clean: bool) -> Self {
        self.clean = clean;
        self
    }
    /// Sets the heartbeat interval and the om's stale and dead intervals.
    #[must_use]
    pub fn with_liveness(mut self, heartbeat: Duration, stale: Duration, dead: Duration) -> Self {
        self.heartbeat_interval = heartbeat;
        self.stale_after = stale;
        self.dead_after = dead;
        self
    }
    /// Sets the datanodes' block report interval.
    #[must_use]
    pub fn with_block_report_interval(mut self, interval: Duration) -> Self {
        self.block_report_interval = interval;
        self
    }
    /// Sets the om's open-key lease.
    #[must_use]
    pub fn with_open_key_lease(mut self, lease: Duration) -> Self {
        self.open_key_lease = lease;
        self
    }
    /// Sets the om's background service interval.
    #[must_use]
    pub fn with_service_interval(mut self, interval: Duration) -> Self {
        self.service_interval = interval;
        self
    }
    /// Sets the om's longest time between two full ReplicationManager scans.
    #[must_use]
    pub fn with_full_scan_interval(mut self, interval: Duration) -> Self {
        self.full_scan_interval = interval;
        self
    }
    /// Sets the om's clock of leases and liveness.
    #[must_use]
    pub fn with_om_clock(mut self, clock: Arc<dyn om::Clock>) -> Self {
        self.om_clock = Some(clock);
        self
    }
    /// Sets the om's deletion grace.
    #[must_use]
    pub fn with_deletion_grace(mut self, grace: Duration) -> Self {
        self.deletion_grace = grace;
        self
    }
    /// Sets each datanode's most open block files.
    #[must_use]
    pub fn with_max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }

    /// Sets security: block tokens as `tokens` says, or off with `None`.
    #[must_use]
    pub fn with_security(mut self, tokens: Option<om::BlockTokenConfig>) -> Self {
        self.security = tokens;
        self
    }

    /// Turns TLS on or off (see [`MiniClusterConfig::tls`]).
    #[must_use]
    pub fn with_tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    fn datanode_config(
        &self,
        listen: SocketAddr,
        dir: &Path,
        om: &str,
        tls: Option<&ClusterTls>,
    ) -> DatanodeConfig {
        let config = DatanodeConfig::new(listen, dir);
        let config = match tls {
            Some(t) => config.with_tls(t.member.clone()),
            None => config,
        };
        config
            .with_om(om.to_string())
            .with_security(self.security.is_some())
            .with_fault_injection(true)
            .with_heartbeat_interval(self.heartbeat_interval)
            .with_block_report_interval(self.block_report_interval)
            .with_max_open_files(self.max_open_files)
            .with_metrics_listen(([127, 0, 0, 1], 0).into())
    }
}

/// Locks `base` for one cluster (a second one started on it is refused,
/// naming the first) and removes the `om/` and `dnN/` directories an
/// earlier cluster left there, as [`MiniCluster::start`] does with a base
/// dir: for clusters of processes (`cargo xtask cluster --processes`). Hold
/// the lock while the cluster runs.
///
/// # Errors
/// [`MiniClusterError::DirInUse`]; I/O errors.
pub fn claim_base_dir(base: &Path) -> Result<proto_crate::DirLock, MiniClusterError> {
    std::fs::create_dir_all(base).map_err(io(format!("creating {}", base.display())))?;
    let lock = proto_crate::DirLock::acquire(base, "minicluster")?;
    clean_base_dir(base)?;
    Ok(lock)
}

/// Removes `om/` and `dnN/` directories that a minicluster created under
/// `base` (recognised by their `om.redb` / `datanode.id`); nothing else.
fn clean_base_dir(base: &Path) -> Result<(), MiniClusterError> {
    let entries = match std::fs::read_dir(base) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("reading {}", base.display()))(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(format!("reading {}", base.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let ours = if name == "om" {
            path.join("om.redb").is_file()
        } else {
            name.strip_prefix("dn")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                && path.join("datanode.id").is_file()
        };
        if ours && path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io(format!("removing {}", path.display())))?;
        }
    }
    Ok(())
}

/// One datanode of the cluster: keeps its address and data dir across stops
/// and restarts.
#[derive(Debug)]
pub struct DatanodeHandle {
    index: usize,
    data_dir: PathBuf,
    address: SocketAddr,
    uuid: String,
    config: DatanodeConfig,
    node: Option<Datanode>,
    metrics: Arc<DatanodeMetrics>,
    faults: Arc<FaultInjector>,
    /// Where its `/metrics` is served (the same port after a restart).
    metrics_address: Option<SocketAddr>,
}

impl DatanodeHandle {
    /// Position in the cluster, from 0.
    #[must_use]
    pub fn index(&self) -> usize {
        self.index
    }
    /// `HOST:PORT` (stable across restarts, new after [`restart_elsewhere`](Self::restart_elsewhere)).
    #[must_use]
    pub fn address(&self) -> String {
        self.address.to_string()
    }
    /// `http://HOST:PORT/metrics` of the datanode (stable across restarts).
    #[must_use]
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_address.map(|a| format!("http://{a}/metrics"))
    }
    /// The datanode's uuid (stable across restarts).
    #[must_use]
    pub fn uuid(&self) -> &str {
        &self.uuid
    }
    /// Directory of its containers and metadata.
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
    /// Whether it is serving.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.node.is_some()
    }
    /// Server-side counters of the current (or last) incarnation.
    #[must_use]
    pub fn metrics(&self) -> &Arc<DatanodeMetrics> {
        &self.metrics
    }

    /// The running datanode (storage figures, open files), if it is serving.
    #[must_use]
    pub fn node(&self) -> Option<&Datanode> {
        self.node.as_ref()
    }

    /// The fault injector of the current (or last) incarnation. Rules do not
    /// survive a restart, as a real process's would not.
    #[must_use]
    pub fn faults(&self) -> &Arc<FaultInjector> {
        &self.faults
    }

    /// Adds a fault rule; it applies from the next call on.
    pub fn inject(&self, rule: FaultRule) {
        self.faults.add(rule);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.faults.clear();
    }

    /// Stops serving (graceful, bounded); the data dir is kept. A no-op if stopped.
    pub async fn stop(&mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown().await;
        }
    }

    /// Starts again on the same port and data dir, re-registering with the om.
    /// A no-op if running.
    ///
    /// # Errors
    /// [`MiniClusterError::Datanode`] if it cannot bind or open its storage.
    pub async fn restart(&mut self) -> Result<(), MiniClusterError> {
        self.restart_on(self.address).await
    }

    /// Starts again on the same data dir (so the same uuid and blocks) but at a new port, as
    /// a datanode moved to another host or given another address does, re-registering with
    /// the om at that address; [`address`](Self::address) is the new one from then on. A
    /// no-op if running.
    ///
    /// # Errors
    /// As [`restart`](Self::restart).
    pub async fn restart_elsewhere(&mut self) -> Result<(), MiniClusterError> {
        self.restart_on(SocketAddr::new(self.address.ip(), 0))
            .await?;
        if let Some(node) = &self.node {
            self.address = node
                .address()
                .parse()
                .map_err(|e| io("parsing a datanode address")(std::io::Error::other(e)))?;
        }
        Ok(())
    }

    async fn restart_on(&mut self, listen: SocketAddr) -> Result<(), MiniClusterError> {
        if self.node.is_some() {
            return Ok(());
        }
        let mut config = self.config.clone();
        config.listen = listen;
        if let Some(m) = self.metrics_address {
            config.metrics_listen = Some(m);
        }
        // The old port may be held for a moment by another socket (an
        // outgoing connection of a test running beside this one took it as
        // its ephemeral port): try again for a while before giving up.
        let mut attempts = 0;
        let node = loop {
            match Datanode::start(config.clone()).await {
                Ok(node) => break node,
                Err(datanode::DatanodeError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AddrInUse
                        && attempts < RESTART_BIND_ATTEMPTS =>
                {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(source) => {
                    return Err(MiniClusterError::Datanode {
                        index: self.index,
                        source,
                    });
                }
            }
        };
        self.metrics = Arc::clone(node.metrics());
        self.faults = Arc::clone(node.faults());
        self.node = Some(node);
        Ok(())
    }
}

/// Binds of a restarted datanode's old port tried (100 ms apart) while
/// another socket holds it.
const RESTART_BIND_ATTEMPTS: u32 = 100;

/// The TLS material of a cluster run with TLS.
#[derive(Debug, Clone)]
pub struct ClusterTls {
    /// The admin credential under `BASE/tls/` (`admin.pem`, `admin.key`):
    /// a client certificate for the admin RPCs.
    pub admin: tls::IssuedFiles,
    /// Settings of the S3 gateway's HTTPS (`s3.pem`, `s3.key`: a server
    /// certificate that cannot authenticate as a client).
    pub https: ec_client::TlsConfig,
    /// Settings of the S3 gateway's channels to the om and datanodes
    /// (`s3-client.pem`, `s3-client.key`: a client certificate naming no
    /// host, which the om asks of whoever reads S3 secrets).
    pub s3_client: ec_client::TlsConfig,
    /// The files under `BASE/tls/`: the CA, and the certificate and key
    /// the om and datanodes serve with (`cluster.pem`, `cluster.key`).
    pub files: tls::IssuedFiles,
    /// Settings of a cluster member (the CA and that certificate).
    pub member: ec_client::TlsConfig,
}

/// A running om and its datanodes.
#[derive(Debug)]
pub struct MiniCluster {
    om: OmServer,
    /// Set when the cluster runs with TLS.
    tls: Option<ClusterTls>,
    /// Whether block tokens are on.
    block_tokens: bool,
    #[cfg(feature = "s3")]
    s3: Option<s3_gateway::S3Gateway>,
    datanodes: Vec<DatanodeHandle>,
    base_dir: PathBuf,
    /// Held while the cluster runs: one minicluster per base dir.
    _lock: Option<proto_crate::DirLock>,
    _temp: Option<tempfile::TempDir>,
}

impl MiniCluster {
    /// Starts the om, then the datanodes (each registers with the om). A
    /// given base dir is locked first (a second minicluster on it is
    /// refused, naming the first) and, with `clean`, emptied of what an
    /// earlier minicluster left there.
    ///
    /// # Errors
    /// [`MiniClusterError::DirInUse`]; directory, bind and storage errors.
    pub async fn start(config: MiniClusterConfig) -> Result<Self, MiniClusterError> {
        let (temp, base_dir) = match &config.base_dir {
            Some(d) => (None, d.clone()),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("minicluster-")
                    .tempdir()
                    .map_err(io("creating a temp dir"))?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let lock = match &config.base_dir {
            Some(dir) => Some(proto_crate::DirLock::acquire(dir, "minicluster")?),
            None => None,
        };
        if config.clean && config.base_dir.is_some() {
            clean_base_dir(&base_dir)?;
        }
        let om_config = OmConfig::new(base_dir.join("om"))
            .with_default_block_size(config.block_size)
            .with_default_replication(config.default_replication)
            .with_liveness(config.stale_after, config.dead_after)
            .with_open_key_lease(config.open_key_lease)
            .with_service_interval(config.service_interval)
            .with_full_scan_interval(config.full_scan_interval)
            .with_deletion_grace(config.deletion_grace);
        let om_config = match &config.om_clock {
            Some(c) => om_config.with_clock(Arc::clone(c)),
            None => om_config,
        };
        let om_config = match config.security {
            Some(tokens) => om_config.with_security(tokens),
            None => om_config,
        };
        let tls = if config.tls {
            let ca = tls::ThrowawayCa::new("ozone-ec-rs minicluster CA")?;
            let dir = base_dir.join("tls");
            let files = ca.write_loopback(&dir, "cluster")?;
            let s3 = ca.write(&dir, "s3", &tls::LOOPBACK_NAMES, tls::Usage::HttpsServer)?;
            let admin = ca.write(&dir, "admin", &["admin"], tls::Usage::Admin)?;
            // The gateway's own client identity: it reads S3 secrets from the om.
            let s3_client = ca.write(
                &dir,
                "s3-client",
                &[proto_crate::tls::S3_GATEWAY_NAME],
                tls::Usage::Admin,
            )?;
            let load = |f: &tls::IssuedFiles| {
                ec_client::TlsConfig::load(&f.ca, Some((&f.cert, &f.key))).map_err(|e| {
                    io(format!("loading {}", f.cert.display()))(std::io::Error::other(e))
                })
            };
            Some(ClusterTls {
                member: load(&files)?,
                https: load(&s3)?,
                s3_client: load(&s3_client)?,
                admin,
                files,
            })
        } else {
            None
        };
        let om_config = match &tls {
            Some(t) => om_config.with_tls(t.member.clone()),
            None => om_config,
        };
        let om = Arc::new(OzoneManager::open(om_config).await?);
        let localhost: SocketAddr = ([127, 0, 0, 1], 0).into();
        let om_server = OmServer::start_with_metrics(localhost, om, Some(localhost))
            .await
            .map_err(io("binding the om"))?;
        let om_address = om_server.address().to_string();
        let mut datanodes = Vec::with_capacity(config.datanodes);
        for index in 0..config.datanodes {
            let data_dir = base_dir.join(format!("dn{index}"));
            let dn_config = config.datanode_config(localhost, &data_dir, &om_address, tls.as_ref());
            let node = Datanode::start(dn_config.clone())
                .await
                .map_err(|source| MiniClusterError::Datanode { index, source })?;
            let address = node
                .address()
                .parse()
                .map_err(|e| io("parsing a datanode address")(std::io::Error::other(e)))?;
            datanodes.push(DatanodeHandle {
                index,
                data_dir,
                address,
                uuid: node.details().uuid.to_string(),
                config: dn_config,
                metrics: Arc::clone(node.metrics()),
                faults: Arc::clone(node.faults()),
                metrics_address: node.metrics_address(),
                node: Some(node),
            });
        }
        Ok(Self {
            om: om_server,
            tls,
            block_tokens: config.security.is_some(),
            #[cfg(feature = "s3")]
            s3: None,
            datanodes,
            base_dir,
            _lock: lock,
            _temp: temp,
        })
    }

    /// `HOST:PORT` of the om.
    #[must_use]
    pub fn om_address(&self) -> String {
        self.om.address().to_string()
    }

    /// The in-process om.
    #[must_use]
    pub fn om(&self) -> &Arc<OzoneManager> {
        self.om.om()
    }

    /// Waits until the om holds no open key session — every writer
    /// committed or aborted, including the background aborts of dropped
    /// writers — or `limit` passes. Returns whether it got there.
    pub async fn wait_for_no_open_sessions(&self, limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.om().wait_open_sessions(|n| n == 0)).await,
            Ok(Ok(_))
        )
    }

    /// Directory holding the cluster's data.
    #[must_use]
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// A new client with the default config.
    ///
    /// # Errors
    /// [`MiniClusterError::Client`] if the om cannot be reached.
    pub async fn client(&self) -> Result<Client, MiniClusterError> {
        self.client_with(ClientConfig::default()).await
    }

    /// A new client with `config` — and, when the cluster runs with TLS and
    /// `config` names no TLS settings, trusting the cluster's CA.
    ///
    /// # Errors
    /// [`MiniClusterError::Client`] if the om cannot be reached.
    pub async fn client_with(&self, config: ClientConfig) -> Result<Client, MiniClusterError> {
        let config = match (&self.tls, &config.xceiver.tls) {
            (Some(t), None) => config.with_tls(Some(t.member.without_identity())),
            _ => config,
        };
        Ok(Client::connect(&self.om_address(), config).await?)
    }

    /// The cluster's TLS material, when it runs with TLS.
    #[must_use]
    pub fn tls(&self) -> Option<&ClusterTls> {
        self.tls.as_ref()
    }

    /// Every datanode, in cluster order.
    #[must_use]
    pub fn datanodes(&self) -> &[DatanodeHandle] {
        &self.datanodes
    }

    /// Datanode `index`.
    ///
    /// # Errors
    /// [`MiniClusterError::NoSuchDatanode`].
    pub fn datanode_mut(&mut self, index: usize) -> Result<&mut DatanodeHandle, MiniClusterError> {
        let n = self.datanodes.len();
        self.datanodes
            .get_mut(index)
            .ok_or(MiniClusterError::NoSuchDatanode(index, n))
    }

    /// The datanode with `uuid`, if it is part of this cluster.
    #[must_use]
    pub fn datanode_by_uuid(&self, uuid: &str) -> Option<&DatanodeHandle> {
        self.datanodes.iter().find(|d| d.uuid == uuid)
    }

    /// The cluster's addresses.
    #[must_use]
    pub fn info(&self) -> ClusterInfo {
        ClusterInfo {
            om: self.om_address(),
            oms: Vec::new(),
            datanodes: self
                .datanodes
                .iter()
                .map(|d| DatanodeInfo {
                    id: d.uuid.clone(),
                    address: d.address(),
                })
                .collect(),
            control: None,
            block_tokens: self.block_tokens,
            tls: self.tls.as_ref().map(|t| {
                let absolute = |p: &Path| {
                    std::path::absolute(p)
                        .unwrap_or_else(|_| p.to_path_buf())
                        .display()
                        .to_string()
                };
                TlsInfo {
                    ca: absolute(&t.files.ca),
                    admin_cert: Some(absolute(&t.admin.cert)),
                    admin_key: Some(absolute(&t.admin.key)),
                }
            }),
            s3: self.s3_info(),
            metrics: Some(MetricsInfo {
                om: self.om.metrics_url().unwrap_or_default(),
                datanodes: self
                    .datanodes
                    .iter()
                    .map(|d| d.metrics_url().unwrap_or_default())
                    .collect(),
                s3: self.s3_metrics_url(),
            }),
            pids: None,
        }
    }

    /// Without the `s3` feature there is no gateway to describe.
    #[cfg(not(feature = "s3"))]
    #[allow(clippy::unused_self)]
    pub(crate) fn s3_info(&self) -> Option<S3Info> {
        None
    }

    /// Without the `s3` feature there is no gateway to describe.
    #[cfg(not(feature = "s3"))]
    #[allow(clippy::unused_self)]
    pub(crate) fn s3_metrics_url(&self) -> Option<String> {
        None
    }

    /// Stops every datanode, then the om, waiting for each (bounded).
    pub async fn shutdown(mut self) {
        #[cfg(feature = "s3")]
        if let Some(gw) = self.s3.take() {
            gw.shutdown().await;
        }
        for d in &mut self.datanodes {
            d.stop().await;
        }
        self.om.shutdown().await;
    }
}
