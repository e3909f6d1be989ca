//! What the om exports at `/metrics` (`--metrics-listen`): every gRPC call
//! by method and status code with its latency ([`proto_crate::rpc_metrics`]),
//! and, read from the om's state at scrape time:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `om_datanodes{state}` | gauge | registered datanodes by liveness (HEALTHY, STALE, DEAD) |
//! | `om_runs_services` | gauge | 1 while this om runs the background services (always, alone on its store), else 0 |
//! | `om_open_sessions` | gauge | key and part writes neither committed nor aborted |
//! | `om_pending_deletions` | gauge | replicas in the deletion log, not yet deleted |
//! | `om_repair_under_replicated` | gauge | block groups below full redundancy |
//! | `om_repair_in_flight` | gauge | repairs running |
//! | `om_repairs_completed_total` / `_failed_total` | counter | repairs ended |
//! | `om_repair_unrecoverable` | gauge | groups with too few readable indexes to rebuild |
//!
//! The deletion and repair figures are the background services' own: with several oms on
//! one etcd store, read them from the om whose `om_runs_services` is 1 (another keeps the
//! figures of its last term, or none).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use proto_crate::metrics_http::{encode_counter as counter, encode_gauge as gauge};
use proto_crate::rpc_metrics::RpcMetrics;

use crate::{NodeState, OzoneManager};

/// The gRPC methods the om serves (`OzoneManagerService` and `OmAdminService`):
/// the values of the `method` label.
pub(crate) const OM_METHODS: [&str; 34] = [
    "RegisterDatanode",
    "ListDatanodes",
    "Heartbeat",
    "BlockReport",
    "CreateBucket",
    "GetBucket",
    "ListBuckets",
    "DeleteBucket",
    "SetBucketAcl",
    "GetS3Secret",
    "OpenKey",
    "AllocateBlockGroup",
    "CommitKey",
    "AbortKey",
    "RenewKey",
    "LookupKey",
    "ListKeys",
    "DeleteKey",
    "SetKeyMetadata",
    "RenameKey",
    "GetBlockToken",
    "InitiateMultipartUpload",
    "OpenPart",
    "CommitPart",
    "ListParts",
    "ListMultipartUploads",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "AddReplica",
    "RepairStatus",
    "Decommission",
    "CreateUser",
    "ListUsers",
    "RevokeKey",
];

#[derive(Debug)]
struct OmCollector(Arc<OzoneManager>);

impl Collector for OmCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let om = &self.0;
        let statuses = om.datanode_statuses();
        {
            let mut family = e.encode_descriptor(
                "om_datanodes",
                "Registered datanodes by liveness state",
                None,
                MetricType::Gauge,
            )?;
            for state in [NodeState::Healthy, NodeState::Stale, NodeState::Dead] {
                let n = statuses.iter().filter(|s| s.state == state).count();
                let g = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
                g.encode(family.encode_family(&[("state", state.as_str())])?)?;
            }
        }
        gauge(
            &mut e,
            "om_runs_services",
            "1 while this om runs the background services (deletion, repair, lease expiry)",
            u64::from(*om.watch_service_lead().borrow()),
        )?;
        gauge(
            &mut e,
            "om_open_sessions",
            "Key and part writes neither committed nor aborted (as last counted by this om: \
             at most a service interval old on the om that runs the services)",
            om.open_sessions_counted(),
        )?;
        // As last published (after every change that may add deletions, and every pass of
        // the deleting service): a scrape reads no rows.
        gauge(
            &mut e,
            "om_pending_deletions",
            "Replicas waiting for deletion: in the deletion log, staged, and in parts of \
             completed or aborted uploads that were not kept",
            *om.watch_pending_deletions().borrow(),
        )?;
        let r = om.repair_status();
        gauge(
            &mut e,
            "om_repair_under_replicated",
            "Block groups below full redundancy",
            r.under_replicated,
        )?;
        gauge(
            &mut e,
            "om_repair_in_flight",
            "Repairs running",
            r.in_flight,
        )?;
        counter(
            &mut e,
            "om_repairs_completed",
            "Repairs completed",
            r.completed,
        )?;
        counter(&mut e, "om_repairs_failed", "Repairs failed", r.failed)?;
        gauge(
            &mut e,
            "om_repair_unrecoverable",
            "Block groups with too few readable indexes to rebuild",
            r.unrecoverable,
        )?;
        Ok(())
    }
}

/// A registry with the om's metrics, and the RPC metrics whose layer its
/// gRPC server wears.
pub(crate) fn registry(om: &Arc<OzoneManager>) -> (Registry, RpcMetrics) {
    let mut registry = Registry::default();
    let rpc = RpcMetrics::register(&mut registry, "om", &OM_METHODS);
    registry.register_collector(Box::new(OmCollector(Arc::clone(om))));
    (registry, rpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label list is the services' RPCs, exactly: a method added to the
    /// protocol without a label would be counted as `other`.
    #[test]
    fn the_method_labels_are_the_protocols_rpcs() {
        let protos = [
            include_str!("../../proto-crate/proto/om.proto"),
            include_str!("../../proto-crate/proto/admin.proto"),
        ];
        let mut declared: Vec<&str> = Vec::new();
        for (i, proto) in protos.iter().enumerate() {
            let mut in_admin_om = i == 0;
            for line in proto.lines() {
                let line = line.trim();
                if let Some(name) = line.strip_prefix("service ") {
                    in_admin_om = i == 0 || name.starts_with("OmAdmin");
                }
                if in_admin_om && let Some(rest) = line.strip_prefix("rpc ") {
                    declared.push(rest.split('(').next().unwrap_or_default().trim());
                }
            }
        }
        let mut ours: Vec<&str> = OM_METHODS.to_vec();
        declared.sort_unstable();
        ours.sort_unstable();
        assert_eq!(ours, declared);
    }
}
