//! Committed keys: lookup, listing, spare locations, deletion.

use proto_crate::wire::om as pb;
use proto_crate::{BlockLocation, KeyInfo};
use redb::{ReadableDatabase, ReadableTable};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::group_owner::GroupOwner;
use crate::manager::{KEYS, decode};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Key renames under way, for the ReplicationManager's scan (see
/// `OzoneManager::renames`). A rename moves a key's groups to another place in key
/// order, so a paged scan (one read transaction a page) that overlapped one may have
/// missed the moved groups.
///
/// Two counts rather than one seqlock word: with a single odd-while-running count,
/// two overlapping renames leave it even and a scan started between them would look
/// clean. A scan is clean when no rename was running as it began
/// ([`RenameTracker::start_scan`] gives `Some`) and `changes` has not moved by its end.
#[derive(Debug, Default)]
pub(crate) struct RenameTracker {
    /// Renames between `begin` and the guard's drop.
    running: AtomicU64,
    /// Bumped when each rename begins and again when it ends.
    changes: AtomicU64,
}

impl RenameTracker {
    /// Marks a rename as running until the returned guard drops, whichever way the
    /// rename ends.
    pub(crate) fn begin(&self) -> RenameInProgress<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.changes.fetch_add(1, Ordering::SeqCst);
        RenameInProgress(self)
    }

    /// The change count a scan starting now compares against at its end, or `None`
    /// when a rename is running (the scan cannot be complete).
    pub(crate) fn start_scan(&self) -> Option<u64> {
        // `changes` first: a rename that bumps it after this load is seen at the end;
        // one that bumped it before is still counted in `running`, which it raised first.
        let changes = self.changes.load(Ordering::SeqCst);
        (self.running.load(Ordering::SeqCst) == 0).then_some(changes)
    }

    /// Whether no rename began or ended since [`RenameTracker::start_scan`] gave `since`.
    pub(crate) fn unchanged_since(&self, since: u64) -> bool {
        self.changes.load(Ordering::SeqCst) == since
    }
}

/// A running rename; see [`RenameTracker::begin`].
pub(crate) struct RenameInProgress<'a>(&'a RenameTracker);

impl Drop for RenameInProgress<'_> {
    fn drop(&mut self) {
        self.0.changes.fetch_add(1, Ordering::SeqCst);
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl OzoneManager {
    /// The committed key `bucket/key`.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`], [`OmError::BucketNotFound`] when the bucket is missing, database errors.
    pub fn lookup_key(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        let read = self.db.begin_read()?;
        let t = read.open_table(KEYS)?;
        match t.get((bucket, key))? {
            Some(v) => {
                let mut k: KeyInfo = decode::<pb::KeyInfo, _>(v.value(), "key")?;
                self.current_addresses(&mut k.block_groups);
                Ok(k)
            }
            None => Err(self.missing_key(bucket, key)),
        }
    }

    /// The error for a key that is not there: `BucketNotFound` when the
    /// bucket itself is missing (as S3's NoSuchBucket), else `KeyNotFound`.
    fn missing_key(&self, bucket: &str, key: &str) -> OmError {
        match self.get_bucket(bucket) {
            Err(e) => e,
            Ok(_) => OmError::KeyNotFound {
                bucket: bucket.to_string(),
                key: key.to_string(),
            },
        }
    }

    /// Keys of `bucket` starting with `prefix`, strictly after `start_after`,
    /// in name order, at most `max_keys` (0 = all).
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: usize,
    ) -> Result<Vec<KeyInfo>> {
        self.get_bucket(bucket)?;
        let read = self.db.begin_read()?;
        let t = read.open_table(KEYS)?;
        let from = if start_after > prefix {
            start_after
        } else {
            prefix
        };
        let limit = if max_keys == 0 { usize::MAX } else { max_keys };
        let mut out = Vec::new();
        for entry in t.range((bucket, from)..)? {
            let (k, v) = entry?;
            let (b, name) = k.value();
            if b != bucket || !name.starts_with(prefix) {
                break;
            }
            if name == start_after {
                continue;
            }
            let mut k: KeyInfo = decode::<pb::KeyInfo, _>(v.value(), "key")?;
            self.current_addresses(&mut k.block_groups);
            out.push(k);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
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
    /// the new copy); database errors.
    pub fn add_location(
        &self,
        bucket: &str,
        key: &str,
        group: usize,
        expected: (u64, u64),
        location: BlockLocation,
    ) -> Result<KeyInfo> {
        self.replace_locations(bucket, key, group, expected, &[], &[location])
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
    /// as above; database errors.
    pub fn replace_locations(
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
        )?;
        self.lookup_key(bucket, key)
    }

    /// [`replace_locations`](Self::replace_locations) for the group of any owner: a committed
    /// key or a part of a multipart upload in progress.
    ///
    /// # Errors
    /// As `replace_locations`, and [`OmError::NoSuchUpload`] for an upload or part that is gone.
    pub(crate) fn replace_group_locations(
        &self,
        owner: &GroupOwner,
        group: usize,
        expected: (u64, u64),
        removed: &[BlockLocation],
        added: &[BlockLocation],
    ) -> Result<()> {
        let txn = self.db.begin_write()?;
        owner.update_group(&txn, group, |g| {
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
            // A block deletion is by (container, local id), whatever the index: a datanode
            // with one pending for this group would lose the new block to it.
            for r in added {
                if crate::deletion::is_logged(&txn, r.datanode.uuid.as_str(), expected)? {
                    return Err(OmError::InvalidArgument(format!(
                        "datanode {} still has a deletion of group {group} of {owner} pending",
                        r.datanode
                    )));
                }
            }
            crate::deletion::log_locations(&txn, g.container_id, g.local_id, &replaced)?;
            if !added.is_empty() {
                // The orphan sweep compares this counter before it logs anything.
                let mut counters = txn.open_table(crate::manager::COUNTERS)?;
                let n = counters
                    .get(crate::orphans::LOCATIONS_ADDED)?
                    .map_or(0, |v| v.value());
                counters.insert(crate::orphans::LOCATIONS_ADDED, n + 1)?;
            }
            g.pipeline.locations = kept;
            g.pipeline.locations.extend(added.iter().cloned());
            Ok(())
        })?;
        txn.commit()?;
        self.deletions_changed();
        Ok(())
    }

    /// Replaces the metadata entries of `bucket/key` whose names start with `prefix` by
    /// `entries`, in one transaction; data, length and generation stay (S3 object tags
    /// change neither the ETag nor the version).
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`]; [`OmError::InvalidArgument`] for an empty prefix or an entry
    /// outside it; database errors.
    pub fn set_key_metadata(
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
        let txn = self.db.begin_write()?;
        let info = {
            let mut t = txn.open_table(KEYS)?;
            let found = match t.get((bucket, key))? {
                Some(v) => Some(decode::<pb::KeyInfo, KeyInfo>(v.value(), "key")?),
                None => None,
            };
            let Some(mut k) = found else {
                drop(t);
                drop(txn);
                return Err(self.missing_key(bucket, key));
            };
            k.metadata.retain(|name, _| !name.starts_with(prefix));
            k.metadata.extend(entries);
            t.insert(
                (bucket, key),
                prost::Message::encode_to_vec(&pb::KeyInfo::from(k.clone())).as_slice(),
            )?;
            k
        };
        txn.commit()?;
        let mut info = info;
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// Deletes a committed key; its block groups are logged for deletion in
    /// the same transaction (the block deleting service frees them on the
    /// datanodes).
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`], [`OmError::BucketNotFound`] when the bucket is missing, database errors.
    pub fn delete_key(&self, bucket: &str, key: &str) -> Result<()> {
        self.delete_key_if(bucket, key, None)
    }

    /// Renames `bucket/from` to `bucket/to` in one transaction (Ozone's key rename): the
    /// record moves with its block groups (no data is copied) and gets a new generation and
    /// the rename's time as its modification time. A key at `to` is replaced and its groups
    /// logged for deletion, provided `condition` (if any) holds for `to`. Renaming a key to
    /// itself changes nothing and returns it, once the condition holds.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`] for a missing `from`; [`OmError::BucketNotFound`];
    /// [`OmError::InvalidArgument`] for a bad `to`; [`OmError::ConditionFailed`]; database
    /// errors.
    pub fn rename_key(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        crate::manager::validate_name("key", to)?;
        let _renaming = self.renames.begin();
        let txn = self.db.begin_write()?;
        let found = match txn.open_table(KEYS)?.get((bucket, from))? {
            Some(v) => Some(decode::<pb::KeyInfo, KeyInfo>(v.value(), "key")?),
            None => None,
        };
        let Some(mut info) = found else {
            drop(txn);
            return Err(self.missing_key(bucket, from));
        };
        crate::conditions::check(&txn, bucket, to, condition)?;
        if from == to {
            self.current_addresses(&mut info.block_groups);
            return Ok(info);
        }
        let replaced = crate::deletion::stage_key_groups(&txn, bucket, to)?;
        info.name = to.to_string();
        info.generation = crate::conditions::next_generation(&txn)?;
        // Ozone sets a renamed key's modification time to the rename's.
        info.created_unix_ms = crate::manager::now_ms();
        {
            let mut t = txn.open_table(KEYS)?;
            t.remove((bucket, from))?;
            t.insert(
                (bucket, to),
                prost::Message::encode_to_vec(&pb::KeyInfo::from(info.clone())).as_slice(),
            )?;
        }
        txn.commit()?;
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
    pub fn delete_key_if(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<()> {
        let txn = self.db.begin_write()?;
        crate::conditions::check(&txn, bucket, key, condition)?;
        if !crate::deletion::stage_key_groups(&txn, bucket, key)? {
            return Err(self.missing_key(bucket, key));
        }
        txn.open_table(KEYS)?.remove((bucket, key))?;
        txn.commit()?;
        self.deletions_changed();
        Ok(())
    }
}
