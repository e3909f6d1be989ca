//! One active om per metadata store on etcd, and standbys that wait to take
//! its place (issue 18, active-passive: the step before several oms serve
//! at once).
//!
//! Every om started on one etcd namespace campaigns in [`OM_ELECTION`]. The
//! leader opens the [`OzoneManager`](crate::OzoneManager) on the store
//! [`fenced`](meta_store::MetaStore::fenced) by its leadership, so that
//! every write it makes commits only while it still leads: a leader paused
//! past its lease (a long GC-like stall, a partition) cannot write over its
//! successor. The others serve a [`StandbyServer`] on their address, which
//! answers every om call with [`OmErrorCode::NotLeader`] naming the leader,
//! so that clients and datanodes with several om addresses (`--om a,b`) move
//! on; once a standby wins the election it stops answering, opens the om
//! (loading the sessions, registry and operational states the last leader
//! left in the store) and serves on the same address. A leader that loses
//! its lease stops serving and its process exits: a restart joins as a
//! standby. This is Ozone's OM HA as seen by clients (one leader serves,
//! followers answer `OMNotLeaderException`, clients fail over), with etcd's
//! election in place of Ratis.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use meta_store::MetaStore;
use proto_crate::wire::admin::om_admin_service_server::OmAdminServiceServer;
use proto_crate::wire::om::ozone_manager_service_server::OzoneManagerServiceServer;
use proto_crate::{OmErrorCode, ServingTask, Stopped};
use tonic::body::Body;
use tonic::codegen::{Context, Poll, Service, http};
use tonic::server::NamedService;

use crate::OmGrpcService;
use crate::admin::OmAdminGrpc;

/// The election every om on one metadata store campaigns in; its leader
/// (the candidate value is the om's `HOST:PORT`) is the one active om.
pub const OM_ELECTION: &str = "om-active";

/// How long a standby's answer may wait for the store to name the leader;
/// past it the answer names none. A name found is reused for as long, so
/// that datanodes' heartbeats and reports do not each ask etcd.
const LEADER_LOOKUP: Duration = Duration::from_secs(1);

/// A standby om's gRPC server on the om's address: every call of the om
/// and om-admin services is answered [`OmErrorCode::NotLeader`] (gRPC
/// `UNAVAILABLE`), with the leader's address in the message when the store
/// names one, and the health service reports the om service NOT_SERVING.
/// Nothing is applied, so clients send any call on to another om.
#[derive(Debug)]
pub struct StandbyServer {
    address: SocketAddr,
    serving: ServingTask<Result<(), tonic::transport::Error>>,
}

impl StandbyServer {
    /// Binds `listen` (port 0 picks a free port) and answers there, over
    /// TLS when `tls` is given (as the active om would serve).
    ///
    /// # Errors
    /// Bind errors; TLS settings rustls refuses (as
    /// [`std::io::ErrorKind::Other`]).
    pub async fn start(
        listen: SocketAddr,
        tls: Option<&proto_crate::tls::TlsConfig>,
        store: MetaStore,
    ) -> std::io::Result<Self> {
        let (incoming, address) = crate::server::bind(listen).await?;
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_not_serving::<OzoneManagerServiceServer<OmGrpcService>>()
            .await;
        let mut builder = crate::server::server_builder(tls)?;
        let leader = LeaderName::new(store);
        let om = NotLeading::<OzoneManagerServiceServer<OmGrpcService>>::new(leader.clone());
        let admin = NotLeading::<OmAdminServiceServer<OmAdminGrpc>>::new(leader);
        let serving = ServingTask::spawn(|stop| {
            builder
                .add_service(om)
                .add_service(admin)
                .add_service(health_service)
                .serve_with_incoming_shutdown(incoming, async move {
                    // The reporter lives as long as the server.
                    let _health = health;
                    stop.wait().await;
                })
        });
        tracing::info!(%address, "om standby: answering NOT_LEADER until it leads");
        Ok(Self { address, serving })
    }

    /// `HOST:PORT` the standby answers on (the om serves there once it leads).
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops answering and frees the address (calls under way get 1 s,
    /// then the server is aborted).
    pub async fn shutdown(mut self) {
        if let Stopped::Finished(Err(e)) = self.serving.stop(Duration::from_secs(1)).await {
            tracing::warn!(error = %e, "the standby server ended with an error");
        }
    }
}

/// When the leader was looked up, and the name found (if any).
type Lookup = (Instant, Option<String>);

/// The leader's address as the store last named it, looked up at most
/// once per [`LEADER_LOOKUP`], one lookup at a time (calls that arrive
/// during one wait for it).
#[derive(Clone)]
struct LeaderName {
    store: MetaStore,
    /// When it was last looked up, and what was found.
    last: std::sync::Arc<tokio::sync::Mutex<Option<Lookup>>>,
}

impl LeaderName {
    fn new(store: MetaStore) -> Self {
        Self {
            store,
            last: std::sync::Arc::default(),
        }
    }

    /// The leader's address, if the store names one (`None` too when it
    /// could not be asked in time).
    async fn get(&self) -> Option<String> {
        // Held across the lookup: one at a time.
        let mut last = self.last.lock().await;
        if let Some((at, name)) = last.as_ref()
            && at.elapsed() < LEADER_LOOKUP
        {
            return name.clone();
        }
        let name = tokio::time::timeout(LEADER_LOOKUP, self.store.leader(OM_ELECTION))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        *last = Some((Instant::now(), name.clone()));
        name
    }
}

/// The standby's answer for every method of service `S` (named as `S` is).
struct NotLeading<S> {
    leader: LeaderName,
    service: PhantomData<fn() -> S>,
}

impl<S> NotLeading<S> {
    fn new(leader: LeaderName) -> Self {
        Self {
            leader,
            service: PhantomData,
        }
    }
}

impl<S> Clone for NotLeading<S> {
    fn clone(&self) -> Self {
        Self::new(self.leader.clone())
    }
}

impl<S: NamedService> NamedService for NotLeading<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for NotLeading<S> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<Body>) -> Self::Future {
        let leader = self.leader.clone();
        Box::pin(async move {
            let leader = leader.get().await;
            Ok(OmErrorCode::NotLeader
                .status(not_leader(leader.as_deref()))
                .into_http())
        })
    }
}

/// The standby's answer, naming `leader` when known.
fn not_leader(leader: Option<&str>) -> String {
    match leader {
        Some(l) => format!("this om is a standby; the om at {l} leads the metadata store"),
        None => "this om is a standby and no om leads the metadata store now \
                 (one takes the lead once the last leader's lease runs out)"
            .to_string(),
    }
}
