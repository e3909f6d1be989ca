//! Canned ACLs over S3's ACL API: `x-amz-acl` on CreateBucket, PutObject,
//! CopyObject and CreateMultipartUpload, and Get/PutBucketAcl and
//! Get/PutObjectAcl, whose `AccessControlPolicy` documents are read and
//! written in the canned forms only (Amazon S3 User Guide, "Canned ACL":
//! the owner's FULL_CONTROL, plus READ for the AllUsers or the
//! AuthenticatedUsers group). Any other grant is refused with 501
//! `NotImplemented`, never stored half-understood.
//!
//! A bucket's ACL lives in its om record; an object's in its metadata under
//! [`object_metadata::CANNED_ACL`] (absent: private).

use std::collections::BTreeMap;

use ec_client::{CannedAcl, object_metadata};
use s3s::dto;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::access::{Principal, object_acl};
use crate::error::to_s3;

/// The AllUsers group: everyone, anonymous requests included.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The AuthenticatedUsers group: every signed request.
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

fn not_implemented(what: &str) -> s3s::S3Error {
    s3_error!(
        NotImplemented,
        "{what}: only the canned ACLs private, public-read and authenticated-read are supported"
    )
}

/// The canned ACL an `x-amz-acl` value names (absent: private).
///
/// # Errors
/// 501 `NotImplemented` for the canned ACLs not modelled (public-read-write,
/// the bucket-owner forms, ...).
pub(crate) fn canned(value: Option<&str>) -> S3Result<CannedAcl> {
    match value {
        None => Ok(CannedAcl::Private),
        Some(v) => CannedAcl::parse(v).map_err(|_| not_implemented(&format!("x-amz-acl {v}"))),
    }
}

/// Records the `x-amz-acl` of a PutObject, CopyObject or
/// CreateMultipartUpload (`acl`, absent: private) in the new object's
/// `metadata`.
///
/// # Errors
/// As [`canned`].
pub(crate) fn apply_requested(
    metadata: &mut BTreeMap<String, String>,
    acl: Option<&dto::ObjectCannedACL>,
) -> S3Result<()> {
    set_object_acl(metadata, canned(acl.map(dto::ObjectCannedACL::as_str))?);
    Ok(())
}

/// Records `acl` in an object's `metadata` (replacing what a copied source
/// carried; private is recorded as no entry).
pub(crate) fn set_object_acl(metadata: &mut BTreeMap<String, String>, acl: CannedAcl) {
    metadata.retain(|k, _| !k.starts_with(object_metadata::ACL_PREFIX));
    if acl != CannedAcl::Private {
        metadata.insert(
            object_metadata::CANNED_ACL.to_string(),
            acl.name().to_string(),
        );
    }
}

/// The S3 owner of a bucket whose om record names `owner` (empty: the
/// gateway's administrator).
fn s3_owner(owner: &str) -> dto::Owner {
    if owner.is_empty() {
        crate::object_meta::owner()
    } else {
        dto::Owner {
            display_name: Some(owner.to_string()),
            id: Some(owner.to_string()),
        }
    }
}

fn group_read(uri: &str) -> dto::Grant {
    dto::Grant {
        grantee: Some(dto::Grantee {
            display_name: None,
            email_address: None,
            id: None,
            type_: dto::Type::from_static(dto::Type::GROUP),
            uri: Some(uri.to_string()),
        }),
        permission: Some(dto::Permission::from_static(dto::Permission::READ)),
    }
}

/// The owner and grants of `acl` on something `owner` owns.
pub(crate) fn policy(owner: &str, acl: CannedAcl) -> (dto::Owner, dto::Grants) {
    let o = s3_owner(owner);
    let mut grants = vec![dto::Grant {
        grantee: Some(dto::Grantee {
            display_name: o.display_name.clone(),
            email_address: None,
            id: o.id.clone(),
            type_: dto::Type::from_static(dto::Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(dto::Permission::from_static(dto::Permission::FULL_CONTROL)),
    }];
    match acl {
        CannedAcl::Private => {}
        CannedAcl::PublicRead => grants.push(group_read(ALL_USERS)),
        CannedAcl::AuthenticatedRead => grants.push(group_read(AUTHENTICATED_USERS)),
    }
    (o, grants)
}

/// The canned ACL a PutBucketAcl/PutObjectAcl asks for: the `x-amz-acl`
/// header, or an `AccessControlPolicy` in one of the canned forms.
///
/// # Errors
/// 501 `NotImplemented` for any other policy; 400 `MalformedACLError` when
/// the request carries neither or both.
fn requested(
    header: Option<&str>,
    body: Option<&dto::AccessControlPolicy>,
    owner: &str,
) -> S3Result<CannedAcl> {
    match (header, body) {
        (Some(h), None) => canned(Some(h)),
        (None, Some(p)) => {
            let owner_id = s3_owner(owner).id.unwrap_or_default();
            let mut extra = Vec::new();
            for g in p.grants.iter().flatten() {
                let grantee = g.grantee.as_ref();
                let permission = g.permission.as_ref().map(dto::Permission::as_str);
                let owners_full_control = grantee.is_some_and(|e| {
                    e.type_.as_str() == dto::Type::CANONICAL_USER
                        && e.id.as_deref() == Some(owner_id.as_str())
                }) && permission == Some(dto::Permission::FULL_CONTROL);
                if !owners_full_control {
                    extra.push((grantee.and_then(|e| e.uri.as_deref()), permission));
                }
            }
            match extra.as_slice() {
                [] => Ok(CannedAcl::Private),
                [(Some(ALL_USERS), Some(dto::Permission::READ))] => Ok(CannedAcl::PublicRead),
                [(Some(AUTHENTICATED_USERS), Some(dto::Permission::READ))] => {
                    Ok(CannedAcl::AuthenticatedRead)
                }
                _ => Err(not_implemented("this access control policy")),
            }
        }
        _ => Err(s3_error!(
            MalformedACLError,
            "The request must carry either an x-amz-acl header or an AccessControlPolicy body"
        )),
    }
}

/// GetBucketAcl.
pub(crate) async fn get_bucket(
    gw: &Gateway,
    i: dto::GetBucketAclInput,
) -> S3Result<S3Response<dto::GetBucketAclOutput>> {
    let b = gw.client().bucket(&i.bucket).await.map_err(to_s3)?;
    let (owner, grants) = policy(&b.owner, b.acl);
    Ok(S3Response::new(dto::GetBucketAclOutput {
        grants: Some(grants),
        owner: Some(owner),
    }))
}

/// PutBucketAcl (canned forms).
pub(crate) async fn put_bucket(
    gw: &Gateway,
    req: S3Request<dto::PutBucketAclInput>,
) -> S3Result<S3Response<dto::PutBucketAclOutput>> {
    crate::unsupported::refuse_unsupported(&req.headers)?;
    let i = req.input;
    let b = gw.client().bucket(&i.bucket).await.map_err(to_s3)?;
    let acl = requested(
        i.acl.as_ref().map(dto::BucketCannedACL::as_str),
        i.access_control_policy.as_ref(),
        &b.owner,
    )?;
    gw.client()
        .set_bucket_acl(&i.bucket, acl)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::PutBucketAclOutput {}))
}

/// GetObjectAcl.
pub(crate) async fn get_object(
    gw: &Gateway,
    i: dto::GetObjectAclInput,
) -> S3Result<S3Response<dto::GetObjectAclOutput>> {
    let b = gw.client().bucket(&i.bucket).await.map_err(to_s3)?;
    let info = gw
        .client()
        .key_info(&i.bucket, &i.key)
        .await
        .map_err(to_s3)?;
    let (owner, grants) = policy(&b.owner, object_acl(&info.metadata)?);
    Ok(S3Response::new(dto::GetObjectAclOutput {
        grants: Some(grants),
        owner: Some(owner),
        request_charged: None,
    }))
}

/// PutObjectAcl (canned forms): one metadata change in the om, the object's
/// data and generation untouched.
pub(crate) async fn put_object(
    gw: &Gateway,
    req: S3Request<dto::PutObjectAclInput>,
) -> S3Result<S3Response<dto::PutObjectAclOutput>> {
    crate::unsupported::refuse_unsupported(&req.headers)?;
    let i = req.input;
    let b = gw.client().bucket(&i.bucket).await.map_err(to_s3)?;
    let acl = requested(
        i.acl.as_ref().map(dto::ObjectCannedACL::as_str),
        i.access_control_policy.as_ref(),
        &b.owner,
    )?;
    let mut entries = BTreeMap::new();
    set_object_acl(&mut entries, acl);
    gw.client()
        .set_key_metadata(&i.bucket, &i.key, object_metadata::ACL_PREFIX, entries)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::PutObjectAclOutput::default()))
}

/// The principal a request was checked as (see [`Principal::of`]).
pub(crate) fn principal<T>(gw: &Gateway, req: &S3Request<T>) -> Principal {
    Principal::of(&req.extensions, gw.auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_policies_round_trip() {
        for owner in ["", "alice"] {
            for acl in CannedAcl::ALL {
                let (o, grants) = policy(owner, acl);
                let doc = dto::AccessControlPolicy {
                    grants: Some(grants),
                    owner: Some(o),
                };
                assert_eq!(
                    requested(None, Some(&doc), owner).expect("a canned form"),
                    acl,
                    "{owner} {acl}"
                );
            }
        }
    }

    #[test]
    fn other_policies_and_headers_are_refused() {
        let (o, mut grants) = policy("alice", CannedAcl::PublicRead);
        grants.push(group_read(AUTHENTICATED_USERS));
        let doc = dto::AccessControlPolicy {
            grants: Some(grants),
            owner: Some(o.clone()),
        };
        let e = requested(None, Some(&doc), "alice").unwrap_err();
        assert_eq!(e.code(), &s3s::S3ErrorCode::NotImplemented);
        // WRITE for everyone is public-read-write: not modelled.
        let mut write = group_read(ALL_USERS);
        write.permission = Some(dto::Permission::from_static(dto::Permission::WRITE));
        let doc = dto::AccessControlPolicy {
            grants: Some(vec![write]),
            owner: Some(o),
        };
        assert!(requested(None, Some(&doc), "alice").is_err());
        assert!(canned(Some("public-read-write")).is_err());
        assert!(canned(Some("bucket-owner-full-control")).is_err());
        assert_eq!(
            canned(Some("public-read")).expect("modelled"),
            CannedAcl::PublicRead
        );
        assert_eq!(
            requested(None, None, "alice").unwrap_err().code(),
            &s3s::S3ErrorCode::MalformedACLError
        );
    }

    #[test]
    fn object_acls_are_recorded_in_metadata() {
        let mut m = BTreeMap::from([
            (
                object_metadata::CANNED_ACL.to_string(),
                "public-read".to_string(),
            ),
            ("etag".to_string(), "x".to_string()),
        ]);
        set_object_acl(&mut m, CannedAcl::Private);
        assert_eq!(m.len(), 1);
        set_object_acl(&mut m, CannedAcl::AuthenticatedRead);
        assert_eq!(
            object_acl(&m).expect("a stored ACL"),
            CannedAcl::AuthenticatedRead
        );
    }
}
