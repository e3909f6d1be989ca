//! Starting and stopping a datanode: bind, load storage, register with the om,
//! serve gRPC until shut down.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use block_stream::XceiverConfig;
use futures::StreamExt;
use proto_crate::DatanodeDetails;
use proto_crate::metrics_http::MetricsServer;
use proto_crate::wire::admin::datanode_admin_service_server::DatanodeAdminServiceServer;
use proto_crate::wire::datanode::datanode_service_server::DatanodeServiceServer;
use proto_crate::wire::om as om_pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use proto_crate::{DatanodeId, ServingTask, Stopped};
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::DatanodeError;
use crate::admin::DatanodeAdminGrpc;
use crate::fault::FaultInjector;
use crate::heartbeat::{Reporter, SecretsSink, run_block_reports, run_heartbeats};
use crate::inflight::{DEFAULT_MAX_INFLIGHT_BYTES, InflightBudget};
use crate::membership::{JoinError, Membership};
use crate::metrics::DatanodeMetrics;
use crate::reconstruction::{DEFAULT_MAX_RECONSTRUCTIONS, EcReconstructionCoordinator};
use crate::service::DatanodeGrpcService;
use crate::storage::{ContainerStore, StoreOptions};
use crate::tokens::BlockTokenVerifier;
use proto_crate::block_token::BlockTokenSecret;

/// Default heartbeat interval (`--heartbeat-interval`): 3 s, as Ozone's
/// `hdds.heartbeat.interval` would be for a small cluster.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);

/// Default block report interval (`--block-report-interval`): 5 minutes. It bounds how long
/// a block lost on a live datanode (its file gone or cut short) goes unnoticed by the om; each
/// report stats every block file and sends about 30 bytes per block.
pub const DEFAULT_BLOCK_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// Largest gRPC message the datanode accepts or sends, bytes (a ReadChunk
/// answer is capped at 32 MiB; WriteChunk requests carry one chunk).
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// How to start a datanode.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DatanodeConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Directory holding containers, metadata, the datanode's id
    /// (`datanode.id`) and the cluster it joined (`cluster.id`).
    pub data_dir: PathBuf,
    /// The oms to register with, report to and take block token secrets
    /// from, if any: `HOST:PORT`, or several comma-separated (the oms of one
    /// cluster; see [`Datanode::start`]).
    pub om: Option<String>,
    /// Serve the admin (fault injection) RPCs. Off by default.
    pub enable_fault_injection: bool,
    /// Storage tunables (`--max-open-files`).
    pub store: StoreOptions,
    /// Budget of request payload bytes in flight (`--max-inflight-bytes`,
    /// default 256 MiB).
    pub max_inflight_bytes: u64,
    /// How often to heartbeat to the om (default 3 s).
    pub heartbeat_interval: Duration,
    /// How often to scan the blocks and send the om a full block report (default 5 min; one
    /// is also sent right after registration).
    pub block_report_interval: Duration,
    /// Where to serve `/metrics` (Prometheus text format), if anywhere
    /// (`--metrics-listen`; port 0 picks a free one).
    pub metrics_listen: Option<SocketAddr>,
    /// Security (`--security`): every data RPC must carry a valid block
    /// token, checked with the secrets the om sends in heartbeat answers.
    /// Off by default.
    pub security: bool,
    /// TLS (`--tls-ca`, `--tls-cert`, `--tls-key`): the datanode serves
    /// over TLS with its certificate, presents the same certificate to the
    /// om (which takes registrations, heartbeats and block reports only
    /// from certified peers) and dials other datanodes (reconstruction)
    /// over TLS. `None` (the default): plaintext.
    pub tls: Option<proto_crate::tls::TlsConfig>,
}

impl DatanodeConfig {
    /// A config listening on `listen`, storing under `data_dir`, not registering.
    #[must_use]
    pub fn new(listen: SocketAddr, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            listen,
            data_dir: data_dir.into(),
            om: None,
            enable_fault_injection: false,
            store: StoreOptions::default(),
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            block_report_interval: DEFAULT_BLOCK_REPORT_INTERVAL,
            metrics_listen: None,
            security: false,
            tls: None,
        }
    }

    /// Serves and dials over TLS with `tls` (which must hold the
    /// datanode's own certificate; see [`DatanodeConfig::tls`]).
    #[must_use]
    pub fn with_tls(mut self, tls: proto_crate::tls::TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Requires a valid block token on every data RPC (or not).
    #[must_use]
    pub fn with_security(mut self, on: bool) -> Self {
        self.security = on;
        self
    }

    /// Serves `/metrics` on `listen`.
    #[must_use]
    pub fn with_metrics_listen(mut self, listen: SocketAddr) -> Self {
        self.metrics_listen = Some(listen);
        self
    }

    /// Sets the most block files kept open for reading.
    #[must_use]
    pub fn with_max_open_files(mut self, n: usize) -> Self {
        self.store = self.store.with_max_open_files(n);
        self
    }

    /// Sets the bytes of closed blocks' fine checksums kept in memory for
    /// reads (0: off; [`StoreOptions::fine_checksum_cache_bytes`]).
    #[must_use]
    pub fn with_fine_checksum_cache_bytes(mut self, bytes: u64) -> Self {
        self.store = self.store.with_fine_checksum_cache_bytes(bytes);
        self
    }

    /// Sets the in-flight payload budget, bytes.
    #[must_use]
    pub fn with_max_inflight_bytes(mut self, bytes: u64) -> Self {
        self.max_inflight_bytes = bytes;
        self
    }

    /// Sets the heartbeat interval.
    #[must_use]
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Sets the block report interval.
    #[must_use]
    pub fn with_block_report_interval(mut self, interval: Duration) -> Self {
        self.block_report_interval = interval;
        self
    }

    /// Serves the admin fault-injection RPCs too.
    #[must_use]
    pub fn with_fault_injection(mut self, on: bool) -> Self {
        self.enable_fault_injection = on;
        self
    }

    /// Registers with the om at `om` (`HOST:PORT`), or with each of several
    /// (`HOST:PORT,HOST:PORT`), once serving.
    #[must_use]
    pub fn with_om(mut self, om: impl Into<String>) -> Self {
        self.om = Some(om.into());
        self
    }
}

/// A running datanode.
///
/// Started by [`Datanode::start`]; its serving task runs until
/// [`Datanode::shutdown`] (graceful: GOAWAY to clients, in-flight calls finish,
/// bounded by a 5 s grace period after which the task is aborted) or until the
/// handle is dropped (the shutdown signal fires and the task winds down).
#[derive(Debug)]
pub struct Datanode {
    details: DatanodeDetails,
    metrics: Arc<DatanodeMetrics>,
    faults: Arc<FaultInjector>,
    store: Arc<ContainerStore>,
    serving: ServingTask<Result<(), tonic::transport::Error>>,
    /// One heartbeat task per om and one block report task for all.
    reporters: Vec<JoinHandle<()>>,
    /// The `/metrics` endpoint, when `metrics_listen` was set.
    metrics_server: Option<MetricsServer>,
    /// Flipped to NOT_SERVING when shutdown begins.
    health: tonic_health::server::HealthReporter,
}

/// The datanode's identity, kept in `DIR/datanode.id`: read back, or a new
/// random (v4) UUID on first start. A file that does not hold a UUID is
/// refused, never silently replaced (the om knows the datanode by it).
fn load_or_create_uuid(dir: &Path) -> Result<DatanodeId, DatanodeError> {
    let path = dir.join("datanode.id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => {
            return s.parse::<DatanodeId>().map_err(|e| {
                DatanodeError::InvalidArgument(format!(
                    "{} does not hold a datanode UUID: {e}",
                    path.display()
                ))
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(DatanodeError::io(format!("reading {}", path.display()), e)),
    }
    let uuid = DatanodeId::random();
    // Durable before the datanode registers under it.
    crate::membership::write_durably(&path, uuid.as_str())
        .map_err(|e| DatanodeError::io(format!("writing {}", path.display()), e))?;
    Ok(uuid)
}

/// Opens the store, retrying while a previous instance on the same data dir
/// is still releasing it (a restart right after a shutdown: its serving task
/// drops the store within the 5 s grace).
async fn open_store(dir: &Path, options: StoreOptions) -> Result<ContainerStore, DatanodeError> {
    let mut waited = Duration::ZERO;
    loop {
        // Opening reads and recovers the store (and may wait for a forked child's copy of
        // the directory lock to close): off the async threads.
        let path = dir.to_path_buf();
        let opened = tokio::task::spawn_blocking(move || ContainerStore::open_with(&path, options))
            .await
            .map_err(|e| DatanodeError::io("opening the store", std::io::Error::other(e)))?;
        match opened {
            Err(DatanodeError::DataDirInUse {
                this_process: true, ..
            }) if waited < Duration::from_secs(6) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waited += Duration::from_millis(20);
            }
            Err(DatanodeError::Db(redb::Error::DatabaseAlreadyOpen))
                if waited < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waited += Duration::from_millis(20);
            }
            other => return other,
        }
    }
}

impl Datanode {
    /// Binds `config.listen`, opens the storage under `config.data_dir`,
    /// starts serving and registers with the oms if any are configured.
    ///
    /// With several oms the datanode registers with them in order and
    /// starts when one accepts, joining that om's cluster (recorded in
    /// `DIR/`[`CLUSTER_ID_FILE`](crate::CLUSTER_ID_FILE) the first time, and
    /// from then on the only cluster it registers with); then it
    /// heartbeats to every om, each on its own task, so an om that is down
    /// delays none of the others, and one that was down at the start
    /// learns the datanode from its first heartbeat (an om registers a
    /// datanode it does not know when it hears from it; an om of another
    /// cluster refuses). Block reports go to every om from one task, one
    /// scan per round. Block token secrets are kept per om
    /// ([`BlockTokenVerifier::update`]). This is Ozone's datanode reporting
    /// to every SCM of an HA group.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] for a malformed or repeated om
    /// address, a `cluster.id` file that holds no cluster id, or when every
    /// om refused the registration (an om of another cluster than the one
    /// the data dir joined refuses); bind and storage errors; no om
    /// accepting the registration within 10 s.
    pub async fn start(config: DatanodeConfig) -> Result<Self, DatanodeError> {
        let oms = match &config.om {
            Some(list) => proto_crate::address::parse_list(list)
                .map_err(|e| DatanodeError::InvalidArgument(e.to_string()))?,
            None => Vec::new(),
        };
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| DatanodeError::io(format!("creating {}", config.data_dir.display()), e))?;
        let store = Arc::new(open_store(&config.data_dir, config.store).await?);
        // Under the data dir's lock: the id survives restarts.
        let uuid = load_or_create_uuid(&config.data_dir)?;
        // The cluster joined at an earlier start, if any.
        let membership = Arc::new(Membership::load(&config.data_dir)?);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| DatanodeError::io(format!("binding {}", config.listen), e))?;
        let mut local = listener
            .local_addr()
            .map_err(|e| DatanodeError::io("reading the bound address", e))?;
        if local.ip().is_unspecified() {
            local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let details = DatanodeDetails {
            uuid,
            address: local.to_string(),
        };
        let metrics = Arc::new(DatanodeMetrics::default());
        let faults = Arc::new(FaultInjector::default());
        let budget = Arc::new(InflightBudget::new(
            config.max_inflight_bytes,
            Arc::clone(&metrics),
        ));
        let admin = config.enable_fault_injection.then(|| {
            DatanodeAdminServiceServer::new(
                DatanodeAdminGrpc::new(Arc::clone(&faults))
                    .with_certificate_required(config.tls.is_some()),
            )
        });
        let tokens = config
            .security
            .then(|| Arc::new(BlockTokenVerifier::default()));
        let mut grpc = DatanodeGrpcService::new(
            &details.uuid,
            Arc::clone(&store),
            Arc::clone(&metrics),
            Arc::clone(&faults),
            budget,
        )
        .with_reconstruction(Arc::new(EcReconstructionCoordinator::new(
            XceiverConfig::default().with_tls(config.tls.clone()),
            DEFAULT_MAX_RECONSTRUCTIONS,
        )));
        if let Some(v) = &tokens {
            grpc = grpc.with_block_tokens(Arc::clone(v));
        }
        let svc = DatanodeServiceServer::new(grpc)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let (registry, rpc_metrics) = crate::observability::registry(&metrics, &faults, &store);
        let metrics_server = match config.metrics_listen {
            Some(addr) => Some(
                MetricsServer::start(addr, Arc::new(registry))
                    .await
                    .map_err(|e| DatanodeError::io(format!("binding /metrics on {addr}"), e))?,
            ),
            None => None,
        };
        // The standard gRPC health service (grpc.health.v1): SERVING while the datanode serves.
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<DatanodeServiceServer<DatanodeGrpcService>>()
            .await;
        // Serving from our own listener: set TCP_NODELAY explicitly, or Nagle
        // adds ~40 ms to small answers.
        let accepted = Arc::clone(&metrics);
        let incoming = TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .inspect(move |conn| {
                if conn.is_ok() {
                    accepted.record_connection();
                }
            });
        let mut builder = Server::builder();
        if let Some(tls) = &config.tls {
            let invalid = |e: &dyn std::fmt::Display| {
                DatanodeError::InvalidArgument(format!("TLS settings: {e}"))
            };
            builder = builder
                .tls_config(tls.server().map_err(|e| invalid(&e))?)
                .map_err(|e| invalid(&e))?;
        }
        let serving = ServingTask::spawn(|stop| {
            builder
                .layer(proto_crate::request_id::RequestIdLayer)
                .layer(rpc_metrics.layer())
                .max_frame_size(1024 * 1024 - 1)
                .initial_stream_window_size(8 * 1024 * 1024)
                .initial_connection_window_size(32 * 1024 * 1024)
                .add_service(svc)
                .add_service(health_service)
                .add_optional_service(admin)
                .serve_with_incoming_shutdown(incoming, stop.wait())
        });
        let mut dn = Self {
            details,
            metrics,
            faults,
            store,
            serving,
            reporters: Vec::new(),
            metrics_server,
            health,
        };
        if !oms.is_empty() {
            let reporter = Reporter {
                details: dn.details.clone(),
                store: Arc::clone(&dn.store),
                membership,
                tls: config.tls.clone(),
            };
            let (first, secrets) = register_with_any(&oms, &reporter).await?;
            if let Some(v) = &tokens {
                v.update(first, secrets);
            }
            for (om_index, om) in oms.iter().enumerate() {
                let sink = tokens.as_ref().map(|v| SecretsSink {
                    verifier: Arc::clone(v),
                    om_index,
                });
                dn.reporters.push(tokio::spawn(run_heartbeats(
                    om.clone(),
                    reporter.clone(),
                    Arc::clone(&dn.metrics),
                    sink,
                    config.heartbeat_interval,
                )));
            }
            dn.reporters.push(tokio::spawn(run_block_reports(
                oms,
                reporter,
                config.block_report_interval,
                config.heartbeat_interval,
            )));
        }
        tracing::info!(datanode = %dn.details, "datanode serving");
        Ok(dn)
    }

    /// Identity and address of this datanode.
    #[must_use]
    pub fn details(&self) -> &DatanodeDetails {
        &self.details
    }

    /// `HOST:PORT` the datanode serves on.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.details.address
    }

    /// The datanode's fault injector (rules apply from the next call on).
    #[must_use]
    pub fn faults(&self) -> &Arc<FaultInjector> {
        &self.faults
    }

    /// `http://HOST:PORT/metrics`, when the datanode serves its metrics.
    #[must_use]
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_server.as_ref().map(MetricsServer::url)
    }

    /// The address `/metrics` is served on, if it is.
    #[must_use]
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_server.as_ref().map(MetricsServer::address)
    }

    /// The datanode's counters.
    #[must_use]
    pub fn metrics(&self) -> &Arc<DatanodeMetrics> {
        &self.metrics
    }

    /// The datanode's storage (usage figures, open files).
    #[must_use]
    pub fn store(&self) -> &Arc<ContainerStore> {
        &self.store
    }

    /// Stops serving and waits for the serving task (at most 5 s of grace for
    /// in-flight calls, then it is aborted). The data dir can be reopened afterwards.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        self.health
            .set_not_serving::<DatanodeServiceServer<DatanodeGrpcService>>()
            .await;
        for h in std::mem::take(&mut self.reporters) {
            h.abort();
            // A scan holds the store: wait until the task let go of it.
            let _ = h.await;
        }
        match self.serving.stop(Duration::from_secs(5)).await {
            Stopped::Finished(Ok(())) | Stopped::AlreadyStopped => {}
            Stopped::Finished(Err(e)) => {
                tracing::warn!(datanode = %self.details, error = %e, "server ended with an error");
            }
            Stopped::Failed(e) => {
                tracing::warn!(datanode = %self.details, error = %e, "server task failed");
            }
            Stopped::Aborted => {
                tracing::warn!(datanode = %self.details, "graceful shutdown timed out; aborted");
            }
        }
        // Last, so that scrapes see the drain.
        if let Some(m) = self.metrics_server.take() {
            m.stop().await;
        }
    }
}

impl Drop for Datanode {
    fn drop(&mut self) {
        // The serving task's signal fires as `serving` drops.
        for h in &self.reporters {
            h.abort();
        }
    }
}

/// Registers with the oms in `oms`, in order, until one accepts; returns
/// its place in `oms` and the block token secrets it answered with. The
/// rounds go on for 10 s while no om accepts (an om not up yet); an om that
/// refuses is not asked again. The oms after the one that accepted learn
/// the datanode from its heartbeats, which carry the cluster it joined
/// here, so an om of another cluster refuses them. One om at a time, so
/// that two oms of different clusters never both take the datanode.
///
/// # Errors
/// [`DatanodeError::InvalidArgument`] when every om refused (a certificate
/// the om does not take, or another cluster); otherwise an I/O error after
/// 10 s. The message names each om and why.
async fn register_with_any(
    oms: &[String],
    reporter: &Reporter,
) -> Result<(usize, Vec<BlockTokenSecret>), DatanodeError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut why: Vec<Option<String>> = vec![None; oms.len()];
    let mut refused = vec![false; oms.len()];
    loop {
        for (i, om) in oms.iter().enumerate() {
            if refused[i] {
                continue;
            }
            match register(om, reporter).await {
                Ok(secrets) => return Ok((i, secrets)),
                Err(Registration::Refused(e)) => {
                    refused[i] = true;
                    why[i] = Some(format!("the om at {om} refused the registration: {e}"));
                }
                Err(Registration::Local(e)) => return Err(e),
                Err(Registration::Failed(e)) => {
                    tracing::debug!(om, error = %e, "registration failed; retrying");
                    why[i] = Some(format!("registering with om {om}: {e}"));
                }
            }
        }
        let all = || why.iter().flatten().cloned().collect::<Vec<_>>().join("; ");
        if refused.iter().all(|r| *r) {
            return Err(DatanodeError::InvalidArgument(all()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(DatanodeError::io(
                "registering with the om",
                std::io::Error::other(all()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Why one registration attempt did not succeed.
enum Registration {
    /// The om answered no (final: waiting will not change a certificate or
    /// a cluster).
    Refused(String),
    /// No answer: not reachable yet, or the call failed.
    Failed(String),
    /// This datanode failed (its cluster id could not be written): final
    /// for the whole start, not only for this om.
    Local(DatanodeError),
}

/// One registration attempt with the om at `om`.
async fn register(om: &str, reporter: &Reporter) -> Result<Vec<BlockTokenSecret>, Registration> {
    let endpoint = proto_crate::tls::endpoint(om, reporter.tls.as_ref())
        .map_err(|e| Registration::Refused(format!("om {e}")))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Registration::Failed(e.to_string()))?;
    let answer = OzoneManagerServiceClient::new(channel)
        .register_datanode(om_pb::RegisterDatanodeRequest {
            datanode: Some(reporter.details.clone().into()),
            cluster_id: reporter.membership.joined(),
        })
        .await
        .map_err(|s| match s.code() {
            tonic::Code::PermissionDenied => Registration::Refused(s.message().to_string()),
            _ => Registration::Failed(s.to_string()),
        })?
        .into_inner();
    // Everything checked before the cluster is joined.
    let secrets = crate::heartbeat::secrets(answer.block_token_secrets)
        .map_err(|e| Registration::Refused(format!("bad block token secrets: {e}")))?;
    let held = reporter.store.stats().blocks;
    match reporter.membership.accept(&answer.cluster_id, held) {
        Ok(()) => Ok(secrets),
        // Local: start stops here rather than try an om of another cluster.
        Err(e @ JoinError::Record { .. }) => Err(Registration::Local(DatanodeError::io(
            "joining the om's cluster",
            std::io::Error::other(e.to_string()),
        ))),
        Err(e) => Err(Registration::Refused(e.to_string())),
    }
}
