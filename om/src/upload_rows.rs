//! How multipart uploads are stored: one row per upload (its header: bucket, key,
//! replication, initiation time, metadata), one row per uploaded part, and an index of
//! uploads by bucket, key and initiation time.
//!
//! Parts are rows of their own so that committing part `n` reads and writes that part
//! only (with all parts in one value, the 10,000th part rewrote the 9,999 before it), and
//! so that the move onto the metadata store fits etcd's value size (1.5 MiB: 10,000 parts
//! of several groups each would not). The index answers "does this bucket hold uploads"
//! and a page of S3's ListMultipartUploads (ordered by key, then initiation time) with one
//! range read each, instead of decoding every upload of every bucket.
//!
//! Completing or aborting an upload removes its header and index row and writes one
//! `dropped_uploads` row (upload id -> when, and the part numbers the completion kept); the
//! block deleting service then removes the part rows in bounded batches, deleting the groups
//! of parts not kept (`deletion.rs`). So a completion or abort writes a few rows however
//! many parts the upload has (the metadata store bounds a transaction's operations), and
//! part rows of a dropped upload are read by nothing but that service and the orphan sweep
//! (every reader finds parts through the header).
//!
//! Om files written before this layout kept the parts inside the upload's value; they are
//! rewritten into this layout at open ([`split_parts_into_rows`]), in one transaction.

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{MultipartUpload, PartInfo};
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::OmError;
use crate::manager::{COUNTERS, decode};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Uploads in progress: upload id -> encoded `MultipartUploadInfo` without its parts.
pub(crate) const UPLOADS: TableDefinition<&str, &[u8]> = TableDefinition::new("multipart_uploads");
/// Uploaded parts: (upload id, part number) -> encoded `PartInfo`.
pub(crate) const PARTS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("multipart_parts");
/// Uploads by (bucket, key, initiation ms, upload id): S3's listing order.
pub(crate) const UPLOADS_BY_BUCKET: TableDefinition<(&str, &str, u64, &str), ()> =
    TableDefinition::new("multipart_uploads_by_bucket");

/// Uploads completed or aborted whose part rows remain: upload id -> encoded `DroppedUpload`.
pub(crate) const DROPPED_UPLOADS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("dropped_uploads");

/// Completions under way: upload id -> (mark, since unix ms). A completion marks its upload,
/// reads the listed parts outside its writing transaction, and commits only if its mark is
/// still there; while a mark is fresh, part commits and repairs of the upload's parts are
/// refused ([`OmError::Busy`], retryable), so the parts it read are the parts it commits.
/// Its reads are then not part of any transaction (a completion of 10,000 parts would pass
/// the metadata store's bound on what one transaction reads).
pub(crate) const COMPLETING: TableDefinition<&str, (u64, u64)> =
    TableDefinition::new("multipart_completing");

/// How long a completion's mark holds an upload's parts, ms: a completion whose om stopped
/// between its steps releases the upload after this (the next part commit removes the mark).
pub const COMPLETION_HOLD_MS: u64 = 60_000;

/// Refuses, in `txn`, a change to upload `id`'s parts while a completion's mark made within
/// [`COMPLETION_HOLD_MS`] of `now_ms` (either way: a clock stepped back, or another om's a
/// little ahead, does not make a mark hold for longer) holds them; removes a mark further
/// off (its completion then finds it gone and fails, retryably).
///
/// # Errors
/// [`OmError::Busy`]; database errors.
pub(crate) fn parts_writable(txn: &WriteTransaction, id: &str, now_ms: u64) -> Result<()> {
    let mut t = txn.open_table(COMPLETING)?;
    let mark = t.get(id)?.map(|v| v.value());
    match mark {
        Some((_, since)) if now_ms.abs_diff(since) < COMPLETION_HOLD_MS => {
            Err(OmError::Busy(format!(
                "upload {id} is being completed, so its parts cannot change now; upload the \
                 part again"
            )))
        }
        Some(_) => {
            t.remove(id)?;
            Ok(())
        }
        None => Ok(()),
    }
}

/// `COUNTERS` row recording that uploads are stored as rows (value 2).
const LAYOUT: &str = "layout/multipart";
const LAYOUT_PART_ROWS: u64 = 2;

/// Most uploads or parts one listing call returns (S3's own page maximum).
pub const MAX_LIST_PAGE: usize = 1000;

/// A new upload id: the initiation time (16 hex digits, ms since the Unix epoch) and 128
/// random bits (32 hex digits). The time lets a listing resume right after an upload named
/// by S3's upload-id-marker even when that upload has completed since (S3's markers carry
/// no time); the random part makes ids unguessable.
pub(crate) fn new_upload_id(initiated_unix_ms: u64) -> String {
    let random: u128 = rand::random();
    format!("{initiated_unix_ms:016x}{random:032x}")
}

/// The initiation time an id from [`new_upload_id`] carries; `None` for any other id (ids
/// made before they carried it were 32 hex digits).
fn initiated_ms_of(upload_id: &str) -> Option<u64> {
    (upload_id.len() == 48 && upload_id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(upload_id.get(..16)?, 16).ok())
        .flatten()
}

/// Creates the tables (inside `txn`, with the om's other tables at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(UPLOADS)?;
    txn.open_table(PARTS)?;
    txn.open_table(UPLOADS_BY_BUCKET)?;
    txn.open_table(DROPPED_UPLOADS)?;
    txn.open_table(COMPLETING)?;
    Ok(())
}

/// The header of upload `id` (its `parts` empty), from `uploads`.
pub(crate) fn header(
    uploads: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> Result<Option<MultipartUpload>> {
    match uploads.get(id)? {
        Some(v) => Ok(Some(decode::<pb::MultipartUploadInfo, _>(
            v.value(),
            "multipart upload",
        )?)),
        None => Ok(None),
    }
}

/// Part `number` of upload `id`, from `parts`.
pub(crate) fn part(
    parts: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
    id: &str,
    number: u32,
) -> Result<Option<PartInfo>> {
    match parts.get((id, number))? {
        Some(v) => Ok(Some(decode::<pb::PartInfo, _>(
            v.value(),
            "multipart part",
        )?)),
        None => Ok(None),
    }
}

/// Parts of upload `id` numbered above `after`, ascending, at most `limit`; and whether
/// more follow.
pub(crate) fn parts_after(
    parts: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
    id: &str,
    after: u32,
    limit: usize,
) -> Result<(Vec<PartInfo>, bool)> {
    let mut out = Vec::new();
    let Some(first) = after.checked_add(1) else {
        return Ok((out, false));
    };
    for entry in parts.range((id, first)..=(id, u32::MAX))? {
        let (_, v) = entry?;
        if out.len() == limit {
            return Ok((out, true));
        }
        out.push(decode::<pb::PartInfo, _>(v.value(), "multipart part")?);
    }
    Ok((out, false))
}

fn encode_header(u: &MultipartUpload) -> Vec<u8> {
    let mut m = pb::MultipartUploadInfo::from(u.clone());
    m.parts.clear();
    m.encode_to_vec()
}

/// Records a new upload (header and index row) in `txn`; `u.parts` are not stored.
pub(crate) fn insert_upload(txn: &WriteTransaction, u: &MultipartUpload) -> Result<()> {
    txn.open_table(UPLOADS)?
        .insert(u.upload_id.as_str(), encode_header(u).as_slice())?;
    txn.open_table(UPLOADS_BY_BUCKET)?.insert(
        (
            u.bucket.as_str(),
            u.key.as_str(),
            u.initiated_unix_ms,
            u.upload_id.as_str(),
        ),
        (),
    )?;
    Ok(())
}

/// Stores `p` as part `p.part_number` of upload `id` in `txn`, returning the part it
/// replaces.
pub(crate) fn put_part(txn: &WriteTransaction, id: &str, p: &PartInfo) -> Result<Option<PartInfo>> {
    let mut t = txn.open_table(PARTS)?;
    let old = match t.insert(
        (id, p.part_number),
        pb::PartInfo::from(p.clone()).encode_to_vec().as_slice(),
    )? {
        Some(v) => Some(decode::<pb::PartInfo, _>(v.value(), "multipart part")?),
        None => None,
    };
    Ok(old)
}

/// Removes upload `id` (header and index row) in `txn` and records it as dropped, keeping
/// parts `kept` (a completion's, whose groups the key now holds); its part rows go later
/// (`deletion.rs`). Returns its header, or `None` when there is no such upload.
pub(crate) fn remove_upload(
    txn: &WriteTransaction,
    id: &str,
    kept: &[u32],
) -> Result<Option<MultipartUpload>> {
    let Some(u) = header(&txn.open_table(UPLOADS)?, id)? else {
        return Ok(None);
    };
    txn.open_table(UPLOADS)?.remove(id)?;
    txn.open_table(UPLOADS_BY_BUCKET)?.remove((
        u.bucket.as_str(),
        u.key.as_str(),
        u.initiated_unix_ms,
        id,
    ))?;
    let dropped = pb::DroppedUpload {
        dropped_unix_ms: crate::manager::now_ms(),
        kept_parts: kept.to_vec(),
    };
    txn.open_table(DROPPED_UPLOADS)?
        .insert(id, dropped.encode_to_vec().as_slice())?;
    txn.open_table(COMPLETING)?.remove(id)?;
    Ok(Some(u))
}

/// Whether `bucket` holds an upload in progress (one index read).
pub(crate) fn bucket_has_uploads(
    index: &impl ReadableTable<(&'static str, &'static str, u64, &'static str), ()>,
    bucket: &str,
) -> Result<bool> {
    Ok(index
        .range((bucket, "", 0, "")..)?
        .next()
        .transpose()?
        .is_some_and(|(k, _)| k.value().0 == bucket))
}

/// Where a listing of uploads resumes (S3's key-marker and upload-id-marker).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadsMarker {
    /// List keys after this one (empty: from the start).
    pub key: String,
    /// With `key`: list the uploads of `key` initiated after this one, then the keys after
    /// `key`. An upload completed or aborted since is placed by the time its id carries (or
    /// `initiated_unix_ms`); an id that names no upload and carries no time (an id from
    /// before ids carried it) resumes after every upload of `key`, as without one.
    pub upload_id: Option<String>,
    /// With `upload_id`: that upload's initiation time (ms since the Unix epoch), so that
    /// the listing resumes right after it even when it has completed or been aborted since
    /// (a client paging through every upload passes the last one it got; S3's markers
    /// carry no time, and the om then looks the upload up).
    pub initiated_unix_ms: Option<u64>,
}

/// One page of uploads of `bucket` whose keys start with `prefix`, after `marker`, in S3's
/// order (key, then initiation time, then id), at most `limit`; and whether more follow.
/// Headers only (`parts` empty).
pub(crate) fn uploads_page(
    uploads: &impl ReadableTable<&'static str, &'static [u8]>,
    index: &impl ReadableTable<(&'static str, &'static str, u64, &'static str), ()>,
    bucket: &str,
    prefix: &str,
    marker: &UploadsMarker,
    limit: usize,
) -> Result<(Vec<MultipartUpload>, bool)> {
    // A marker before the prefix is before every key listed.
    let marker_applies = !marker.key.is_empty() && marker.key.as_str() >= prefix;
    // Resume strictly after the marker upload when it is still there; else after every
    // upload of the marker key.
    let resume = match (&marker.upload_id, marker.initiated_unix_ms) {
        (Some(id), Some(ms)) if marker_applies => Some((ms, id.clone())),
        (Some(id), None) if marker_applies => match header(uploads, id)? {
            Some(u) => (u.bucket == bucket && u.key == marker.key)
                .then(|| (u.initiated_unix_ms, id.clone())),
            // Gone since: its id still tells when it was initiated.
            None => initiated_ms_of(id).map(|ms| (ms, id.clone())),
        },
        _ => None,
    };
    let from = match &resume {
        Some((ms, id)) => (bucket, marker.key.as_str(), *ms, id.as_str()),
        None if marker_applies => (bucket, marker.key.as_str(), u64::MAX, ""),
        None => (bucket, prefix, 0, ""),
    };
    let mut out = Vec::new();
    for entry in index.range(from..)? {
        let (k, _) = entry?;
        let (b, key, ms, id) = k.value();
        if b != bucket || !key.starts_with(prefix) {
            break;
        }
        if marker_applies {
            let past = match &resume {
                Some((rms, rid)) => (key, ms, id) > (marker.key.as_str(), *rms, rid.as_str()),
                None => key > marker.key.as_str(),
            };
            if !past {
                continue;
            }
        }
        if out.len() == limit {
            return Ok((out, true));
        }
        // Index and header change in one transaction; a row without its header (an older
        // om aborted the upload after an upgrade: downgrades are not supported) is skipped.
        let Some(u) = header(uploads, id)? else {
            tracing::warn!(
                upload = id,
                "the upload index names an upload that does not exist; skipped"
            );
            continue;
        };
        out.push(u);
    }
    Ok((out, false))
}

/// Rewrites uploads stored the old way (parts inside the upload's value) into header, part
/// and index rows, once: a `COUNTERS` row records that it is done. One transaction, so a
/// crash leaves either layout whole.
pub(crate) fn split_parts_into_rows(db: &redb::Database) -> Result<usize> {
    let txn = db.begin_write()?;
    if txn.open_table(COUNTERS)?.get(LAYOUT)?.map(|v| v.value()) == Some(LAYOUT_PART_ROWS) {
        return Ok(0);
    }
    let mut old = Vec::new();
    for entry in txn.open_table(UPLOADS)?.iter()? {
        let (_, v) = entry?;
        old.push(decode::<pb::MultipartUploadInfo, MultipartUpload>(
            v.value(),
            "multipart upload",
        )?);
    }
    for u in &old {
        insert_upload(&txn, u)?;
        for p in &u.parts {
            put_part(&txn, &u.upload_id, p)?;
        }
    }
    txn.open_table(COUNTERS)?.insert(LAYOUT, LAYOUT_PART_ROWS)?;
    txn.commit()?;
    Ok(old.len())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proto_crate::BlockGroup;
    use redb::{ReadableDatabase, ReadableTableMetadata};

    use super::*;
    use crate::{OmConfig, OzoneManager};

    async fn om(dir: &std::path::Path) -> OzoneManager {
        let om = crate::test_oms::with_five_datanodes(dir).await;
        om.create_bucket("b", None, None).expect("bucket");
        om
    }

    fn commit_part(om: &OzoneManager, upload: &str, n: u32, len: u64) -> BlockGroup {
        crate::test_oms::commit_part(om, upload, n, len, &format!("e{n}"))
    }

    fn header_bytes(om: &OzoneManager, id: &str) -> usize {
        let read = om.db.begin_read().expect("read");
        let t = read.open_table(UPLOADS).expect("table");
        t.get(id).expect("get").expect("row").value().len()
    }

    /// Completing or aborting an upload of many parts writes a few rows (the part rows are
    /// left to the block deleting service, which removes them in batches and deletes the
    /// groups of parts not kept); pending deletions count the parts left out from the start.
    #[tokio::test]
    async fn completion_and_abort_leave_part_rows_to_the_deleting_service() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        let parts = 300u32;
        let kept: Vec<(u32, String)> = (1..=parts)
            .filter(|n| n % 3 != 0)
            .map(|n| (n, format!("e{n}")))
            .collect();
        let complete = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .expect("initiate");
        let abort = om
            .initiate_multipart_upload("b", "a", None, BTreeMap::new())
            .expect("initiate");
        for n in 1..=parts {
            commit_part(&om, &complete, n, 10);
            if n <= 40 {
                commit_part(&om, &abort, n, 10);
            }
        }
        assert_eq!(om.pending_deletions().expect("pending"), 0);
        let key = om
            .complete_multipart_upload(&complete, &kept, 0, BTreeMap::new())
            .expect("complete");
        assert_eq!(key.block_groups.len(), kept.len());
        om.abort_multipart_upload(&abort).expect("abort");
        let replicas = 5u64;
        let freed = u64::from(parts) - kept.len() as u64 + 40;
        assert_eq!(
            om.staged_deletions().expect("staged"),
            u64::from(parts) + 40
        );
        assert_eq!(om.pending_deletions().expect("pending"), freed * replicas);
        assert!(matches!(
            om.list_parts(&complete, 0, 10),
            Err(OmError::NoSuchUpload(_))
        ));
        assert_eq!(
            om.expand_staged_deletions().expect("expand"),
            freed * replicas
        );
        assert_eq!(om.staged_deletions().expect("staged"), 0);
        assert_eq!(om.pending_deletions().expect("pending"), freed * replicas);
        let read = om.db.begin_read().expect("read");
        assert_eq!(
            read.open_table(PARTS).expect("parts").len().expect("len"),
            0
        );
        assert_eq!(
            read.open_table(DROPPED_UPLOADS)
                .expect("dropped")
                .len()
                .expect("len"),
            0
        );
        assert_eq!(
            om.lookup_key("b", "k").expect("key").block_groups,
            key.block_groups
        );
    }

    /// Regression: a part commit rewrote the upload's whole value (every part before it),
    /// so the 10,000th part cost 10,000 parts of work. Now the upload's row is the same
    /// size whatever its parts, and each part is a row of its own.
    #[tokio::test]
    async fn parts_are_rows_and_the_upload_row_does_not_grow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .expect("initiate");
        let empty = header_bytes(&om, &id);
        for n in 1..=30 {
            commit_part(&om, &id, n, 10);
        }
        assert_eq!(header_bytes(&om, &id), empty);
        let read = om.db.begin_read().expect("read");
        assert_eq!(
            read.open_table(PARTS).expect("parts").len().expect("len"),
            30
        );
    }

    /// ListParts pages by part number: 30 parts in pages of 7, then the header alone.
    #[tokio::test]
    async fn parts_page_by_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .expect("initiate");
        for n in (2..=60).step_by(2) {
            commit_part(&om, &id, n, u64::from(n));
        }
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let (u, more) = om.list_parts(&id, after, 7).expect("page");
            assert!(u.parts.len() <= 7);
            assert_eq!((u.bucket.as_str(), u.key.as_str()), ("b", "k"));
            seen.extend(u.parts.iter().map(|p| (p.part_number, p.size)));
            after = seen.last().map_or(0, |s| s.0);
            if !more {
                break;
            }
        }
        let want: Vec<(u32, u64)> = (2..=60).step_by(2).map(|n| (n, u64::from(n))).collect();
        assert_eq!(seen, want);
        // A marker between parts, past the last, and at the top of the range.
        assert_eq!(
            om.list_parts(&id, 3, 1).expect("page").0.parts[0].part_number,
            4
        );
        assert_eq!(
            om.list_parts(&id, 60, 10).expect("page"),
            (om.list_parts(&id, 0, 0).expect("header").0, false)
        );
        assert!(
            om.list_parts(&id, u32::MAX, 10)
                .expect("page")
                .0
                .parts
                .is_empty()
        );
        let (header, more) = om.list_parts(&id, 0, 0).expect("header");
        assert!(header.parts.is_empty() && more);
    }

    /// ListMultipartUploads pages in S3's order (key, then initiation) with both markers,
    /// whatever the page size; a marker upload gone since resumes after its key; another
    /// bucket's uploads and keys outside the prefix are never listed.
    #[tokio::test]
    async fn uploads_page_in_key_then_initiation_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("other", None, None).expect("bucket");
        let mut ids = Vec::new();
        for key in ["p/a", "p/b", "p/b", "p/b", "p/c", "q", "p/a"] {
            let id = om
                .initiate_multipart_upload("b", key, None, BTreeMap::new())
                .expect("initiate");
            ids.push((key.to_string(), id));
        }
        om.initiate_multipart_upload("other", "p/a", None, BTreeMap::new())
            .expect("other bucket");
        // S3's order: by key, then initiation time, then id (uploads of one millisecond).
        let initiated = |id: &str| om.list_parts(id, 0, 0).expect("header").0.initiated_unix_ms;
        let mut want: Vec<(String, String)> = ids
            .iter()
            .filter(|(k, _)| k.starts_with("p/"))
            .cloned()
            .collect();
        want.sort_by_key(|(k, id)| (k.clone(), initiated(id), id.clone()));
        for limit in 1..=7 {
            let mut marker = UploadsMarker::default();
            let mut seen = Vec::new();
            loop {
                let (page, more) = om
                    .list_multipart_uploads("b", "p/", &marker, limit)
                    .expect("page");
                assert!(page.len() <= limit);
                seen.extend(page.iter().map(|u| (u.key.clone(), u.upload_id.clone())));
                let Some((key, id)) = seen.last().cloned() else {
                    break;
                };
                marker = UploadsMarker {
                    key,
                    upload_id: Some(id),
                    initiated_unix_ms: None,
                };
                if !more {
                    break;
                }
            }
            assert_eq!(seen, want, "pages of {limit}");
        }
        // A key marker alone skips every upload of that key.
        let (page, _) = om
            .list_multipart_uploads(
                "b",
                "p/",
                &UploadsMarker {
                    key: "p/b".into(),
                    ..UploadsMarker::default()
                },
                10,
            )
            .expect("page");
        assert_eq!(
            page.iter().map(|u| u.key.as_str()).collect::<Vec<_>>(),
            ["p/c"]
        );
        // The marker upload aborted since: resume after its key.
        let first_b = want
            .iter()
            .find(|(k, _)| k == "p/b")
            .expect("p/b")
            .1
            .clone();
        let first_b_ms = om
            .list_parts(&first_b, 0, 0)
            .expect("header")
            .0
            .initiated_unix_ms;
        om.abort_multipart_upload(&first_b).expect("abort");
        let marker = |initiated_unix_ms| UploadsMarker {
            key: "p/b".into(),
            upload_id: Some(first_b.clone()),
            initiated_unix_ms,
        };
        let keys = |marker: &UploadsMarker| {
            let (page, _) = om
                .list_multipart_uploads("b", "", marker, 10)
                .expect("page");
            page.into_iter().map(|u| u.key).collect::<Vec<_>>()
        };
        // Regression: a marker upload gone since still resumes right after itself, by the
        // time its id carries or the one given, so the uploads of its key initiated later are
        // listed (without it, an upload completed between two pages hid the rest of its
        // key's uploads).
        assert_eq!(keys(&marker(None)), ["p/b", "p/b", "p/c", "q"]);
        assert_eq!(keys(&marker(Some(first_b_ms))), ["p/b", "p/b", "p/c", "q"]);
        // An id that carries no time (made before ids did) resumes after its key.
        let old_style = UploadsMarker {
            key: "p/b".into(),
            upload_id: Some("0123456789abcdef0123456789abcdef".into()),
            initiated_unix_ms: None,
        };
        assert_eq!(keys(&old_style), ["p/c", "q"]);
        assert_eq!(initiated_ms_of(&first_b), Some(first_b_ms));
        // A marker before the prefix lists the whole prefix.
        let (page, more) = om
            .list_multipart_uploads(
                "b",
                "q",
                &UploadsMarker {
                    key: "a".into(),
                    ..UploadsMarker::default()
                },
                10,
            )
            .expect("page");
        assert_eq!((page.len(), more), (1, false));
        assert!(matches!(
            om.list_multipart_uploads("gone", "", &UploadsMarker::default(), 10),
            Err(OmError::BucketNotFound(_))
        ));
    }

    /// An om file from before this layout (parts inside the upload's value) opens with its
    /// uploads whole: parts listed, completion works, the bucket counts as not empty; and
    /// the rewrite runs once.
    #[tokio::test]
    async fn an_old_file_is_rewritten_into_part_rows_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (id, groups) = {
            let om = om(dir.path()).await;
            let id = om
                .initiate_multipart_upload("b", "k", None, BTreeMap::new())
                .expect("initiate");
            let groups = vec![commit_part(&om, &id, 1, 7), commit_part(&om, &id, 2, 5)];
            (id, groups)
        };
        // Rewrite the file into the old layout: parts inside the upload's value, no
        // index, no layout row.
        {
            let db = redb::Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("write");
            let mut u = header(&txn.open_table(UPLOADS).expect("uploads"), &id)
                .expect("read")
                .expect("there");
            u.parts = txn
                .open_table(PARTS)
                .expect("parts")
                .extract_from_if((id.as_str(), 0)..=(id.as_str(), u32::MAX), |_, _| true)
                .expect("extract")
                .map(|e| {
                    decode::<pb::PartInfo, _>(e.expect("row").1.value(), "part").expect("part")
                })
                .collect();
            txn.open_table(UPLOADS_BY_BUCKET)
                .expect("index")
                .retain(|_, ()| false)
                .expect("clear");
            txn.open_table(UPLOADS)
                .expect("uploads")
                .insert(
                    id.as_str(),
                    pb::MultipartUploadInfo::from(u).encode_to_vec().as_slice(),
                )
                .expect("insert");
            txn.open_table(COUNTERS)
                .expect("counters")
                .remove(LAYOUT)
                .expect("remove");
            txn.commit().expect("commit");
        }
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("reopen");
        let (u, _) = om.list_parts(&id, 0, 10).expect("parts");
        assert_eq!(
            u.parts
                .iter()
                .map(|p| (p.part_number, p.size))
                .collect::<Vec<_>>(),
            [(1, 7), (2, 5)]
        );
        assert!(matches!(
            om.delete_bucket("b"),
            Err(OmError::BucketNotEmpty(_))
        ));
        assert_eq!(
            om.list_multipart_uploads("b", "", &UploadsMarker::default(), 10)
                .expect("uploads")
                .0
                .len(),
            1
        );
        assert_eq!(
            split_parts_into_rows(&om.db).expect("again"),
            0,
            "done once"
        );
        let key = om
            .complete_multipart_upload(
                &id,
                &[(1, "e1".into()), (2, "e2".into())],
                0,
                BTreeMap::new(),
            )
            .expect("complete");
        assert_eq!(key.block_groups, groups);
        assert_eq!(
            om.staged_deletions().expect("staged"),
            2,
            "the two part rows"
        );
        om.expand_staged_deletions().expect("expand");
        assert_eq!(
            om.pending_deletions().expect("pending"),
            0,
            "both parts kept"
        );
        let read = om.db.begin_read().expect("read");
        assert_eq!(
            read.open_table(PARTS).expect("parts").len().expect("len"),
            0
        );
        assert_eq!(
            read.open_table(UPLOADS_BY_BUCKET)
                .expect("index")
                .len()
                .expect("len"),
            0
        );
    }
}
