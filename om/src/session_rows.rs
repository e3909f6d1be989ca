//! Open-key sessions as rows: the only record of a session, so that a write in progress
//! survives an om restart and any om sharing the metadata store serves its calls (Ozone keeps
//! open keys in its OpenKeyTable for the same reasons).
//!
//! Three rows a session, written together when it opens (durably, before its id is handed
//! out) and removed together in the transaction that ends it (commit, abort, expiry:
//! `end_session` in `deletion.rs`):
//! - `open_sessions`: session id -> `OpenSessionRecord` (client, bucket, key, replication,
//!   block size, the part it commits into, and the groups allocated to it), rewritten by each
//!   allocation in the allocation's transaction (so a session of any number of groups ends by
//!   removing one row, within the metadata store's bounds per transaction; Ozone's
//!   OpenKeyTable entry grows the same way);
//! - `open_session_leases`: session id -> (last open, allocation or renewal, unix ms; client),
//!   which a renewal rewrites and the expiring service scans;
//! - `open_sessions_by_client`: (client, session id), over which a client's sessions are
//!   counted against its bound.
//!
//! Files from before the metadata store kept a row per group in a redb table `open_groups`;
//! at open they are moved into their sessions' rows (`old_layout.rs`). Rows from before the
//! leases have no lease or client row: [`index_unleased`] gives them theirs at open.

use std::collections::HashSet;

use meta_store::codec::Raw;
use meta_store::{MetaStore, Transaction, transact};
use prost::Message;
use proto_crate::BlockGroup;
use proto_crate::wire::om as pb;

use crate::OmError;
use crate::manager::{OpenKeySession, SessionTarget};
use crate::tables::{OPEN_SESSIONS, SESSION_LEASES, SESSIONS_BY_CLIENT, each_row};

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

/// Writes a new session `id`'s rows in `tx`: its record `r` (from [`record`]), its lease
/// from `now_ms` (unix ms) and its client's index row.
pub(crate) fn open_in(tx: &Transaction, id: u64, r: &pb::OpenSessionRecord, now_ms: u64) {
    put_in(tx, id, r);
    SESSION_LEASES.put_in(tx, &id, &(now_ms, r.client.clone()));
    SESSIONS_BY_CLIENT.put_in(tx, &(r.client.clone(), id), &());
}

/// Rewrites session `id`'s record (`r`, from [`record`] or [`get_in`]) in `tx`.
pub(crate) fn put_in(tx: &Transaction, id: u64, r: &pb::OpenSessionRecord) {
    OPEN_SESSIONS.put_in(tx, &id, &Raw(r.encode_to_vec()));
}

/// Restarts session `id`'s lease at `now_ms` (unix ms) in `tx`, its client `client`.
pub(crate) fn touch_in(tx: &Transaction, id: u64, client: &str, now_ms: u64) {
    SESSION_LEASES.put_in(tx, &id, &(now_ms, client.to_string()));
}

/// Session `id`'s lease as `tx` sees it: (last activity unix ms, client), if it is open.
///
/// # Errors
/// Store errors.
pub(crate) async fn lease_in(tx: &Transaction, id: u64) -> Result<Option<(u64, String)>> {
    Ok(SESSION_LEASES.get_in(tx, &id).await?)
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

/// Session `id` as the store holds it now, if it is open.
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`] for a row that does not decode.
pub(crate) async fn get(store: &MetaStore, id: u64) -> Result<Option<OpenKeySession>> {
    let Some(row) = OPEN_SESSIONS.get(store, &id).await? else {
        return Ok(None);
    };
    decode_record(&row.value.0)
        .map(|(r, groups)| Some(session_of(r, groups)))
        .map_err(|why| OmError::CorruptRecord {
            what: format!("open session {id}"),
            source: why.into(),
        })
}

/// Removes session `id`'s rows in `tx` (none: fine).
///
/// # Errors
/// Store errors.
pub(crate) async fn remove_in(tx: &Transaction, id: u64) -> Result<()> {
    if let Some((_, client)) = SESSION_LEASES.get_in(tx, &id).await? {
        SESSIONS_BY_CLIENT.delete_in(tx, &(client, id));
    }
    SESSION_LEASES.delete_in(tx, &id);
    OPEN_SESSIONS.delete_in(tx, &id);
    Ok(())
}

/// How many sessions `client` holds open.
///
/// # Errors
/// Store errors.
pub(crate) async fn count_of_client(store: &MetaStore, client: &str) -> Result<u64> {
    Ok(SESSIONS_BY_CLIENT
        .count(store, &(client.to_string(),))
        .await?)
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

/// The session a stored record describes.
fn session_of(
    (r, replication): (pb::OpenSessionRecord, proto_crate::ReplicationConfig),
    allocated: Vec<BlockGroup>,
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
        bucket: r.bucket,
        key: r.key,
        replication,
        block_size: r.block_size,
        allocated,
        target,
    }
}

/// Every group the open sessions hold, read at one snapshot, a page at a time (rows that do
/// not decode are skipped; [`index_unleased`] gives them up at the next open).
///
/// # Errors
/// Store errors.
pub(crate) async fn all_allocated(store: &MetaStore) -> Result<Vec<BlockGroup>> {
    let snapshot = store.snapshot().await?;
    let mut groups = Vec::new();
    each_row(&snapshot, OPEN_SESSIONS, &(), |_, v| {
        if let Ok((_, mut g)) = decode_record(&v.0) {
            groups.append(&mut g);
        }
        Ok(())
    })
    .await?;
    Ok(groups)
}

/// At open: gives every session row without a lease (written before leases were rows) a
/// lease from `now_ms` and its client's index row, and removes rows that do not decode (with
/// a warning; their writes are given up, and their replicas left to the orphan sweep), a
/// bounded number per transaction. Returns how many sessions are open.
///
/// # Errors
/// Store errors.
pub(crate) async fn index_unleased(store: &MetaStore, now_ms: u64) -> Result<usize> {
    let snapshot = store.snapshot().await?;
    let mut leased = HashSet::new();
    each_row(&snapshot, SESSION_LEASES, &(), |id, _| {
        leased.insert(id);
        Ok(())
    })
    .await?;
    let mut open = 0;
    let mut unleased = Vec::new();
    let mut unreadable = Vec::new();
    each_row(&snapshot, OPEN_SESSIONS, &(), |id, v| {
        match pb::OpenSessionRecord::decode(v.0.as_slice()) {
            Ok(r) => {
                open += 1;
                if !leased.contains(&id) {
                    unleased.push((id, r.client));
                }
            }
            Err(why) => {
                // One bad row must not keep the om from starting: that write is lost, the
                // rest go on.
                tracing::warn!(session = id, error = %why, "an open session's row does not decode; its write is given up");
                unreadable.push(id);
            }
        }
        Ok(())
    })
    .await?;
    for chunk in unleased.chunks(crate::deletion::TXN_BATCH / 2) {
        transact(store, |tx| {
            Box::pin(async move {
                for (id, client) in chunk {
                    // Ended, or given a lease, since the snapshot: nothing to do.
                    if OPEN_SESSIONS.get_in(&tx, id).await?.is_some()
                        && lease_in(&tx, *id).await?.is_none()
                    {
                        touch_in(&tx, *id, client, now_ms);
                        SESSIONS_BY_CLIENT.put_in(&tx, &(client.clone(), *id), &());
                    }
                }
                Ok::<(), OmError>(())
            })
        })
        .await?;
    }
    // Three rows removed and one read a session.
    for chunk in unreadable.chunks(crate::deletion::TXN_BATCH / 3) {
        transact(store, |tx| {
            Box::pin(async move {
                for id in chunk {
                    remove_in(&tx, *id).await?;
                }
                Ok::<(), OmError>(())
            })
        })
        .await?;
    }
    Ok(open)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::OmError;

    /// A session row that does not decode is given up (with a warning) instead of keeping the
    /// om from starting; its groups are unknown, so they are left to the orphan sweep. Many
    /// such rows are removed within the store's operations per transaction (regression: 100
    /// sessions of three rows each went in one transaction, over etcd's 128).
    #[tokio::test]
    async fn unreadable_session_rows_are_given_up_at_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let id = {
            let om = crate::test_oms::with_five_datanodes(dir.path()).await;
            om.create_bucket("b", None, None).await.expect("bucket");
            let s = om.open_key("b", "k", None).await.expect("open");
            om.allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            let mut ids = vec![s.session_id];
            for i in 0..59 {
                let other = om
                    .open_key_as(&format!("c{i}"), "b", "k", None)
                    .await
                    .expect("open");
                ids.push(other.session_id);
            }
            transact(&om.store, |tx| {
                let ids = &ids;
                Box::pin(async move {
                    for id in ids {
                        OPEN_SESSIONS.put_in(&tx, id, &Raw(vec![0xff, 0xff, 0xff]));
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await
            .expect("garble");
            s.session_id
        };
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        assert_eq!(om.open_sessions().await.expect("count"), 0);
        assert!(matches!(
            om.commit_key(id, &[], 0, BTreeMap::new()).await,
            Err(OmError::NoSuchSession(_))
        ));
        assert_eq!(
            OPEN_SESSIONS.count(&om.store, &()).await.expect("count"),
            0,
            "the rows are gone"
        );
        assert_eq!(
            SESSION_LEASES.count(&om.store, &()).await.expect("count")
                + SESSIONS_BY_CLIENT
                    .count(&om.store, &())
                    .await
                    .expect("count"),
            0,
            "with their leases and client rows"
        );
    }
}
