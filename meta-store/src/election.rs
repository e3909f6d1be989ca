//! Leader election among oms that share a store: which om runs the
//! background services (liveness, deletion, the ReplicationManager).
//!
//! On etcd it is etcd's own election API over a lease: a candidate holds a
//! lease of `ttl`, renews it every `ttl / 3`, and campaigns; the candidate
//! whose key under the election's name was created first leads. When the
//! leader dies its lease expires within `ttl` and the next candidate leads;
//! when it steps down (or drops its [`Leadership`]) its key is deleted
//! (etcd's `Resign`), the lease revoked, and the next one leads at once. On redb the store is one file that one om
//! process holds, so that om always leads.
//!
//! A leader learns that it may have lost the lease ([`Leadership::lost`]) as
//! soon as a renewal has not been answered two thirds of `ttl` after the last
//! renewal was sent (the lease was extended no earlier than that send), so it
//! stops acting before another candidate can be elected.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::etcd_store::{RETRY_PAUSE, auth_expired, not_sent, transient};
use crate::{Fence, MetaStore, StoreError};

/// Shortest lease a candidate may ask for: etcd's own minimum lease TTL with
/// its default election timeout (leases are whole seconds).
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Leadership of one election, held until it is dropped, resigned or lost.
#[derive(Debug)]
pub struct Leadership {
    lost: watch::Receiver<bool>,
    /// On redb, the sender that never reports a loss (kept so that the
    /// channel stays open); on etcd the renewal task owns it.
    _never: Option<watch::Sender<bool>>,
    held: Option<Held>,
}

/// What an etcd leadership holds: the leader key, its lease and the
/// lease's renewal task.
struct Held {
    /// The election's name.
    election: String,
    client: etcd_client::Client,
    leader: etcd_client::LeaderKey,
    lease: i64,
    renewer: JoinHandle<()>,
    /// Deadline of each call made to step down.
    timeout: Duration,
}

impl Held {
    /// Deletes the leader key (etcd's `Resign`: the next candidate leads at
    /// once), then revokes the lease. The revoke is best effort: with etcd's
    /// authentication on, etcd 3.4 refuses a client's revoke of a lease
    /// that has keys ("user name is empty"), and a lease without keys only
    /// waits out its TTL.
    async fn step_down(self) -> Result<(), StoreError> {
        self.renewer.abort();
        let mut client = self.client;
        let timeout = self.timeout;
        let mut resigned = bounded(timeout, resign(&mut client, &self.leader)).await;
        if matches!(&resigned, Err(StoreError::Etcd(e)) if auth_expired(e)) {
            // The token expired while leading: authenticate again, once.
            bounded(timeout, async {
                client.refresh_token().await.map_err(Into::into)
            })
            .await?;
            resigned = bounded(timeout, resign(&mut client, &self.leader)).await;
        }
        if let Err(e) = revoke(client, self.lease, timeout).await {
            tracing::debug!(lease = self.lease, "lease revoke after resign: {e}");
        }
        resigned
    }
}

/// A campaign not yet won: its lease's renewal task and how to revoke the
/// lease. Dropped before [`MetaStore::campaign`] returns (the caller's
/// future was dropped), it stops renewing and revokes the lease in the
/// background, so the candidate's key leaves the queue at once, or within
/// the lease's TTL if the revoke fails.
struct PendingCampaign {
    renewer: Option<JoinHandle<()>>,
    client: etcd_client::Client,
    lease: i64,
    timeout: Duration,
}

impl PendingCampaign {
    /// Stops renewing and revokes the lease, waiting for the revoke.
    async fn give_up(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
            let _ = revoke(self.client.clone(), self.lease, self.timeout).await;
        }
    }
}

impl Drop for PendingCampaign {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(revoke(self.client.clone(), self.lease, self.timeout));
            }
        }
    }
}

/// Revokes `lease` (best effort, bounded by `timeout`).
async fn revoke(
    mut client: etcd_client::Client,
    lease: i64,
    timeout: Duration,
) -> Result<(), StoreError> {
    bounded(timeout, async {
        client
            .lease_revoke(lease)
            .await
            .map(|_| ())
            .map_err(Into::into)
    })
    .await
}

/// etcd's `Resign` of `leader`.
async fn resign(
    client: &mut etcd_client::Client,
    leader: &etcd_client::LeaderKey,
) -> Result<(), StoreError> {
    let options = etcd_client::ResignOptions::new().with_leader(leader.clone());
    client.resign(Some(options)).await?;
    Ok(())
}

/// `call`, or [`StoreError::Timeout`] after `deadline`.
async fn bounded<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(deadline, call)
        .await
        .map_err(|_| StoreError::Timeout(deadline))?
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Whether the leadership is still held (no renewal has failed, and the
    /// renewal task is running).
    #[must_use]
    pub fn is_held(&self) -> bool {
        !*self.lost.borrow() && self.lost.has_changed().is_ok()
    }

    /// Resolves once a renewal of the lease failed: from then on another
    /// candidate may lead, so the holder must stop acting as leader. Never
    /// resolves on redb.
    pub async fn lost(&mut self) {
        // An error means the renewal task is gone, which is a loss too.
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// The fence of this leadership, for [`transact_fenced`](crate::transact_fenced):
    /// its writes are refused once it has ended, whether or not this holder
    /// has noticed. `None` on redb (its one om leads for good).
    #[must_use]
    pub fn fence(&self) -> Option<Fence> {
        self.held.as_ref().map(|h| {
            Fence::new(
                &h.election,
                h.leader.key(),
                u64::try_from(h.leader.rev()).unwrap_or(0),
            )
        })
    }

    /// Steps down: deletes the leader key, so the next candidate leads at
    /// once, and revokes the lease.
    ///
    /// # Errors
    /// [`StoreError::Etcd`] if the resign fails (the lease then expires
    /// within its TTL, since it is no longer renewed).
    pub async fn resign(mut self) -> Result<(), StoreError> {
        match self.held.take() {
            Some(held) => held.step_down().await,
            None => Ok(()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            held.renewer.abort();
            // Best effort: without it the lease expires within its TTL.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = held.step_down().await;
                });
            }
        }
    }
}

/// Checks an election name: not empty, no `/`.
fn check_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.contains('/') {
        return Err(StoreError::InvalidElectionName(name.to_string()));
    }
    Ok(())
}

impl MetaStore {
    /// Campaigns in election `name` (not empty, no `/`) as `candidate` (an
    /// om's address: what [`leader`](Self::leader) answers) with a lease of
    /// `ttl` (at least [`MIN_TTL`], whole seconds), and returns once this
    /// candidate leads, however long another candidate leads before it.
    ///
    /// # Errors
    /// [`StoreError::InvalidElectionName`]; [`StoreError::LeaseLost`] if the
    /// lease could not be renewed while it waited; [`StoreError::Etcd`] if
    /// etcd fails; [`StoreError::Protocol`] if etcd answers without a leader
    /// key.
    pub async fn campaign(
        &self,
        name: &str,
        candidate: &str,
        ttl: Duration,
    ) -> Result<Leadership, StoreError> {
        check_name(name)?;
        let store = match self {
            Self::Redb(_) => {
                let (never, lost) = watch::channel(false);
                return Ok(Leadership {
                    lost,
                    _never: Some(never),
                    held: None,
                });
            }
            Self::Etcd(s) => s,
        };
        let ttl = Duration::from_secs(ttl.max(MIN_TTL).as_secs());
        let mut client = store.election_client();
        if store.has_user() {
            // The election client's token may have expired while it was
            // idle (a campaign is rare): authenticate again first.
            bounded(store.call_timeout(), async {
                client.refresh_token().await.map_err(Into::into)
            })
            .await?;
        }
        // The lease runs from no earlier than this.
        let granted = Instant::now();
        let lease = tokio::time::timeout(
            ttl / 3,
            client.lease_grant(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX), None),
        )
        .await
        .map_err(|_| StoreError::Timeout(ttl / 3))??
        .id();
        let (tx, lost) = watch::channel(false);
        // Until elected, a dropped campaign (its caller gave up) must not
        // leave the lease renewed and the candidate queued: it would lead
        // next as a ghost that runs nothing.
        let mut pending = PendingCampaign {
            renewer: Some(tokio::spawn(renew(
                client.clone(),
                std::sync::Arc::clone(&store.config),
                lease,
                ttl,
                granted,
                tx,
            ))),
            client: client.clone(),
            lease,
            timeout: store.call_timeout(),
        };
        let mut watching = lost.clone();
        let campaign = client.campaign(store.election_name(name), candidate, lease);
        let elected = tokio::select! {
            r = campaign => match r {
                Ok(mut resp) => resp.take_leader().ok_or_else(|| {
                    StoreError::Protocol("a campaign answer without a leader key".into())
                }),
                Err(e) => Err(e.into()),
            },
            _ = watching.wait_for(|lost| *lost) => Err(StoreError::LeaseLost {
                election: name.to_string(),
                candidate: candidate.to_string(),
            }),
        };
        let leader = match elected {
            // A fence compares the key's create revision, and 0 would mean
            // "absent": a key without a revision cannot fence anything.
            Ok(leader) if leader.rev() <= 0 => {
                pending.give_up().await;
                return Err(StoreError::Protocol(format!(
                    "etcd elected a leader key with revision {}",
                    leader.rev()
                )));
            }
            Ok(leader) => leader,
            Err(e) => {
                pending.give_up().await;
                return Err(e);
            }
        };
        let Some(renewer) = pending.renewer.take() else {
            return Err(StoreError::Protocol(
                "campaign lost its renewal task".into(),
            ));
        };
        Ok(Leadership {
            lost,
            _never: None,
            held: Some(Held {
                election: name.to_string(),
                client,
                leader,
                lease,
                renewer,
                timeout: store.call_timeout(),
            }),
        })
    }

    /// The candidate leading election `name` now, if any (on redb: none
    /// recorded; its one om leads).
    ///
    /// # Errors
    /// [`StoreError::InvalidElectionName`]; [`StoreError::Etcd`] if etcd
    /// fails (a cluster without quorum included) past the call deadline, or
    /// at once for an error that is not a transport failure;
    /// [`StoreError::Timeout`] when no member answered within it.
    pub async fn leader(&self, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        let Self::Etcd(store) = self else {
            return Ok(None);
        };
        let mut client = store.election_client();
        let deadline = store.call_timeout();
        let started = Instant::now();
        let mut refreshed = false;
        // A read: sent again (to another member, picked at random) after a
        // failure in transport or no answer within a third of the deadline,
        // until the deadline, as the store's reads are.
        loop {
            let in_time = started.elapsed() < deadline;
            let asked =
                tokio::time::timeout(deadline / 3, client.leader(store.election_name(name))).await;
            match asked {
                Ok(Ok(resp)) => {
                    return Ok(resp
                        .kv()
                        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()));
                }
                // etcd's answer for an election nobody leads (not "etcdserver:
                // no leader", which is a cluster without quorum).
                Ok(Err(etcd_client::Error::GRpcStatus(s)))
                    if s.message() == "election: no leader" =>
                {
                    return Ok(None);
                }
                Ok(Err(e)) if auth_expired(&e) && !refreshed => {
                    // An idle election client's token expired: authenticate again, once.
                    refreshed = true;
                    bounded(deadline, async {
                        client.refresh_token().await.map_err(Into::into)
                    })
                    .await?;
                }
                Ok(Err(e)) if (not_sent(&e) || transient(&e)) && in_time => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) if in_time => {}
                Err(_) => return Err(StoreError::Timeout(deadline)),
            }
        }
    }
}

/// Renews `lease` (granted no earlier than `granted`) every `ttl / 3`; sets
/// `lost` and stops once no renewal has been answered two thirds of `ttl`
/// after the last answered one was sent, or once etcd says the lease is
/// gone. A renewal that fails (its member went away, the stream broke) is
/// sent again on a new keep-alive stream every [`RENEWAL_RETRY`] until
/// then, through a connection of its own to each member in turn (the shared
/// channels do not skip a dead member, and a try there can hang): a leader
/// rides out the loss of the etcd member it was renewing through.
async fn renew(
    client: etcd_client::Client,
    config: std::sync::Arc<crate::EtcdConfig>,
    lease: i64,
    ttl: Duration,
    granted: Instant,
    lost: watch::Sender<bool>,
) {
    // The lease is good until `last + ttl`; act only until `last + 2/3 ttl`.
    let mut last = granted;
    let mut lease_client = client.lease_client();
    let mut open = None;
    let mut next = Instant::now();
    // The member the last direct connection went to.
    let mut member = 0;
    loop {
        tokio::time::sleep_until(next).await;
        let deadline = last + ttl * 2 / 3;
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        // One try may hang on a member that went away (the client does not
        // skip it): bounded, so that several tries fit before the deadline.
        let attempt_deadline = deadline.min(sent + ttl / RENEWAL_TRIES);
        let renewal = tokio::time::timeout_at(
            attempt_deadline,
            renew_once(&mut lease_client, lease, &mut open),
        )
        .await
        .unwrap_or(Renewal::Failed);
        match renewal {
            Renewal::Renewed => {
                last = sent;
                next = last + ttl / 3;
            }
            Renewal::Gone => break,
            Renewal::Failed => {
                tracing::debug!(lease, "renewing the lease failed; trying the next member");
                open = None;
                member = (member + 1) % config.endpoints.len().max(1);
                let endpoint = config
                    .endpoints
                    .get(member)
                    .cloned()
                    .into_iter()
                    .collect::<Vec<_>>();
                let connected = tokio::time::timeout_at(
                    deadline,
                    crate::etcd_config::connect_client(&config, &endpoint, None),
                )
                .await;
                if let Ok(Ok(one)) = connected {
                    lease_client = one.lease_client();
                }
                next = Instant::now() + RENEWAL_RETRY;
            }
        }
    }
    let _ = lost.send(true);
}

/// Pause before a failed lease renewal is sent again.
const RENEWAL_RETRY: Duration = Duration::from_millis(20);

/// A renewal try is given `ttl / RENEWAL_TRIES` before it counts as failed
/// and is sent again (on a new stream, to a member picked again).
const RENEWAL_TRIES: u32 = 10;

/// What one lease renewal found.
enum Renewal {
    /// etcd extended the lease.
    Renewed,
    /// etcd has no such lease (it expired or was revoked).
    Gone,
    /// No answer: the call failed or the stream ended.
    Failed,
}

/// Sends one renewal of `lease` on the `open` keep-alive stream, opening
/// one first if there is none (`keep_alive` sends the first renewal and
/// reads its answer itself).
async fn renew_once(
    lease_client: &mut etcd_client::LeaseClient,
    lease: i64,
    open: &mut Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
) -> Renewal {
    if let Some((keeper, stream)) = open.as_mut() {
        if keeper.keep_alive().await.is_err() {
            return Renewal::Failed;
        }
        return match stream.message().await {
            Ok(Some(resp)) if resp.ttl() > 0 => Renewal::Renewed,
            Ok(Some(_)) => Renewal::Gone,
            _ => Renewal::Failed,
        };
    }
    match lease_client.keep_alive(lease).await {
        Ok(pair) => {
            *open = Some(pair);
            Renewal::Renewed
        }
        Err(etcd_client::Error::LeaseKeepAliveError(m)) if m == "lease not found" => Renewal::Gone,
        Err(_) => Renewal::Failed,
    }
}
