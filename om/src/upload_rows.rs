//! How multipart uploads are stored: one row per upload (its header: bucket, key,
//! replication, initiation time, metadata), one row per uploaded part, and an index of
//! uploads by bucket, key and initiation time.
//!
//! Parts are rows of their own so that committing part `n` reads and writes that part
//! only (with all parts in one value, the 10,000th part rewrote the 9,999 before it), and
//! so that an upload fits etcd's value size (1.5 MiB: 10,000 parts of several groups each
//! would not). The index answers "does this bucket hold uploads"
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
//! Listings read at one store snapshot (`MetaStore::snapshot`), so a page's index rows and
//! headers agree. Om files written before this layout kept the parts inside the upload's
//! value; they are rewritten into it at open (`old_layout.rs`).

use meta_store::codec::Raw;
use meta_store::{MetaStore, Snapshot, Transaction};
use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{MultipartUpload, PartInfo};

use crate::OmError;
use crate::manager::decode;
pub(crate) use crate::tables::{COMPLETING, DROPPED_UPLOADS, PARTS, UPLOADS, UPLOADS_BY_BUCKET};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// How long a completion's mark holds an upload's parts, ms: a completion whose om stopped
/// between its steps releases the upload after this (the next part commit removes the mark).
pub const COMPLETION_HOLD_MS: u64 = 60_000;

/// Refuses, in `tx`, a change to upload `id`'s parts while a completion's mark made within
/// [`COMPLETION_HOLD_MS`] of `now_ms` (either way: a clock stepped back, or another om's a
/// little ahead, does not make a mark hold for longer) holds them; removes a mark further
/// off (its completion then finds it gone and fails, retryably). Completions under way are
/// rows of `multipart_completing` (upload id -> (mark, since unix ms)): a completion marks its
/// upload, reads the listed parts outside its writing transaction, and commits only if its
/// mark is still there, so the parts it read are the parts it commits; its reads are then not
/// part of any transaction (a completion of 10,000 parts would pass the metadata store's bound
/// on what one transaction reads).
///
/// # Errors
/// [`OmError::Busy`]; store errors.
pub(crate) async fn parts_writable(tx: &Transaction, id: &str, now_ms: u64) -> Result<()> {
    let key = id.to_string();
    match COMPLETING.get_in(tx, &key).await? {
        Some((_, since)) if now_ms.abs_diff(since) < COMPLETION_HOLD_MS => {
            Err(OmError::Busy(format!(
                "upload {id} is being completed, so its parts cannot change now; upload the \
                 part again"
            )))
        }
        Some(_) => {
            COMPLETING.delete_in(tx, &key);
            Ok(())
        }
        None => Ok(()),
    }
}

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

fn decode_header(v: &Raw) -> Result<MultipartUpload> {
    decode::<pb::MultipartUploadInfo, _>(&v.0, "multipart upload")
}

fn decode_part(v: &Raw) -> Result<PartInfo> {
    decode::<pb::PartInfo, _>(&v.0, "multipart part")
}

/// The header of upload `id` (its `parts` empty), as `tx` sees it.
pub(crate) async fn header_in(tx: &Transaction, id: &str) -> Result<Option<MultipartUpload>> {
    UPLOADS
        .get_in(tx, &id.to_string())
        .await?
        .map(|v| decode_header(&v))
        .transpose()
}

/// The header of upload `id` (its `parts` empty), now.
pub(crate) async fn header(store: &MetaStore, id: &str) -> Result<Option<MultipartUpload>> {
    UPLOADS
        .get(store, &id.to_string())
        .await?
        .map(|r| decode_header(&r.value))
        .transpose()
}

/// The header of upload `id` as of `snapshot`.
pub(crate) async fn header_at(snapshot: &Snapshot, id: &str) -> Result<Option<MultipartUpload>> {
    UPLOADS
        .get_at(snapshot, &id.to_string())
        .await?
        .map(|r| decode_header(&r.value))
        .transpose()
}

/// Part `number` of upload `id`, as `tx` sees it.
pub(crate) async fn part_in(tx: &Transaction, id: &str, number: u32) -> Result<Option<PartInfo>> {
    PARTS
        .get_in(tx, &(id.to_string(), number))
        .await?
        .map(|v| decode_part(&v))
        .transpose()
}

/// Parts of upload `id` numbered above `after`, ascending, at most `limit` (at least 1), as of
/// `snapshot`; and whether more follow.
pub(crate) async fn parts_after(
    snapshot: &Snapshot,
    id: &str,
    after: u32,
    limit: usize,
) -> Result<(Vec<PartInfo>, bool)> {
    let rows = PARTS
        .scan_at(
            snapshot,
            &(id.to_string(),),
            Some(&(id.to_string(), after)),
            limit.max(1),
        )
        .await?;
    let parts = rows
        .rows
        .iter()
        .map(|r| decode_part(&r.value))
        .collect::<Result<Vec<_>>>()?;
    Ok((parts, rows.more))
}

fn encode_header(u: &MultipartUpload) -> Raw {
    let mut m = pb::MultipartUploadInfo::from(u.clone());
    m.parts.clear();
    Raw(m.encode_to_vec())
}

fn index_key(u: &MultipartUpload) -> (String, String, u64, String) {
    (
        u.bucket.clone(),
        u.key.clone(),
        u.initiated_unix_ms,
        u.upload_id.clone(),
    )
}

/// Records a new upload (header and index row) in `tx`; `u.parts` are not stored.
pub(crate) fn insert_upload_in(tx: &Transaction, u: &MultipartUpload) {
    UPLOADS.put_in(tx, &u.upload_id, &encode_header(u));
    UPLOADS_BY_BUCKET.put_in(tx, &index_key(u), &());
}

/// Stores `p` as part `p.part_number` of upload `id` in `tx`, returning the part it
/// replaces.
pub(crate) async fn put_part_in(
    tx: &Transaction,
    id: &str,
    p: &PartInfo,
) -> Result<Option<PartInfo>> {
    let old = part_in(tx, id, p.part_number).await?;
    PARTS.put_in(
        tx,
        &(id.to_string(), p.part_number),
        &Raw(pb::PartInfo::from(p.clone()).encode_to_vec()),
    );
    Ok(old)
}

/// Removes upload `id` (header and index row) in `tx` and records it as dropped, keeping
/// parts `kept` (a completion's, whose groups the key now holds); its part rows go later
/// (`deletion.rs`). Returns its header, or `None` when there is no such upload.
pub(crate) async fn remove_upload_in(
    tx: &Transaction,
    id: &str,
    kept: &[u32],
) -> Result<Option<MultipartUpload>> {
    let Some(u) = header_in(tx, id).await? else {
        return Ok(None);
    };
    let key = id.to_string();
    UPLOADS.delete_in(tx, &key);
    UPLOADS_BY_BUCKET.delete_in(tx, &index_key(&u));
    let dropped = pb::DroppedUpload {
        dropped_unix_ms: crate::manager::now_ms(),
        kept_parts: kept.to_vec(),
    };
    DROPPED_UPLOADS.put_in(tx, &key, &Raw(dropped.encode_to_vec()));
    COMPLETING.delete_in(tx, &key);
    Ok(Some(u))
}

/// Whether `bucket` holds an upload in progress, as `tx` sees it (one index row read).
pub(crate) async fn bucket_has_uploads_in(tx: &Transaction, bucket: &str) -> Result<bool> {
    let rows = UPLOADS_BY_BUCKET
        .scan_in(tx, &(bucket.to_string(),), None, 1)
        .await?;
    Ok(!rows.rows.is_empty())
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
/// order (key, then initiation time, then id), at most `limit` (at least 1), as of `snapshot`;
/// and whether more follow. Headers only (`parts` empty).
pub(crate) async fn uploads_page(
    snapshot: &Snapshot,
    bucket: &str,
    prefix: &str,
    marker: &UploadsMarker,
    limit: usize,
) -> Result<(Vec<MultipartUpload>, bool)> {
    let limit = limit.max(1);
    // A marker before the prefix is before every key listed.
    let marker_applies = !marker.key.is_empty() && marker.key.as_str() >= prefix;
    // Resume strictly after the marker upload when it is still there; else after every
    // upload of the marker key.
    let resume = match (&marker.upload_id, marker.initiated_unix_ms) {
        (Some(id), Some(ms)) if marker_applies => Some((ms, id.clone())),
        (Some(id), None) if marker_applies => match header_at(snapshot, id).await? {
            Some(u) => (u.bucket == bucket && u.key == marker.key)
                .then(|| (u.initiated_unix_ms, id.clone())),
            // Gone since: its id still tells when it was initiated.
            None => initiated_ms_of(id).map(|ms| (ms, id.clone())),
        },
        _ => None,
    };
    let b = bucket.to_string();
    let mut from = match &resume {
        Some((ms, id)) => (b.clone(), marker.key.clone(), *ms, id.clone()),
        None if marker_applies => (b.clone(), marker.key.clone(), u64::MAX, String::new()),
        None => (b.clone(), prefix.to_string(), 0, String::new()),
    };
    let mut out = Vec::new();
    loop {
        let rows = UPLOADS_BY_BUCKET
            .scan_from_at(snapshot, &(b.clone(),), &from, MAX_LIST_PAGE)
            .await?;
        for row in &rows.rows {
            let (_, key, ms, id) = &row.key;
            if !key.starts_with(prefix) {
                return Ok((out, false));
            }
            if marker_applies {
                let past = match &resume {
                    Some((rms, rid)) => {
                        (key.as_str(), *ms, id.as_str()) > (marker.key.as_str(), *rms, rid.as_str())
                    }
                    None => key.as_str() > marker.key.as_str(),
                };
                if !past {
                    continue;
                }
            }
            if out.len() == limit {
                return Ok((out, true));
            }
            // Index and header change in one transaction; a row without its header (an
            // older om aborted the upload after an upgrade: downgrades are not supported) is
            // skipped.
            let Some(u) = header_at(snapshot, id).await? else {
                tracing::warn!(
                    upload = %id,
                    "the upload index names an upload that does not exist; skipped"
                );
                continue;
            };
            out.push(u);
        }
        match rows.rows.last() {
            Some(last) if rows.more => {
                // Strictly after the last row: its id with a 0 byte appended sorts next.
                let mut next = last.key.clone();
                next.3.push('\0');
                from = next;
            }
            _ => return Ok((out, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proto_crate::BlockGroup;

    use super::*;
    use crate::OzoneManager;

    async fn om(dir: &std::path::Path) -> OzoneManager {
        let om = crate::test_oms::with_five_datanodes(dir).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        om
    }

    async fn commit_part(om: &OzoneManager, upload: &str, n: u32, len: u64) -> BlockGroup {
        crate::test_oms::commit_part(om, upload, n, len, &format!("e{n}")).await
    }

    async fn header_bytes(om: &OzoneManager, id: &str) -> usize {
        UPLOADS
            .get(&om.store, &id.to_string())
            .await
            .expect("get")
            .expect("row")
            .value
            .0
            .len()
    }

    /// Rows of `table`.
    async fn count<K: meta_store::codec::Codec, V: meta_store::codec::Codec>(
        om: &OzoneManager,
        table: meta_store::Table<K, V>,
    ) -> u64 {
        table.count(&om.store, &()).await.expect("count")
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
            .await
            .expect("initiate");
        let abort = om
            .initiate_multipart_upload("b", "a", None, BTreeMap::new())
            .await
            .expect("initiate");
        for n in 1..=parts {
            commit_part(&om, &complete, n, 10).await;
            if n <= 40 {
                commit_part(&om, &abort, n, 10).await;
            }
        }
        assert_eq!(om.pending_deletions().await.expect("pending"), 0);
        let key = om
            .complete_multipart_upload(&complete, &kept, 0, BTreeMap::new())
            .await
            .expect("complete");
        assert_eq!(key.block_groups.len(), kept.len());
        om.abort_multipart_upload(&abort).await.expect("abort");
        let replicas = 5u64;
        let freed = u64::from(parts) - kept.len() as u64 + 40;
        assert_eq!(
            om.staged_deletions().await.expect("staged"),
            u64::from(parts) + 40
        );
        assert_eq!(
            om.pending_deletions().await.expect("pending"),
            freed * replicas
        );
        assert!(matches!(
            om.list_parts(&complete, 0, 10).await,
            Err(OmError::NoSuchUpload(_))
        ));
        assert_eq!(
            om.expand_staged_deletions().await.expect("expand"),
            freed * replicas
        );
        assert_eq!(om.staged_deletions().await.expect("staged"), 0);
        assert_eq!(
            om.pending_deletions().await.expect("pending"),
            freed * replicas
        );
        assert_eq!(count(&om, PARTS).await, 0);
        assert_eq!(count(&om, DROPPED_UPLOADS).await, 0);
        assert_eq!(
            om.lookup_key("b", "k").await.expect("key").block_groups,
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
            .await
            .expect("initiate");
        let empty = header_bytes(&om, &id).await;
        for n in 1..=30 {
            commit_part(&om, &id, n, 10).await;
        }
        assert_eq!(header_bytes(&om, &id).await, empty);
        assert_eq!(count(&om, PARTS).await, 30);
    }

    /// ListParts pages by part number: 30 parts in pages of 7, then the header alone.
    #[tokio::test]
    async fn parts_page_by_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        let id = om
            .initiate_multipart_upload("b", "k", None, BTreeMap::new())
            .await
            .expect("initiate");
        for n in (2..=60).step_by(2) {
            commit_part(&om, &id, n, u64::from(n)).await;
        }
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let (u, more) = om.list_parts(&id, after, 7).await.expect("page");
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
            om.list_parts(&id, 3, 1).await.expect("page").0.parts[0].part_number,
            4
        );
        assert_eq!(
            om.list_parts(&id, 60, 10).await.expect("page"),
            (om.list_parts(&id, 0, 0).await.expect("header").0, false)
        );
        assert!(
            om.list_parts(&id, u32::MAX, 10)
                .await
                .expect("page")
                .0
                .parts
                .is_empty()
        );
        let (header, more) = om.list_parts(&id, 0, 0).await.expect("header");
        assert!(header.parts.is_empty() && more);
    }

    /// ListMultipartUploads pages in S3's order (key, then initiation) with both markers,
    /// whatever the page size; a marker upload gone since resumes after its key; another
    /// bucket's uploads and keys outside the prefix are never listed.
    #[tokio::test]
    async fn uploads_page_in_key_then_initiation_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = om(dir.path()).await;
        om.create_bucket("other", None, None).await.expect("bucket");
        let mut ids = Vec::new();
        for key in ["p/a", "p/b", "p/b", "p/b", "p/c", "q", "p/a"] {
            let id = om
                .initiate_multipart_upload("b", key, None, BTreeMap::new())
                .await
                .expect("initiate");
            ids.push((key.to_string(), id));
        }
        om.initiate_multipart_upload("other", "p/a", None, BTreeMap::new())
            .await
            .expect("other bucket");
        // S3's order: by key, then initiation time, then id (uploads of one millisecond).
        let mut initiated = std::collections::HashMap::new();
        for (_, id) in &ids {
            let at = om
                .list_parts(id, 0, 0)
                .await
                .expect("header")
                .0
                .initiated_unix_ms;
            initiated.insert(id.clone(), at);
        }
        let mut want: Vec<(String, String)> = ids
            .iter()
            .filter(|(k, _)| k.starts_with("p/"))
            .cloned()
            .collect();
        want.sort_by_key(|(k, id)| (k.clone(), initiated[id], id.clone()));
        for limit in 1..=7 {
            let mut marker = UploadsMarker::default();
            let mut seen = Vec::new();
            loop {
                let (page, more) = om
                    .list_multipart_uploads("b", "p/", &marker, limit)
                    .await
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
            .await
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
            .await
            .expect("header")
            .0
            .initiated_unix_ms;
        om.abort_multipart_upload(&first_b).await.expect("abort");
        let marker = |initiated_unix_ms| UploadsMarker {
            key: "p/b".into(),
            upload_id: Some(first_b.clone()),
            initiated_unix_ms,
        };
        let keys = async |marker: &UploadsMarker| {
            let (page, _) = om
                .list_multipart_uploads("b", "", marker, 10)
                .await
                .expect("page");
            page.into_iter().map(|u| u.key).collect::<Vec<_>>()
        };
        // Regression: a marker upload gone since still resumes right after itself, by the
        // time its id carries or the one given, so the uploads of its key initiated later are
        // listed (without it, an upload completed between two pages hid the rest of its
        // key's uploads).
        assert_eq!(keys(&marker(None)).await, ["p/b", "p/b", "p/c", "q"]);
        assert_eq!(
            keys(&marker(Some(first_b_ms))).await,
            ["p/b", "p/b", "p/c", "q"]
        );
        // An id that carries no time (made before ids did) resumes after its key.
        let old_style = UploadsMarker {
            key: "p/b".into(),
            upload_id: Some("0123456789abcdef0123456789abcdef".into()),
            initiated_unix_ms: None,
        };
        assert_eq!(keys(&old_style).await, ["p/c", "q"]);
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
            .await
            .expect("page");
        assert_eq!((page.len(), more), (1, false));
        assert!(matches!(
            om.list_multipart_uploads("gone", "", &UploadsMarker::default(), 10)
                .await,
            Err(OmError::BucketNotFound(_))
        ));
    }
}
