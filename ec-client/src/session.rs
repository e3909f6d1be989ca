//! An om key session from the moment the om opens it until a writer owns
//! it: opened on a task of its own and held by a guard, so that a caller
//! cancelled at any await point of `create_key` or `upload_part` — while
//! the OpenKey RPC is in flight, or after it returned — aborts the session
//! at once instead of leaving it open until its lease runs out.

use std::time::Duration;

use proto_crate::ReplicationConfig;

use crate::om_client::OmClient;
use crate::{ClientError, Result};

/// Aborts its om session when dropped, unless disarmed (by the writer that
/// takes the session over; the writer's own drop aborts from then on).
#[derive(Debug)]
pub(crate) struct SessionGuard {
    om: OmClient,
    session_id: u64,
    armed: bool,
}

impl SessionGuard {
    /// The caller (a writer) is now responsible for ending the session.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Aborts the session now and waits for the om's answer (a failure to
    /// reach it leaves the session to its lease).
    pub(crate) async fn abort(mut self) {
        self.armed = false;
        let _ = self.om.abort_key(self.session_id).await;
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let om = self.om.clone();
            let session = self.session_id;
            handle.spawn(async move {
                let _ = om.abort_key(session).await;
            });
        }
    }
}

/// What opening a key (or a multipart part) returns.
#[derive(Debug)]
pub(crate) struct OpenedKey {
    pub(crate) session_id: u64,
    pub(crate) replication: ReplicationConfig,
    pub(crate) block_size: u64,
    /// The session's lease (`None`: the om gives none).
    pub(crate) lease: Option<Duration>,
    /// Aborts the session if nothing takes it over.
    pub(crate) guard: SessionGuard,
}

/// The fields of an OpenKey or OpenPart answer.
pub(crate) struct SessionGrant {
    pub(crate) session_id: u64,
    pub(crate) replication: ReplicationConfig,
    pub(crate) block_size: u64,
    pub(crate) lease: Option<Duration>,
}

/// Runs `open` (an OpenKey or OpenPart call on `om`) on a task of its own
/// and hands back the session under a guard. If the caller is cancelled
/// before it receives the answer, the answer's guard is dropped with the
/// channel and aborts the session.
///
/// # Errors
/// `open`'s error; [`ClientError::InvalidArgument`] if the task was
/// cancelled by the runtime shutting down.
pub(crate) async fn open_guarded<F>(om: &OmClient, open: F) -> Result<OpenedKey>
where
    F: Future<Output = Result<SessionGrant>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let om = om.clone();
    tokio::spawn(async move {
        let opened = open.await.map(|g| OpenedKey {
            session_id: g.session_id,
            replication: g.replication,
            block_size: g.block_size,
            lease: g.lease,
            guard: SessionGuard {
                om,
                session_id: g.session_id,
                armed: true,
            },
        });
        // A send to a dropped receiver hands the value back, and dropping
        // it aborts the session; a value left unreceived in the channel is
        // dropped with the channel, the same way.
        let _ = tx.send(opened);
    });
    rx.await.map_err(|_| {
        ClientError::InvalidArgument("the task opening the om session was cancelled".into())
    })?
}
