//! HTTP conditional requests on an object: `If-Match`, `If-None-Match`,
//! `If-Modified-Since`, `If-Unmodified-Since` (evaluated in RFC 9110
//! §13.2.2 order) and `If-Range` (§13.1.5), as pure functions of the
//! object's ETag and Last-Modified second. Beside the Range parser
//! (`range.rs`): GET and HEAD apply the conditionals first, then Range.

use s3s::dto::{Timestamp, TimestampFormat};

/// Whole seconds since the epoch of an HTTP date, if it parses.
pub(crate) fn parse_http_secs(s: &str) -> Option<i64> {
    let ts = Timestamp::parse(TimestampFormat::HttpDate, s.trim()).ok()?;
    let t: time::OffsetDateTime = ts.into();
    Some(t.unix_timestamp())
}

/// Whether an `If-Match`/`If-None-Match` list matches `etag` (`*` matches
/// any). `If-Match` uses the strong comparison (a weak tag never matches),
/// `If-None-Match` the weak one (RFC 9110 §13.1.1, §13.1.2).
pub(crate) fn etag_matches(list: &str, etag: &str, strong: bool) -> bool {
    list.split(',').map(str::trim).any(|t| {
        if t == "*" {
            return true;
        }
        let weak = t.starts_with("W/");
        if strong && weak {
            return false;
        }
        t.trim_start_matches("W/").trim_matches('"') == etag
    })
}

/// Whether `If-Range` lets Range apply: an entity tag must match strongly,
/// a date must equal Last-Modified (RFC 9110 §13.1.5); otherwise the whole
/// object is sent.
pub(crate) fn if_range_holds(value: &str, etag: &str, modified_secs: i64) -> bool {
    let v = value.trim();
    if v.starts_with('"') || v.starts_with("W/") {
        !v.starts_with("W/") && v.trim_matches('"') == etag
    } else {
        parse_http_secs(v) == Some(modified_secs)
    }
}

/// The conditional headers of a GET or HEAD (raw header values).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Conditions<'a> {
    pub(crate) if_match: Option<&'a str>,
    pub(crate) if_none_match: Option<&'a str>,
    pub(crate) if_modified_since: Option<&'a str>,
    pub(crate) if_unmodified_since: Option<&'a str>,
}

/// What the conditionals decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Serve the object (Range may still apply).
    Proceed,
    /// 304 Not Modified, with the object's headers and no body.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

impl Conditions<'_> {
    /// RFC 9110 §13.2.2: `If-Match` (or, without it, `If-Unmodified-Since`)
    /// failing is 412; then `If-None-Match` matching (or, without it,
    /// `If-Modified-Since` not passed) is 304. Dates compare in whole
    /// seconds; an unparsable date is ignored.
    pub(crate) fn evaluate(&self, etag: &str, modified_secs: i64) -> Precondition {
        let failed = match self.if_match {
            Some(list) => !etag_matches(list, etag, true),
            None => self
                .if_unmodified_since
                .and_then(parse_http_secs)
                .is_some_and(|d| modified_secs > d),
        };
        if failed {
            return Precondition::Failed;
        }
        let not_modified = match self.if_none_match {
            Some(list) => etag_matches(list, etag, false),
            None => self
                .if_modified_since
                .and_then(parse_http_secs)
                .is_some_and(|d| modified_secs <= d),
        };
        if not_modified {
            Precondition::NotModified
        } else {
            Precondition::Proceed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const T_SECS: i64 = 784_111_777;

    fn eval(c: Conditions<'_>, modified: i64) -> Precondition {
        c.evaluate("abc", modified)
    }

    #[test]
    fn if_match_takes_precedence_over_if_unmodified_since() {
        let c = Conditions {
            if_match: Some("\"abc\""),
            if_unmodified_since: Some(T),
            ..Conditions::default()
        };
        // Modified after the date, but If-Match holds: proceed (§13.2.2 step 1).
        assert_eq!(eval(c, T_SECS + 10), Precondition::Proceed);
        let c = Conditions {
            if_match: Some("W/\"abc\""),
            ..c
        };
        assert_eq!(
            eval(c, T_SECS),
            Precondition::Failed,
            "weak tags never match If-Match"
        );
    }

    #[test]
    fn if_unmodified_since_alone_fails_after_the_date() {
        let c = Conditions {
            if_unmodified_since: Some(T),
            ..Conditions::default()
        };
        assert_eq!(eval(c, T_SECS), Precondition::Proceed);
        assert_eq!(eval(c, T_SECS + 1), Precondition::Failed);
    }

    #[test]
    fn if_none_match_takes_precedence_over_if_modified_since() {
        let c = Conditions {
            if_none_match: Some("\"other\", W/\"abc\""),
            if_modified_since: Some(T),
            ..Conditions::default()
        };
        assert_eq!(
            eval(c, T_SECS + 100),
            Precondition::NotModified,
            "weak match counts"
        );
        let c = Conditions {
            if_none_match: Some("\"other\""),
            ..c
        };
        // No tag matches: If-Modified-Since is not consulted.
        assert_eq!(eval(c, T_SECS - 100), Precondition::Proceed);
    }

    #[test]
    fn if_modified_since_alone_is_not_modified_up_to_the_date() {
        let c = Conditions {
            if_modified_since: Some(T),
            ..Conditions::default()
        };
        assert_eq!(eval(c, T_SECS), Precondition::NotModified);
        assert_eq!(eval(c, T_SECS + 1), Precondition::Proceed);
        let c = Conditions {
            if_modified_since: Some("yesterday"),
            ..c
        };
        assert_eq!(
            eval(c, 0),
            Precondition::Proceed,
            "an unparsable date is ignored"
        );
    }

    #[test]
    fn a_failed_precondition_beats_not_modified() {
        let c = Conditions {
            if_match: Some("\"zzz\""),
            if_none_match: Some("*"),
            ..Conditions::default()
        };
        assert_eq!(eval(c, 0), Precondition::Failed);
    }

    #[test]
    fn entity_tag_comparisons() {
        // If-Match: strong comparison; a weak tag never matches.
        assert!(etag_matches("\"abc\"", "abc", true));
        assert!(etag_matches("\"x\", \"abc\"", "abc", true));
        assert!(etag_matches("*", "abc", true));
        assert!(!etag_matches("W/\"abc\"", "abc", true));
        assert!(!etag_matches("\"abd\"", "abc", true));
        // If-None-Match: weak comparison.
        assert!(etag_matches("W/\"abc\"", "abc", false));
        assert!(!etag_matches("\"x\"", "abc", false));
    }

    #[test]
    fn if_range_needs_a_strong_match_or_the_exact_date() {
        assert!(if_range_holds("\"abc\"", "abc", 0));
        assert!(!if_range_holds("W/\"abc\"", "abc", 0));
        assert!(!if_range_holds("\"old\"", "abc", 0));
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        let secs = parse_http_secs(date).expect("http date");
        assert_eq!(secs, 784_111_777);
        assert!(if_range_holds(date, "abc", secs));
        assert!(!if_range_holds(date, "abc", secs + 1));
        assert!(!if_range_holds("not a date", "abc", secs));
    }
}
