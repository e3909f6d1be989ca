//! Bucket operations (ListBuckets with pagination, CreateBucket, GetBucketLocation) and
//! Amazon's bucket naming rules for general purpose buckets (Amazon S3 User Guide, "General
//! purpose bucket naming rules"), plugged into s3s so every request is checked the same way.

use base64::Engine;
use ec_client::{BucketOptions, CannedAcl, ClientError, OmErrorCode};
use s3s::dto;
use s3s::validation::NameValidation;
use s3s::{S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::access::Principal;
use crate::error::to_s3;
use crate::object_meta::timestamp;

/// The region the gateway answers for (its SigV4 scope and `GetBucketLocation`).
pub(crate) const REGION: &str = "us-east-1";

/// Whether `name` follows Amazon's general purpose bucket naming rules: 3 to 63 characters of
/// lowercase letters, digits, dots and hyphens; a letter or digit first and last; no two
/// adjacent dots and no dot next to a hyphen; not shaped like an IPv4 address; none of the
/// reserved prefixes (`xn--`, `sthree-`, `amzn-s3-demo-`) or suffixes (`-s3alias`, `--ol-s3`,
/// `.mrap`, `--x-s3`, `--table-s3`).
#[must_use]
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && edge(b.first())
        && edge(b.last())
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err()
        && !["xn--", "sthree-", "amzn-s3-demo-"]
            .iter()
            .any(|p| name.starts_with(p))
        && !["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"]
            .iter()
            .any(|s| name.ends_with(s))
}

/// [`valid_bucket_name`] as s3s's validation hook.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BucketNames;

impl NameValidation for BucketNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        valid_bucket_name(name)
    }
}

/// Most buckets one ListBuckets page holds (Amazon's `max-buckets` ceiling).
const MAX_BUCKETS: usize = 10_000;

/// ListBuckets: every bucket when the request names no `max-buckets`, else pages of at most
/// that many after the continuation token (the base64 of the last name shown), filtered by
/// `prefix`.
pub(crate) async fn list(
    gw: &Gateway,
    i: dto::ListBucketsInput,
    principal: &Principal,
) -> S3Result<S3Response<dto::ListBucketsOutput>> {
    let max = match i.max_buckets {
        None => None,
        Some(m) => Some(
            usize::try_from(m)
                .ok()
                .filter(|m| (1..=MAX_BUCKETS).contains(m))
                .ok_or_else(|| {
                    s3_error!(
                        InvalidArgument,
                        "max-buckets must be between 1 and {MAX_BUCKETS}"
                    )
                })?,
        ),
    };
    let after = match &i.continuation_token {
        None => String::new(),
        Some(t) => base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(t)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "The continuation token provided is incorrect"
                )
            })?,
    };
    let prefix = i.prefix.clone().unwrap_or_default();
    // Whose buckets: the admin sees every bucket, a user its own, an anonymous caller none.
    let listed = match principal {
        Principal::Admin => Some(None),
        Principal::User(u) => Some(Some(u.as_str())),
        Principal::Anonymous => None,
    };
    // Pages of the om's listing (the user's buckets only: one index range each) until one
    // more than `max` is known, or the listing ends.
    let mut buckets: Vec<ec_client::BucketInfo> = Vec::new();
    if let Some(owner) = listed {
        let mut from = after;
        loop {
            let (page, more) = gw
                .client()
                .list_buckets_page(owner, &prefix, &from, 0)
                .await
                .map_err(to_s3)?;
            let Some(last) = page.last() else { break };
            from.clone_from(&last.name);
            buckets.extend(page);
            if !more || max.is_some_and(|m| buckets.len() > m) {
                break;
            }
        }
    }
    let token = match max {
        Some(m) if buckets.len() > m => {
            buckets.truncate(m);
            buckets
                .last()
                .map(|b| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b.name))
        }
        _ => None,
    };
    Ok(S3Response::new(dto::ListBucketsOutput {
        buckets: Some(
            buckets
                .into_iter()
                .map(|b| dto::Bucket {
                    name: Some(b.name),
                    creation_date: Some(timestamp(b.created_unix_ms)),
                    bucket_region: Some(REGION.to_string()),
                })
                .collect(),
        ),
        owner: Some(crate::acl::policy(principal.owner(), CannedAcl::Private).0),
        continuation_token: token,
        prefix: i.prefix,
    }))
}

/// CreateBucket, owned by the requesting user, with the request's canned ACL. Re-creating a
/// bucket one owns is 200, as Amazon answers in us-east-1; another's is 409
/// `BucketAlreadyExists`. A location constraint other than us-east-1 is 400
/// `InvalidLocationConstraint`.
pub(crate) async fn create(
    gw: &Gateway,
    i: dto::CreateBucketInput,
    principal: &Principal,
) -> S3Result<S3Response<dto::CreateBucketOutput>> {
    let acl = crate::acl::canned(i.acl.as_ref().map(dto::BucketCannedACL::as_str))?;
    let bucket = i.bucket;
    let constraint = i
        .create_bucket_configuration
        .and_then(|c| c.location_constraint)
        .map(|c| c.as_str().to_string())
        .filter(|c| !c.is_empty());
    // Every bucket here is in the one region the gateway serves: creating one elsewhere would
    // be a promise not kept.
    if let Some(c) = constraint.as_deref()
        && c != REGION
    {
        return Err(s3_error!(
            InvalidLocationConstraint,
            "The specified location-constraint is not valid: this endpoint serves {REGION} only"
        ));
    }
    let options = BucketOptions {
        owner: principal.owner().to_string(),
        acl,
        ..BucketOptions::default()
    };
    match gw.client().create_bucket(&bucket, options).await {
        Ok(_) => {}
        Err(ClientError::Om {
            code: OmErrorCode::BucketAlreadyExists,
            ..
        }) => {
            let existing = gw.client().bucket(&bucket).await.map_err(to_s3)?;
            if !principal.owns(&existing.owner) {
                return Err(s3_error!(
                    BucketAlreadyExists,
                    "The requested bucket name is not available: another user owns it"
                ));
            }
        }
        Err(ClientError::Om {
            code: OmErrorCode::LimitExceeded,
            message,
            ..
        }) => return Err(s3_error!(TooManyBuckets, "{message}")),
        Err(e) => return Err(to_s3(e)),
    }
    Ok(S3Response::new(dto::CreateBucketOutput {
        location: Some(format!("/{bucket}")),
    }))
}

/// GetBucketLocation: us-east-1, which Amazon reports as an empty constraint.
pub(crate) async fn location(
    gw: &Gateway,
    i: dto::GetBucketLocationInput,
) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
    gw.client().bucket(&i.bucket).await.map_err(to_s3)?;
    Ok(S3Response::new(dto::GetBucketLocationOutput {
        location_constraint: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::valid_bucket_name;

    #[test]
    fn amazons_naming_rules() {
        for ok in ["abc", "my.bucket-1", "a1b", &"a".repeat(63), "1-2.3"] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in [
            "ab",
            &"a".repeat(64),
            "Abc",
            "a_b",
            "-abc",
            "abc-",
            ".abc",
            "a..b",
            "foo.-bar",
            "foo-.bar",
            "192.168.5.4",
            "xn--abc",
            "sthree-abc",
            "amzn-s3-demo-x",
            "abc-s3alias",
            "abc--ol-s3",
            "abc.mrap",
            "abc--x-s3",
            "abc--table-s3",
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }
}
