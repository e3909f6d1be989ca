//! Heartbeats to the om: every interval the datanode reports its identity,
//! its usage (committed bytes and blocks, the file system's capacity and free
//! space, open block files, payload bytes in flight). A heartbeat also
//! registers the datanode if the om does not know it (an om whose database
//! was replaced). A failed heartbeat is logged and retried at the next tick;
//! the om marks a silent datanode STALE, then DEAD.
//!
//! Block reports: right after registration and then every report interval, the datanode scans
//! its blocks ([`ContainerStore::scan_blocks`]: files checked against their records, lost ones
//! dropped) and streams the list of intact blocks to the om in pages of [`REPORT_PAGE`]. The om
//! compares it with the locations it records and repairs what a live datanode lost.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proto_crate::DatanodeDetails;
use proto_crate::wire::om as om_pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use tonic::transport::Channel;

use crate::metrics::DatanodeMetrics;
use crate::storage::ContainerStore;
use crate::tokens::BlockTokenVerifier;
use proto_crate::block_token::BlockTokenSecret;

/// Size and free bytes of the file system holding `path` (`statvfs`);
/// zeros if it cannot be read.
#[must_use]
pub fn filesystem_space(path: &Path) -> (u64, u64) {
    match rustix::fs::statvfs(path) {
        Ok(st) => (
            st.f_blocks.saturating_mul(st.f_frsize),
            st.f_bavail.saturating_mul(st.f_frsize),
        ),
        Err(_) => (0, 0),
    }
}

fn request(
    details: &DatanodeDetails,
    store: &ContainerStore,
    metrics: &DatanodeMetrics,
) -> om_pb::HeartbeatRequest {
    let s = store.stats();
    let (capacity, available) = filesystem_space(store.root());
    om_pb::HeartbeatRequest {
        datanode: Some(details.clone().into()),
        stats: Some(om_pb::DatanodeStats {
            used_bytes: s.used_bytes,
            capacity_bytes: capacity,
            available_bytes: available,
            blocks: s.blocks,
            open_files: s.open_files,
            inflight_bytes: metrics.inflight_bytes(),
        }),
    }
}

/// Heartbeats to the om at `om` (`HOST:PORT`) every `interval` until aborted.
/// The secrets of a registration or heartbeat answer.
///
/// # Errors
/// A secret of the wrong length.
pub(crate) fn secrets(
    wire: Vec<om_pb::BlockTokenSecret>,
) -> Result<Vec<BlockTokenSecret>, proto_crate::ProtocolError> {
    wire.into_iter().map(BlockTokenSecret::try_from).collect()
}

pub(crate) async fn run_heartbeats(
    om: String,
    details: DatanodeDetails,
    store: Arc<ContainerStore>,
    metrics: Arc<DatanodeMetrics>,
    tokens: Option<Arc<BlockTokenVerifier>>,
    interval: Duration,
    tls: Option<proto_crate::tls::TlsConfig>,
) {
    let endpoint = match proto_crate::tls::endpoint(&om, tls.as_ref()) {
        Ok(e) => e
            .connect_timeout(Duration::from_secs(5))
            .timeout(interval.max(Duration::from_secs(1)) * 2),
        Err(e) => {
            tracing::error!(om, error = %e, "bad om address; not heartbeating");
            return;
        }
    };
    // A lazily connected channel reconnects by itself after om restarts.
    let channel: Channel = endpoint.connect_lazy();
    let mut client = OzoneManagerServiceClient::new(channel);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match client.heartbeat(request(&details, &store, &metrics)).await {
            Err(e) => {
                tracing::debug!(om, error = %e, "heartbeat failed; retrying at the next interval");
            }
            Ok(answer) => {
                // Every answer carries the om's whole current key list.
                if let Some(v) = &tokens {
                    match secrets(answer.into_inner().block_token_secrets) {
                        Ok(s) => v.update(s),
                        Err(e) => tracing::warn!(om, error = %e, "bad block token secrets"),
                    }
                }
            }
        }
    }
}

/// Blocks per block-report page (about 30 bytes each on the wire).
pub const REPORT_PAGE: usize = 50_000;

/// Scans the store and sends one full block report to `client`. Returns the number of blocks
/// reported.
async fn send_block_report(
    client: &mut OzoneManagerServiceClient<Channel>,
    details: &DatanodeDetails,
    store: &Arc<ContainerStore>,
) -> Result<usize, String> {
    let scan = store
        .scan_blocks()
        .await
        .map_err(|e| format!("scanning blocks: {e}"))?;
    let n = scan.present.len();
    let pages: Vec<om_pb::BlockReportPage> = scan
        .present
        .chunks(REPORT_PAGE)
        .enumerate()
        .map(|(i, page)| om_pb::BlockReportPage {
            datanode: (i == 0).then(|| details.clone().into()),
            blocks: page
                .iter()
                .map(|(b, len)| om_pb::ReportedBlock {
                    container_id: b.container_id,
                    local_id: b.local_id,
                    replica_index: proto_crate::ReplicaIndex::to_wire(b.replica_index),
                    length: *len,
                })
                .collect(),
        })
        .collect();
    // An empty store still names itself: one page with no blocks.
    let pages = if pages.is_empty() {
        vec![om_pb::BlockReportPage {
            datanode: Some(details.clone().into()),
            blocks: Vec::new(),
        }]
    } else {
        pages
    };
    client
        .block_report(futures::stream::iter(pages))
        .await
        .map_err(|e| format!("sending the block report: {e}"))?;
    Ok(n)
}

/// Sends a full block report to the om at `om` (`HOST:PORT`) at once and then every
/// `interval` until aborted. A failed report is logged and retried at the next heartbeat
/// interval.
pub(crate) async fn run_block_reports(
    om: String,
    details: DatanodeDetails,
    store: Arc<ContainerStore>,
    interval: Duration,
    retry: Duration,
    tls: Option<proto_crate::tls::TlsConfig>,
) {
    let endpoint = match proto_crate::tls::endpoint(&om, tls.as_ref()) {
        Ok(e) => e.connect_timeout(Duration::from_secs(5)),
        Err(e) => {
            tracing::error!(om, error = %e, "bad om address; not sending block reports");
            return;
        }
    };
    let mut client = OzoneManagerServiceClient::new(endpoint.connect_lazy());
    loop {
        let wait = match send_block_report(&mut client, &details, &store).await {
            Ok(n) => {
                tracing::debug!(om, blocks = n, "block report sent");
                interval
            }
            Err(e) => {
                tracing::warn!(om, error = %e, "block report failed; retrying");
                retry.min(interval)
            }
        };
        tokio::time::sleep(wait).await;
    }
}
