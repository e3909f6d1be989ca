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

use meta_store::transact;
use proto_crate::{
    KeyInfo, MULTIPART_PART_SIZES_KEY, MultipartUpload, PartInfo, ReplicationConfig,
};

use crate::deletion::{end_session, stage_groups, stage_key_groups};
use crate::manager::{OpenKey, SessionTarget, now_ms};
use crate::sessions::ANONYMOUS_CLIENT;
use crate::upload_rows::{
    COMPLETING, MAX_LIST_PAGE, UPLOADS, UploadsMarker, header, header_in, insert_upload_in,
    put_part_in, remove_upload_in, uploads_page,
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
    async fn load_upload(&self, upload_id: &str) -> Result<MultipartUpload> {
        header(&self.store, upload_id)
            .await?
            .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))
    }

    /// A receiver of the number of multipart uploads in progress (initiated, neither completed
    /// nor aborted), updated after every change: to wait for an upload's abort without polling.
    #[must_use]
    pub fn watch_multipart_uploads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.uploads_open.subscribe()
    }

    /// Publishes the number of uploads in progress (read from the store).
    pub(crate) async fn publish_uploads(&self) {
        match UPLOADS.count(&self.store, &()).await {
            Ok(n) => {
                self.uploads_open.send_replace(n);
            }
            Err(e) => tracing::warn!(error = %e, "counting multipart uploads"),
        }
    }

    /// Starts a multipart upload of `bucket/key`; returns its id. The upload is stored in a
    /// transaction that checks its bucket still exists (a concurrent DeleteBucket may have
    /// won).
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], store errors.
    pub async fn initiate_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String> {
        if let Some(r) = &replication {
            crate::manager::check_replication(r)?;
        }
        let b = self.get_bucket(bucket).await?;
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
        transact(&self.store, |tx| {
            let u = &upload;
            Box::pin(async move {
                if crate::buckets::bucket_in(&tx, &u.bucket).await?.is_none() {
                    return Err(OmError::BucketNotFound(u.bucket.clone()));
                }
                insert_upload_in(&tx, u);
                Ok(())
            })
        })
        .await?;
        self.publish_uploads().await;
        Ok(upload.upload_id)
    }

    /// Opens a session that writes part `part_number` (1..=10000) of an
    /// upload, as an anonymous client.
    ///
    /// # Errors
    /// As [`open_part_as`](Self::open_part_as).
    pub async fn open_part(&self, upload_id: &str, part_number: u32) -> Result<OpenKey> {
        self.open_part_as(ANONYMOUS_CLIENT, upload_id, part_number)
            .await
    }

    /// Opens a session that writes part `part_number` (1..=10000) of an
    /// upload on behalf of client `client`.
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], [`OmError::InvalidArgument`] for a part
    /// number out of range, [`OmError::TooManyOpenSessions`].
    pub async fn open_part_as(
        &self,
        client: &str,
        upload_id: &str,
        part_number: u32,
    ) -> Result<OpenKey> {
        if !(1..=MAX_PART_NUMBER).contains(&part_number) {
            return Err(OmError::InvalidArgument(format!(
                "part number {part_number} is outside 1..={MAX_PART_NUMBER}"
            )));
        }
        let u = self.load_upload(upload_id).await?;
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
        .await
    }

    /// Commits a part session: records the part (replacing an earlier one of
    /// the same number) with its groups, length and ETag. The replaced part's
    /// groups and the session's uncommitted groups are logged for deletion
    /// in the same transaction.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::NoSuchUpload`] (aborted
    /// meanwhile), [`OmError::InvalidArgument`] as for `commit_key`.
    pub async fn commit_part(
        &self,
        session_id: u64,
        groups: &[proto_crate::BlockGroup],
        length: u64,
        etag: &str,
    ) -> Result<PartInfo> {
        self.commit_part_with(session_id, groups, length, etag, BTreeMap::new())
            .await
    }

    /// [`commit_part`](Self::commit_part) with part `metadata` (kept with the part and listed
    /// by `list_parts`; the S3 gateway stores the part's checksum there).
    ///
    /// # Errors
    /// As `commit_part`.
    pub async fn commit_part_with(
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
        let (s, committed, leftovers) = self
            .take_session(session_id, groups, length, &placeholder)
            .await?;
        let SessionTarget::Part {
            upload_id,
            part_number,
        } = s.target.clone()
        else {
            self.reclaim_session(session_id, &s.allocated).await?;
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
        let outcome = transact(&self.store, |tx| {
            let (part, upload_id, leftovers) = (&part, &upload_id, &leftovers);
            Box::pin(async move {
                if header_in(&tx, upload_id).await?.is_none() {
                    return Err(OmError::NoSuchUpload(upload_id.clone()));
                }
                crate::upload_rows::parts_writable(&tx, upload_id, now_ms()).await?;
                let replaced = put_part_in(&tx, upload_id, part).await?;
                stage_groups(&tx, replaced.iter().flat_map(|p| &p.block_groups)).await?;
                if !end_session(&tx, session_id, leftovers, &part.block_groups).await? {
                    return Err(OmError::NoSuchSession(session_id));
                }
                Ok(())
            })
        })
        .await;
        // The upload may be gone (aborted meanwhile): then nothing
        // references the session's groups.
        self.commit_or_reclaim(outcome, session_id, &s.allocated)
            .await?;
        let mut part = part;
        self.current_addresses(&mut part.block_groups);
        Ok(part)
    }

    /// The upload `upload_id` with its parts numbered above `after`, ascending, at most
    /// `limit` of them (and at most [`MAX_LIST_PAGE`]; 0: the header alone), read at one
    /// snapshot; and whether more parts follow (S3's ListParts with part-number-marker and
    /// max-parts).
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], store errors.
    pub async fn list_parts(
        &self,
        upload_id: &str,
        after: u32,
        limit: usize,
    ) -> Result<(MultipartUpload, bool)> {
        let snapshot = self.store.snapshot().await?;
        let mut u = crate::upload_rows::header_at(&snapshot, upload_id)
            .await?
            .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
        let limit = limit.min(MAX_LIST_PAGE);
        if limit == 0 {
            // The header alone; whether any part follows `after`.
            let (first, _) =
                crate::upload_rows::parts_after(&snapshot, upload_id, after, 1).await?;
            return Ok((u, !first.is_empty()));
        }
        let (parts, more) =
            crate::upload_rows::parts_after(&snapshot, upload_id, after, limit).await?;
        u.parts = parts;
        self.current_addresses(u.parts.iter_mut().flat_map(|p| &mut p.block_groups));
        Ok((u, more))
    }

    /// Uploads in progress in `bucket` for keys starting with `prefix`, after `marker`, by
    /// key, then initiation time, then id (S3's ListMultipartUploads order), at most `limit`
    /// (and at most [`MAX_LIST_PAGE`]); parts are left out. Also whether more follow. Read at
    /// one snapshot, from the index: the cost is the page's, whatever the number of uploads
    /// in the om.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], store errors.
    pub async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
        marker: &UploadsMarker,
        limit: usize,
    ) -> Result<(Vec<MultipartUpload>, bool)> {
        let snapshot = self.store.snapshot().await?;
        if crate::tables::BUCKETS
            .get_at(&snapshot, &bucket.to_string())
            .await?
            .is_none()
        {
            return Err(OmError::BucketNotFound(bucket.to_string()));
        }
        let limit = limit.min(MAX_LIST_PAGE);
        if limit == 0 {
            // Whether any upload follows the marker.
            let (first, _) = uploads_page(&snapshot, bucket, prefix, marker, 1).await?;
            return Ok((Vec::new(), !first.is_empty()));
        }
        uploads_page(&snapshot, bucket, prefix, marker, limit).await
    }

    /// Abandons an upload and its parts: the upload goes, and its parts' rows and groups
    /// are recorded for the block deleting service to remove (one row, in the same
    /// transaction, however many parts).
    ///
    /// # Errors
    /// [`OmError::NoSuchUpload`], store errors.
    pub async fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        transact(&self.store, |tx| {
            Box::pin(async move {
                remove_upload_in(&tx, upload_id, &[])
                    .await?
                    .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))
            })
        })
        .await?;
        self.deletions_changed();
        self.publish_uploads().await;
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
    pub async fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        self.complete_multipart_upload_if(upload_id, parts, min_part_size, metadata, None)
            .await
    }

    /// [`complete_multipart_upload`](Self::complete_multipart_upload), provided `condition`
    /// (if any) holds for the key as it is when the completion's transaction runs; when it
    /// does not, nothing changes (the upload stays, as Amazon keeps it for a retry).
    ///
    /// Three steps (`upload_rows.rs`, `multipart_completing`): the upload is marked, so part
    /// commits and repairs of its parts wait; the listed parts are read and checked outside a
    /// write transaction; the key is committed and the upload removed in one transaction, only
    /// if the mark is still this call's. A later completion of the same upload takes the mark
    /// over (this one then fails retryably, and its retry gets the key that completion made
    /// if the parts are the same); a failed check releases it.
    ///
    /// # Errors
    /// As `complete_multipart_upload`; [`OmError::ConditionFailed`]; [`OmError::Busy`] when
    /// another call took the upload over meanwhile.
    pub async fn complete_multipart_upload_if(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        let mark = match self.mark_completion(upload_id, parts).await? {
            Marked::Done(info) => return Ok(info),
            Marked::Mark(mark) => mark,
        };
        let outcome = match self
            .read_listed_parts(upload_id, parts, min_part_size)
            .await
        {
            Ok(listed) => {
                self.finish_completion(upload_id, mark, parts, listed, metadata, condition)
                    .await
            }
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            self.release_mark(upload_id, mark).await;
        }
        outcome
    }

    /// Step 1 of a completion: marks `upload_id` with a new mark (replacing any other's),
    /// after checking the list's shape; or, for an upload already completed with these
    /// parts, answers with the key it made.
    pub(crate) async fn mark_completion(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<Marked> {
        let mark = loop {
            let m: u64 = rand::random();
            if m != 0 {
                break m;
            }
        };
        let marked = transact(&self.store, |tx| {
            Box::pin(async move {
                if header_in(&tx, upload_id).await?.is_none() {
                    // A retry of a completion that succeeded gets the same answer.
                    let info = crate::completed::answer(&tx, upload_id, parts)
                        .await?
                        .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
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
                COMPLETING.put_in(&tx, &upload_id.to_string(), &(mark, now_ms()));
                Ok(Marked::Mark(mark))
            })
        })
        .await?
        .value;
        Ok(match marked {
            Marked::Done(mut info) => {
                self.current_addresses(&mut info.block_groups);
                Marked::Done(info)
            }
            m @ Marked::Mark(_) => m,
        })
    }

    /// Step 2: the listed parts, read at one snapshot (a page of the upload's part rows at a
    /// time) and checked (known, ETags matching, every part but the last at least
    /// `min_part_size`).
    pub(crate) async fn read_listed_parts(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
    ) -> Result<Listed> {
        let snapshot = self.store.snapshot().await?;
        let mut listed = Listed::default();
        let mut sizes = Vec::with_capacity(parts.len());
        let mut page: std::collections::VecDeque<PartInfo> = std::collections::VecDeque::new();
        let mut read_to = 0u32;
        let mut more = true;
        for (i, (number, etag)) in parts.iter().enumerate() {
            // Parts are listed ascending: read the upload's rows forward until `number`.
            while page.back().is_none_or(|p| p.part_number < *number) && more {
                let (next, m) =
                    crate::upload_rows::parts_after(&snapshot, upload_id, read_to, MAX_LIST_PAGE)
                        .await?;
                more = m;
                read_to = next.last().map_or(u32::MAX, |p| p.part_number);
                page.extend(next);
            }
            while page.front().is_some_and(|p| p.part_number < *number) {
                page.pop_front();
            }
            let Some(p) = page.front().filter(|p| p.part_number == *number).cloned() else {
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
    pub(crate) async fn finish_completion(
        &self,
        upload_id: &str,
        mark: u64,
        parts: &[(u32, String)],
        listed: Listed,
        metadata: BTreeMap<String, String>,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        let committed = transact(&self.store, |tx| {
            let (listed, metadata) = (&listed, &metadata);
            Box::pin(async move {
                let held = COMPLETING
                    .get_in(&tx, &upload_id.to_string())
                    .await?
                    .map(|(m, _)| m);
                let Some(u) = header_in(&tx, upload_id).await? else {
                    // Completed (or aborted) by another call meanwhile.
                    let info = crate::completed::answer(&tx, upload_id, parts)
                        .await?
                        .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
                    return Ok((info, false));
                };
                if held != Some(mark) {
                    return Err(OmError::Busy(format!(
                        "upload {upload_id} was taken over by another completion or a part \
                         commit; retry"
                    )));
                }
                let mut meta = u.metadata.clone();
                meta.extend(metadata.clone());
                meta.insert(MULTIPART_PART_SIZES_KEY.to_string(), listed.sizes.clone());
                let block_size = crate::buckets::bucket_in(&tx, &u.bucket)
                    .await?
                    .ok_or_else(|| OmError::BucketNotFound(u.bucket.clone()))?
                    .block_size;
                crate::conditions::check(&tx, &u.bucket, &u.key, condition).await?;
                let info = KeyInfo {
                    bucket: u.bucket.clone(),
                    name: u.key.clone(),
                    length: listed.length,
                    replication: u.replication,
                    block_groups: listed.groups.clone(),
                    block_size,
                    created_unix_ms: now_ms(),
                    metadata: meta,
                    generation: 0,
                };
                // The key appears and the upload disappears together; the replaced key's
                // groups are staged for deletion, and the part rows (with the groups of parts
                // left out of the completion) are left to the block deleting service.
                let numbers: Vec<u32> = parts.iter().map(|(n, _)| *n).collect();
                remove_upload_in(&tx, upload_id, &numbers)
                    .await?
                    .ok_or_else(|| OmError::NoSuchUpload(upload_id.to_string()))?;
                crate::completed::record_in(&tx, upload_id, &info, parts);
                stage_key_groups(&tx, &info.bucket, &info.name).await?;
                crate::keys::put_new_key_in(&tx, &info);
                Ok((info, true))
            })
        })
        .await?;
        let (mut info, made) = committed.value;
        if made {
            info.generation = committed.revision.unwrap_or_default();
            self.deletions_changed();
            self.publish_uploads().await;
        }
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// Removes `mark` from `upload_id` if it is still there (a completion that failed);
    /// failing to is logged (the mark lapses after [`COMPLETION_HOLD_MS`](crate::COMPLETION_HOLD_MS)).
    async fn release_mark(&self, upload_id: &str, mark: u64) {
        let released = transact(&self.store, |tx| {
            Box::pin(async move {
                let key = upload_id.to_string();
                if COMPLETING
                    .get_in(&tx, &key)
                    .await?
                    .is_some_and(|(m, _)| m == mark)
                {
                    COMPLETING.delete_in(&tx, &key);
                }
                Ok::<(), OmError>(())
            })
        })
        .await;
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
    /// Sets upload `id`'s completion mark to `mark`, made at `since_ms`.
    async fn set_mark(om: &OzoneManager, id: &str, mark: u64, since_ms: u64) {
        transact(&om.store, |tx| {
            Box::pin(async move {
                COMPLETING.put_in(&tx, &id.to_string(), &(mark, since_ms));
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("set the mark");
    }

    async fn marked(om: &OzoneManager, id: &str, parts: &[(u32, String)]) -> u64 {
        match om.mark_completion(id, parts).await.expect("mark") {
            Marked::Mark(mark) => mark,
            Marked::Done(_) => panic!("not completed yet"),
        }
    }

    /// Writes a part of `len` bytes in one group.
    async fn part(om: &OzoneManager, upload: &str, n: u32, len: u64, etag: &str) -> BlockGroup {
        crate::test_oms::commit_part(om, upload, n, len, etag).await
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
        om.create_bucket("b", None, None).await.expect("bucket");
        let list =
            |n: u32| -> Vec<(u32, String)> { (1..=n).map(|i| (i, format!("e{i}"))).collect() };

        // A part commit and a repair of a part wait while the mark holds.
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .await
            .expect("initiate");
        let g1 = part(&om, &id, 1, 10, "e1").await;
        part(&om, &id, 2, 10, "e2").await;
        let mark = marked(&om, &id, &list(2)).await;
        let s = om.open_part(&id, 3).await.expect("open part");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let refused = om
            .commit_part(s.session_id, &[BlockGroup { length: 1, ..g }], 1, "e3")
            .await;
        assert!(matches!(refused, Err(OmError::Busy(_))), "{refused:?}");
        let owner = crate::group_owner::GroupOwner::Part {
            upload_id: id.clone(),
            part_number: 1,
        };
        let repair = om
            .replace_group_locations(
                &owner,
                0,
                (g1.container_id, g1.local_id),
                &g1.pipeline.locations[..1],
                &[],
            )
            .await;
        assert!(matches!(repair, Err(OmError::Busy(_))), "{repair:?}");
        let listed = om.read_listed_parts(&id, &list(2), 0).await.expect("read");
        let key = om
            .finish_completion(&id, mark, &list(2), listed, BTreeMap::new(), None)
            .await
            .expect("finish");
        assert_eq!(key.length, 20);
        assert_eq!(key.block_groups[0], g1, "the parts as read");

        // A later completion takes over; the earlier one's finish gets the key it made.
        let id = om
            .initiate_multipart_upload("b", "k2", None, BTreeMap::new())
            .await
            .expect("initiate");
        part(&om, &id, 1, 10, "e1").await;
        let first = marked(&om, &id, &list(1)).await;
        let listed = om.read_listed_parts(&id, &list(1), 0).await.expect("read");
        let winner = om
            .complete_multipart_upload(&id, &list(1), 0, BTreeMap::new())
            .await
            .expect("the later completion");
        let late = om
            .finish_completion(&id, first, &list(1), listed, BTreeMap::new(), None)
            .await
            .expect("answered with the key made");
        assert_eq!(late, winner);

        // A failed check releases the mark: parts commit again.
        let id = om
            .initiate_multipart_upload("b", "k3", None, BTreeMap::new())
            .await
            .expect("initiate");
        part(&om, &id, 1, 10, "e1").await;
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(1, "wrong".into())], 0, BTreeMap::new())
                .await,
            Err(OmError::InvalidPart(_))
        ));
        part(&om, &id, 2, 10, "e2").await;

        // An abort between the steps.
        let mark = marked(&om, &id, &list(2)).await;
        let listed = om.read_listed_parts(&id, &list(2), 0).await.expect("read");
        om.abort_multipart_upload(&id).await.expect("abort");
        assert!(matches!(
            om.finish_completion(&id, mark, &list(2), listed, BTreeMap::new(), None)
                .await,
            Err(OmError::NoSuchUpload(_))
        ));

        // A stale mark gives way to a part commit; its completion fails retryably.
        let id = om
            .initiate_multipart_upload("b", "k4", None, BTreeMap::new())
            .await
            .expect("initiate");
        part(&om, &id, 1, 10, "e1").await;
        let mark = marked(&om, &id, &list(1)).await;
        let listed = om.read_listed_parts(&id, &list(1), 0).await.expect("read");
        set_mark(&om, &id, mark, now_ms() - crate::COMPLETION_HOLD_MS).await;
        part(&om, &id, 1, 12, "e1b").await;
        assert!(matches!(
            om.finish_completion(&id, mark, &list(1), listed, BTreeMap::new(), None)
                .await,
            Err(OmError::Busy(_))
        ));
        let key = om
            .complete_multipart_upload(&id, &[(1, "e1b".into())], 0, BTreeMap::new())
            .await
            .expect("the retry");
        assert_eq!(key.length, 12);

        // A mark dated far ahead (the clock stepped back since) does not hold either.
        let id = om
            .initiate_multipart_upload("b", "k5", None, BTreeMap::new())
            .await
            .expect("initiate");
        part(&om, &id, 1, 10, "e1").await;
        let mark = marked(&om, &id, &list(1)).await;
        set_mark(&om, &id, mark, now_ms() + 2 * crate::COMPLETION_HOLD_MS).await;
        part(&om, &id, 1, 12, "e1b").await;
    }

    #[tokio::test]
    async fn complete_stitches_parts_without_copying() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let mut meta = BTreeMap::new();
        meta.insert("content-type".to_string(), "text/plain".to_string());
        let id = om
            .initiate_multipart_upload("b", "k", None, meta)
            .await
            .expect("initiate");
        let g1 = part(&om, &id, 1, 100, "\"aaa\"").await;
        part(&om, &id, 2, 5, "old").await;
        let g2 = part(&om, &id, 2, 50, "bbb").await; // replaces the first part 2
        let (listed, more) = om.list_parts(&id, 0, 1000).await.expect("list");
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
                .await
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
            )
            .await,
            Err(OmError::InvalidPartOrder(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(1, "zzz".into())], 0, BTreeMap::new())
                .await,
            Err(OmError::InvalidPart(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &[(3, "aaa".into())], 0, BTreeMap::new())
                .await,
            Err(OmError::InvalidPart(_))
        ));
        assert!(matches!(
            om.complete_multipart_upload(&id, &two, 101, BTreeMap::new())
                .await,
            Err(OmError::EntityTooSmall(_))
        ));
        // Reopen: the upload survives an om restart.
        drop(om);
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("reopen");
        let key = om
            .complete_multipart_upload(&id, &two, 100, BTreeMap::new())
            .await
            .expect("complete");
        assert_eq!(key.length, 150);
        assert_eq!(key.block_groups, vec![g1, g2]);
        assert_eq!(
            key.metadata.get("content-type").map(String::as_str),
            Some("text/plain")
        );
        assert_eq!(om.lookup_key("b", "k").await.expect("lookup"), key);
        assert!(matches!(
            om.list_parts(&id, 0, 1000).await,
            Err(OmError::NoSuchUpload(_))
        ));
    }

    #[tokio::test]
    async fn abort_and_session_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .await
            .expect("initiate");
        assert!(om.open_part(&id, 0).await.is_err());
        assert!(om.open_part(&id, MAX_PART_NUMBER + 1).await.is_err());
        let s = om.open_part(&id, 1).await.expect("open");
        assert!(matches!(
            om.commit_key(s.session_id, &[], 0, BTreeMap::new()).await,
            Err(OmError::InvalidArgument(_))
        ));
        let k = om.open_key("b", "plain", None).await.expect("open key");
        assert!(matches!(
            om.commit_part(k.session_id, &[], 0, "e").await,
            Err(OmError::InvalidArgument(_))
        ));
        om.abort_multipart_upload(&id).await.expect("abort");
        assert!(matches!(
            om.abort_multipart_upload(&id).await,
            Err(OmError::NoSuchUpload(_))
        ));
        assert!(matches!(
            om.open_part(&id, 1).await,
            Err(OmError::NoSuchUpload(_))
        ));
        assert!(
            om.lookup_key("b", "k").await.is_err(),
            "an aborted upload leaves no key"
        );
    }
}
