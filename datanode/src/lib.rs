//! The datanode: containers of blocks on local disk, served over gRPC.
//!
//! - [`ContainerStore`]: FilePerBlock block files plus committed block
//!   metadata in redb; durable at PutBlock; survives restarts.
//! - [`DatanodeGrpcService`]: the `DatanodeService` RPCs (GetBlock, ReadChunk,
//!   WriteChunk, PutBlock, ListBlock, GetCommittedBlockLength,
//!   CreateContainer, DeleteBlocks) with ARCHITECTURE.md's rules: replica index checked, reads
//!   past the committed end rejected at once, a 32 MiB read cap checked
//!   before allocating, typed result codes.
//! - [`Datanode`]: bind, serve, register and heartbeat to the om, shut down.
//! - Bounded resources: read handles in a bounded LRU ([`FileCache`],
//!   `--max-open-files`, `EMFILE` empties it and retries); request payloads
//!   charged to an [`InflightBudget`] (`--max-inflight-bytes`); the data dir
//!   locked by one process; database commits on the blocking pool.
//! - Block deletion (`DeleteBlocks`, sent by the om), with tombstones that
//!   refuse later writes to a deleted block.
//! - [`BlockTokenVerifier`]: with security on, every data RPC's block token
//!   is checked against the om's secrets (received in heartbeat answers).
//! - [`DatanodeMetrics`]: RPCs served by kind, bytes.
//! - [`FaultInjector`] / [`FaultRule`]: per-datanode fault injection (fail an
//!   RPC kind with a code, delay, corrupt/zero/short ReadChunk answers),
//!   reachable remotely through [`DatanodeAdminClient`] when enabled.
//!
//! Layering: depends on `proto-crate` only (it talks to the om through the
//! generated client to register and heartbeat); never on `ec-client` or
//! `block-stream`.

mod admin;
mod deletion;
mod error;
mod fault;
mod file_cache;
mod heartbeat;
mod inflight;
mod lru;
mod membership;
mod metrics;
mod observability;
mod reconstruction;
mod recovery;
mod report_schedule;
mod server;
mod service;
mod storage;
mod tokens;

pub use admin::{DatanodeAdminClient, DatanodeAdminGrpc};
pub use deletion::MAX_DELETE_BATCH;
pub use error::DatanodeError;
pub use fault::{FaultInjector, FaultKind, FaultRule, InvalidFault};
pub use file_cache::{DEFAULT_MAX_OPEN_FILES, FileCache};
pub use heartbeat::REPORT_PAGE;
pub use heartbeat::filesystem_space;
pub use inflight::{DEFAULT_MAX_INFLIGHT_BYTES, InflightBudget, InflightPermit};
pub use membership::CLUSTER_ID_FILE;
pub use metrics::{DatanodeMetrics, RpcKind};
pub use reconstruction::{
    DEFAULT_MAX_RECONSTRUCTIONS, EcReconstructionCommand, EcReconstructionCoordinator,
    EcReconstructionReport, IndexAddress, ReconstructionError,
};
pub use recovery::{RECOVERY_ORPHAN_LOG, RECOVERY_TAIL_LOG, RecoveryReport};
pub use server::{
    DEFAULT_BLOCK_REPORT_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL, Datanode, DatanodeConfig,
    MAX_MESSAGE_SIZE,
};
pub use service::DatanodeGrpcService;
pub use storage::{
    BlockScan, ContainerStore, DEFAULT_FINE_CHECKSUM_CACHE_BYTES, FINE_GRANULE, MAX_READ_LEN,
    StoreOptions, StoreStats,
};
pub use tokens::BlockTokenVerifier;
