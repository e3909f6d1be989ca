//! Serving an [`OzoneManager`] over gRPC on a listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use proto_crate::metrics_http::MetricsServer;
use proto_crate::wire::admin::om_admin_service_server::OmAdminServiceServer;
use proto_crate::wire::om::ozone_manager_service_server::OzoneManagerServiceServer;
use proto_crate::{ServingTask, Stopped};
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::admin::OmAdminGrpc;
use crate::{OmGrpcService, OzoneManager, run_block_deleting_service};

/// A running om gRPC server with its background services: the block
/// deleting service, the ReplicationManager and the open-key lease reaper
/// (every `OmConfig::service_interval`; `LeaderServices`, here when the om is its
/// store's only one, and on the elected om when several share an etcd store:
/// `service_lead.rs`), and the refresh of state shared with other oms (operational
/// states; block token keys, rotated then), on every om.
///
/// Started by [`OmServer::start`]; serves until [`OmServer::shutdown`]
/// (graceful, bounded by 5 s, then aborted) or until dropped (the serving task's and
/// the services' stop signals fire as they drop, and they wind down by themselves).
#[derive(Debug)]
pub struct OmServer {
    address: SocketAddr,
    om: Arc<OzoneManager>,
    serving: ServingTask<Result<(), tonic::transport::Error>>,
    /// The per-om refresh of shared state.
    refresh: Option<LeaderServices>,
    /// The store-wide services, when this om is its store's only one.
    services: Option<LeaderServices>,
    metrics_server: Option<MetricsServer>,
    /// Flipped to NOT_SERVING when shutdown begins.
    health: tonic_health::server::HealthReporter,
}

/// Binds `listen` (port 0 picks a free port): the incoming connections
/// (TCP_NODELAY) and the address clients reach (an unspecified IP as
/// 127.0.0.1).
///
/// # Errors
/// Bind errors.
pub(crate) async fn bind(listen: SocketAddr) -> std::io::Result<(TcpIncoming, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let mut address = listener.local_addr()?;
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Ok((
        TcpIncoming::from(listener).with_nodelay(Some(true)),
        address,
    ))
}

/// A gRPC server builder, serving TLS with `tls` when given.
///
/// # Errors
/// TLS settings without the om's own certificate or with one rustls
/// refuses (as [`std::io::ErrorKind::Other`]).
pub(crate) fn server_builder(tls: Option<&proto_crate::tls::TlsConfig>) -> std::io::Result<Server> {
    let builder = Server::builder();
    match tls {
        Some(tls) => {
            let server_tls = tls.server().map_err(std::io::Error::other)?;
            builder
                .tls_config(server_tls)
                .map_err(std::io::Error::other)
        }
        None => Ok(builder),
    }
}

/// Runs `tick` every `interval` (the first after one interval) until
/// `stop` says so; a tick under way when it does is finished first.
async fn every<F, Fut>(
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(interval) => {}
        }
        tick().await;
    }
}

/// Aborts sessions whose lease ran out and prunes old completed-upload
/// records.
async fn reap_leases(om: Arc<OzoneManager>) {
    match om.expire_sessions(om.config().clock.wall()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(sessions = n, "expired open-key sessions"),
        Err(e) => tracing::warn!(error = %e, "expiring open-key sessions failed"),
    }
    if let Err(e) = om.prune_completed_uploads().await {
        tracing::warn!(error = %e, "pruning completed uploads failed");
    }
}

/// Re-reads what other oms on the same store may have changed (datanodes'
/// operational states) and rotates the block token keys (re-reading those
/// other oms made).
async fn refresh_shared_state(om: Arc<OzoneManager>) {
    if let Err(e) = om.reload_operational_states().await {
        tracing::warn!(error = %e, "re-reading the datanodes' operational states failed");
    }
    if let Err(e) = om.rotate_block_token_keys().await {
        tracing::warn!(error = %e, "rotating the block token keys failed");
    }
}

impl OmServer {
    /// Binds `listen` (port 0 picks a free port) and serves `om`.
    ///
    /// # Errors
    /// Bind errors.
    pub async fn start(listen: SocketAddr, om: Arc<OzoneManager>) -> std::io::Result<Self> {
        Self::start_with_metrics(listen, om, None).await
    }

    /// [`start`](Self::start), also serving `/metrics` (Prometheus text format) on
    /// `metrics_listen` if given (port 0 picks a free one).
    ///
    /// With [`OmConfig::tls`](crate::OmConfig::tls) it serves gRPC over
    /// TLS (`/metrics` stays plain HTTP).
    ///
    /// # Errors
    /// Bind errors; TLS settings without the om's own certificate or with
    /// one rustls refuses (as [`std::io::ErrorKind::Other`]).
    pub async fn start_with_metrics(
        listen: SocketAddr,
        om: Arc<OzoneManager>,
        metrics_listen: Option<SocketAddr>,
    ) -> std::io::Result<Self> {
        let (incoming, address) = bind(listen).await?;
        let svc = OzoneManagerServiceServer::new(OmGrpcService::new(Arc::clone(&om)))
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024);
        let admin = OmAdminServiceServer::new(OmAdminGrpc::new(Arc::clone(&om)));
        let (registry, rpc_metrics) = crate::observability::registry(&om);
        let metrics_server = match metrics_listen {
            Some(addr) => Some(MetricsServer::start(addr, Arc::new(registry)).await?),
            None => None,
        };
        // The standard gRPC health service (grpc.health.v1).
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<OzoneManagerServiceServer<OmGrpcService>>()
            .await;
        let builder = server_builder(om.config().tls.as_ref())?;
        let serving = ServingTask::spawn(|stop| {
            builder
                .layer(proto_crate::request_id::RequestIdLayer)
                .layer(rpc_metrics.layer())
                .add_service(svc)
                .add_service(admin)
                .add_service(health_service)
                .serve_with_incoming_shutdown(incoming, stop.wait())
        });
        let interval = om.config().service_interval;
        let refresh_interval = om
            .block_token_rotation_interval()
            .map_or(interval, |r| r.min(interval))
            .max(Duration::from_millis(10));
        let (stop_refresh, stop) = tokio::sync::watch::channel(false);
        let refresh = Some(LeaderServices {
            stop: stop_refresh,
            tasks: vec![tokio::spawn(every(refresh_interval, stop, {
                let om = Arc::clone(&om);
                move || refresh_shared_state(Arc::clone(&om))
            }))],
        });
        let services = matches!(om.lead, crate::service_lead::ServiceLead::Sole)
            .then(|| LeaderServices::start(&om));
        tracing::info!(%address, "om serving");
        Ok(Self {
            address,
            om,
            serving,
            refresh,
            services,
            metrics_server,
            health,
        })
    }

    /// `http://HOST:PORT/metrics`, when the om serves its metrics.
    #[must_use]
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_server.as_ref().map(MetricsServer::url)
    }

    /// `HOST:PORT` the om serves on.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The in-process om behind the server.
    #[must_use]
    pub fn om(&self) -> &Arc<OzoneManager> {
        &self.om
    }

    /// Stops the background services and serving, and waits for the tasks
    /// (5 s grace, then abort).
    pub async fn shutdown(mut self) {
        self.health
            .set_not_serving::<OzoneManagerServiceServer<OmGrpcService>>()
            .await;
        if let Some(services) = self.services.take() {
            services.stop().await;
        }
        if let Some(refresh) = self.refresh.take() {
            refresh.stop().await;
        }
        if let Stopped::Finished(Err(e)) = self.serving.stop(Duration::from_secs(5)).await {
            tracing::warn!(error = %e, "om server ended with an error");
        }
    }
}

/// The background services one om of a store runs at a time (block deletion, the
/// ReplicationManager, open-key lease expiry), each on a task of its own; also the per-om
/// refresh task of an [`OmServer`]. Dropping it signals the tasks to stop after their pass.
#[derive(Debug)]
pub(crate) struct LeaderServices {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl LeaderServices {
    /// Starts the services of `om`, every `OmConfig::service_interval` (lease expiry at
    /// least four times a lease), block deletion also whenever the deletion log grows.
    #[must_use]
    pub(crate) fn start(om: &Arc<OzoneManager>) -> Self {
        let (stop_all, stop) = tokio::sync::watch::channel(false);
        let interval = om.config().service_interval;
        let reaper_interval = interval
            .min(om.config().open_key_lease / 4)
            .max(Duration::from_millis(10));
        let mut stop_deleting = stop.clone();
        let mut stop_repair = stop.clone();
        let tasks = vec![
            tokio::spawn(run_block_deleting_service(
                Arc::clone(om),
                interval,
                async move {
                    let _ = stop_deleting.wait_for(|s| *s).await;
                },
            )),
            tokio::spawn(every(reaper_interval, stop, {
                let om = Arc::clone(om);
                move || reap_leases(Arc::clone(&om))
            })),
            tokio::spawn(crate::run_replication_manager(
                Arc::clone(om),
                interval,
                async move {
                    let _ = stop_repair.wait_for(|s| *s).await;
                },
            )),
        ];
        Self {
            stop: stop_all,
            tasks,
        }
    }

    /// Stops the services after the pass under way (5 s each at most, then aborted).
    pub(crate) async fn stop(mut self) {
        self.stop.send_replace(true);
        for mut t in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout(Duration::from_secs(5), &mut t)
                .await
                .is_err()
            {
                t.abort();
            }
        }
    }

    /// Stops the services of `om` at once, cutting off the pass under way (each of its
    /// transactions commits whole or not at all), with the repairs and block checks the
    /// ReplicationManager started, and forgets the ReplicationManager's memory of the term.
    pub(crate) fn abort(mut self, om: &OzoneManager) {
        for t in std::mem::take(&mut self.tasks) {
            t.abort();
        }
        om.repair.end_term();
        om.block_reports
            .checking
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for LeaderServices {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
