//! [`KeyOutputStream`]: the writer [`Client::create_key`](crate::Client::create_key)
//! returns, EC or replicated behind one API, with async methods and as a
//! `tokio::io::AsyncWrite` (`poll_shutdown` commits the key, as `close` does).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use proto_crate::{KeyInfo, PartInfo, WriteCondition};

use crate::om_client::{Commit, Committed};
use crate::{ClientError, EcKeyOutputStream, ReplicatedKeyOutputStream, Result};

/// The writer of one kind, owned by the stream or by its write in flight.
#[derive(Debug)]
enum Writer {
    Ec(EcKeyOutputStream),
    Replicated(ReplicatedKeyOutputStream),
}

impl Writer {
    async fn write(&mut self, buf: &[u8]) -> Result<()> {
        match self {
            Self::Ec(w) => w.write(buf).await,
            Self::Replicated(w) => w.write(buf).await,
        }
    }

    async fn finish(self, commit: Commit) -> Result<Committed> {
        match self {
            Self::Ec(w) => w.finish(commit).await,
            Self::Replicated(w) => w.finish(commit).await,
        }
    }
}

type WriteOp = Pin<Box<dyn Future<Output = (Writer, Result<()>)> + Send>>;
type ShutdownOp = Pin<Box<dyn Future<Output = Result<KeyInfo>> + Send>>;

/// A key being written. Nothing is visible until [`close`](Self::close) (or,
/// through `AsyncWrite`, `poll_shutdown`) commits it.
///
/// Two ways to write, which may be mixed:
/// - the async methods ([`write`](Self::write), [`hsync`](Self::hsync),
///   [`close`](Self::close) and the other commits);
/// - `tokio::io::AsyncWrite`, for `tokio::io::copy` and other code written
///   against it. `poll_write` copies the caller's bytes and accepts them at
///   once (write-behind, as `tokio::fs::File` does): at most one such write
///   is in flight, and its failure is returned by the next call (the next
///   write, `poll_flush` or `poll_shutdown`). `poll_flush` waits for it and
///   makes nothing durable (for that, see [`hsync`](Self::hsync));
///   `poll_shutdown` commits the key as [`close`](Self::close) does, and
///   [`committed`](Self::committed) then returns it. Its errors are
///   `std::io::Error`s carrying the [`ClientError`]
///   ([`ClientError::from_io`] takes it back out).
pub struct KeyOutputStream {
    /// The writer, unless a write in flight or a commit owns it.
    writer: Option<Writer>,
    /// An `AsyncWrite` write in flight (a `Mutex` only so that the stream
    /// stays `Sync`; it is reached through `&mut self` alone).
    op: Mutex<Option<WriteOp>>,
    /// `poll_shutdown`'s commit in flight.
    shutdown: Mutex<Option<ShutdownOp>>,
    /// The key `poll_shutdown` committed.
    committed: Option<KeyInfo>,
    /// Why `poll_shutdown`'s commit failed (the writer is gone with it).
    failed: Option<Arc<ClientError>>,
    /// Set while an async method waits for an `AsyncWrite` write in flight:
    /// still set at the next call means that call was cancelled and the
    /// write (and the writer) dropped with it.
    settling: bool,
    /// `bucket/key`, for errors.
    key: String,
    /// Bytes accepted so far.
    accepted: u64,
}

impl std::fmt::Debug for KeyOutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyOutputStream")
            .field("writer", &self.writer)
            .field("accepted", &self.accepted)
            .field("committed", &self.committed.is_some())
            .finish_non_exhaustive()
    }
}

impl KeyOutputStream {
    pub(crate) fn ec(key: String, w: EcKeyOutputStream) -> Self {
        Self::of(key, Writer::Ec(w))
    }

    pub(crate) fn replicated(key: String, w: ReplicatedKeyOutputStream) -> Self {
        Self::of(key, Writer::Replicated(w))
    }

    fn of(key: String, writer: Writer) -> Self {
        Self {
            writer: Some(writer),
            op: Mutex::new(None),
            shutdown: Mutex::new(None),
            committed: None,
            failed: None,
            settling: false,
            key,
            accepted: 0,
        }
    }

    /// Why there is no writer to call: a cancelled wait for a write in
    /// flight ([`ClientError::WriteCancelled`]), a failed commit
    /// ([`ClientError::WriteAborted`]), a commit done or under way.
    fn gone(&self) -> ClientError {
        let key = self.key.clone();
        if self.settling {
            return ClientError::WriteCancelled { key };
        }
        if let Some(cause) = &self.failed {
            return ClientError::WriteAborted {
                key,
                cause: Arc::clone(cause),
            };
        }
        if self.committed.is_some() {
            return ClientError::InvalidArgument(format!("{key} was already committed"));
        }
        ClientError::InvalidArgument(format!("{key} is being committed (shutdown under way)"))
    }

    /// The EC writer, when this key is erasure coded (and no `AsyncWrite`
    /// write is in flight).
    #[must_use]
    pub fn as_ec(&self) -> Option<&EcKeyOutputStream> {
        match &self.writer {
            Some(Writer::Ec(w)) => Some(w),
            _ => None,
        }
    }

    /// The replicated writer, when this key is replicated (and no
    /// `AsyncWrite` write is in flight).
    #[must_use]
    pub fn as_replicated(&self) -> Option<&ReplicatedKeyOutputStream> {
        match &self.writer {
            Some(Writer::Replicated(w)) => Some(w),
            _ => None,
        }
    }

    /// The key `poll_shutdown` committed, once it has.
    #[must_use]
    pub fn committed(&self) -> Option<&KeyInfo> {
        self.committed.as_ref()
    }

    /// Waits for an `AsyncWrite` write in flight and takes the writer back.
    ///
    /// # Errors
    /// That write's failure; [`gone`](Self::gone)'s after a cancelled wait,
    /// a failed commit or a commit.
    async fn settle(&mut self) -> Result<&mut Writer> {
        let op = self
            .op
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(op) = op {
            self.settling = true;
            let (w, r) = op.await;
            self.settling = false;
            self.writer = Some(w);
            r?;
        }
        match self.writer {
            Some(ref mut w) => Ok(w),
            None => Err(self.gone()),
        }
    }

    /// The writer, taken for a commit.
    async fn take(mut self) -> Result<Writer> {
        self.settle().await?;
        match self.writer.take() {
            Some(w) => Ok(w),
            None => Err(self.gone()),
        }
    }

    /// Gives the key up: nothing is committed, and its om session is aborted
    /// now (the om frees what was written), waiting for the om's answer —
    /// where dropping the stream aborts from a task of its own. An
    /// `AsyncWrite` user's way out after a failure on the source side, since
    /// `shutdown()` commits.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] when the key was already committed.
    /// A `poll_shutdown` commit already under way (it may have reached the
    /// om) is not cut short: abort waits for it, and answers that error if
    /// it committed, `Ok` if it failed (a failed commit aborts the session).
    pub async fn abort(mut self) -> Result<()> {
        // A write in flight ends first; its failure does not matter now.
        let _ = self.settle().await;
        let committing = self
            .shutdown
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(commit) = committing {
            return match commit.await {
                Ok(info) => {
                    self.committed = Some(info);
                    Err(self.gone())
                }
                Err(_) => Ok(()),
            };
        }
        match self.writer.take() {
            Some(Writer::Ec(w)) => w.abort().await,
            Some(Writer::Replicated(w)) => w.abort().await,
            None if self.committed.is_some() => return Err(self.gone()),
            None => {}
        }
        Ok(())
    }

    /// Appends `buf` to the key.
    ///
    /// # Errors
    /// The underlying writer's failure (see [`EcKeyOutputStream::write`] and
    /// [`ReplicatedKeyOutputStream::write`]), or an `AsyncWrite` write's.
    pub async fn write(&mut self, buf: &[u8]) -> Result<()> {
        self.settle().await?.write(buf).await?;
        self.accepted += buf.len() as u64;
        Ok(())
    }

    /// A no-op for both kinds (data moves a stripe or a chunk at a time).
    ///
    /// # Errors
    /// A failure recorded earlier.
    pub fn flush(&mut self) -> Result<()> {
        let in_flight = self
            .op
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        match &mut self.writer {
            Some(Writer::Ec(w)) => w.flush(),
            Some(Writer::Replicated(_)) => Ok(()),
            // An AsyncWrite write is in flight: poll_flush waits for it.
            None if in_flight => Ok(()),
            None => Err(self.gone()),
        }
    }

    /// Durability of everything written so far: supported on replicated
    /// keys, an explicit `Unsupported` error on EC keys.
    ///
    /// # Errors
    /// [`ClientError::Unsupported`](crate::ClientError::Unsupported) on EC;
    /// write failures on replicated keys.
    pub async fn hsync(&mut self) -> Result<()> {
        match self.settle().await? {
            Writer::Ec(w) => w.hsync(),
            Writer::Replicated(w) => w.hsync().await,
        }
    }

    /// Bytes accepted so far (by `AsyncWrite`, when accepted: a write-behind
    /// piece that fails afterwards is counted, and the failure is reported by
    /// the next call).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.accepted
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes what is buffered and commits the key; returns it.
    ///
    /// # Errors
    /// Any write failure: the key is then not committed.
    pub async fn close(self) -> Result<KeyInfo> {
        self.close_with(BTreeMap::new()).await
    }

    /// Writes what is buffered and commits the key with object `metadata`
    /// (the S3 gateway keeps the ETag, content type and user metadata here).
    ///
    /// # Errors
    /// Any write failure; the om's refusal if this stream writes a multipart
    /// upload's part.
    pub async fn close_with(self, metadata: BTreeMap<String, String>) -> Result<KeyInfo> {
        self.finish(Commit::Key(metadata, None)).await?.into_key()
    }

    /// [`close_with`](Self::close_with), provided `condition` holds for the key when the om
    /// commits it — checked in the commit's own transaction, so no other writer can slip in
    /// between (S3's `If-None-Match: *` / `If-Match`, object_store's `PutMode::Create` /
    /// `Update`). When it does not hold nothing is committed and the written blocks are
    /// reclaimed.
    ///
    /// # Errors
    /// As `close_with`; [`ClientError::Om`] with `CONDITION_FAILED`
    /// ([`ClientError::is_condition_failed`]).
    pub async fn close_if(
        self,
        metadata: BTreeMap<String, String>,
        condition: WriteCondition,
    ) -> Result<KeyInfo> {
        self.finish(Commit::Key(metadata, Some(condition)))
            .await?
            .into_key()
    }

    /// Writes what is buffered and commits this stream as part of its
    /// multipart upload, with the part's `etag` (hex MD5 of its bytes).
    ///
    /// # Errors
    /// Any write failure; the om's refusal if this stream writes a key.
    pub async fn close_part(self, etag: &str) -> Result<PartInfo> {
        self.close_part_with(etag, BTreeMap::new()).await
    }

    /// [`close_part`](Self::close_part) with part `metadata`, kept with the part (the S3
    /// gateway stores the part's checksum there).
    ///
    /// # Errors
    /// As `close_part`.
    pub async fn close_part_with(
        self,
        etag: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<PartInfo> {
        self.finish(Commit::Part {
            etag: etag.to_string(),
            metadata,
        })
        .await?
        .into_part()
    }

    async fn finish(self, commit: Commit) -> Result<Committed> {
        self.take().await?.finish(commit).await
    }
}

/// Polls the `AsyncWrite` write in flight, if any, to its end, putting the
/// writer back.
fn poll_op(this: &mut KeyOutputStream, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
    let slot = this.op.get_mut().unwrap_or_else(PoisonError::into_inner);
    let Some(op) = slot.as_mut() else {
        return Poll::Ready(Ok(()));
    };
    let Poll::Ready((w, r)) = op.as_mut().poll(cx) else {
        return Poll::Pending;
    };
    *slot = None;
    this.writer = Some(w);
    Poll::Ready(r.map_err(std::io::Error::from))
}

impl AsyncWrite for KeyOutputStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(poll_op(this, cx))?;
        let Some(mut w) = this.writer.take() else {
            return Poll::Ready(Err(this.gone().into()));
        };
        if buf.is_empty() {
            this.writer = Some(w);
            return Poll::Ready(Ok(0));
        }
        let data = buf.to_vec();
        let mut op: WriteOp = Box::pin(async move {
            let r = w.write(&data).await;
            (w, r)
        });
        this.accepted += buf.len() as u64;
        match op.as_mut().poll(cx) {
            Poll::Ready((w, r)) => {
                this.writer = Some(w);
                Poll::Ready(r.map(|()| buf.len()).map_err(std::io::Error::from))
            }
            Poll::Pending => {
                *this.op.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(op);
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        poll_op(self.get_mut(), cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.committed.is_some() {
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(poll_op(this, cx))?;
        let slot = this
            .shutdown
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            let Some(w) = this.writer.take() else {
                return Poll::Ready(Err(this.gone().into()));
            };
            *slot = Some(Box::pin(async move {
                w.finish(Commit::Key(BTreeMap::new(), None))
                    .await?
                    .into_key()
            }));
        }
        let Some(op) = slot.as_mut() else {
            return Poll::Ready(Err(this.gone().into()));
        };
        let Poll::Ready(r) = op.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        *slot = None;
        match r {
            Ok(info) => {
                this.committed = Some(info);
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                // The writer went with the failed commit (its session is
                // aborted): every later call reports this failure.
                let cause = match e {
                    ClientError::WriteAborted { cause, .. } => cause,
                    other => Arc::new(other),
                };
                this.failed = Some(Arc::clone(&cause));
                Poll::Ready(Err(std::io::Error::from(ClientError::WriteAborted {
                    key: this.key.clone(),
                    cause,
                })))
            }
        }
    }
}
