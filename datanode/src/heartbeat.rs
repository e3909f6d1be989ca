//! Heartbeats to every om the datanode is configured with (one task per
//! om, so a dead om delays no other): every interval the datanode reports its identity,
//! its usage (committed bytes and blocks, the file system's capacity and free
//! space, open block files, payload bytes in flight). A heartbeat also
//! registers the datanode if the om does not know it (an om of its cluster
//! that was down when the datanode started, or one restored from a backup
//! of its store; an om with a new store is another cluster and refuses it).
//! A failed heartbeat is logged and retried at the next tick; the om marks
//! a silent datanode STALE, then DEAD.
//!
//! Block reports: right after registration and then every report interval, the datanode scans
//! its blocks ([`ContainerStore::scan_blocks`]: files checked against their records, lost ones
//! dropped) and streams the list of intact blocks to the om in pages of [`REPORT_PAGE`]. The om
//! compares it with the locations it records and repairs what a live datanode lost. With
//! several oms one scan per round serves them all (`report_schedule.rs` says when and to
//! which).
//!
//! Cluster: the first om that ever accepted the registration named the
//! cluster (`membership.rs`, kept in the data dir); every request carries
//! that id, an om of another cluster refuses it, and the datanode ignores
//! such an om's answers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use proto_crate::DatanodeDetails;
use proto_crate::wire::om as om_pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use tonic::transport::Channel;

use crate::membership::Membership;
use crate::metrics::DatanodeMetrics;
use crate::report_schedule::ReportSchedule;
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
    membership: &Membership,
) -> om_pb::HeartbeatRequest {
    let s = store.stats();
    let (capacity, available) = filesystem_space(store.root());
    om_pb::HeartbeatRequest {
        cluster_id: membership.joined(),
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

/// The secrets of a registration or heartbeat answer.
///
/// # Errors
/// A secret of the wrong length.
pub(crate) fn secrets(
    wire: Vec<om_pb::BlockTokenSecret>,
) -> Result<Vec<BlockTokenSecret>, proto_crate::ProtocolError> {
    wire.into_iter().map(BlockTokenSecret::try_from).collect()
}

/// Where a heartbeat answer's block token secrets go: the verifier, under
/// the om's place in the datanode's om list.
#[derive(Debug, Clone)]
pub(crate) struct SecretsSink {
    pub(crate) verifier: Arc<BlockTokenVerifier>,
    pub(crate) om_index: usize,
}

/// What every om-facing task of a datanode shares.
#[derive(Debug, Clone)]
pub(crate) struct Reporter {
    pub(crate) details: DatanodeDetails,
    pub(crate) store: Arc<ContainerStore>,
    pub(crate) membership: Arc<Membership>,
    pub(crate) tls: Option<proto_crate::tls::TlsConfig>,
}

/// Heartbeats to the om at `om` (`HOST:PORT`) every `interval` until aborted,
/// handing each answer's secrets to `tokens` (security on). An answer from
/// an om of another cluster is logged and its secrets are not taken.
pub(crate) async fn run_heartbeats(
    om: String,
    reporter: Reporter,
    metrics: Arc<DatanodeMetrics>,
    tokens: Option<SecretsSink>,
    interval: Duration,
) {
    let Reporter {
        details,
        store,
        membership,
        tls,
    } = reporter;
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
    // Whether the om's last answer was a refusal, already logged.
    let mut refused = false;
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match client
            .heartbeat(request(&details, &store, &metrics, &membership))
            .await
        {
            Err(e) if e.code() == tonic::Code::PermissionDenied => {
                // Said once until the om takes a heartbeat again, not every interval.
                if refused {
                    tracing::debug!(om, error = %e, "the om refused the heartbeat");
                } else {
                    tracing::warn!(om, error = %e, "the om refused the heartbeat; still trying");
                    refused = true;
                }
            }
            Err(e) => {
                tracing::debug!(om, error = %e, "heartbeat failed; retrying at the next interval");
            }
            Ok(answer) => {
                let answer = answer.into_inner();
                if let Err(why) = membership.accept(&answer.cluster_id, store.stats().blocks) {
                    if !refused {
                        tracing::error!(om, error = %why, "ignoring this om's answers");
                        refused = true;
                    }
                    continue;
                }
                refused = false;
                // Every answer carries the om's whole current key list.
                if let Some(sink) = &tokens {
                    match secrets(answer.block_token_secrets) {
                        Ok(s) => sink.verifier.update(sink.om_index, s),
                        Err(e) => tracing::warn!(om, error = %e, "bad block token secrets"),
                    }
                }
            }
        }
    }
}

/// Blocks per block-report page (about 30 bytes each on the wire).
pub const REPORT_PAGE: usize = 50_000;

/// The pages of one full block report of `scan` (at least one: an empty store still names
/// itself), the first naming the datanode and its cluster.
fn report_pages(
    details: &DatanodeDetails,
    cluster_id: String,
    present: &[(proto_crate::BlockId, u64)],
) -> Vec<om_pb::BlockReportPage> {
    let page = |i: usize, blocks: &[(proto_crate::BlockId, u64)]| om_pb::BlockReportPage {
        datanode: (i == 0).then(|| details.clone().into()),
        cluster_id: if i == 0 {
            cluster_id.clone()
        } else {
            String::new()
        },
        blocks: blocks
            .iter()
            .map(|(b, len)| om_pb::ReportedBlock {
                container_id: b.container_id,
                local_id: b.local_id,
                replica_index: proto_crate::ReplicaIndex::to_wire(b.replica_index),
                length: *len,
            })
            .collect(),
    };
    if present.is_empty() {
        return vec![page(0, &[])];
    }
    present
        .chunks(REPORT_PAGE)
        .enumerate()
        .map(|(i, blocks)| page(i, blocks))
        .collect()
}

/// Longest a block report send may take before it counts as failed: the
/// report interval, but at least a minute (a report of many blocks to a
/// busy om takes a while).
fn send_timeout(interval: Duration) -> Duration {
    interval.max(Duration::from_secs(60))
}

/// Sends full block reports to every om in `oms` (`HOST:PORT`s) on the
/// schedule of [`ReportSchedule`]: a round at once and then every
/// `interval`, each round one scan sent to every om not still busy with an
/// earlier send; an om whose send failed is retried alone after `retry`,
/// doubling up to `interval`. Each send runs on its own task (bounded by
/// [`send_timeout`]) and streams the pages of one shared scan, so a hung om
/// holds up no other. Runs until aborted.
pub(crate) async fn run_block_reports(
    oms: Vec<String>,
    reporter: Reporter,
    interval: Duration,
    retry: Duration,
) {
    let mut clients = Vec::with_capacity(oms.len());
    for om in &oms {
        match proto_crate::tls::endpoint(om, reporter.tls.as_ref()) {
            Ok(e) => clients.push(Some(OzoneManagerServiceClient::new(
                e.connect_timeout(Duration::from_secs(5)).connect_lazy(),
            ))),
            Err(e) => {
                tracing::error!(om, error = %e, "bad om address; not sending block reports");
                clients.push(None);
            }
        }
    }
    let mut schedule = ReportSchedule::new(oms.len(), tokio::time::Instant::now(), interval, retry);
    let mut sends = tokio::task::JoinSet::new();
    let mut sending: HashMap<tokio::task::Id, usize> = HashMap::new();
    // Whether each om's last send failed (and was logged).
    let mut failing = vec![false; oms.len()];
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(schedule.next_wake()) => {}
            Some(done) = sends.join_next_with_id(), if !sends.is_empty() => {
                let now = tokio::time::Instant::now();
                let (id, outcome) = match done {
                    Ok((id, outcome)) => (id, outcome),
                    Err(e) => (e.id(), Err(format!("the send task failed: {e}"))),
                };
                let Some(i) = sending.remove(&id) else { continue };
                match outcome {
                    Ok(blocks) => {
                        tracing::debug!(om = oms[i], blocks, "block report sent");
                        schedule.sent(i);
                        failing[i] = false;
                    }
                    // The first failure in a row is a warning, the rest (an om
                    // down or refusing for long) are not repeated at that level.
                    Err(why) if failing[i] => {
                        tracing::debug!(om = oms[i], error = why, "block report failed again");
                        schedule.failed(i, now);
                    }
                    Err(why) => {
                        tracing::warn!(om = oms[i], error = why, "block report failed; retrying");
                        schedule.failed(i, now);
                        failing[i] = true;
                    }
                }
                continue;
            }
        }
        let now = tokio::time::Instant::now();
        let due: Vec<usize> = schedule
            .take_due(now)
            .into_iter()
            .filter(|&i| clients[i].is_some())
            .collect();
        if due.is_empty() {
            continue;
        }
        let scan = match reporter.store.scan_blocks().await {
            Ok(scan) => scan,
            Err(e) => {
                tracing::warn!(error = %e, "scanning blocks for a block report failed; retrying");
                let now = tokio::time::Instant::now();
                due.iter().for_each(|&i| schedule.failed(i, now));
                continue;
            }
        };
        let blocks = scan.present.len();
        let pages = Arc::new(report_pages(
            &reporter.details,
            reporter.membership.joined(),
            &scan.present,
        ));
        drop(scan);
        for i in due {
            let Some(mut client) = clients[i].clone() else {
                continue;
            };
            let pages = Arc::clone(&pages);
            let limit = send_timeout(interval);
            let task = sends.spawn(async move {
                // One page copied at a time, whatever the number of oms.
                let stream = futures::stream::iter(0..pages.len()).map(move |k| pages[k].clone());
                match tokio::time::timeout(limit, client.block_report(stream)).await {
                    Ok(Ok(_)) => Ok(blocks),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {limit:?}")),
                }
            });
            sending.insert(task.id(), i);
        }
    }
}
