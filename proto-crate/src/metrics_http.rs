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

/// How long a scrape connection may stay open (a scrape is one request).
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

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
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a /metrics connection");
                    continue;
                }
            },
        };
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let registry = Arc::clone(&registry);
                async move { Ok::<_, Infallible>(answer(&req, &registry)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            // A slow or stuck scraper cannot hold a task forever.
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, conn).await;
        });
    }
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
