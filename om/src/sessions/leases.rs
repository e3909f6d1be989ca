//! Open sessions' leases and bounds: renewals, expiry (Ozone's OpenKeyCleanupService), and
//! the per-client and overall bounds on opening (the parent module's notes say how exactly
//! they hold).

use std::time::{Duration, SystemTime};

use meta_store::transact;

use super::MAX_OPEN_SESSIONS;
use crate::clock::unix_ms;
use crate::deletion::end_session;
use crate::tables::{SESSION_LEASES, each_row};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Longest an om goes on with its count of every open session (raised by the sessions it
/// opens itself) before counting the rows again to check [`MAX_OPEN_SESSIONS`].
pub const SESSION_CENSUS_INTERVAL: Duration = Duration::from_secs(1);

/// Sessions ended per transaction by the expiring service: each reads three rows (its lease,
/// its record, the staged row's key) and writes four (three removed, one staged), within
/// etcd's 128 operations and compares per transaction. A chunk whose request is too large
/// (sessions of many groups: a staged row is as large as the session's record) ends its
/// sessions one per transaction instead.
pub(super) const EXPIRED_PER_TXN: usize = 25;

impl OzoneManager {
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

    /// Refuses a new session of `client` past its bound or past [`MAX_OPEN_SESSIONS`] (see
    /// the module's notes).
    pub(super) async fn check_session_bounds(&self, client: &str) -> Result<()> {
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
                // Sessions of many groups: too large together, each fits alone (a record
                // is bounded so that its end fits one request).
                Err(e) if chunk.len() > 1 && too_large_together(&e) => {
                    tracing::debug!(error = %e, "expiring sessions together is too large; one at a time");
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
                // The store failing (or a commit whose outcome is unknown): the rest would
                // fail too; the next pass takes it up. What may have been applied is
                // announced.
                Err(e) => {
                    self.deletions_changed();
                    if ended > 0 {
                        tracing::warn!(error = %e, expired = ended, "expiring open sessions failed part way; the next pass goes on");
                    }
                    return Err(e);
                }
                Ok(d) => d,
            };
            for (id, client) in &done {
                tracing::info!(session = id, client = %client, "open-key lease expired; aborting");
            }
            ended += done.len();
        }
        // A session that fails alone does not stop the others; the pass fails only when
        // nothing expired.
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

/// Whether `e` is a transaction too large for the store (in bytes or operations): sessions
/// ended together that each fit alone.
fn too_large_together(e: &OmError) -> bool {
    matches!(
        e,
        OmError::Store(
            meta_store::StoreError::RequestTooLarge { .. }
                | meta_store::StoreError::TooManyOps { .. }
        )
    )
}
