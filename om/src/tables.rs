//! The om's tables in the metadata store (`meta_store::Table`: rows of one ordered keyspace,
//! on redb in the om's own file or on etcd): buckets, keys, open sessions, multipart uploads,
//! staged deletions and the deletion log, completed uploads, and the counters they use. Values
//! of the `Raw` kind are encoded protobuf messages (`proto_crate::wire::om`). Every om change
//! is one `meta_store::transact` body over these rows, so it is atomic and guarded on what it
//! read, whichever store holds them. The modules that moved earlier (S3 users, block-token
//! keys, the datanode registry and operational states, the cluster id) keep their own tables.

use meta_store::codec::{Codec, Raw};
use meta_store::{Snapshot, Table};

use crate::OmError;

/// Buckets: name -> `BucketInfo`.
pub(crate) const BUCKETS: Table<String, Raw> = Table::new("buckets");
/// Buckets by (owner, name); buckets without an owner are not indexed.
pub(crate) const BUCKETS_BY_OWNER: Table<(String, String), ()> = Table::new("buckets_by_owner");
/// Buckets each owner holds: owner -> count (owners without buckets have no row).
pub(crate) const BUCKETS_PER_OWNER: Table<String, u64> = Table::new("buckets_per_owner");
/// Committed keys: (bucket, key) -> `KeyInfo`. A stored generation of 0 stands for the
/// revision of the commit that wrote the row (`keys.rs`).
pub(crate) const KEYS: Table<(String, String), Raw> = Table::new("keys");
/// Counters: `next_local_id` and `next_container_id` (the end of the last reserved id range,
/// `sessions.rs`), `locations_added` (`orphans.rs`).
pub(crate) const COUNTERS: Table<String, u64> = Table::new("counters");
/// Open sessions: session id -> `OpenSessionRecord` (`session_rows.rs`).
pub(crate) const OPEN_SESSIONS: Table<u64, Raw> = Table::new("open_sessions");
/// Open sessions' leases: session id -> (last open, allocation or renewal in unix ms on the
/// wall clock of the om that recorded it, client id). Kept apart from `OPEN_SESSIONS` so that
/// a renewal writes a few bytes, not the session's list of groups.
pub(crate) const SESSION_LEASES: Table<u64, (u64, String)> = Table::new("open_session_leases");
/// Open sessions by (client id, session id): a client's sessions are counted over its prefix.
pub(crate) const SESSIONS_BY_CLIENT: Table<(String, u64), ()> =
    Table::new("open_sessions_by_client");
/// Uploads in progress: upload id -> `MultipartUploadInfo` without its parts.
pub(crate) const UPLOADS: Table<String, Raw> = Table::new("multipart_uploads");
/// Uploaded parts: (upload id, part number) -> `PartInfo`.
pub(crate) const PARTS: Table<(String, u32), Raw> = Table::new("multipart_parts");
/// Uploads by (bucket, key, initiation ms, upload id): S3's listing order.
pub(crate) const UPLOADS_BY_BUCKET: Table<(String, String, u64, String), ()> =
    Table::new("multipart_uploads_by_bucket");
/// Uploads completed or aborted whose part rows remain: upload id -> `DroppedUpload`.
pub(crate) const DROPPED_UPLOADS: Table<String, Raw> = Table::new("dropped_uploads");
/// Completions under way: upload id -> (mark, since unix ms) (`upload_rows.rs`).
pub(crate) const COMPLETING: Table<String, (u64, u64)> = Table::new("multipart_completing");
/// Completed uploads: upload id -> (bucket, key, generation the completion gave the key or
/// 0 for the revision of this row, completion unix ms, the part list as `number:etag,...`).
pub(crate) const COMPLETED: Table<String, (String, String, u64, u64, String)> =
    Table::new("completed_uploads");
/// (completion unix ms, upload id) -> (): the pruning order of `COMPLETED`.
pub(crate) const COMPLETED_BY_TIME: Table<(u64, String), ()> =
    Table::new("completed_uploads_by_time");
/// Staged deletions (Ozone OM's deletedTable): (freed unix ms, random id) -> `DeletedGroups`.
pub(crate) const DELETED_GROUPS: Table<(u64, u64), Raw> = Table::new("deleted_groups");
/// Replicas to delete: (datanode uuid, container id, local id) -> (replica index, freed unix
/// ms).
pub(crate) const DELETION_LOG: Table<(String, u64, u64), (u32, u64)> = Table::new("deletion_log");

/// Calls `visit` on every row of `table` whose key starts with `prefix` (`()`: the whole
/// table) as of `snapshot`, a page of at most [`crate::MAX_LIST_PAGE`] rows at a time.
///
/// # Errors
/// Store errors; `visit`'s.
pub(crate) async fn each_row<K, V, P>(
    snapshot: &Snapshot,
    table: Table<K, V>,
    prefix: &P,
    mut visit: impl FnMut(K, V) -> Result<(), OmError>,
) -> Result<(), OmError>
where
    K: Codec + Clone,
    V: Codec,
    P: Codec,
{
    let mut after: Option<K> = None;
    loop {
        let rows = table
            .scan_at(snapshot, prefix, after.as_ref(), crate::MAX_LIST_PAGE)
            .await?;
        let more = rows.more;
        let mut last = None;
        for row in rows.rows {
            last = Some(row.key.clone());
            visit(row.key, row.value)?;
        }
        match last {
            Some(k) if more => after = Some(k),
            _ => return Ok(()),
        }
    }
}
