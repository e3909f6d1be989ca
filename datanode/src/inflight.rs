//! The datanode's memory budget for request payloads in flight.
//!
//! Every ReadChunk answer and WriteChunk payload is charged against one
//! semaphore of `--max-inflight-bytes` permits (one per byte) before the
//! datanode allocates or writes it; requests past the budget wait their turn
//! (backpressure), so concurrent large reads cannot make the process allocate
//! without bound. A ReadChunk's charge is held by its answer's buffer and
//! returned when the transport has encoded it and dropped the buffer. A single
//! request larger than the whole budget is charged the whole budget, so it
//! runs alone instead of waiting forever.
//!
//! What it does not cover: a WriteChunk's payload is decoded by the transport
//! before the handler runs, so its memory exists while it waits; it is
//! bounded by the gRPC message cap times the transport's concurrent streams.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::DatanodeMetrics;

/// Default `--max-inflight-bytes`: 256 MiB.
pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 256 * 1024 * 1024;

/// Largest budget, bytes (the semaphore counts permits in `u32` steps).
pub const MAX_BUDGET: u64 = u32::MAX as u64;

/// The budget: a semaphore of byte permits and the counters it reports.
#[derive(Debug)]
pub struct InflightBudget {
    semaphore: Arc<Semaphore>,
    budget: u32,
    metrics: Arc<DatanodeMetrics>,
}

/// Bytes charged to the budget; returned when dropped.
#[derive(Debug)]
pub struct InflightPermit {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
    metrics: Arc<DatanodeMetrics>,
}

impl Drop for InflightPermit {
    fn drop(&mut self) {
        self.metrics.inflight_sub(self.bytes);
    }
}

impl InflightBudget {
    /// A budget of `bytes` (clamped to 1..=`MAX_BUDGET`) reporting into `metrics`.
    #[must_use]
    pub fn new(bytes: u64, metrics: Arc<DatanodeMetrics>) -> Self {
        let budget = u32::try_from(bytes.clamp(1, MAX_BUDGET)).unwrap_or(u32::MAX);
        Self {
            semaphore: Arc::new(Semaphore::new(budget as usize)),
            budget,
            metrics,
        }
    }

    /// The budget, bytes.
    #[must_use]
    pub fn budget(&self) -> u64 {
        u64::from(self.budget)
    }

    /// Waits until `bytes` (at most the whole budget) can be charged, then
    /// charges them. Zero bytes charge nothing and never wait.
    pub async fn acquire(&self, bytes: u64) -> InflightPermit {
        let charge = u32::try_from(bytes.min(u64::from(self.budget))).unwrap_or(self.budget);
        let permit = if charge == 0 {
            None
        } else {
            // The semaphore is never closed, so acquiring only waits.
            Arc::clone(&self.semaphore)
                .acquire_many_owned(charge)
                .await
                .ok()
        };
        let charged = if permit.is_some() {
            u64::from(charge)
        } else {
            0
        };
        self.metrics.inflight_add(charged);
        InflightPermit {
            _permit: permit,
            bytes: charged,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

struct Charged {
    data: Bytes,
    _permit: InflightPermit,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// `data` holding `permit` until its last clone is dropped (zero-copy).
#[must_use]
pub fn hold(data: Bytes, permit: InflightPermit) -> Bytes {
    Bytes::from_owner(Charged {
        data,
        _permit: permit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn charges_wait_and_peak_stays_within_budget() {
        let metrics = Arc::new(DatanodeMetrics::default());
        let b = InflightBudget::new(100, Arc::clone(&metrics));
        let a = b.acquire(60).await;
        assert_eq!(metrics.inflight_bytes(), 60);
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(50), b.acquire(60)).await;
        assert!(blocked.is_err(), "past the budget, a charge waits");
        let held = hold(Bytes::from_static(b"abc"), a);
        let clone = held.clone();
        drop(held);
        assert_eq!(
            metrics.inflight_bytes(),
            60,
            "a clone still holds the charge"
        );
        drop(clone);
        assert_eq!(metrics.inflight_bytes(), 0);
        let big = b.acquire(1_000).await;
        assert_eq!(
            metrics.inflight_bytes(),
            100,
            "an oversized request is charged the whole budget"
        );
        drop(big);
        assert_eq!(metrics.peak_inflight_bytes(), 100);
        let none = b.acquire(0).await;
        assert_eq!(metrics.inflight_bytes(), 0);
        drop(none);
    }
}
