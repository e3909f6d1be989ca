//! What repair a key's block groups need, given which datanodes are alive: the ReplicationManager's
//! pure half (Ozone's `ECReplicationCheckHandler` / `RatisReplicationCheckHandler`).
//!
//! A location *counts* while its datanode is in service and not DEAD (a STALE datanode may be
//! back within the dead interval; repairing it is Ozone's `ozone.scm.dead.node.interval`
//! trade-off too). It is *readable* while its datanode is not DEAD, decommissioning included.
//! A location whose live datanode lost the block (found through block reports) neither counts
//! nor is readable: per location, not per datanode, hence the block in the predicates.
//! An EC index with no counting location is copied from a readable one when there is one
//! (decommission), else rebuilt; a replicated block with fewer counting copies than its factor
//! gets copies from a readable one.

use proto_crate::{BlockGroup, BlockLocation, DatanodeId, ReplicaIndex, ReplicationConfig};

use crate::group_owner::GroupOwner;

/// What one block group lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lack {
    /// EC indexes with no counting location.
    Indexes {
        /// Indexes with no readable location either: rebuilt (ascending).
        rebuild: Vec<ReplicaIndex>,
        /// One readable location (on a decommissioning datanode) of each other such index:
        /// copied, then replaced by the copy.
        copy: Vec<BlockLocation>,
    },
    /// A replicated block with fewer counting copies than its factor.
    Copies {
        /// Readable copies, counting ones first (sources).
        sources: Vec<BlockLocation>,
        /// Copies that do not count (dead first, then decommissioning): replaced one for one
        /// by the new copies.
        retire: Vec<BlockLocation>,
        /// Copies to add.
        needed: usize,
    },
}

/// One block group below full redundancy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deficit {
    /// The key or multipart part the group belongs to.
    pub(crate) owner: GroupOwner,
    /// Position of the group in its owner, from 0.
    pub(crate) group: usize,
    /// The owner's replication.
    pub(crate) replication: ReplicationConfig,
    /// The group as recorded when assessed.
    pub(crate) group_info: BlockGroup,
    /// (container id, local id) of the group.
    pub(crate) block: (u64, u64),
    /// Failures the group can still survive: for EC `p - rebuild`, for a replicated block
    /// `readable - 1`; below 0 the data may be gone. Repairs run lowest first, so a
    /// decommission (nothing lost) waits behind real losses.
    pub(crate) remaining: i64,
    /// Datanodes holding any location of the group (never a repair target).
    pub(crate) holders: Vec<DatanodeId>,
    /// What to do.
    pub(crate) lack: Lack,
}

/// The deficits of `groups` (all of the key or part `owner`, in order) of `replication`, given
/// `counts(datanode, block)` and `readable(datanode, block)` for the location of block
/// (container id, local id) on a datanode (see the module documentation; whatever counts is
/// readable).
pub(crate) fn assess_groups(
    owner: &GroupOwner,
    replication: ReplicationConfig,
    groups: &[BlockGroup],
    counts: impl Fn(&DatanodeId, (u64, u64)) -> bool,
    readable: impl Fn(&DatanodeId, (u64, u64)) -> bool,
) -> Vec<Deficit> {
    let mut out = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let block = (g.container_id, g.local_id);
        let counts = |d: &DatanodeId| counts(d, block);
        let readable = |d: &DatanodeId| readable(d, block);
        let holders: Vec<DatanodeId> = g
            .pipeline
            .locations
            .iter()
            .map(|l| l.datanode.uuid.clone())
            .collect();
        let (remaining, lack) = match replication {
            ReplicationConfig::Ec(ec) => {
                let mut rebuild = Vec::new();
                let mut copy = Vec::new();
                for r in ec.replica_indexes() {
                    if g.pipeline.nodes_for(r).any(|d| counts(&d.uuid)) {
                        continue;
                    }
                    match g.pipeline.nodes_for(r).find(|d| readable(&d.uuid)) {
                        Some(d) => copy.push(BlockLocation {
                            datanode: d.clone(),
                            replica_index: Some(r),
                        }),
                        None => rebuild.push(r),
                    }
                }
                if rebuild.is_empty() && copy.is_empty() {
                    continue;
                }
                let parity = i64::try_from(ec.parity()).unwrap_or(i64::MAX);
                let lost = i64::try_from(rebuild.len()).unwrap_or(i64::MAX);
                (parity - lost, Lack::Indexes { rebuild, copy })
            }
            ReplicationConfig::Replicated { factor } => {
                let (mut sources, others): (Vec<BlockLocation>, Vec<BlockLocation>) = g
                    .pipeline
                    .locations
                    .iter()
                    .cloned()
                    .partition(|l| counts(&l.datanode.uuid));
                let needed = usize::from(factor).saturating_sub(sources.len());
                if needed == 0 {
                    continue;
                }
                let (leaving, mut retire): (Vec<BlockLocation>, Vec<BlockLocation>) =
                    others.into_iter().partition(|l| readable(&l.datanode.uuid));
                sources.extend(leaving.iter().cloned());
                retire.extend(leaving);
                let remaining = i64::try_from(sources.len()).unwrap_or(i64::MAX) - 1;
                (
                    remaining,
                    Lack::Copies {
                        sources,
                        retire,
                        needed,
                    },
                )
            }
        };
        out.push(Deficit {
            owner: owner.clone(),
            group: i,
            replication,
            group_info: g.clone(),
            block: (g.container_id, g.local_id),
            remaining,
            holders,
            lack,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto_crate::{DatanodeDetails, KeyInfo, Pipeline};
    use std::collections::BTreeMap;

    /// [`assess_groups`] of a key's groups.
    fn assess(
        key: &KeyInfo,
        counts: impl Fn(&DatanodeId, (u64, u64)) -> bool,
        readable: impl Fn(&DatanodeId, (u64, u64)) -> bool,
    ) -> Vec<Deficit> {
        assess_groups(
            &GroupOwner::key(&key.bucket, &key.name),
            key.replication,
            &key.block_groups,
            counts,
            readable,
        )
    }

    fn dn(n: u128) -> DatanodeDetails {
        DatanodeDetails {
            uuid: DatanodeId::from_u128(n),
            address: format!("127.0.0.1:{n}"),
        }
    }

    fn key(replication: &str, locations: Vec<BlockLocation>) -> KeyInfo {
        KeyInfo {
            bucket: "b".into(),
            name: "k".into(),
            length: 10,
            replication: replication.parse().expect("replication"),
            block_groups: vec![BlockGroup {
                container_id: 1,
                local_id: 2,
                length: 10,
                pipeline: Pipeline { locations },
                token: None,
            }],
            block_size: 1 << 20,
            created_unix_ms: 0,
            metadata: BTreeMap::new(),
            generation: 1,
        }
    }

    fn loc(n: u128, r: u32) -> BlockLocation {
        BlockLocation {
            datanode: dn(n),
            replica_index: ReplicaIndex::new(r),
        }
    }

    #[test]
    fn ec_groups_lack_the_indexes_with_no_live_location() {
        let k = key(
            "rs-3-2-1024k",
            (1..=5).map(|r| loc(u128::from(r), r)).collect(),
        );
        assert!(assess(&k, |_, _| true, |_, _| true).is_empty());
        let dead = [DatanodeId::from_u128(2), DatanodeId::from_u128(5)];
        let d = assess(&k, |u, _| !dead.contains(u), |u, _| !dead.contains(u));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].remaining, 0);
        assert_eq!(d[0].holders.len(), 5);
        assert_eq!(
            d[0].lack,
            Lack::Indexes {
                rebuild: vec![
                    ReplicaIndex::new(2).expect("index"),
                    ReplicaIndex::new(5).expect("index")
                ],
                copy: vec![],
            }
        );
        // A spare copy of index 2 on a live datanode keeps index 2 present.
        let mut with_spare = k.clone();
        with_spare.block_groups[0]
            .pipeline
            .locations
            .push(loc(6, 2));
        let d = assess(
            &with_spare,
            |u, _| !dead.contains(u),
            |u, _| !dead.contains(u),
        );
        assert!(
            matches!(&d[0].lack, Lack::Indexes { rebuild, .. } if rebuild.len() == 1),
            "{d:?}"
        );
        assert_eq!(d[0].remaining, 1);
        // Datanode 3 decommissioning (readable, not counting): index 3 is copied, not rebuilt,
        // and does not lower the remaining redundancy.
        let leaving = DatanodeId::from_u128(3);
        let d = assess(&k, |u, _| *u != leaving, |_, _| true);
        assert_eq!(
            d[0].lack,
            Lack::Indexes {
                rebuild: vec![],
                copy: vec![loc(3, 3)]
            }
        );
        assert_eq!(d[0].remaining, 2);
    }

    #[test]
    fn replicated_blocks_lack_copies_below_their_factor() {
        let k = key("THREE", (1..=3).map(|n| loc(n, 0)).collect());
        assert!(assess(&k, |_, _| true, |_, _| true).is_empty());
        let three = DatanodeId::from_u128(3);
        let d = assess(&k, |u, _| *u != three, |u, _| *u != three);
        assert_eq!(d[0].remaining, 1);
        assert_eq!(
            d[0].lack,
            Lack::Copies {
                sources: vec![loc(1, 0), loc(2, 0)],
                retire: vec![loc(3, 0)],
                needed: 1
            }
        );
        // Decommissioning: its copy is a source too, and is retired.
        let d = assess(&k, |u, _| *u != three, |_, _| true);
        assert_eq!(d[0].remaining, 2);
        assert_eq!(
            d[0].lack,
            Lack::Copies {
                sources: vec![loc(1, 0), loc(2, 0), loc(3, 0)],
                retire: vec![loc(3, 0)],
                needed: 1
            }
        );
        let none = assess(&k, |_, _| false, |_, _| false);
        assert_eq!(none[0].remaining, -1, "no copy left");
    }

    #[test]
    fn a_block_lost_on_a_live_datanode_is_rebuilt_like_a_dead_ones() {
        let k = key(
            "rs-3-2-1024k",
            (1..=5).map(|r| loc(u128::from(r), r)).collect(),
        );
        let lost = (DatanodeId::from_u128(4), (1, 2));
        let present = |u: &DatanodeId, b: (u64, u64)| (u.clone(), b) != lost;
        let d = assess(&k, present, present);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].remaining, 1);
        assert_eq!(
            d[0].lack,
            Lack::Indexes {
                rebuild: vec![ReplicaIndex::new(4).expect("index")],
                copy: vec![],
            }
        );
        // Another block on the same datanode is not affected.
        let other = (DatanodeId::from_u128(4), (1, 3));
        let present = |u: &DatanodeId, b: (u64, u64)| (u.clone(), b) != other;
        assert!(assess(&k, present, present).is_empty());
    }

    proptest::proptest! {
        /// Against random placements (1-2 locations per index on 8 datanodes) and random
        /// datanode states: every index with no counting location is either rebuilt (no
        /// readable location) or copied from a readable one, never both; indexes with a
        /// counting location are left alone; `remaining` is p minus the rebuilt ones; a group
        /// is reported iff some index lacks a counting location.
        #[test]
        fn ec_deficits_match_the_locations(
            placement in proptest::collection::vec(
                proptest::collection::vec(0u128..8, 1..3), 5),
            states in proptest::collection::vec(0u8..3, 8),
        ) {
            // 0: in service and alive, 1: decommissioning (readable), 2: dead.
            let state = |u: &DatanodeId| (0..8u128)
                .find(|n| DatanodeId::from_u128(*n) == *u)
                .map_or(2, |n| states[n as usize]);
            let mut locations = Vec::new();
            for (i, nodes) in placement.iter().enumerate() {
                for n in nodes {
                    locations.push(loc(*n, i as u32 + 1));
                }
            }
            let k = key("rs-3-2-1024k", locations.clone());
            let d = assess(&k, |u, _| state(u) == 0, |u, _| state(u) < 2);
            let lacking: Vec<u32> = (1..=5u32)
                .filter(|r| !locations.iter().any(|l| {
                    l.replica_index == ReplicaIndex::new(*r) && state(&l.datanode.uuid) == 0
                }))
                .collect();
            proptest::prop_assert_eq!(d.is_empty(), lacking.is_empty());
            if let Some(d) = d.first() {
                let Lack::Indexes { rebuild, copy } = &d.lack else {
                    return Err(proptest::test_runner::TestCaseError::fail("not an EC lack"));
                };
                let mut named: Vec<u32> = rebuild.iter().map(|r| r.get()).collect();
                named.extend(copy.iter().filter_map(|l| l.replica_index).map(|r| r.get()));
                named.sort_unstable();
                proptest::prop_assert_eq!(&named, &lacking, "each lacking index once");
                for l in copy {
                    proptest::prop_assert_eq!(state(&l.datanode.uuid), 1, "copied from a readable, non-counting copy");
                    proptest::prop_assert!(locations.contains(l));
                }
                for r in rebuild {
                    proptest::prop_assert!(!locations.iter().any(|l| {
                        l.replica_index == Some(*r) && state(&l.datanode.uuid) < 2
                    }), "rebuilt only when nothing is readable");
                }
                proptest::prop_assert_eq!(d.remaining, 2 - rebuild.len() as i64);
            }
        }
    }
}
