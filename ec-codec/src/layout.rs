//! Striping math for one block group: where each data byte lives, how long each internal block
//! is, and how a byte range splits into cells. This is ARCHITECTURE.md's "Terms and layout math"
//! section in code; every quantity is a `u64` byte count so that groups above 4 GiB work.

use std::cmp::Ordering;
use std::iter::FusedIterator;
use std::ops::Range;

use crate::config::EcReplicationConfig;
use crate::error::EcError;
use crate::replica_index::ReplicaIndex;

/// Layout of one EC block group of `group_len` data bytes under a scheme.
///
/// Terms (as in Ozone): `d` data and `p` parity units, cell size `c` bytes, stripe size
/// `S = d * c` data bytes. Replica indexes are 1-based: `1..=d` are data internal blocks,
/// `d+1..=d+p` parity. Group-relative byte `P` lives in stripe `P / S`, replica
/// `(P / c) mod d + 1`, at offset `(P / S) * c + P mod c` of that internal block. The last
/// stripe may be partial; its parity cells are as long as its first data cell, and shorter
/// data cells are zero-padded only for encoding (padding is never stored).
///
/// All methods are pure arithmetic; nothing overflows for any `group_len` up to `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockGroupLayout {
    cfg: EcReplicationConfig,
    group_len: u64,
}

/// Where one group-relative byte lives; returned by [`BlockGroupLayout::locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellLocation {
    /// 0-based stripe number.
    pub stripe: u64,
    /// Replica index of the data internal block holding the byte (`1..=d`).
    pub replica_index: ReplicaIndex,
    /// Byte offset inside that internal block.
    pub offset_in_block: u64,
    /// Byte offset inside the cell (`< cell size`).
    pub offset_in_cell: u64,
    /// Real (unpadded) length of the containing cell in bytes; `offset_in_cell < cell_len`.
    pub cell_len: u64,
}

/// One piece of a group-relative byte range that falls inside a single cell; yielded by
/// [`BlockGroupLayout::cells_for_range`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CellSpan {
    /// 0-based stripe number.
    pub stripe: u64,
    /// Replica index of the data internal block (`1..=d`).
    pub replica_index: ReplicaIndex,
    /// Byte offset of the piece inside that internal block.
    pub offset_in_block: u64,
    /// Byte offset of the piece inside its cell.
    pub offset_in_cell: u64,
    /// Length of the piece in bytes (`>= 1`).
    pub len: u64,
    /// Group-relative offset of the piece's first byte.
    pub group_offset: u64,
}

impl BlockGroupLayout {
    /// Layout of a group holding `group_len` data bytes (parity not counted, as Ozone's block
    /// group length). Any length is valid, including 0 (an empty group).
    #[must_use]
    pub fn new(cfg: EcReplicationConfig, group_len: u64) -> Self {
        Self { cfg, group_len }
    }

    /// The scheme.
    #[must_use]
    pub fn config(&self) -> EcReplicationConfig {
        self.cfg
    }

    /// Group length `L` in data bytes.
    #[must_use]
    pub fn group_len(&self) -> u64 {
        self.group_len
    }

    fn c(&self) -> u64 {
        self.cfg.cell_size()
    }

    fn d(&self) -> u64 {
        self.cfg.data() as u64
    }

    fn check_replica(&self, replica_index: ReplicaIndex) -> Result<(), EcError> {
        if replica_index.unit() >= self.cfg.total() {
            return Err(EcError::InvalidReplicaIndex {
                replica_index,
                total: self.cfg.total(),
            });
        }
        Ok(())
    }

    /// Data bytes preceding data unit `replica_index` within one stripe: `(r - 1) * c`.
    fn unit_start(&self, replica_index: ReplicaIndex) -> u64 {
        u64::from(replica_index.get() - 1) * self.c()
    }

    /// The unit whose cell length a cell of `replica_index` has: itself for data, index 1 for
    /// parity (a stripe's parity cells are as long as its first data cell).
    fn length_unit(&self, replica_index: ReplicaIndex) -> ReplicaIndex {
        if self.cfg.is_data(replica_index) {
            replica_index
        } else {
            ReplicaIndex::FIRST
        }
    }

    /// Length in bytes of internal block `replica_index` (1-based).
    ///
    /// With `full = L / S` and `rem = L mod S`: data index `r` holds
    /// `full*c + clamp(rem - (r-1)*c, 0, c)` bytes; every parity index holds as much as index 1
    /// (`full*c + min(rem, c)`), because a stripe's parity cells are as long as its first cell.
    /// The data lengths sum to `L`. Ozone records these lengths in each internal block's
    /// `PutBlock` and checks them on read.
    ///
    /// # Errors
    /// [`EcError::InvalidReplicaIndex`] unless `1 <= replica_index <= d + p`.
    pub fn internal_block_len(&self, replica_index: ReplicaIndex) -> Result<u64, EcError> {
        self.check_replica(replica_index)?;
        let s = self.cfg.stripe_size();
        let full = self.group_len / s;
        let rem = self.group_len % s;
        let unit = self.length_unit(replica_index);
        let partial = rem.saturating_sub(self.unit_start(unit)).min(self.c());
        Ok(full * self.c() + partial)
    }

    /// Number of data internal blocks that hold any bytes: `min(ceil(L / c), d)`.
    ///
    /// Data indexes above this hold only implicit zero padding: readers never fetch them and
    /// they may be absent from a block group's locations (Ozone's "expected data locations").
    #[must_use]
    pub fn expected_data_locations(&self) -> usize {
        let cells = self.group_len.div_ceil(self.c());
        // Fails only when cells exceeds usize, i.e. is certainly >= d.
        usize::try_from(cells).map_or(self.cfg.data(), |n| n.min(self.cfg.data()))
    }

    /// Number of stripes, `ceil(L / S)`; 0 for an empty group.
    #[must_use]
    pub fn stripe_count(&self) -> u64 {
        self.group_len.div_ceil(self.cfg.stripe_size())
    }

    /// Data bytes in stripe `stripe` (0-based): `S` for full stripes, `L mod S` for a partial
    /// last stripe, and 0 for stripes at or past [`stripe_count`](Self::stripe_count).
    #[must_use]
    pub fn stripe_data_len(&self, stripe: u64) -> u64 {
        let s = self.cfg.stripe_size();
        let full = self.group_len / s;
        match stripe.cmp(&full) {
            Ordering::Less => s,
            Ordering::Equal => self.group_len % s,
            Ordering::Greater => 0,
        }
    }

    /// Group-relative byte range of stripe `stripe`'s data; empty (at `L`) past the end.
    #[must_use]
    pub fn stripe_range(&self, stripe: u64) -> Range<u64> {
        let start = stripe
            .saturating_mul(self.cfg.stripe_size())
            .min(self.group_len);
        start..start + self.stripe_data_len(stripe)
    }

    /// Real (unpadded) bytes of the cell of replica `replica_index` (1-based) in stripe
    /// `stripe` (0-based). For a parity index this is the parity cell length, which equals the
    /// length of data cell 1 in that stripe. Stripes past the end have 0-byte cells.
    ///
    /// # Errors
    /// [`EcError::InvalidReplicaIndex`] unless `1 <= replica_index <= d + p`.
    pub fn cell_len(&self, stripe: u64, replica_index: ReplicaIndex) -> Result<u64, EcError> {
        self.check_replica(replica_index)?;
        let unit = self.length_unit(replica_index);
        Ok(self
            .stripe_data_len(stripe)
            .saturating_sub(self.unit_start(unit))
            .min(self.c()))
    }

    /// Finds the data cell holding group-relative byte `pos`.
    ///
    /// # Errors
    /// [`EcError::OffsetPastEnd`] if `pos >= L`.
    pub fn locate(&self, pos: u64) -> Result<CellLocation, EcError> {
        if pos >= self.group_len {
            return Err(EcError::OffsetPastEnd {
                pos,
                len: self.group_len,
            });
        }
        Ok(self.location_of(pos))
    }

    /// `locate` without the bounds check; `pos < L` is the caller's promise.
    fn location_of(&self, pos: u64) -> CellLocation {
        let c = self.c();
        let cell = pos / c;
        let stripe = cell / self.d();
        // cell % d < d <= 32, so the cast is lossless and the index exists.
        #[allow(clippy::cast_possible_truncation)]
        let replica_index =
            ReplicaIndex::from_unit((cell % self.d()) as usize).unwrap_or(ReplicaIndex::FIRST);
        let offset_in_cell = pos % c;
        let cell_len = self
            .stripe_data_len(stripe)
            .saturating_sub(self.unit_start(replica_index))
            .min(c);
        CellLocation {
            stripe,
            replica_index,
            offset_in_block: stripe * c + offset_in_cell,
            offset_in_cell,
            cell_len,
        }
    }

    /// Inverse of [`locate`](Self::locate): the group-relative offset of byte `offset_in_block`
    /// of data internal block `replica_index`.
    ///
    /// # Errors
    /// [`EcError::InvalidReplicaIndex`] for an index outside `1..=d+p`,
    /// [`EcError::NotADataIndex`] for a parity index, and [`EcError::BlockOffsetPastEnd`] if
    /// the offset is not below [`internal_block_len`](Self::internal_block_len).
    pub fn group_offset(
        &self,
        replica_index: ReplicaIndex,
        offset_in_block: u64,
    ) -> Result<u64, EcError> {
        let block_len = self.internal_block_len(replica_index)?;
        if !self.cfg.is_data(replica_index) {
            return Err(EcError::NotADataIndex {
                replica_index,
                data: self.cfg.data(),
            });
        }
        if offset_in_block >= block_len {
            return Err(EcError::BlockOffsetPastEnd {
                replica_index,
                offset: offset_in_block,
                block_len,
            });
        }
        let c = self.c();
        let stripe = offset_in_block / c;
        Ok(stripe * self.cfg.stripe_size() + self.unit_start(replica_index) + offset_in_block % c)
    }

    fn check_range(&self, range: &Range<u64>) -> Result<(), EcError> {
        if range.start > range.end || range.end > self.group_len {
            return Err(EcError::InvalidRange {
                start: range.start,
                end: range.end,
                len: self.group_len,
            });
        }
        Ok(())
    }

    /// Splits a group-relative byte range into per-cell pieces, in ascending group order.
    ///
    /// The pieces are contiguous and together cover `range` exactly; each lies within one cell
    /// of one data internal block. An empty range yields nothing. Readers use this to map a
    /// positioned read onto reads of internal blocks.
    ///
    /// # Errors
    /// [`EcError::InvalidRange`] unless `range.start <= range.end <= L`.
    pub fn cells_for_range(&self, range: Range<u64>) -> Result<CellSpans, EcError> {
        self.check_range(&range)?;
        Ok(CellSpans {
            layout: *self,
            pos: range.start,
            end: range.end,
        })
    }

    /// Stripes (0-based, half-open) touched by a group-relative byte range. An empty byte range
    /// gives an empty stripe range.
    ///
    /// # Errors
    /// [`EcError::InvalidRange`] unless `range.start <= range.end <= L`.
    pub fn stripes_for_range(&self, range: Range<u64>) -> Result<Range<u64>, EcError> {
        self.check_range(&range)?;
        let s = self.cfg.stripe_size();
        let first = range.start / s;
        if range.is_empty() {
            return Ok(first..first);
        }
        Ok(first..(range.end - 1) / s + 1)
    }
}

/// Iterator over the [`CellSpan`]s of a byte range; see [`BlockGroupLayout::cells_for_range`].
#[derive(Debug, Clone)]
pub struct CellSpans {
    layout: BlockGroupLayout,
    pos: u64,
    end: u64,
}

impl Iterator for CellSpans {
    type Item = CellSpan;

    fn next(&mut self) -> Option<CellSpan> {
        if self.pos >= self.end {
            return None;
        }
        let loc = self.layout.location_of(self.pos);
        let len = (self.layout.c() - loc.offset_in_cell).min(self.end - self.pos);
        let span = CellSpan {
            stripe: loc.stripe,
            replica_index: loc.replica_index,
            offset_in_block: loc.offset_in_block,
            offset_in_cell: loc.offset_in_cell,
            len,
            group_offset: self.pos,
        };
        self.pos += len;
        Some(span)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.pos >= self.end {
            return (0, Some(0));
        }
        let c = self.layout.c();
        let n = (self.end - 1) / c - self.pos / c + 1;
        match usize::try_from(n) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl FusedIterator for CellSpans {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EcCodec;
    use proptest::prelude::*;

    /// Replica index `i` (tests only name valid, non-zero indexes).
    fn ri(i: usize) -> ReplicaIndex {
        ReplicaIndex::from_unit(i - 1).expect("a 1-based index")
    }

    fn layout(d: usize, p: usize, c: u64, len: u64) -> BlockGroupLayout {
        BlockGroupLayout::new(
            EcReplicationConfig::new(EcCodec::Rs, d, p, c).expect("valid layout query"),
            len,
        )
    }

    fn lens(l: &BlockGroupLayout) -> Vec<u64> {
        (1..=l.config().total())
            .map(|r| l.internal_block_len(ri(r)).expect("valid layout query"))
            .collect()
    }

    /// Hand-worked rs-3-2 examples with 10-byte cells (S = 30).
    #[test]
    fn worked_examples() {
        // (L, block lengths r1..r5, expected data locations, stripes)
        let cases: [(u64, [u64; 5], usize, u64); 8] = [
            (0, [0, 0, 0, 0, 0], 0, 0),
            (1, [1, 0, 0, 1, 1], 1, 1),
            (5, [5, 0, 0, 5, 5], 1, 1),
            (10, [10, 0, 0, 10, 10], 1, 1),
            (11, [10, 1, 0, 10, 10], 2, 1),
            (25, [10, 10, 5, 10, 10], 3, 1),
            (30, [10, 10, 10, 10, 10], 3, 1),
            (65, [25, 20, 20, 25, 25], 3, 3),
        ];
        for (len, want, locs, stripes) in cases {
            let l = layout(3, 2, 10, len);
            assert_eq!(lens(&l), want, "L={len}");
            assert_eq!(l.expected_data_locations(), locs, "L={len}");
            assert_eq!(l.stripe_count(), stripes, "L={len}");
        }
        let l = layout(3, 2, 10, 65);
        assert_eq!(l.stripe_data_len(2), 5);
        assert_eq!(l.stripe_data_len(3), 0);
        assert_eq!(l.stripe_range(2), 60..65);
        assert_eq!(l.stripe_range(9), 65..65);
        assert_eq!(l.cell_len(2, ri(1)), Ok(5));
        assert_eq!(l.cell_len(2, ri(2)), Ok(0));
        assert_eq!(l.cell_len(2, ri(4)), Ok(5));
        assert_eq!(l.cell_len(1, ri(5)), Ok(10));
        let loc = l.locate(47).expect("valid layout query");
        assert_eq!(
            loc,
            CellLocation {
                stripe: 1,
                replica_index: ri(2),
                offset_in_block: 17,
                offset_in_cell: 7,
                cell_len: 10
            }
        );
        assert_eq!(l.group_offset(ri(2), 17), Ok(47));
    }

    /// Bad indexes, positions and ranges give typed errors.
    #[test]
    fn errors() {
        let l = layout(3, 2, 10, 65);
        assert_eq!(
            l.internal_block_len(ri(6)),
            Err(EcError::InvalidReplicaIndex {
                replica_index: ri(6),
                total: 5
            })
        );
        assert!(l.internal_block_len(ri(7)).is_err());
        assert!(l.cell_len(0, ri(6)).is_err());
        assert_eq!(
            l.locate(65),
            Err(EcError::OffsetPastEnd { pos: 65, len: 65 })
        );
        assert!(matches!(
            l.group_offset(ri(4), 0),
            Err(EcError::NotADataIndex { .. })
        ));
        assert!(matches!(
            l.group_offset(ri(2), 20),
            Err(EcError::BlockOffsetPastEnd { block_len: 20, .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..4;
        assert!(matches!(
            l.cells_for_range(reversed.clone()),
            Err(EcError::InvalidRange { .. })
        ));
        assert!(l.stripes_for_range(reversed).is_err());
        assert!(l.cells_for_range(0..66).is_err());
        assert_eq!(
            l.cells_for_range(65..65)
                .expect("valid layout query")
                .count(),
            0
        );
        assert_eq!(l.stripes_for_range(65..65), Ok(2..2));
        assert_eq!(l.stripes_for_range(29..31), Ok(0..2));
        assert_eq!(l.stripes_for_range(0..65), Ok(0..3));
    }

    /// The largest possible group length does not overflow any computation.
    #[test]
    fn u64_max_group() {
        let l = layout(10, 4, 32 << 20, u64::MAX);
        let sum: u64 = (1..=10)
            .map(|r| l.internal_block_len(ri(r)).expect("valid layout query"))
            .sum();
        assert_eq!(sum, u64::MAX);
        assert_eq!(l.internal_block_len(ri(11)), l.internal_block_len(ri(1)));
        let last = l.stripe_count() - 1;
        assert_eq!(l.stripe_range(last).end, u64::MAX);
        assert_eq!(l.stripe_range(u64::MAX), u64::MAX..u64::MAX);
        let loc = l.locate(u64::MAX - 1).expect("valid layout query");
        assert_eq!(
            loc.offset_in_block + 1,
            l.internal_block_len(loc.replica_index)
                .expect("valid layout query")
        );
        let spans: Vec<_> = l
            .cells_for_range(u64::MAX - 100..u64::MAX)
            .expect("valid layout query")
            .collect();
        assert_eq!(spans.iter().map(|s| s.len).sum::<u64>(), 100);
        let l1 = layout(1, 1, 1, u64::MAX);
        assert_eq!(l1.internal_block_len(ri(1)), Ok(u64::MAX));
        assert_eq!(l1.internal_block_len(ri(2)), Ok(u64::MAX));
        assert_eq!(l1.stripe_count(), u64::MAX);
    }

    /// Reference model: deal the group's bytes out in cells round-robin, literally.
    fn deal(d: usize, c: u64, len: u64) -> Vec<Vec<u64>> {
        let mut blocks = vec![Vec::new(); d];
        let mut pos = 0;
        let mut cell = 0usize;
        while pos < len {
            let n = c.min(len - pos);
            blocks[cell % d].extend(pos..pos + n);
            pos += n;
            cell += 1;
        }
        blocks
    }

    fn small_layout() -> impl Strategy<Value = BlockGroupLayout> {
        (1usize..=10, 1usize..=4, 1u64..=40, 0u64..=3000)
            .prop_map(|(d, p, c, len)| layout(d, p, c, len))
    }

    proptest! {
        /// Small groups: lengths, locate and group_offset agree with the dealt-out model, so
        /// byte -> (replica, offset) is a bijection onto the internal blocks' bytes.
        #[test]
        fn matches_dealing_model(l in small_layout()) {
            let cfg = l.config();
            let blocks = deal(cfg.data(), cfg.cell_size(), l.group_len());
            for r in 1..=cfg.data() {
                prop_assert_eq!(l.internal_block_len(ri(r))?, blocks[r - 1].len() as u64);
                for (off, &pos) in blocks[r - 1].iter().enumerate() {
                    let loc = l.locate(pos)?;
                    prop_assert_eq!((loc.replica_index, loc.offset_in_block), (ri(r), off as u64));
                    prop_assert!(loc.offset_in_cell < loc.cell_len);
                    prop_assert_eq!(loc.cell_len, l.cell_len(loc.stripe, ri(r))?);
                    prop_assert_eq!(l.group_offset(ri(r), off as u64)?, pos);
                }
            }
            for r in cfg.data() + 1..=cfg.total() {
                prop_assert_eq!(l.internal_block_len(ri(r))?, l.internal_block_len(ri(1))?);
            }
            let total: u64 = (1..=cfg.data()).map(|r| l.internal_block_len(ri(r)).expect("valid layout query")).sum();
            prop_assert_eq!(total, l.group_len());
            let with_data = blocks.iter().filter(|b| !b.is_empty()).count();
            prop_assert_eq!(l.expected_data_locations(), with_data);
            // Cell lengths per stripe add up to the block lengths.
            for r in 1..=cfg.total() {
                let sum: u64 = (0..l.stripe_count()).map(|s| l.cell_len(s, ri(r)).expect("valid layout query")).sum();
                prop_assert_eq!(sum, l.internal_block_len(ri(r))?);
            }
        }

        /// cells_for_range pieces concatenate to the range, agree with locate, stay in one
        /// cell each, and touch exactly stripes_for_range.
        #[test]
        fn cells_for_range_covers(l in small_layout(), a in 0u64..=3000, b in 0u64..=3000) {
            let (a, b) = (a.min(b).min(l.group_len()), a.max(b).min(l.group_len()));
            let spans = l.cells_for_range(a..b)?;
            prop_assert_eq!(spans.size_hint().0, spans.clone().count());
            let mut next = a;
            let mut stripes = Vec::new();
            for span in spans {
                prop_assert_eq!(span.group_offset, next);
                prop_assert!(span.len >= 1);
                let loc = l.locate(span.group_offset)?;
                prop_assert_eq!(
                    (loc.stripe, loc.replica_index, loc.offset_in_block, loc.offset_in_cell),
                    (span.stripe, span.replica_index, span.offset_in_block, span.offset_in_cell)
                );
                prop_assert!(span.offset_in_cell + span.len <= loc.cell_len);
                let last = l.locate(span.group_offset + span.len - 1)?;
                prop_assert_eq!(last.offset_in_block, span.offset_in_block + span.len - 1);
                next += span.len;
                if stripes.last() != Some(&span.stripe) {
                    stripes.push(span.stripe);
                }
            }
            prop_assert_eq!(next, b);
            let range = l.stripes_for_range(a..b)?;
            prop_assert_eq!(stripes, range.collect::<Vec<_>>());
        }

        /// Groups above 2^32 bytes with 1 MiB cells: lengths sum to L, parity equals index 1,
        /// and locate agrees with the formula and stays inside the internal block.
        #[test]
        fn huge_groups(
            dp in prop::sample::select(vec![(3usize, 2usize), (6, 3), (10, 4), (1, 1), (2, 1)]),
            extra in 0u64..(1 << 40),
            positions in prop::collection::vec(any::<u64>(), 16),
        ) {
            let (d, p) = dp;
            let c = 1u64 << 20;
            let len = (1u64 << 32) + extra;
            let l = layout(d, p, c, len);
            let total: u64 = (1..=d).map(|r| l.internal_block_len(ri(r)).expect("valid layout query")).sum();
            prop_assert_eq!(total, len);
            for r in d + 1..=d + p {
                prop_assert_eq!(l.internal_block_len(ri(r))?, l.internal_block_len(ri(1))?);
            }
            let s = d as u64 * c;
            for pos in positions.into_iter().map(|x| x % len).chain([0, len - 1, 1 << 32]) {
                let loc = l.locate(pos)?;
                prop_assert_eq!(loc.stripe, pos / s);
                prop_assert_eq!(u64::from(loc.replica_index.get()), (pos / c) % d as u64 + 1);
                prop_assert_eq!(loc.offset_in_block, (pos / s) * c + pos % c);
                prop_assert!(loc.offset_in_block < l.internal_block_len(loc.replica_index)?);
                prop_assert_eq!(l.group_offset(loc.replica_index, loc.offset_in_block)?, pos);
                let end = (pos + 3 * c).min(len);
                let covered: u64 = l.cells_for_range(pos..end)?.map(|sp| sp.len).sum();
                prop_assert_eq!(covered, end - pos);
            }
            prop_assert_eq!(l.locate(len), Err(EcError::OffsetPastEnd { pos: len, len }));
        }
    }
}
