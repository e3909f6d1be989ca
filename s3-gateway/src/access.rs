//! Who sent a request and what they may do: SigV4 secrets from the om's S3
//! users, and the decision for each operation from the bucket's owner and
//! the canned ACLs of the bucket and the object.
//!
//! The rules (Amazon S3 User Guide, "Access control list (ACL) overview",
//! with objects owned by their bucket's owner as under its
//! "BucketOwnerEnforced" setting, but with object ACLs honoured):
//! - The gateway's own key pair (`--access-key`/`--secret-key`) is the
//!   administrator: every request passes.
//! - Any signed request may create a bucket (owned by its user) and list
//!   its own buckets; anonymous ones may do neither.
//! - Listing a bucket (ListObjects, ListObjectVersions, HeadBucket,
//!   GetBucketLocation) needs its owner or a bucket ACL that grants READ to
//!   the requester.
//! - Reading an object (GetObject, HeadObject, and the source of a copy)
//!   needs the bucket's owner or an object ACL that grants READ.
//! - Everything else (writes, deletes, uploads, ACLs, tags) needs the
//!   bucket's owner. A bucket with no owner (made outside S3) is the
//!   administrator's alone.
//!
//! Refusals are 403 `AccessDenied`. A request on a bucket that does not
//! exist passes the check so that the operation answers `NoSuchBucket`; an
//! object that does not exist is `NoSuchKey` only to those who may list the
//! bucket, `AccessDenied` to others (as Amazon does, so that existence does
//! not leak).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ec_client::{CannedAcl, Client, ClientError, OmErrorCode, object_metadata};
use http::HeaderMap;
use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};

use crate::error::to_s3;

/// Who sent a request (kept in the request's extensions by the access
/// check, for the operations that record or filter by owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// An unsigned request.
    Anonymous,
    /// A user of the om (`cargo xtask admin user create`).
    User(String),
    /// The gateway's configured key pair, or any request when the gateway
    /// runs without authentication.
    Admin,
}

/// Kept in a request's extensions when a read was allowed by the object's
/// ACL rather than by ownership: whoever serves the object checks the ACL
/// again on the key record it actually reads, so that an overwrite between
/// the check and the read (a public object replaced by a private one)
/// cannot leak the new bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadByAcl {
    /// Whether the request was signed (what `authenticated-read` needs).
    pub(crate) authenticated: bool,
}

/// Checks again, on the key record being served (`metadata`), a read that a
/// request's [`ReadByAcl`] says was allowed by the object's ACL; nothing to
/// do for owners and administrators.
///
/// # Errors
/// 403 `AccessDenied` when the served record's ACL does not grant the read.
pub(crate) fn recheck_read(
    extensions: &http::Extensions,
    metadata: &BTreeMap<String, String>,
) -> S3Result<()> {
    match extensions.get::<ReadByAcl>() {
        Some(r) if !object_acl(metadata)?.grants_read(r.authenticated) => Err(denied()),
        _ => Ok(()),
    }
}

impl Principal {
    /// The owner recorded on what this principal creates (empty for the
    /// administrator: its buckets have no owner, as the CLI's).
    #[must_use]
    pub(crate) fn owner(&self) -> &str {
        match self {
            Self::User(u) => u,
            Self::Anonymous | Self::Admin => "",
        }
    }

    /// Whether this principal owns a bucket whose owner is `owner`
    /// (administrators own everything).
    #[must_use]
    pub(crate) fn owns(&self, owner: &str) -> bool {
        match self {
            Self::Admin => true,
            Self::User(u) => u == owner,
            Self::Anonymous => false,
        }
    }

    /// The principal of a request that passed the access check. A request
    /// without one is trusted only on a gateway without authentication
    /// (`auth` false); with authentication it counts as anonymous (fails
    /// closed).
    pub(crate) fn of(extensions: &http::Extensions, auth: bool) -> Self {
        match extensions.get::<Self>() {
            Some(p) => p.clone(),
            None if auth => Self::Anonymous,
            None => Self::Admin,
        }
    }
}

/// Most access key → user names remembered (the mapping never changes: an
/// access key is issued once, to one user). Cleared when full.
/// Above the om's bound on keys (5,000 users × 2), so that it is not
/// cleared over and over.
const MAX_REMEMBERED_KEYS: usize = 16_384;

/// SigV4 secrets and access decisions; cheap to clone.
#[derive(Clone)]
pub(crate) struct Authorizer {
    client: Client,
    /// The administrator's key pair.
    admin: Option<(String, String)>,
    /// Access key → user, filled by secret look-ups.
    users: Arc<Mutex<HashMap<String, String>>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

fn denied() -> s3s::S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

/// What an operation needs.
#[derive(Debug)]
enum Need<'a> {
    /// A signed request (CreateBucket, ListBuckets).
    Signed,
    /// Bucket READ: owner or bucket ACL.
    ListBucket(&'a str),
    /// Object READ: bucket owner or object ACL.
    ReadObject(&'a str, &'a str),
    /// The bucket's owner.
    Owner(&'a str),
    /// The destination bucket's owner and READ on the source object; `None`:
    /// a copy source that names no object (refused).
    Copy(&'a str, Option<(String, String)>),
    /// Only the administrator.
    Admin,
}

/// The `bucket`/`key` of an `x-amz-copy-source` header, parsed by s3s's
/// own parser (the one the operation uses, so the check and the copy see
/// the same object); `None` for a header that is missing, malformed or names
/// an access point.
fn copy_source(headers: &HeaderMap) -> Option<(String, String)> {
    let raw = headers.get("x-amz-copy-source")?.to_str().ok()?;
    match s3s::dto::CopySource::parse(raw).ok()? {
        s3s::dto::CopySource::Bucket { bucket, key, .. } => {
            Some((bucket.to_string(), key.to_string()))
        }
        _ => None,
    }
}

fn need<'a>(op: &str, path: &'a S3Path, headers: &HeaderMap) -> Need<'a> {
    match path {
        S3Path::Root => match op {
            "ListBuckets" => Need::Signed,
            _ => Need::Admin,
        },
        S3Path::Bucket { bucket } => match op {
            "CreateBucket" => Need::Signed,
            "ListObjects" | "ListObjectsV2" | "ListObjectVersions" | "HeadBucket"
            | "GetBucketLocation" => Need::ListBucket(bucket),
            _ => Need::Owner(bucket),
        },
        S3Path::Object { bucket, key } => match op {
            "GetObject" | "HeadObject" => Need::ReadObject(bucket, key),
            "CopyObject" | "UploadPartCopy" => Need::Copy(bucket, copy_source(headers)),
            _ => Need::Owner(bucket),
        },
    }
}

impl Authorizer {
    pub(crate) fn new(client: Client, admin: Option<(String, String)>) -> Self {
        Self {
            client,
            admin,
            users: Arc::default(),
        }
    }

    fn is_admin_key(&self, access_key: &str) -> bool {
        self.admin.as_ref().is_some_and(|(ak, _)| ak == access_key)
    }

    /// The user and secret of `access_key`, from the om.
    async fn lookup(&self, access_key: &str) -> S3Result<(String, String)> {
        match self.client.s3_secret(access_key).await {
            Ok((user, secret)) => {
                let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
                if users.len() >= MAX_REMEMBERED_KEYS {
                    users.clear();
                }
                users.insert(access_key.to_string(), user.clone());
                Ok((user, secret))
            }
            Err(ClientError::Om {
                code: OmErrorCode::AccessKeyNotFound,
                ..
            }) => Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
            Err(
                e @ ClientError::Om {
                    code: OmErrorCode::PermissionDenied,
                    ..
                },
            ) => {
                tracing::warn!(error = %e, "the om refused to tell the gateway an S3 secret");
                Err(s3_error!(
                    InternalError,
                    "The gateway may not read S3 secrets from the om (it needs a client \
                     certificate the cluster CA signed: --om-cert and --om-key)"
                ))
            }
            Err(e) => Err(to_s3(e)),
        }
    }

    /// Who signed with `credentials` (`None`: nobody).
    pub(crate) async fn principal(&self, credentials: Option<&Credentials>) -> S3Result<Principal> {
        let Some(c) = credentials else {
            return Ok(Principal::Anonymous);
        };
        if self.is_admin_key(&c.access_key) {
            return Ok(Principal::Admin);
        }
        let known = self
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&c.access_key)
            .cloned();
        match known {
            Some(u) => Ok(Principal::User(u)),
            None => Ok(Principal::User(self.lookup(&c.access_key).await?.0)),
        }
    }

    /// The owner and ACL of `bucket`, or `None` when it does not exist.
    async fn bucket(&self, bucket: &str) -> S3Result<Option<(String, CannedAcl)>> {
        match self.client.bucket(bucket).await {
            Ok(b) => Ok(Some((b.owner, b.acl))),
            Err(ClientError::BucketNotFound(_)) => Ok(None),
            Err(e) => Err(to_s3(e)),
        }
    }

    async fn may_list(&self, p: &Principal, bucket: &str) -> S3Result<bool> {
        Ok(match self.bucket(bucket).await? {
            None => true,
            Some((owner, acl)) => p.owns(&owner) || acl.grants_read(*p != Principal::Anonymous),
        })
    }

    /// Whether `p` may read `bucket/key`: `Some(None)` by ownership (or a
    /// missing bucket, which the operation answers), `Some(Some(_))` by the
    /// object's ACL (checked again on the record served), `None` not.
    async fn may_read(
        &self,
        p: &Principal,
        bucket: &str,
        key: &str,
    ) -> S3Result<Option<Option<ReadByAcl>>> {
        let Some((owner, _)) = self.bucket(bucket).await? else {
            return Ok(Some(None));
        };
        if p.owns(&owner) {
            return Ok(Some(None));
        }
        let by_acl = ReadByAcl {
            authenticated: *p != Principal::Anonymous,
        };
        match self.client.key_info(bucket, key).await {
            Ok(info) => Ok(object_acl(&info.metadata)?
                .grants_read(by_acl.authenticated)
                .then_some(Some(by_acl))),
            // Missing: NoSuchKey to those who may list the bucket.
            Err(ClientError::KeyNotFound { .. }) => {
                Ok(self.may_list(p, bucket).await?.then_some(Some(by_acl)))
            }
            Err(e) => Err(to_s3(e)),
        }
    }

    async fn owns_bucket(&self, p: &Principal, bucket: &str) -> S3Result<bool> {
        Ok(*p != Principal::Anonymous
            && self
                .bucket(bucket)
                .await?
                .is_none_or(|(owner, _)| p.owns(&owner)))
    }

    /// Decides operation `op` (s3s's name) on `path` for `p`. Returns the
    /// [`ReadByAcl`] to keep in the request when an object (or a copy's
    /// source) may be read only by its ACL.
    ///
    /// # Errors
    /// 403 `AccessDenied`; om failures.
    pub(crate) async fn authorize(
        &self,
        p: &Principal,
        op: &str,
        path: &S3Path,
        headers: &HeaderMap,
    ) -> S3Result<Option<ReadByAcl>> {
        if *p == Principal::Admin {
            return Ok(None);
        }
        let allowed = match need(op, path, headers) {
            Need::Admin | Need::Copy(_, None) => None,
            Need::Signed => (*p != Principal::Anonymous).then_some(None),
            Need::ListBucket(b) => self.may_list(p, b).await?.then_some(None),
            Need::ReadObject(b, k) => self.may_read(p, b, k).await?,
            Need::Owner(b) => self.owns_bucket(p, b).await?.then_some(None),
            Need::Copy(b, Some((sb, sk))) => {
                if self.owns_bucket(p, b).await? {
                    self.may_read(p, &sb, &sk).await?
                } else {
                    None
                }
            }
        };
        allowed.ok_or_else(denied)
    }
}

/// The canned ACL stored in an object's metadata (absent: private).
///
/// # Errors
/// 500 for a stored value that is not a canned ACL (a corrupt record).
pub(crate) fn object_acl(metadata: &BTreeMap<String, String>) -> S3Result<CannedAcl> {
    match metadata.get(object_metadata::CANNED_ACL) {
        None => Ok(CannedAcl::Private),
        Some(v) => CannedAcl::parse(v)
            .map_err(|e| s3_error!(InternalError, "the object's stored ACL is unreadable: {e}")),
    }
}

#[async_trait::async_trait]
impl S3Auth for Authorizer {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if let Some((ak, sk)) = &self.admin
            && ak == access_key
        {
            return Ok(SecretKey::from(sk.clone()));
        }
        // Asked on every signed request: a revoked key stops working at once.
        Ok(SecretKey::from(self.lookup(access_key).await?.1))
    }
}

#[async_trait::async_trait]
impl s3s::access::S3Access for Authorizer {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        let p = self.principal(cx.credentials()).await?;
        let op = cx.s3_op().name();
        if let Some(r) = self.authorize(&p, op, cx.s3_path(), cx.headers()).await? {
            cx.extensions_mut().insert(r);
        }
        cx.extensions_mut().insert(p);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_sources_are_decoded() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-amz-copy-source",
            "/bk1/a%20b/c?versionId=null"
                .parse()
                .expect("a valid header value"),
        );
        assert_eq!(copy_source(&h), Some(("bk1".into(), "a b/c".into())));
        // Decoded before the leading slash is stripped, as the copy itself does.
        h.insert(
            "x-amz-copy-source",
            "%2Fbk1/k".parse().expect("a valid header value"),
        );
        assert_eq!(copy_source(&h), Some(("bk1".into(), "k".into())));
        h.insert(
            "x-amz-copy-source",
            "bk1/se%3Fcret".parse().expect("a valid header value"),
        );
        assert_eq!(copy_source(&h), Some(("bk1".into(), "se?cret".into())));
        h.insert(
            "x-amz-copy-source",
            "bk1".parse().expect("a valid header value"),
        );
        assert_eq!(copy_source(&h), None);
    }

    #[test]
    fn operations_need_what_the_rules_say() {
        let h = HeaderMap::new();
        let root = S3Path::Root;
        let bucket = S3Path::Bucket { bucket: "b".into() };
        let object = S3Path::Object {
            bucket: "b".into(),
            key: "k".into(),
        };
        assert!(matches!(need("ListBuckets", &root, &h), Need::Signed));
        assert!(matches!(need("CreateBucket", &bucket, &h), Need::Signed));
        assert!(matches!(
            need("ListObjectsV2", &bucket, &h),
            Need::ListBucket("b")
        ));
        assert!(matches!(
            need("PutBucketAcl", &bucket, &h),
            Need::Owner("b")
        ));
        assert!(matches!(
            need("DeleteBucket", &bucket, &h),
            Need::Owner("b")
        ));
        assert!(matches!(
            need("GetObject", &object, &h),
            Need::ReadObject("b", "k")
        ));
        assert!(matches!(
            need("GetObjectAcl", &object, &h),
            Need::Owner("b")
        ));
        assert!(matches!(need("PutObject", &object, &h), Need::Owner("b")));
        assert!(matches!(
            need("UploadPartCopy", &object, &h),
            Need::Copy("b", None)
        ));
        let mut copy = HeaderMap::new();
        copy.insert(
            "x-amz-copy-source",
            "src/key".parse().expect("a valid header value"),
        );
        assert!(matches!(
            need("CopyObject", &object, &copy),
            Need::Copy("b", Some((ref sb, ref sk))) if sb == "src" && sk == "key"
        ));
    }

    #[test]
    fn principals_own_what_they_should() {
        assert!(Principal::Admin.owns(""));
        assert!(Principal::Admin.owns("alice"));
        assert!(Principal::User("alice".into()).owns("alice"));
        assert!(!Principal::User("alice".into()).owns("bob"));
        assert!(!Principal::User("alice".into()).owns(""));
        assert!(!Principal::Anonymous.owns(""));
    }
}
