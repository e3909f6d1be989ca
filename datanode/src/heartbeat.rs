//! Heartbeats to the om: every interval the datanode reports its identity,
//! its usage (committed bytes and blocks, the file system's capacity and free
//! space, open block files, payload bytes in flight). A heartbeat also
//! registers the datanode if the om does not know it (an om whose database
//! was replaced). A failed heartbeat is logged and retried at the next tick;
//! the om marks a silent datanode STALE, then DEAD.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proto_crate::DatanodeDetails;
use proto_crate::wire::om as om_pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::metrics::DatanodeMetrics;
use crate::storage::ContainerStore;

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
pub(crate) async fn run_heartbeats(
    om: String,
    details: DatanodeDetails,
    store: Arc<ContainerStore>,
    metrics: Arc<DatanodeMetrics>,
    interval: Duration,
) {
    let endpoint = match Endpoint::from_shared(format!("http://{om}")) {
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
        if let Err(e) = client.heartbeat(request(&details, &store, &metrics)).await {
            tracing::debug!(om, error = %e, "heartbeat failed; retrying at the next interval");
        }
    }
}
