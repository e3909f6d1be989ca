//! A least-recently-used map with a weight bound, shared by the datanode's
//! caches: block-file read handles ([`FileCache`](crate::FileCache), weight
//! 1 per handle) and the fine checksums of closed blocks (`storage/fine.rs`,
//! weight in bytes). Not synchronised: each cache wraps it in its own lock.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Entries by key with a use order; the least recently used go first when
/// the total weight passes `capacity`.
///
/// A hit only stamps its entry (both caches are hit once per ReadChunk, so
/// a hit must be cheap); the order catches up at eviction: the entry with
/// the oldest position in `order` is evicted if it was not used since it
/// took that position, else it moves to its last use and the next is
/// tried. Every entry's last use is at or after its position, so the first
/// entry found unused since is the least recently used of all.
#[derive(Debug)]
pub(crate) struct WeightedLru<K, V> {
    capacity: u64,
    weight: u64,
    entries: HashMap<K, Entry<V>>,
    /// Position tick -> key, one per entry: the first is the oldest.
    order: BTreeMap<u64, K>,
    tick: u64,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    weight: u64,
    /// Tick of the last use.
    used: u64,
    /// Tick of the entry's position in `order` (at most `used`).
    position: u64,
}

impl<K: Copy + Eq + Hash, V: Clone> WeightedLru<K, V> {
    /// An empty map holding at most `capacity` weight (0 holds nothing).
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            weight: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    /// The value of `key`, marking it most recently used.
    pub(crate) fn get(&mut self, key: K) -> Option<V> {
        self.tick += 1;
        let e = self.entries.get_mut(&key)?;
        e.used = self.tick;
        Some(e.value.clone())
    }

    /// Puts `value` of `weight` under `key` (replacing an older value),
    /// then evicts the least recently used entries while the total weight
    /// is over capacity. An entry heavier than the whole capacity is not
    /// kept.
    pub(crate) fn insert(&mut self, key: K, value: V, weight: u64) {
        self.remove(key);
        if weight > self.capacity {
            return;
        }
        self.tick += 1;
        let tick = self.tick;
        let entry = Entry {
            value,
            weight,
            used: tick,
            position: tick,
        };
        self.entries.insert(key, entry);
        self.order.insert(tick, key);
        self.weight += weight;
        while self.weight > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&oldest) else {
                continue;
            };
            if e.used != e.position {
                // Used since: it moves up to its last use.
                e.position = e.used;
                self.order.insert(e.used, oldest);
                continue;
            }
            self.weight -= e.weight;
            self.entries.remove(&oldest);
        }
    }

    /// Drops the entry of `key`, if any.
    pub(crate) fn remove(&mut self, key: K) {
        if let Some(e) = self.entries.remove(&key) {
            self.order.remove(&e.position);
            self.weight -= e.weight;
        }
    }

    /// Drops every entry.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.weight = 0;
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Total weight of the entries held.
    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Get(u8),
        Insert(u8, u64),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..8).prop_map(Op::Get),
            (0u8..8, 0u64..6).prop_map(|(k, w)| Op::Insert(k, w)),
            (0u8..8).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Against a model that keeps entries in use order and evicts from
        /// the front: the same entries, values and weight after every step.
        #[test]
        fn matches_an_ordered_model(capacity in 0u64..12, ops in proptest::collection::vec(op(), 1..200)) {
            let mut lru = WeightedLru::new(capacity);
            // (key, value, weight), least recently used first.
            let mut model: Vec<(u8, u32, u64)> = Vec::new();
            for (i, op) in ops.into_iter().enumerate() {
                let value = i as u32;
                match op {
                    Op::Get(k) => {
                        let want = model.iter().position(|e| e.0 == k).map(|p| {
                            let e = model.remove(p);
                            model.push(e);
                            e.1
                        });
                        prop_assert_eq!(lru.get(k), want);
                    }
                    Op::Insert(k, w) => {
                        lru.insert(k, value, w);
                        model.retain(|e| e.0 != k);
                        if w <= capacity {
                            model.push((k, value, w));
                            while model.iter().map(|e| e.2).sum::<u64>() > capacity {
                                model.remove(0);
                            }
                        }
                    }
                    Op::Remove(k) => {
                        lru.remove(k);
                        model.retain(|e| e.0 != k);
                    }
                }
                prop_assert_eq!(lru.len(), model.len());
                prop_assert_eq!(lru.weight(), model.iter().map(|e| e.2).sum::<u64>());
            }
        }
    }

    #[test]
    fn evicts_least_recently_used_by_weight() {
        let mut l = WeightedLru::new(10);
        l.insert(1, "a", 4);
        l.insert(2, "b", 4);
        assert_eq!(l.get(1), Some("a"), "touch 1 so that 2 is the oldest");
        l.insert(3, "c", 4);
        assert_eq!((l.len(), l.weight()), (2, 8));
        assert_eq!(l.get(2), None, "least recently used is evicted");
        l.insert(3, "c2", 1);
        assert_eq!(l.weight(), 5, "a replaced entry's weight is released");
        l.insert(4, "huge", 11);
        assert_eq!(l.get(4), None, "heavier than the capacity: not kept");
        assert_eq!(l.len(), 2, "and it evicted nothing");
        l.remove(1);
        assert_eq!((l.len(), l.weight()), (1, 1));
        // Touched in another order than inserted: evicted by last use.
        let mut l = WeightedLru::new(3);
        for k in 1..=3 {
            l.insert(k, k, 1);
        }
        for k in [2, 1, 3, 2] {
            assert_eq!(l.get(k), Some(k));
        }
        l.insert(4, 4, 1);
        assert_eq!(l.get(1), None, "1 was used least recently");
        l.insert(5, 5, 1);
        assert_eq!(l.get(3), None, "then 3");
        assert_eq!((l.get(2), l.get(4), l.get(5)), (Some(2), Some(4), Some(5)));
        l.clear();
        assert_eq!((l.len(), l.weight()), (0, 0));
    }
}
