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
use std::time::{Duration, SystemTime};

use meta_store::{Transaction, transact};
use proto_crate::{BlockGroup, DatanodeId, KeyInfo, Pipeline, ReplicationConfig};

use crate::clock::unix_ms;
use crate::deletion::{end_session, stage_key_groups};
use crate::manager::{
    BLOCKS_PER_CONTAINER, OpenKey, OpenKeySession, SessionTarget, now_ms, validate_name,
};
use crate::tables::{COUNTERS, OPEN_SESSIONS, SESSION_LEASES, each_row};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Most sessions open at once over all clients (see the module's notes on how exactly).
pub const MAX_OPEN_SESSIONS: usize = 100_000;

/// Placements one allocation tries while the datanodes' operational states keep changing
/// under it.
pub(crate) const PLACEMENT_TRIES: usize = 3;

/// Longest an om goes on with its count of every open session (raised by the sessions it
/// opens itself) before counting the rows again to check [`MAX_OPEN_SESSIONS`].
pub const SESSION_CENSUS_INTERVAL: Duration = Duration::from_secs(1);

/// Sessions ended per transaction by the expiring service: each reads three rows (its lease,
/// its record, the staged row's key) and writes four (three removed, one staged), within
/// etcd's 128 operations and compares per transaction. A chunk whose request is too large
/// (sessions of many groups: a staged row is as large as the session's record) ends its
/// sessions one per transaction instead.
const EXPIRED_PER_TXN: usize = 25;

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

/// Local ids one reservation takes (Ozone's SCM hands out block ids from batches of its
/// sequence id generator the same way, `ozone.scm.sequence.id.batch.size`, 1000).
pub const LOCAL_ID_BATCH: u64 = 1000;
/// Container ids one reservation takes.
pub(crate) const CONTAINER_ID_BATCH: u64 = 16;

/// An id the om hands out from reserved ranges.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdKind {
    /// Block local ids (`counters/next_local_id`).
    Local,
    /// Container ids (`counters/next_container_id`).
    Container,
}

impl IdKind {
    fn counter(self) -> &'static str {
        match self {
            Self::Local => "next_local_id",
            Self::Container => "next_container_id",
        }
    }

    fn batch(self) -> u64 {
        match self {
            Self::Local => LOCAL_ID_BATCH,
            Self::Container => CONTAINER_ID_BATCH,
        }
    }
}

/// Ids this om has reserved and not yet handed out: `next..end` of each kind. The stored
/// counter is past every reserved id, so ids never repeat across oms or restarts; those a
/// restart leaves unused are skipped. One counter write per batch, not per group: with
/// several oms on one store, allocations do not all contend for the counter rows.
#[derive(Debug, Default)]
pub(crate) struct IdRanges {
    local: std::ops::Range<u64>,
    container: std::ops::Range<u64>,
}

impl IdRanges {
    fn of(&mut self, kind: IdKind) -> &mut std::ops::Range<u64> {
        match kind {
            IdKind::Local => &mut self.local,
            IdKind::Container => &mut self.container,
        }
    }
}

impl OzoneManager {
    /// The next id of `kind`: from this om's reserved range, or (when it is used up) the
    /// first of a new range reserved by advancing the stored counter in `tx`; the rest of
    /// that range goes into `reserved`, for [`install_ids`](Self::install_ids) once `tx`
    /// has committed (a range whose reservation did not commit is never used: another om,
    /// or this one restarted, may reserve it again). An id taken from memory by a body that
    /// then runs again is skipped (a gap, never a repeat).
    async fn take_id(
        &self,
        tx: &Transaction,
        kind: IdKind,
        reserved: &mut Vec<(IdKind, std::ops::Range<u64>)>,
    ) -> Result<u64> {
        if let Some(id) = self.id_ranges().of(kind).next() {
            return Ok(id);
        }
        let name = kind.counter().to_string();
        let start = COUNTERS.get_in(tx, &name).await?.unwrap_or(1);
        let end = start
            .checked_add(kind.batch())
            .ok_or_else(|| OmError::Internal(format!("{} overflows", kind.counter())))?;
        COUNTERS.put_in(tx, &name, &end);
        reserved.push((kind, start + 1..end));
        Ok(start)
    }

    /// Makes ranges reserved by a committed transaction this om's. Two allocations that
    /// found a range used up at once each reserved one; the later replaces the other's rest
    /// (a gap, never a repeat).
    fn install_ids(&self, reserved: Vec<(IdKind, std::ops::Range<u64>)>) {
        let mut ranges = self.id_ranges();
        for (kind, range) in reserved {
            *ranges.of(kind) = range;
        }
    }

    fn id_ranges(&self) -> std::sync::MutexGuard<'_, IdRanges> {
        self.id_ranges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
        if new_container {
            let pipeline_key = group
                .pipeline
                .locations
                .iter()
                .map(|l| l.datanode.uuid.clone())
                .collect();
            self.state()
                .open_containers
                .insert(pipeline_key, (group.container_id, 1));
        }
        Ok(Some((group, client)))
    }

    /// Places a new group of `replication` on healthy datanodes in service, none of
    /// `exclude`; returns its locations and the open container of that pipeline with room
    /// for it (counted as taken), if any.
    fn place(
        &self,
        replication: &ReplicationConfig,
        exclude: &[DatanodeId],
    ) -> Result<(Vec<proto_crate::BlockLocation>, Option<u64>)> {
        let mut st = self.state();
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
        st.allocations += 1;
        let pipeline_key: Vec<DatanodeId> =
            locations.iter().map(|l| l.datanode.uuid.clone()).collect();
        let open_container = match st.open_containers.get_mut(&pipeline_key) {
            Some((cid, used)) if *used < BLOCKS_PER_CONTAINER => {
                *used += 1;
                Some(*cid)
            }
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
            Err(e) => too_large(e, session_id),
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

    /// Restarts the lease of open session `session_id` (a writer's
    /// keep-alive: a writer streaming into one block group allocates
    /// nothing for a long time), recording now as its last activity.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`] when it ended (committed, aborted, expired); store errors.
    pub async fn renew_key(&self, session_id: u64) -> Result<()> {
        let now_ms = unix_ms(self.config.clock.wall());
        transact(&self.store, |tx| {
            Box::pin(async move {
                let (_, client) = crate::session_rows::lease_in(&tx, session_id)
                    .await?
                    .ok_or(OmError::NoSuchSession(session_id))?;
                crate::session_rows::touch_in(&tx, session_id, &client, now_ms);
                Ok::<(), OmError>(())
            })
        })
        .await?;
        self.renewals.send_modify(|n| *n += 1);
        Ok(())
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

    /// Refuses a new session of `client` past its bound or past [`MAX_OPEN_SESSIONS`] (see
    /// the module's notes).
    async fn check_session_bounds(&self, client: &str) -> Result<()> {
        let limit = self.config.max_sessions_per_client;
        let held = crate::session_rows::count_of_client(&self.store, client).await?;
        if held >= limit as u64 {
            return Err(OmError::TooManyOpenSessions {
                client: client.to_string(),
                limit,
            });
        }
        // Client ids are the clients' own word: a bound in all too.
        let counted = *self
            .sessions_counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.config.clock.now();
        let all = match counted {
            Some(at) if now.saturating_duration_since(at) < SESSION_CENSUS_INTERVAL => {
                *self.sessions_open.borrow()
            }
            _ => self.open_sessions().await?,
        };
        if all >= MAX_OPEN_SESSIONS as u64 {
            return Err(OmError::TooManyOpenSessions {
                client: "(all clients)".to_string(),
                limit: MAX_OPEN_SESSIONS,
            });
        }
        Ok(())
    }

    /// Abandons an open key; nothing becomes visible and its groups are
    /// logged for deletion. Unknown sessions are fine (already ended).
    ///
    /// # Errors
    /// Store errors.
    pub async fn abort_key(&self, session_id: u64) -> Result<()> {
        self.reclaim_session(session_id, &[]).await
    }

    /// Aborts every session whose lease (the om's `open_key_lease`, counted from its last
    /// open, allocation or renewal, whichever om recorded it, and no earlier than this om's
    /// start) ran out by `now`, logging its groups for deletion, at most
    /// 25 sessions per transaction. A session renewed after the scan that
    /// found it is left open. Returns how many were aborted. Lease times are the wall clocks
    /// of the oms that recorded them: oms sharing a store need clocks closer together than
    /// the lease (1 h by default).
    ///
    /// # Errors
    /// Store errors, when no session could be ended (what was aborted stays aborted; a
    /// session that failed is found again by the next pass, the others are ended).
    pub async fn expire_sessions(&self, now: SystemTime) -> Result<usize> {
        let lease_ms = u64::try_from(self.config.open_key_lease.as_millis()).unwrap_or(u64::MAX);
        let now_ms = unix_ms(now);
        let not_before = self.opened_wall_ms;
        let expired_by = move |last: u64| last.max(not_before).saturating_add(lease_ms) <= now_ms;
        let snapshot = self.store.snapshot().await?;
        let mut candidates = Vec::new();
        each_row(&snapshot, SESSION_LEASES, &(), |id, (last, _)| {
            if expired_by(last) {
                candidates.push(id);
            }
            Ok(())
        })
        .await?;
        let mut ended = 0;
        let mut failed = None;
        for chunk in candidates.chunks(EXPIRED_PER_TXN) {
            let done = match self.expire_chunk(chunk, &expired_by).await {
                Err(e) if chunk.len() > 1 => {
                    tracing::debug!(error = %e, "expiring sessions together failed; one at a time");
                    let mut done = Vec::new();
                    for id in chunk {
                        match self
                            .expire_chunk(std::slice::from_ref(id), &expired_by)
                            .await
                        {
                            Ok(mut d) => done.append(&mut d),
                            Err(e) => {
                                tracing::warn!(session = id, error = %e, "expiring an open session failed; the next pass tries again");
                                failed.get_or_insert(e);
                            }
                        }
                    }
                    done
                }
                Err(e) => {
                    tracing::warn!(session = ?chunk.first(), error = %e, "expiring an open session failed; the next pass tries again");
                    failed.get_or_insert(e);
                    Vec::new()
                }
                Ok(d) => d,
            };
            for (id, client) in &done {
                tracing::info!(session = id, client = %client, "open-key lease expired; aborting");
            }
            ended += done.len();
        }
        // One failure does not stop the rest; the pass fails only when nothing expired.
        if let Some(e) = failed
            && ended == 0
        {
            return Err(e);
        }
        if ended > 0 {
            self.deletions_changed();
        }
        self.open_sessions().await?;
        Ok(ended)
    }
}

impl OzoneManager {
    /// Ends the sessions of `ids` whose lease (read again in the transaction) `expired_by`
    /// says ran out, in one transaction; returns them with their clients.
    async fn expire_chunk(
        &self,
        ids: &[u64],
        expired_by: &(impl Fn(u64) -> bool + Sync),
    ) -> Result<Vec<(u64, String)>> {
        let done = transact(&self.store, |tx| {
            Box::pin(async move {
                let mut done = Vec::new();
                for id in ids {
                    match crate::session_rows::lease_in(&tx, *id).await? {
                        Some((last, client)) if expired_by(last) => {
                            end_session(&tx, *id, &[], &[]).await?;
                            done.push((*id, client));
                        }
                        // Renewed or ended since the scan.
                        _ => {}
                    }
                }
                Ok::<_, OmError>(done)
            })
        })
        .await?;
        Ok(done.value)
    }
}

/// Largest record of an open session, bytes: the metadata store's request limit (etcd's
/// 1.5 MiB, `meta_store::MAX_REQUEST_BYTES`) less 64 KiB, so that the transaction that ends
/// the session (its groups moved into the key or part and a staged row, a few rows beside)
/// always fits one request. About 5,000 block groups (about 250 bytes each); the same on
/// both stores.
pub const MAX_SESSION_ROW_BYTES: usize = meta_store::MAX_REQUEST_BYTES - 64 * 1024;

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
/// refusing a request over its size limit.
fn too_large(e: OmError, session_id: u64) -> OmError {
    match e {
        OmError::Store(meta_store::StoreError::RequestTooLarge { bytes }) => {
            session_too_large(session_id, bytes)
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
mod tests {
    use super::*;

    async fn counter(om: &OzoneManager, name: &str) -> Option<u64> {
        COUNTERS
            .get(&om.store, &name.to_string())
            .await
            .expect("get")
            .map(|r| r.value)
    }

    /// A commit whose session's row another writer ended (another om expiring it, on a
    /// shared store) fails and commits nothing: the groups are staged for deletion already.
    /// Before the commit checked the row, the key was committed onto groups on their way to
    /// deletion.
    #[tokio::test]
    async fn a_commit_whose_session_row_was_ended_elsewhere_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let s = om.open_key("b", "k", None).await.expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        transact(&om.store, |tx| {
            Box::pin(async move {
                end_session(&tx, s.session_id, &[], &[]).await?;
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("ended elsewhere");
        let g = BlockGroup { length: 1, ..g };
        assert!(matches!(
            om.commit_key(s.session_id, &[g], 1, BTreeMap::new()).await,
            Err(OmError::NoSuchSession(_))
        ));
        assert!(matches!(
            om.lookup_key("b", "k").await,
            Err(OmError::KeyNotFound { .. })
        ));
        assert_eq!(
            om.pending_deletions().await.expect("pending"),
            5,
            "the group is staged once"
        );
    }

    /// A group the session's row holds but the caller's read of the session does not (its
    /// allocation's transaction committed between a commit's or abort's read of the row and
    /// its own transaction) is staged by the transaction that ends the session, once.
    #[tokio::test]
    async fn ending_a_session_frees_the_groups_its_row_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        for end in ["abort", "commit"] {
            let s = om.open_key("b", end, None).await.expect("open");
            let known = om
                .allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            let read = om.session(s.session_id).await.expect("open");
            om.allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            let before = om.pending_deletions().await.expect("pending");
            let committed = match end {
                "abort" => Vec::new(),
                _ => vec![BlockGroup {
                    length: 1,
                    ..known.clone()
                }],
            };
            let leftovers: Vec<BlockGroup> = read
                .allocated
                .iter()
                .filter(|g| committed.iter().all(|c| c.local_id != g.local_id))
                .cloned()
                .collect();
            let ended = transact(&om.store, |tx| {
                let (leftovers, committed) = (&leftovers, &committed);
                Box::pin(async move { end_session(&tx, s.session_id, leftovers, committed).await })
            })
            .await
            .expect("end");
            assert!(ended.value, "{end}: the session was open");
            let freed = match end {
                "abort" => 2,
                _ => 1,
            };
            assert_eq!(
                om.pending_deletions().await.expect("pending") - before,
                freed * 5,
                "{end}: the row's group is staged too"
            );
        }
    }

    /// Ids come from reserved ranges: the counters are written once per batch, ids follow
    /// one another within it, and a restarted om starts past everything reserved before.
    #[tokio::test]
    async fn ids_come_from_reserved_ranges_and_never_repeat_across_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first: Vec<BlockGroup> = {
            let om = crate::test_oms::with_five_datanodes(dir.path()).await;
            om.create_bucket("b", None, None).await.expect("bucket");
            let s = om.open_key("b", "k", None).await.expect("open");
            let mut groups: Vec<BlockGroup> = Vec::new();
            for _ in 0..3 {
                groups.push(
                    om.allocate_block_group(s.session_id, &[])
                        .await
                        .expect("allocate"),
                );
            }
            assert_eq!(
                counter(&om, "next_local_id").await,
                Some(1 + LOCAL_ID_BATCH)
            );
            assert_eq!(
                counter(&om, "next_container_id").await,
                Some(1 + CONTAINER_ID_BATCH)
            );
            groups
        };
        let locals: Vec<u64> = first.iter().map(|g| g.local_id).collect();
        assert_eq!(locals, [1, 2, 3]);
        let om = crate::test_oms::with_five_datanodes(dir.path()).await;
        let s = om.open_key("b", "k2", None).await.expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        assert_eq!(
            g.local_id,
            1 + LOCAL_ID_BATCH,
            "the rest of the first range is skipped"
        );
        assert_eq!(g.container_id, 1 + CONTAINER_ID_BATCH);
        assert_eq!(
            counter(&om, "next_local_id").await,
            Some(1 + 2 * LOCAL_ID_BATCH)
        );
    }

    /// Sessions whose staged rows together pass etcd's 1.5 MiB request limit are ended one
    /// per transaction (regression: the pass failed at that chunk, every pass, and the
    /// sessions after it in id order never expired).
    #[tokio::test]
    async fn sessions_too_large_to_expire_together_expire_one_at_a_time() {
        use crate::test_oms::{Backend, TestOm};
        let lease = std::time::Duration::from_secs(60);
        let clock = std::sync::Arc::new(crate::ManualClock::default());
        let om = TestOm::start_with(Backend::Etcd, |c| {
            c.with_open_key_lease(lease)
                .with_clock(std::sync::Arc::clone(&clock) as std::sync::Arc<dyn crate::Clock>)
        })
        .await;
        crate::test_oms::register_five(&om).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let first = om.open_key("b", "template", None).await.expect("open");
        let group = om
            .allocate_block_group(first.session_id, &[])
            .await
            .expect("allocate");
        // 30 sessions of 300 groups each (about 90 KB a row): 25 of them are over 1.5 MiB.
        for i in 0..30u64 {
            let s = om
                .open_key("b", &format!("k{i}"), None)
                .await
                .expect("open");
            transact(&om.store, |tx| {
                let group = &group;
                Box::pin(async move {
                    let mut row = crate::session_rows::get_in(&tx, s.session_id)
                        .await?
                        .ok_or(OmError::NoSuchSession(s.session_id))?;
                    row.allocated = (0..300)
                        .map(|j| {
                            BlockGroup {
                                local_id: 10_000_000 + i * 1000 + j,
                                ..group.clone()
                            }
                            .into()
                        })
                        .collect();
                    crate::session_rows::put_in(&tx, s.session_id, &row);
                    Ok::<(), OmError>(())
                })
            })
            .await
            .expect("grow the session");
        }
        let row = OPEN_SESSIONS
            .get(&om.store, &first.session_id)
            .await
            .expect("read")
            .expect("row");
        let last = OPEN_SESSIONS
            .scan(&om.store, &(), None, 100)
            .await
            .expect("scan")
            .rows
            .into_iter()
            .map(|r| r.value.0.len())
            .max()
            .expect("rows");
        assert!(
            row.value.0.len() < last && last * EXPIRED_PER_TXN > 3 * 1024 * 1024 / 2,
            "{last} bytes a session"
        );
        clock.advance(lease + std::time::Duration::from_secs(1));
        assert_eq!(
            om.expire_sessions(crate::Clock::wall(&*clock))
                .await
                .expect("expire"),
            31
        );
        assert_eq!(om.open_sessions().await.expect("count"), 0);
        assert_eq!(
            om.pending_deletions().await.expect("pending"),
            (30 * 300 + 1) * 5,
            "every group is staged, once"
        );
    }

    /// A session whose groups outgrow its bound (one etcd request, less room for its end):
    /// the allocation that would pass it is refused as an invalid argument naming the way
    /// out, not an internal error, and the session still commits what it has (regression:
    /// a session grown to the request limit could be neither committed nor ended).
    #[tokio::test]
    async fn a_session_past_the_request_limit_is_refused_as_too_large() {
        use crate::test_oms::{Backend, TestOm};
        let om = TestOm::start(Backend::Etcd).await;
        crate::test_oms::register_five(&om).await;
        om.create_bucket("b", None, None).await.expect("bucket");
        let s = om.open_key("b", "big", None).await.expect("open");
        let group = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        // Groups up to near the bound, written straight into the row; allocations then take
        // it over.
        let one =
            prost::Message::encoded_len(&proto_crate::wire::om::BlockGroup::from(group.clone()))
                + 4;
        let fit = MAX_SESSION_ROW_BYTES / one - 64;
        transact(&om.store, |tx| {
            let group = &group;
            Box::pin(async move {
                let mut row = crate::session_rows::get_in(&tx, s.session_id)
                    .await?
                    .ok_or(OmError::NoSuchSession(s.session_id))?;
                row.allocated = (0..fit as u64)
                    .map(|j| {
                        BlockGroup {
                            local_id: 10_000_000 + j,
                            ..group.clone()
                        }
                        .into()
                    })
                    .collect();
                crate::session_rows::put_in(&tx, s.session_id, &row);
                Ok::<(), OmError>(())
            })
        })
        .await
        .expect("grow the session to the limit");
        let mut refused = Ok(group.clone());
        for _ in 0..200 {
            refused = om.allocate_block_group(s.session_id, &[]).await;
            if refused.is_err() {
                break;
            }
        }
        assert!(
            matches!(&refused, Err(OmError::InvalidArgument(m)) if m.contains("larger block size")),
            "{refused:?}"
        );
        assert_eq!(
            refused.map_err(|e| e.code()).err(),
            Some(proto_crate::OmErrorCode::InvalidArgument)
        );
        let first = BlockGroup {
            local_id: 10_000_000,
            length: 3,
            ..group
        };
        om.commit_key(s.session_id, &[first], 3, BTreeMap::new())
            .await
            .expect("the session commits what it has");
    }
}
