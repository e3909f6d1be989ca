//! Buckets: create, look up, list (in pages, by owner) and delete.
//!
//! A bucket is a row of `buckets` (name -> encoded `BucketInfo`); the index
//! `buckets_by_owner` `(owner, name)` lists an S3 user's buckets with one range read
//! whatever the number of buckets in the om (before, it read every bucket), and
//! `buckets_per_owner` (owner -> count) holds the count that
//! [`MAX_BUCKETS_PER_OWNER`](crate::MAX_BUCKETS_PER_OWNER) bounds, kept in the same
//! transaction as the index row, so CreateBucket reads one row for the bound (before, up to
//! 1,000 index rows: more than the metadata store lets a transaction read). Om files
//! written before either get them at open, once (`old_layout.rs`).

use meta_store::codec::Raw;
use meta_store::{Transaction, transact};
use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{BucketInfo, CannedAcl, ReplicationConfig};

use crate::manager::{decode, now_ms, validate_name};
use crate::tables::{BUCKETS, BUCKETS_BY_OWNER, BUCKETS_PER_OWNER, KEYS};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Most buckets one listing call returns (the gateway pages S3's ListBuckets with it).
pub const MAX_BUCKET_PAGE: usize = 1000;

fn decode_bucket(v: &Raw) -> Result<BucketInfo> {
    decode::<pb::BucketInfo, _>(&v.0, "bucket")
}

/// Bucket `name` as `tx` sees it.
pub(crate) async fn bucket_in(tx: &Transaction, name: &str) -> Result<Option<BucketInfo>> {
    BUCKETS
        .get_in(tx, &name.to_string())
        .await?
        .map(|v| decode_bucket(&v))
        .transpose()
}

/// What a listing does with the next name in order.
enum Admit {
    /// At or before the start-after name.
    Skip,
    /// Listed.
    Take,
    /// Past the prefix: the listing is complete.
    End,
    /// Within the prefix, but the page is full: more follow.
    Full,
}

/// Which buckets a listing returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketFilter {
    /// Only this S3 user's buckets (`None`: every bucket, owned or not).
    pub owner: Option<String>,
    /// Only names starting with this.
    pub prefix: String,
    /// Only names after this one (S3's continuation token; empty: from the start).
    pub after: String,
}

impl OzoneManager {
    /// Creates a bucket; `None` takes the om's default replication / block size.
    ///
    /// # Errors
    /// [`OmError::BucketAlreadyExists`], [`OmError::InvalidArgument`] for a bad
    /// name or a zero block size, database errors.
    pub async fn create_bucket(
        &self,
        name: &str,
        replication: Option<ReplicationConfig>,
        block_size: Option<u64>,
    ) -> Result<BucketInfo> {
        self.create_bucket_as(name, replication, block_size, "", CannedAcl::Private)
            .await
    }

    /// [`create_bucket`](Self::create_bucket) for S3 user `owner` (empty:
    /// none) with canned ACL `acl`.
    ///
    /// # Errors
    /// As [`create_bucket`](Self::create_bucket); [`OmError::LimitExceeded`]
    /// when `owner` already owns [`MAX_BUCKETS_PER_OWNER`](crate::MAX_BUCKETS_PER_OWNER).
    pub async fn create_bucket_as(
        &self,
        name: &str,
        replication: Option<ReplicationConfig>,
        block_size: Option<u64>,
        owner: &str,
        acl: CannedAcl,
    ) -> Result<BucketInfo> {
        validate_name("bucket", name)?;
        let block_size = block_size.unwrap_or(self.config.default_block_size);
        if block_size == 0 {
            return Err(OmError::InvalidArgument(
                "block size must be positive".into(),
            ));
        }
        let default_replication = replication.unwrap_or(self.config.default_replication);
        crate::manager::check_replication(&default_replication)?;
        if let ReplicationConfig::Ec(ec) = default_replication
            && !block_size.is_multiple_of(ec.cell_size())
        {
            return Err(OmError::InvalidArgument(format!(
                "block size {block_size} is not a multiple of the {ec} cell size {}",
                ec.cell_size()
            )));
        }
        let info = BucketInfo {
            name: name.to_string(),
            default_replication,
            block_size,
            created_unix_ms: now_ms(),
            owner: owner.to_string(),
            acl,
        };
        transact(&self.store, |tx| {
            let info = &info;
            Box::pin(async move {
                if bucket_in(&tx, name).await?.is_some() {
                    return Err(OmError::BucketAlreadyExists(name.to_string()));
                }
                if !owner.is_empty() {
                    let owned = BUCKETS_PER_OWNER
                        .get_in(&tx, &owner.to_string())
                        .await?
                        .unwrap_or(0);
                    if owned >= crate::MAX_BUCKETS_PER_OWNER as u64 {
                        return Err(OmError::LimitExceeded(format!(
                            "user {owner} owns {owned} buckets, the most one user may"
                        )));
                    }
                    BUCKETS_PER_OWNER.put_in(&tx, &owner.to_string(), &(owned + 1));
                    BUCKETS_BY_OWNER.put_in(&tx, &(owner.to_string(), name.to_string()), &());
                }
                BUCKETS.put_in(
                    &tx,
                    &name.to_string(),
                    &Raw(pb::BucketInfo::from(info.clone()).encode_to_vec()),
                );
                Ok(())
            })
        })
        .await?;
        Ok(info)
    }

    /// The bucket named `name`.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], store errors.
    pub async fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let row = BUCKETS
            .get(&self.store, &name.to_string())
            .await?
            .ok_or_else(|| OmError::BucketNotFound(name.to_string()))?;
        decode_bucket(&row.value)
    }

    /// Every bucket, by name (all pages of [`list_buckets_page`](Self::list_buckets_page)).
    ///
    /// # Errors
    /// Database errors.
    pub async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let mut filter = BucketFilter::default();
        let mut all = Vec::new();
        loop {
            let (page, more) = self.list_buckets_page(&filter, MAX_BUCKET_PAGE).await?;
            let Some(last) = page.last() else {
                return Ok(all);
            };
            filter.after.clone_from(&last.name);
            all.extend(page);
            if !more {
                return Ok(all);
            }
        }
    }

    /// The buckets `filter` selects, by name, at most `limit` (and at most
    /// [`MAX_BUCKET_PAGE`]), read at one snapshot; and whether more follow. An owner's
    /// buckets are one range of the owner index: the cost is the page's.
    ///
    /// # Errors
    /// Database errors.
    pub async fn list_buckets_page(
        &self,
        filter: &BucketFilter,
        limit: usize,
    ) -> Result<(Vec<BucketInfo>, bool)> {
        let limit = limit.min(MAX_BUCKET_PAGE);
        let snapshot = self.store.snapshot().await?;
        let start = if filter.after.as_str() >= filter.prefix.as_str() {
            filter.after.clone()
        } else {
            filter.prefix.clone()
        };
        // Names come in order: each is skipped, taken, or ends the listing (past the
        // prefix, or one more than a full page: more follow).
        let admit = |name: &str, taken: usize| {
            if !filter.after.is_empty() && name <= filter.after.as_str() {
                Admit::Skip
            } else if !name.starts_with(&filter.prefix) {
                Admit::End
            } else if taken == limit {
                Admit::Full
            } else {
                Admit::Take
            }
        };
        let mut out = Vec::new();
        match &filter.owner {
            None => {
                let mut from = start;
                loop {
                    let rows = BUCKETS
                        .scan_from_at(&snapshot, &(), &from, limit + 1)
                        .await?;
                    for row in &rows.rows {
                        match admit(&row.key, out.len()) {
                            Admit::Skip => continue,
                            Admit::Take => out.push(decode_bucket(&row.value)?),
                            Admit::End => return Ok((out, false)),
                            Admit::Full => return Ok((out, true)),
                        }
                    }
                    match rows.rows.last() {
                        Some(last) if rows.more => from = format!("{}\0", last.key),
                        _ => return Ok((out, false)),
                    }
                }
            }
            Some(owner) => {
                let mut from = (owner.clone(), start);
                loop {
                    let rows = BUCKETS_BY_OWNER
                        .scan_from_at(&snapshot, &(owner.clone(),), &from, limit + 1)
                        .await?;
                    for row in &rows.rows {
                        let name = &row.key.1;
                        match admit(name, out.len()) {
                            Admit::Skip => continue,
                            Admit::Take => {}
                            Admit::End => return Ok((out, false)),
                            Admit::Full => return Ok((out, true)),
                        }
                        // A row whose bucket is gone (an older om deleted it after an
                        // upgrade: downgrades are not supported, but must not break listing).
                        let Some(b) = BUCKETS.get_at(&snapshot, name).await? else {
                            tracing::warn!(owner = %owner, bucket = %name, "the owner index names a bucket that does not exist; skipped");
                            continue;
                        };
                        let b = decode_bucket(&b.value)?;
                        // Re-created by another owner since that older om left the row.
                        if b.owner != *owner {
                            continue;
                        }
                        out.push(b);
                    }
                    match rows.rows.last() {
                        Some(last) if rows.more => {
                            from = (owner.clone(), format!("{}\0", last.key.1));
                        }
                        _ => return Ok((out, false)),
                    }
                }
            }
        }
    }

    /// Replaces bucket `name`'s canned ACL (S3 PutBucketAcl), in one transaction.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], store errors.
    pub async fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<BucketInfo> {
        Ok(transact(&self.store, |tx| {
            Box::pin(async move {
                let mut info = bucket_in(&tx, name)
                    .await?
                    .ok_or_else(|| OmError::BucketNotFound(name.to_string()))?;
                info.acl = acl;
                BUCKETS.put_in(
                    &tx,
                    &name.to_string(),
                    &Raw(pb::BucketInfo::from(info.clone()).encode_to_vec()),
                );
                Ok::<_, OmError>(info)
            })
        })
        .await?
        .value)
    }

    /// Deletes an empty bucket: no keys and no multipart uploads in progress
    /// (S3 refuses a bucket with incomplete uploads the same way), checked
    /// in the deleting transaction.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], [`OmError::BucketNotEmpty`], database errors.
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        transact(&self.store, |tx| {
            Box::pin(async move {
                let Some(b) = bucket_in(&tx, name).await? else {
                    return Err(OmError::BucketNotFound(name.to_string()));
                };
                let keys = KEYS.scan_in(&tx, &(name.to_string(),), None, 1).await?;
                if !keys.rows.is_empty() {
                    return Err(OmError::BucketNotEmpty(name.to_string()));
                }
                // Multipart uploads in progress count as content, as on S3: a bucket created
                // again under this name must not inherit them.
                if crate::upload_rows::bucket_has_uploads_in(&tx, name).await? {
                    return Err(OmError::BucketNotEmpty(name.to_string()));
                }
                BUCKETS.delete_in(&tx, &name.to_string());
                if !b.owner.is_empty() {
                    BUCKETS_BY_OWNER.delete_in(&tx, &(b.owner.clone(), name.to_string()));
                    let owned = BUCKETS_PER_OWNER.get_in(&tx, &b.owner).await?.unwrap_or(0);
                    if owned <= 1 {
                        BUCKETS_PER_OWNER.delete_in(&tx, &b.owner);
                    } else {
                        BUCKETS_PER_OWNER.put_in(&tx, &b.owner, &(owned - 1));
                    }
                }
                Ok(())
            })
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {

    use super::*;
    use crate::OmConfig;

    fn names(page: &[BucketInfo]) -> Vec<&str> {
        page.iter().map(|b| b.name.as_str()).collect()
    }

    fn owned_by(owner: Option<&str>, prefix: &str, after: &str) -> BucketFilter {
        BucketFilter {
            owner: owner.map(str::to_string),
            prefix: prefix.to_string(),
            after: after.to_string(),
        }
    }

    /// Every page of `filter` at `limit` a page, joined.
    async fn all_pages(om: &OzoneManager, filter: &BucketFilter, limit: usize) -> Vec<String> {
        let mut filter = filter.clone();
        let mut out = Vec::new();
        loop {
            let (page, more) = om.list_buckets_page(&filter, limit).await.expect("page");
            assert!(page.len() <= limit);
            out.extend(page.iter().map(|b| b.name.clone()));
            match out.last() {
                Some(last) if more => filter.after.clone_from(last),
                _ => return out,
            }
        }
    }

    async fn with_buckets(dir: &std::path::Path) -> OzoneManager {
        let om = OzoneManager::open(OmConfig::new(dir)).await.expect("open");
        for (name, owner) in [
            ("a-1", "alice"),
            ("b-1", "bob"),
            ("a-2", "alice"),
            ("none", ""),
            ("a-3", "alice"),
            ("x-1", "alice"),
        ] {
            om.create_bucket_as(name, None, None, owner, CannedAcl::Private)
                .await
                .expect("create");
        }
        om
    }

    /// An owner's buckets are listed from the owner index in name order, in pages of any
    /// size, with prefix and start-after; other owners' and unowned buckets never appear;
    /// without an owner every bucket is listed.
    #[tokio::test]
    async fn buckets_list_by_owner_in_pages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = with_buckets(dir.path()).await;
        for limit in 1..=4 {
            assert_eq!(
                all_pages(&om, &owned_by(Some("alice"), "", ""), limit).await,
                ["a-1", "a-2", "a-3", "x-1"]
            );
            assert_eq!(
                all_pages(&om, &owned_by(Some("alice"), "a-", "a-1"), limit).await,
                ["a-2", "a-3"]
            );
            assert_eq!(
                all_pages(&om, &owned_by(None, "", ""), limit).await,
                ["a-1", "a-2", "a-3", "b-1", "none", "x-1"]
            );
        }
        assert_eq!(
            all_pages(&om, &owned_by(Some("bob"), "", ""), 10).await,
            ["b-1"]
        );
        assert!(
            all_pages(&om, &owned_by(Some("carol"), "", ""), 10)
                .await
                .is_empty()
        );
        // A start-after before the prefix lists the whole prefix.
        let (page, more) = om
            .list_buckets_page(&owned_by(Some("alice"), "x", "a-9"), 10)
            .await
            .expect("page");
        assert_eq!((names(&page), more), (vec!["x-1"], false));
        // Deleting a bucket takes it out of its owner's listing; its name may go to another.
        om.delete_bucket("a-2").await.expect("delete");
        om.create_bucket_as("a-2", None, None, "bob", CannedAcl::Private)
            .await
            .expect("taken by bob");
        assert_eq!(
            all_pages(&om, &owned_by(Some("alice"), "", ""), 2).await,
            ["a-1", "a-3", "x-1"]
        );
        assert_eq!(
            all_pages(&om, &owned_by(Some("bob"), "", ""), 2).await,
            ["a-2", "b-1"]
        );
        assert_eq!(om.list_buckets().await.expect("all").len(), 6);
    }

    /// Replication the om does not place is refused where it enters: a bucket, a key or an
    /// upload with a replicated factor other than ONE or THREE (`REPLICATED-2` parses, so
    /// that any stored value reads back, but is not offered).
    #[tokio::test]
    async fn only_one_or_three_replicas_are_offered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = with_buckets(dir.path()).await;
        let two = ReplicationConfig::Replicated { factor: 2 };
        assert!(matches!(
            om.create_bucket("two", Some(two), None).await,
            Err(OmError::InvalidArgument(_))
        ));
        assert!(matches!(
            om.open_key("a-1", "k", Some(two)).await,
            Err(OmError::InvalidArgument(_))
        ));
        assert!(matches!(
            om.initiate_multipart_upload("a-1", "k", Some(two), Default::default())
                .await,
            Err(OmError::InvalidArgument(_))
        ));
        let three = ReplicationConfig::Replicated { factor: 3 };
        om.create_bucket("three", Some(three), None)
            .await
            .expect("THREE");
    }

    /// The per-owner bound is counted per owner: other owners' buckets do not count, a
    /// deleted bucket frees its place.
    #[tokio::test]
    async fn the_owner_bound_counts_the_owners_buckets_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("open");
        om.create_bucket_as("other", None, None, "bob", CannedAcl::Private)
            .await
            .expect("bob's");
        for i in 0..crate::MAX_BUCKETS_PER_OWNER {
            om.create_bucket_as(&format!("b{i:04}"), None, None, "alice", CannedAcl::Private)
                .await
                .expect("within the bound");
        }
        assert!(matches!(
            om.create_bucket_as("one-more", None, None, "alice", CannedAcl::Private)
                .await,
            Err(OmError::LimitExceeded(_))
        ));
        om.create_bucket_as("bobs-second", None, None, "bob", CannedAcl::Private)
            .await
            .expect("bob is under the bound");
        om.delete_bucket("b0000").await.expect("delete");
        om.create_bucket_as("one-more", None, None, "alice", CannedAcl::Private)
            .await
            .expect("a freed place");
    }

    /// Each owner's count row, as stored.
    pub(crate) async fn counts(om: &OzoneManager) -> Vec<(String, u64)> {
        BUCKETS_PER_OWNER
            .scan(&om.store, &(), None, 1000)
            .await
            .expect("counts")
            .rows
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect()
    }

    /// Each owner's buckets, counted from the buckets themselves.
    pub(crate) async fn owner_counts(om: &OzoneManager) -> Vec<(String, u64)> {
        let mut per = std::collections::BTreeMap::<String, u64>::new();
        for b in om.list_buckets().await.expect("list") {
            if !b.owner.is_empty() {
                *per.entry(b.owner).or_default() += 1;
            }
        }
        per.into_iter().collect()
    }

    /// Creating and deleting buckets keep the owners' count rows equal to the buckets'
    /// owners (a count row goes with the owner's last bucket).
    #[tokio::test]
    async fn owner_counts_follow_creates_and_deletes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = with_buckets(dir.path()).await;
        let before = counts(&om).await;
        assert_eq!(before, owner_counts(&om).await);
        assert!(!before.is_empty());
        for (owner, _) in &before {
            om.create_bucket_as(
                &format!("{owner}-new"),
                None,
                None,
                owner,
                CannedAcl::Private,
            )
            .await
            .expect("create");
        }
        assert_eq!(counts(&om).await, owner_counts(&om).await);
        for b in om.list_buckets().await.expect("list") {
            om.delete_bucket(&b.name).await.expect("delete");
        }
        assert!(
            counts(&om).await.is_empty(),
            "no rows for owners without buckets"
        );
    }
}
