//! [`ClientConfig`]: every client-side knob, with Ozone's defaults where it has one.

use std::time::Duration;

use block_stream::XceiverConfig;
use proto_crate::ChecksumType;

/// How EC positioned reads obtain their reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Positioned reads reuse the block's cached per-index streams (the fix
    /// for Ozone's HDDS-10135-era regression). Default.
    #[default]
    Reuse,
    /// Every positioned read builds a fresh EC reader and drops it afterwards,
    /// so each touched cell costs a GetBlock: the old behaviour, kept only so
    /// the benchmark can compare against it.
    ReaderPerCall,
}

/// How EC stripes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EcWriteMode {
    /// Encoding of the next stripe overlaps the flush of the current one,
    /// and a stripe's cells go to their datanodes in parallel. Default.
    #[default]
    Pipelined,
    /// No queue: each stripe is encoded, then its cells written one after
    /// another (the behaviour the benchmark compares against).
    Serial,
}

/// Client settings. Plain struct with `Default` and `with_*` builders.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Datanode client settings (deadlines, checksum type, bytesPerChecksum).
    pub xceiver: XceiverConfig,
    /// Deadline of one om call (default 30 s).
    pub om_timeout: Duration,
    /// EC positioned-read mode (default [`ReadMode::Reuse`]).
    pub read_mode: ReadMode,
    /// Read the cells of one positioned read that sit on different replica
    /// indexes concurrently (default true).
    pub parallel_cell_reads: bool,
    /// Bytes of one sequential read-ahead window (default 4 MiB): an EC
    /// key's window is one read of its cells, a replicated key's up to four
    /// concurrent reads of at least 1 MiB each; positioned reads are never
    /// widened by this.
    pub sequential_read_ahead: u64,
    /// EC write mode (default [`EcWriteMode::Pipelined`]).
    pub ec_write_mode: EcWriteMode,
    /// Encoded stripes that may wait for the flush stage (default 2).
    pub ec_stripe_queue_size: usize,
    /// Stripes the pipelined flush stage writes at once (default 4): handed to the replica
    /// indexes' lanes and not yet published by all of them. 1 writes one stripe at a time,
    /// every index waiting for the others. A writer holds up to this many stripes of d+p
    /// cells, plus `ec_stripe_queue_size`, plus the one being encoded: 7 by default, 35 MiB
    /// for rs-3-2-1024k, 63 MiB for rs-6-3-1024k. The window empties at the end of each block
    /// group.
    pub ec_stripes_in_flight: usize,
    /// Times one stripe (EC) or chunk (replicated) is rewritten on a new
    /// block group after failures before the write fails (default 3).
    pub ec_write_retries: u32,
    /// Chunk size of replicated writes, bytes (default 4 MiB, Ozone's
    /// `ozone.scm.chunk.size`).
    pub replicated_chunk_size: usize,
    /// Vectored reads merge two ranges whose gap is at most this many bytes
    /// (default 4 KiB; Hadoop's `fs.file.read.vectored.min.seek.size`).
    pub vectored_min_seek: u64,
    /// Vectored reads never merge ranges into a fetch longer than this,
    /// bytes (default 1 MiB; Hadoop's `...max.merged.size`).
    pub vectored_max_merged: u64,
    /// Merged ranges of one vectored read fetched at once (default 8).
    pub vectored_parallelism: usize,
    /// An EC reader that has excluded a location for this long looks the
    /// key up again and retries the fast path (default 30 s).
    pub degraded_probe_interval: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            xceiver: XceiverConfig::default(),
            om_timeout: Duration::from_secs(30),
            read_mode: ReadMode::Reuse,
            parallel_cell_reads: true,
            sequential_read_ahead: 4 * 1024 * 1024,
            ec_write_mode: EcWriteMode::Pipelined,
            ec_stripe_queue_size: 2,
            ec_stripes_in_flight: 4,
            ec_write_retries: 3,
            replicated_chunk_size: 4 * 1024 * 1024,
            vectored_min_seek: 4 * 1024,
            vectored_max_merged: 1024 * 1024,
            vectored_parallelism: 8,
            degraded_probe_interval: Duration::from_secs(30),
        }
    }
}

impl ClientConfig {
    /// Sets the EC positioned-read mode.
    #[must_use]
    pub fn with_read_mode(mut self, mode: ReadMode) -> Self {
        self.read_mode = mode;
        self
    }

    /// Sets how often block readers retry an unavailable location, and the back-off.
    #[must_use]
    pub fn with_location_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.xceiver = self
            .xceiver
            .with_retry(block_stream::RetryPolicy { retries, backoff });
        self
    }

    /// Sets how long an EC reader stays degraded before it probes the fast
    /// path again.
    #[must_use]
    pub fn with_degraded_probe_interval(mut self, d: Duration) -> Self {
        self.degraded_probe_interval = d;
        self
    }

    /// Sets the per-attempt datanode RPC deadline.
    #[must_use]
    pub fn with_rpc_timeout(mut self, d: Duration) -> Self {
        self.xceiver = self.xceiver.with_rpc_timeout(d);
        self
    }

    /// Sets the deadline of one om call.
    #[must_use]
    pub fn with_om_timeout(mut self, d: Duration) -> Self {
        self.om_timeout = d;
        self
    }

    /// Sets the deadline of opening a datanode channel (TCP and HTTP/2).
    #[must_use]
    pub fn with_connect_timeout(mut self, d: Duration) -> Self {
        self.xceiver = self.xceiver.with_connect_timeout(d);
        self
    }

    /// Talks to the om and the datanodes over TLS with `tls` — the cluster
    /// CA it trusts (`--tls-ca`, `cluster.json`'s `tls.ca`) and a
    /// certificate of its own if it has one — or plaintext with `None`
    /// (the default). A server whose certificate the CA did not sign, or
    /// that does not name the host dialled, fails the connection
    /// ([`ClientError::Connect`](crate::ClientError::Connect) for the om).
    #[must_use]
    pub fn with_tls(mut self, tls: Option<proto_crate::tls::TlsConfig>) -> Self {
        self.xceiver = self.xceiver.with_tls(tls);
        self
    }

    /// Sets the largest gRPC message the client decodes, bytes.
    #[must_use]
    pub fn with_max_message_size(mut self, bytes: usize) -> Self {
        self.xceiver.max_message_size = bytes;
        self
    }

    /// Sets how many datanode channels the client keeps cached (least
    /// recently used dropped first).
    #[must_use]
    pub fn with_max_cached_channels(mut self, n: usize) -> Self {
        self.xceiver.max_cached_channels = n;
        self
    }

    /// Sets the size from which ReadChunk answers and WriteChunk payloads go
    /// over a second connection to each datanode (default 256 KiB; `None`:
    /// one connection per datanode). See
    /// [`XceiverConfig::bulk_transfer_bytes`](block_stream::XceiverConfig::bulk_transfer_bytes).
    #[must_use]
    pub fn with_bulk_transfer_bytes(mut self, bytes: Option<u64>) -> Self {
        self.xceiver = self.xceiver.with_bulk_transfer_bytes(bytes);
        self
    }

    /// Sets how long a datanode found answering without edge checksums is
    /// read in whole checksum windows before edges are asked for again
    /// (default 5 min). See
    /// [`XceiverConfig::edges_probe_interval`](block_stream::XceiverConfig::edges_probe_interval).
    #[must_use]
    pub fn with_edges_probe_interval(mut self, d: Duration) -> Self {
        self.xceiver = self.xceiver.with_edges_probe_interval(d);
        self
    }

    /// Sets the checksum algorithm of new chunks.
    #[must_use]
    pub fn with_checksum_type(mut self, t: ChecksumType) -> Self {
        self.xceiver = self.xceiver.with_checksum_type(t);
        self
    }

    /// Sets bytesPerChecksum of new chunks.
    #[must_use]
    pub fn with_bytes_per_checksum(mut self, n: u32) -> Self {
        self.xceiver = self.xceiver.with_bytes_per_checksum(n);
        self
    }

    /// Turns checksum verification on reads on or off (default on, Ozone's
    /// `ozone.client.verify.checksum`). On, every bytesPerChecksum window a
    /// read touches is checked (the datanode adds the checksums of the
    /// window bytes outside the read's range). Off, nothing is checked, and
    /// a corrupt replica's bytes reach the caller unchecked: for callers that
    /// verify the data themselves, and to measure what verification costs.
    #[must_use]
    pub fn with_verify_checksum(mut self, on: bool) -> Self {
        self.xceiver = self.xceiver.with_verify_checksum(on);
        self
    }

    /// Turns concurrent per-index cell reads on or off.
    #[must_use]
    pub fn with_parallel_cell_reads(mut self, on: bool) -> Self {
        self.parallel_cell_reads = on;
        self
    }

    /// Sets the EC write mode.
    #[must_use]
    pub fn with_ec_write_mode(mut self, mode: EcWriteMode) -> Self {
        self.ec_write_mode = mode;
        self
    }

    /// Sets the stripe queue bound of pipelined EC writes (at least 1).
    #[must_use]
    pub fn with_ec_stripe_queue_size(mut self, n: usize) -> Self {
        self.ec_stripe_queue_size = n.max(1);
        self
    }

    /// Sets how many stripes a pipelined EC write has in flight at once (at least 1).
    #[must_use]
    pub fn with_ec_stripes_in_flight(mut self, n: usize) -> Self {
        self.ec_stripes_in_flight = n.max(1);
        self
    }

    /// Sets how often a failed stripe or chunk is rewritten on a new group.
    #[must_use]
    pub fn with_write_retries(mut self, n: u32) -> Self {
        self.ec_write_retries = n;
        self
    }

    /// Sets the chunk size of replicated writes, bytes (clamped to 1..=32 MiB:
    /// a chunk is one WriteChunk and the datanode answers at most 32 MiB per ReadChunk).
    #[must_use]
    pub fn with_replicated_chunk_size(mut self, n: usize) -> Self {
        self.replicated_chunk_size = n.clamp(1, 32 * 1024 * 1024);
        self
    }

    /// Sets the vectored-read merge limits: largest gap merged over and
    /// largest merged fetch, bytes (`max_merged` 0 disables merging).
    #[must_use]
    pub fn with_vectored_merge(mut self, min_seek: u64, max_merged: u64) -> Self {
        self.vectored_min_seek = min_seek;
        self.vectored_max_merged = max_merged;
        self
    }

    /// Sets how many merged ranges one vectored read fetches at once (at least 1).
    #[must_use]
    pub fn with_vectored_parallelism(mut self, n: usize) -> Self {
        self.vectored_parallelism = n.max(1);
        self
    }

    /// Sets the sequential read-ahead, bytes (at least 1).
    #[must_use]
    pub fn with_sequential_read_ahead(mut self, bytes: u64) -> Self {
        self.sequential_read_ahead = bytes.max(1);
        self
    }
}
