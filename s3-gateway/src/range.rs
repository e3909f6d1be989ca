//! HTTP `Range` for GET and HEAD object, exactly as RFC 9110 §14 and
//! Amazon S3 behave. Pure: no I/O.
//!
//! - Accepted forms: `bytes=a-b`, `bytes=a-`, `bytes=-n` (the unit is
//!   case-insensitive; whitespace around the value is ignored).
//! - Ignored (the full object, 200): anything syntactically invalid (first >
//!   last, not numbers, both ends missing), another unit, several ranges.
//! - An end past the object is clamped; a suffix longer than the object is
//!   the whole object (still a 206).
//! - Unsatisfiable (416 with `Content-Range: bytes */SIZE`): a first byte at
//!   or past the size, a suffix of 0, and every range of an empty object.
//! - Numbers too large for u64 mean "to the end" (a too-large first byte is
//!   therefore past the end).

use std::ops::Range;

/// What a `Range` header asks for, before looking at the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// No header, or one that must be ignored: serve the whole object (200).
    Whole,
    /// `bytes=first-last` (`last` `None` for `bytes=first-` or a last too large for u64).
    FromTo {
        /// First byte; `u64::MAX` when the digits overflowed.
        first: u64,
        /// Last byte, inclusive.
        last: Option<u64>,
    },
    /// `bytes=-n`: the last `n` bytes (saturated at `u64::MAX`).
    Suffix(u64),
}

/// The answer for one object size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// 200, the whole object.
    Whole,
    /// 206 with these bytes (`Content-Range: bytes start-(end-1)/size`).
    Partial(Range<u64>),
    /// 416 InvalidRange with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Parses a run of ASCII digits; `None` if empty or not all digits,
/// `Some(u64::MAX)` when it overflows.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<u64>().unwrap_or(u64::MAX))
}

/// Parses a `Range` header value (`None` = no header).
#[must_use]
pub fn parse(header: Option<&str>) -> RangeRequest {
    let Some(value) = header else {
        return RangeRequest::Whole;
    };
    let value = value.trim();
    let Some((unit, set)) = value.split_once('=') else {
        return RangeRequest::Whole;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeRequest::Whole;
    }
    let set = set.trim();
    if set.contains(',') {
        return RangeRequest::Whole;
    }
    let Some((a, b)) = set.split_once('-') else {
        return RangeRequest::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    match (a.is_empty(), b.is_empty()) {
        (true, true) => RangeRequest::Whole,
        (true, false) => number(b).map_or(RangeRequest::Whole, RangeRequest::Suffix),
        (false, true) => number(a).map_or(RangeRequest::Whole, |first| RangeRequest::FromTo {
            first,
            last: None,
        }),
        (false, false) => match (number(a), number(b)) {
            (Some(first), Some(last)) if last == u64::MAX => {
                RangeRequest::FromTo { first, last: None }
            }
            (Some(first), Some(last)) if first <= last => RangeRequest::FromTo {
                first,
                last: Some(last),
            },
            _ => RangeRequest::Whole,
        },
    }
}

/// Resolves a request against an object of `size` bytes.
#[must_use]
pub fn resolve(req: RangeRequest, size: u64) -> Resolved {
    match req {
        RangeRequest::Whole => Resolved::Whole,
        RangeRequest::FromTo { first, last } => {
            if first >= size {
                return Resolved::Unsatisfiable;
            }
            let end = last.map_or(size, |l| l.saturating_add(1).min(size));
            Resolved::Partial(first..end)
        }
        RangeRequest::Suffix(n) => {
            if n == 0 || size == 0 {
                return Resolved::Unsatisfiable;
            }
            Resolved::Partial(size.saturating_sub(n)..size)
        }
    }
}

/// `Content-Range` value of a 206 for `range` of an object of `size` bytes.
#[must_use]
pub fn content_range(range: &Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

/// `Content-Range` value of a 416 for an object of `size` bytes.
#[must_use]
pub fn unsatisfiable_content_range(size: u64) -> String {
    format!("bytes */{size}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(h: &str, size: u64) -> Resolved {
        resolve(parse(Some(h)), size)
    }

    #[test]
    fn the_rules_table() {
        use Resolved::{Partial, Unsatisfiable, Whole};
        let cases: Vec<(&str, u64, Resolved)> = vec![
            ("bytes=0-0", 10, Partial(0..1)),
            ("bytes=2-5", 10, Partial(2..6)),
            ("bytes=2-", 10, Partial(2..10)),
            ("bytes=-3", 10, Partial(7..10)),
            ("bytes=5-100", 10, Partial(5..10)),
            ("bytes=-100", 10, Partial(0..10)),
            ("BYTES = 1-2 ", 10, Partial(1..3)),
            ("bytes=0-99999999999999999999999", 10, Partial(0..10)),
            ("bytes=-99999999999999999999999", 10, Partial(0..10)),
            ("bytes=99999999999999999999999-", 10, Unsatisfiable),
            ("bytes=10-", 10, Unsatisfiable),
            ("bytes=10-20", 10, Unsatisfiable),
            ("bytes=-0", 10, Unsatisfiable),
            ("bytes=0-0", 0, Unsatisfiable),
            ("bytes=-5", 0, Unsatisfiable),
            ("bytes=0-", 0, Unsatisfiable),
            ("bytes=5-2", 10, Whole),
            ("bytes=a-b", 10, Whole),
            ("bytes=-", 10, Whole),
            ("bytes=1", 10, Whole),
            ("items=0-1", 10, Whole),
            ("bytes=0-1,3-4", 10, Whole),
            ("bytes=+1-2", 10, Whole),
            ("bytes=-+1", 10, Whole),
            ("", 10, Whole),
            ("garbage", 10, Whole),
        ];
        for (h, size, want) in cases {
            assert_eq!(r(h, size), want, "{h:?} on {size}");
        }
        assert_eq!(resolve(parse(None), 10), Whole);
        assert_eq!(content_range(&(2..6), 10), "bytes 2-5/10");
        assert_eq!(unsatisfiable_content_range(10), "bytes */10");
    }

    proptest! {
        /// Against a model of the rules over random sizes and headers.
        #[test]
        fn matches_the_model(size in 0u64..1000, a in proptest::option::of(0u64..1200), b in proptest::option::of(0u64..1200)) {
            let header = format!("bytes={}-{}", a.map(|v| v.to_string()).unwrap_or_default(), b.map(|v| v.to_string()).unwrap_or_default());
            let got = r(&header, size);
            let want = match (a, b) {
                (None, None) => Resolved::Whole,
                (None, Some(n)) => if n == 0 || size == 0 { Resolved::Unsatisfiable } else { Resolved::Partial(size.saturating_sub(n)..size) },
                (Some(f), None) => if f >= size { Resolved::Unsatisfiable } else { Resolved::Partial(f..size) },
                (Some(f), Some(l)) if f > l => Resolved::Whole,
                (Some(f), Some(l)) => if f >= size { Resolved::Unsatisfiable } else { Resolved::Partial(f..(l + 1).min(size)) },
            };
            prop_assert_eq!(got.clone(), want);
            if let Resolved::Partial(range) = got {
                prop_assert!(range.start < range.end && range.end <= size);
            }
        }

        /// Arbitrary header strings never panic and never produce an out-of-bounds range.
        #[test]
        fn arbitrary_headers_are_safe(h in ".{0,40}", size in 0u64..100) {
            if let Resolved::Partial(range) = r(&h, size) {
                prop_assert!(range.start < range.end && range.end <= size);
            }
        }
    }
}
