//! One client connection, from its accept to its end: the bound on how many are open
//! (`GatewayConfig::max_connections`), TLS, HTTP/1.1, and the write deadline hyper does not
//! keep.
//!
//! - **Open connections.** The accept loop takes a place before it accepts: at the limit it
//!   stops accepting, and new connections wait in the kernel's listen backlog (1,024, tokio's
//!   default; beyond that the kernel drops them) until one ends, the way nginx's
//!   `worker_connections` behaves. Each open connection holds a task, a socket and hyper's
//!   buffers (up to about 400 KiB for a request head and pipelined bytes) whether or not it
//!   has a request in flight; requests are bounded separately (`crate::in_flight`). A TLS
//!   handshake holds its place too, for at most [`proto_crate::tls::HANDSHAKE_TIMEOUT`].
//! - **Reads.** HTTP/1.1 only, the S3 REST API's protocol: hyper's header read timeout runs
//!   from the connection's start, so a connection (over HTTPS: once its handshake is done)
//!   that sends nothing for the idle timeout is closed, as is a request head begun and not
//!   finished in time and a keep-alive connection idle that long. (HTTP/2, which hyper-util's
//!   protocol detection used to admit, had neither deadline, and the bytes it read to detect
//!   the protocol had no timer.)
//! - **Writes.** A write (or flush, or shutdown) that the socket does not accept for the idle
//!   timeout fails with [`std::io::ErrorKind::TimedOut`], which ends the connection
//!   ([`WriteDeadline`]). Without it, a client that stops reading its answer (a GET it no
//!   longer consumes, a peer gone without a FIN whose window stays shut) would hold its
//!   connection, its request's place in flight and the object reader's buffers for as long
//!   as the socket lives. The clock restarts whenever the socket takes bytes; Linux lets a
//!   blocked writer go on only once about a third of the socket's send buffer has drained (the
//!   buffer grows up to `net.ipv4.tcp_wmem`'s maximum, 4 MiB by default), so a client that
//!   drains less than that in a whole timeout — under about 45 KB/s at 30 s with a full 4 MiB
//!   buffer — is cut although it still reads. Amazon S3 answers a socket "not read from or
//!   written to within the timeout period" with `RequestTimeout` ("Error responses"); a
//!   stalled answer cannot carry an error, so here it is cut.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::metrics::{CountedLimit, CountedPermit, GatewayMetrics};

/// Default of `GatewayConfig::max_connections`: 512, below the 1,024 open files a process
/// gets by default on Linux (`ulimit -n`), which the gateway's own connections to the om and
/// the datanodes share.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// One open connection's place (of a [`CountedLimit`] counted in `s3_connections_open`),
/// given back when the connection ends.
pub(crate) type ConnectionSlot = CountedPermit;

/// The limit of `max` open connections (at least 1), counted in `s3_connections_open`. The
/// accept loop [reserves](CountedLimit::reserve) a place before it accepts and
/// [counts](CountedLimit::count) it once a connection is accepted.
pub(crate) fn limit(max: usize, metrics: Arc<GatewayMetrics>) -> CountedLimit {
    CountedLimit::new(max, metrics, |m| &m.connections_open)
}

/// Serves one accepted connection until it ends: the TLS handshake first when `acceptor` is
/// given, then HTTP/1.1 through [`WriteDeadline`]. `slot` is held until the end.
pub(crate) async fn serve<S>(
    stream: TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    service: S,
    idle_timeout: Duration,
    slot: ConnectionSlot,
) where
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _slot = slot;
    // HTTP/1.1 only (the S3 REST API's protocol; no HTTP/2). The timer turns on hyper's header read
    // timeout, which runs from the connection's start (a connection that sends nothing), for
    // a request head begun and not finished, and between requests on a keep-alive connection.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(idle_timeout);
    let served = match acceptor {
        None => {
            let io = WriteDeadline::new(stream, idle_timeout);
            builder
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await
        }
        Some(acceptor) => {
            // A handshake is bounded: a peer that never finishes it holds a task, a socket
            // and a connection place for at most this long.
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
            let io = WriteDeadline::new(tls, idle_timeout);
            builder
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "s3 connection ended with an error");
    }
}

/// A connection's byte stream whose writes have a deadline: a write, flush or shutdown that
/// stays pending for `timeout` without the stream taking anything fails with
/// [`io::ErrorKind::TimedOut`]. Reads pass through (hyper's header timer and
/// `crate::in_flight::IdleBody` time those).
pub(crate) struct WriteDeadline<S> {
    inner: S,
    timeout: Duration,
    /// The deadline of the write that is waiting now; `armed` says whether it is set.
    deadline: Pin<Box<Sleep>>,
    armed: bool,
}

impl<S> WriteDeadline<S> {
    /// `inner` with a write deadline of `timeout`.
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            armed: false,
        }
    }

    /// Passes a write-side result on: a ready one stops the clock; a pending one starts it if
    /// it is not running, and fails once it has run `timeout`.
    fn timed<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.armed = false;
            return r;
        }
        if !self.armed {
            self.armed = true;
            let deadline = Instant::now() + self.timeout;
            self.deadline.as_mut().reset(deadline);
        }
        match self.deadline.as_mut().poll(cx) {
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
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        self.timed(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(cx, r)
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
        let mut io = WriteDeadline::new(ours, timeout);
        let started = Instant::now();
        // A deadline that never fired would hang the test: fail instead.
        let err = tokio::time::timeout(Duration::from_secs(60), io.write_all(&[7u8; 1000]))
            .await
            .expect("the deadline fired")
            .expect_err("nobody reads");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeout);
    }

    /// One poll of a 64-byte write: what it returns now, without waiting.
    async fn try_write<S: AsyncWrite + Unpin>(
        io: &mut WriteDeadline<S>,
    ) -> Poll<io::Result<usize>> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *io).poll_write(cx, &[7u8; 64]))).await
    }

    /// The clock runs only while a write waits: a write the pipe takes stops it, and the next
    /// wait starts a new one from then, not from the first wait.
    #[tokio::test]
    async fn the_clock_restarts_whenever_the_stream_takes_bytes() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut io = WriteDeadline::new(ours, Duration::from_secs(3600));
        assert!(matches!(try_write(&mut io).await, Poll::Ready(Ok(64))));
        assert!(!io.armed, "a write that went through starts no clock");
        // The pipe is full: the next write waits, and the clock starts.
        assert!(try_write(&mut io).await.is_pending());
        assert!(io.armed);
        let first = io.deadline.deadline();
        // The reader takes the bytes: the write goes through and the clock stops.
        let mut buf = [0u8; 64];
        theirs.read_exact(&mut buf).await.expect("read");
        assert!(matches!(try_write(&mut io).await, Poll::Ready(Ok(64))));
        assert!(!io.armed);
        // Full again: a new clock, later than the first.
        assert!(try_write(&mut io).await.is_pending());
        assert!(io.armed);
        assert!(io.deadline.deadline() > first, "the clock started again");
    }
}
