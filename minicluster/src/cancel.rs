//! [`CancelAtPoll`]: drops a future at its N-th poll, to test what a writer
//! leaves behind when the task driving it is cancelled at each of its await
//! points in turn (a `tokio::time::timeout` that fires, a `select!` branch
//! that loses, a client that hangs up on the S3 gateway).
//!
//! Poll 1 is the first: `CancelAtPoll::new(f, 1)` drops `f` before it ever
//! runs, `new(f, 2)` lets it run to its first suspension and drops it there,
//! and so on. A test loops N = 1, 2, … until the future finishes before its
//! N-th poll ([`Cancelled::Finished`]); every earlier N cancelled it at a
//! distinct suspension point.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What became of a future run under [`CancelAtPoll`].
#[derive(Debug)]
pub enum Cancelled<T> {
    /// It completed within its first N−1 polls, with this output.
    Finished(T),
    /// It was dropped at its N-th poll, having been polled N−1 times.
    Dropped,
}

impl<T> Cancelled<T> {
    /// The output, if the future finished.
    pub fn finished(self) -> Option<T> {
        match self {
            Self::Finished(v) => Some(v),
            Self::Dropped => None,
        }
    }
}

/// A future that polls `inner` until it completes or until the `cancel_at`-th
/// poll, at which `inner` is dropped without being polled again.
pub struct CancelAtPoll<F> {
    inner: Option<Pin<Box<F>>>,
    polls: u32,
    cancel_at: u32,
}

impl<F: Future> CancelAtPoll<F> {
    /// Wraps `inner`; `cancel_at` counts from 1 (0 behaves as 1).
    pub fn new(inner: F, cancel_at: u32) -> Self {
        Self {
            inner: Some(Box::pin(inner)),
            polls: 0,
            cancel_at: cancel_at.max(1),
        }
    }
}

impl<F: Future> Future for CancelAtPoll<F> {
    type Output = Cancelled<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `inner` is boxed, so `Self` is `Unpin`.
        let this = self.get_mut();
        this.polls += 1;
        if this.polls >= this.cancel_at {
            this.inner = None;
            return Poll::Ready(Cancelled::Dropped);
        }
        match this.inner.as_mut() {
            Some(f) => match f.as_mut().poll(cx) {
                Poll::Ready(v) => {
                    this.inner = None;
                    Poll::Ready(Cancelled::Finished(v))
                }
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Ready(Cancelled::Dropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn three_suspensions() -> u32 {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        7
    }

    #[tokio::test]
    async fn drops_at_the_nth_poll_and_finishes_after_the_last() {
        for n in 1..=4 {
            let r = CancelAtPoll::new(three_suspensions(), n).await;
            assert!(matches!(r, Cancelled::Dropped), "poll {n}");
        }
        let r = CancelAtPoll::new(three_suspensions(), 5).await;
        assert_eq!(r.finished(), Some(7));
    }
}
