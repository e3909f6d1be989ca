//! What a datanode exports at `/metrics` (`--metrics-listen`): every gRPC
//! call by method and status code with its latency
//! ([`proto_crate::rpc_metrics`]), and, read from the datanode's own exact
//! counters at scrape time:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `datanode_rpcs_total{kind}` | counter | RPCs received, failed ones included |
//! | `datanode_read_bytes_total` | counter | ReadChunk payload bytes sent |
//! | `datanode_written_bytes_total` | counter | WriteChunk payload bytes stored |
//! | `datanode_connections_accepted_total` | counter | TCP connections the gRPC server accepted |
//! | `datanode_inflight_bytes` | gauge | payload bytes charged to the in-flight budget |
//! | `datanode_peak_inflight_bytes` | gauge | the most ever charged at once |
//! | `datanode_open_files` | gauge | block files held open for reading |
//! | `datanode_used_bytes` | gauge | committed block bytes |
//! | `datanode_blocks` | gauge | committed blocks |
//! | `datanode_block_file_syncs_total` | counter | fdatasyncs of block files |
//! | `datanode_record_commits_total` | counter | durable metadata transactions |
//! | `datanode_edge_reads_total{how}` | counter | ReadChunks with edges: `fine` (through fine checksums) or `window` (whole checksum windows) |
//! | `datanode_fine_checksum_cache_bytes` | gauge | closed blocks' fine checksums held in memory |
//! | `datanode_faults_injected_total` | counter | faults the injector applied |

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;
use proto_crate::RpcKind;
use proto_crate::metrics_http::{encode_counter as counter, encode_gauge as gauge};
use proto_crate::rpc_metrics::RpcMetrics;

use crate::fault::FaultInjector;
use crate::metrics::DatanodeMetrics;
use crate::storage::ContainerStore;

/// The datanode's counters, read at each scrape.
#[derive(Debug)]
struct DatanodeCollector {
    metrics: Arc<DatanodeMetrics>,
    faults: Arc<FaultInjector>,
    store: Arc<ContainerStore>,
}

impl Collector for DatanodeCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        {
            let mut family = e.encode_descriptor(
                "datanode_rpcs",
                "RPCs received by kind, failed ones included",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for kind in RpcKind::ALL {
                let c = ConstCounter::new(self.metrics.rpcs(kind));
                c.encode(family.encode_family(&[("kind", kind.name())])?)?;
            }
        }
        let m = &self.metrics;
        counter(
            &mut e,
            "datanode_read_bytes",
            "ReadChunk payload bytes sent",
            m.read_bytes(),
        )?;
        counter(
            &mut e,
            "datanode_written_bytes",
            "WriteChunk payload bytes stored",
            m.written_bytes(),
        )?;
        counter(
            &mut e,
            "datanode_connections_accepted",
            "TCP connections the gRPC server accepted",
            m.connections_accepted(),
        )?;
        gauge(
            &mut e,
            "datanode_inflight_bytes",
            "Payload bytes charged to the in-flight budget now",
            m.inflight_bytes(),
        )?;
        gauge(
            &mut e,
            "datanode_peak_inflight_bytes",
            "The most payload bytes ever charged to the in-flight budget at once",
            m.peak_inflight_bytes(),
        )?;
        let s = self.store.stats();
        gauge(
            &mut e,
            "datanode_open_files",
            "Block files held open for reading",
            s.open_files,
        )?;
        gauge(
            &mut e,
            "datanode_used_bytes",
            "Committed block bytes",
            s.used_bytes,
        )?;
        gauge(&mut e, "datanode_blocks", "Committed blocks", s.blocks)?;
        counter(
            &mut e,
            "datanode_block_file_syncs",
            "fdatasyncs of block files (durable PutBlocks)",
            s.block_file_syncs,
        )?;
        counter(
            &mut e,
            "datanode_record_commits",
            "Durable metadata transactions (one per group commit)",
            s.record_commits,
        )?;
        {
            let mut family = e.encode_descriptor(
                "datanode_edge_reads",
                "ReadChunks with edges by how the datanode read around the range: \
                 through fine checksums or whole checksum windows",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (how, n) in [("fine", s.fine_edge_reads), ("window", s.window_edge_reads)] {
                ConstCounter::new(n).encode(family.encode_family(&[("how", how)])?)?;
            }
        }
        gauge(
            &mut e,
            "datanode_fine_checksum_cache_bytes",
            "Bytes of closed blocks' fine checksums held in memory",
            s.fine_cache_bytes,
        )?;
        counter(
            &mut e,
            "datanode_faults_injected",
            "Faults the fault injector applied",
            self.faults.injected(),
        )?;
        Ok(())
    }
}

/// A registry with the datanode's metrics; returns it and the RPC metrics
/// whose layer the gRPC server wears.
pub(crate) fn registry(
    metrics: &Arc<DatanodeMetrics>,
    faults: &Arc<FaultInjector>,
    store: &Arc<ContainerStore>,
) -> (Registry, RpcMetrics) {
    let mut registry = Registry::default();
    let methods: Vec<&'static str> = RpcKind::ALL.iter().map(|k| k.name()).collect();
    let rpc = RpcMetrics::register(&mut registry, "datanode", &methods);
    registry.register_collector(Box::new(DatanodeCollector {
        metrics: Arc::clone(metrics),
        faults: Arc::clone(faults),
        store: Arc::clone(store),
    }));
    (registry, rpc)
}
