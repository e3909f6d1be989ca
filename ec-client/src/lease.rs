//! A writer's keep-alive: renews its om session's lease (a third of the
//! lease apart) for as long as the writer lives, so that a writer streaming
//! into one block group — allocating nothing for a long time — is never
//! taken for an abandoned one. It stops when the writer is dropped or
//! closed, or when the om says the session ended.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::ClientError;
use crate::om_client::OmClient;

/// Renews a session's lease in the background until dropped.
#[derive(Debug)]
pub(crate) struct LeaseKeeper(Option<JoinHandle<()>>);

impl LeaseKeeper {
    /// Starts renewing `session_id` every `lease / 3` (at least 50 ms
    /// apart); no task when the om gives no lease. Must run inside a tokio
    /// runtime.
    pub(crate) fn start(om: OmClient, session_id: u64, lease: Option<Duration>) -> Self {
        let Some(lease) = lease.filter(|l| !l.is_zero()) else {
            return Self(None);
        };
        let period = (lease / 3).max(Duration::from_millis(50));
        Self(Some(tokio::spawn(proto_crate::request_id::propagate(
            async move {
                loop {
                    tokio::time::sleep(period).await;
                    match om.renew_key(session_id).await {
                        Ok(()) => {}
                        Err(ClientError::Om {
                            code: proto_crate::OmErrorCode::NoSuchSession,
                            ..
                        }) => return,
                        Err(e) => {
                            tracing::debug!(session = session_id, error = %e, "renewing the lease failed; retrying");
                        }
                    }
                }
            },
        ))))
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}
