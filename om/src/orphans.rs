//! Orphan sweep: replicas a datanode reports that nothing in the om references — left by an om
//! that crashed between a repair's writes and its commit, or by any other write whose record
//! was lost — are logged for deletion, so the block deleting service frees them (HDFS deletes
//! blocks a block report names that the NameNode does not know; Ozone's SCM does the same for
//! unknown containers).
//!
//! A replica is an orphan when two consecutive sweeps each find it unreferenced. One sweep
//! reads the keys, the parts of multipart uploads in progress, the groups of open sessions and
//! the deletion log in one read transaction (one consistent snapshot), against reports all
//! received before that snapshot began: a replica in such a report was on its datanode before
//! the snapshot, so if nothing referenced it then, only a write already under way could still
//! record it — an open session's (in the snapshot) or a repair's (excluded: groups being
//! repaired when the pass began or when the sweep ended are skipped). Requiring a second sweep
//! guards against a record moving between tables in ways this reasoning missed: a wrong
//! deletion loses data, a late one only costs space.

use std::collections::{BTreeSet, HashMap};

use proto_crate::wire::om as pb;
use proto_crate::{BlockGroup, BlockLocation, DatanodeId, ReplicaIndex};
use redb::{ReadableDatabase, ReadableTable};

use crate::deletion::{DELETION_LOG, OPEN_GROUPS};
use crate::manager::{KEYS, UPLOADS, decode};
use crate::{OmError, OzoneManager};

/// One reported replica: (container id, local id) and its datanode.
type Replica = ((u64, u64), DatanodeId);

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
    pub(crate) fn sweep_orphans(&self, repairing: &BTreeSet<(u64, u64)>) -> Result<usize, OmError> {
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
        {
            let read = self.db.begin_read()?;
            for entry in read.open_table(KEYS)?.iter()? {
                let (_, v) = entry?;
                let k = decode::<pb::KeyInfo, proto_crate::KeyInfo>(v.value(), "key")?;
                k.block_groups.iter().for_each(|g| mark_group(g, &mut mark));
            }
            for entry in read.open_table(UPLOADS)?.iter()? {
                let (_, v) = entry?;
                let u = decode::<pb::MultipartUploadInfo, proto_crate::MultipartUpload>(
                    v.value(),
                    "multipart upload",
                )?;
                for p in &u.parts {
                    p.block_groups.iter().for_each(|g| mark_group(g, &mut mark));
                }
            }
            for entry in read.open_table(OPEN_GROUPS)?.iter()? {
                let (_, v) = entry?;
                let g = decode::<pb::BlockGroup, BlockGroup>(v.value(), "open block group")?;
                mark_group(&g, &mut mark);
            }
            for entry in read.open_table(DELETION_LOG)?.iter()? {
                let (k, _) = entry?;
                let (uuid, c, l) = k.value();
                mark(uuid, (c, l));
            }
        }
        let repairing_now = self.repair.running_blocks();
        let mut unreferenced: BTreeSet<Replica> = BTreeSet::new();
        let mut index_of: HashMap<Replica, u32> = HashMap::new();
        for (d, m) in &marks {
            let r = &reports[*d];
            for (&(c, l, ri), &seen) in r.blocks.iter().zip(m) {
                if seen || repairing.contains(&(c, l)) || repairing_now.contains(&(c, l)) {
                    continue;
                }
                unreferenced.insert(((c, l), (*d).clone()));
                index_of.insert(((c, l), (*d).clone()), ri);
            }
        }
        let orphans = self.block_reports.confirm_orphans(unreferenced);
        if orphans.is_empty() {
            return Ok(0);
        }
        let txn = self.db.begin_write()?;
        let mut logged = 0;
        for replica in &orphans {
            let ((c, l), d) = replica;
            let Some(details) = self.datanode(d.as_str()) else {
                continue;
            };
            let location = BlockLocation {
                datanode: details,
                replica_index: index_of
                    .get(replica)
                    .and_then(|ri| ReplicaIndex::from_wire(*ri)),
            };
            tracing::warn!(datanode = %location.datanode, container = c, local = l,
                "orphan replica: no key, part or open session references it; deleting");
            crate::deletion::log_locations(&txn, *c, *l, std::slice::from_ref(&location))?;
            logged += 1;
        }
        txn.commit()?;
        self.block_reports.orphans_logged(logged as u64);
        self.deletions_changed();
        Ok(logged)
    }
}
