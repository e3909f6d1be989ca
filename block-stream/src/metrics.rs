//! Client-side counters: RPCs by kind and by datanode, bytes moved.
//!
//! Counts are exact (atomics, no sampling) so tests can assert them. Names
//! follow the `<what>_total` / `_bytes` convention for a later Prometheus export.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use proto_crate::RpcKind;

/// Counters of one datanode, shared by its cached client.
#[derive(Debug, Default)]
pub(crate) struct DatanodeCounters {
    rpcs: [AtomicU64; RpcKind::ALL.len()],
}

/// Exact client-side counters, shared by every stream of one client.
#[derive(Debug, Default)]
pub struct ClientMetrics {
    rpcs_total: [AtomicU64; RpcKind::ALL.len()],
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    token_refreshes: AtomicU64,
    by_datanode: Mutex<BTreeMap<String, Arc<DatanodeCounters>>>,
}

/// Most datanode addresses counted one by one; RPCs to further addresses
/// are counted under [`OTHER_DATANODES`].
pub const MAX_TRACKED_DATANODES: usize = 1024;

/// The `by_datanode` key of RPCs to datanodes past [`MAX_TRACKED_DATANODES`].
pub const OTHER_DATANODES: &str = "other";

impl ClientMetrics {
    pub(crate) fn datanode(&self, address: &str) -> Arc<DatanodeCounters> {
        let mut map = self
            .by_datanode
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = map.get(address) {
            return Arc::clone(c);
        }
        let key = if map.len() < MAX_TRACKED_DATANODES {
            address
        } else {
            OTHER_DATANODES
        };
        Arc::clone(map.entry(key.to_string()).or_default())
    }

    pub(crate) fn record_rpc(&self, dn: &DatanodeCounters, kind: RpcKind) {
        self.rpcs_total[kind.index()].fetch_add(1, Ordering::Relaxed);
        dn.rpcs[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_read(&self, bytes: u64) {
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn record_written(&self, bytes: u64) {
        self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn record_token_refresh(&self) {
        self.token_refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// RPCs of `kind` issued so far, over all datanodes.
    #[must_use]
    pub fn rpcs(&self, kind: RpcKind) -> u64 {
        self.rpcs_total[kind.index()].load(Ordering::Relaxed)
    }

    /// A consistent-enough copy of every counter (each counter is read once).
    #[must_use]
    pub fn snapshot(&self) -> MetricsSnapshot {
        let rpcs_total = RpcKind::ALL.iter().map(|k| (*k, self.rpcs(*k))).collect();
        let map = self
            .by_datanode
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let by_datanode = map
            .iter()
            .map(|(addr, c)| {
                let counts = RpcKind::ALL
                    .iter()
                    .map(|k| (*k, c.rpcs[k.index()].load(Ordering::Relaxed)))
                    .collect();
                (addr.clone(), counts)
            })
            .collect();
        MetricsSnapshot {
            rpcs_total,
            by_datanode,
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            token_refreshes: self.token_refreshes.load(Ordering::Relaxed),
        }
    }
}

/// A copy of [`ClientMetrics`] at one moment; subtract two with
/// [`MetricsSnapshot::since`] to count what a workload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// RPCs by kind, over all datanodes (`datanode_client_rpcs_total{kind}`).
    pub rpcs_total: BTreeMap<RpcKind, u64>,
    /// RPCs by datanode `HOST:PORT` and kind.
    pub by_datanode: BTreeMap<String, BTreeMap<RpcKind, u64>>,
    /// Payload bytes received by ReadChunk (`datanode_client_read_bytes`).
    pub read_bytes: u64,
    /// Payload bytes sent by WriteChunk (`datanode_client_written_bytes`).
    pub written_bytes: u64,
    /// Block tokens fetched afresh from the om after a datanode refused one
    /// (`BLOCK_TOKEN_VERIFICATION_FAILED`, an expired token mid-stream).
    pub token_refreshes: u64,
}

impl MetricsSnapshot {
    /// RPCs of `kind` in this snapshot.
    #[must_use]
    pub fn rpcs(&self, kind: RpcKind) -> u64 {
        self.rpcs_total.get(&kind).copied().unwrap_or(0)
    }

    /// RPCs of `kind` sent to `datanode` (`HOST:PORT`).
    #[must_use]
    pub fn rpcs_to(&self, datanode: &str, kind: RpcKind) -> u64 {
        self.by_datanode
            .get(datanode)
            .and_then(|m| m.get(&kind))
            .copied()
            .unwrap_or(0)
    }

    /// What happened between `earlier` and `self` (counters only grow).
    #[must_use]
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        let sub = |a: &BTreeMap<RpcKind, u64>, b: Option<&BTreeMap<RpcKind, u64>>| {
            a.iter()
                .map(|(k, v)| {
                    let before = b.and_then(|m| m.get(k)).copied().unwrap_or(0);
                    (*k, v.saturating_sub(before))
                })
                .collect::<BTreeMap<_, _>>()
        };
        MetricsSnapshot {
            rpcs_total: sub(&self.rpcs_total, Some(&earlier.rpcs_total)),
            by_datanode: self
                .by_datanode
                .iter()
                .map(|(dn, m)| (dn.clone(), sub(m, earlier.by_datanode.get(dn))))
                .collect(),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            written_bytes: self.written_bytes.saturating_sub(earlier.written_bytes),
            token_refreshes: self.token_refreshes.saturating_sub(earlier.token_refreshes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind_and_datanode_and_diffs() {
        let m = ClientMetrics::default();
        let a = m.datanode("a:1");
        let b = m.datanode("b:2");
        m.record_rpc(&a, RpcKind::GetBlock);
        let before = m.snapshot();
        m.record_rpc(&a, RpcKind::ReadChunk);
        m.record_rpc(&b, RpcKind::ReadChunk);
        m.record_read(10);
        let d = m.snapshot().since(&before);
        assert_eq!(d.rpcs(RpcKind::GetBlock), 0);
        assert_eq!(d.rpcs(RpcKind::ReadChunk), 2);
        assert_eq!(d.rpcs_to("a:1", RpcKind::ReadChunk), 1);
        assert_eq!(d.rpcs_to("b:2", RpcKind::ReadChunk), 1);
        assert_eq!(d.read_bytes, 10);
        assert_eq!(m.rpcs(RpcKind::GetBlock), 1);
    }

    #[test]
    fn per_datanode_counters_are_bounded() {
        let m = ClientMetrics::default();
        for i in 0..MAX_TRACKED_DATANODES + 10 {
            let c = m.datanode(&format!("10.0.0.1:{i}"));
            m.record_rpc(&c, RpcKind::ReadChunk);
        }
        let s = m.snapshot();
        assert_eq!(s.by_datanode.len(), MAX_TRACKED_DATANODES + 1);
        assert_eq!(s.rpcs_to(OTHER_DATANODES, RpcKind::ReadChunk), 10);
        assert_eq!(
            s.rpcs(RpcKind::ReadChunk),
            MAX_TRACKED_DATANODES as u64 + 10
        );
    }
}
