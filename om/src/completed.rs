//! Completed multipart uploads, remembered for [`COMPLETION_RETRY_WINDOW`] so that a
//! CompleteMultipartUpload retried after it succeeded (the client lost the answer) gets the
//! same answer instead of `NoSuchUpload` — as Amazon answers such a retry with 200 and the
//! object's ETag. A retry is answered only while the key is still the one that completion
//! made (its generation) and names the same parts; otherwise the upload is gone.
//!
//! Bounded: records older than the window are pruned by the lease reaper through a table
//! ordered by completion time (`completed_uploads_by_time`).

use std::time::Duration;

use meta_store::{Transaction, transact};
use proto_crate::KeyInfo;

use crate::manager::now_ms;
use crate::tables::{COMPLETED, COMPLETED_BY_TIME};
use crate::{OmError, OzoneManager};

/// How long a completed upload's answer is kept for retries: one day.
pub const COMPLETION_RETRY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The part list `parts` as recorded.
pub(crate) fn signature(parts: &[(u32, String)]) -> String {
    parts
        .iter()
        .map(|(n, e)| format!("{n}:{}", e.trim_matches('"')))
        .collect::<Vec<_>>()
        .join(",")
}

/// Records the completion of `upload_id` into `key` (written in the same transaction, with a
/// new generation: the commit's revision, which this row gets too), in `tx`.
pub(crate) fn record_in(tx: &Transaction, upload_id: &str, key: &KeyInfo, parts: &[(u32, String)]) {
    let at = now_ms();
    COMPLETED.put_in(
        tx,
        &upload_id.to_string(),
        &(
            key.bucket.clone(),
            key.name.clone(),
            0,
            at,
            signature(parts),
        ),
    );
    COMPLETED_BY_TIME.put_in(tx, &(at, upload_id.to_string()), &());
}

/// The key a retried completion of `upload_id` with `parts` answers with, if `upload_id` was
/// completed with those parts and the key is still what it made (the generation the record
/// holds, or with 0 the revision of the record's own row, which the completion wrote with the
/// key).
pub(crate) async fn answer(
    tx: &Transaction,
    upload_id: &str,
    parts: &[(u32, String)],
) -> Result<Option<KeyInfo>, OmError> {
    let Some(((bucket, key, generation, _, sig), revision)) =
        COMPLETED.get_row_in(tx, &upload_id.to_string()).await?
    else {
        return Ok(None);
    };
    if sig != signature(parts) {
        return Ok(None);
    }
    let made = if generation == 0 {
        revision
    } else {
        Some(generation)
    };
    let Some(info) = crate::keys::key_in(tx, &bucket, &key).await? else {
        return Ok(None);
    };
    Ok((Some(info.generation) == made).then_some(info))
}

impl OzoneManager {
    /// Forgets completed uploads older than [`COMPLETION_RETRY_WINDOW`]. Returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn prune_completed_uploads(&self) -> Result<usize, OmError> {
        let window = u64::try_from(COMPLETION_RETRY_WINDOW.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms().saturating_sub(window);
        let mut pruned = 0;
        loop {
            // Two rows an upload: a bounded number per transaction. Read first: most passes
            // find nothing, and need no write.
            let rows = COMPLETED_BY_TIME
                .scan(&self.store, &(), None, crate::deletion::TXN_BATCH / 2)
                .await?;
            let old: Vec<(u64, String)> = rows
                .rows
                .into_iter()
                .map(|r| r.key)
                .take_while(|(at, _)| *at < cutoff)
                .collect();
            if old.is_empty() {
                return Ok(pruned);
            }
            transact(&self.store, |tx| {
                let old = &old;
                Box::pin(async move {
                    for (at, id) in old {
                        COMPLETED_BY_TIME.delete_in(&tx, &(*at, id.clone()));
                        COMPLETED.delete_in(&tx, id);
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await?;
            pruned += old.len();
        }
    }
}
