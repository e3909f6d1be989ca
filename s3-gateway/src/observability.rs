//! What the S3 gateway exports at `/metrics` (`--metrics-listen`), read at
//! scrape time from its exact counters and its client's:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `s3_requests_total{operation, status}` | counter | requests that reached an operation |
//! | `s3_responses_total{status}` | counter | every HTTP answer, s3s's own refusals included |
//! | `s3_received_bytes_total` / `s3_sent_bytes_total` | counter | object bytes in (PUT, UploadPart) and out (GET) |
//! | `s3_key_lookups_total` | counter | om key lookups |
//! | `s3_requests_in_flight` | gauge | requests admitted whose answer has not been sent to its end |
//! | `s3_requests_refused_busy_total` | counter | requests answered 503 SlowDown at `--max-requests-in-flight` |
//! | `s3_connections_open` | gauge | client connections accepted and not yet closed (at most `--max-connections`) |
//! | `client_datanode_rpcs_total{kind}` | counter | the gateway's datanode RPCs by kind |
//! | `client_read_bytes_total` / `client_written_bytes_total` | counter | ReadChunk / WriteChunk payload bytes |
//! | `client_ec_readers_created_total`, `client_ec_reconstruction_readers_created_total` | counter | EC readers built |
//! | `client_ec_failovers_total`, `client_ec_spare_switches_total` | counter | locations given up, spares used |
//! | `client_ec_stripes_reconstructed_total` | counter | stripes decoded from parity |
//! | `client_ec_location_refreshes_total`, `client_ec_degraded_probes_total` | counter | key re-lookups |

use std::sync::Arc;

use ec_client::{Client, RpcKind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;
use proto_crate::metrics_http::encode_counter as counter;

use crate::metrics::GatewayMetrics;

#[derive(Debug)]
struct GatewayCollector {
    metrics: Arc<GatewayMetrics>,
    client: Client,
}

impl Collector for GatewayCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let s = self.metrics.snapshot();
        {
            let mut family = e.encode_descriptor(
                "s3_requests",
                "S3 requests that reached an operation, by operation and HTTP status",
                None,
                MetricType::Counter,
            )?;
            for ((operation, status), n) in &s.requests {
                let status = status.to_string();
                let labels = [
                    ("operation", operation.as_str()),
                    ("status", status.as_str()),
                ];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = e.encode_descriptor(
                "s3_responses",
                "Every HTTP response, by status",
                None,
                MetricType::Counter,
            )?;
            for (status, n) in &s.responses {
                let status = status.to_string();
                ConstCounter::new(*n)
                    .encode(family.encode_family(&[("status", status.as_str())])?)?;
            }
        }
        counter(
            &mut e,
            "s3_received_bytes",
            "Object bytes accepted",
            s.bytes_in,
        )?;
        counter(&mut e, "s3_sent_bytes", "Object bytes sent", s.bytes_out)?;
        counter(&mut e, "s3_key_lookups", "Om key lookups", s.key_lookups)?;
        proto_crate::metrics_http::encode_gauge(
            &mut e,
            "s3_requests_in_flight",
            "Requests admitted whose answer has not been sent to its end",
            s.requests_in_flight,
        )?;
        counter(
            &mut e,
            "s3_requests_refused_busy",
            "Requests answered 503 SlowDown at the in-flight limit",
            s.requests_refused_busy,
        )?;
        proto_crate::metrics_http::encode_gauge(
            &mut e,
            "s3_connections_open",
            "Client connections accepted and not yet closed",
            s.connections_open,
        )?;
        let c = self.client.metrics();
        {
            let mut family = e.encode_descriptor(
                "client_datanode_rpcs",
                "Datanode RPCs the gateway's client made, by kind",
                None,
                MetricType::Counter,
            )?;
            for kind in RpcKind::ALL {
                ConstCounter::new(c.rpcs(kind))
                    .encode(family.encode_family(&[("kind", kind.name())])?)?;
            }
        }
        counter(
            &mut e,
            "client_read_bytes",
            "ReadChunk payload bytes received",
            c.read_bytes,
        )?;
        counter(
            &mut e,
            "client_written_bytes",
            "WriteChunk payload bytes sent",
            c.written_bytes,
        )?;
        let ec = self.client.ec_metrics();
        for (name, help, v) in [
            (
                "client_ec_readers_created",
                "EC block readers built",
                ec.ec_readers_created,
            ),
            (
                "client_ec_reconstruction_readers_created",
                "EC reconstruction readers built",
                ec.reconstruction_readers_created,
            ),
            (
                "client_ec_failovers",
                "Locations given up and excluded",
                ec.failovers,
            ),
            (
                "client_ec_spare_switches",
                "Failovers served by a spare replica",
                ec.spare_switches,
            ),
            (
                "client_ec_stripes_reconstructed",
                "Stripes decoded from parity",
                ec.stripes_reconstructed,
            ),
            (
                "client_ec_location_refreshes",
                "Key re-lookups after too few locations answered",
                ec.location_refreshes,
            ),
            (
                "client_ec_degraded_probes",
                "Key re-lookups of a reader degraded past the probe interval",
                ec.degraded_probes,
            ),
        ] {
            counter(&mut e, name, help, v)?;
        }
        Ok(())
    }
}

/// A registry with the gateway's and its client's counters.
pub(crate) fn registry(metrics: &Arc<GatewayMetrics>, client: &Client) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(GatewayCollector {
        metrics: Arc::clone(metrics),
        client: client.clone(),
    }));
    registry
}
