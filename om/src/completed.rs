//! Completed multipart uploads, remembered for [`COMPLETION_RETRY_WINDOW`] so that a
//! CompleteMultipartUpload retried after it succeeded (the client lost the answer) gets the
//! same answer instead of `NoSuchUpload` — as Amazon answers such a retry with 200 and the
//! object's ETag. A retry is answered only while the key is still the one that completion
//! made (its generation) and names the same parts; otherwise the upload is gone.
//!
//! Bounded: records older than the window are pruned by the lease reaper through a table
//! ordered by completion time.

use std::time::Duration;

use proto_crate::KeyInfo;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::manager::{KEYS, decode, now_ms};
use crate::{OmError, OzoneManager};

/// How long a completed upload's answer is kept for retries: one day.
pub const COMPLETION_RETRY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// upload id -> (bucket, key, generation the completion gave the key, completion unix ms,
/// the completed part list as `number:etag,...`).
pub(crate) const COMPLETED: TableDefinition<&str, (&str, &str, u64, u64, &str)> =
    TableDefinition::new("completed_uploads");
/// (completion unix ms, upload id) -> (): the pruning order.
pub(crate) const COMPLETED_BY_TIME: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("completed_uploads_by_time");

/// The part list `parts` as recorded.
pub(crate) fn signature(parts: &[(u32, String)]) -> String {
    parts
        .iter()
        .map(|(n, e)| format!("{n}:{}", e.trim_matches('"')))
        .collect::<Vec<_>>()
        .join(",")
}

/// Records the completion of `upload_id` into `key`, in the completion's transaction.
pub(crate) fn record(
    txn: &WriteTransaction,
    upload_id: &str,
    key: &KeyInfo,
    parts: &[(u32, String)],
) -> Result<(), OmError> {
    let at = now_ms();
    let sig = signature(parts);
    txn.open_table(COMPLETED)?.insert(
        upload_id,
        (
            key.bucket.as_str(),
            key.name.as_str(),
            key.generation,
            at,
            sig.as_str(),
        ),
    )?;
    txn.open_table(COMPLETED_BY_TIME)?
        .insert((at, upload_id), ())?;
    Ok(())
}

/// The key a retried completion of `upload_id` with `parts` answers with, if `upload_id` was
/// completed with those parts and the key is still what it made.
pub(crate) fn answer(
    txn: &WriteTransaction,
    upload_id: &str,
    parts: &[(u32, String)],
) -> Result<Option<KeyInfo>, OmError> {
    let (bucket, key, generation, sig) = {
        let t = txn.open_table(COMPLETED)?;
        let Some(v) = t.get(upload_id)? else {
            return Ok(None);
        };
        let (b, k, g, _, s) = v.value();
        (b.to_string(), k.to_string(), g, s.to_string())
    };
    if sig != signature(parts) {
        return Ok(None);
    }
    let t = txn.open_table(KEYS)?;
    let Some(v) = t.get((bucket.as_str(), key.as_str()))? else {
        return Ok(None);
    };
    let info: KeyInfo = decode::<proto_crate::wire::om::KeyInfo, _>(v.value(), "key")?;
    Ok((info.generation == generation).then_some(info))
}

impl OzoneManager {
    /// Forgets completed uploads older than [`COMPLETION_RETRY_WINDOW`]. Returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn prune_completed_uploads(&self) -> Result<usize, OmError> {
        let window = u64::try_from(COMPLETION_RETRY_WINDOW.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms().saturating_sub(window);
        // Read first: most passes find nothing, and need no write transaction (or fsync).
        let old: Vec<(u64, String)> = {
            let read = self.db.begin_read()?;
            let t = read.open_table(COMPLETED_BY_TIME)?;
            t.range::<(u64, &str)>(..(cutoff, ""))?
                .map(|e| e.map(|(k, _)| (k.value().0, k.value().1.to_string())))
                .collect::<Result<_, _>>()?
        };
        if old.is_empty() {
            return Ok(0);
        }
        // Two rows an upload: a bounded number per transaction.
        for chunk in old.chunks(crate::deletion::TXN_BATCH / 2) {
            let txn = self.db.begin_write()?;
            {
                let mut by_time = txn.open_table(COMPLETED_BY_TIME)?;
                let mut done = txn.open_table(COMPLETED)?;
                for (at, id) in chunk {
                    by_time.remove((*at, id.as_str()))?;
                    done.remove(id.as_str())?;
                }
            }
            txn.commit()?;
        }
        Ok(old.len())
    }
}
