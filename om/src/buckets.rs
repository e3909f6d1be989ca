//! Buckets: create, look up, list (in pages, by owner) and delete.
//!
//! A bucket is a row of `buckets` (name -> encoded `BucketInfo`); the index
//! `buckets_by_owner` `(owner, name)` lists an S3 user's buckets with one range read
//! whatever the number of buckets in the om (before, it read every bucket), and
//! `buckets_per_owner` (owner -> count) holds the count that
//! [`MAX_BUCKETS_PER_OWNER`](crate::MAX_BUCKETS_PER_OWNER) bounds, kept in the same
//! transaction as the index row, so CreateBucket reads one row for the bound (before, up to
//! 1,000 index rows: more than the metadata store lets a transaction read). Om files
//! written before either get them at open, once ([`index_owners`]).

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{BucketInfo, CannedAcl, ReplicationConfig};
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::manager::{BUCKETS, COUNTERS, KEYS, decode, now_ms, validate_name};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Buckets by (owner, name); buckets without an owner are not indexed.
pub(crate) const BUCKETS_BY_OWNER: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("buckets_by_owner");

/// Buckets each owner holds: owner -> count (owners without buckets have no row).
pub(crate) const BUCKETS_PER_OWNER: TableDefinition<&str, u64> =
    TableDefinition::new("buckets_per_owner");

/// `COUNTERS` row recording the owner layout: 1 when `BUCKETS_BY_OWNER` is complete, 2
/// when `BUCKETS_PER_OWNER` is too.
const LAYOUT: &str = "layout/bucket_owners";
const LAYOUT_COUNTED: u64 = 2;

/// Most buckets one listing call returns (the gateway pages S3's ListBuckets with it).
pub const MAX_BUCKET_PAGE: usize = 1000;

/// Creates the index table (inside `txn`, with the om's other tables at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(BUCKETS_BY_OWNER)?;
    txn.open_table(BUCKETS_PER_OWNER)?;
    Ok(())
}

/// Indexes and counts the owned buckets of a file written before `BUCKETS_BY_OWNER` or
/// `BUCKETS_PER_OWNER`, from the buckets themselves, once, in one transaction; returns how
/// many were indexed.
pub(crate) fn index_owners(db: &redb::Database) -> Result<usize> {
    let txn = db.begin_write()?;
    if txn.open_table(COUNTERS)?.get(LAYOUT)?.map(|v| v.value()) == Some(LAYOUT_COUNTED) {
        return Ok(0);
    }
    let mut owned = Vec::new();
    for entry in txn.open_table(BUCKETS)?.iter()? {
        let (_, v) = entry?;
        let b: BucketInfo = decode::<pb::BucketInfo, _>(v.value(), "bucket")?;
        if !b.owner.is_empty() {
            owned.push((b.owner, b.name));
        }
    }
    {
        let mut index = txn.open_table(BUCKETS_BY_OWNER)?;
        let mut counts = txn.open_table(BUCKETS_PER_OWNER)?;
        counts.retain(|_, _| false)?;
        let mut per_owner = std::collections::BTreeMap::<&str, u64>::new();
        for (owner, name) in &owned {
            index.insert((owner.as_str(), name.as_str()), ())?;
            *per_owner.entry(owner.as_str()).or_default() += 1;
        }
        for (owner, n) in per_owner {
            counts.insert(owner, n)?;
        }
    }
    txn.open_table(COUNTERS)?.insert(LAYOUT, LAYOUT_COUNTED)?;
    txn.commit()?;
    Ok(owned.len())
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
    pub fn create_bucket(
        &self,
        name: &str,
        replication: Option<ReplicationConfig>,
        block_size: Option<u64>,
    ) -> Result<BucketInfo> {
        self.create_bucket_as(name, replication, block_size, "", CannedAcl::Private)
    }

    /// [`create_bucket`](Self::create_bucket) for S3 user `owner` (empty:
    /// none) with canned ACL `acl`.
    ///
    /// # Errors
    /// As [`create_bucket`](Self::create_bucket); [`OmError::LimitExceeded`]
    /// when `owner` already owns [`MAX_BUCKETS_PER_OWNER`](crate::MAX_BUCKETS_PER_OWNER).
    pub fn create_bucket_as(
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
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(BUCKETS)?;
            if t.get(name)?.is_some() {
                return Err(OmError::BucketAlreadyExists(name.to_string()));
            }
            if !owner.is_empty() {
                let mut counts = txn.open_table(BUCKETS_PER_OWNER)?;
                let owned = counts.get(owner)?.map_or(0, |v| v.value());
                if owned >= crate::MAX_BUCKETS_PER_OWNER as u64 {
                    return Err(OmError::LimitExceeded(format!(
                        "user {owner} owns {owned} buckets, the most one user may"
                    )));
                }
                counts.insert(owner, owned + 1)?;
                txn.open_table(BUCKETS_BY_OWNER)?
                    .insert((owner, name), ())?;
            }
            t.insert(
                name,
                pb::BucketInfo::from(info.clone())
                    .encode_to_vec()
                    .as_slice(),
            )?;
        }
        txn.commit()?;
        Ok(info)
    }

    /// The bucket named `name`.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let read = self.db.begin_read()?;
        let t = read.open_table(BUCKETS)?;
        let v = t
            .get(name)?
            .ok_or_else(|| OmError::BucketNotFound(name.to_string()))?;
        decode::<pb::BucketInfo, _>(v.value(), "bucket")
    }

    /// Every bucket, by name (all pages of [`list_buckets_page`](Self::list_buckets_page)).
    ///
    /// # Errors
    /// Database errors.
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let mut filter = BucketFilter::default();
        let mut all = Vec::new();
        loop {
            let (page, more) = self.list_buckets_page(&filter, MAX_BUCKET_PAGE)?;
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
    /// [`MAX_BUCKET_PAGE`]), read in one transaction; and whether more follow. An owner's
    /// buckets are one range of the owner index: the cost is the page's.
    ///
    /// # Errors
    /// Database errors.
    pub fn list_buckets_page(
        &self,
        filter: &BucketFilter,
        limit: usize,
    ) -> Result<(Vec<BucketInfo>, bool)> {
        let limit = limit.min(MAX_BUCKET_PAGE);
        let read = self.db.begin_read()?;
        let buckets = read.open_table(BUCKETS)?;
        let start = if filter.after.as_str() >= filter.prefix.as_str() {
            filter.after.as_str()
        } else {
            filter.prefix.as_str()
        };
        let mut out = Vec::new();
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
        let mut more = false;
        match &filter.owner {
            None => {
                for entry in buckets.range(start..)? {
                    let (k, v) = entry?;
                    match admit(k.value(), out.len()) {
                        Admit::Skip => continue,
                        Admit::Take => {}
                        Admit::End => break,
                        Admit::Full => {
                            more = true;
                            break;
                        }
                    }
                    out.push(decode::<pb::BucketInfo, BucketInfo>(v.value(), "bucket")?);
                }
            }
            Some(owner) => {
                let index = read.open_table(BUCKETS_BY_OWNER)?;
                for entry in index.range((owner.as_str(), start)..)? {
                    let (k, _) = entry?;
                    let (o, name) = k.value();
                    if o != owner {
                        break;
                    }
                    match admit(name, out.len()) {
                        Admit::Skip => continue,
                        Admit::Take => {}
                        Admit::End => break,
                        Admit::Full => {
                            more = true;
                            break;
                        }
                    }
                    // A row whose bucket is gone (an older om deleted it after an
                    // upgrade: downgrades are not supported, but must not break listing).
                    let Some(v) = buckets.get(name)? else {
                        tracing::warn!(owner = %owner, bucket = name, "the owner index names a bucket that does not exist; skipped");
                        continue;
                    };
                    let b = decode::<pb::BucketInfo, BucketInfo>(v.value(), "bucket")?;
                    // Re-created by another owner since that older om left the row.
                    if b.owner != *owner {
                        continue;
                    }
                    out.push(b);
                }
            }
        }
        Ok((out, more))
    }

    /// Deletes an empty bucket: no keys and no multipart uploads in progress
    /// (S3 refuses a bucket with incomplete uploads the same way), checked
    /// in the deleting transaction.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], [`OmError::BucketNotEmpty`], database errors.
    pub fn delete_bucket(&self, name: &str) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let keys = txn.open_table(KEYS)?;
            if keys
                .range((name, "")..)?
                .next()
                .transpose()?
                .is_some_and(|(k, _)| k.value().0 == name)
            {
                return Err(OmError::BucketNotEmpty(name.to_string()));
            }
            // Multipart uploads in progress count as content, as on S3: a
            // bucket created again under this name must not inherit them.
            if crate::upload_rows::bucket_has_uploads(
                &txn.open_table(crate::upload_rows::UPLOADS_BY_BUCKET)?,
                name,
            )? {
                return Err(OmError::BucketNotEmpty(name.to_string()));
            }
            let mut t = txn.open_table(BUCKETS)?;
            let Some(v) = t.remove(name)? else {
                return Err(OmError::BucketNotFound(name.to_string()));
            };
            let b: BucketInfo = decode::<pb::BucketInfo, _>(v.value(), "bucket")?;
            drop(v);
            if !b.owner.is_empty() {
                txn.open_table(BUCKETS_BY_OWNER)?
                    .remove((b.owner.as_str(), name))?;
                let mut counts = txn.open_table(BUCKETS_PER_OWNER)?;
                let owned = counts.get(b.owner.as_str())?.map_or(0, |v| v.value());
                if owned <= 1 {
                    counts.remove(b.owner.as_str())?;
                } else {
                    counts.insert(b.owner.as_str(), owned - 1)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use redb::ReadableTableMetadata;

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
    fn all_pages(om: &OzoneManager, filter: &BucketFilter, limit: usize) -> Vec<String> {
        let mut filter = filter.clone();
        let mut out = Vec::new();
        loop {
            let (page, more) = om.list_buckets_page(&filter, limit).expect("page");
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
                all_pages(&om, &owned_by(Some("alice"), "", ""), limit),
                ["a-1", "a-2", "a-3", "x-1"]
            );
            assert_eq!(
                all_pages(&om, &owned_by(Some("alice"), "a-", "a-1"), limit),
                ["a-2", "a-3"]
            );
            assert_eq!(
                all_pages(&om, &owned_by(None, "", ""), limit),
                ["a-1", "a-2", "a-3", "b-1", "none", "x-1"]
            );
        }
        assert_eq!(all_pages(&om, &owned_by(Some("bob"), "", ""), 10), ["b-1"]);
        assert!(all_pages(&om, &owned_by(Some("carol"), "", ""), 10).is_empty());
        // A start-after before the prefix lists the whole prefix.
        let (page, more) = om
            .list_buckets_page(&owned_by(Some("alice"), "x", "a-9"), 10)
            .expect("page");
        assert_eq!((names(&page), more), (vec!["x-1"], false));
        // Deleting a bucket takes it out of its owner's listing; its name may go to another.
        om.delete_bucket("a-2").expect("delete");
        om.create_bucket_as("a-2", None, None, "bob", CannedAcl::Private)
            .expect("taken by bob");
        assert_eq!(
            all_pages(&om, &owned_by(Some("alice"), "", ""), 2),
            ["a-1", "a-3", "x-1"]
        );
        assert_eq!(
            all_pages(&om, &owned_by(Some("bob"), "", ""), 2),
            ["a-2", "b-1"]
        );
        assert_eq!(om.list_buckets().expect("all").len(), 6);
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
            om.create_bucket("two", Some(two), None),
            Err(OmError::InvalidArgument(_))
        ));
        assert!(matches!(
            om.open_key("a-1", "k", Some(two)),
            Err(OmError::InvalidArgument(_))
        ));
        assert!(matches!(
            om.initiate_multipart_upload("a-1", "k", Some(two), Default::default()),
            Err(OmError::InvalidArgument(_))
        ));
        let three = ReplicationConfig::Replicated { factor: 3 };
        om.create_bucket("three", Some(three), None).expect("THREE");
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
            .expect("bob's");
        for i in 0..crate::MAX_BUCKETS_PER_OWNER {
            om.create_bucket_as(&format!("b{i:04}"), None, None, "alice", CannedAcl::Private)
                .expect("within the bound");
        }
        assert!(matches!(
            om.create_bucket_as("one-more", None, None, "alice", CannedAcl::Private),
            Err(OmError::LimitExceeded(_))
        ));
        om.create_bucket_as("bobs-second", None, None, "bob", CannedAcl::Private)
            .expect("bob is under the bound");
        om.delete_bucket("b0000").expect("delete");
        om.create_bucket_as("one-more", None, None, "alice", CannedAcl::Private)
            .expect("a freed place");
    }

    /// A file written before the owner index (buckets, no index rows, no layout row) is
    /// indexed at open, once.
    #[tokio::test]
    async fn an_old_file_gets_the_owner_index_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(with_buckets(dir.path()).await);
        {
            let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("write");
            txn.delete_table(BUCKETS_BY_OWNER).expect("drop index");
            txn.open_table(COUNTERS)
                .expect("counters")
                .remove(LAYOUT)
                .expect("remove");
            txn.commit().expect("commit");
        }
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("reopen");
        assert_eq!(
            all_pages(&om, &owned_by(Some("alice"), "", ""), 3),
            ["a-1", "a-2", "a-3", "x-1"]
        );
        assert_eq!(index_owners(&om.db).expect("again"), 0, "done once");
        let read = om.db.begin_read().expect("read");
        assert_eq!(
            read.open_table(BUCKETS_BY_OWNER)
                .expect("index")
                .len()
                .expect("len"),
            5
        );
        assert_eq!(counts(&om), owner_counts(&om));
    }

    /// Each owner's count row, as stored.
    fn counts(om: &OzoneManager) -> Vec<(String, u64)> {
        let read = om.db.begin_read().expect("read");
        read.open_table(BUCKETS_PER_OWNER)
            .expect("counts")
            .iter()
            .expect("iter")
            .map(|e| {
                let (k, v) = e.expect("row");
                (k.value().to_string(), v.value())
            })
            .collect()
    }

    /// Each owner's buckets, counted from the buckets themselves.
    fn owner_counts(om: &OzoneManager) -> Vec<(String, u64)> {
        let mut per = std::collections::BTreeMap::<String, u64>::new();
        for b in om.list_buckets().expect("list") {
            if !b.owner.is_empty() {
                *per.entry(b.owner).or_default() += 1;
            }
        }
        per.into_iter().collect()
    }

    /// A file with the owner index but no counts (layout 1) gets its counts at open, from
    /// the buckets; creating and deleting keep them equal to the buckets' owners.
    #[tokio::test]
    async fn owner_counts_follow_creates_and_deletes_and_are_made_for_old_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(with_buckets(dir.path()).await);
        {
            let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("write");
            txn.delete_table(BUCKETS_PER_OWNER).expect("drop counts");
            txn.open_table(COUNTERS)
                .expect("counters")
                .insert(LAYOUT, 1)
                .expect("layout 1");
            txn.commit().expect("commit");
        }
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("reopen");
        let before = counts(&om);
        assert_eq!(before, owner_counts(&om));
        assert!(!before.is_empty());
        for (owner, _) in &before {
            om.create_bucket_as(
                &format!("{owner}-new"),
                None,
                None,
                owner,
                CannedAcl::Private,
            )
            .expect("create");
        }
        assert_eq!(counts(&om), owner_counts(&om));
        for b in om.list_buckets().expect("list") {
            om.delete_bucket(&b.name).expect("delete");
        }
        assert!(counts(&om).is_empty(), "no rows for owners without buckets");
    }
}
