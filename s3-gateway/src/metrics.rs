//! Gateway counters: requests by operation and status, bytes in and out, om
//! key lookups. Exact atomics; names follow `s3_<what>_total` / `_bytes`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Counters of one gateway. The maps are bounded by code, not by requests:
/// operation names come from the fixed set of S3 operations the gateway
/// serves and statuses from the HTTP statuses it sends.
#[derive(Debug, Default)]
pub struct GatewayMetrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    responses: Mutex<BTreeMap<u16, u64>>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    key_lookups: AtomicU64,
    /// Requests admitted and not yet answered to the end (`crate::in_flight`).
    pub(crate) in_flight: AtomicU64,
    /// Requests refused with 503 SlowDown at the limit.
    pub(crate) refused_busy: AtomicU64,
    /// Client connections open now (`crate::connection`).
    pub(crate) connections_open: AtomicU64,
}

/// A copy of [`GatewayMetrics`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewaySnapshot {
    /// `s3_requests_total{operation, status}`, for requests that reached an
    /// operation (authenticated and routed).
    pub requests: BTreeMap<(String, u16), u64>,
    /// `s3_responses_total{status}`: every HTTP response, including the ones
    /// s3s sends before an operation runs (signature errors, unknown
    /// operations, malformed requests).
    pub responses: BTreeMap<u16, u64>,
    /// `s3_received_bytes`: object bytes accepted (PUT, UploadPart).
    pub bytes_in: u64,
    /// `s3_sent_bytes`: object bytes sent (GET).
    pub bytes_out: u64,
    /// `s3_key_lookups_total`: om key lookups the gateway made.
    pub key_lookups: u64,
    /// `s3_requests_in_flight` (a gauge): requests admitted whose answer
    /// has not been sent to its end.
    pub requests_in_flight: u64,
    /// `s3_requests_refused_busy_total`: requests answered 503 SlowDown
    /// because `GatewayConfig::max_requests_in_flight` were in flight.
    pub requests_refused_busy: u64,
    /// `s3_connections_open` (a gauge): client connections accepted and not
    /// yet closed, at most `GatewayConfig::max_connections`.
    pub connections_open: u64,
}

impl GatewaySnapshot {
    /// Requests of `operation` (any status).
    #[must_use]
    pub fn requests_of(&self, operation: &str) -> u64 {
        self.requests
            .iter()
            .filter(|((op, _), _)| op == operation)
            .map(|(_, n)| n)
            .sum()
    }
}

impl GatewayMetrics {
    pub(crate) fn request(&self, operation: &str, status: u16) {
        let mut m = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry((operation.to_string(), status)).or_default() += 1;
    }
    pub(crate) fn response(&self, status: u16) {
        let mut m = self
            .responses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry(status).or_default() += 1;
    }
    pub(crate) fn bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn key_lookup(&self) {
        self.key_lookups.fetch_add(1, Ordering::Relaxed);
    }

    /// Current values.
    #[must_use]
    pub fn snapshot(&self) -> GatewaySnapshot {
        GatewaySnapshot {
            requests: self
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            responses: self
                .responses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            key_lookups: self.key_lookups.load(Ordering::Relaxed),
            requests_in_flight: self.in_flight.load(Ordering::Relaxed),
            requests_refused_busy: self.refused_busy.load(Ordering::Relaxed),
            connections_open: self.connections_open.load(Ordering::Relaxed),
        }
    }
}

/// A bound on places the gateway hands out (requests in flight, `crate::in_flight`; open
/// connections, `crate::connection`), each place counted in one of [`GatewayMetrics`]' gauges
/// while it is held.
#[derive(Debug, Clone)]
pub(crate) struct CountedLimit {
    permits: Arc<Semaphore>,
    metrics: Arc<GatewayMetrics>,
    gauge: fn(&GatewayMetrics) -> &AtomicU64,
}

impl CountedLimit {
    /// `max` places (at least 1), counted in `gauge` of `metrics`.
    pub(crate) fn new(
        max: usize,
        metrics: Arc<GatewayMetrics>,
        gauge: fn(&GatewayMetrics) -> &AtomicU64,
    ) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
            metrics,
            gauge,
        }
    }

    /// The metrics the places are counted in.
    pub(crate) fn metrics(&self) -> &GatewayMetrics {
        &self.metrics
    }

    /// A place now, counted; `None` when all are taken.
    pub(crate) fn try_take(&self) -> Option<CountedPermit> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        Some(self.count(permit))
    }

    /// Waits for a place, not counted until [`count`](Self::count) (a connection's place is
    /// taken before it is accepted); `None` only if the semaphore were closed, which nothing
    /// does.
    pub(crate) async fn reserve(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).acquire_owned().await.ok()
    }

    /// `permit` (one of this limit's), counted from now until dropped.
    pub(crate) fn count(&self, permit: OwnedSemaphorePermit) -> CountedPermit {
        (self.gauge)(&self.metrics).fetch_add(1, Ordering::Relaxed);
        CountedPermit {
            permit: Some(permit),
            metrics: Arc::clone(&self.metrics),
            gauge: self.gauge,
        }
    }
}

/// A place of a [`CountedLimit`], counted in its gauge while held. When it is dropped the
/// permit goes back first, so that whoever sees the gauge fall can take the place at once.
#[derive(Debug)]
pub(crate) struct CountedPermit {
    permit: Option<OwnedSemaphorePermit>,
    metrics: Arc<GatewayMetrics>,
    gauge: fn(&GatewayMetrics) -> &AtomicU64,
}

impl Drop for CountedPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        (self.gauge)(&self.metrics).fetch_sub(1, Ordering::Relaxed);
    }
}
