//! The metadata service (`om`): Ozone Manager and SCM roles in one.
//!
//! - [`OzoneManager`]: datanode registry, buckets with default replication and
//!   block size, keys (open, allocate block groups honouring an exclude list,
//!   commit with final lengths, lookup, list, delete), persisted in redb.
//!   Usable in-process.
//! - [`OmGrpcService`] / [`OmServer`]: the same over gRPC.
//! - [`add_replica`] / [`OmAdminGrpc`]: copy an EC replica to another
//!   datanode and record it as a spare location (Ozone's EC replication).
//! - [`OmError`]: typed errors; a failed gRPC call carries the error's name in
//!   the [`OM_ERROR_HEADER`] header, read back with [`om_error_name`].
//!
//! Layering: depends on `proto-crate` only.

mod error;
mod keys;
mod manager;
mod multipart;
mod replication;
mod server;
mod service;

pub use error::{OM_ERROR_HEADER, OmError, om_error_name};
pub use manager::{OmConfig, OpenKey, OzoneManager};
pub use multipart::MAX_PART_NUMBER;
pub use replication::{OmAdminClient, OmAdminGrpc, add_replica};
pub use server::OmServer;
pub use service::OmGrpcService;
