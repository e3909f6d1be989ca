//! One client connection, from its accept to its end: the bound on how many are open
//! (`GatewayConfig::max_connections`), TLS, and the deadlines hyper does not keep.
//!
//! - **Open connections.** The accept loop takes a place before it accepts: at the limit it
//!   stops accepting, and new connections wait in the kernel's listen backlog until one ends
//!   (the way nginx's `worker_connections` behaves). Each open connection holds a task, a
//!   socket and hyper's buffers (up to about 400 KiB for a request head and pipelined bytes)
//!   whether or not it has a request in flight; requests are bounded separately
//!   (`crate::in_flight`).
//! - **The first byte.** A connection that sends nothing within the idle timeout is closed.
//!   hyper's header read timer starts only when hyper first asks for a request head, and
//!   hyper-util reads the first bytes before that (to tell HTTP/1 from HTTP/2) with no timer
//!   of its own. Over HTTPS this counts bytes after the handshake, which has its own timeout
//!   ([`proto_crate::tls::HANDSHAKE_TIMEOUT`]).
//! - **Writes.** A write (or flush, or shutdown) that makes no progress for the idle timeout
//!   fails with [`std::io::ErrorKind::TimedOut`], which ends the connection. Without it, a
//!   client that stops reading its answer (a GET it no longer consumes, a peer gone without
//!   a FIN whose window stays shut) would hold its connection, its request's place in flight
//!   and the object reader's buffers for as long as the socket lives. A slow reader that
//!   keeps taking bytes is not cut off: the clock restarts at every write that goes through.
//!   Amazon S3 answers a socket "not read from or written to within the timeout period" with
//!   `RequestTimeout` ("Error responses"); a stalled answer cannot carry an error, so here it
//!   is cut.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::metrics::GatewayMetrics;

/// Default of `GatewayConfig::max_connections`: 512, below the 1,024 open files a process
/// gets by default on Linux (`ulimit -n`), which the gateway's own connections to the om and
/// the datanodes share.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Places for open client connections.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLimit {
    permits: Arc<Semaphore>,
    metrics: Arc<GatewayMetrics>,
}

/// A place taken for the next connection, before it is accepted.
#[derive(Debug)]
pub(crate) struct Reserved {
    permit: OwnedSemaphorePermit,
    metrics: Arc<GatewayMetrics>,
}

/// One open connection's place, given back (and counted out of `s3_connections_open`) when
/// dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<GatewayMetrics>,
}

impl ConnectionLimit {
    /// A limit of `max` open connections (at least 1).
    pub(crate) fn new(max: usize, metrics: Arc<GatewayMetrics>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
            metrics,
        }
    }

    /// Waits for a free place. The semaphore is never closed, so this only waits.
    pub(crate) async fn reserve(&self) -> Reserved {
        let permit = loop {
            if let Ok(p) = Arc::clone(&self.permits).acquire_owned().await {
                break p;
            }
        };
        Reserved {
            permit,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

impl Reserved {
    /// The place, given to a connection just accepted (counted in `s3_connections_open`).
    pub(crate) fn open(self) -> ConnectionSlot {
        self.metrics
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        ConnectionSlot {
            _permit: self.permit,
            metrics: self.metrics,
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one accepted connection until it ends: the TLS handshake first when `acceptor` is
/// given, then HTTP/1 (or HTTP/2) through [`DeadlineIo`]. `slot` is held until the end.
pub(crate) async fn serve<S, B>(
    stream: TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    service: S,
    idle_timeout: Duration,
    slot: ConnectionSlot,
) where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    hyper_util::rt::TokioExecutor: hyper_util::server::conn::auto::HttpServerConnExec<S::Future, B>,
{
    let _slot = slot;
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    // The timer turns on hyper's HTTP/1 header read timeout (a request head begun and not
    // finished, and a keep-alive connection idle between requests).
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(idle_timeout);
    let served = match acceptor {
        None => {
            let io = DeadlineIo::new(stream, idle_timeout);
            builder
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await
        }
        Some(acceptor) => {
            // A handshake is bounded: a peer that never finishes it holds a task and a
            // socket for at most this long.
            let handshake =
                tokio::time::timeout(proto_crate::tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let tls = match handshake.await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "s3 TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("s3 TLS handshake timed out");
                    return;
                }
            };
            let io = DeadlineIo::new(tls, idle_timeout);
            builder
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "s3 connection ended with an error");
    }
}

/// A connection's byte stream with two deadlines of `timeout` each: until its first byte
/// arrives, a read that waits that long fails; and any write, flush or shutdown that makes no
/// progress for that long fails. Both fail with [`io::ErrorKind::TimedOut`]. Reads after the
/// first byte have no deadline here (hyper's header timer and `crate::in_flight::IdleBody`
/// keep those).
pub(crate) struct DeadlineIo<S> {
    inner: S,
    timeout: Duration,
    /// No byte has been read yet.
    awaiting_first_byte: bool,
    /// The first byte's deadline, set at the first read that waits.
    first_byte: Option<Pin<Box<Sleep>>>,
    /// The deadline of the write that is waiting now; `write_armed` says whether it is set.
    write_deadline: Pin<Box<Sleep>>,
    write_armed: bool,
}

impl<S> DeadlineIo<S> {
    /// `inner` with deadlines of `timeout`.
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            awaiting_first_byte: true,
            first_byte: None,
            write_deadline: Box::pin(tokio::time::sleep(timeout)),
            write_armed: false,
        }
    }

    /// After a write-side call returned `Pending`: starts the stall clock if it is not
    /// running, and fails once it has run `timeout`.
    fn write_stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.write_armed {
            self.write_armed = true;
            let deadline = Instant::now() + self.timeout;
            self.write_deadline.as_mut().reset(deadline);
        }
        match self.write_deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client took nothing of the answer for {:?}",
                    self.timeout
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Passes a write-side result on, stopping the stall clock once it is ready.
    fn write_result<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.write_stalled(cx),
            ready => {
                self.write_armed = false;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for DeadlineIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.awaiting_first_byte = false;
                    this.first_byte = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending if this.awaiting_first_byte => {
                let timeout = this.timeout;
                let deadline = this
                    .first_byte
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client sent nothing for {timeout:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for DeadlineIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        self.write_result(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.write_result(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.write_result(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.write_result(cx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A write into a pipe nobody reads fails once the timeout has passed.
    #[tokio::test]
    async fn a_write_nobody_takes_fails_after_the_timeout() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let timeout = Duration::from_millis(200);
        let mut io = DeadlineIo::new(ours, timeout);
        let started = Instant::now();
        let err = io.write_all(&[7u8; 1000]).await.expect_err("nobody reads");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeout);
    }

    /// A reader that takes 64 bytes every 200 ms keeps a 1 s write deadline from firing
    /// although the whole write takes about 3 s: the clock restarts whenever bytes go through.
    #[tokio::test]
    async fn a_slow_reader_that_keeps_taking_bytes_is_not_cut_off() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let timeout = Duration::from_secs(1);
        let mut io = DeadlineIo::new(ours, timeout);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.len() < 1000 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let n = theirs.read(&mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        let started = Instant::now();
        io.write_all(&[7u8; 1000])
            .await
            .expect("the reader keeps up");
        io.flush().await.expect("flush");
        assert!(
            started.elapsed() > timeout,
            "the write outlasted one timeout"
        );
        assert_eq!(reader.await.expect("reader"), vec![7u8; 1000]);
    }

    /// Before the first byte a read fails after the timeout; once a byte has come, a read may
    /// wait longer.
    #[tokio::test]
    async fn only_the_first_byte_has_a_read_deadline() {
        let timeout = Duration::from_millis(200);
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut silent = DeadlineIo::new(ours, timeout);
        let mut buf = [0u8; 8];
        let err = silent.read(&mut buf).await.expect_err("nothing is sent");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut io = DeadlineIo::new(ours, timeout);
        theirs.write_all(b"G").await.expect("first byte");
        assert_eq!(io.read(&mut buf).await.expect("first byte"), 1);
        let later = tokio::spawn(async move {
            tokio::time::sleep(timeout * 3).await;
            theirs.write_all(b"ET").await.expect("more");
            theirs
        });
        assert_eq!(io.read(&mut buf).await.expect("no deadline now"), 2);
        drop(later.await);
    }
}
