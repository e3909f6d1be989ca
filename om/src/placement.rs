//! Placement of a new block group: which datanodes hold its replicas, and
//! which replica index each holds. Pure: the om passes in the HEALTHY
//! datanodes, the writer's exclude list and a rotation counter.
//!
//! Ozone's SCM picks pipelines with placement policies (rack-aware and
//! random ones); this model has no racks, and rotates over the healthy
//! datanodes so that successive groups spread every replica index across
//! all of them.

use std::collections::HashSet;

use proto_crate::{BlockLocation, DatanodeDetails, DatanodeId, ReplicaIndex, ReplicationConfig};

use crate::OmError;

/// The locations of a new group of `replication`: `required_nodes()`
/// distinct datanodes from `healthy` (in their given order) that are not in
/// `exclude` (uuids), taken round-robin from position `rotation` modulo the
/// candidates; replica index i + 1 for the i-th location of an EC group, 0
/// for every replica of a replicated one.
///
/// # Errors
/// [`OmError::NotEnoughDatanodes`] when too few candidates remain
/// (`registered` is reported with it).
pub(crate) fn place(
    replication: &ReplicationConfig,
    healthy: &[DatanodeDetails],
    exclude: &[DatanodeId],
    rotation: u64,
    registered: usize,
) -> Result<Vec<BlockLocation>, OmError> {
    let excluded: HashSet<&DatanodeId> = exclude.iter().collect();
    let candidates: Vec<&DatanodeDetails> = healthy
        .iter()
        .filter(|d| !excluded.contains(&d.uuid))
        .collect();
    let needed = replication.required_nodes();
    if candidates.len() < needed {
        return Err(OmError::NotEnoughDatanodes {
            needed,
            available: candidates.len(),
            healthy: healthy.len(),
            registered,
            excluded: healthy.len() - candidates.len(),
        });
    }
    let n = candidates.len();
    let start = usize::try_from(rotation % n as u64).unwrap_or(0);
    Ok((0..needed)
        .map(|i| BlockLocation {
            datanode: candidates[(start + i) % n].clone(),
            replica_index: match replication {
                ReplicationConfig::Ec(_) => ReplicaIndex::from_unit(i),
                ReplicationConfig::Replicated { .. } => None,
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn nodes(n: usize) -> Vec<DatanodeDetails> {
        (0..n)
            .map(|i| DatanodeDetails {
                uuid: proto_crate::DatanodeId::from_u128(i as u128),
                address: format!("127.0.0.1:{}", 9000 + i),
            })
            .collect()
    }

    fn replication(ec: bool) -> ReplicationConfig {
        if ec {
            ReplicationConfig::Ec("rs-3-2-1024k".parse().expect("scheme"))
        } else {
            ReplicationConfig::Replicated { factor: 3 }
        }
    }

    proptest! {
        /// Every placement uses distinct, healthy, non-excluded datanodes
        /// with the right replica indexes — or is refused when too few are
        /// left.
        #[test]
        fn placements_are_distinct_allowed_and_indexed(
            n in 0usize..9,
            excluded in prop::collection::btree_set(0usize..9, 0..4),
            ec in any::<bool>(),
            rotation in any::<u64>(),
        ) {
            let healthy = nodes(n);
            let exclude: Vec<DatanodeId> = excluded
                .iter()
                .map(|&i| DatanodeId::from_u128(i as u128))
                .collect();
            let r = replication(ec);
            let allowed = healthy.iter().filter(|d| !exclude.contains(&d.uuid)).count();
            match place(&r, &healthy, &exclude, rotation, n) {
                Ok(locs) => {
                    prop_assert_eq!(locs.len(), r.required_nodes());
                    let uuids: HashSet<&str> = locs.iter().map(|l| l.datanode.uuid.as_str()).collect();
                    prop_assert_eq!(uuids.len(), locs.len(), "distinct datanodes");
                    for (i, l) in locs.iter().enumerate() {
                        prop_assert!(!exclude.contains(&l.datanode.uuid));
                        prop_assert!(healthy.contains(&l.datanode), "only healthy datanodes");
                        let want = if ec { u32::try_from(i + 1).unwrap_or(0) } else { 0 };
                        prop_assert_eq!(ReplicaIndex::to_wire(l.replica_index), want);
                    }
                }
                Err(OmError::NotEnoughDatanodes { needed, available, .. }) => {
                    prop_assert!(allowed < r.required_nodes());
                    prop_assert_eq!(needed, r.required_nodes());
                    prop_assert_eq!(available, allowed);
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }

    #[test]
    fn successive_groups_spread_every_index_over_every_datanode() {
        let healthy = nodes(7);
        let r = replication(true);
        let mut held: BTreeMap<(proto_crate::DatanodeId, Option<ReplicaIndex>), u32> =
            BTreeMap::new();
        for rotation in 0..7 {
            for l in place(&r, &healthy, &[], rotation, 7).expect("placed") {
                *held.entry((l.datanode.uuid, l.replica_index)).or_default() += 1;
            }
        }
        // 7 successive groups of 5 indexes over 7 datanodes: each datanode
        // held each index exactly once.
        assert_eq!(held.len(), 7 * 5, "every datanode held every index");
        assert!(held.values().all(|&c| c == 1));
    }
}
