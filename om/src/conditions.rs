//! Conditional writes: a commit or deletion that names a [`WriteCondition`] is checked against
//! the key as its own transaction reads it (compare-and-set: the commit is guarded on that
//! read), never read first and written later. Every commit gives the key a new generation
//! (Ozone's `updateID`), which `If-Match` compares: the revision of the commit that made it
//! (`keys.rs`).

use meta_store::Transaction;
use proto_crate::WriteCondition;

use crate::OmError;

/// Checks `condition` (if any) against `bucket/key` as `tx` sees it.
///
/// # Errors
/// [`OmError::ConditionFailed`] when it does not hold; store errors.
pub(crate) async fn check(
    tx: &Transaction,
    bucket: &str,
    key: &str,
    condition: Option<WriteCondition>,
) -> Result<(), OmError> {
    let Some(condition) = condition else {
        return Ok(());
    };
    let current = crate::keys::key_in(tx, bucket, key)
        .await?
        .map(|k| k.generation);
    let failed = |reason: String| OmError::ConditionFailed {
        bucket: bucket.to_string(),
        key: key.to_string(),
        reason,
    };
    match (condition, current) {
        (WriteCondition::NotExists, None) => Ok(()),
        (WriteCondition::NotExists, Some(_)) => Err(failed("the key exists".into())),
        (WriteCondition::Generation(want), Some(have)) if want == have => Ok(()),
        (WriteCondition::Generation(want), Some(have)) => Err(failed(format!(
            "the key is at generation {have}, not {want}"
        ))),
        (WriteCondition::Generation(want), None) => Err(failed(format!(
            "the key does not exist (expected generation {want})"
        ))),
    }
}
