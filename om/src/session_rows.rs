//! Open-key sessions as rows, so that a write in progress survives an om restart (Ozone
//! keeps open keys in its OpenKeyTable for the same reason).
//!
//! `open_sessions` holds one row per session (session id -> `OpenSessionRecord`: client,
//! bucket, key, replication, block size, and the part it commits into); the groups
//! allocated to a session are its rows in `open_groups`. A session's row is written when it
//! opens (durably, before its id is handed out) and removed in the transaction that ends it
//! (commit, abort, expiry: `end_session` in `deletion.rs`). At open the om loads every row back with its groups, and each
//! session's lease starts again from the open: a writer that was streaming when the om
//! stopped goes on (allocations and commit name its session id), and one that is gone
//! expires one lease later. `open_groups` rows of no session (a file from before session
//! rows, or a session whose row was never written) are logged for deletion, as before.

use std::collections::HashMap;

use prost::Message;
use proto_crate::BlockGroup;
use proto_crate::wire::om as pb;
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::OmError;
use crate::deletion::{OPEN_GROUPS, log_groups};
use crate::manager::{OpenKeySession, SessionTarget};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Open sessions: session id -> encoded `OpenSessionRecord`.
pub(crate) const OPEN_SESSIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("open_sessions");

/// Creates the table (inside `txn`, with the om's other tables at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?;
    Ok(())
}

/// What is stored of session `s` (all but its lease and groups).
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
    }
}

/// Writes session `id`'s row (`r`, from [`record`]) in `txn`.
pub(crate) fn insert(txn: &WriteTransaction, id: u64, r: &pb::OpenSessionRecord) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?
        .insert(id, r.encode_to_vec().as_slice())?;
    Ok(())
}

/// Removes session `id`'s row in `txn` (none: fine).
pub(crate) fn remove(txn: &WriteTransaction, id: u64) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?.remove(id)?;
    Ok(())
}

/// The stored record `bytes`, with its replication parsed.
fn decode_record(
    bytes: &[u8],
) -> std::result::Result<(pb::OpenSessionRecord, proto_crate::ReplicationConfig), String> {
    let r = pb::OpenSessionRecord::decode(bytes).map_err(|e| e.to_string())?;
    let replication = r
        .replication
        .parse()
        .map_err(|e: proto_crate::ProtocolError| e.to_string())?;
    Ok((r, replication))
}

/// The session a stored record describes, its lease starting at `now`, no groups yet.
fn session_of(
    (r, replication): (pb::OpenSessionRecord, proto_crate::ReplicationConfig),
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
        allocated: Vec::new(),
        target,
    }
}

/// Reads every session back with its allocated groups (in (container, local) order), its
/// lease starting at `now`; in the same transaction, drops rows that do not decode (with a
/// warning), and logs for deletion the `open_groups` rows of no session and removes them.
/// Returns the sessions and how many groups were logged.
pub(crate) fn load(
    db: &redb::Database,
    now: std::time::Instant,
) -> Result<(Vec<(u64, OpenKeySession)>, usize)> {
    let txn = db.begin_write()?;
    let mut sessions: HashMap<u64, OpenKeySession> = HashMap::new();
    let mut unreadable = Vec::new();
    for entry in txn.open_table(OPEN_SESSIONS)?.iter()? {
        let (k, v) = entry?;
        let id = k.value();
        match decode_record(v.value()) {
            Ok(r) => {
                sessions.insert(id, session_of(r, now));
            }
            Err(why) => {
                // One bad row must not keep the om from starting: that write is lost
                // (its groups are reclaimed below), the rest go on.
                tracing::warn!(session = id, error = %why, "an open session's row does not decode; its write is given up");
                unreadable.push(id);
            }
        }
    }
    {
        let mut t = txn.open_table(OPEN_SESSIONS)?;
        for id in &unreadable {
            t.remove(id)?;
        }
    }
    let mut orphans = Vec::new();
    let mut orphan_rows = Vec::new();
    for entry in txn.open_table(OPEN_GROUPS)?.iter()? {
        let (k, v) = entry?;
        let (session, container, local) = k.value();
        let g = match crate::manager::decode::<pb::BlockGroup, BlockGroup>(v.value(), "open group")
        {
            Ok(g) => g,
            Err(e) => {
                // Its locations are unknown, so it cannot be logged: the replicas are left
                // to the orphan sweep (block reports), and the session loses the group.
                tracing::warn!(session, container, local, error = %e, "an open group's row does not decode; dropped");
                orphan_rows.push((session, container, local));
                continue;
            }
        };
        match sessions.get_mut(&session) {
            Some(s) => s.allocated.push(g),
            None => {
                orphans.push(g);
                orphan_rows.push((session, container, local));
            }
        }
    }
    {
        let mut t = txn.open_table(OPEN_GROUPS)?;
        for row in &orphan_rows {
            t.remove(*row)?;
        }
    }
    log_groups(&txn, &orphans)?;
    txn.commit()?;
    let mut out: Vec<(u64, OpenKeySession)> = sessions.into_iter().collect();
    out.sort_by_key(|(id, _)| *id);
    Ok((out, orphans.len()))
}
