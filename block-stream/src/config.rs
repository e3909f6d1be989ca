//! Settings of the datanode client.

use std::time::Duration;

use proto_crate::ChecksumType;

/// Largest bytesPerChecksum a client writes with, bytes (4 MiB).
pub const MAX_BYTES_PER_CHECKSUM: u32 = 4 * 1024 * 1024;

/// Default of [`XceiverConfig::bulk_transfer_bytes`]: 256 KiB, above the
/// 64 KiB preads a positioned reader makes and below the 1 MiB cells and
/// 4 MiB windows sequential readers and writers move.
pub const DEFAULT_BULK_TRANSFER_BYTES: u64 = 256 * 1024;

/// How often one location is retried after a transient failure (the
/// datanode was unavailable) before the reader gives up on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts on the same location (default 1).
    pub retries: u32,
    /// Wait before each retry (default 50 ms; tests use 0).
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 1,
            backoff: Duration::from_millis(50),
        }
    }
}

/// How [`XceiverClient`](crate::XceiverClient)s connect, time out, and checksum.
///
/// Plain struct with `Default` and `with_*` builders. Defaults follow Ozone
/// where it has one (CRC32, 16 KiB bytesPerChecksum).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct XceiverConfig {
    /// Deadline of one RPC attempt (default 30 s).
    pub rpc_timeout: Duration,
    /// Deadline of establishing a connection (default 5 s).
    pub connect_timeout: Duration,
    /// Checksum algorithm for new chunks (default CRC32, Ozone's default).
    pub checksum_type: ChecksumType,
    /// Window of one checksum, bytes (default 16 KiB, Ozone's `ozone.client.bytes.per.checksum`).
    pub bytes_per_checksum: u32,
    /// Whether block readers verify what they read against the chunks'
    /// checksums (default `true`, Ozone's `ozone.client.verify.checksum`).
    /// On, a read of bytes `[a, b)` of a chunk checks every bytesPerChecksum
    /// window around them, from the bytes and the datanode's checksums of the
    /// window bytes outside `[a, b)` (see
    /// [`checksum::verify_with_edges`](crate::checksum::verify_with_edges)),
    /// so a corrupt replica is a failed location; off, it returns what the
    /// datanode sent, unchecked (the datanode does not verify on read
    /// either). Either way only `[a, b)` crosses the network.
    pub verify_checksum: bool,
    /// HTTP/2 max frame size the client announces, bytes (default 1 MiB: the
    /// main lever for large reads on loopback).
    pub http2_max_frame_size: u32,
    /// Largest gRPC message either side decodes, bytes (default 64 MiB).
    pub max_message_size: usize,
    /// Transfers of at least this many bytes (ReadChunk answers, WriteChunk
    /// payloads) go over a second HTTP/2 connection to the datanode, opened
    /// on first use; every other call goes over the first (default
    /// `Some(256 KiB)`, [`DEFAULT_BULK_TRANSFER_BYTES`]; `None` sends
    /// everything over one connection, as Ozone's `XceiverClientGrpc` does).
    ///
    /// Why: a small read that shares a connection with bulk data waits
    /// behind it (one TCP stream), and the kernel's congestion control
    /// keeps what it learned from bulk transfers: with BBR, which paces its
    /// sends, a connection that carried MiB-sized answers paced every later
    /// 64 KiB answer, and random 64 KiB preads ran at about half the rate
    /// of a fresh connection for thousands of reads (measured on loopback,
    /// 2026-12-05; README, pread suite).
    pub bulk_transfer_bytes: Option<u64>,
    /// How long a client that found a datanode answering without edge
    /// checksums (one from before them) reads it in whole checksum windows
    /// before asking for edges again (default 5 min). A datanode upgraded in
    /// place keeps its address, and so its cached client: without the
    /// probe it would be read in whole windows for the client's life. A
    /// probe of a datanode still without edges costs one read of the range
    /// before the windows are read.
    pub edges_probe_interval: Duration,
    /// Retries of one location by block readers.
    pub retry: RetryPolicy,
    /// Most datanode clients the client keeps cached (default 1024), each
    /// with up to two connections (see
    /// [`bulk_transfer_bytes`](Self::bulk_transfer_bytes)); past it the least
    /// recently used is dropped from the cache (streams that hold it keep it
    /// until they finish).
    pub max_cached_channels: usize,
    /// TLS to the datanodes (the cluster CA, and this process's certificate
    /// when it has one); `None` (the default) dials plaintext `http://`.
    pub tls: Option<proto_crate::tls::TlsConfig>,
}

impl Default for XceiverConfig {
    fn default() -> Self {
        Self {
            rpc_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            checksum_type: ChecksumType::Crc32,
            bytes_per_checksum: 16 * 1024,
            verify_checksum: true,
            http2_max_frame_size: 1024 * 1024 - 1,
            max_message_size: 64 * 1024 * 1024,
            bulk_transfer_bytes: Some(DEFAULT_BULK_TRANSFER_BYTES),
            edges_probe_interval: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            max_cached_channels: 1024,
            tls: None,
        }
    }
}

impl XceiverConfig {
    /// Sets the per-attempt RPC deadline.
    #[must_use]
    pub fn with_rpc_timeout(mut self, d: Duration) -> Self {
        self.rpc_timeout = d;
        self
    }
    /// Sets the retry policy of one location.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
    /// Sets the connect deadline.
    #[must_use]
    pub fn with_connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
    /// Dials datanodes over TLS with `tls` (or plaintext with `None`).
    #[must_use]
    pub fn with_tls(mut self, tls: Option<proto_crate::tls::TlsConfig>) -> Self {
        self.tls = tls;
        self
    }
    /// Sets the size from which transfers use the datanode's second
    /// connection (see [`bulk_transfer_bytes`](Self::bulk_transfer_bytes));
    /// `None` keeps every call on one connection.
    #[must_use]
    pub fn with_bulk_transfer_bytes(mut self, bytes: Option<u64>) -> Self {
        self.bulk_transfer_bytes = bytes;
        self
    }
    /// Sets how long a datanode found without edge checksums is read in
    /// whole windows before edges are asked for again (see
    /// [`edges_probe_interval`](Self::edges_probe_interval)).
    #[must_use]
    pub fn with_edges_probe_interval(mut self, d: Duration) -> Self {
        self.edges_probe_interval = d;
        self
    }
    /// Sets the checksum algorithm of new chunks.
    #[must_use]
    pub fn with_checksum_type(mut self, t: ChecksumType) -> Self {
        self.checksum_type = t;
        self
    }
    /// Turns checksum verification on reads on or off (see
    /// [`verify_checksum`](Self::verify_checksum)).
    #[must_use]
    pub fn with_verify_checksum(mut self, on: bool) -> Self {
        self.verify_checksum = on;
        self
    }
    /// Sets bytesPerChecksum (0 is replaced by the default; values above
    /// [`MAX_BYTES_PER_CHECKSUM`] are clamped to it).
    #[must_use]
    pub fn with_bytes_per_checksum(mut self, n: u32) -> Self {
        self.bytes_per_checksum = if n == 0 {
            16 * 1024
        } else {
            n.min(MAX_BYTES_PER_CHECKSUM)
        };
        self
    }
}
