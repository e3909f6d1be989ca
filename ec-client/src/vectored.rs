//! Vectored reads, the pure half: validating a caller's list of ranges
//! against a key length and merging neighbours into fewer, larger fetches.
//! No I/O here; [`KeyInputStream::read_ranges`](crate::KeyInputStream::read_ranges)
//! fetches the merged ranges and slices the results.
//!
//! Modelled on Hadoop's `readVectored` contract (`FileRangeImpl`, overlap and
//! EOF validation) and its range-merging helper (`VectoredReadUtils`): ranges
//! are sorted, then a range is folded into the previous merged range when the
//! gap between them is at most `min_seek` bytes and the merged range stays
//! at most `max_merged` bytes long.

use std::ops::Range;

/// Why a list of ranges was refused (before any I/O).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Two ranges share bytes.
    #[error("ranges {a:?} and {b:?} overlap")]
    Overlap {
        /// One range.
        a: Range<u64>,
        /// The other.
        b: Range<u64>,
    },
    /// A range ends past the end of the key (or is reversed).
    #[error("range {range:?} ends past the end of the key ({len} bytes)")]
    PastEof {
        /// The range.
        range: Range<u64>,
        /// Key length.
        len: u64,
    },
}

/// One fetch: a merged range and the caller ranges it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedRange {
    /// Key-relative bytes to fetch.
    pub range: Range<u64>,
    /// (index in the caller's list, key-relative range), in key order.
    pub parts: Vec<(usize, Range<u64>)>,
}

/// Checks every range lies within `0..len` and no two non-empty ranges
/// overlap (adjacent ranges are fine; order does not matter).
///
/// # Errors
/// [`RangeError::PastEof`] for a range ending past `len` or with
/// `end < start`; [`RangeError::Overlap`] for the first overlapping pair.
pub fn validate(ranges: &[Range<u64>], len: u64) -> Result<(), RangeError> {
    for r in ranges {
        if r.end < r.start || r.end > len {
            return Err(RangeError::PastEof {
                range: r.clone(),
                len,
            });
        }
    }
    let mut sorted: Vec<&Range<u64>> = ranges.iter().filter(|r| r.start < r.end).collect();
    sorted.sort_by_key(|r| (r.start, r.end));
    for w in sorted.windows(2) {
        if w[1].start < w[0].end {
            return Err(RangeError::Overlap {
                a: w[0].clone(),
                b: w[1].clone(),
            });
        }
    }
    Ok(())
}

/// Sorts the non-empty `ranges` and merges neighbours whose gap is at most
/// `min_seek` bytes while the merged length stays at most `max_merged`
/// bytes. Expects validated (non-overlapping) input. Empty ranges are left
/// out: they need no fetch.
#[must_use]
pub fn merge(ranges: &[Range<u64>], min_seek: u64, max_merged: u64) -> Vec<MergedRange> {
    let mut order: Vec<usize> = (0..ranges.len())
        .filter(|&i| ranges[i].start < ranges[i].end)
        .collect();
    order.sort_by_key(|&i| ranges[i].start);
    let mut out: Vec<MergedRange> = Vec::new();
    for i in order {
        let r = ranges[i].clone();
        if let Some(last) = out.last_mut() {
            let gap = r.start.saturating_sub(last.range.end);
            let merged_len = r.end.max(last.range.end) - last.range.start;
            if gap <= min_seek && merged_len <= max_merged {
                last.range.end = last.range.end.max(r.end);
                last.parts.push((i, r));
                continue;
            }
        }
        out.push(MergedRange {
            range: r.clone(),
            parts: vec![(i, r)],
        });
    }
    out
}

#[cfg(test)]
// One-range lists are the point of several cases here.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validation_rules() {
        assert_eq!(validate(&[], 10), Ok(()));
        assert_eq!(validate(&[5..5, 0..10], 10), Ok(()));
        assert_eq!(
            validate(&[3..6, 0..3, 6..10], 10),
            Ok(()),
            "adjacent and unsorted"
        );
        assert!(matches!(
            validate(&[0..4, 3..5], 10),
            Err(RangeError::Overlap { .. })
        ));
        assert!(matches!(
            validate(&[8..11], 10),
            Err(RangeError::PastEof { .. })
        ));
        assert!(matches!(
            validate(&[11..11], 10),
            Err(RangeError::PastEof { .. })
        ));
        assert_eq!(validate(&[10..10], 10), Ok(()), "empty range at EOF");
    }

    #[test]
    fn merging_table() {
        // (ranges, min_seek, max_merged) -> merged ranges
        // (ranges, min_seek, max_merged, merged ranges wanted)
        type Case = (Vec<Range<u64>>, u64, u64, Vec<Range<u64>>);
        let cases: Vec<Case> = vec![
            (vec![0..10, 10..20], 0, 100, vec![0..20]),
            (vec![0..10, 14..20], 4, 100, vec![0..20]),
            (vec![0..10, 15..20], 4, 100, vec![0..10, 15..20]),
            (vec![0..10, 12..20], 4, 15, vec![0..10, 12..20]),
            (vec![30..40, 0..10, 12..20], 4, 100, vec![0..20, 30..40]),
            (vec![0..200], 4, 100, vec![0..200]),
            (vec![0..0, 5..6], 4, 100, vec![5..6]),
        ];
        for (ranges, seek, max, want) in cases {
            let got: Vec<Range<u64>> = merge(&ranges, seek, max)
                .into_iter()
                .map(|m| m.range)
                .collect();
            assert_eq!(got, want, "{ranges:?} seek {seek} max {max}");
        }
    }

    fn disjoint_ranges() -> impl Strategy<Value = Vec<Range<u64>>> {
        proptest::collection::vec((0u64..20, 0u64..20), 0..12).prop_map(|steps| {
            let mut at = 0;
            steps
                .into_iter()
                .map(|(gap, len)| {
                    let start = at + gap;
                    at = start + len;
                    start..at
                })
                .collect()
        })
    }

    proptest! {
        /// Against a flat model: every caller range is inside exactly one
        /// merged range, merged ranges are sorted and disjoint, respect the
        /// limits (unless a single range is already larger), and every merge
        /// was allowed by the gap rule.
        #[test]
        fn merge_matches_model(mut ranges in disjoint_ranges(), seek in 0u64..8, max in 1u64..60, shuffle in any::<u64>()) {
            let n = ranges.len().max(1);
            ranges.rotate_left((shuffle as usize) % n);
            prop_assert!(validate(&ranges, 1000).is_ok());
            let merged = merge(&ranges, seek, max);
            let mut seen = vec![0; ranges.len()];
            for w in merged.windows(2) {
                // Neighbours stayed apart only because the gap or the size rule said so.
                prop_assert!(w[0].range.end <= w[1].range.start);
                prop_assert!((w[1].range.start - w[0].range.end) > seek || w[1].range.end - w[0].range.start > max);
            }
            for m in &merged {
                prop_assert!(m.range.end - m.range.start <= max || m.parts.len() == 1);
                for (i, r) in &m.parts {
                    prop_assert_eq!(&ranges[*i], r);
                    prop_assert!(m.range.start <= r.start && r.end <= m.range.end);
                    seen[*i] += 1;
                }
                for p in m.parts.windows(2) {
                    prop_assert!(p[1].1.start - p[0].1.end <= seek);
                }
            }
            for (i, r) in ranges.iter().enumerate() {
                prop_assert_eq!(seen[i], usize::from(r.start < r.end));
            }
        }
    }
}
