//! Conditional writes: a commit or deletion that names a [`WriteCondition`] is checked against
//! the key as it is inside the same write transaction that makes the change (compare-and-set),
//! never read first and written later. Every commit stamps the key with a new generation from
//! a counter in the same transaction (Ozone's `updateID`), which `If-Match` compares.

use proto_crate::WriteCondition;
use proto_crate::wire::om as pb;
use redb::{ReadableTable, WriteTransaction};

use crate::OmError;
use crate::manager::{COUNTERS, KEYS, decode};

/// Name of the generation counter in the `counters` table.
const GENERATION: &str = "key_generation";

/// Checks `condition` (if any) against `bucket/key` as `txn` sees it.
///
/// # Errors
/// [`OmError::ConditionFailed`] when it does not hold; database errors.
pub(crate) fn check(
    txn: &WriteTransaction,
    bucket: &str,
    key: &str,
    condition: Option<WriteCondition>,
) -> Result<(), OmError> {
    let Some(condition) = condition else {
        return Ok(());
    };
    let current = match txn.open_table(KEYS)?.get((bucket, key))? {
        Some(v) => Some(decode::<pb::KeyInfo, proto_crate::KeyInfo>(v.value(), "key")?.generation),
        None => None,
    };
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

/// The next key generation, taken in `txn` (1 for the first).
///
/// # Errors
/// Database errors.
pub(crate) fn next_generation(txn: &WriteTransaction) -> Result<u64, OmError> {
    let mut t = txn.open_table(COUNTERS)?;
    let next = t
        .get(GENERATION)?
        .map_or(1, |g| g.value().saturating_add(1));
    t.insert(GENERATION, next)?;
    Ok(next)
}
