//! [`WriteState`]: what every key writer (EC, replicated, a multipart part)
//! tracks about itself besides its data — whether it failed, whether a call
//! was cancelled mid-way, and the om session it must end — so that the
//! writers share one copy of those rules:
//! - a failure is kept and reported by every later call
//!   ([`ClientError::WriteAborted`], the original failure as its source);
//! - a `write`/`hsync` whose future was dropped before it finished leaves
//!   the writer refusing every later call ([`ClientError::WriteCancelled`]);
//! - the session is aborted if the writer is dropped or fails, and left to
//!   the om once it committed.

use std::sync::Arc;

use crate::session::Guard;
use crate::{ClientError, Result};

/// One writer's health and session (see the module docs).
#[derive(Debug)]
pub(crate) struct WriteState {
    /// `bucket/key`, for error messages.
    key: String,
    session_id: u64,
    failed: Option<Arc<ClientError>>,
    /// Set while a mutating call runs; still set at the next call means
    /// that call's future was dropped mid-way.
    in_flight: bool,
    /// Aborts the session on drop until the key (or part) is committed.
    session: Option<Guard>,
}

impl WriteState {
    pub(crate) fn new(bucket: &str, key: &str, session_id: u64, session: Guard) -> Self {
        Self {
            key: format!("{bucket}/{key}"),
            session_id,
            failed: None,
            in_flight: false,
            session: Some(session),
        }
    }

    /// The om session being written.
    pub(crate) fn session_id(&self) -> u64 {
        self.session_id
    }

    /// `Ok` when the writer may go on.
    ///
    /// # Errors
    /// [`ClientError::WriteCancelled`] after a cancelled call;
    /// [`ClientError::WriteAborted`] after a failure.
    pub(crate) fn check(&self) -> Result<()> {
        if self.in_flight {
            return Err(ClientError::WriteCancelled {
                key: self.key.clone(),
            });
        }
        match &self.failed {
            Some(cause) => Err(ClientError::WriteAborted {
                key: self.key.clone(),
                cause: Arc::clone(cause),
            }),
            None => Ok(()),
        }
    }

    /// Starts a mutating call (checks first).
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub(crate) fn begin(&mut self) -> Result<()> {
        self.check()?;
        self.in_flight = true;
        Ok(())
    }

    /// Ends a mutating call that ran to completion, recording its failure.
    ///
    /// # Errors
    /// `result`'s error, as [`ClientError::WriteAborted`].
    pub(crate) fn end<T>(&mut self, result: Result<T>) -> Result<T> {
        self.in_flight = false;
        result.map_err(|e| self.fail(e))
    }

    /// Records `e` as the writer's failure; returns the error to report.
    pub(crate) fn fail(&mut self, e: ClientError) -> ClientError {
        // A failure reported already is not wrapped again.
        if let ClientError::WriteAborted { .. } | ClientError::WriteCancelled { .. } = e {
            return e;
        }
        let cause = Arc::new(e);
        self.failed = Some(Arc::clone(&cause));
        ClientError::WriteAborted {
            key: self.key.clone(),
            cause,
        }
    }

    /// Aborts the session now, waiting for the om (a writer given up on
    /// purpose); nothing is left for the drop to do.
    pub(crate) async fn abort(&mut self) {
        if let Some(g) = self.session.take() {
            g.undo().await;
        }
    }

    /// Ends the session as a close's `result` says: a commit that went
    /// through leaves it to the om; a failed close aborts it now, waiting
    /// for the om.
    pub(crate) async fn settle<T>(&mut self, result: &Result<T>) {
        if let Some(g) = self.session.take() {
            match result {
                Ok(_) => g.disarm(),
                Err(_) => g.undo().await,
            }
        }
    }
}
