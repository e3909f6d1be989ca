//! The om's namespace calls: datanodes, buckets and their ACLs, S3
//! secrets, and lookups, listings, renames, metadata changes and deletes of
//! committed keys.

use proto_crate::wire::om as pb;
use proto_crate::{BucketInfo, DatanodeDetails, KeyInfo, WriteCondition};
use std::collections::BTreeMap;

use super::*;

impl OmClient {
    pub(crate) async fn list_datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        let r = self
            .call(
                "ListDatanodes",
                Resend::Read,
                pb::ListDatanodesRequest {},
                |mut c, r| async move { c.list_datanodes(r).await },
            )
            .await?;
        Ok(r.datanodes
            .into_iter()
            .map(DatanodeDetails::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn create_bucket(
        &self,
        name: &str,
        options: &crate::BucketOptions,
    ) -> Result<BucketInfo> {
        let r = self
            .call(
                "CreateBucket",
                Resend::IfNotSent,
                pb::CreateBucketRequest {
                    name: name.to_string(),
                    default_replication: options
                        .replication
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    block_size: options.block_size.unwrap_or(0),
                    owner: options.owner.clone(),
                    acl: options.acl.name().to_string(),
                },
                |mut c, r| async move { c.create_bucket(r).await },
            )
            .await?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn set_bucket_acl(
        &self,
        name: &str,
        acl: proto_crate::CannedAcl,
    ) -> Result<BucketInfo> {
        let r = self
            .call(
                "SetBucketAcl",
                Resend::IfNotSent,
                pb::SetBucketAclRequest {
                    name: name.to_string(),
                    acl: acl.name().to_string(),
                },
                |mut c, r| async move { c.set_bucket_acl(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        let r = self
            .call(
                "GetS3Secret",
                Resend::Read,
                pb::GetS3SecretRequest {
                    access_key: access_key.to_string(),
                },
                |mut c, r| async move { c.get_s3_secret(r).await },
            )
            .await?;
        Ok((r.user, r.secret_key))
    }

    pub(crate) async fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let r = self
            .call(
                "GetBucket",
                Resend::Read,
                pb::GetBucketRequest {
                    name: name.to_string(),
                },
                |mut c, r| async move { c.get_bucket(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    /// ListBuckets: a page of buckets (`owner`'s only when given) starting with `prefix`,
    /// after `after`, at most `max`; and whether more follow.
    pub(crate) async fn list_buckets(
        &self,
        owner: Option<&str>,
        prefix: &str,
        after: &str,
        max: u32,
    ) -> Result<(Vec<BucketInfo>, bool)> {
        let r = self
            .call(
                "ListBuckets",
                Resend::Read,
                pb::ListBucketsRequest {
                    owner: owner.map(str::to_string),
                    prefix: prefix.to_string(),
                    start_after: after.to_string(),
                    max_buckets: max,
                },
                |mut c, r| async move { c.list_buckets(r).await },
            )
            .await?;
        let buckets = r
            .buckets
            .into_iter()
            .map(BucketInfo::try_from)
            .collect::<std::result::Result<_, _>>()?;
        Ok((buckets, r.truncated))
    }

    pub(crate) async fn delete_bucket(&self, name: &str) -> Result<()> {
        self.call(
            "DeleteBucket",
            Resend::IfNotSent,
            pb::DeleteBucketRequest {
                name: name.to_string(),
            },
            |mut c, r| async move { c.delete_bucket(r).await },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn lookup_key(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        let r = self
            .call(
                "LookupKey",
                Resend::Read,
                pb::LookupKeyRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                },
                |mut c, r| async move { c.lookup_key(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: u32,
    ) -> Result<Vec<KeyInfo>> {
        let r = self
            .call(
                "ListKeys",
                Resend::Read,
                pb::ListKeysRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                    start_after: start_after.to_string(),
                    max_keys,
                },
                |mut c, r| async move { c.list_keys(r).await },
            )
            .await?;
        Ok(r.keys
            .into_iter()
            .map(KeyInfo::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn rename_key(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "RenameKey",
                Resend::IfNotSent,
                pb::RenameKeyRequest {
                    bucket: bucket.to_string(),
                    from_key: from.to_string(),
                    to_key: to.to_string(),
                    condition: condition.map(Into::into),
                },
                |mut c, r| async move { c.rename_key(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, from))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn set_key_metadata(
        &self,
        bucket: &str,
        key: &str,
        prefix: &str,
        entries: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "SetKeyMetadata",
                Resend::IfNotSent,
                pb::SetKeyMetadataRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    prefix: prefix.to_string(),
                    entries: entries.into_iter().collect(),
                },
                |mut c, r| async move { c.set_key_metadata(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn delete_key(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<WriteCondition>,
    ) -> Result<()> {
        self.call(
            "DeleteKey",
            Resend::IfNotSent,
            pb::DeleteKeyRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                condition: condition.map(Into::into),
            },
            |mut c, r| async move { c.delete_key(r).await },
        )
        .await
        .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(())
    }
}
