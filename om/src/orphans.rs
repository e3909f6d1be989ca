//! Orphan sweep: replicas a datanode reports that nothing in the om references — left by an om
//! that crashed between a repair's writes and its commit, or by any other write whose record
//! was lost — are logged for deletion, so the block deleting service frees them (HDFS deletes
//! blocks a block report names that the NameNode does not know; Ozone's SCM does the same for
//! unknown containers).
//!
//! A replica is an orphan when two consecutive sweeps each find it unreferenced. One sweep
//! reads the keys, the parts of multipart uploads in progress, the groups of open sessions,
//! staged deletions and the deletion log at one store snapshot (`MetaStore::snapshot`), against reports all
//! received before that snapshot began: a replica in such a report was on its datanode before
//! the snapshot, so if nothing referenced it then, only a write already under way could still
//! record it — an open session's (in the snapshot) or a repair's (excluded: groups being
//! repaired when the pass began or when the sweep ended are skipped). Requiring a second sweep
//! guards against a record moving between tables in ways this reasoning missed: a wrong
//! deletion loses data, a late one only costs space.
//!
//! Guards, each because a wrong deletion is unrecoverable:
//! - the second sweep must see the replica in a *newer* report of its datanode than the first;
//! - a location added after the snapshot (a repair or `add_replica` commit, counted in
//!   [`LOCATIONS_ADDED`]) voids the rest of the sweep: it logs nothing more that round (each
//!   transaction of at most `TXN_BATCH` orphans checks it);
//! - a block id at or past the om's id counter is never an orphan — it was allocated by an
//!   om whose records this one lacks (a database restored from a backup): that is alarmed,
//!   not deleted. The counter is the end of the last reserved range of ids
//!   (`sessions.rs`), not the next id handed out, so ids of the last batch below it are not
//!   swept either (they may be that om's too) until the counter moves a batch on;
//! - a datanode where more than a tenth of the reported blocks (and over 100) look orphaned
//!   gets nothing deleted and an alarm instead, and one sweep deletes at most
//!   [`MAX_ORPHANS_PER_SWEEP`] replicas.

use std::collections::{BTreeSet, HashMap};

use meta_store::codec::Raw;
use meta_store::{Transaction, transact};
use proto_crate::wire::om as pb;
use proto_crate::{BlockGroup, BlockLocation, DatanodeId, ReplicaIndex};

use crate::tables::{COUNTERS, DELETED_GROUPS, DELETION_LOG, KEYS, OPEN_SESSIONS, PARTS, each_row};
use crate::{OmError, OzoneManager};

use crate::block_reports::Replica;

/// Most replicas one sweep logs for deletion.
pub const MAX_ORPHANS_PER_SWEEP: usize = 10_000;
/// Counter (in the `counters` table) of location additions by repair and `add_replica`.
pub(crate) const LOCATIONS_ADDED: &str = "locations_added";

/// Counts a location addition in `tx` (a repair's or `add_replica`'s commit): a sweep whose
/// snapshot is older logs nothing more.
///
/// # Errors
/// Store errors.
pub(crate) async fn count_location_added_in(tx: &Transaction) -> Result<(), OmError> {
    let name = LOCATIONS_ADDED.to_string();
    let n = COUNTERS.get_in(tx, &name).await?.unwrap_or(0);
    COUNTERS.put_in(tx, &name, &(n + 1));
    Ok(())
}

/// A stored message `bytes` of kind `what`.
fn decode_pb<M: prost::Message + Default>(bytes: &[u8], what: &str) -> Result<M, OmError> {
    M::decode(bytes).map_err(|e| OmError::CorruptRecord {
        what: what.to_string(),
        source: Box::new(e),
    })
}

/// Stored groups as domain groups.
fn groups_of(groups: Vec<pb::BlockGroup>) -> Result<Vec<BlockGroup>, OmError> {
    groups
        .into_iter()
        .map(|g| {
            BlockGroup::try_from(g).map_err(|e| OmError::CorruptRecord {
                what: "block group".into(),
                source: Box::new(e),
            })
        })
        .collect()
}

/// Calls `mark(datanode uuid, block)` for every location of `g`.
fn mark_group(g: &BlockGroup, mark: &mut impl FnMut(&str, (u64, u64))) {
    for l in &g.pipeline.locations {
        mark(l.datanode.uuid.as_str(), (g.container_id, g.local_id));
    }
}

impl OzoneManager {
    /// One orphan sweep (see the module documentation). `repairing` are the groups being
    /// repaired when the calling pass began. Returns the replicas logged for deletion.
    ///
    /// # Errors
    /// Database errors (nothing is logged then).
    pub(crate) async fn sweep_orphans(
        &self,
        repairing: &BTreeSet<(u64, u64)>,
    ) -> Result<usize, OmError> {
        let reports = self.block_reports.snapshot();
        if reports.is_empty() {
            return Ok(0);
        }
        let mut marks: HashMap<&DatanodeId, Vec<bool>> = reports
            .iter()
            .map(|(d, r)| (d, vec![false; r.blocks.len()]))
            .collect();
        let mut mark = |uuid: &str, block: (u64, u64)| {
            if let Some((d, r)) = reports.get_key_value(uuid)
                && let Some(i) = r.position(block)
                && let Some(m) = marks.get_mut(d)
            {
                m[i] = true;
            }
        };
        let snapshot = self.store.snapshot().await?;
        let counter = |name: &str| {
            let name = name.to_string();
            let snapshot = &snapshot;
            async move {
                Ok::<u64, OmError>(
                    COUNTERS
                        .get_at(snapshot, &name)
                        .await?
                        .map_or(0, |r| r.value),
                )
            }
        };
        let added_before = counter(LOCATIONS_ADDED).await?;
        let next_local_id = counter("next_local_id").await?;
        each_row(&snapshot, KEYS, &(), |_, v: Raw| {
            let k = crate::keys::key_of(&v, None)?;
            k.block_groups.iter().for_each(|g| mark_group(g, &mut mark));
            Ok(())
        })
        .await?;
        each_row(&snapshot, PARTS, &(), |_, v: Raw| {
            let p = crate::manager::decode::<pb::PartInfo, proto_crate::PartInfo>(
                &v.0,
                "multipart part",
            )?;
            p.block_groups.iter().for_each(|g| mark_group(g, &mut mark));
            Ok(())
        })
        .await?;
        each_row(&snapshot, OPEN_SESSIONS, &(), |_, v: Raw| {
            let s = decode_pb::<pb::OpenSessionRecord>(&v.0, "open session")?;
            for g in groups_of(s.allocated)? {
                mark_group(&g, &mut mark);
            }
            Ok(())
        })
        .await?;
        each_row(&snapshot, DELETED_GROUPS, &(), |_, v: Raw| {
            let staged = decode_pb::<pb::DeletedGroups>(&v.0, "staged deletion")?;
            for g in groups_of(staged.groups)? {
                mark_group(&g, &mut mark);
            }
            Ok(())
        })
        .await?;
        each_row(&snapshot, DELETION_LOG, &(), |(uuid, c, l), _| {
            mark(&uuid, (c, l));
            Ok(())
        })
        .await?;
        drop(snapshot);
        let repairing_now = self.repair.running_blocks();
        let mut unreferenced: Vec<(Replica, std::time::Instant)> = Vec::new();
        let mut index_of: HashMap<Replica, u32> = HashMap::new();
        let mut from_the_future = 0usize;
        for (d, m) in &marks {
            let r = &reports[*d];
            for (&(c, l, ri), &seen) in r.blocks.iter().zip(m) {
                if seen || repairing.contains(&(c, l)) || repairing_now.contains(&(c, l)) {
                    continue;
                }
                if next_local_id > 0 && l >= next_local_id {
                    from_the_future += 1;
                    continue;
                }
                // The last reservation's ids may have been handed out by an om whose records
                // this one lacks (the counter is the end of the reserved range, not the next
                // id handed out): such a block waits until the counter has moved a batch on.
                if l.saturating_add(crate::sessions::LOCAL_ID_BATCH) >= next_local_id {
                    continue;
                }
                unreferenced.push((((c, l), (*d).clone()), r.received));
                index_of.insert(((c, l), (*d).clone()), ri);
            }
        }
        if from_the_future > 0 {
            tracing::error!(
                blocks = from_the_future,
                next_local_id,
                "datanodes report blocks this om never allocated (was its database restored?); not deleting them"
            );
        }
        let mut orphans = self.block_reports.confirm_orphans(unreferenced);
        // A datanode where a large share of the blocks look orphaned points at the om's
        // records, not at the datanode: alarm, delete nothing there.
        let mut per_datanode: HashMap<DatanodeId, usize> = HashMap::new();
        for (_, d) in &orphans {
            *per_datanode.entry(d.clone()).or_default() += 1;
        }
        let suspicious: BTreeSet<DatanodeId> = per_datanode
            .into_iter()
            .filter(|(d, n)| *n > 100 && *n * 10 > reports.get(d).map_or(0, |r| r.len()))
            .map(|(d, n)| {
                tracing::error!(datanode = %d, orphans = n,
                    "too many unreferenced replicas on one datanode; deleting none of them");
                d
            })
            .collect();
        orphans.retain(|(_, d)| !suspicious.contains(d));
        orphans.truncate(MAX_ORPHANS_PER_SWEEP);
        if orphans.is_empty() {
            return Ok(0);
        }
        let mut logged = 0;
        // A bounded number per transaction; each checks that no location was added since the
        // snapshot (a repair, add_replica: it may name one of these), or logs nothing more.
        for chunk in orphans.chunks(crate::deletion::TXN_BATCH) {
            let locations: Vec<(u64, u64, BlockLocation)> = chunk
                .iter()
                .filter_map(|replica| {
                    let ((c, l), d) = replica;
                    let details = self.datanode(d.as_str())?;
                    Some((
                        *c,
                        *l,
                        BlockLocation {
                            datanode: details,
                            replica_index: index_of
                                .get(replica)
                                .and_then(|ri| ReplicaIndex::from_wire(*ri)),
                        },
                    ))
                })
                .collect();
            let went_on = transact(&self.store, |tx| {
                let locations = &locations;
                Box::pin(async move {
                    let added = COUNTERS
                        .get_in(&tx, &LOCATIONS_ADDED.to_string())
                        .await?
                        .unwrap_or(0);
                    if added != added_before {
                        return Ok(false);
                    }
                    for (c, l, location) in locations {
                        crate::deletion::log_locations_in(
                            &tx,
                            *c,
                            *l,
                            std::slice::from_ref(location),
                        );
                    }
                    Ok::<_, OmError>(true)
                })
            })
            .await?
            .value;
            if !went_on {
                break;
            }
            for (c, l, location) in &locations {
                tracing::warn!(datanode = %location.datanode, container = c, local = l,
                    "orphan replica: no key, part or open session references it; deleting");
            }
            logged += locations.len();
        }
        if logged == 0 {
            return Ok(0);
        }
        self.block_reports.orphans_logged(logged as u64);
        self.deletions_changed();
        Ok(logged)
    }
}
