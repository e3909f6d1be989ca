//! Open-key sessions as rows, so that a write in progress survives an om restart (Ozone
//! keeps open keys in its OpenKeyTable for the same reason).
//!
//! `open_sessions` holds one row per session (session id -> `OpenSessionRecord`: client,
//! bucket, key, replication, block size, the part it commits into, and the groups allocated
//! to it). A session's row is written when it opens (durably, before its id is handed out),
//! rewritten by each allocation in the allocation's transaction (so a session of any number
//! of groups ends by removing one row, within the metadata store's bounds per transaction;
//! Ozone's OpenKeyTable entry grows the same way), and removed in the transaction that ends
//! it (commit, abort, expiry: `end_session` in `deletion.rs`). At open the om loads every row
//! back, and each session's lease starts again from the open: a writer that was streaming
//! when the om stopped goes on (allocations and commit name its session id), and one that is
//! gone expires one lease later.
//!
//! Files from before the metadata store kept a row per group in a redb table `open_groups`;
//! at open they are moved into their sessions' rows (`old_layout.rs`).

use meta_store::codec::Raw;
use meta_store::{MetaStore, Transaction, transact};
use prost::Message;
use proto_crate::BlockGroup;
use proto_crate::wire::om as pb;

use crate::OmError;
use crate::manager::{OpenKeySession, SessionTarget};
use crate::tables::OPEN_SESSIONS;

type Result<T, E = OmError> = std::result::Result<T, E>;

/// What is stored of session `s` (all but its lease).
pub(crate) fn record(s: &OpenKeySession) -> pb::OpenSessionRecord {
    let (upload_id, part_number) = match &s.target {
        SessionTarget::Key => (String::new(), 0),
        SessionTarget::Part {
            upload_id,
            part_number,
        } => (upload_id.clone(), *part_number),
    };
    pb::OpenSessionRecord {
        client: s.client.clone(),
        bucket: s.bucket.clone(),
        key: s.key.clone(),
        replication: s.replication.to_string(),
        block_size: s.block_size,
        upload_id,
        part_number,
        allocated: s.allocated.iter().cloned().map(Into::into).collect(),
    }
}

/// Writes session `id`'s row (`r`, from [`record`]) in `tx`.
pub(crate) fn put_in(tx: &Transaction, id: u64, r: &pb::OpenSessionRecord) {
    OPEN_SESSIONS.put_in(tx, &id, &Raw(r.encode_to_vec()));
}

/// Session `id`'s stored record as `tx` sees it, if its row exists.
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`] for a row that does not decode.
pub(crate) async fn get_in(tx: &Transaction, id: u64) -> Result<Option<pb::OpenSessionRecord>> {
    let Some(v) = OPEN_SESSIONS.get_in(tx, &id).await? else {
        return Ok(None);
    };
    pb::OpenSessionRecord::decode(v.0.as_slice())
        .map(Some)
        .map_err(|e| OmError::CorruptRecord {
            what: "open session".into(),
            source: Box::new(e),
        })
}

/// Removes session `id`'s row in `tx` (none: fine).
pub(crate) fn remove_in(tx: &Transaction, id: u64) {
    OPEN_SESSIONS.delete_in(tx, &id);
}

/// A decoded record, its replication parsed, and its groups.
type Decoded = (
    (pb::OpenSessionRecord, proto_crate::ReplicationConfig),
    Vec<BlockGroup>,
);

/// The stored record `bytes`, with its replication and groups parsed.
fn decode_record(bytes: &[u8]) -> std::result::Result<Decoded, String> {
    let mut r = pb::OpenSessionRecord::decode(bytes).map_err(|e| e.to_string())?;
    let replication = r
        .replication
        .parse()
        .map_err(|e: proto_crate::ProtocolError| e.to_string())?;
    let groups = std::mem::take(&mut r.allocated)
        .into_iter()
        .map(BlockGroup::try_from)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(((r, replication), groups))
}

/// The session a stored record describes, its lease starting at `now`.
fn session_of(
    (r, replication): (pb::OpenSessionRecord, proto_crate::ReplicationConfig),
    allocated: Vec<BlockGroup>,
    now: std::time::Instant,
) -> OpenKeySession {
    let target = if r.upload_id.is_empty() {
        SessionTarget::Key
    } else {
        SessionTarget::Part {
            upload_id: r.upload_id,
            part_number: r.part_number,
        }
    };
    OpenKeySession {
        client: r.client,
        last_active: now,
        bucket: r.bucket,
        key: r.key,
        replication,
        block_size: r.block_size,
        allocated,
        target,
    }
}

/// Reads every session back with its allocated groups, its lease starting at `now`, a page
/// at a time; rows that do not decode are removed (with a warning; their writes are given up,
/// and their replicas left to the orphan sweep), a bounded number per transaction.
pub(crate) async fn load(
    store: &MetaStore,
    now: std::time::Instant,
) -> Result<Vec<(u64, OpenKeySession)>> {
    let mut sessions = Vec::new();
    let mut unreadable = Vec::new();
    let mut after = None;
    loop {
        let rows = OPEN_SESSIONS
            .scan(store, &(), after.as_ref(), crate::MAX_LIST_PAGE)
            .await?;
        for row in &rows.rows {
            match decode_record(&row.value.0) {
                Ok((r, groups)) => sessions.push((row.key, session_of(r, groups, now))),
                Err(why) => {
                    // One bad row must not keep the om from starting: that write is lost, the
                    // rest go on.
                    tracing::warn!(session = row.key, error = %why, "an open session's row does not decode; its write is given up");
                    unreadable.push(row.key);
                }
            }
        }
        match rows.rows.last() {
            Some(last) if rows.more => after = Some(last.key),
            _ => break,
        }
    }
    for chunk in unreadable.chunks(crate::deletion::TXN_BATCH) {
        transact(store, |tx| {
            Box::pin(async move {
                for id in chunk {
                    remove_in(&tx, *id);
                }
                Ok::<(), OmError>(())
            })
        })
        .await?;
    }
    Ok(sessions)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::OmError;

    /// A session row that does not decode is given up (with a warning) instead of keeping the
    /// om from starting; its groups are unknown, so they are left to the orphan sweep.
    #[tokio::test]
    async fn an_unreadable_session_row_is_given_up_at_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let id = {
            let om = crate::test_oms::with_five_datanodes(dir.path()).await;
            om.create_bucket("b", None, None).await.expect("bucket");
            let s = om.open_key("b", "k", None).await.expect("open");
            om.allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            transact(&om.store, |tx| {
                Box::pin(async move {
                    OPEN_SESSIONS.put_in(&tx, &s.session_id, &Raw(vec![0xff, 0xff, 0xff]));
                    Ok::<(), OmError>(())
                })
            })
            .await
            .expect("garble");
            s.session_id
        };
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        assert_eq!(om.open_sessions(), 0);
        assert!(matches!(
            om.commit_key(id, &[], 0, BTreeMap::new()).await,
            Err(OmError::NoSuchSession(_))
        ));
        assert_eq!(
            OPEN_SESSIONS.count(&om.store, &()).await.expect("count"),
            0,
            "the row is gone"
        );
    }
}
