//! Multipart uploads (the S3 gateway's CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload, AbortMultipartUpload, ListParts,
//! ListMultipartUploads), modelled on Ozone's `OmMultipartKeyInfo`.
//!
//! A part is written exactly like a key — a session, block groups allocated
//! on demand, the writer's acknowledged lengths — but commits into its upload
//! (replacing an earlier part of the same number). Completion checks the
//! listed parts (ascending, known, ETags matching, every part but the last at
//! least `min_part_size` bytes) and commits one key whose block groups are
//! the parts' groups in order: no data is copied. Uploads are persisted.

use std::collections::BTreeMap;

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{
    KeyInfo, MULTIPART_PART_SIZES_KEY, MultipartUpload, PartInfo, ReplicationConfig,
};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::deletion::{end_session, stage_groups, stage_key_groups};
use crate::manager::{KEYS, OpenKey, SessionTarget, decode, now_ms};
use crate::sessions::ANONYMOUS_CLIENT;
use crate::upload_rows::{
    MAX_LIST_PAGE, PARTS, UPLOADS, UPLOADS_BY_BUCKET, UploadsMarker, header, insert_upload,
    parts_after, put_part, remove_upload, uploads_page,
};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Largest part number S3 allows.
pub const MAX_PART_NUMBER: u32 = 10_000;

fn trim_etag(e: &str) -> &str {
    e.trim().trim_matches('"')
}

impl OzoneManager {
    /// The header of upload `upload_id` (its `parts` empty).
    fn load_upload(&self, upload_id: &str) -> Result<MultipartUpload> {
        let read = self.db.begin_read()?;
        header(&read.open_table(UPLOADS)?, upload_id)?
            .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))
    }

    /// Stores a new upload, checking in the same transaction that its
    /// bucket still exists (a concurrent DeleteBucket may have won).
    fn store_upload(&self, u: &MultipartUpload) -> Result<()> {
        let txn = self.db.begin_write()?;
        if txn
            .open_table(crate::manager::BUCKETS)?
            .get(u.bucket.as_str())?
            .is_none()
        {
            return Err(OmError::BucketNotFound(u.bucket.clone()));
        }
        insert_upload(&txn, u)?;
        txn.commit()?;
        self.publish_uploads();
        Ok(())
    }

    /// A receiver of the number of multipart uploads in progress (initiated, neither completed
    /// nor aborted), updated after every change: to wait for an upload's abort without polling.
    #[must_use]
    pub fn watch_multipart_uploads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.uploads_open.subscribe()
    }

    /// Publishes the number of uploads in progress (read from the database).
    pub(crate) fn publish_uploads(&self) {
        let count = self
            .db
            .begin_read()
            .map_err(OmError::from)
            .and_then(|r| Ok(r.open_table(UPLOADS)?.len()?));
        match count {
            Ok(n) => {
                self.uploads_open.send_replace(n);
            }
            Err(e) => tracing::warn!(error = %e, "counting multipart uploads"),
        }
    }

    /// Starts a multipart upload of `bucket/key`; returns its id.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn initiate_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String> {
        if let Some(r) = &replication {
            crate::manager::check_replication(r)?;
        }
        let b = self.get_bucket(bucket)?;
        let initiated_unix_ms = now_ms();
        let upload = MultipartUpload {
            upload_id: crate::upload_rows::new_upload_id(initiated_unix_ms),
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication: replication.unwrap_or(b.default_replication),
            initiated_unix_ms,
            parts: Vec::new(),
            metadata,
        };
        self.store_upload(&upload)?;
        Ok(upload.upload_id)
    }

    /// Opens a session that writes part `part_number` (1..=10000) of an
    /// upload, as an anonymous client.
    ///
    /// # Errors
    /// As [`open_part_as`](Self::open_part_as).
    pub fn open_part(&self, upload_id: &str, part_number: u32) -> Result<OpenKey> {
        self.open_part_as(ANONYMOUS_CLIENT, upload_id, part_number)
    }

    /// Opens a session that writes part `part_number` (1..=10000) of an
    /// upload on behalf of client `client`.
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], [`OmError::InvalidArgument`] for a part
    /// number out of range, [`OmError::TooManyOpenSessions`].
    pub fn open_part_as(&self, client: &str, upload_id: &str, part_number: u32) -> Result<OpenKey> {
        if !(1..=MAX_PART_NUMBER).contains(&part_number) {
            return Err(OmError::InvalidArgument(format!(
                "part number {part_number} is outside 1..={MAX_PART_NUMBER}"
            )));
        }
        let u = self.load_upload(upload_id)?;
        self.open_session(
            client,
            &u.bucket,
            &u.key,
            Some(u.replication),
            SessionTarget::Part {
                upload_id: upload_id.to_string(),
                part_number,
            },
        )
    }

    /// Commits a part session: records the part (replacing an earlier one of
    /// the same number) with its groups, length and ETag. The replaced part's
    /// groups and the session's uncommitted groups are logged for deletion
    /// in the same transaction.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::NoSuchUpload`] (aborted
    /// meanwhile), [`OmError::InvalidArgument`] as for `commit_key`.
    pub fn commit_part(
        &self,
        session_id: u64,
        groups: &[proto_crate::BlockGroup],
        length: u64,
        etag: &str,
    ) -> Result<PartInfo> {
        self.commit_part_with(session_id, groups, length, etag, BTreeMap::new())
    }

    /// [`commit_part`](Self::commit_part) with part `metadata` (kept with the part and listed
    /// by `list_parts`; the S3 gateway stores the part's checksum there).
    ///
    /// # Errors
    /// As `commit_part`.
    pub fn commit_part_with(
        &self,
        session_id: u64,
        groups: &[proto_crate::BlockGroup],
        length: u64,
        etag: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<PartInfo> {
        let placeholder = SessionTarget::Part {
            upload_id: String::new(),
            part_number: 0,
        };
        let (s, committed, leftovers) =
            self.take_session(session_id, groups, length, &placeholder)?;
        let SessionTarget::Part {
            upload_id,
            part_number,
        } = s.target.clone()
        else {
            self.reclaim_session(session_id, &s.allocated)?;
            return Err(OmError::InvalidArgument(format!(
                "session {session_id} is not a part"
            )));
        };
        let part = PartInfo {
            part_number,
            etag: trim_etag(etag).to_string(),
            size: length,
            block_groups: committed,
            modified_unix_ms: now_ms(),
            metadata,
        };
        // One part row: parts of one upload commit concurrently (aws-cli uploads them in
        // parallel), each reading and writing only its own row and the upload's header.
        let txn = self.db.begin_write()?;
        let outcome = (|| {
            if header(&txn.open_table(UPLOADS)?, &upload_id)?.is_none() {
                return Err(OmError::NoSuchUpload(upload_id.clone()));
            }
            crate::upload_rows::parts_writable(&txn, &upload_id, now_ms())?;
            let replaced = put_part(&txn, &upload_id, &part)?;
            stage_groups(&txn, replaced.iter().flat_map(|p| &p.block_groups))?;
            end_session(&txn, session_id, &leftovers, &part.block_groups)
        })();
        // The upload may be gone (aborted meanwhile): then nothing
        // references the session's groups.
        self.commit_or_reclaim(txn, outcome, session_id, &s.allocated)?;
        let mut part = part;
        self.current_addresses(&mut part.block_groups);
        Ok(part)
    }

    /// The upload `upload_id` with its parts numbered above `after`, ascending, at most
    /// `limit` of them (and at most [`MAX_LIST_PAGE`]; 0: the header alone), read in one
    /// transaction; and whether more parts follow (S3's ListParts with part-number-marker
    /// and max-parts).
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], database errors.
    pub fn list_parts(
        &self,
        upload_id: &str,
        after: u32,
        limit: usize,
    ) -> Result<(MultipartUpload, bool)> {
        let read = self.db.begin_read()?;
        let mut u = header(&read.open_table(UPLOADS)?, upload_id)?
            .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
        let (parts, more) = parts_after(
            &read.open_table(PARTS)?,
            upload_id,
            after,
            limit.min(MAX_LIST_PAGE),
        )?;
        u.parts = parts;
        self.current_addresses(u.parts.iter_mut().flat_map(|p| &mut p.block_groups));
        Ok((u, more))
    }

    /// Uploads in progress in `bucket` for keys starting with `prefix`, after `marker`, by
    /// key, then initiation time, then id (S3's ListMultipartUploads order), at most `limit`
    /// (and at most [`MAX_LIST_PAGE`]); parts are left out. Also whether more follow. One
    /// read transaction and one index range: the cost is the page's, whatever the number of
    /// uploads in the om.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        marker: &UploadsMarker,
        limit: usize,
    ) -> Result<(Vec<MultipartUpload>, bool)> {
        let read = self.db.begin_read()?;
        if read
            .open_table(crate::manager::BUCKETS)?
            .get(bucket)?
            .is_none()
        {
            return Err(OmError::BucketNotFound(bucket.to_string()));
        }
        uploads_page(
            &read.open_table(UPLOADS)?,
            &read.open_table(UPLOADS_BY_BUCKET)?,
            bucket,
            prefix,
            marker,
            limit.min(MAX_LIST_PAGE),
        )
    }

    /// Abandons an upload and its parts: the upload goes, and its parts' rows and groups
    /// are recorded for the block deleting service to remove (one row, in the same
    /// transaction, however many parts).
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], database errors.
    pub fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        let txn = self.db.begin_write()?;
        remove_upload(&txn, upload_id, &[])?
            .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
        txn.commit()?;
        self.deletions_changed();
        self.publish_uploads();
        Ok(())
    }

    /// Completes an upload from `parts` ((part number, ETag), ascending):
    /// commits the key with the parts' block groups in order and removes
    /// the upload. `metadata` is merged over the upload's, and the parts'
    /// sizes are recorded under [`MULTIPART_PART_SIZES_KEY`].
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`]; [`OmError::InvalidPartOrder`] when part
    /// numbers do not ascend; [`OmError::InvalidPart`] for an unknown part
    /// or ETag mismatch (or an empty list); [`OmError::EntityTooSmall`] for
    /// a non-last part under `min_part_size` bytes.
    pub fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        self.complete_multipart_upload_if(upload_id, parts, min_part_size, metadata, None)
    }

    /// [`complete_multipart_upload`](Self::complete_multipart_upload), provided `condition`
    /// (if any) holds for the key as it is when the completion's transaction runs; when it
    /// does not, nothing changes (the upload stays, as Amazon keeps it for a retry).
    ///
    /// Three steps (`upload_rows.rs`, `COMPLETING`): the upload is marked, so part commits
    /// and repairs of its parts wait; the listed parts are read and checked outside a write
    /// transaction; the key is committed and the upload removed in one transaction, only if
    /// the mark is still this call's. A later completion of the same upload takes the mark
    /// over (this one then fails retryably, and its retry gets the key that completion made
    /// if the parts are the same); a failed check releases it.
    ///
    /// # Errors
    /// As `complete_multipart_upload`; [`OmError::ConditionFailed`]; [`OmError::Busy`] when
    /// another call took the upload over meanwhile.
    pub fn complete_multipart_upload_if(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        let mark = match self.mark_completion(upload_id, parts)? {
            Marked::Done(info) => return Ok(info),
            Marked::Mark(mark) => mark,
        };
        let outcome = self
            .read_listed_parts(upload_id, parts, min_part_size)
            .and_then(|listed| {
                self.finish_completion(upload_id, mark, parts, listed, metadata, condition)
            });
        if outcome.is_err() {
            self.release_mark(upload_id, mark);
        }
        outcome
    }

    /// Step 1 of a completion: marks `upload_id` with a new mark (replacing any other's),
    /// after checking the list's shape; or, for an upload already completed with these
    /// parts, answers with the key it made.
    pub(crate) fn mark_completion(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<Marked> {
        let txn = self.db.begin_write()?;
        if header(&txn.open_table(UPLOADS)?, upload_id)?.is_none() {
            // A retry of a completion that succeeded gets the same answer.
            let mut info = crate::completed::answer(&txn, upload_id, parts)?
                .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
            self.current_addresses(&mut info.block_groups);
            return Ok(Marked::Done(info));
        }
        if parts.is_empty() {
            return Err(OmError::InvalidPart("the part list is empty".into()));
        }
        for w in parts.windows(2) {
            if w[1].0 <= w[0].0 {
                return Err(OmError::InvalidPartOrder(format!(
                    "part {} listed after part {}",
                    w[1].0, w[0].0
                )));
            }
        }
        let mark = loop {
            let m: u64 = rand::random();
            if m != 0 {
                break m;
            }
        };
        txn.open_table(crate::upload_rows::COMPLETING)?
            .insert(upload_id, (mark, now_ms()))?;
        txn.commit()?;
        Ok(Marked::Mark(mark))
    }

    /// Step 2: the listed parts, read in one read transaction and checked (known, ETags
    /// matching, every part but the last at least `min_part_size`).
    pub(crate) fn read_listed_parts(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
    ) -> Result<Listed> {
        let read = self.db.begin_read()?;
        let stored = read.open_table(PARTS)?;
        let mut listed = Listed::default();
        let mut sizes = Vec::with_capacity(parts.len());
        for (i, (number, etag)) in parts.iter().enumerate() {
            let Some(p) = crate::upload_rows::part(&stored, upload_id, *number)? else {
                return Err(OmError::InvalidPart(format!(
                    "part {number} was not uploaded"
                )));
            };
            if trim_etag(etag) != p.etag {
                return Err(OmError::InvalidPart(format!(
                    "part {number} has ETag {}, not {}",
                    p.etag,
                    trim_etag(etag)
                )));
            }
            if i + 1 < parts.len() && p.size < min_part_size {
                return Err(OmError::EntityTooSmall(format!(
                    "part {number} holds {} bytes, under the {min_part_size}-byte minimum",
                    p.size
                )));
            }
            listed.length = listed
                .length
                .checked_add(p.size)
                .ok_or_else(|| OmError::InvalidArgument("part sizes overflow".into()))?;
            sizes.push(p.size.to_string());
            listed.groups.extend(p.block_groups);
        }
        listed.sizes = sizes.join(",");
        Ok(listed)
    }

    /// Step 3: commits the key from `listed` and removes the upload, in one transaction,
    /// provided `mark` still holds the upload.
    pub(crate) fn finish_completion(
        &self,
        upload_id: &str,
        mark: u64,
        parts: &[(u32, String)],
        listed: Listed,
        metadata: BTreeMap<String, String>,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        let txn = self.db.begin_write()?;
        let held = txn
            .open_table(crate::upload_rows::COMPLETING)?
            .get(upload_id)?
            .map(|v| v.value().0);
        let Some(u) = header(&txn.open_table(UPLOADS)?, upload_id)? else {
            // Completed (or aborted) by another call meanwhile.
            let mut info = crate::completed::answer(&txn, upload_id, parts)?
                .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
            self.current_addresses(&mut info.block_groups);
            return Ok(info);
        };
        if held != Some(mark) {
            return Err(OmError::Busy(format!(
                "upload {upload_id} was taken over by another completion or a part commit; \
                 retry"
            )));
        }
        let mut meta = u.metadata.clone();
        meta.extend(metadata);
        meta.insert(MULTIPART_PART_SIZES_KEY.to_string(), listed.sizes);
        let block_size = {
            let t = txn.open_table(crate::manager::BUCKETS)?;
            let v = t
                .get(u.bucket.as_str())?
                .ok_or_else(|| OmError::BucketNotFound(u.bucket.clone()))?;
            decode::<pb::BucketInfo, proto_crate::BucketInfo>(v.value(), "bucket")?.block_size
        };
        crate::conditions::check(&txn, &u.bucket, &u.key, condition)?;
        let info = KeyInfo {
            bucket: u.bucket.clone(),
            name: u.key.clone(),
            length: listed.length,
            replication: u.replication,
            block_groups: listed.groups,
            block_size,
            created_unix_ms: now_ms(),
            metadata: meta,
            generation: crate::conditions::next_generation(&txn)?,
        };
        // The key appears and the upload disappears together; the replaced key's groups
        // are staged for deletion, and the part rows (with the groups of parts left out of
        // the completion) are left to the block deleting service.
        {
            let listed: Vec<u32> = parts.iter().map(|(n, _)| *n).collect();
            remove_upload(&txn, upload_id, &listed)?
                .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
            crate::completed::record(&txn, upload_id, &info, parts)?;
            stage_key_groups(&txn, &info.bucket, &info.name)?;
            txn.open_table(KEYS)?.insert(
                (info.bucket.as_str(), info.name.as_str()),
                pb::KeyInfo::from(info.clone()).encode_to_vec().as_slice(),
            )?;
        }
        txn.commit()?;
        self.deletions_changed();
        self.publish_uploads();
        let mut info = info;
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// Removes `mark` from `upload_id` if it is still there (a completion that failed);
    /// failing to is logged (the mark lapses after [`COMPLETION_HOLD_MS`](crate::COMPLETION_HOLD_MS)).
    fn release_mark(&self, upload_id: &str, mark: u64) {
        let released = (|| {
            let txn = self.db.begin_write()?;
            {
                let mut t = txn.open_table(crate::upload_rows::COMPLETING)?;
                let ours = t.get(upload_id)?.is_some_and(|v| v.value().0 == mark);
                if ours {
                    t.remove(upload_id)?;
                }
            }
            txn.commit()?;
            Ok::<(), OmError>(())
        })();
        if let Err(e) = released {
            tracing::warn!(upload = upload_id, error = %e, "releasing a failed completion's mark; it lapses on its own");
        }
    }
}

/// What step 1 of a completion found.
#[derive(Debug)]
pub(crate) enum Marked {
    /// The upload was completed already with these parts: the key.
    Done(KeyInfo),
    /// The upload is marked with this.
    Mark(u64),
}

/// The listed parts as step 2 read them.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// Their groups, in order.
    groups: Vec<proto_crate::BlockGroup>,
    /// Total length, bytes.
    length: u64,
    /// Their sizes, comma-separated (`MULTIPART_PART_SIZES_KEY`).
    sizes: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OmConfig;
    use proto_crate::BlockGroup;

    async fn om(dir: &std::path::Path) -> OzoneManager {
        crate::test_oms::with_five_datanodes(dir).await
    }

    /// Step 1 of a completion of `id` with `parts`, which must mark the upload.
    fn marked(om: &OzoneManager, id: &str, parts: &[(u32, String)]) -> u64 {
        match om.mark_completion(id, parts).expect("mark") {
            Marked::Mark(mark) => mark,
            Marked::Done(_) => panic!("not completed yet"),
        }
    }

    /// Writes a part of `len` bytes in one group.
    fn part(om: &OzoneManager, upload: &str, n: u32, len: u64, etag: &str) -> BlockGroup {
        crate::test_oms::commit_part(om, upload, n, len, etag)
    }

    /// The steps of a completion, interleaved with what may run between them: a part commit
    /// or a repair of a part waits (Busy) while the mark holds; a later completion takes the
    /// upload over and the earlier one's retry gets its key; a failed check releases the
    /// mark; an abort in between makes the completion NoSuchUpload; a mark older than the
    /// hold gives way to a part commit, and its completion then fails retryably.
    #[tokio::test]
    async fn completion_steps_hold_the_parts_they_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("b", None, None).expect("bucket");
        let list =
            |n: u32| -> Vec<(u32, String)> { (1..=n).map(|i| (i, format!("e{i}"))).collect() };

        // A part commit and a repair of a part wait while the mark holds.
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .expect("initiate");
        let g1 = part(&om, &id, 1, 10, "e1");
        part(&om, &id, 2, 10, "e2");
        let mark = marked(&om, &id, &list(2));
        let s = om.open_part(&id, 3).expect("open part");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .expect("allocate");
        let refused = om.commit_part(s.session_id, &[BlockGroup { length: 1, ..g }], 1, "e3");
        assert!(matches!(refused, Err(OmError::Busy(_))), "{refused:?}");
        let owner = crate::group_owner::GroupOwner::Part {
            upload_id: id.clone(),
            part_number: 1,
        };
        let repair = om.replace_group_locations(
            &owner,
            0,
            (g1.container_id, g1.local_id),
            &g1.pipeline.locations[..1],
            &[],
        );
        assert!(matches!(repair, Err(OmError::Busy(_))), "{repair:?}");
        let listed = om.read_listed_parts(&id, &list(2), 0).expect("read");
        let key = om
            .finish_completion(&id, mark, &list(2), listed, BTreeMap::new(), None)
            .expect("finish");
        assert_eq!(key.length, 20);
        assert_eq!(key.block_groups[0], g1, "the parts as read");

        // A later completion takes over; the earlier one's finish gets the key it made.
        let id = om
            .initiate_multipart_upload("b", "k2", None, BTreeMap::new())
            .expect("initiate");
        part(&om, &id, 1, 10, "e1");
        let first = marked(&om, &id, &list(1));
        let listed = om.read_listed_parts(&id, &list(1), 0).expect("read");
        let winner = om
            .complete_multipart_upload(&id, &list(1), 0, BTreeMap::new())
            .expect("the later completion");
        let late = om
            .finish_completion(&id, first, &list(1), listed, BTreeMap::new(), None)
            .expect("answered with the key made");
        assert_eq!(late, winner);

        // A failed check releases the mark: parts commit again.
        let id = om
            .initiate_multipart_upload("b", "k3", None, BTreeMap::new())
            .expect("initiate");
        part(&om, &id, 1, 10, "e1");
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(1, "wrong".into())], 0, BTreeMap::new()),
            Err(OmError::InvalidPart(_))
        ));
        part(&om, &id, 2, 10, "e2");

        // An abort between the steps.
        let mark = marked(&om, &id, &list(2));
        let listed = om.read_listed_parts(&id, &list(2), 0).expect("read");
        om.abort_multipart_upload(&id).expect("abort");
        assert!(matches!(
            om.finish_completion(&id, mark, &list(2), listed, BTreeMap::new(), None),
            Err(OmError::NoSuchUpload(_))
        ));

        // A stale mark gives way to a part commit; its completion fails retryably.
        let id = om
            .initiate_multipart_upload("b", "k4", None, BTreeMap::new())
            .expect("initiate");
        part(&om, &id, 1, 10, "e1");
        let mark = marked(&om, &id, &list(1));
        let listed = om.read_listed_parts(&id, &list(1), 0).expect("read");
        {
            let txn = om.db.begin_write().expect("write");
            txn.open_table(crate::upload_rows::COMPLETING)
                .expect("table")
                .insert(id.as_str(), (mark, now_ms() - crate::COMPLETION_HOLD_MS))
                .expect("age the mark");
            txn.commit().expect("commit");
        }
        part(&om, &id, 1, 12, "e1b");
        assert!(matches!(
            om.finish_completion(&id, mark, &list(1), listed, BTreeMap::new(), None),
            Err(OmError::Busy(_))
        ));
        let key = om
            .complete_multipart_upload(&id, &[(1, "e1b".into())], 0, BTreeMap::new())
            .expect("the retry");
        assert_eq!(key.length, 12);

        // A mark dated far ahead (the clock stepped back since) does not hold either.
        let id = om
            .initiate_multipart_upload("b", "k5", None, BTreeMap::new())
            .expect("initiate");
        part(&om, &id, 1, 10, "e1");
        let mark = marked(&om, &id, &list(1));
        {
            let txn = om.db.begin_write().expect("write");
            txn.open_table(crate::upload_rows::COMPLETING)
                .expect("table")
                .insert(
                    id.as_str(),
                    (mark, now_ms() + 2 * crate::COMPLETION_HOLD_MS),
                )
                .expect("date the mark ahead");
            txn.commit().expect("commit");
        }
        part(&om, &id, 1, 12, "e1b");
    }

    #[tokio::test]
    async fn complete_stitches_parts_without_copying() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("b", None, None).expect("bucket");
        let mut meta = BTreeMap::new();
        meta.insert("content-type".to_string(), "text/plain".to_string());
        let id = om
            .initiate_multipart_upload("b", "k", None, meta)
            .expect("initiate");
        let g1 = part(&om, &id, 1, 100, "\"aaa\"");
        part(&om, &id, 2, 5, "old");
        let g2 = part(&om, &id, 2, 50, "bbb"); // replaces the first part 2
        let (listed, more) = om.list_parts(&id, 0, 1000).expect("list");
        assert!(!more);
        assert_eq!(
            listed
                .parts
                .iter()
                .map(|p| (p.part_number, p.size))
                .collect::<Vec<_>>(),
            vec![(1, 100), (2, 50)]
        );
        assert_eq!(
            om.list_multipart_uploads("b", "", &UploadsMarker::default(), 1000)
                .expect("uploads")
                .0
                .len(),
            1
        );

        let two = [(1, "aaa".to_string()), (2, "bbb".to_string())];
        assert!(matches!(
            om.complete_multipart_upload(
                &id,
                &[(2, "bbb".into()), (1, "aaa".into())],
                0,
                BTreeMap::new()
            ),
            Err(OmError::InvalidPartOrder(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(1, "zzz".into())], 0, BTreeMap::new()),
            Err(OmError::InvalidPart(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(3, "aaa".into())], 0, BTreeMap::new()),
            Err(OmError::InvalidPart(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &two, 101, BTreeMap::new()),
            Err(OmError::EntityTooSmall(_))
        ));
        // Reopen: the upload survives an om restart.
        drop(om);
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("reopen");
        let key = om
            .complete_multipart_upload(&id, &two, 100, BTreeMap::new())
            .expect("complete");
        assert_eq!(key.length, 150);
        assert_eq!(key.block_groups, vec![g1, g2]);
        assert_eq!(
            key.metadata.get("content-type").map(String::as_str),
            Some("text/plain")
        );
        assert_eq!(om.lookup_key("b", "k").expect("lookup"), key);
        assert!(matches!(
            om.list_parts(&id, 0, 1000),
            Err(OmError::NoSuchUpload(_))
        ));
    }

    #[tokio::test]
    async fn abort_and_session_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("b", None, None).expect("bucket");
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .expect("initiate");
        assert!(om.open_part(&id, 0).is_err());
        assert!(om.open_part(&id, MAX_PART_NUMBER + 1).is_err());
        let s = om.open_part(&id, 1).expect("open");
        assert!(matches!(
            om.commit_key(s.session_id, &[], 0, BTreeMap::new()),
            Err(OmError::InvalidArgument(_))
        ));
        let k = om.open_key("b", "plain", None).expect("open key");
        assert!(matches!(
            om.commit_part(k.session_id, &[], 0, "e"),
            Err(OmError::InvalidArgument(_))
        ));
        om.abort_multipart_upload(&id).expect("abort");
        assert!(matches!(
            om.abort_multipart_upload(&id),
            Err(OmError::NoSuchUpload(_))
        ));
        assert!(matches!(
            om.open_part(&id, 1),
            Err(OmError::NoSuchUpload(_))
        ));
        assert!(
            om.lookup_key("b", "k").is_err(),
            "an aborted upload leaves no key"
        );
    }
}
