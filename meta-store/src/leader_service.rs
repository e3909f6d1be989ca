//! [`run_while_leading`]: a background service (the om's liveness checks,
//! block deletion, the ReplicationManager) that runs on exactly one of the
//! processes sharing a store at a time, and moves to another within a
//! bounded time when its process stops or dies.
//!
//! Each process calls it with the same election name: it campaigns, runs
//! the service while it leads, stops the service (drops its future) once
//! the leadership is lost, and campaigns again. The service gets its
//! leadership's [`Fence`], and writes through
//! [`transact_fenced`](crate::transact_fenced), so that a write already in
//! flight when the leadership ended is refused by the store rather than
//! landing beside the next leader's.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::{Fence, MetaStore, StoreError};

/// Runs `service` while `candidate` leads election `election` on `store`,
/// until `stop` turns true (or its sender is dropped); returns how many
/// terms it led. Stopping resigns at once, so the next candidate takes over
/// without waiting for the lease. A lost leadership (a renewal unanswered;
/// see [`Leadership::lost`](crate::Leadership::lost)) stops the service and
/// campaigns again; so does a campaign that failed (etcd unreachable),
/// after `ttl / 3`. A service that returns by itself ends its term: the
/// leadership is resigned and this returns. On redb the one process leads
/// at once and for good.
///
/// The service's future is dropped mid-await when the term ends: it must
/// keep its state in the store (fenced writes), not only in memory.
///
/// # Errors
/// [`StoreError::InvalidElectionName`] (nothing else is retried away).
pub async fn run_while_leading<F, Fut>(
    store: &MetaStore,
    election: &str,
    candidate: &str,
    ttl: Duration,
    mut stop: watch::Receiver<bool>,
    mut service: F,
) -> Result<u32, StoreError>
where
    F: FnMut(Option<Fence>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut terms = 0;
    loop {
        let campaigned = tokio::select! {
            () = stopped(&mut stop) => return Ok(terms),
            r = store.campaign(election, candidate, ttl) => r,
        };
        let leadership = match campaigned {
            Ok(l) => l,
            Err(e @ StoreError::InvalidElectionName(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(election, candidate, error = %e, "campaign failed; trying again");
                tokio::select! {
                    () = stopped(&mut stop) => return Ok(terms),
                    () = tokio::time::sleep(ttl / 3) => continue,
                }
            }
        };
        terms += 1;
        tracing::info!(election, candidate, term = terms, "leading: service starts");
        let mut leadership = leadership;
        let ran = service(leadership.fence());
        tokio::select! {
            () = stopped(&mut stop) => {
                if let Err(e) = leadership.resign().await {
                    tracing::warn!(election, candidate, error = %e, "resign failed; the lease runs out instead");
                }
                return Ok(terms);
            }
            () = leadership.lost() => {
                tracing::warn!(election, candidate, "leadership lost: service stopped");
            }
            () = ran => {
                if let Err(e) = leadership.resign().await {
                    tracing::warn!(election, candidate, error = %e, "resign failed; the lease runs out instead");
                }
                return Ok(terms);
            }
        }
    }
}

/// Resolves once `stop` is true or its sender is gone (the guard of the
/// value is dropped here, so callers' futures stay `Send`).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
