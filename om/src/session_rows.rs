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
//! Files from before this layout kept a row per group in a table `open_groups`; at open its
//! rows move into their sessions' rows, those of no session are staged for deletion, and the
//! table is dropped, in the transaction that loads the sessions.

use std::collections::HashMap;

use prost::Message;
use proto_crate::BlockGroup;
use proto_crate::wire::om as pb;
use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use crate::OmError;
use crate::deletion::stage_groups;
use crate::manager::{OpenKeySession, SessionTarget};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Open sessions: session id -> encoded `OpenSessionRecord`.
pub(crate) const OPEN_SESSIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("open_sessions");
/// The old layout's groups of open sessions: (session id, container id, local id) -> encoded
/// `BlockGroup`; read once at open, then dropped.
const OLD_OPEN_GROUPS: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("open_groups");

/// Creates the table (inside `txn`, with the om's other tables at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?;
    Ok(())
}

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

/// Writes session `id`'s row (`r`, from [`record`]) in `txn`.
pub(crate) fn insert(txn: &WriteTransaction, id: u64, r: &pb::OpenSessionRecord) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?
        .insert(id, r.encode_to_vec().as_slice())?;
    Ok(())
}

/// Session `id`'s stored record in `txn`, if its row exists.
///
/// # Errors
/// Database errors; [`OmError::CorruptRecord`] for a row that does not decode.
pub(crate) fn get(txn: &WriteTransaction, id: u64) -> Result<Option<pb::OpenSessionRecord>> {
    let t = txn.open_table(OPEN_SESSIONS)?;
    let Some(v) = t.get(id)? else {
        return Ok(None);
    };
    pb::OpenSessionRecord::decode(v.value())
        .map(Some)
        .map_err(|e| OmError::CorruptRecord {
            what: "open session".into(),
            source: Box::new(e),
        })
}

/// Removes session `id`'s row in `txn` (none: fine).
pub(crate) fn remove(txn: &WriteTransaction, id: u64) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?.remove(id)?;
    Ok(())
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

/// Reads every session back with its allocated groups, its lease starting at `now`; in the
/// same transaction, drops rows that do not decode (with a warning), and moves the old
/// layout's `open_groups` rows into their sessions' rows (staging those of no session for
/// deletion) and drops that table. Returns the sessions and how many groups were staged.
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
            Ok((r, groups)) => {
                sessions.insert(id, session_of(r, groups, now));
            }
            Err(why) => {
                // One bad row must not keep the om from starting: that write is lost (its
                // replicas are left to the orphan sweep), the rest go on.
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
    let orphans = move_old_open_groups(&txn, &mut sessions)?;
    stage_groups(&txn, &orphans)?;
    txn.commit()?;
    let mut out: Vec<(u64, OpenKeySession)> = sessions.into_iter().collect();
    out.sort_by_key(|(id, _)| *id);
    Ok((out, orphans.len()))
}

/// Moves the rows of the old layout's `open_groups` table (when the file has one) into the
/// rows of their `sessions` (in (container, local) order after the groups the row already
/// has) and drops the table; returns the groups of no session. A row that does not decode
/// is dropped with a warning: its locations are unknown, so its replicas are left to the
/// orphan sweep.
fn move_old_open_groups(
    txn: &WriteTransaction,
    sessions: &mut HashMap<u64, OpenKeySession>,
) -> Result<Vec<BlockGroup>> {
    if !txn
        .list_tables()?
        .any(|t| t.name() == OLD_OPEN_GROUPS.name())
    {
        return Ok(Vec::new());
    }
    let mut orphans = Vec::new();
    let mut grown = std::collections::BTreeSet::new();
    for entry in txn.open_table(OLD_OPEN_GROUPS)?.iter()? {
        let (k, v) = entry?;
        let (session, container, local) = k.value();
        let g = match crate::manager::decode::<pb::BlockGroup, BlockGroup>(v.value(), "open group")
        {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(session, container, local, error = %e, "an open group's row does not decode; dropped");
                continue;
            }
        };
        match sessions.get_mut(&session) {
            Some(s) => {
                if !s
                    .allocated
                    .iter()
                    .any(|a| (a.container_id, a.local_id) == (container, local))
                {
                    s.allocated.push(g);
                    grown.insert(session);
                }
            }
            None => orphans.push(g),
        }
    }
    for id in grown {
        if let Some(s) = sessions.get(&id) {
            insert(txn, id, &record(s))?;
        }
    }
    txn.delete_table(OLD_OPEN_GROUPS)?;
    tracing::info!(
        sessions = sessions.len(),
        "moved the groups of open sessions into their sessions' rows"
    );
    Ok(orphans)
}
