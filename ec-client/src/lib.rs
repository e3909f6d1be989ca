//! The client library: write keys erasure-coded (or replicated) and read them
//! back sequentially, by position, and through failures.
//!
//! Start from [`Client::connect`]. Main types, named after Ozone's:
//! - [`EcKeyOutputStream`]: cells -> parity -> WriteChunk/PutBlock per stripe;
//! - [`KeyInputStream`]: spans a key's block groups; `AsyncRead + AsyncSeek`
//!   plus positioned `read_at(&self, ..)` that never moves the cursor;
//! - inside it, per EC block group, `EcBlockInputStreamProxy` over an
//!   `EcBlockInputStream` (per-index block streams created lazily and
//!   cached) or, after failures, the reconstruction reader;
//! - [`ClientConfig`] and [`ReadMode`]; counters in [`EcReadSnapshot`] and
//!   `block_stream::MetricsSnapshot`.
//!
//! Errors: one enum, [`ClientError`].
//!
//! Layering: uses `block-stream`, `ec-codec` and `proto-crate`; never the
//! datanode, om or minicluster crates (tests use the minicluster as a dev-dependency).

mod block_tokens;
pub mod blocking;
mod client;
mod config;
mod ec_input;
mod ec_output;
mod ec_proxy;
mod ec_reconstruct;
mod error;
mod key_input;
mod key_output;
mod lease;
pub mod listing;
mod metrics;
mod om_client;
mod read_context;
mod replicated_output;
mod session;
mod stripe_writer;
pub mod vectored;
mod write_state;

pub use block_stream::crc_combine;
pub use block_stream::{BlockStreamError, MetricsSnapshot, RetryPolicy, RpcKind, XceiverConfig};
/// The byte buffers reads return (`read_ranges`, `read_range`).
pub use bytes::Bytes;
pub use client::{BucketOptions, Client, LIST_PAGE};
pub use config::{ClientConfig, EcWriteMode, ReadMode};
pub use ec_codec::EcError;
pub use ec_codec::{EcReplicationConfig, ReplicaIndex};
pub use ec_output::{EcKeyOutputStream, EcWriteStats};
pub use error::{ClientError, Result};
pub use key_input::KeyInputStream;
pub use key_output::KeyOutputStream;
pub use metrics::EcReadSnapshot;
/// TLS settings ([`ClientConfig::with_tls`]).
pub use proto_crate::tls::{TlsConfig, TlsError};
pub use proto_crate::{
    BlockGroup, BlockId, BlockLocation, ChecksumType, DatanodeId, Pipeline, ProtocolError,
    ResultCode,
};
pub use proto_crate::{
    BucketInfo, CannedAcl, DatanodeDetails, KeyInfo, MultipartUpload, PartInfo, ReplicationConfig,
    WriteCondition,
};
pub use proto_crate::{MULTIPART_PART_SIZES_KEY, OmErrorCode, object_metadata};
pub use replicated_output::ReplicatedKeyOutputStream;
pub use stripe_writer::EcWriteProgress;
