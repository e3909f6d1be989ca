//! A least-recently-used map with a weight bound, shared by the datanode's
//! caches: block-file read handles ([`FileCache`](crate::FileCache), weight
//! 1 per handle) and the fine checksums of closed blocks (`storage/fine.rs`,
//! weight in bytes). Not synchronised: each cache wraps it in its own lock.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Entries by key with a use order; the least recently used go first when
/// the total weight passes `capacity`.
#[derive(Debug)]
pub(crate) struct WeightedLru<K, V> {
    capacity: u64,
    weight: u64,
    /// Key -> (value, weight, last-use tick).
    entries: HashMap<K, (V, u64, u64)>,
    /// Last-use tick -> key: the first entry is the least recently used.
    order: BTreeMap<u64, K>,
    tick: u64,
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
        let tick = self.tick;
        let (value, _, t) = self.entries.get_mut(&key)?;
        let old = std::mem::replace(t, tick);
        let value = value.clone();
        self.order.remove(&old);
        self.order.insert(tick, key);
        Some(value)
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
        self.entries.insert(key, (value, weight, tick));
        self.order.insert(tick, key);
        self.weight += weight;
        while self.weight > self.capacity {
            let Some((_, victim)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, w, _)) = self.entries.remove(&victim) {
                self.weight -= w;
            }
        }
    }

    /// Drops the entry of `key`, if any.
    pub(crate) fn remove(&mut self, key: K) {
        if let Some((_, w, tick)) = self.entries.remove(&key) {
            self.order.remove(&tick);
            self.weight -= w;
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
        l.clear();
        assert_eq!((l.len(), l.weight()), (0, 0));
    }
}
