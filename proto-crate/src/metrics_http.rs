//! [`MetricsServer`]: the `/metrics` endpoint of every process (om,
//! datanode, S3 gateway): `GET /metrics` answers the process's Prometheus
//! registry in the Prometheus text exposition format 0.0.4, read at scrape
//! time. Anything else is 404 (405 for another method on `/metrics`).
//! Source: Prometheus, "Exposition formats" (text-based format).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::{ServingTask, ShutdownSignal};

/// Scrape connections served at once; more are closed at once (the port is
/// not authenticated: nobody may hold the process's tasks or descriptors).
const MAX_CONNECTIONS: usize = 16;

/// How long a connection may take to send a request's headers, or stay idle
/// between requests.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a connection is kept, whatever it does: a peer that trickles a
/// request body or never reads its answer cannot hold one of the
/// [`MAX_CONNECTIONS`] slots for longer. A scraper keeping its connection
/// alive (Prometheus does) simply reconnects.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// After [`CONNECTION_LIFETIME`], how long an answer being written may take
/// to finish before the connection is cut.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// How long to wait after a failed accept (out of descriptors, say) before
/// the next, so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A running `/metrics` endpoint. Dropping it stops the accept loop.
#[derive(Debug)]
pub struct MetricsServer {
    address: SocketAddr,
    task: ServingTask<()>,
}

impl MetricsServer {
    /// Binds `listen` (port 0 picks a free one) and serves `registry`.
    ///
    /// # Errors
    /// Bind errors.
    pub async fn start(listen: SocketAddr, registry: Arc<Registry>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let task = ServingTask::spawn(move |shutdown| accept(listener, registry, shutdown));
        Ok(Self { address, task })
    }

    /// Where it listens.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://HOST:PORT/metrics`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.address)
    }

    /// Stops accepting (scrapes in progress finish on their own).
    pub async fn stop(mut self) {
        self.task.stop(Duration::from_secs(1)).await;
    }
}

async fn accept(listener: TcpListener, registry: Arc<Registry>, shutdown: ShutdownSignal) {
    let shutdown = shutdown.wait();
    tokio::pin!(shutdown);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a /metrics connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Over the limit: the connection is closed unanswered.
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            continue;
        };
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let registry = Arc::clone(&registry);
                async move { Ok::<_, Infallible>(answer(&req, &registry)) }
            });
            // A scraper that sends nothing (or stays idle) is dropped after
            // HEADER_TIMEOUT. At CONNECTION_LIFETIME the connection is told
            // to end: an answer under way is finished (keep-alive is off),
            // within CLOSE_GRACE.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = tokio::time::sleep(CONNECTION_LIFETIME) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
                }
            }
        });
    }
}

/// Encodes one counter sample `name` (the encoder appends `_total`).
///
/// # Errors
/// The encoder's.
pub fn encode_counter(
    e: &mut prometheus_client::encoding::DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeMetric;
    let c = prometheus_client::metrics::counter::ConstCounter::new(value);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

/// Encodes one gauge sample `name` (values past `i64::MAX` saturate).
///
/// # Errors
/// The encoder's.
pub fn encode_gauge(
    e: &mut prometheus_client::encoding::DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeMetric;
    let g = prometheus_client::metrics::gauge::ConstGauge::new(
        i64::try_from(value).unwrap_or(i64::MAX),
    );
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn answer(req: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            r.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        r
    };
    if req.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "only /metrics is served\n".into(),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET /metrics\n".into(),
        );
    }
    let mut text = String::new();
    match prometheus_text::encode(&mut text, registry) {
        Ok(()) => reply(StatusCode::OK, prometheus_text::CONTENT_TYPE, text),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "encoding the metrics failed\n".into(),
        ),
    }
}
