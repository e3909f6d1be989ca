//! Open-key sessions: open, allocate block groups, commit, abort, expire.
//!
//! A session is rows of the metadata store (`session_rows.rs`) and nothing else: its record,
//! written before its id is handed out, to which each allocation adds its group in the
//! allocation's transaction; its lease; its client's index row. A write in progress therefore
//! survives an om restart, and any om that shares the store serves each of its calls (a
//! writer whose om dies goes on through another). A session ends by commit (its committed
//! groups move into the key or part; the rest are logged for deletion), by abort, or by
//! expiry: a session without an open, allocation or renewal for the open-key lease is
//! aborted by [`OzoneManager::expire_sessions`] (Ozone's OpenKeyCleanupService). Whichever
//! ends it, the ending transaction finds its rows there or fails, so a session ends once.
//!
//! Bounds: each client holds at most `max_sessions_per_client` open sessions, and all
//! clients together [`MAX_OPEN_SESSIONS`]. Both are counted before the open's transaction,
//! not guarded by it (a guarded count would make every open of one client, such as an S3
//! gateway's, conflict with the others on etcd): opens in flight at once may each pass, so a
//! client exceeds its bound by at most the opens it has in flight, and the bound in all,
//! counted at most once a [`SESSION_CENSUS_INTERVAL`] per om, by the opens of that interval.

use std::collections::BTreeMap;

use meta_store::transact;
use proto_crate::{BlockGroup, DatanodeId, KeyInfo, Pipeline, ReplicationConfig};

use crate::clock::unix_ms;
use crate::deletion::{end_session, stage_key_groups};
use crate::manager::{
    BLOCKS_PER_CONTAINER, OpenKey, OpenKeySession, SessionTarget, now_ms, validate_name,
};
use crate::tables::OPEN_SESSIONS;
use crate::{OmError, OzoneManager};

mod ids;
mod leases;

use ids::IdKind;
pub(crate) use ids::IdRanges;
pub use ids::LOCAL_ID_BATCH;
pub use leases::SESSION_CENSUS_INTERVAL;

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Most sessions open at once over all clients (see the module's notes on how exactly).
pub const MAX_OPEN_SESSIONS: usize = 100_000;

/// Placements one allocation tries while the datanodes' operational states keep changing
/// under it.
pub(crate) const PLACEMENT_TRIES: usize = 3;

/// The client id of callers that give none.
pub const ANONYMOUS_CLIENT: &str = "";

/// A new session id candidate: 64 random bits from the OS-seeded generator, never 0 (the
/// open's transaction takes another when an open session has it). Every session call names
/// only this id, so it must not be guessable from another's (a counter would let any client
/// commit into or abort the next writer's session); Ozone's OM likewise hands out random
/// client ids for open keys. An id of an ended session matches a new one with probability
/// 2^-64 per pair, so a writer of an earlier session gets `NoSuchSession`, not someone
/// else's session.
fn new_session_id() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

impl OzoneManager {
    /// Opens a key for writing as an anonymous client. Nothing is visible
    /// until [`commit_key`](Self::commit_key).
    ///
    /// # Errors
    /// As [`open_key_as`](Self::open_key_as).
    pub async fn open_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<OpenKey> {
        self.open_key_as(ANONYMOUS_CLIENT, bucket, key, replication)
            .await
    }

    /// Opens a key for writing on behalf of client `client`.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], [`OmError::InvalidArgument`] for a bad
    /// key name, [`OmError::TooManyOpenSessions`]; store errors.
    pub async fn open_key_as(
        &self,
        client: &str,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<OpenKey> {
        self.open_session(client, bucket, key, replication, SessionTarget::Key)
            .await
    }

    pub(crate) async fn open_session(
        &self,
        client: &str,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        target: SessionTarget,
    ) -> Result<OpenKey> {
        validate_name("key", key)?;
        let b = self.get_bucket(bucket).await?;
        let replication = replication.unwrap_or(b.default_replication);
        crate::manager::check_replication(&replication)?;
        self.check_session_bounds(client).await?;
        let row = crate::session_rows::record(&OpenKeySession {
            client: client.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication,
            block_size: b.block_size,
            allocated: Vec::new(),
            target,
        });
        let now_ms = unix_ms(self.config.clock.wall());
        // The rows are written durably before the id is handed out: a restarted om, or any
        // other, finds the session (Ozone's OpenKey is a replicated transaction for the same
        // reason).
        let opened = transact(&self.store, |tx| {
            let row = &row;
            Box::pin(async move {
                // Guarded absent without a read: an id in use (2^-64 a pair) makes the
                // commit conflict, and the next run draws another.
                let mut session_id = new_session_id();
                while !OPEN_SESSIONS.assume_absent_in(&tx, &session_id)? {
                    session_id = new_session_id();
                }
                crate::session_rows::open_in(&tx, session_id, row, now_ms);
                Ok::<u64, OmError>(session_id)
            })
        })
        .await?;
        let session_id = opened.value;
        self.sessions_open.send_modify(|n| *n += 1);
        self.sessions_changed();
        Ok(OpenKey {
            session_id,
            replication,
            block_size: b.block_size,
        })
    }

    /// Allocates a new block group for an open key: d+p (EC) or factor
    /// (replicated) distinct HEALTHY datanodes none of which is in `exclude`
    /// (uuids), a container and a local id, and a replica index per location
    /// (1..=d+p for EC, 0 when replicated). Placement rotates over the
    /// healthy datanodes so that successive groups spread indexes across
    /// them. The group is recorded durably as the session's, and the
    /// session's lease restarts.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::NotEnoughDatanodes`] (naming
    /// how many datanodes are healthy), store errors.
    pub async fn allocate_block_group(
        &self,
        session_id: u64,
        exclude: &[DatanodeId],
    ) -> Result<BlockGroup> {
        Ok(self.allocate_for(session_id, exclude).await?.0)
    }

    /// [`allocate_block_group`](Self::allocate_block_group), also returning the session's
    /// client (its writer's block token is issued to it). One transaction reads the
    /// session's row, places the group by the row's replication on datanodes in service as
    /// of the stored operational states (guarded by their version: a copy older than the
    /// store's is read again and the group placed again, at most [`PLACEMENT_TRIES`] times),
    /// and records it.
    pub(crate) async fn allocate_for(
        &self,
        session_id: u64,
        exclude: &[DatanodeId],
    ) -> Result<(BlockGroup, String)> {
        for _ in 0..PLACEMENT_TRIES {
            if let Some(allocated) = self.try_allocate(session_id, exclude).await? {
                return Ok(allocated);
            }
            self.reload_operational_states().await?;
        }
        Err(OmError::Busy(format!(
            "datanodes' operational states changed during each of {PLACEMENT_TRIES} placements \
             for session {session_id}; allocate again"
        )))
    }

    /// One try of [`allocate_for`](Self::allocate_for): `None` when this om's copy of the
    /// operational states is older than the store's (nothing written).
    async fn try_allocate(
        &self,
        session_id: u64,
        exclude: &[DatanodeId],
    ) -> Result<Option<(BlockGroup, String)>> {
        // Ids (from this om's reserved ranges, a new range reserved in this transaction when
        // one runs out), the session row with the group and its lease restarted commit in
        // one transaction.
        let now_ms = unix_ms(self.config.clock.wall());
        let committed = transact(&self.store, |tx| {
            Box::pin(async move {
                // Its row is gone: the session ended (its end's transaction ran first).
                let Some(mut row) = crate::session_rows::get_in(&tx, session_id).await? else {
                    return Err(OmError::NoSuchSession(session_id));
                };
                if crate::decommission::version_in(&tx).await? != self.state().op_states_version {
                    return Ok(None);
                }
                let replication: ReplicationConfig =
                    row.replication
                        .parse()
                        .map_err(|e| OmError::CorruptRecord {
                            what: format!("open session {session_id}"),
                            source: Box::new(e),
                        })?;
                let (locations, open_container) = self.place(&replication, exclude)?;
                let mut reserved = Vec::new();
                let local_id = self.take_id(&tx, IdKind::Local, &mut reserved).await?;
                let container_id = match open_container {
                    Some(cid) => cid,
                    None => self.take_id(&tx, IdKind::Container, &mut reserved).await?,
                };
                let group = BlockGroup {
                    container_id,
                    local_id,
                    length: 0,
                    pipeline: Pipeline { locations },
                    token: None,
                };
                row.allocated.push(group.clone().into());
                let bytes = prost::Message::encoded_len(&row);
                if bytes > MAX_SESSION_ROW_BYTES {
                    return Err(session_too_large(session_id, bytes));
                }
                crate::session_rows::put_in(&tx, session_id, &row);
                crate::session_rows::touch_in(&tx, session_id, &row.client, now_ms);
                Ok::<_, OmError>(Some((
                    group,
                    reserved,
                    open_container.is_none(),
                    row.client,
                )))
            })
        })
        .await
        .map_err(|e| too_large(e, session_id))?;
        let Some((group, reserved, new_container, client)) = committed.value else {
            return Ok(None);
        };
        self.install_ids(reserved);
        let pipeline_key: Vec<DatanodeId> = group
            .pipeline
            .locations
            .iter()
            .map(|l| l.datanode.uuid.clone())
            .collect();
        let mut st = self.state();
        st.allocations += 1;
        // Two allocations that placed on one container at once may both count a block
        // past its bound: a soft bound (Ozone's container size is one too).
        match st.open_containers.get_mut(&pipeline_key) {
            Some((cid, used)) if !new_container && *cid == group.container_id => *used += 1,
            _ if new_container => {
                st.open_containers
                    .insert(pipeline_key, (group.container_id, 1));
            }
            _ => {}
        }
        drop(st);
        Ok(Some((group, client)))
    }

    /// Places a new group of `replication` on healthy datanodes in service, none of
    /// `exclude`; returns its locations and the open container of that pipeline with room
    /// for it, if any. Changes nothing (it runs inside a transaction's body, which may run
    /// again): the allocation counts the container's block once its transaction committed.
    fn place(
        &self,
        replication: &ReplicationConfig,
        exclude: &[DatanodeId],
    ) -> Result<(Vec<proto_crate::BlockLocation>, Option<u64>)> {
        let st = self.state();
        // New groups go to healthy datanodes in service only.
        let healthy: Vec<_> = st
            .nodes
            .healthy(self.config.clock.now(), self.config.liveness)
            .into_iter()
            .filter(|d| !st.op_states.contains_key(&d.uuid))
            .collect();
        let locations = crate::placement::place(
            replication,
            &healthy,
            exclude,
            st.allocations + 1,
            st.nodes.len(),
        )?;
        let pipeline_key: Vec<DatanodeId> =
            locations.iter().map(|l| l.datanode.uuid.clone()).collect();
        let open_container = match st.open_containers.get(&pipeline_key) {
            Some((cid, used)) if *used < BLOCKS_PER_CONTAINER => Some(*cid),
            _ => None,
        };
        Ok((locations, open_container))
    }

    /// Commits an open key: `groups` (in key order, each with its acknowledged
    /// length; groups of length 0 are dropped) must be groups allocated to this
    /// session, and their lengths must sum to `length`. Locations are taken
    /// from the session's row. Replaces any key of the same name.
    /// In the same transaction, the replaced key's groups and the session's
    /// groups that were not committed are logged for deletion.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::InvalidArgument`] for unknown
    /// groups or a length mismatch, [`OmError::BucketNotFound`] when the
    /// bucket was deleted meanwhile, store errors.
    pub async fn commit_key(
        &self,
        session_id: u64,
        groups: &[BlockGroup],
        length: u64,
        metadata: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        self.commit_key_if(session_id, groups, length, metadata, None)
            .await
    }

    /// [`commit_key`](Self::commit_key), provided `condition` (if any) holds for the key as
    /// it is when the commit's transaction runs. When it does not, nothing is committed and the
    /// session's groups are reclaimed, as for any failed commit.
    ///
    /// # Errors
    /// As `commit_key`, and [`OmError::ConditionFailed`].
    pub async fn commit_key_if(
        &self,
        session_id: u64,
        groups: &[BlockGroup],
        length: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<proto_crate::WriteCondition>,
    ) -> Result<KeyInfo> {
        let (s, committed, leftovers) = self
            .take_session(session_id, groups, length, &SessionTarget::Key)
            .await?;
        let mut info = KeyInfo {
            bucket: s.bucket.clone(),
            name: s.key.clone(),
            length,
            replication: s.replication,
            block_groups: committed,
            block_size: s.block_size,
            created_unix_ms: now_ms(),
            metadata,
            generation: 0,
        };
        let outcome = transact(&self.store, |tx| {
            let (info, leftovers) = (&info, &leftovers);
            Box::pin(async move {
                if crate::buckets::bucket_in(&tx, &info.bucket)
                    .await?
                    .is_none()
                {
                    return Err(OmError::BucketNotFound(info.bucket.clone()));
                }
                crate::conditions::check(&tx, &info.bucket, &info.name, condition).await?;
                stage_key_groups(&tx, &info.bucket, &info.name).await?;
                crate::keys::put_new_key_in(&tx, info);
                if !end_session(&tx, session_id, leftovers, &info.block_groups).await? {
                    return Err(OmError::NoSuchSession(session_id));
                }
                Ok(())
            })
        })
        .await;
        let revision = self
            .commit_or_reclaim(outcome, session_id, &s.allocated)
            .await?;
        info.generation = revision;
        self.current_addresses(&mut info.block_groups);
        Ok(info)
    }

    /// Ends a session's commit: on success returns the commit's revision (the new
    /// generation); otherwise reclaims every group the session allocated (the session is
    /// gone, so nothing references them) before returning the error.
    pub(crate) async fn commit_or_reclaim(
        &self,
        outcome: Result<meta_store::Committed<()>>,
        session_id: u64,
        allocated: &[BlockGroup],
    ) -> Result<u64> {
        let failed = match outcome {
            Ok(c) => {
                self.deletions_changed();
                return Ok(c.revision.unwrap_or_default());
            }
            Err(e) => commit_too_large(e, session_id),
        };
        // Reclaiming can fail too (the store is failing): the session's rows then stay, and
        // it expires one lease after its last activity, its groups logged then.
        if let Err(e) = self.reclaim_session(session_id, allocated).await {
            tracing::warn!(session = session_id, error = %e, "reclaiming a failed commit's groups failed; the session expires one lease after its last activity");
        }
        Err(failed)
    }

    /// Stages all of `allocated` (and any other group the session's row holds) for deletion
    /// and removes session `session_id`'s row, in one transaction.
    pub(crate) async fn reclaim_session(
        &self,
        session_id: u64,
        allocated: &[BlockGroup],
    ) -> Result<()> {
        transact(&self.store, |tx| {
            Box::pin(async move {
                end_session(&tx, session_id, allocated, &[]).await?;
                Ok::<(), OmError>(())
            })
        })
        .await?;
        self.deletions_changed();
        Ok(())
    }

    /// Reads session `session_id` for its commit (it must commit into `target`; the commit's
    /// transaction ends it): checks `groups` were allocated to it and sum to `length`;
    /// returns the session,
    /// the groups to commit with their lengths and the om's locations (groups
    /// of length 0 dropped), and the allocated groups not committed. A
    /// session whose commit is refused for bad groups is ended too (its
    /// groups reclaimed), as the writer cannot retry it.
    pub(crate) async fn take_session(
        &self,
        session_id: u64,
        groups: &[BlockGroup],
        length: u64,
        target: &SessionTarget,
    ) -> Result<(OpenKeySession, Vec<BlockGroup>, Vec<BlockGroup>)> {
        let s = self.session(session_id).await?;
        if std::mem::discriminant(&s.target) != std::mem::discriminant(target) {
            return Err(OmError::InvalidArgument(format!(
                "session {session_id} commits into {:?}, not {target:?}",
                s.target
            )));
        }
        match committed_groups(session_id, &s.allocated, groups, length) {
            Ok(committed) => {
                let leftovers = s
                    .allocated
                    .iter()
                    .filter(|a| {
                        !committed
                            .iter()
                            .any(|c| (c.container_id, c.local_id) == (a.container_id, a.local_id))
                    })
                    .cloned()
                    .collect();
                Ok((s, committed, leftovers))
            }
            Err(e) => {
                self.reclaim_session(session_id, &s.allocated).await?;
                Err(e)
            }
        }
    }

    /// Open session `session_id` as its row holds it now.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`] when it is not open; store errors; a row that does not
    /// decode.
    pub(crate) async fn session(&self, session_id: u64) -> Result<OpenKeySession> {
        crate::session_rows::get(&self.store, session_id)
            .await?
            .ok_or(OmError::NoSuchSession(session_id))
    }

    /// Abandons an open key; nothing becomes visible and its groups are
    /// logged for deletion. Unknown sessions are fine (already ended).
    ///
    /// # Errors
    /// Store errors.
    pub async fn abort_key(&self, session_id: u64) -> Result<()> {
        self.reclaim_session(session_id, &[]).await
    }
}

/// Largest record of an open session, bytes: half of the metadata store's request limit
/// (etcd's 1.5 MiB, `meta_store::MAX_REQUEST_BYTES`) less 64 KiB, so that the transaction
/// that commits the session always fits one request: its groups move into the key or part
/// and a staged row, and the key or part it replaces, of at most as many groups, is staged
/// beside them. About 2,900 block groups (about 250 bytes each); the same on both stores.
pub const MAX_SESSION_ROW_BYTES: usize = (meta_store::MAX_REQUEST_BYTES - 64 * 1024) / 2;

/// A session whose record would grow to `bytes`, past [`MAX_SESSION_ROW_BYTES`], as the
/// writer sees it: [`OmError::InvalidArgument`], since the same write cannot succeed.
fn session_too_large(session_id: u64, bytes: usize) -> OmError {
    OmError::InvalidArgument(format!(
        "session {session_id}: its block groups no longer fit one metadata-store row \
         ({bytes} bytes; at most {MAX_SESSION_ROW_BYTES}, about 250 bytes a group): write \
         this key with a larger block size, or as a multipart upload of more parts"
    ))
}

/// `e`, said in the writer's terms ([`session_too_large`]) when it is the metadata store
/// refusing an allocation's request over its size limit.
fn too_large(e: OmError, session_id: u64) -> OmError {
    match e {
        OmError::Store(meta_store::StoreError::RequestTooLarge { bytes }) => {
            session_too_large(session_id, bytes)
        }
        other => other,
    }
}

/// `e`, said in the writer's terms when it is the metadata store refusing a commit's
/// request over its size limit: the key or part with the one it replaces (a key a multipart
/// completion made may be larger than a session's bound) and its metadata do not fit one
/// request. [`OmError::InvalidArgument`]: the same commit cannot succeed.
fn commit_too_large(e: OmError, session_id: u64) -> OmError {
    match e {
        OmError::Store(meta_store::StoreError::RequestTooLarge { bytes }) => {
            OmError::InvalidArgument(format!(
                "session {session_id}: its commit does not fit one metadata-store request \
                 ({bytes} bytes; at most {}): the block groups it commits, those of the key or \
                 part it replaces, and its metadata are too many together; delete the existing \
                 key first, or write with a larger block size or less metadata",
                meta_store::MAX_REQUEST_BYTES
            ))
        }
        other => other,
    }
}

/// The groups a commit names, checked against the session's allocations.
fn committed_groups(
    session_id: u64,
    allocated: &[BlockGroup],
    groups: &[BlockGroup],
    length: u64,
) -> Result<Vec<BlockGroup>> {
    let mut committed: Vec<BlockGroup> = Vec::new();
    let mut sum = 0u64;
    for g in groups {
        let Some(a) = allocated
            .iter()
            .find(|a| a.container_id == g.container_id && a.local_id == g.local_id)
        else {
            return Err(OmError::InvalidArgument(format!(
                "block group {}:{} was not allocated to session {session_id}",
                g.container_id, g.local_id
            )));
        };
        if committed
            .iter()
            .any(|c| (c.container_id, c.local_id) == (g.container_id, g.local_id))
        {
            return Err(OmError::InvalidArgument(format!(
                "block group {}:{} is listed twice",
                g.container_id, g.local_id
            )));
        }
        sum = sum
            .checked_add(g.length)
            .ok_or_else(|| OmError::InvalidArgument("group lengths overflow".into()))?;
        if g.length > 0 {
            committed.push(BlockGroup {
                length: g.length,
                ..a.clone()
            });
        }
    }
    if sum != length {
        return Err(OmError::InvalidArgument(format!(
            "key length {length} differs from the sum of its group lengths {sum}"
        )));
    }
    Ok(committed)
}

#[cfg(test)]
mod tests;
