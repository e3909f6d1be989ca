//! [`RpcMetricsLayer`]: a server layer that counts every gRPC call of a
//! process by method and status code and times it, into a Prometheus
//! registry — the same for the om and the datanode:
//!
//! - `rpc_server_calls_total{service, method, code}` (counter);
//! - `rpc_server_duration_seconds{service, method}` (histogram, 50 µs to
//!   about 52 s in powers of 2).
//!
//! Label values are bounded by code: `method` is one of the names the
//! process serves (anything else is `other`), `code` one of gRPC's 17 status
//! names. Source: the gRPC status codes (`grpc/doc/statuscodes.md`), and the
//! OpenTelemetry RPC metric conventions (`rpc.server.duration`) for the shape.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type CallLabels = [(&'static str, &'static str); 3];
type TimeLabels = [(&'static str, &'static str); 2];

/// Builds the duration histogram of one (service, method).
#[derive(Debug, Clone, Copy)]
struct Buckets;

impl prometheus_client::metrics::family::MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.000_05, 2.0, 21))
    }
}

/// The counters and histograms of one gRPC service.
#[derive(Debug, Clone)]
pub struct RpcMetrics {
    service: &'static str,
    methods: Arc<[&'static str]>,
    calls: Family<CallLabels, Counter>,
    durations: Family<TimeLabels, Histogram, Buckets>,
}

impl RpcMetrics {
    /// Metrics of `service` (a label value, e.g. `datanode`), whose RPCs are
    /// `methods` (their gRPC method names, e.g. `ReadChunk`), registered in
    /// `registry`.
    pub fn register(
        registry: &mut Registry,
        service: &'static str,
        methods: &[&'static str],
    ) -> Self {
        let calls = Family::<CallLabels, Counter>::default();
        let durations = Family::<TimeLabels, Histogram, Buckets>::new_with_constructor(Buckets);
        registry.register(
            "rpc_server_calls",
            "gRPC calls served, by service, method and status code",
            calls.clone(),
        );
        registry.register_with_unit(
            "rpc_server_duration",
            "Time from a call's arrival to its answer's headers, by service and method",
            prometheus_client::registry::Unit::Seconds,
            durations.clone(),
        );
        Self {
            service,
            methods: methods.into(),
            calls,
            durations,
        }
    }

    /// The label of the method a request path (`/package.Service/Method`) names.
    fn method_of(&self, path: &str) -> &'static str {
        let name = path.rsplit('/').next().unwrap_or_default();
        self.methods
            .iter()
            .find(|m| **m == name)
            .copied()
            .unwrap_or("other")
    }

    fn record(&self, method: &'static str, code: tonic::Code, started: Instant) {
        self.calls
            .get_or_create(&[
                ("service", self.service),
                ("method", method),
                ("code", code_name(code)),
            ])
            .inc();
        self.durations
            .get_or_create(&[("service", self.service), ("method", method)])
            .observe(started.elapsed().as_secs_f64());
    }

    /// The calls counted so far of `method` answered with `code` (for tests).
    #[must_use]
    pub fn calls(&self, method: &'static str, code: tonic::Code) -> u64 {
        self.calls
            .get_or_create(&[
                ("service", self.service),
                ("method", method),
                ("code", code_name(code)),
            ])
            .get()
    }

    /// A server layer that records into these metrics.
    #[must_use]
    pub fn layer(&self) -> RpcMetricsLayer {
        RpcMetricsLayer(self.clone())
    }
}

/// gRPC's name of `code` (`OK`, `NOT_FOUND`, …).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The layer [`RpcMetrics::layer`] returns.
#[derive(Debug, Clone)]
pub struct RpcMetricsLayer(RpcMetrics);

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RpcMetricsService {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service [`RpcMetricsLayer`] wraps around an RPC service.
#[derive(Debug, Clone)]
pub struct RpcMetricsService<S> {
    inner: S,
    metrics: RpcMetrics,
}

impl<S, B, RB> tower::Service<http::Request<B>> for RpcMetricsService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let started = Instant::now();
        let method = self.metrics.method_of(req.uri().path());
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            // A failed unary call answers trailers-only: its status is in the
            // headers. A successful one sends it in the trailers, after the body.
            let code = match &r {
                Ok(resp) => resp
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(tonic::Code::Ok, tonic::Code::from),
                Err(_) => tonic::Code::Unknown,
            };
            metrics.record(method, code, started);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_service_share_one_label() {
        let mut registry = Registry::default();
        let m = RpcMetrics::register(&mut registry, "datanode", &["ReadChunk", "PutBlock"]);
        assert_eq!(
            m.method_of("/ozone.datanode.v1.Datanode/ReadChunk"),
            "ReadChunk"
        );
        assert_eq!(m.method_of("/x.Y/ReadChunkz"), "other");
        assert_eq!(m.method_of(""), "other");
        m.record("ReadChunk", tonic::Code::NotFound, Instant::now());
        assert_eq!(m.calls("ReadChunk", tonic::Code::NotFound), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                r#"rpc_server_calls_total{service="datanode",method="ReadChunk",code="NOT_FOUND"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains("rpc_server_duration_seconds_bucket"),
            "{text}"
        );
    }
}
