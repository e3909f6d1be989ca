//! Decommission: a datanode's operational state (Ozone's `NodeOperationalState`), apart from
//! its liveness.
//!
//! `IN_SERVICE` → (`cargo xtask dn decommission N`) → `DECOMMISSIONING`: it gets no new block
//! groups, and the ReplicationManager copies everything it holds elsewhere — copies, not
//! rebuilds, since it is still readable; its blocks are read throughout — replacing its
//! locations one by one (each replaced copy is logged for deletion). When no committed key and
//! no open write references it, it is `DECOMMISSIONED`: it holds nothing anyone reads and may be
//! switched off.
//!
//! Storage: the table `datanode_op_states` of the metadata store (datanode
//! uuid → state name; datanodes in service have no row), so the state
//! survives restarts and is shared by every om on the store. Each change is
//! one `transact` body that reads the stored state and decides on it (two
//! oms decommissioning one datanode at once move it once), and raises the
//! counter `op_states_version`. Each om keeps a copy in memory for placement
//! and reports, with the version it was read at, re-read every service
//! interval ([`OzoneManager::reload_operational_states`]); an allocation
//! reads the version in its transaction (guarded), and places again on a
//! fresh copy when the store's is newer, so a group is never placed on a
//! datanode another om has taken out of service (whose decommission could
//! otherwise finish while that group is being written).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use meta_store::{MetaStore, RedbStore, Table, transact};
use proto_crate::DatanodeId;
use proto_crate::wire::om as pb;
use redb::{Database, TableDefinition};

use crate::{OmError, OzoneManager};

/// Datanode uuid → operational state name; datanodes in service have no row.
const OP_STATES: Table<String, String> = Table::new("datanode_op_states");

/// The redb table of the layout before the store, read once by
/// [`move_onto_store`].
const OLD_OP_STATES: TableDefinition<&str, &str> = TableDefinition::new("datanode_op_states");

/// Rows read per store call when the states are loaded.
const LOAD_PAGE: usize = 1000;

/// The `counters` row every operational-state change raises.
pub(crate) const VERSION: &str = "op_states_version";

/// The stored version of the operational states as `tx` sees it (guarded: a change
/// conflicts with `tx`).
///
/// # Errors
/// Store errors.
pub(crate) async fn version_in(tx: &meta_store::Transaction) -> Result<u64, OmError> {
    Ok(crate::tables::COUNTERS
        .get_in(tx, &VERSION.to_string())
        .await?
        .unwrap_or(0))
}

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

fn parse_row(uuid: &str, state: &str) -> Result<(DatanodeId, OperationalState), OmError> {
    let corrupt = |e: String| OmError::CorruptRecord {
        what: "datanode operational state".into(),
        source: e.into(),
    };
    let uuid: DatanodeId = uuid.parse().map_err(|e| corrupt(format!("{e}")))?;
    let state: OperationalState = state.parse().map_err(corrupt)?;
    Ok((uuid, state))
}

/// The stored states (datanodes not in service), read page by page.
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`] for a row that does not parse.
pub(crate) async fn load(
    store: &MetaStore,
) -> Result<(BTreeMap<DatanodeId, OperationalState>, u64), OmError> {
    let snapshot = store.snapshot().await?;
    let version = crate::tables::COUNTERS
        .get_at(&snapshot, &VERSION.to_string())
        .await?
        .map_or(0, |r| r.value);
    let mut out = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let page = OP_STATES
            .scan_at(&snapshot, &(), after.as_ref(), LOAD_PAGE)
            .await?;
        for row in &page.rows {
            let (uuid, state) = parse_row(&row.key, &row.value)?;
            out.insert(uuid, state);
        }
        match page.rows.last() {
            Some(last) if page.more => after = Some(last.key.clone()),
            _ => return Ok((out, version)),
        }
    }
}

/// Copies the states of an `om.redb` from before the store (the redb table
/// `datanode_op_states`) into `own`, the store over the same file, then
/// drops the old table; rows already in the store are kept, so a crash
/// between the copy and the drop repeats the copy harmlessly.
///
/// # Errors
/// Database and store errors; [`OmError::CorruptRecord`] for a row that
/// does not parse (the old table is then kept); [`OmError::Internal`] when
/// there are rows to copy and `own` is `None` (the om's store is elsewhere).
pub(crate) fn move_onto_store(db: &Database, own: Option<&RedbStore>) -> Result<(), OmError> {
    crate::store_moves::move_old_table(db, own, OLD_OP_STATES, |uuid, state, rows| {
        parse_row(uuid, state)?;
        rows.push(OP_STATES.row_bytes(&uuid.to_string(), &state.to_string()));
        Ok(())
    })?;
    Ok(())
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
    /// ReplicationManager copies its replicas elsewhere. Idempotent; returns the state after
    /// (as stored: a datanode another om decommissioned stays as it is).
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a datanode that is not registered (with this om:
    /// every datanode registers with every om); store errors; [`OmError::CorruptRecord`] for a
    /// stored state that does not parse.
    pub async fn decommission(&self, uuid: &DatanodeId) -> Result<OperationalState, OmError> {
        if self.datanode(uuid).is_none() {
            return Err(OmError::InvalidArgument(format!(
                "no registered datanode {uuid}"
            )));
        }
        let (state, changed) = self
            .change_operational_state(uuid, |now| match now {
                OperationalState::InService => Some(OperationalState::Decommissioning),
                _ => None,
            })
            .await?;
        if changed {
            tracing::info!(%uuid, "datanode decommissioning");
            self.repair.wakeup.notify_one();
        }
        Ok(state)
    }

    /// Moves `uuid` to the state `next` gives for its stored state (`None`:
    /// stays), in one `transact` body, then in memory. Returns the state
    /// after and whether it changed.
    async fn change_operational_state(
        &self,
        uuid: &DatanodeId,
        next: impl Fn(OperationalState) -> Option<OperationalState> + Sync,
    ) -> Result<(OperationalState, bool), OmError> {
        let _writes = self.op_state_writes.lock().await;
        let key = uuid.to_string();
        let (key, next) = (&key, &next);
        let (state, changed) = transact(&self.store, |tx| {
            Box::pin(async move {
                let now = match OP_STATES.get_in(&tx, key).await? {
                    Some(name) => parse_row(key, &name)?.1,
                    None => OperationalState::InService,
                };
                let Some(after) = next(now).filter(|a| *a != now) else {
                    return Ok::<_, OmError>((now, false));
                };
                match after {
                    OperationalState::InService => OP_STATES.delete_in(&tx, key),
                    other => OP_STATES.put_in(&tx, key, &other.as_str().to_string()),
                }
                let version = version_in(&tx).await?;
                crate::tables::COUNTERS.put_in(&tx, &VERSION.to_string(), &(version + 1));
                Ok((after, true))
            })
        })
        .await?
        .value;
        if changed {
            // With every change made through other oms since the last read, at the version
            // this change made or later.
            let (states, version) = load(&self.store).await?;
            let mut st = self.state();
            st.op_states = states;
            st.op_states_version = version;
        }
        Ok((state, changed))
    }

    /// Re-reads every datanode's operational state from the store into the
    /// om's copy (the om server does it every service interval), so states
    /// set through another om reach this one's placement.
    ///
    /// # Errors
    /// Store errors; a row that does not parse.
    pub async fn reload_operational_states(&self) -> Result<(), OmError> {
        let _writes = self.op_state_writes.lock().await;
        let (states, version) = load(&self.store).await?;
        let mut st = self.state();
        st.op_states = states;
        st.op_states_version = version;
        Ok(())
    }

    /// Datanodes being decommissioned that no committed key or multipart part (`referenced`,
    /// from a complete scan) and no open write references, in this pass and the one before
    /// (a key whose commit straddled one scan shows up in the next): they become
    /// DECOMMISSIONED.
    pub(crate) async fn finish_decommissions(
        &self,
        referenced: &std::collections::BTreeSet<DatanodeId>,
    ) -> Result<(), OmError> {
        let in_writes: std::collections::BTreeSet<DatanodeId> =
            crate::session_rows::all_allocated(&self.store)
                .await?
                .into_iter()
                .flat_map(|g| g.pipeline.locations)
                .map(|l| l.datanode.uuid)
                .collect();
        let unreferenced: Vec<DatanodeId> = {
            let st = self.state();
            st.op_states
                .iter()
                .filter(|(u, s)| {
                    **s == OperationalState::Decommissioning
                        && !referenced.contains(*u)
                        && !in_writes.contains(*u)
                })
                .map(|(u, _)| u.clone())
                .collect()
        };
        let done = self.repair.clean_pass(&unreferenced);
        for uuid in done {
            let (_, changed) = self
                .change_operational_state(&uuid, |now| match now {
                    OperationalState::Decommissioning => Some(OperationalState::Decommissioned),
                    _ => None,
                })
                .await?;
            if changed {
                tracing::info!(%uuid, "datanode decommissioned");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use meta_store::transact;
    use proto_crate::DatanodeDetails;
    use redb::{ReadableDatabase, TableError};

    use super::*;
    use crate::OmConfig;
    use crate::test_oms::{BACKENDS, TestOm};

    fn dn(i: u128) -> DatanodeDetails {
        DatanodeDetails {
            uuid: DatanodeId::from_u128(i),
            address: format!("127.0.0.1:{}", 10_000 + i),
        }
    }

    async fn stored(om: &OzoneManager) -> BTreeMap<DatanodeId, OperationalState> {
        load(&om.store).await.expect("load").0
    }

    #[tokio::test]
    async fn a_decommission_is_stored_once_and_survives_a_restart() {
        for b in BACKENDS {
            let om = TestOm::start(b).await;
            let id = dn(1).uuid;
            om.register_datanode(dn(1)).await.expect("register");
            let err = om
                .decommission(&dn(2).uuid)
                .await
                .expect_err("not registered");
            assert!(matches!(err, OmError::InvalidArgument(_)), "{err}");
            let (first, second) = tokio::join!(om.decommission(&id), om.decommission(&id));
            assert_eq!(first.expect("first"), OperationalState::Decommissioning);
            assert_eq!(second.expect("second"), OperationalState::Decommissioning);
            assert_eq!(
                stored(&om).await,
                BTreeMap::from([(id.clone(), OperationalState::Decommissioning)])
            );
            let om = om.restart().await;
            assert_eq!(om.operational_state(&id), OperationalState::Decommissioning);
        }
    }

    /// A state another om on the store wrote reaches this om's copy (and
    /// so its placement) at the next reload, and one it removed leaves it.
    #[tokio::test]
    async fn states_written_by_another_om_arrive_at_the_next_reload() {
        for b in BACKENDS {
            states_written_by_another_om_arrive_at_the_next_reload_on(TestOm::start(b).await).await;
        }
    }

    async fn states_written_by_another_om_arrive_at_the_next_reload_on(om: TestOm) {
        for i in 0..8 {
            om.register_datanode(dn(i)).await.expect("register");
        }
        let (a, b) = (dn(1).uuid.to_string(), dn(2).uuid.to_string());
        let (a, b) = (&a, &b);
        let elsewhere = |puts: bool| {
            transact(&om.store, move |tx| {
                Box::pin(async move {
                    if puts {
                        OP_STATES.put_in(&tx, a, &"DECOMMISSIONED".to_string());
                        OP_STATES.put_in(&tx, b, &"DECOMMISSIONING".to_string());
                    } else {
                        OP_STATES.delete_in(&tx, a);
                    }
                    Ok::<_, OmError>(())
                })
            })
        };
        elsewhere(true).await.expect("another om's write");
        assert_eq!(
            om.operational_state(&dn(1).uuid),
            OperationalState::InService
        );
        om.reload_operational_states().await.expect("reload");
        assert_eq!(
            om.operational_state(&dn(1).uuid),
            OperationalState::Decommissioned
        );
        assert_eq!(
            om.operational_state(&dn(2).uuid),
            OperationalState::Decommissioning
        );
        om.create_bucket("b", None, None).await.expect("bucket");
        let s = om.open_key("b", "k", None).await.expect("open key");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        assert!(
            g.pipeline
                .locations
                .iter()
                .all(|l| l.datanode.uuid != dn(1).uuid && l.datanode.uuid != dn(2).uuid),
            "placed on a datanode out of service: {g:?}"
        );
        elsewhere(false).await.expect("another om's delete");
        om.reload_operational_states().await.expect("reload");
        assert_eq!(
            om.operational_state(&dn(1).uuid),
            OperationalState::InService
        );
    }

    /// States of an `om.redb` from before the store are moved into it at
    /// open; a corrupt row stops the om and keeps the old table.
    #[tokio::test]
    async fn states_in_the_old_table_move_onto_the_store() {
        let dir = tempfile::tempdir().expect("dir");
        let id = dn(3).uuid;
        let write_old = |rows: &[(&str, &str)]| {
            let db = Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("txn");
            {
                let mut t = txn.open_table(OLD_OP_STATES).expect("table");
                for (k, v) in rows {
                    t.insert(*k, *v).expect("insert");
                }
            }
            txn.commit().expect("commit");
        };
        write_old(&[("not-a-uuid", "DECOMMISSIONING")]);
        let err = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect_err("a corrupt row stops the om");
        assert!(matches!(err, OmError::CorruptRecord { .. }), "{err}");
        {
            let db = Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("txn");
            txn.delete_table(OLD_OP_STATES).expect("drop");
            txn.commit().expect("commit");
        }
        write_old(&[(id.as_str(), "DECOMMISSIONED")]);
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("open");
        assert_eq!(om.operational_state(&id), OperationalState::Decommissioned);
        let read = om.own_file().begin_read().expect("read");
        assert!(matches!(
            read.open_table(OLD_OP_STATES),
            Err(TableError::TableDoesNotExist(_))
        ));
    }

    /// An old table is copied into the om's own file only: an om whose
    /// modules keep their rows elsewhere refuses to open over it.
    #[tokio::test]
    async fn an_old_table_is_not_left_behind_by_a_store_elsewhere() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let db = Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("txn");
            txn.open_table(OLD_OP_STATES)
                .expect("table")
                .insert(dn(3).uuid.as_str(), "DECOMMISSIONED")
                .expect("insert");
            txn.commit().expect("commit");
        }
        let elsewhere = MetaStore::Redb(
            meta_store::RedbStore::open(&dir.path().join("other.redb")).expect("store"),
        );
        let err = OzoneManager::open_on(OmConfig::new(dir.path()), Some(elsewhere.clone()))
            .await
            .expect_err("the old rows would be stranded");
        assert!(err.to_string().contains("datanode_op_states"), "{err}");
        // Emptied, the old table (an older binary makes every table at
        // open) no longer stands in the way.
        {
            let db = Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("txn");
            txn.open_table(OLD_OP_STATES)
                .expect("table")
                .remove(dn(3).uuid.as_str())
                .expect("remove");
            txn.commit().expect("commit");
        }
        let om = OzoneManager::open_on(OmConfig::new(dir.path()), Some(elsewhere.clone()))
            .await
            .expect("an empty old table is dropped");
        drop(om);
        // Rows in the om's own store would be stranded too.
        let own = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("on its own file");
        own.register_datanode(dn(4)).await.expect("register");
        drop(own);
        let err = OzoneManager::open_on(OmConfig::new(dir.path()), Some(elsewhere))
            .await
            .expect_err("the own file's rows would be stranded");
        assert!(err.to_string().contains("rows of its own"), "{err}");
    }
}
