//! A blocking facade over the async client, for code without a runtime of
//! its own (scripts, `std::io` pipelines, FFI), as mini-redis's blocking
//! client wraps its async one: every call runs on a private tokio runtime
//! (two worker threads, so that read-ahead and lease renewals progress
//! between calls) and blocks the calling thread until it is done.
//!
//! - [`Client`]: buckets and keys, as [`crate::Client`];
//! - [`KeyReader`]: `std::io::Read + Seek` (sequential, with read-ahead),
//!   and [`read_at`](KeyReader::read_at) /
//!   [`read_exact_at`](KeyReader::read_exact_at) shaped like
//!   `std::os::unix::fs::FileExt` (positioned; `&self`; the cursor stays);
//! - [`KeyWriter`]: `std::io::Write`, committed by
//!   [`close`](KeyWriter::close); dropped without it (or given up with
//!   [`abort`](KeyWriter::abort)), the key is not committed and its session
//!   is aborted before the drop returns.
//!
//! Calling these from inside a tokio runtime panics (tokio forbids blocking
//! a runtime thread on another runtime): async code uses [`crate::Client`].
//! I/O errors of `Read`/`Write`/`Seek` carry the [`ClientError`]
//! ([`ClientError::from_io`] takes it back out).

use std::io::SeekFrom;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::{
    BucketInfo, BucketOptions, ClientConfig, ClientError, KeyInfo, ReplicationConfig, Result,
};

/// The runtime every object of one blocking client shares. `None` only
/// while it is being dropped.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Arc<Self>> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ec-client-blocking")
            .enable_all()
            .build()
            .map(|rt| Arc::new(Self(Some(rt))))
            .map_err(|e| {
                ClientError::Internal(format!("starting the blocking client's runtime: {e}"))
            })
    }

    /// The runtime (present until this wrapper's own drop takes it).
    fn rt(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("the runtime is only taken out by its own drop")
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt().block_on(f)
    }

    /// Whether blocking this thread on the runtime would panic or is unwise:
    /// inside another tokio runtime (tokio forbids it), or while the thread
    /// unwinds from a panic (a second panic would abort the process).
    fn cannot_block() -> bool {
        tokio::runtime::Handle::try_current().is_ok() || std::thread::panicking()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Dropping a runtime from inside another one panics; there, let its
        // threads wind down in the background instead.
        if let Some(rt) = self.0.take()
            && Self::cannot_block()
        {
            rt.shutdown_background();
        }
    }
}

/// A blocking connection to a cluster (see [`crate::Client`]). Cheap to
/// clone; clones share the runtime and the channels.
#[derive(Debug, Clone)]
pub struct Client {
    rt: Arc<Runtime>,
    inner: crate::Client,
}

impl Client {
    /// Connects to the om at `om_address` (`HOST:PORT`, or a list
    /// `HOST:PORT,HOST:PORT` to fail over along, as
    /// [`crate::Client::connect`]).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a malformed or repeated address;
    /// [`ClientError::Connect`] if no om can be reached;
    /// [`ClientError::Internal`] if the runtime cannot start.
    pub fn connect(om_address: &str, config: ClientConfig) -> Result<Self> {
        let rt = Runtime::new()?;
        let inner = rt.block_on(crate::Client::connect(om_address, config))?;
        Ok(Self { rt, inner })
    }

    /// The async client underneath (to run it on a runtime of your own).
    #[must_use]
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// Creates a bucket.
    ///
    /// # Errors
    /// As [`crate::Client::create_bucket`].
    pub fn create_bucket(&self, name: &str, options: BucketOptions) -> Result<BucketInfo> {
        self.rt.block_on(self.inner.create_bucket(name, options))
    }

    /// Opens `bucket/key` for writing (see [`crate::Client::create_key`]).
    ///
    /// # Errors
    /// As [`crate::Client::create_key`].
    pub fn create_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<KeyWriter> {
        let w = self
            .rt
            .block_on(self.inner.create_key(bucket, key, replication))?;
        Ok(KeyWriter {
            rt: Arc::clone(&self.rt),
            inner: Some(w),
        })
    }

    /// Opens `bucket/key` for reading: one om lookup, no datanode RPC.
    ///
    /// # Errors
    /// As [`crate::Client::open_key`].
    pub fn open_key(&self, bucket: &str, key: &str) -> Result<KeyReader> {
        let r = self.rt.block_on(self.inner.open_key(bucket, key))?;
        Ok(KeyReader {
            rt: Arc::clone(&self.rt),
            inner: r,
        })
    }

    /// The committed metadata of `bucket/key`.
    ///
    /// # Errors
    /// As [`crate::Client::key_info`].
    pub fn key_info(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        self.rt.block_on(self.inner.key_info(bucket, key))
    }

    /// Keys of `bucket` under `prefix` after `start_after`, at most
    /// `max_keys` (0 = all), in name order.
    ///
    /// # Errors
    /// As [`crate::Client::list_keys`].
    pub fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: u32,
    ) -> Result<Vec<KeyInfo>> {
        self.rt
            .block_on(self.inner.list_keys(bucket, prefix, start_after, max_keys))
    }

    /// Deletes `bucket/key`.
    ///
    /// # Errors
    /// As [`crate::Client::delete_key`].
    pub fn delete_key(&self, bucket: &str, key: &str) -> Result<()> {
        self.rt.block_on(self.inner.delete_key(bucket, key))
    }
}

/// A key open for reading, blocking (see [`crate::KeyInputStream`]).
#[derive(Debug)]
pub struct KeyReader {
    rt: Arc<Runtime>,
    inner: crate::KeyInputStream,
}

impl KeyReader {
    /// The key's length, bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// Whether the key is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The key as looked up at open.
    #[must_use]
    pub fn info(&self) -> &KeyInfo {
        self.inner.info()
    }

    /// Reads up to `buf.len()` bytes at key offset `pos`; returns how many
    /// (0 at or past the end). Positioned: the cursor of `Read` stays.
    ///
    /// # Errors
    /// As [`crate::KeyInputStream::read_at`].
    pub fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        self.rt.block_on(self.inner.read_at(pos, buf))
    }

    /// Fills `buf` from key offset `pos`.
    ///
    /// # Errors
    /// [`ClientError::UnexpectedEof`] when the key ends first; as
    /// [`crate::KeyInputStream::read_exact_at`].
    pub fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        self.rt.block_on(self.inner.read_exact_at(pos, buf))
    }

    /// Reads many ranges in one vectored call (see
    /// [`crate::KeyInputStream::read_ranges`]).
    ///
    /// # Errors
    /// As [`crate::KeyInputStream::read_ranges`].
    pub fn read_ranges(&self, ranges: &[std::ops::Range<u64>]) -> Result<Vec<bytes::Bytes>> {
        self.rt.block_on(self.inner.read_ranges(ranges))
    }
}

impl std::io::Read for KeyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Self { rt, inner } = self;
        rt.block_on(inner.read(buf))
    }
}

impl std::io::Seek for KeyReader {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        let Self { rt, inner } = self;
        rt.block_on(inner.seek(pos))
    }
}

/// A key being written, blocking (see [`crate::KeyOutputStream`]).
#[derive(Debug)]
pub struct KeyWriter {
    rt: Arc<Runtime>,
    /// `None` once closed.
    inner: Option<crate::KeyOutputStream>,
}

impl KeyWriter {
    /// Writes what is buffered and commits the key; returns it.
    ///
    /// # Errors
    /// As [`crate::KeyOutputStream::close`].
    pub fn close(mut self) -> Result<KeyInfo> {
        let w = self.inner.take().ok_or_else(|| {
            ClientError::InvalidArgument("the key's writer was already closed".into())
        })?;
        self.rt.block_on(w.close())
    }

    /// Bytes accepted so far.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.inner.as_ref().map_or(0, crate::KeyOutputStream::len)
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::io::Write for KeyWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(w) = self.inner.as_mut() else {
            return Err(ClientError::InvalidArgument("the key's writer was closed".into()).into());
        };
        self.rt.block_on(w.write(buf))?;
        Ok(buf.len())
    }

    /// Nothing to do: data moves a stripe or a chunk at a time, and
    /// durability comes with [`close`](KeyWriter::close).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl KeyWriter {
    /// Gives the key up: nothing is committed and its om session is aborted
    /// before this returns (as dropping the writer does).
    ///
    /// # Errors
    /// As [`crate::KeyOutputStream::abort`].
    pub fn abort(mut self) -> Result<()> {
        match self.inner.take() {
            Some(w) => self.rt.block_on(w.abort()),
            None => Ok(()),
        }
    }
}

impl Drop for KeyWriter {
    fn drop(&mut self) {
        // Without close: abort the om session here and now — a task
        // spawned on the runtime could die with it, if this writer held the
        // last reference to it. Where blocking this thread would panic (the
        // writer was moved into async code, or this thread is unwinding), a
        // thread of its own blocks on the abort instead; it holds the
        // runtime until the abort is done and then drops it where dropping
        // a runtime is allowed.
        let Some(w) = self.inner.take() else {
            return;
        };
        if !Runtime::cannot_block() {
            let _ = self.rt.block_on(w.abort());
            return;
        }
        let rt = Arc::clone(&self.rt);
        let w = Arc::new(std::sync::Mutex::new(Some(w)));
        let on_thread = Arc::clone(&w);
        let spawned = std::thread::Builder::new()
            .name("ec-client-abort".into())
            .spawn(move || {
                let taken = on_thread
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                if let Some(w) = taken {
                    let _ = rt.block_on(w.abort());
                }
            });
        if spawned.is_err() {
            // No thread to be had: spawn the abort on the runtime; if the
            // runtime ends first, the om's session lease expires it.
            let taken = w
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(w) = taken {
                drop(self.rt.rt().spawn(w.abort()));
            }
        }
    }
}
