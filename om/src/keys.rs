//! Committed keys: lookup, listing, spare locations, deletion.
//!
//! A key is a row of `keys` ((bucket, key) -> `KeyInfo`). Its generation (S3's ETag for
//! conditional writes, the object_store e_tag) is the revision of the commit that made it:
//! unique and increasing across the store without a shared counter that every commit would
//! contend for. A commit that makes a new generation stores 0, which reads as the row's
//! `mod_revision`; a change that keeps the generation (metadata, a repair's locations) stores
//! the number it read.

use meta_store::codec::Raw;
use meta_store::{Transaction, transact};
use proto_crate::wire::om as pb;
use proto_crate::{BlockLocation, KeyInfo};

use crate::group_owner::GroupOwner;
use crate::manager::decode;
use crate::tables::KEYS;
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// The row id of `bucket/key`.
pub(crate) fn key_id(bucket: &str, key: &str) -> (String, String) {
    (bucket.to_string(), key.to_string())
}

/// A stored key row as a key, its generation filled in from `revision` (the row's
/// `mod_revision`; `None`, for a row the reading transaction wrote itself, leaves 0).
///
/// # Errors
/// [`OmError::CorruptRecord`].
pub(crate) fn key_of(value: &Raw, revision: Option<u64>) -> Result<KeyInfo> {
    let mut k: KeyInfo = decode::<pb::KeyInfo, _>(&value.0, "key")?;
    if k.generation == 0 {
        k.generation = revision.unwrap_or(0);
    }
    Ok(k)
}

/// Key `bucket/key` as `tx` sees it.
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`].
pub(crate) async fn key_in(tx: &Transaction, bucket: &str, key: &str) -> Result<Option<KeyInfo>> {
    match KEYS.get_row_in(tx, &key_id(bucket, key)).await? {
        Some((v, revision)) => Ok(Some(key_of(&v, revision)?)),
        None => Ok(None),
    }
}

/// Writes `k` in `tx` keeping its generation (a change of metadata or locations).
pub(crate) fn put_key_in(tx: &Transaction, k: &KeyInfo) {
    KEYS.put_in(
        tx,
        &key_id(&k.bucket, &k.name),
        &Raw(prost::Message::encode_to_vec(&pb::KeyInfo::from(k.clone()))),
    );
}

/// Writes `k` in `tx` as a new generation: the commit's revision.
pub(crate) fn put_new_key_in(tx: &Transaction, k: &KeyInfo) {
    put_key_in(
        tx,
        &KeyInfo {
            generation: 0,
            ..k.clone()
        },
    );
}

impl OzoneManager {
    /// The committed key `bucket/key`.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`], [`OmError::BucketNotFound`] when the bucket is missing, store errors.
    pub async fn lookup_key(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        match KEYS.get(&self.store, &key_id(bucket, key)).await? {
            Some(row) => {
                let mut k = key_of(&row.value, Some(row.mod_revision))?;
                self.current_addresses(&mut k.block_groups);
                Ok(k)
            }
            None => Err(self.missing_key(bucket, key).await),
        }
    }

    /// The error for a key that is not there: `BucketNotFound` when the
    /// bucket itself is missing (as S3's NoSuchBucket), else `KeyNotFound`.
    async fn missing_key(&self, bucket: &str, key: &str) -> OmError {
        match self.get_bucket(bucket).await {
            Err(e) => e,
            Ok(_) => OmError::KeyNotFound {
                bucket: bucket.to_string(),
                key: key.to_string(),
            },
        }
    }

    /// Keys of `bucket` starting with `prefix`, strictly after `start_after`,
    /// in name order, at most `max_keys` (0 = all), read in pages of at most
    /// [`crate::MAX_LIST_PAGE`] rows (all pages together are not one snapshot: a key
    /// committed or deleted meanwhile may or may not be listed).
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], store errors.
    pub async fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: usize,
    ) -> Result<Vec<KeyInfo>> {
        self.get_bucket(bucket).await?;
        let limit = if max_keys == 0 { usize::MAX } else { max_keys };
        let bucket_prefix = (bucket.to_string(),);
        let mut after = (start_after >= prefix).then(|| key_id(bucket, start_after));
        let mut out = Vec::new();
        loop {
            let page_size = (limit - out.len()).clamp(1, crate::MAX_LIST_PAGE);
            let rows = match &after {
                Some(a) => {
                    KEYS.scan(&self.store, &bucket_prefix, Some(a), page_size)
                        .await?
                }
                None => {
                    KEYS.scan_from(
                        &self.store,
                        &bucket_prefix,
                        &key_id(bucket, prefix),
                        page_size,
                    )
                    .await?
                }
            };
            for row in &rows.rows {
                if !row.key.1.starts_with(prefix) {
                    return Ok(out);
                }
                let mut k = key_of(&row.value, Some(row.mod_revision))?;
                self.current_addresses(&mut k.block_groups);
                out.push(k);
                if out.len() >= limit {
                    return Ok(out);
                }
            }
            match rows.rows.last() {
                Some(last) if rows.more => after = Some(last.key.clone()),
                _ => return Ok(out),
            }
        }
    }

    /// Records `location` as an extra (spare) location of group `group`
    /// (from 0) of the committed key `bucket/key`, provided that group is
    /// still the block `expected` (container id, local id) the copy was made
    /// from.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] for a group the
    /// key does not have, a group that is another block now (the key was
    /// rewritten during the copy), a datanode that already holds a block
    /// of the group or has a deletion of it pending (the deletion would take
    /// the new copy); store errors.
    pub async fn add_location(
        &self,
        bucket: &str,
        key: &str,
        group: usize,
        expected: (u64, u64),
        location: BlockLocation,
    ) -> Result<KeyInfo> {
        self.replace_locations(bucket, key, group, expected, &[], &[location])
            .await
    }

    /// Repair's commit: removes the `removed` locations of group `group` of `bucket/key` and
    /// adds the `added` ones (rebuilt or copied replicas), in one transaction that also logs
    /// the removed replicas for deletion — a datanode that returns holding one of them gets it
    /// deleted instead of serving it. The group must still be block `expected` (container id,
    /// local id) with every removed location recorded, and no added location's datanode may
    /// hold a block of the group or have a deletion of it pending.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] when the group is gone or was
    /// rewritten, a removed location is no longer recorded, or an added datanode is refused
    /// as above; store errors.
    pub async fn replace_locations(
        &self,
        bucket: &str,
        key: &str,
        group: usize,
        expected: (u64, u64),
        removed: &[BlockLocation],
        added: &[BlockLocation],
    ) -> Result<KeyInfo> {
        self.replace_group_locations(
            &GroupOwner::key(bucket, key),
            group,
            expected,
            removed,
            added,
        )
        .await?;
        self.lookup_key(bucket, key).await
    }

    /// [`replace_locations`](Self::replace_locations) for the group of any owner: a committed
    /// key or a part of a multipart upload in progress.
    ///
    /// # Errors
    /// As `replace_locations`, and [`OmError::NoSuchUpload`] for an upload or part that is gone.
    pub(crate) async fn replace_group_locations(
        &self,
        owner: &GroupOwner,
        group: usize,
        expected: (u64, u64),
        removed: &[BlockLocation],
        added: &[BlockLocation],
    ) -> Result<()> {
        transact(&self.store, |tx| {
            Box::pin(async move {
                let mut loaded = owner.load_for_update(&tx).await?;
                let g = loaded.group_mut(owner, group)?;
                if (g.container_id, g.local_id) != expected {
                    return Err(OmError::InvalidArgument(format!(
                        "group {group} of {owner} is now block {}:{}, not {}:{} (it was rewritten)",
                        g.container_id, g.local_id, expected.0, expected.1
                    )));
                }
                let same = |a: &BlockLocation, b: &BlockLocation| {
                    a.datanode.uuid == b.datanode.uuid && a.replica_index == b.replica_index
                };
                if let Some(r) = removed
                    .iter()
                    .find(|r| !g.pipeline.locations.iter().any(|l| same(l, r)))
                {
                    return Err(OmError::InvalidArgument(format!(
                        "group {group} of {owner} no longer has a location at {}",
                        r.datanode
                    )));
                }
                let (replaced, kept): (Vec<BlockLocation>, Vec<BlockLocation>) =
                    std::mem::take(&mut g.pipeline.locations)
                        .into_iter()
                        .partition(|l| removed.iter().any(|r| same(l, r)));
                if let Some(r) = added
                    .iter()
                    .find(|r| kept.iter().any(|l| l.datanode.uuid == r.datanode.uuid))
                {
                    return Err(OmError::InvalidArgument(format!(
                        "datanode {} already holds a block of group {group} of {owner}",
                        r.datanode
                    )));
                }
                let block = (g.container_id, g.local_id);
                g.pipeline.locations = kept;
                g.pipeline.locations.extend(added.iter().cloned());
                // A block deletion is by (container, local id), whatever the index: a
                // datanode with one pending for this group would lose the new block to it.
                for r in added {
                    if crate::deletion::is_logged_in(&tx, r.datanode.uuid.as_str(), expected)
                        .await?
                    {
                        return Err(OmError::InvalidArgument(format!(
                            "datanode {} still has a deletion of group {group} of {owner} pending",
                            r.datanode
                        )));
                    }
                }
                crate::deletion::log_locations_in(&tx, block.0, block.1, &replaced);
                if !added.is_empty() {
                    // The orphan sweep compares this counter before it logs anything.
                    crate::orphans::count_location_added_in(&tx).await?;
                }
                loaded.write_back(&tx).await
            })
        })
        .await?;
        self.deletions_changed();
        Ok(())
    }

    /// Replaces the metadata entries of `bucket/key` whose names start with `prefix` by
    /// `entries`, in one transaction; data, length and generation stay (S3 object tags
    /// change neither the ETag nor the version).
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] for an empty prefix or an entry
    /// outside it; store errors.
    pub async fn set_key_metadata(
        &self,
        bucket: &str,
        key: &str,
        prefix: &str,
        entries: std::collections::BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        if prefix.is_empty() {
            return Err(OmError::InvalidArgument("an empty metadata prefix".into()));
        }
        if let Some(k) = entries.keys().find(|k| !k.starts_with(prefix)) {
            return Err(OmError::InvalidArgument(format!(
                "metadata entry `{k}` is outside prefix `{prefix}`"
            )));
        }
        let changed = transact(&self.store, |tx| {
            let entries = entries.clone();
            Box::pin(async move {
                let Some(mut k) = key_in(&tx, bucket, key).await? else {
                    return Ok(None);
                };
                k.metadata.retain(|name, _| !name.starts_with(prefix));
                k.metadata.extend(entries);
                put_key_in(&tx, &k);
                Ok::<_, OmError>(Some(k))
            })
        })
        .await?
        .value;
        let Some(mut info) = changed else {
            return Err(self.missing_key(bucket, key).await);
        };
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// Deletes a committed key; its block groups are logged for deletion in
    /// the same transaction (the block deleting service frees them on the
    /// datanodes).
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`], [`OmError::BucketNotFound`] when the bucket is missing, store errors.
    pub async fn delete_key(&self, bucket: &str, key: &str) -> Result<()> {
        self.delete_key_if(bucket, key, None).await
    }

    /// Renames `bucket/from` to `bucket/to` in one transaction (Ozone's key rename): the
    /// record moves with its block groups (no data is copied) and gets a new generation and
    /// the rename's time as its modification time. A key at `to` is replaced and its groups
    /// logged for deletion, provided `condition` (if any) holds for `to`. Renaming a key to
    /// itself changes nothing and returns it, once the condition holds.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`] for a missing `from`; [`OmError::BucketNotFound`];
    /// [`OmError::InvalidArgument`] for a bad `to`; [`OmError::ConditionFailed`]; store
    /// errors.
    pub async fn rename_key(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        crate::manager::validate_name("key", to)?;
        let committed = transact(&self.store, |tx| {
            Box::pin(async move {
                let Some(mut info) = key_in(&tx, bucket, from).await? else {
                    return Ok(None);
                };
                crate::conditions::check(&tx, bucket, to, condition).await?;
                if from == to {
                    return Ok(Some((info, false)));
                }
                let replaced = crate::deletion::stage_key_groups(&tx, bucket, to).await?;
                info.name = to.to_string();
                // Ozone sets a renamed key's modification time to the rename's.
                info.created_unix_ms = crate::manager::now_ms();
                KEYS.delete_in(&tx, &key_id(bucket, from));
                put_new_key_in(&tx, &info);
                Ok::<_, OmError>(Some((info, replaced)))
            })
        })
        .await?;
        let Some((mut info, replaced)) = committed.value else {
            return Err(self.missing_key(bucket, from).await);
        };
        if from != to {
            info.generation = committed.revision.unwrap_or_default();
        }
        if replaced {
            self.deletions_changed();
        }
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// [`delete_key`](Self::delete_key), provided `condition` (if any) holds for the key in
    /// the deletion's transaction.
    ///
    /// # Errors
    /// As `delete_key`, and [`OmError::ConditionFailed`] (also for a generation condition on
    /// a key that does not exist).
    pub async fn delete_key_if(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<()> {
        let deleted = transact(&self.store, |tx| {
            Box::pin(async move {
                crate::conditions::check(&tx, bucket, key, condition).await?;
                if !crate::deletion::stage_key_groups(&tx, bucket, key).await? {
                    return Ok(false);
                }
                KEYS.delete_in(&tx, &key_id(bucket, key));
                Ok::<_, OmError>(true)
            })
        })
        .await?
        .value;
        if !deleted {
            return Err(self.missing_key(bucket, key).await);
        }
        self.deletions_changed();
        Ok(())
    }
}
