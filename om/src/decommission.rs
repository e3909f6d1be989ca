//! Decommission: a datanode's operational state (Ozone's `NodeOperationalState`), apart from
//! its liveness.
//!
//! `IN_SERVICE` → (`cargo xtask dn decommission N`) → `DECOMMISSIONING`: it gets no new block
//! groups, and the ReplicationManager copies everything it holds elsewhere — copies, not
//! rebuilds, since it is still readable; its blocks are read throughout — replacing its
//! locations one by one (each replaced copy is logged for deletion). When no committed key and
//! no open write references it, it is `DECOMMISSIONED`: it holds nothing anyone reads and may be
//! switched off. The state is stored in the om's database and survives restarts.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use proto_crate::DatanodeId;
use proto_crate::wire::om as pb;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::{OmError, OzoneManager};

/// Datanode uuid -> operational state name; datanodes in service have no entry.
pub(crate) const OP_STATES: TableDefinition<&str, &str> =
    TableDefinition::new("datanode_op_states");

/// What the cluster may use a datanode for (Ozone's `NodeOperationalState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum OperationalState {
    /// Holds data and gets new block groups.
    #[default]
    InService,
    /// Being emptied: no new groups; its replicas are copied elsewhere.
    Decommissioning,
    /// Emptied: nothing references it.
    Decommissioned,
}

impl OperationalState {
    /// The upper-case name (`IN_SERVICE`, `DECOMMISSIONING`, `DECOMMISSIONED`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InService => "IN_SERVICE",
            Self::Decommissioning => "DECOMMISSIONING",
            Self::Decommissioned => "DECOMMISSIONED",
        }
    }
}

impl fmt::Display for OperationalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperationalState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "IN_SERVICE" => Ok(Self::InService),
            "DECOMMISSIONING" => Ok(Self::Decommissioning),
            "DECOMMISSIONED" => Ok(Self::Decommissioned),
            other => Err(format!("unknown operational state {other:?}")),
        }
    }
}

impl From<OperationalState> for pb::OperationalState {
    fn from(s: OperationalState) -> Self {
        match s {
            OperationalState::InService => Self::InService,
            OperationalState::Decommissioning => Self::Decommissioning,
            OperationalState::Decommissioned => Self::Decommissioned,
        }
    }
}

impl From<pb::OperationalState> for OperationalState {
    /// An unspecified state (an om from before decommission existed) is in service.
    fn from(s: pb::OperationalState) -> Self {
        match s {
            pb::OperationalState::Unspecified | pb::OperationalState::InService => Self::InService,
            pb::OperationalState::Decommissioning => Self::Decommissioning,
            pb::OperationalState::Decommissioned => Self::Decommissioned,
        }
    }
}

/// The stored states, read at start-up.
///
/// # Errors
/// Database errors; [`OmError::CorruptRecord`] for a record that does not parse.
pub(crate) fn load(db: &Database) -> Result<BTreeMap<DatanodeId, OperationalState>, OmError> {
    let read = db.begin_read()?;
    let mut out = BTreeMap::new();
    for entry in read.open_table(OP_STATES)?.iter()? {
        let (k, v) = entry?;
        let corrupt = |e: String| OmError::CorruptRecord {
            what: "datanode operational state".into(),
            source: e.into(),
        };
        let uuid: DatanodeId = k.value().parse().map_err(|e| corrupt(format!("{e}")))?;
        let state: OperationalState = v.value().parse().map_err(corrupt)?;
        out.insert(uuid, state);
    }
    Ok(out)
}

impl OzoneManager {
    /// Operational state of datanode `uuid` (in service unless decommissioned).
    #[must_use]
    pub fn operational_state(&self, uuid: &DatanodeId) -> OperationalState {
        self.state()
            .op_states
            .get(uuid)
            .copied()
            .unwrap_or_default()
    }

    /// Starts decommissioning datanode `uuid`: it gets no new block groups from now on and the
    /// ReplicationManager copies its replicas elsewhere. Idempotent; returns the state after.
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a datanode that is not registered; database errors.
    pub fn decommission(&self, uuid: &DatanodeId) -> Result<OperationalState, OmError> {
        if self.datanode(uuid).is_none() {
            return Err(OmError::InvalidArgument(format!(
                "no registered datanode {uuid}"
            )));
        }
        match self.operational_state(uuid) {
            OperationalState::InService => {
                self.set_operational_state(uuid, OperationalState::Decommissioning)?;
                tracing::info!(%uuid, "datanode decommissioning");
                self.repair.wakeup.notify_one();
                Ok(OperationalState::Decommissioning)
            }
            other => Ok(other),
        }
    }

    /// Records `state` for `uuid`, durably, then in memory.
    pub(crate) fn set_operational_state(
        &self,
        uuid: &DatanodeId,
        state: OperationalState,
    ) -> Result<(), OmError> {
        let mut st = self.state();
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(OP_STATES)?;
            match state {
                OperationalState::InService => {
                    t.remove(uuid.as_str())?;
                }
                other => {
                    t.insert(uuid.as_str(), other.as_str())?;
                }
            }
        }
        txn.commit()?;
        if state == OperationalState::InService {
            st.op_states.remove(uuid);
        } else {
            st.op_states.insert(uuid.clone(), state);
        }
        Ok(())
    }

    /// Datanodes being decommissioned that no committed key or multipart part (`referenced`,
    /// from a complete scan) and no open write references, in this pass and the one before
    /// (a key whose commit straddled one scan shows up in the next): they become
    /// DECOMMISSIONED.
    pub(crate) fn finish_decommissions(
        &self,
        referenced: &std::collections::BTreeSet<DatanodeId>,
    ) -> Result<(), OmError> {
        let unreferenced: Vec<DatanodeId> = {
            let st = self.state();
            let in_writes: std::collections::BTreeSet<&DatanodeId> = st
                .sessions
                .values()
                .flat_map(|s| s.allocated.iter())
                .flat_map(|g| g.pipeline.locations.iter())
                .map(|l| &l.datanode.uuid)
                .collect();
            st.op_states
                .iter()
                .filter(|(u, s)| {
                    **s == OperationalState::Decommissioning
                        && !referenced.contains(*u)
                        && !in_writes.contains(u)
                })
                .map(|(u, _)| u.clone())
                .collect()
        };
        let done = self.repair.clean_pass(&unreferenced);
        for uuid in done {
            self.set_operational_state(&uuid, OperationalState::Decommissioned)?;
            tracing::info!(%uuid, "datanode decommissioned");
        }
        Ok(())
    }
}
