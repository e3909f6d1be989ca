//! The datanode registry with liveness (SCM's NodeManager role).
//!
//! Datanodes register once and then heartbeat every interval with their
//! usage figures. A datanode's state follows from the time since its last
//! heartbeat (or its registration, or the om's start for datanodes loaded
//! from the store): HEALTHY below the stale interval, STALE below the dead
//! interval, DEAD after it (Ozone's `ozone.scm.stale.node.interval`, 5 min by
//! default there, and `ozone.scm.dead.node.interval`, 10 min; ours default to
//! 30 s and 90 s). New block groups go to HEALTHY datanodes only.
//!
//! One entry per address: a datanode that registers with a new uuid at an
//! address the registry already knows (its data dir was wiped) replaces the
//! old entry, so one machine never holds two indexes of one group under two
//! names. Bound: one entry per datanode address.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use proto_crate::wire::om as pb;
use proto_crate::{DatanodeDetails, DatanodeId};

/// Liveness of a datanode as the om sees it (Ozone's `NodeState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState {
    /// Heartbeats arrive; eligible for new block groups.
    Healthy,
    /// No heartbeat for the stale interval; no new block groups.
    Stale,
    /// No heartbeat for the dead interval.
    Dead,
}

impl NodeState {
    /// The upper-case name (`HEALTHY`, `STALE`, `DEAD`), as `dn list` prints it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "HEALTHY",
            Self::Stale => "STALE",
            Self::Dead => "DEAD",
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "HEALTHY" => Ok(Self::Healthy),
            "STALE" => Ok(Self::Stale),
            "DEAD" => Ok(Self::Dead),
            other => Err(format!("unknown datanode state {other:?}")),
        }
    }
}

impl From<NodeState> for pb::DatanodeState {
    fn from(s: NodeState) -> Self {
        match s {
            NodeState::Healthy => Self::Healthy,
            NodeState::Stale => Self::Stale,
            NodeState::Dead => Self::Dead,
        }
    }
}

impl TryFrom<pb::DatanodeState> for NodeState {
    type Error = String;
    fn try_from(s: pb::DatanodeState) -> Result<Self, String> {
        match s {
            pb::DatanodeState::Healthy => Ok(Self::Healthy),
            pb::DatanodeState::Stale => Ok(Self::Stale),
            pb::DatanodeState::Dead => Ok(Self::Dead),
            pb::DatanodeState::Unspecified => Err("datanode state is unspecified".into()),
        }
    }
}

/// Usage figures a datanode reports in its heartbeat (bytes and counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeStats {
    /// Committed bytes of its blocks.
    pub used_bytes: u64,
    /// Size of the file system holding its data dir.
    pub capacity_bytes: u64,
    /// Free bytes of that file system.
    pub available_bytes: u64,
    /// Committed blocks.
    pub blocks: u64,
    /// Block files held open for reading.
    pub open_files: u64,
    /// Request payload bytes in flight.
    pub inflight_bytes: u64,
}

impl From<pb::DatanodeStats> for NodeStats {
    fn from(s: pb::DatanodeStats) -> Self {
        Self {
            used_bytes: s.used_bytes,
            capacity_bytes: s.capacity_bytes,
            available_bytes: s.available_bytes,
            blocks: s.blocks,
            open_files: s.open_files,
            inflight_bytes: s.inflight_bytes,
        }
    }
}

impl From<NodeStats> for pb::DatanodeStats {
    fn from(s: NodeStats) -> Self {
        Self {
            used_bytes: s.used_bytes,
            capacity_bytes: s.capacity_bytes,
            available_bytes: s.available_bytes,
            blocks: s.blocks,
            open_files: s.open_files,
            inflight_bytes: s.inflight_bytes,
        }
    }
}

/// One datanode as `ListDatanodes` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatanodeStatus {
    /// Identity and address.
    pub details: DatanodeDetails,
    /// Liveness now.
    pub state: NodeState,
    /// Time since its last heartbeat.
    pub since_heartbeat: Duration,
    /// Figures of its last heartbeat (zeros before the first).
    pub stats: NodeStats,
    /// Decommission state.
    pub op_state: crate::OperationalState,
}

impl From<DatanodeStatus> for pb::DatanodeStatus {
    fn from(s: DatanodeStatus) -> Self {
        Self {
            datanode: Some(s.details.into()),
            state: pb::DatanodeState::from(s.state).into(),
            since_heartbeat_ms: u64::try_from(s.since_heartbeat.as_millis()).unwrap_or(u64::MAX),
            stats: Some(s.stats.into()),
            op_state: pb::OperationalState::from(s.op_state).into(),
        }
    }
}

impl TryFrom<pb::DatanodeStatus> for DatanodeStatus {
    type Error = String;
    fn try_from(s: pb::DatanodeStatus) -> Result<Self, String> {
        let details = s
            .datanode
            .ok_or("datanode status without a datanode")
            .map_err(str::to_string)
            .and_then(|d| DatanodeDetails::try_from(d).map_err(|e| e.to_string()))?;
        let state = pb::DatanodeState::try_from(s.state)
            .map_err(|e| e.to_string())
            .and_then(NodeState::try_from)?;
        Ok(Self {
            details,
            state,
            since_heartbeat: Duration::from_millis(s.since_heartbeat_ms),
            stats: s.stats.map(NodeStats::from).unwrap_or_default(),
            op_state: pb::OperationalState::try_from(s.op_state)
                .map(crate::OperationalState::from)
                .unwrap_or_default(),
        })
    }
}

/// A connected channel to the om at `address` (`HOST:PORT`), over TLS with
/// `tls`: what the om's client-side helpers (this module, the admin client)
/// call through.
///
/// # Errors
/// [`crate::OmError::Unreachable`] naming the om and why (a malformed
/// address, no connection, a refused TLS handshake).
pub(crate) async fn om_channel(
    address: &str,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Result<tonic::transport::Channel, crate::OmError> {
    let unreachable = |e: String| crate::OmError::Unreachable(format!("om {address}: {e}"));
    proto_crate::tls::endpoint(address, tls)
        .map_err(|e| unreachable(e.to_string()))?
        .connect()
        .await
        .map_err(|e| unreachable(e.to_string()))
}

/// Asks the om at `address` (`HOST:PORT`) for every datanode's state
/// (`ListDatanodes`).
///
/// # Errors
/// [`crate::OmError::Unreachable`] when the om cannot be reached or the call
/// fails; [`crate::OmError::InvalidArgument`] for an answer that does not
/// decode.
pub async fn list_datanode_statuses(
    address: &str,
    tls: Option<&proto_crate::tls::TlsConfig>,
) -> Result<Vec<DatanodeStatus>, crate::OmError> {
    use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
    let unreachable = |e: String| crate::OmError::Unreachable(format!("om {address}: {e}"));
    let mut c = OzoneManagerServiceClient::new(om_channel(address, tls).await?);
    let r = c
        .list_datanodes(pb::ListDatanodesRequest {})
        .await
        .map_err(|e| unreachable(e.message().to_string()))?
        .into_inner();
    r.status
        .into_iter()
        .map(|s| DatanodeStatus::try_from(s).map_err(crate::OmError::InvalidArgument))
        .collect()
}

/// Liveness intervals of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// No heartbeat for this long: STALE.
    pub stale_after: Duration,
    /// No heartbeat for this long: DEAD.
    pub dead_after: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(30),
            dead_after: Duration::from_secs(90),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    details: DatanodeDetails,
    last_heartbeat: Instant,
    stats: NodeStats,
}

/// The registry: uuid -> entry, in uuid order.
#[derive(Debug, Default)]
pub(crate) struct NodeRegistry {
    nodes: BTreeMap<DatanodeId, Entry>,
}

impl NodeRegistry {
    /// Loads a datanode from the store: counted as heard from at `now`
    /// (the om's start), so it turns STALE unless it heartbeats.
    pub(crate) fn load(&mut self, details: DatanodeDetails, now: Instant) {
        self.nodes.insert(
            details.uuid.clone(),
            Entry {
                details,
                last_heartbeat: now,
                stats: NodeStats::default(),
            },
        );
    }

    /// Records a registration or heartbeat of `details` at `now`, with
    /// `stats` when it is a heartbeat. Entries of other uuids at the same
    /// address are removed (the store's rule, `registrations.rs`).
    pub(crate) fn upsert(
        &mut self,
        details: &DatanodeDetails,
        stats: Option<NodeStats>,
        now: Instant,
    ) {
        let replaced: Vec<DatanodeId> = self
            .nodes
            .values()
            .filter(|e| e.details.address == details.address && e.details.uuid != details.uuid)
            .map(|e| e.details.uuid.clone())
            .collect();
        for uuid in &replaced {
            self.nodes.remove(uuid);
        }
        match self.nodes.get_mut(details.uuid.as_str()) {
            Some(e) => {
                e.details = details.clone();
                e.last_heartbeat = now;
                if let Some(s) = stats {
                    e.stats = s;
                }
            }
            None => {
                self.nodes.insert(
                    details.uuid.clone(),
                    Entry {
                        details: details.clone(),
                        last_heartbeat: now,
                        stats: stats.unwrap_or_default(),
                    },
                );
            }
        }
    }

    /// Whether `uuid` is registered at exactly `address`.
    pub(crate) fn knows(&self, details: &DatanodeDetails) -> bool {
        self.nodes
            .get(details.uuid.as_str())
            .is_some_and(|e| e.details.address == details.address)
    }

    fn state_of(e: &Entry, now: Instant, l: Liveness) -> NodeState {
        let since = now.saturating_duration_since(e.last_heartbeat);
        if since >= l.dead_after {
            NodeState::Dead
        } else if since >= l.stale_after {
            NodeState::Stale
        } else {
            NodeState::Healthy
        }
    }

    /// Every datanode with its state at `now`, in uuid order.
    pub(crate) fn statuses(&self, now: Instant, l: Liveness) -> Vec<DatanodeStatus> {
        self.nodes
            .values()
            .map(|e| DatanodeStatus {
                details: e.details.clone(),
                state: Self::state_of(e, now, l),
                since_heartbeat: now.saturating_duration_since(e.last_heartbeat),
                stats: e.stats,
                op_state: crate::OperationalState::InService,
            })
            .collect()
    }

    /// Every registered datanode, in uuid order.
    pub(crate) fn all(&self) -> Vec<DatanodeDetails> {
        self.nodes.values().map(|e| e.details.clone()).collect()
    }

    /// The address datanode `uuid` is registered at.
    pub(crate) fn address(&self, uuid: &str) -> Option<&str> {
        self.nodes.get(uuid).map(|e| e.details.address.as_str())
    }

    /// The registered datanode `uuid`.
    pub(crate) fn get(&self, uuid: &str) -> Option<DatanodeDetails> {
        self.nodes.get(uuid).map(|e| e.details.clone())
    }

    /// HEALTHY datanodes at `now`, in uuid order.
    pub(crate) fn healthy(&self, now: Instant, l: Liveness) -> Vec<DatanodeDetails> {
        self.nodes
            .values()
            .filter(|e| Self::state_of(e, now, l) == NodeState::Healthy)
            .map(|e| e.details.clone())
            .collect()
    }

    /// Number of registered datanodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datanode named `label` in the test (its id is the label's bytes).
    fn dn(label: &str, address: &str) -> DatanodeDetails {
        let n = label.bytes().fold(0u128, |acc, b| {
            acc.wrapping_mul(257).wrapping_add(u128::from(b))
        });
        DatanodeDetails {
            uuid: proto_crate::DatanodeId::from_u128(n),
            address: address.into(),
        }
    }

    #[test]
    fn states_follow_time_since_heartbeat() {
        let l = Liveness {
            stale_after: Duration::from_secs(10),
            dead_after: Duration::from_secs(30),
        };
        let t0 = Instant::now();
        let mut r = NodeRegistry::default();
        r.upsert(&dn("a", "h:1"), None, t0);
        r.upsert(&dn("b", "h:2"), None, t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        r.upsert(&dn("b", "h:2"), Some(NodeStats::default()), at(25));
        let states: Vec<NodeState> = r.statuses(at(9), l).iter().map(|s| s.state).collect();
        assert_eq!(states, [NodeState::Healthy, NodeState::Healthy]);
        let states: Vec<NodeState> = r.statuses(at(29), l).iter().map(|s| s.state).collect();
        assert_eq!(states, [NodeState::Stale, NodeState::Healthy]);
        let states: Vec<NodeState> = r.statuses(at(40), l).iter().map(|s| s.state).collect();
        assert_eq!(states, [NodeState::Dead, NodeState::Stale]);
        assert_eq!(r.healthy(at(29), l), vec![dn("b", "h:2")]);
    }

    #[test]
    fn a_new_uuid_at_a_known_address_replaces_the_old_entry() {
        let t0 = Instant::now();
        let mut r = NodeRegistry::default();
        r.upsert(&dn("a", "h:1"), None, t0);
        r.upsert(&dn("a", "h:1"), None, t0);
        assert_eq!(r.all(), vec![dn("a", "h:1")]);
        r.upsert(&dn("z", "h:1"), None, t0);
        assert_eq!(r.all(), vec![dn("z", "h:1")]);
        r.upsert(&dn("z", "h:9"), None, t0);
        assert_eq!(r.all(), vec![dn("z", "h:9")], "an address change moves it");
        assert!(r.knows(&dn("z", "h:9")));
        assert!(!r.knows(&dn("z", "h:1")));
    }
}
