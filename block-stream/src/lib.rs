//! Talking to datanodes, one block at a time.
//!
//! - [`XceiverClientManager`] caches one client per datanode (a connection for
//!   small calls, another for bulk transfers) and hands out
//!   [`XceiverClient`]s: typed async calls (GetBlock, ReadChunk, WriteChunk,
//!   PutBlock, ...) with a per-attempt deadline, result codes mapped to
//!   [`BlockStreamError`] (Ozone's `XceiverClientGrpc` / `XceiverClientManager`).
//! - [`checksum`]: CRC32 / CRC32C per bytesPerChecksum window, computed on write
//!   and verified on read: every window a read touches, from the bytes read and
//!   the datanode's checksums of the window bytes around them.
//! - [`BlockInputStream`]: one block on 1..n replicas; lazy GetBlock behind a
//!   once-cell, chunk lookup by binary search, a stateless `read_at(&self, ..)`.
//! - [`BlockOutputStream`]: WriteChunk to every replica of one block, then PutBlock.
//! - [`ClientMetrics`]: RPC counts by kind and by datanode, bytes moved.
//!
//! Layering: depends on `proto-crate` only; knows nothing of EC (that is
//! `ec-client`'s job) and never of the om.

mod block_input;
mod block_output;
pub mod checksum;
pub mod config;
pub mod crc_combine;
mod error;
mod metrics;
mod token;
mod xceiver;

pub use block_input::{BlockInputStream, MAX_READ_PIECE};
pub use block_output::BlockOutputStream;
pub use config::{DEFAULT_BULK_TRANSFER_BYTES, RetryPolicy, XceiverConfig};
pub use error::{BlockStreamError, Result};
pub use metrics::{
    ClientMetrics, MAX_TRACKED_DATANODES, MetricsSnapshot, OTHER_DATANODES, RpcKind,
};
pub use token::{BlockTokenSource, RefreshResult, TokenRefresher};
pub use xceiver::{WriteOrigin, XceiverClient, XceiverClientManager};
