//! An S3 REST gateway over the cluster: S3 clients (aws-cli, boto3, SDKs)
//! create buckets, put, get, list, copy and delete objects, and upload in
//! parts, against an om and its datanodes.
//!
//! - Protocol (routing, XML, SigV4 in headers, streaming/chunked payloads and
//!   presigned URLs) comes from the `s3s` crate; [`S3Gateway`] serves it
//!   with hyper on a listener.
//! - Operations map onto [`ec_client::Client`] ([`objects`] for buckets,
//!   listings, PUT, DELETE, COPY; `multipart` for uploads in parts, whose
//!   parts become the key's block groups without copying).
//! - GET and HEAD object are served by this crate's own route so that
//!   [`range`] (RFC 9110 / Amazon semantics) and conditionals are exact, and
//!   a ranged GET costs O(range): the read starts at the range, never reads
//!   and discards.
//! - [`GatewayMetrics`]: requests by operation and status, bytes, key lookups.
//!
//! - Identity and access: the administrator's key pair from the config, the
//!   om's S3 users (secrets asked of the om on every signed request), bucket
//!   owners and canned ACLs (`access`, `acl`).
//!
//! Where s3s differs from Amazon, this crate overrides it: s3s rejects a
//! malformed `Range` header that Amazon ignores (the GET/HEAD route takes
//! over before s3s parses it), and its `SimpleAuth` answers an unknown
//! access key with `NotSignedUp` where Amazon says `InvalidAccessKeyId`.
//!
//! Layering: uses `ec-client` only (never datanodes or the om directly).

mod access;
mod acl;
mod attributes;
mod buckets;
mod conditional;
mod connection;
mod copy;
mod digests;
mod error;
mod get;
mod in_flight;
mod integrity;
mod listing;
mod metrics;
mod multipart;
mod object_meta;
pub mod objects;
mod observability;
pub mod range;
mod request_ids;
mod tagging;
mod unsupported;
mod write_conditions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use connection::DEFAULT_MAX_CONNECTIONS;
use ec_client::Client;
pub use error::to_s3;
pub use in_flight::{DEFAULT_MAX_REQUESTS_IN_FLIGHT, DEFAULT_REQUEST_IDLE_TIMEOUT};
pub use integrity::checksum_header;
pub use metrics::{GatewayMetrics, GatewaySnapshot};
pub use multipart::MIN_PART_SIZE;
use proto_crate::ServingTask;
use s3s::service::S3ServiceBuilder;
use tracing::Instrument;

/// How to run a gateway.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The administrator's (access key, secret key): requests signed with
    /// it may do anything. With it, requests are checked: signed with this
    /// pair or with a key of one of the om's S3 users (SigV4), or anonymous
    /// where an ACL makes the resource public. `None` accepts every request
    /// unchecked (tests only).
    pub credentials: Option<(String, String)>,
    /// Object bytes one request may hold in memory at once (default 12 MiB):
    /// GET streams in chunks of a third of it; a PUT, UploadPart or copy
    /// holds at most half of it waiting for its digests. The client
    /// library's EC writer behind a PUT holds its stripes beside this
    /// (`ClientConfig::ec_stripes_in_flight`: up to 35 MiB for
    /// rs-3-2-1024k), so N PUTs at once hold N times both, N at most
    /// [`max_requests_in_flight`](Self::max_requests_in_flight).
    pub max_request_buffer: u64,
    /// Requests served at once (default
    /// [`DEFAULT_MAX_REQUESTS_IN_FLIGHT`], at least 1), each from its
    /// arrival until its answer has been sent to its end; one more is
    /// answered 503 `SlowDown` at once, closing a connection whose
    /// request body is left unread (`in_flight.rs`). Idle keep-alive connections do not count.
    pub max_requests_in_flight: usize,
    /// Client connections open at once (default [`DEFAULT_MAX_CONNECTIONS`], at least 1),
    /// idle or not, TLS handshakes included. At the limit the gateway stops accepting; new
    /// connections wait in the kernel's listen backlog (1,024) until one closes
    /// (`connection.rs`).
    pub max_connections: usize,
    /// Longest wait for a client's next bytes, or for its socket to take
    /// more of an answer (default [`DEFAULT_REQUEST_IDLE_TIMEOUT`], 30 s;
    /// 1 ms to 1 day). The gateway serves HTTP/1.1 only. Each of these ends
    /// its connection:
    /// - a new connection (over HTTPS: once its handshake, which has a
    ///   timeout of its own, is done) that sends nothing for that long, a
    ///   request head that takes longer, and a keep-alive connection idle
    ///   that long between requests (hyper's header read timeout);
    /// - an answer whose socket takes nothing for that long (a GET the
    ///   client no longer reads; one it reads very slowly may be cut too,
    ///   as `connection.rs` explains).
    ///
    /// A request body silent that long fails its reads: a PUT, UploadPart or
    /// checked XML body is answered 400 `RequestTimeout` (Amazon S3's answer
    /// to a socket "not read from or written to within the timeout period"),
    /// other bodies s3s reads end with s3s's own error. In every case the
    /// request's place among those in flight is free again.
    pub request_idle_timeout: Duration,
    /// Where to serve `/metrics` (Prometheus text format), if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// HTTPS: serve S3 over TLS with this certificate (`--tls-cert`,
    /// `--tls-key`); `None` (the default): plain HTTP.
    pub https: Option<proto_crate::tls::TlsConfig>,
}

impl GatewayConfig {
    /// A config listening on `listen`, requiring SigV4 with `access_key`/`secret_key`.
    #[must_use]
    pub fn new(listen: SocketAddr, access_key: &str, secret_key: &str) -> Self {
        Self {
            listen,
            credentials: Some((access_key.to_string(), secret_key.to_string())),
            max_request_buffer: 12 * 1024 * 1024,
            max_requests_in_flight: DEFAULT_MAX_REQUESTS_IN_FLIGHT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_idle_timeout: DEFAULT_REQUEST_IDLE_TIMEOUT,
            metrics_listen: None,
            https: None,
        }
    }

    /// Serves HTTPS with `tls`'s certificate and key (TLS 1.2 and 1.3,
    /// HTTP/1.1 only; no client certificates).
    #[must_use]
    pub fn with_https(mut self, tls: proto_crate::tls::TlsConfig) -> Self {
        self.https = Some(tls);
        self
    }

    /// Serves at most `n` requests at once (at least 1; see
    /// [`max_requests_in_flight`](Self::max_requests_in_flight)).
    #[must_use]
    pub fn with_max_requests_in_flight(mut self, n: usize) -> Self {
        self.max_requests_in_flight = n.max(1);
        self
    }

    /// Keeps at most `n` client connections open (at least 1; see
    /// [`max_connections`](Self::max_connections)).
    #[must_use]
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Waits at most `timeout` for a client's next bytes (see
    /// [`request_idle_timeout`](Self::request_idle_timeout); clamped to
    /// 1 ms ..= 1 day).
    #[must_use]
    pub fn with_request_idle_timeout(mut self, timeout: Duration) -> Self {
        self.request_idle_timeout =
            timeout.clamp(Duration::from_millis(1), Duration::from_secs(86_400));
        self
    }

    /// Serves `/metrics` on `listen` (port 0 picks a free one).
    #[must_use]
    pub fn with_metrics_listen(mut self, listen: SocketAddr) -> Self {
        self.metrics_listen = Some(listen);
        self
    }

    /// Accepts unsigned requests (for tests that speak raw HTTP).
    #[must_use]
    pub fn without_auth(mut self) -> Self {
        self.credentials = None;
        self
    }
}

/// The S3 implementation over a [`Client`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    client: Client,
    metrics: Arc<GatewayMetrics>,
    max_buffer: u64,
    /// Whether requests are authenticated (a request that reached an
    /// operation without a principal then counts as anonymous).
    auth: bool,
}

impl Gateway {
    /// The S3 operations over `client`, without a listener: what
    /// [`S3Gateway::start`] serves, for embedding in another server or for
    /// driving its `s3s::S3` methods directly (the cancellation tests drop
    /// their futures at each await point). `max_request_buffer` bounds, in
    /// bytes, what one request may hold in memory (at least 192 KiB).
    #[must_use]
    pub fn new(client: Client, max_request_buffer: u64) -> Self {
        Self {
            client,
            metrics: Arc::new(GatewayMetrics::default()),
            max_buffer: max_request_buffer.max(192 * 1024),
            auth: false,
        }
    }

    /// An anonymous PUT request carrying `input`, for calling this
    /// gateway's `s3s::S3` methods directly (no HTTP, no signature: the
    /// caller is trusted, as behind [`GatewayConfig::without_auth`]).
    #[must_use]
    pub fn request<T>(input: T) -> s3s::S3Request<T> {
        s3s::S3Request {
            input,
            method: http::Method::PUT,
            uri: http::Uri::from_static("/"),
            headers: http::HeaderMap::new(),
            extensions: http::Extensions::new(),
            credentials: None,
            region: None,
            service: None,
            trailing_headers: None,
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
    pub(crate) fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.metrics
    }
    pub(crate) fn max_buffer(&self) -> u64 {
        self.max_buffer
    }

    pub(crate) fn auth(&self) -> bool {
        self.auth
    }
}

/// A running gateway.
///
/// Started by [`S3Gateway::start`]; its accept loop runs until
/// [`S3Gateway::shutdown`] or drop (the loop stops accepting; connections in
/// flight finish on their own tasks).
#[derive(Debug)]
pub struct S3Gateway {
    address: SocketAddr,
    /// `http` or `https`.
    scheme: &'static str,
    metrics: Arc<GatewayMetrics>,
    serving: ServingTask<()>,
    metrics_server: Option<proto_crate::metrics_http::MetricsServer>,
}

impl S3Gateway {
    /// Binds `config.listen` and serves S3 over `client` (HTTPS with
    /// [`GatewayConfig::https`]).
    ///
    /// # Errors
    /// Bind errors; an HTTPS certificate rustls refuses (as
    /// [`std::io::ErrorKind::Other`]).
    pub async fn start(client: Client, config: GatewayConfig) -> std::io::Result<Self> {
        let mut gw = Gateway::new(client, config.max_request_buffer);
        gw.auth = config.credentials.is_some();
        let idle_timeout = config.request_idle_timeout;
        let metrics = Arc::clone(&gw.metrics);
        let metrics_server = match config.metrics_listen {
            Some(addr) => Some(
                proto_crate::metrics_http::MetricsServer::start(
                    addr,
                    Arc::new(observability::registry(&metrics, gw.client())),
                )
                .await?,
            ),
            None => None,
        };
        let mut builder = S3ServiceBuilder::new(gw.clone());
        builder.set_validation(buckets::BucketNames);
        let access = config
            .credentials
            .clone()
            .map(|admin| access::Authorizer::new(gw.client().clone(), Some(admin)));
        if let Some(a) = &access {
            builder.set_auth(a.clone());
            builder.set_access(a.clone());
        }
        builder.set_route(get::ObjectReadRoute { gw, access });
        let service = builder.build();
        let acceptor = config
            .https
            .as_ref()
            .map(proto_crate::tls::TlsConfig::https_acceptor)
            .transpose()
            .map_err(std::io::Error::other)?;
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let mut address = listener.local_addr()?;
        if address.ip().is_unspecified() {
            address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let metrics_for_loop = Arc::clone(&metrics);
        let limit =
            in_flight::RequestLimit::new(config.max_requests_in_flight, Arc::clone(&metrics));
        let connections = connection::limit(config.max_connections, Arc::clone(&metrics));
        let serving = ServingTask::spawn(|stop| async move {
            let stop = stop.wait();
            tokio::pin!(stop);
            loop {
                // At the connection limit, stop accepting until one ends (connection.rs).
                let place = tokio::select! {
                    () = &mut stop => break,
                    place = connections.reserve() => match place {
                        Some(place) => place,
                        None => break,
                    },
                };
                tokio::select! {
                    () = &mut stop => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else {
                            // Transient accept errors (fd limits): back off a little.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        let slot = connections.count(place);
                        let _ = stream.set_nodelay(true);
                        let service = service.clone();
                        let counted = Arc::clone(&metrics_for_loop);
                        let limit = limit.clone();
                        // Count every response, including s3s's own rejections.
                        // Every request: an id (answered, logged, sent on to the om and
                        // datanodes), and a count of its answer, s3s's own rejections included.
                        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                            let service = service.clone();
                            let counted = Arc::clone(&counted);
                            let id = request_ids::new_id();
                            let span = tracing::info_span!(
                                "s3",
                                request_id = %id,
                                method = %req.method(),
                                path = %req.uri().path()
                            );
                            let refusal = request_ids::refuse_long_presigned(req.uri());
                            let continues = request_ids::expects_continue(&req);
                            // A refusal of a request whose body is left unread closes its
                            // connection; one without a body keeps it.
                            let close = !hyper::body::Body::is_end_stream(req.body());
                            let scoped = Some(Arc::clone(&id));
                            // Held by the answer's body until it is sent (in_flight.rs).
                            let admission = limit.admit();
                            let work = async move {
                                let busy = admission.is_none();
                                let mut r = match refusal {
                                    _ if busy => Ok(in_flight::slow_down(close)),
                                    Some(resp) => Ok(resp),
                                    None => match request_ids::checked_xml_body(req.map(|b| in_flight::IdleBody::wrap(b, idle_timeout))).await {
                                        Ok(req) => service.call(req).await,
                                        Err(refused) => Ok(refused),
                                    },
                                };
                                if let Ok(resp) = &mut r {
                                    request_ids::stamp(resp, &id);
                                    if continues {
                                        request_ids::close_after_refusal(resp);
                                    }
                                    let status = resp.status().as_u16();
                                    counted.response(status);
                                    if busy {
                                        tracing::debug!("s3 request refused: too many in flight");
                                    } else if status >= 500 {
                                        tracing::warn!(status, "s3 request failed");
                                    } else {
                                        tracing::debug!(status, "s3 request");
                                    }
                                }
                                r.map(|resp| resp.map(|body| in_flight::HeldBody::new(body, admission)))
                            };
                            proto_crate::request_id::scope(scoped, work)
                                .instrument(span)
                        });
                        tokio::spawn(connection::serve(stream, acceptor.clone(), svc, idle_timeout, slot));
                    }
                }
            }
        });
        tracing::info!(%address, scheme, "s3 gateway serving");
        Ok(Self {
            address,
            scheme,
            metrics,
            serving,
            metrics_server,
        })
    }

    /// `http://HOST:PORT` or `https://HOST:PORT`: what S3 clients take as
    /// their endpoint URL.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("{}://{}", self.scheme, self.address)
    }

    /// `http://HOST:PORT/metrics`, when the gateway serves its metrics.
    #[must_use]
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_server
            .as_ref()
            .map(proto_crate::metrics_http::MetricsServer::url)
    }

    /// `HOST:PORT` served on.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The gateway's counters.
    #[must_use]
    pub fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.metrics
    }

    /// Stops accepting connections and waits for the accept loop.
    pub async fn shutdown(mut self) {
        self.serving.stop(Duration::from_secs(5)).await;
    }
}
