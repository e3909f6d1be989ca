//! Conditional writes (Amazon S3 User Guide, "How to prevent object overwrites with
//! conditional writes"): `If-None-Match: *` and `If-Match: <etag>` on PutObject,
//! CompleteMultipartUpload and CopyObject's destination, `If-Match` (and
//! `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`) on DeleteObject.
//!
//! The gateway evaluates the condition when the request arrives (a failure is 412
//! `PreconditionFailed`, or 404 `NoSuchKey` for `If-Match` on a missing key), and turns it into
//! a [`WriteCondition`] the om checks again in the commit's own transaction: the key must
//! still not exist, or still be at the generation whose ETag matched. When another write
//! committed in between, the om refuses and the client gets 409 `ConditionalRequestConflict`,
//! as Amazon answers a conflicting concurrent write; nothing is stored.

use ec_client::{ClientError, KeyInfo, WriteCondition};
use s3s::dto::{ETag, ETagCondition, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;
use crate::object_meta::etag_of;

/// The key `bucket/key` if it exists.
async fn current(gw: &Gateway, bucket: &str, key: &str) -> S3Result<Option<KeyInfo>> {
    match gw.client().key_info(bucket, key).await {
        Ok(k) => Ok(Some(k)),
        Err(ClientError::KeyNotFound { .. }) => Ok(None),
        Err(e) => Err(to_s3(e)),
    }
}

fn precondition_failed(what: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::PreconditionFailed,
        format!("At least one of the pre-conditions you specified did not hold: {what}"),
    )
}

/// Whether `If-Match` `c` matches `etag` (strong comparison; `*` matches any).
fn etag_matches(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(ETag::Strong(v)) => v.trim_matches('"') == etag,
        ETagCondition::ETag(ETag::Weak(_)) => false,
    }
}

/// The condition a write of `bucket/key` carries, checked against the key now.
///
/// # Errors
/// 400 `InvalidRequest` for both headers at once or `If-None-Match` with a value other than
/// `*`; 412 `PreconditionFailed` when the condition does not hold; 404 `NoSuchKey` for
/// `If-Match` on a missing key; lookup failures.
pub(crate) async fn write_condition(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Option<WriteCondition>> {
    match (if_match, if_none_match) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "If-Match and If-None-Match cannot be combined on a write"
        )),
        (None, Some(ETagCondition::Any)) => match current(gw, bucket, key).await? {
            Some(_) => Err(precondition_failed("the key exists (If-None-Match: *)")),
            None => Ok(Some(WriteCondition::NotExists)),
        },
        (None, Some(ETagCondition::ETag(_))) => Err(s3_error!(
            InvalidRequest,
            "If-None-Match on a write accepts only *"
        )),
        (Some(c), None) => match current(gw, bucket, key).await? {
            None => Err(s3_error!(
                NoSuchKey,
                "If-Match names a key that does not exist"
            )),
            Some(k) if etag_matches(c, &etag_of(&k)) => {
                Ok(Some(WriteCondition::Generation(k.generation)))
            }
            Some(_) => Err(precondition_failed("the ETag does not match (If-Match)")),
        },
    }
}

/// An `If-Match`/`If-None-Match` header of a request whose input does not parse it (CopyObject's
/// destination), as s3s would.
///
/// # Errors
/// 400 `InvalidArgument` for a value that is not an entity tag or `*`.
pub(crate) fn header_condition(
    headers: &http::HeaderMap,
    name: &str,
) -> S3Result<Option<ETagCondition>> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .map_err(|_| s3_error!(InvalidArgument, "{name} is not text"))?;
    ETagCondition::parse_http_header(s.as_bytes())
        .map(Some)
        .map_err(|e| s3_error!(InvalidArgument, "{name}: {e}"))
}

/// The condition of a DeleteObject: `If-Match`, and `x-amz-if-match-last-modified-time` and
/// `x-amz-if-match-size` compared with the key now.
///
/// # Errors
/// 412 `PreconditionFailed` when any does not hold; lookup failures. A missing key is `None`
/// (S3 deletes of missing keys succeed).
pub(crate) async fn delete_condition(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    if_match: Option<&ETagCondition>,
    modified: Option<&Timestamp>,
    size: Option<i64>,
) -> S3Result<Option<WriteCondition>> {
    if if_match.is_none() && modified.is_none() && size.is_none() {
        return Ok(None);
    }
    let Some(k) = current(gw, bucket, key).await? else {
        return Err(s3_error!(
            NoSuchKey,
            "the conditional delete names a key that does not exist"
        ));
    };
    if if_match.is_some_and(|c| !etag_matches(c, &etag_of(&k))) {
        return Err(precondition_failed("the ETag does not match (If-Match)"));
    }
    if let Some(t) = modified {
        let t: time::OffsetDateTime = t.clone().into();
        let secs = i64::try_from(k.created_unix_ms / 1000).unwrap_or(i64::MAX);
        if t.unix_timestamp() != secs {
            return Err(precondition_failed(
                "the last-modified time differs (x-amz-if-match-last-modified-time)",
            ));
        }
    }
    if size.is_some_and(|s| u64::try_from(s).ok() != Some(k.length)) {
        return Err(precondition_failed(
            "the size differs (x-amz-if-match-size)",
        ));
    }
    Ok(Some(WriteCondition::Generation(k.generation)))
}

/// Maps a failed commit or deletion: the om's condition refusal is 409
/// `ConditionalRequestConflict` (another write won between the check and the commit); the om
/// refusing a commit's arguments (groups it did not allocate, lengths that do not add up) is
/// 500 `InternalError` — the request was validated before anything was written, so that is
/// the client library breaking the protocol, not the caller; the rest as [`to_s3`].
pub(crate) fn commit_error(e: ClientError) -> S3Error {
    if let ClientError::Om {
        code: ec_client::OmErrorCode::InvalidArgument,
        message,
        ..
    } = e.root()
    {
        return S3Error::with_message(
            S3ErrorCode::InternalError,
            format!("the om refused the commit: {message}"),
        );
    }
    if e.is_condition_failed() {
        S3Error::with_message(
            S3ErrorCode::ConditionalRequestConflict,
            format!("A conflicting operation occurred; retry the request: {e}"),
        )
    } else {
        to_s3(e)
    }
}

/// The `x-amz-copy-source-if-*` headers of a CopyObject or UploadPartCopy.
pub(crate) struct CopySourceConditions<'a> {
    pub(crate) copy_source_if_match: Option<&'a ETagCondition>,
    pub(crate) copy_source_if_none_match: Option<&'a ETagCondition>,
    pub(crate) copy_source_if_unmodified_since: Option<&'a Timestamp>,
    pub(crate) copy_source_if_modified_since: Option<&'a Timestamp>,
}

/// [`CopySourceConditions`] of an input that has the four fields.
macro_rules! copy_source_conditions {
    ($i:expr) => {
        $crate::write_conditions::CopySourceConditions {
            copy_source_if_match: $i.copy_source_if_match.as_ref(),
            copy_source_if_none_match: $i.copy_source_if_none_match.as_ref(),
            copy_source_if_unmodified_since: $i.copy_source_if_unmodified_since.as_ref(),
            copy_source_if_modified_since: $i.copy_source_if_modified_since.as_ref(),
        }
    };
}
pub(crate) use copy_source_conditions;

/// `x-amz-copy-source-if-*`: a failing condition on the source is 412
/// PreconditionFailed (If-Match compares strongly; dates in whole seconds).
pub(crate) fn check_copy_source(i: CopySourceConditions<'_>, src: &KeyInfo) -> S3Result<()> {
    let etag = etag_of(src);
    let modified = i64::try_from(src.created_unix_ms / 1000).unwrap_or(i64::MAX);
    let secs = |t: &Timestamp| {
        let t: time::OffsetDateTime = t.clone().into();
        t.unix_timestamp()
    };
    let matches = |c: &ETagCondition, strong: bool| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(ETag::Strong(v)) => v.trim_matches('"') == etag,
        ETagCondition::ETag(ETag::Weak(v)) => !strong && v.trim_matches('"') == etag,
    };
    // An entity-tag condition decides alone when present (Amazon: if-match true with
    // if-unmodified-since false copies; if-none-match false with if-modified-since true is
    // 412), as RFC 9110 ignores the date when the tag condition is there.
    let match_failed = match i.copy_source_if_match {
        Some(c) => !matches(c, true),
        None => i
            .copy_source_if_unmodified_since
            .is_some_and(|t| modified > secs(t)),
    };
    let none_match_failed = match i.copy_source_if_none_match {
        Some(c) => matches(c, false),
        None => i
            .copy_source_if_modified_since
            .is_some_and(|t| modified <= secs(t)),
    };
    let failed = match_failed || none_match_failed;
    if failed {
        return Err(s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        ));
    }
    Ok(())
}
