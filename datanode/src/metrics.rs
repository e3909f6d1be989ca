//! Server-side counters of one datanode: RPCs served by kind, bytes moved.
//! Exact atomics, so tests can compare them with the client's counts.

use std::sync::atomic::{AtomicU64, Ordering};

pub use proto_crate::RpcKind;

/// Counters of one datanode (`datanode_rpcs_total{kind}`, `datanode_read_bytes`,
/// `datanode_written_bytes`). Shared between the service and its handle.
#[derive(Debug, Default)]
pub struct DatanodeMetrics {
    rpcs_total: [AtomicU64; RpcKind::ALL.len()],
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    inflight_bytes: AtomicU64,
    peak_inflight_bytes: AtomicU64,
    connections_accepted: AtomicU64,
}

impl DatanodeMetrics {
    pub(crate) fn record(&self, kind: RpcKind) {
        self.rpcs_total[kind as usize].fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn record_read(&self, n: u64) {
        self.read_bytes.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn record_written(&self, n: u64) {
        self.written_bytes.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn inflight_add(&self, n: u64) {
        let now = self.inflight_bytes.fetch_add(n, Ordering::Relaxed) + n;
        self.peak_inflight_bytes.fetch_max(now, Ordering::Relaxed);
    }
    pub(crate) fn inflight_sub(&self, n: u64) {
        self.inflight_bytes.fetch_sub(n, Ordering::Relaxed);
    }
    pub(crate) fn record_connection(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
    }
    /// TCP connections the gRPC server accepted so far (each client opens
    /// one per datanode for small calls, and one more once it moves bulk
    /// data: see `XceiverConfig::bulk_transfer_bytes` in block-stream).
    #[must_use]
    pub fn connections_accepted(&self) -> u64 {
        self.connections_accepted.load(Ordering::Relaxed)
    }
    /// Request payload bytes charged to the in-flight budget now.
    #[must_use]
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight_bytes.load(Ordering::Relaxed)
    }
    /// The most payload bytes ever charged to the in-flight budget at once
    /// (never above `--max-inflight-bytes`).
    #[must_use]
    pub fn peak_inflight_bytes(&self) -> u64 {
        self.peak_inflight_bytes.load(Ordering::Relaxed)
    }
    /// RPCs of `kind` received so far (failed ones included).
    #[must_use]
    pub fn rpcs(&self, kind: RpcKind) -> u64 {
        self.rpcs_total[kind as usize].load(Ordering::Relaxed)
    }
    /// Payload bytes returned by ReadChunk.
    #[must_use]
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }
    /// Payload bytes accepted by WriteChunk.
    #[must_use]
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.load(Ordering::Relaxed)
    }
}
