//! Om files from before buckets, keys, sessions, multipart uploads and the deletion log moved
//! onto the metadata store: at open, their redb tables are brought to the last layout they had
//! (each older layout step, once), then copied into the store over the same file and dropped
//! (`store_moves.rs`; ARCHITECTURE.md, "Moving the om onto the store"). Nothing here runs for
//! a file made after the move: it has none of these tables.
//!
//! The layout steps, in the order they were made:
//! - buckets indexed and counted by owner (`buckets_by_owner`, `buckets_per_owner`);
//! - multipart parts as rows of their own (they were inside the upload's value);
//! - the groups of open sessions inside their sessions' rows (they were rows of
//!   `open_groups`; those of no session are staged for deletion).
//!
//! Key generations were numbers from a counter; after the move a key's generation is the
//! revision of the commit that made it (`keys.rs`), so the store's revision is first raised
//! past the counter: a generation handed out before never comes back.

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{BucketInfo, MultipartUpload};
use redb::{Database, ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use crate::OmError;
use crate::manager::decode;
use crate::store_moves::{Rows, move_old_table};

type Result<T, E = OmError> = std::result::Result<T, E>;

pub(crate) const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
pub(crate) const KEYS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("keys");
pub(crate) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
pub(crate) const BUCKETS_BY_OWNER: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("buckets_by_owner");
pub(crate) const BUCKETS_PER_OWNER: TableDefinition<&str, u64> =
    TableDefinition::new("buckets_per_owner");
pub(crate) const UPLOADS: TableDefinition<&str, &[u8]> = TableDefinition::new("multipart_uploads");
pub(crate) const PARTS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("multipart_parts");
pub(crate) const UPLOADS_BY_BUCKET: TableDefinition<(&str, &str, u64, &str), ()> =
    TableDefinition::new("multipart_uploads_by_bucket");
pub(crate) const DROPPED_UPLOADS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("dropped_uploads");
pub(crate) const COMPLETING: TableDefinition<&str, (u64, u64)> =
    TableDefinition::new("multipart_completing");
pub(crate) const OPEN_SESSIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("open_sessions");
pub(crate) const OPEN_GROUPS: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("open_groups");
pub(crate) const DELETED_GROUPS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("deleted_groups");
pub(crate) const DELETION_LOG: TableDefinition<(&str, u64, u64), (u32, u64)> =
    TableDefinition::new("deletion_log");
pub(crate) const COMPLETED: TableDefinition<&str, (&str, &str, u64, u64, &str)> =
    TableDefinition::new("completed_uploads");
pub(crate) const COMPLETED_BY_TIME: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("completed_uploads_by_time");

/// `COUNTERS` rows of the old layout steps, and their done values.
const LAYOUT_OWNERS: (&str, u64) = ("layout/bucket_owners", 2);
const LAYOUT_PARTS: (&str, u64) = ("layout/multipart", 2);
/// `COUNTERS` row of the last key generation handed out.
const GENERATION: &str = "key_generation";

/// Whether `db` holds any table of the old layout.
fn has_old_tables(db: &Database) -> Result<bool> {
    let txn = db.begin_write()?;
    let names = [
        BUCKETS.name(),
        KEYS.name(),
        COUNTERS.name(),
        UPLOADS.name(),
        PARTS.name(),
        OPEN_SESSIONS.name(),
        OPEN_GROUPS.name(),
        DELETED_GROUPS.name(),
        DELETION_LOG.name(),
        DROPPED_UPLOADS.name(),
        COMPLETED.name(),
    ];
    Ok(txn.list_tables()?.any(|t| names.contains(&t.name())))
}

/// Brings an old file's tables to their last layout and copies them into `own` (the store
/// over the same file), dropping each; nothing to do for a file without them. Rerun after a
/// crash, it copies what is left (the copy writes only absent rows, and the counters, which
/// the layout steps check, go last).
///
/// # Errors
/// Database and store errors; [`OmError::Internal`] when the file has rows to move and `own`
/// is `None` (the om's store is elsewhere).
pub(crate) fn move_onto_store(db: &Database, own: Option<&meta_store::RedbStore>) -> Result<()> {
    if !has_old_tables(db)? {
        return Ok(());
    }
    let txn = db.begin_write()?;
    txn.open_table(BUCKETS)?;
    txn.open_table(UPLOADS)?;
    txn.open_table(DROPPED_UPLOADS)?;
    txn.open_table(OPEN_SESSIONS)?;
    txn.open_table(KEYS)?;
    txn.open_table(COUNTERS)?;
    txn.open_table(BUCKETS_BY_OWNER)?;
    txn.open_table(BUCKETS_PER_OWNER)?;
    txn.open_table(PARTS)?;
    txn.open_table(UPLOADS_BY_BUCKET)?;
    txn.open_table(COMPLETING)?;
    txn.open_table(DELETED_GROUPS)?;
    txn.open_table(DELETION_LOG)?;
    txn.open_table(COMPLETED)?;
    txn.open_table(COMPLETED_BY_TIME)?;
    txn.commit()?;
    let indexed = index_owners(db)?;
    if indexed > 0 {
        tracing::info!(buckets = indexed, "indexed buckets by owner");
    }
    let split = split_parts_into_rows(db)?;
    if split > 0 {
        tracing::info!(
            uploads = split,
            "stored the parts of multipart uploads as rows of their own"
        );
    }
    let staged = move_open_groups(db)?;
    if staged > 0 {
        tracing::info!(
            groups = staged,
            "logged blocks of writes lost in an earlier om stop for deletion"
        );
    }
    copy_tables(db, own)
}

/// Copies every old table into the store and drops it.
fn copy_tables(db: &Database, own: Option<&meta_store::RedbStore>) -> Result<()> {
    use crate::tables as new;
    let raw = |v: &[u8]| meta_store::codec::Raw(v.to_vec());
    move_old_table(db, own, BUCKETS, |k, v, rows: &mut Rows| {
        rows.push(new::BUCKETS.row_bytes(&k.to_string(), &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, KEYS, |(b, k), v, rows: &mut Rows| {
        rows.push(new::KEYS.row_bytes(&(b.to_string(), k.to_string()), &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, BUCKETS_BY_OWNER, |(o, b), (), rows: &mut Rows| {
        rows.push(new::BUCKETS_BY_OWNER.row_bytes(&(o.to_string(), b.to_string()), &()));
        Ok(())
    })?;
    move_old_table(db, own, BUCKETS_PER_OWNER, |o, n, rows: &mut Rows| {
        rows.push(new::BUCKETS_PER_OWNER.row_bytes(&o.to_string(), &n));
        Ok(())
    })?;
    move_old_table(db, own, UPLOADS, |id, v, rows: &mut Rows| {
        rows.push(new::UPLOADS.row_bytes(&id.to_string(), &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, PARTS, |(id, n), v, rows: &mut Rows| {
        rows.push(new::PARTS.row_bytes(&(id.to_string(), n), &raw(v)));
        Ok(())
    })?;
    move_old_table(
        db,
        own,
        UPLOADS_BY_BUCKET,
        |(b, k, ms, id), (), rows: &mut Rows| {
            let key = (b.to_string(), k.to_string(), ms, id.to_string());
            rows.push(new::UPLOADS_BY_BUCKET.row_bytes(&key, &()));
            Ok(())
        },
    )?;
    move_old_table(db, own, DROPPED_UPLOADS, |id, v, rows: &mut Rows| {
        rows.push(new::DROPPED_UPLOADS.row_bytes(&id.to_string(), &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, COMPLETING, |id, mark, rows: &mut Rows| {
        rows.push(new::COMPLETING.row_bytes(&id.to_string(), &mark));
        Ok(())
    })?;
    move_old_table(db, own, OPEN_SESSIONS, |id, v, rows: &mut Rows| {
        rows.push(new::OPEN_SESSIONS.row_bytes(&id, &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, DELETED_GROUPS, |key, v, rows: &mut Rows| {
        rows.push(new::DELETED_GROUPS.row_bytes(&key, &raw(v)));
        Ok(())
    })?;
    move_old_table(db, own, DELETION_LOG, |(d, c, l), v, rows: &mut Rows| {
        rows.push(new::DELETION_LOG.row_bytes(&(d.to_string(), c, l), &v));
        Ok(())
    })?;
    move_old_table(
        db,
        own,
        COMPLETED,
        |id, (b, k, generation, at, sig), rows: &mut Rows| {
            let value = (
                b.to_string(),
                k.to_string(),
                generation,
                at,
                sig.to_string(),
            );
            rows.push(new::COMPLETED.row_bytes(&id.to_string(), &value));
            Ok(())
        },
    )?;
    move_old_table(
        db,
        own,
        COMPLETED_BY_TIME,
        |(at, id), (), rows: &mut Rows| {
            rows.push(new::COMPLETED_BY_TIME.row_bytes(&(at, id.to_string()), &()));
            Ok(())
        },
    )?;
    // Last: the layout steps above read their done marks here.
    let generation = std::cell::Cell::new(0);
    crate::store_moves::move_old_table_then(
        db,
        own,
        COUNTERS,
        |name, value, rows: &mut Rows| {
            match name {
                GENERATION => generation.set(value),
                "next_local_id" | "next_container_id" | crate::orphans::LOCATIONS_ADDED => {
                    rows.push(new::COUNTERS.row_bytes(&name.to_string(), &value));
                }
                // Layout marks: the layouts they mark are the only ones now.
                _ => {}
            }
            Ok(())
        },
        |store| {
            // Generations handed out before are below every commit revision from now on.
            store.raise_revision(generation.get())?;
            Ok(())
        },
    )?;
    Ok(())
}

/// Indexes and counts the owned buckets of a file written before `BUCKETS_BY_OWNER` or
/// `BUCKETS_PER_OWNER`, from the buckets themselves, once, in one transaction; returns how
/// many were indexed.
fn index_owners(db: &Database) -> Result<usize> {
    let txn = db.begin_write()?;
    if layout_done(&txn, LAYOUT_OWNERS)? {
        return Ok(0);
    }
    let mut owned = Vec::new();
    for entry in txn.open_table(BUCKETS)?.iter()? {
        let (_, v) = entry?;
        let b: BucketInfo = decode::<pb::BucketInfo, _>(v.value(), "bucket")?;
        if !b.owner.is_empty() {
            owned.push((b.owner, b.name));
        }
    }
    {
        let mut index = txn.open_table(BUCKETS_BY_OWNER)?;
        let mut counts = txn.open_table(BUCKETS_PER_OWNER)?;
        counts.retain(|_, _| false)?;
        let mut per_owner = std::collections::BTreeMap::<&str, u64>::new();
        for (owner, name) in &owned {
            index.insert((owner.as_str(), name.as_str()), ())?;
            *per_owner.entry(owner.as_str()).or_default() += 1;
        }
        for (owner, n) in per_owner {
            counts.insert(owner, n)?;
        }
    }
    txn.open_table(COUNTERS)?
        .insert(LAYOUT_OWNERS.0, LAYOUT_OWNERS.1)?;
    txn.commit()?;
    Ok(owned.len())
}

fn layout_done(txn: &WriteTransaction, (name, done): (&str, u64)) -> Result<bool> {
    Ok(txn.open_table(COUNTERS)?.get(name)?.map(|v| v.value()) == Some(done))
}

/// Rewrites uploads stored with their parts inside the upload's value into header, part and
/// index rows, once. One transaction, so a crash leaves either layout whole.
fn split_parts_into_rows(db: &Database) -> Result<usize> {
    let txn = db.begin_write()?;
    if layout_done(&txn, LAYOUT_PARTS)? {
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
    {
        let mut uploads = txn.open_table(UPLOADS)?;
        let mut index = txn.open_table(UPLOADS_BY_BUCKET)?;
        let mut parts = txn.open_table(PARTS)?;
        for u in &old {
            let mut header = pb::MultipartUploadInfo::from(u.clone());
            header.parts.clear();
            uploads.insert(u.upload_id.as_str(), header.encode_to_vec().as_slice())?;
            index.insert(
                (
                    u.bucket.as_str(),
                    u.key.as_str(),
                    u.initiated_unix_ms,
                    u.upload_id.as_str(),
                ),
                (),
            )?;
            for p in &u.parts {
                parts.insert(
                    (u.upload_id.as_str(), p.part_number),
                    pb::PartInfo::from(p.clone()).encode_to_vec().as_slice(),
                )?;
            }
        }
    }
    txn.open_table(COUNTERS)?
        .insert(LAYOUT_PARTS.0, LAYOUT_PARTS.1)?;
    txn.commit()?;
    Ok(old.len())
}

/// Moves the rows of `open_groups` (when the file has it) into their sessions' rows (after
/// the groups the row already has, skipping one it has), stages the groups of no session (or
/// of a session row that does not decode) for deletion as one row, and drops the table, in
/// one transaction. A group row that does not decode is dropped with a warning: its
/// locations are unknown, so its replicas are left to the orphan sweep. Returns the groups
/// staged.
fn move_open_groups(db: &Database) -> Result<usize> {
    let txn = db.begin_write()?;
    if !txn.list_tables()?.any(|t| t.name() == OPEN_GROUPS.name()) {
        return Ok(0);
    }
    let mut grown: std::collections::BTreeMap<u64, pb::OpenSessionRecord> =
        std::collections::BTreeMap::new();
    let mut orphans: Vec<pb::BlockGroup> = Vec::new();
    {
        let sessions = txn.open_table(OPEN_SESSIONS)?;
        for entry in txn.open_table(OPEN_GROUPS)?.iter()? {
            let (k, v) = entry?;
            let (session, container, local) = k.value();
            let g = match pb::BlockGroup::decode(v.value()) {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(session, container, local, error = %e, "an open group's row does not decode; dropped");
                    continue;
                }
            };
            let row = match grown.remove(&session) {
                Some(r) => Some(r),
                None => sessions
                    .get(session)?
                    .and_then(|v| pb::OpenSessionRecord::decode(v.value()).ok()),
            };
            match row {
                Some(mut r) => {
                    if !r
                        .allocated
                        .iter()
                        .any(|a| (a.container_id, a.local_id) == (container, local))
                    {
                        r.allocated.push(g);
                    }
                    grown.insert(session, r);
                }
                None => orphans.push(g),
            }
        }
    }
    {
        let mut sessions = txn.open_table(OPEN_SESSIONS)?;
        for (id, r) in &grown {
            sessions.insert(*id, r.encode_to_vec().as_slice())?;
        }
    }
    if !orphans.is_empty() {
        let row = pb::DeletedGroups {
            groups: orphans.clone(),
        }
        .encode_to_vec();
        txn.open_table(DELETED_GROUPS)?.insert(
            (crate::manager::now_ms(), rand::random::<u64>()),
            row.as_slice(),
        )?;
    }
    txn.delete_table(OPEN_GROUPS)?;
    txn.commit()?;
    tracing::info!(
        sessions = grown.len(),
        "moved the groups of open sessions into their sessions' rows"
    );
    Ok(orphans.len())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proto_crate::{
        BlockGroup, BlockLocation, CannedAcl, DatanodeDetails, DatanodeId, KeyInfo, PartInfo,
        Pipeline, ReplicaIndex, ReplicationConfig, WriteCondition,
    };
    use redb::ReadableDatabase;

    use super::*;
    use crate::{OmError, OzoneManager};

    /// An rs-3-2 group on the datanodes `with_five_datanodes` registers.
    fn group(container_id: u64, local_id: u64, length: u64) -> BlockGroup {
        BlockGroup {
            container_id,
            local_id,
            length,
            pipeline: Pipeline {
                locations: (0..5u32)
                    .map(|i| BlockLocation {
                        datanode: DatanodeDetails {
                            uuid: DatanodeId::from_u128(u128::from(i)),
                            address: format!("127.0.0.1:{}", 10_000 + i),
                        },
                        replica_index: ReplicaIndex::from_wire(i + 1),
                    })
                    .collect(),
            },
            token: None,
        }
    }

    fn bucket(name: &str, owner: &str) -> Vec<u8> {
        pb::BucketInfo::from(BucketInfo {
            name: name.into(),
            default_replication: ReplicationConfig::default(),
            block_size: 1 << 20,
            created_unix_ms: 1,
            owner: owner.into(),
            acl: CannedAcl::Private,
        })
        .encode_to_vec()
    }

    fn key(name: &str, generation: u64, groups: Vec<BlockGroup>) -> KeyInfo {
        KeyInfo {
            bucket: "b".into(),
            name: name.into(),
            length: groups.iter().map(|g| g.length).sum(),
            replication: ReplicationConfig::default(),
            block_groups: groups,
            block_size: 1 << 20,
            created_unix_ms: 1,
            metadata: BTreeMap::new(),
            generation,
        }
    }

    /// Writes an om file of the last layout before the metadata store, but with the older
    /// layouts' steps still to run: buckets without the owner index, an upload with its parts
    /// inside its value, the groups of an open session as `open_groups` rows (and one of no
    /// session), keys with counter generations, a deletion-log entry and a completed upload.
    fn write_old_file(dir: &std::path::Path) {
        let db = Database::create(dir.join("om.redb")).expect("db");
        let txn = db.begin_write().expect("write");
        {
            let mut buckets = txn.open_table(BUCKETS).expect("buckets");
            buckets
                .insert("b", bucket("b", "alice").as_slice())
                .expect("b");
            buckets.insert("c", bucket("c", "").as_slice()).expect("c");
            let k = key("k", 7, vec![group(3, 40, 10)]);
            txn.open_table(KEYS)
                .expect("keys")
                .insert(("b", "k"), pb::KeyInfo::from(k).encode_to_vec().as_slice())
                .expect("k");
            let mut counters = txn.open_table(COUNTERS).expect("counters");
            counters.insert(GENERATION, 7).expect("generation");
            counters.insert("next_local_id", 43).expect("local");
            counters.insert("next_container_id", 4).expect("container");
            let upload = MultipartUpload {
                upload_id: "u1".into(),
                bucket: "b".into(),
                key: "m".into(),
                replication: ReplicationConfig::default(),
                initiated_unix_ms: 5,
                parts: (1..=2u32)
                    .map(|n| PartInfo {
                        part_number: n,
                        etag: format!("e{n}"),
                        size: 10,
                        block_groups: vec![group(3, 40 + u64::from(n), 10)],
                        modified_unix_ms: 5,
                        metadata: BTreeMap::new(),
                    })
                    .collect(),
                metadata: BTreeMap::new(),
            };
            txn.open_table(UPLOADS)
                .expect("uploads")
                .insert(
                    "u1",
                    pb::MultipartUploadInfo::from(upload)
                        .encode_to_vec()
                        .as_slice(),
                )
                .expect("u1");
            let session = pb::OpenSessionRecord {
                client: String::new(),
                bucket: "b".into(),
                key: "w".into(),
                replication: ReplicationConfig::default().to_string(),
                block_size: 1 << 20,
                upload_id: String::new(),
                part_number: 0,
                allocated: Vec::new(),
            };
            txn.open_table(OPEN_SESSIONS)
                .expect("sessions")
                .insert(99, session.encode_to_vec().as_slice())
                .expect("session");
            let mut groups = txn.open_table(OPEN_GROUPS).expect("open groups");
            for (session, local) in [(99u64, 1u64), (1234, 2)] {
                groups
                    .insert(
                        (session, 9, local),
                        pb::BlockGroup::from(group(9, local, 0))
                            .encode_to_vec()
                            .as_slice(),
                    )
                    .expect("group");
            }
            txn.open_table(DELETION_LOG)
                .expect("log")
                .insert(("gone-datanode", 1, 2), (1, 123))
                .expect("log entry");
            txn.open_table(COMPLETED)
                .expect("completed")
                .insert("u0", ("b", "k", 7, crate::manager::now_ms(), "1:e"))
                .expect("completed");
        }
        txn.commit().expect("commit");
    }

    /// Names of the old tables left in the file.
    fn old_tables_left(om: &OzoneManager) -> Vec<String> {
        let read = om.own_file().begin_read().expect("read");
        let old = [
            "buckets",
            "keys",
            "counters",
            "buckets_by_owner",
            "buckets_per_owner",
            "multipart_uploads",
            "multipart_parts",
            "multipart_uploads_by_bucket",
            "dropped_uploads",
            "multipart_completing",
            "open_sessions",
            "open_groups",
            "deleted_groups",
            "deletion_log",
            "completed_uploads",
            "completed_uploads_by_time",
        ];
        read.list_tables()
            .expect("tables")
            .map(|t| t.name().to_string())
            .filter(|n| old.contains(&n.as_str()))
            .collect()
    }

    /// An om file from before the metadata store opens with everything in it: each older
    /// layout step runs (owner index, part rows, open groups into their sessions), every row
    /// moves into the store and the old tables are dropped; keys keep their generations, and
    /// generations made after stay above them; reserved id ranges go on from the counters.
    #[tokio::test]
    async fn an_old_file_moves_onto_the_store_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_old_file(dir.path());
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        assert!(old_tables_left(&om).is_empty());

        let k = om.lookup_key("b", "k").await.expect("key");
        assert_eq!(
            (k.generation, k.block_groups[0].local_id),
            (7, 40),
            "a key keeps its generation"
        );
        let filter = crate::BucketFilter {
            owner: Some("alice".into()),
            ..crate::BucketFilter::default()
        };
        let (owned, _) = om.list_buckets_page(&filter, 10).await.expect("owned");
        assert_eq!(owned.len(), 1, "the owner index was made");
        assert_eq!(
            crate::buckets::tests::counts(&om).await,
            [("alice".to_string(), 1)]
        );
        let (u, _) = om.list_parts("u1", 0, 10).await.expect("parts");
        assert_eq!(u.parts.len(), 2, "parts became rows");
        assert!(matches!(
            om.delete_bucket("b").await,
            Err(OmError::BucketNotEmpty(_))
        ));
        // The log entry, and the open group of no session (staged).
        assert_eq!(om.pending_deletions().await.expect("pending"), 1 + 5);
        assert_eq!(
            om.open_sessions().await.expect("count"),
            1,
            "the session resumed"
        );
        om.commit_key(99, &[group(9, 1, 3)], 3, BTreeMap::new())
            .await
            .expect("the resumed session commits the group of its old row");
        assert_eq!(
            om.complete_multipart_upload("u0", &[(1, "e".into())], 0, BTreeMap::new())
                .await
                .expect("a completed upload's retry is answered")
                .generation,
            7
        );

        let s = om.open_key("b", "new", None).await.expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        assert!(g.local_id >= 43 && g.container_id >= 4, "{g:?}");
        let overwritten = om
            .commit_key_if(
                s.session_id,
                &[BlockGroup { length: 1, ..g }],
                1,
                BTreeMap::new(),
                None,
            )
            .await
            .expect("commit");
        assert!(overwritten.generation > 7);
        let s = om.open_key("b", "k", None).await.expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let k2 = om
            .commit_key_if(
                s.session_id,
                &[BlockGroup { length: 1, ..g }],
                1,
                BTreeMap::new(),
                Some(WriteCondition::Generation(7)),
            )
            .await
            .expect("a conditional write on the old generation");
        assert!(k2.generation > overwritten.generation);
        drop(om);

        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        assert_eq!(
            om.lookup_key("b", "k").await.expect("key").generation,
            k2.generation,
            "reopened: nothing moves again"
        );
        assert_eq!(om.open_sessions().await.expect("count"), 0);
    }

    /// A file with the owner index but no counts (layout 1) gets its counts at open, from the
    /// buckets.
    #[tokio::test]
    async fn owner_counts_are_made_for_a_file_with_only_the_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = Database::create(dir.path().join("om.redb")).expect("db");
            let txn = db.begin_write().expect("write");
            {
                let mut buckets = txn.open_table(BUCKETS).expect("buckets");
                let mut index = txn.open_table(BUCKETS_BY_OWNER).expect("index");
                for (name, owner) in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")] {
                    buckets
                        .insert(name, bucket(name, owner).as_slice())
                        .expect("bucket");
                    index.insert((owner, name), ()).expect("index");
                }
                txn.open_table(COUNTERS)
                    .expect("counters")
                    .insert(LAYOUT_OWNERS.0, 1)
                    .expect("layout 1");
            }
            txn.commit().expect("commit");
        }
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        assert_eq!(
            crate::buckets::tests::counts(&om).await,
            [("alice".to_string(), 2), ("bob".to_string(), 1)]
        );
    }

    /// Old rows are copied into the om's own file only: an om whose store is elsewhere
    /// refuses to open over a file that holds them.
    #[tokio::test]
    async fn old_rows_are_not_left_behind_by_a_store_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_old_file(dir.path());
        let elsewhere = meta_store::MetaStore::Redb(
            meta_store::RedbStore::open(&dir.path().join("other.redb")).expect("store"),
        );
        let err = OzoneManager::open_on(crate::OmConfig::new(dir.path()), Some(elsewhere))
            .await
            .expect_err("the old rows would be stranded");
        assert!(matches!(err, OmError::Internal(_)), "{err}");
    }
}
