//! [`ServingTask`]: the serving loop of a server (om, datanode, S3 gateway,
//! minicluster control service) with its shutdown signal — one copy of
//! "spawn, signal on stop or drop, wait a grace period, then abort".

use std::future::Future;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle};

/// How a stopped serving task ended.
#[derive(Debug)]
pub enum Stopped<T> {
    /// It returned this within the grace period.
    Finished(T),
    /// It panicked or was cancelled.
    Failed(JoinError),
    /// It outlived the grace period and was aborted.
    Aborted,
    /// It had been stopped before.
    AlreadyStopped,
}

/// A spawned serving loop and the sender of its shutdown signal. Dropping
/// it fires the signal (the loop winds down on its own); [`stop`](Self::stop)
/// fires it and waits.
#[derive(Debug)]
pub struct ServingTask<T> {
    signal: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> ServingTask<T> {
    /// Spawns `serve(shutdown)` on the current tokio runtime, where
    /// `shutdown` is a future that completes when the task is stopped or
    /// this handle dropped (hand it to `serve_with_incoming_shutdown`, or
    /// poll it in a `select!` of an accept loop).
    pub fn spawn<S, F>(serve: S) -> Self
    where
        S: FnOnce(ShutdownSignal) -> F,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(serve(ShutdownSignal(rx)));
        Self {
            signal: Some(tx),
            task: Some(task),
        }
    }

    /// Fires the shutdown signal and waits up to `grace` for the loop to
    /// end, then aborts it. A tonic server finishes its in-flight calls
    /// first; an accept loop that hands connections to tasks of their own
    /// (the S3 gateway) ends at once, and those connections run on.
    pub async fn stop(&mut self, grace: Duration) -> Stopped<T> {
        if let Some(tx) = self.signal.take() {
            let _ = tx.send(());
        }
        let Some(mut task) = self.task.take() else {
            return Stopped::AlreadyStopped;
        };
        match tokio::time::timeout(grace, &mut task).await {
            Ok(Ok(v)) => Stopped::Finished(v),
            Ok(Err(e)) => Stopped::Failed(e),
            Err(_) => {
                task.abort();
                Stopped::Aborted
            }
        }
    }
}

impl<T> Drop for ServingTask<T> {
    fn drop(&mut self) {
        if let Some(tx) = self.signal.take() {
            let _ = tx.send(());
        }
    }
}

/// Completes when its [`ServingTask`] is stopped or dropped.
#[derive(Debug)]
pub struct ShutdownSignal(oneshot::Receiver<()>);

impl ShutdownSignal {
    /// Waits for the signal.
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stop_signals_and_collects_the_result() {
        let mut t = ServingTask::spawn(|s| async move {
            s.wait().await;
            7
        });
        assert!(matches!(
            t.stop(Duration::from_secs(5)).await,
            Stopped::Finished(7)
        ));
        assert!(matches!(
            t.stop(Duration::from_secs(5)).await,
            Stopped::AlreadyStopped
        ));
    }

    #[tokio::test]
    async fn a_loop_that_ignores_the_signal_is_aborted_after_the_grace() {
        let mut t = ServingTask::spawn(|_s| std::future::pending::<()>());
        assert!(matches!(t.stop(Duration::ZERO).await, Stopped::Aborted));
    }
}
