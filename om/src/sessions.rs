//! Open-key sessions: open, allocate block groups, commit, abort, expire.
//!
//! A session lives in the om's memory and as a row (`session_rows.rs`),
//! written before its id is handed out; each group allocated to it is added
//! to the row in the allocation's transaction. A write
//! in progress therefore survives an om restart: the om loads its sessions
//! back, each lease starting again. A session
//! ends by commit (its committed groups move into the key or part; the rest
//! are logged for deletion), by abort, or by expiry: a session without an
//! allocation for the open-key lease is aborted by [`OzoneManager::expire_sessions`]
//! (Ozone's OpenKeyCleanupService). Each client holds at most
//! `max_sessions_per_client` open sessions.

use std::collections::BTreeMap;
use std::time::Instant;

use meta_store::{Transaction, transact};
use proto_crate::{BlockGroup, DatanodeId, KeyInfo, Pipeline, ReplicationConfig};

use crate::deletion::{end_session, stage_groups, stage_key_groups};
use crate::manager::{
    BLOCKS_PER_CONTAINER, OpenKey, OpenKeySession, SessionTarget, now_ms, validate_name,
};
use crate::tables::COUNTERS;
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Most sessions open at once over all clients.
pub const MAX_OPEN_SESSIONS: usize = 100_000;

/// The client id of callers that give none.
pub const ANONYMOUS_CLIENT: &str = "";

/// A new session id: 64 random bits from the OS-seeded generator, never 0
/// and never an open session's. Every session call names only this id, so
/// it must not be guessable from another's (a counter would let any client
/// commit into or abort the next writer's session); Ozone's OM likewise
/// hands out random client ids for open keys. An id from before a restart
/// matches a new session with probability 2^-64 per pair, so a writer of an
/// earlier incarnation gets `NoSuchSession`, not someone else's session.
fn new_session_id(open: &std::collections::HashMap<u64, OpenKeySession>) -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 && !open.contains_key(&id) {
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
    /// key name, [`OmError::TooManyOpenSessions`]; [`OmError::Busy`] (retry) when the new
    /// session's lease ran out while its row was being written.
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
        let limit = self.config.max_sessions_per_client;
        let (session_id, row) = {
            let mut st = self.state();
            // Client ids are the clients' own word: a global bound too.
            if st.sessions.len() >= MAX_OPEN_SESSIONS {
                return Err(OmError::TooManyOpenSessions {
                    client: "(all clients)".to_string(),
                    limit: MAX_OPEN_SESSIONS,
                });
            }
            let held = st.sessions_by_client.get(client).copied().unwrap_or(0);
            if held >= limit {
                return Err(OmError::TooManyOpenSessions {
                    client: client.to_string(),
                    limit,
                });
            }
            let session_id = new_session_id(&st.sessions);
            let session = OpenKeySession {
                client: client.to_string(),
                last_active: self.config.clock.now(),
                bucket: bucket.to_string(),
                key: key.to_string(),
                replication,
                block_size: b.block_size,
                allocated: Vec::new(),
                target,
            };
            // Reserved in memory (counted against the bounds; no one else knows the id
            // yet), then its row written durably, without the state lock held: the id is
            // handed out only once a restarted om would find the session again (Ozone's
            // OpenKey is a replicated transaction for the same reason).
            let row = crate::session_rows::record(&session);
            *st.sessions_by_client.entry(client.to_string()).or_default() += 1;
            st.sessions.insert(session_id, session);
            (session_id, row)
        };
        let written = transact(&self.store, |tx| {
            let row = &row;
            Box::pin(async move {
                crate::session_rows::put_in(&tx, session_id, row);
                Ok::<(), OmError>(())
            })
        })
        .await;
        let ended = {
            let st = self.state();
            self.publish_sessions(&st);
            !st.sessions.contains_key(&session_id)
        };
        if let Err(e) = written {
            let mut st = self.state();
            st.remove_session(session_id);
            self.publish_sessions(&st);
            return Err(e);
        }
        if ended {
            // Ended (expired) while its row was written: whoever ended it may have removed
            // the row before it existed, so it goes here too (removing it twice is fine),
            // or a restart would resurrect the session.
            transact(&self.store, |tx| {
                Box::pin(async move {
                    crate::session_rows::remove_in(&tx, session_id);
                    Ok::<(), OmError>(())
                })
            })
            .await?;
            // The caller never saw this session: nothing of theirs is lost, so a retry.
            return Err(OmError::Busy(format!(
                "the new session {session_id} expired while it was being recorded; open again"
            )));
        }
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
        let locations = {
            let mut st = self.state();
            let replication = self.touch(&mut st, session_id)?.replication;
            // New groups go to healthy datanodes in service only.
            let healthy: Vec<_> = st
                .nodes
                .healthy(self.config.clock.now(), self.config.liveness)
                .into_iter()
                .filter(|d| !st.op_states.contains_key(&d.uuid))
                .collect();
            let locations = crate::placement::place(
                &replication,
                &healthy,
                exclude,
                st.allocations + 1,
                st.nodes.len(),
            )?;
            st.allocations += 1;
            locations
        };
        let pipeline_key: Vec<DatanodeId> =
            locations.iter().map(|l| l.datanode.uuid.clone()).collect();
        let open_container = {
            let mut st = self.state();
            match st.open_containers.get_mut(&pipeline_key) {
                Some((cid, used)) if *used < BLOCKS_PER_CONTAINER => {
                    *used += 1;
                    Some(*cid)
                }
                _ => None,
            }
        };
        // Ids (from this om's reserved ranges, a new range reserved in this transaction when
        // one runs out) and the session row with the group commit in one transaction.
        let committed = transact(&self.store, |tx| {
            let locations = locations.clone();
            Box::pin(async move {
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
                let recorded = match crate::session_rows::get_in(&tx, session_id).await? {
                    Some(mut row) => {
                        row.allocated.push(group.clone().into());
                        crate::session_rows::put_in(&tx, session_id, &row);
                        true
                    }
                    // Its row is gone: the session ended (its end's transaction ran first).
                    None => {
                        stage_groups(&tx, std::slice::from_ref(&group)).await?;
                        false
                    }
                };
                Ok::<_, OmError>((group, recorded, reserved))
            })
        })
        .await?;
        let (group, recorded, reserved) = committed.value;
        self.install_ids(reserved);
        let known = {
            let mut st = self.state();
            if open_container.is_none() {
                st.open_containers
                    .insert(pipeline_key, (group.container_id, 1));
            }
            if recorded {
                match st.sessions.get_mut(&session_id) {
                    Some(s) => {
                        s.allocated.push(group.clone());
                        true
                    }
                    None => false,
                }
            } else {
                false
            }
        };
        if !recorded {
            self.deletions_changed();
            return Err(OmError::NoSuchSession(session_id));
        }
        if !known {
            // Ended (aborted, expired, or committing) while this group was being allocated:
            // nothing can reference it (a commit names only groups the session knew). If the
            // end's transaction has run, it found the group in the row and staged it; if not,
            // the group leaves the row here and is staged now. Either way once.
            transact(&self.store, |tx| {
                let group = &group;
                Box::pin(async move {
                    if let Some(mut row) = crate::session_rows::get_in(&tx, session_id).await? {
                        row.allocated.retain(|g| {
                            (g.container_id, g.local_id) != (group.container_id, group.local_id)
                        });
                        crate::session_rows::put_in(&tx, session_id, &row);
                        stage_groups(&tx, std::slice::from_ref(group)).await?;
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await?;
            self.deletions_changed();
            return Err(OmError::NoSuchSession(session_id));
        }
        Ok(group)
    }

    /// Commits an open key: `groups` (in key order, each with its acknowledged
    /// length; groups of length 0 are dropped) must be groups allocated to this
    /// session, and their lengths must sum to `length`. Locations are taken
    /// from the om's own allocation record. Replaces any key of the same name.
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
            Err(e) => e,
        };
        // Reclaiming can fail too (the store is failing): the session's row then stays, the
        // next start loads the session back, and it expires one lease later with its groups
        // logged.
        if let Err(e) = self.reclaim_session(session_id, allocated).await {
            tracing::warn!(session = session_id, error = %e, "reclaiming a failed commit's groups failed; the session expires one lease after the next om start");
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

    /// Ends session `session_id` (which must commit into `target`): checks
    /// `groups` were allocated to it and sum to `length`; returns the session,
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
        let s = {
            let mut st = self.state();
            match st.sessions.get(&session_id) {
                None => return Err(OmError::NoSuchSession(session_id)),
                Some(s) if std::mem::discriminant(&s.target) != std::mem::discriminant(target) => {
                    return Err(OmError::InvalidArgument(format!(
                        "session {session_id} commits into {:?}, not {target:?}",
                        s.target
                    )));
                }
                Some(_) => {}
            }
            st.remove_session(session_id)
                .ok_or(OmError::NoSuchSession(session_id))?
        };
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
    /// nothing for a long time).
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`] when it ended (committed, aborted, expired).
    pub fn renew_key(&self, session_id: u64) -> Result<()> {
        let mut st = self.state();
        self.touch(&mut st, session_id)?;
        drop(st);
        self.renewals.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Open session `session_id`, its lease restarted now.
    fn touch<'a>(
        &self,
        st: &'a mut crate::manager::State,
        session_id: u64,
    ) -> Result<&'a mut OpenKeySession> {
        let s = st
            .sessions
            .get_mut(&session_id)
            .ok_or(OmError::NoSuchSession(session_id))?;
        s.last_active = self.config.clock.now();
        Ok(s)
    }

    /// Abandons an open key; nothing becomes visible and its groups are
    /// logged for deletion. Unknown sessions are fine (already ended).
    ///
    /// # Errors
    /// Store errors.
    pub async fn abort_key(&self, session_id: u64) -> Result<()> {
        let s = {
            let mut st = self.state();
            st.remove_session(session_id)
        };
        match s {
            Some(s) => self.reclaim_session(session_id, &s.allocated).await,
            None => Ok(()),
        }
    }

    /// Aborts every session whose lease (the om's `open_key_lease`, counted
    /// from its last open or allocation) ran out by `now`, logging its groups
    /// for deletion. Returns how many were aborted.
    ///
    /// # Errors
    /// Store errors (the sessions are gone from memory; their rows stay,
    /// and the next om start loads them back to expire one lease later).
    pub async fn expire_sessions(&self, now: Instant) -> Result<usize> {
        let lease = self.config.open_key_lease;
        let expired: Vec<(u64, OpenKeySession)> = {
            let mut st = self.state();
            let ids: Vec<u64> = st
                .sessions
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.last_active) >= lease)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| st.remove_session(id).map(|s| (id, s)))
                .collect()
        };
        if expired.is_empty() {
            return Ok(0);
        }
        // Two rows a session (its row, its staged groups), and one read each: a bounded
        // number per transaction.
        for chunk in expired.chunks(crate::deletion::TXN_BATCH / 2) {
            for (id, s) in chunk {
                tracing::info!(session = id, bucket = %s.bucket, key = %s.key, client = %s.client, "open-key lease expired; aborting");
            }
            transact(&self.store, |tx| {
                Box::pin(async move {
                    for (id, s) in chunk {
                        end_session(&tx, *id, &s.allocated, &[]).await?;
                    }
                    Ok::<(), OmError>(())
                })
            })
            .await?;
        }
        self.deletions_changed();
        Ok(expired.len())
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

    /// A group the session's row holds but the om's memory does not (its allocation's
    /// transaction committed as the session ended, and the om could crash before that
    /// allocation's own clean-up) is staged by the transaction that ends the session, once.
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
            let unknown = om
                .allocate_block_group(s.session_id, &[])
                .await
                .expect("allocate");
            // Memory forgets the second group: as if its allocation had not yet returned.
            {
                let mut st = om.state();
                let session = st.sessions.get_mut(&s.session_id).expect("open");
                session.allocated.retain(|g| g.local_id != unknown.local_id);
            }
            let before = om.pending_deletions().await.expect("pending");
            match end {
                "abort" => om.abort_key(s.session_id).await.expect("abort"),
                _ => {
                    let g = BlockGroup {
                        length: 1,
                        ..known.clone()
                    };
                    om.commit_key(s.session_id, &[g], 1, BTreeMap::new())
                        .await
                        .expect("commit");
                }
            }
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
}
