//! [`ReplicaIndex`]: which internal block of an EC block group a byte, a cell or a location
//! belongs to.

use std::fmt;
use std::num::NonZeroU32;

/// 1-based index of an internal block within an EC block group, as Ozone numbers them and as
/// the wire carries them: `1..=d` are the data units, `d+1..=d+p` the parity units.
///
/// Zero is not a replica index: on the wire (`BlockID.replicaIndex`, `BlockLocation`) it means
/// "a replicated block", which the domain types spell `Option<ReplicaIndex>::None`; see
/// [`ReplicaIndex::from_wire`] and [`ReplicaIndex::to_wire`]. Whether an index is in range for
/// a scheme (`<= d + p`) depends on the scheme, so [`BlockGroupLayout`](crate::BlockGroupLayout)
/// checks that, not this type.
///
/// Codecs address units 0-based; [`ReplicaIndex::unit`] and [`ReplicaIndex::from_unit`] convert.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaIndex(NonZeroU32);

impl ReplicaIndex {
    /// Index 1: the first data unit. A stripe's parity cells are as long as this unit's cell.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// The index `i`, or `None` for 0 (which is not an index).
    #[must_use]
    pub const fn new(i: u32) -> Option<Self> {
        match NonZeroU32::new(i) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The index of 0-based codec unit `unit` (`unit + 1`), or `None` if that does not fit in
    /// a `u32` (no scheme has that many units: see [`MAX_UNITS`](crate::MAX_UNITS)).
    #[must_use]
    pub fn from_unit(unit: usize) -> Option<Self> {
        u32::try_from(unit)
            .ok()
            .and_then(|u| u.checked_add(1))
            .and_then(Self::new)
    }

    /// The 1-based number, as the wire carries it.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The 0-based codec unit (`index - 1`): the position of this index's shard in a codec's
    /// `shards` slice and in per-group arrays indexed by unit.
    #[must_use]
    pub const fn unit(self) -> usize {
        // u32 -> usize is lossless on every target this workspace builds for (>= 32-bit).
        (self.0.get() - 1) as usize
    }

    /// Reads a wire `replicaIndex`: 0 (a replicated block) is `None`.
    #[must_use]
    pub const fn from_wire(i: u32) -> Option<Self> {
        Self::new(i)
    }

    /// Writes a wire `replicaIndex`: `None` (a replicated block) is 0.
    #[must_use]
    pub const fn to_wire(index: Option<Self>) -> u32 {
        match index {
            Some(i) => i.get(),
            None => 0,
        }
    }

    /// The indexes `1..=total` in order: every unit of a scheme with `total` units.
    pub fn all(total: usize) -> impl DoubleEndedIterator<Item = Self> {
        let last = u32::try_from(total).unwrap_or(u32::MAX);
        (1..=last).filter_map(Self::new)
    }
}

/// Debug output is the bare number, as for `NonZeroU32`, so that lists of failed
/// `(index, address)` pairs in error messages read naturally.
impl fmt::Debug for ReplicaIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for ReplicaIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<ReplicaIndex> for u32 {
    fn from(i: ReplicaIndex) -> u32 {
        i.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering() {
        assert_eq!(ReplicaIndex::new(0), None);
        let three = ReplicaIndex::new(3).expect("3 is an index");
        assert_eq!(three.get(), 3);
        assert_eq!(three.unit(), 2);
        assert_eq!(ReplicaIndex::from_unit(2), Some(three));
        assert_eq!(ReplicaIndex::FIRST.unit(), 0);
        assert_eq!(ReplicaIndex::from_unit(usize::MAX), None);
        assert_eq!(ReplicaIndex::to_wire(None), 0);
        assert_eq!(ReplicaIndex::to_wire(Some(three)), 3);
        assert_eq!(ReplicaIndex::from_wire(0), None);
        assert_eq!(ReplicaIndex::from_wire(3), Some(three));
        assert_eq!(three.to_string(), "3");
        let all: Vec<u32> = ReplicaIndex::all(5).map(ReplicaIndex::get).collect();
        assert_eq!(all, [1, 2, 3, 4, 5]);
    }
}
