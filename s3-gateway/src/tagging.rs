//! Object tags (Amazon S3 User Guide, "Categorizing your storage using tags"): up to 10
//! key-value pairs per object, keys of 1 to 128 Unicode characters, values of at most 256,
//! keys unique. Set with `x-amz-tagging` on PUT, CreateMultipartUpload and CopyObject (with
//! `x-amz-tagging-directive: REPLACE`), or PutObjectTagging; read with GetObjectTagging and
//! counted in GET/HEAD's `x-amz-tagging-count`. Kept in the key's metadata under
//! [`TAG_PREFIX`]; changing them rewrites no data and changes neither ETag nor generation.

use std::collections::BTreeMap;

use s3s::dto;
use s3s::{S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;

/// Metadata name prefix of an object's tags.
pub(crate) const TAG_PREFIX: &str = ec_client::object_metadata::TAG_PREFIX;
/// Most tags on one object.
const MAX_TAGS: usize = 10;
/// Longest tag key, characters.
const MAX_KEY_CHARS: usize = 128;
/// Longest tag value, characters.
const MAX_VALUE_CHARS: usize = 256;

/// Checks `tags` against Amazon's limits and returns them as metadata entries.
///
/// # Errors
/// 400 `InvalidTag` naming the broken rule.
pub(crate) fn to_metadata(tags: &[(String, String)]) -> S3Result<BTreeMap<String, String>> {
    if tags.len() > MAX_TAGS {
        return Err(s3_error!(
            InvalidTag,
            "Object tags cannot be greater than {MAX_TAGS}"
        ));
    }
    let mut out = BTreeMap::new();
    for (k, v) in tags {
        let n = k.chars().count();
        if n == 0 || n > MAX_KEY_CHARS {
            return Err(s3_error!(
                InvalidTag,
                "The TagKey you have provided is invalid: 1 to {MAX_KEY_CHARS} characters"
            ));
        }
        if v.chars().count() > MAX_VALUE_CHARS {
            return Err(s3_error!(
                InvalidTag,
                "The TagValue you have provided is too long, max {MAX_VALUE_CHARS}"
            ));
        }
        if out.insert(format!("{TAG_PREFIX}{k}"), v.clone()).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key"
            ));
        }
    }
    Ok(out)
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded), checked.
///
/// # Errors
/// 400 `InvalidArgument` for text that does not decode; `InvalidTag` as [`to_metadata`].
pub(crate) fn parse_header(value: &str) -> S3Result<BTreeMap<String, String>> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not UTF-8"))
    };
    let mut tags = Vec::new();
    for pair in value.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        tags.push((decode(k)?, decode(v)?));
    }
    to_metadata(&tags)
}

/// The tags of `request_headers`' `x-amz-tagging`, if any.
///
/// # Errors
/// As [`parse_header`].
pub(crate) fn from_headers(h: &http::HeaderMap) -> S3Result<BTreeMap<String, String>> {
    match h.get("x-amz-tagging") {
        None => Ok(BTreeMap::new()),
        Some(v) => parse_header(
            v.to_str()
                .map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not text"))?,
        ),
    }
}

/// The tag entries of key metadata `meta`.
pub(crate) fn of(meta: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    meta.iter()
        .filter(|(k, _)| k.starts_with(TAG_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn tag_set(meta: &BTreeMap<String, String>) -> Vec<dto::Tag> {
    meta.iter()
        .filter_map(|(k, v)| {
            Some(dto::Tag {
                key: Some(k.strip_prefix(TAG_PREFIX)?.to_string()),
                value: Some(v.clone()),
            })
        })
        .collect()
}

/// Refuses a version other than `null` (buckets here are not versioned).
fn not_versioned(version: Option<&str>) -> S3Result<()> {
    if version.is_some_and(|v| v != "null") {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid version id specified: this bucket is not versioned"
        ));
    }
    Ok(())
}

pub(crate) async fn put(
    gw: &Gateway,
    i: dto::PutObjectTaggingInput,
) -> S3Result<S3Response<dto::PutObjectTaggingOutput>> {
    not_versioned(i.version_id.as_deref())?;
    let tags: Vec<(String, String)> = i
        .tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect();
    let entries = to_metadata(&tags)?;
    gw.client()
        .set_key_metadata(&i.bucket, &i.key, TAG_PREFIX, entries)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::PutObjectTaggingOutput {
        version_id: Some("null".into()),
    }))
}

pub(crate) async fn get(
    gw: &Gateway,
    i: dto::GetObjectTaggingInput,
) -> S3Result<S3Response<dto::GetObjectTaggingOutput>> {
    not_versioned(i.version_id.as_deref())?;
    let k = gw
        .client()
        .key_info(&i.bucket, &i.key)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::GetObjectTaggingOutput {
        tag_set: tag_set(&k.metadata),
        version_id: Some("null".into()),
    }))
}

pub(crate) async fn delete(
    gw: &Gateway,
    i: dto::DeleteObjectTaggingInput,
) -> S3Result<S3Response<dto::DeleteObjectTaggingOutput>> {
    not_versioned(i.version_id.as_deref())?;
    gw.client()
        .set_key_metadata(&i.bucket, &i.key, TAG_PREFIX, BTreeMap::new())
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::DeleteObjectTaggingOutput {
        version_id: Some("null".into()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tags_decode_and_limits_hold() {
        let t = parse_header("project=blue%20sky&team=a+b&empty=").expect("valid");
        assert_eq!(t.get("tag:project").map(String::as_str), Some("blue sky"));
        assert_eq!(t.get("tag:team").map(String::as_str), Some("a b"));
        assert_eq!(t.get("tag:empty").map(String::as_str), Some(""));
        let code = |s: &str| parse_header(s).map_err(|e| e.code().as_str().to_string());
        assert_eq!(code("a=1&a=2").err().as_deref(), Some("InvalidTag"));
        let eleven: Vec<String> = (0..11).map(|n| format!("k{n}=v")).collect();
        assert_eq!(code(&eleven.join("&")).err().as_deref(), Some("InvalidTag"));
        assert_eq!(
            code(&format!("{}=v", "k".repeat(129))).err().as_deref(),
            Some("InvalidTag")
        );
        assert_eq!(
            code(&format!("k={}", "v".repeat(257))).err().as_deref(),
            Some("InvalidTag")
        );
        assert_eq!(code("=v").err().as_deref(), Some("InvalidTag"));
    }
}
