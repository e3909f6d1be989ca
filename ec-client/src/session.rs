//! What an om call creates on the caller's behalf — a key session
//! (OpenKey, OpenPart) or a multipart upload (InitiateMultipartUpload) —
//! from the moment the om creates it until the caller owns it. The call
//! runs on a task of its own and its answer comes back under a guard, so a
//! caller cancelled at any await point (while the RPC is in flight, or
//! after it returned) undoes what the om created at once, instead of
//! leaving a session open until its lease runs out or an upload that keeps
//! its bucket from being deleted.

use std::time::Duration;

use proto_crate::ReplicationConfig;

use crate::om_client::OmClient;
use crate::{ClientError, Result};

/// What a [`Guard`] undoes.
#[derive(Debug, Clone)]
pub(crate) enum Undo {
    /// Abort a key or part session (a row of the om's store: any om that
    /// serves aborts it).
    Session(u64),
    /// Abort a multipart upload.
    Upload(String),
}

impl Undo {
    async fn run(&self, om: &OmClient) {
        // A failure leaves the session to its lease, the upload to an
        // explicit abort.
        let _ = match self {
            Self::Session(id) => om.abort_key(*id).await,
            Self::Upload(id) => om.abort_multipart_upload(id).await,
        };
    }
}

/// Undoes what the om created when dropped, unless disarmed (by the owner
/// that takes it over: a writer's own drop aborts its session from then on).
#[derive(Debug)]
pub(crate) struct Guard {
    om: OmClient,
    undo: Undo,
    armed: bool,
}

impl Guard {
    pub(crate) fn new(om: OmClient, undo: Undo) -> Self {
        Self {
            om,
            undo,
            armed: true,
        }
    }

    /// The caller is now responsible for what the om created.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Undoes now and waits for the om's answer. If this call is itself
    /// cancelled, the guard is still armed and its drop undoes.
    pub(crate) async fn undo(mut self) {
        self.undo.run(&self.om).await;
        self.armed = false;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let om = self.om.clone();
            let undo = self.undo.clone();
            handle.spawn(proto_crate::request_id::propagate(async move {
                undo.run(&om).await;
            }));
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
    pub(crate) guard: Guard,
}

/// The fields of an OpenKey or OpenPart answer, as the om sent them.
pub(crate) struct SessionGrant {
    pub(crate) session_id: u64,
    pub(crate) replication: String,
    pub(crate) block_size: u64,
    pub(crate) lease_ms: u64,
}

/// Runs `call` on a task of its own; what it created comes back under a
/// guard (dropped with the channel if the caller is gone, which undoes it).
///
/// # Errors
/// `call`'s error; [`ClientError::TaskLost`] if the task ended without an
/// answer (the runtime shutting down).
pub(crate) async fn guarded<T, F>(om: &OmClient, call: F) -> Result<(T, Guard)>
where
    T: Send + 'static,
    F: Future<Output = Result<(T, Undo)>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let om = om.clone();
    tokio::spawn(proto_crate::request_id::propagate(async move {
        let answer = call.await.map(|(v, undo)| (v, Guard::new(om, undo)));
        // A send to a dropped receiver hands the value back, and dropping
        // it undoes; a value left unreceived is dropped with the channel.
        let _ = tx.send(answer);
    }));
    rx.await
        .map_err(|_| ClientError::TaskLost("the om call creating a session or upload".into()))?
}

/// Opens a session with `open` (an OpenKey or OpenPart call), guarded: a
/// malformed answer aborts the session too.
///
/// # Errors
/// As [`guarded`]; [`ClientError::Protocol`] for an answer whose
/// replication does not parse.
pub(crate) async fn open_guarded<F>(om: &OmClient, open: F) -> Result<OpenedKey>
where
    F: Future<Output = Result<SessionGrant>> + Send + 'static,
{
    let (grant, guard) = guarded(om, async move {
        let g = open.await?;
        let undo = Undo::Session(g.session_id);
        Ok((g, undo))
    })
    .await?;
    // Dropping the guard on a parse error aborts the session.
    let replication = grant.replication.parse()?;
    Ok(OpenedKey {
        session_id: grant.session_id,
        replication,
        block_size: grant.block_size,
        lease: (grant.lease_ms > 0).then(|| Duration::from_millis(grant.lease_ms)),
        guard,
    })
}
