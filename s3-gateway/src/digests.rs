//! The digests of a body the gateway stores — its MD5 (the ETag of a single-part object or of
//! a part, Amazon S3 API Reference, "Common Response Headers: ETag"), the checksum stored with
//! it, and for a copy the source's own stored checksum — computed on a thread of the blocking
//! pool while the request's task goes on writing the same bytes.
//!
//! MD5 is serial and runs at about 0.7 GB/s on one core here; on the request's task it stood
//! between every body chunk and its write, so a 100 MB PUT ran at 0.67–0.76 of the same bytes
//! written straight through the client (`cargo xtask bench s3`, `put gateway/direct`), and at
//! 0.86–1.09 with MD5 left out. Here the task hands each chunk (a `Bytes`, shared, not copied)
//! to the digest thread and writes it at once; the digests are asked for only after the last
//! write.
//!
//! Bounds: the chunks handed over and not yet digested hold at most `budget` bytes (one chunk
//! larger than that waits for the whole budget, alone): [`BodyDigests::update`] waits while
//! they would exceed it. One blocking-pool thread per body being received or copied, for as
//! long as its request lasts; a request dropped part way drops its sender, and the thread ends
//! once it has digested what it already held.

use std::sync::Arc;

use bytes::Bytes;
use md5::{Digest, Md5};
use s3s::{S3Result, s3_error};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::integrity::{Algorithm, Hasher};

/// The digests of every byte handed to a [`BodyDigests`], in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Digests {
    /// MD5, 16 bytes.
    pub(crate) md5: [u8; 16],
    /// The digest in the pipe's algorithm (big-endian for CRCs, as Amazon encodes them).
    pub(crate) checksum: Vec<u8>,
    /// The digest in the second algorithm asked for, if one was.
    pub(crate) second: Option<Vec<u8>>,
}

/// MD5 and one or two checksums of a body, computed off the request's task.
pub(crate) struct BodyDigests {
    sender: Option<mpsc::UnboundedSender<(Bytes, OwnedSemaphorePermit)>>,
    budget: Arc<Semaphore>,
    /// Permits of the whole budget (bytes, at least 1).
    budget_bytes: u32,
    worker: tokio::task::JoinHandle<Digests>,
}

impl BodyDigests {
    /// Starts the digest thread: MD5, `algorithm`, and `second` when given, of every chunk
    /// [`update`](Self::update) hands over, holding at most `budget` bytes not yet digested
    /// (clamped to 1 byte ..= `u32::MAX`).
    pub(crate) fn start(algorithm: Algorithm, second: Option<Algorithm>, budget: u64) -> Self {
        let budget_bytes = u32::try_from(budget.max(1)).unwrap_or(u32::MAX);
        let (sender, mut chunks) = mpsc::unbounded_channel::<(Bytes, OwnedSemaphorePermit)>();
        let worker = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            let mut checksum = Hasher::new(algorithm);
            let mut other = second.map(Hasher::new);
            while let Some((chunk, permit)) = chunks.blocking_recv() {
                md5.update(&chunk);
                checksum.update(&chunk);
                if let Some(h) = other.as_mut() {
                    h.update(&chunk);
                }
                // The chunk's bytes leave the budget once digested.
                drop((chunk, permit));
            }
            Digests {
                md5: md5.finalize().into(),
                checksum: checksum.finish(),
                second: other.map(Hasher::finish),
            }
        });
        Self {
            sender: Some(sender),
            budget: Arc::new(Semaphore::new(budget_bytes as usize)),
            budget_bytes,
            worker,
        }
    }

    /// Hands `chunk`, the next bytes of the body, to the digest thread; waits while the bytes
    /// not yet digested would exceed the budget. Empty chunks are skipped.
    ///
    /// # Errors
    /// 500 `InternalError` when the digest thread is gone (it panicked).
    pub(crate) async fn update(&mut self, chunk: Bytes) -> S3Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let weight =
            u32::try_from(chunk.len()).map_or(self.budget_bytes, |n| n.min(self.budget_bytes));
        let permit = Arc::clone(&self.budget)
            .acquire_many_owned(weight)
            .await
            .map_err(|_| gone())?;
        self.sender
            .as_ref()
            .ok_or_else(gone)?
            .send((chunk, permit))
            .map_err(|_| gone())
    }

    /// The digests of every byte handed over, once the thread has digested them all.
    ///
    /// # Errors
    /// 500 `InternalError` when the digest thread panicked.
    pub(crate) async fn finish(mut self) -> S3Result<Digests> {
        // The thread's loop ends when the last sender goes.
        self.sender = None;
        (&mut self.worker).await.map_err(|_| gone())
    }
}

fn gone() -> s3s::S3Error {
    s3_error!(InternalError, "the body's digest thread stopped")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn direct(a: Algorithm, second: Option<Algorithm>, data: &[u8]) -> Digests {
        Digests {
            md5: Md5::digest(data).into(),
            checksum: a.digest(data),
            second: second.map(|s| s.digest(data)),
        }
    }

    fn algorithm() -> impl Strategy<Value = Algorithm> {
        proptest::sample::select(Algorithm::ALL.to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// However the body is cut into chunks and whatever the budget (smaller or larger than
        /// the chunks), the digests are those of the whole body.
        #[test]
        fn digests_equal_direct_ones_for_any_chunking(
            data in proptest::collection::vec(any::<u8>(), 0..20_000),
            cuts in proptest::collection::vec(0usize..20_000, 0..12),
            budget in 1u64..8_192,
            a in algorithm(),
            second in proptest::option::of(algorithm()),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = rt.block_on(async {
                let mut d = BodyDigests::start(a, second, budget);
                let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
                cuts.sort_unstable();
                let mut at = 0;
                for c in cuts.into_iter().chain(std::iter::once(data.len())) {
                    d.update(Bytes::copy_from_slice(&data[at..c])).await.unwrap();
                    at = c;
                }
                d.finish().await.unwrap()
            });
            prop_assert_eq!(got, direct(a, second, &data));
        }
    }

    /// An update waits while the bytes handed over and not yet digested would exceed the
    /// budget, and goes on once they are digested.
    #[tokio::test]
    async fn an_update_waits_for_the_budget() {
        use futures::FutureExt;
        let mut d = BodyDigests::start(Algorithm::Crc64Nvme, None, 100);
        // Stand in for 100 bytes the thread has not digested yet.
        let held = Arc::clone(&d.budget).acquire_many_owned(100).await.unwrap();
        assert!(
            d.update(Bytes::from(vec![1u8; 60]))
                .now_or_never()
                .is_none(),
            "an update went past a full budget"
        );
        drop(held);
        d.update(Bytes::from(vec![1u8; 60])).await.unwrap();
        // A chunk larger than the budget takes all of it, alone.
        d.update(Bytes::from(vec![7u8; 1000])).await.unwrap();
        let mut all = vec![1u8; 60];
        all.extend([7u8; 1000]);
        assert_eq!(
            d.finish().await.unwrap(),
            direct(Algorithm::Crc64Nvme, None, &all)
        );
    }
}
