//! The metadata service (`om`): Ozone Manager and SCM roles in one.
//!
//! - [`OzoneManager`]: datanode registry, buckets with default replication and
//!   block size, keys (open, allocate block groups honouring an exclude list,
//!   commit with final lengths, lookup, list, delete), persisted in the
//!   metadata store (`meta_store`: redb in the om's own file, or etcd).
//!   Usable in-process.
//! - Datanode liveness ([`NodeState`]: heartbeats make HEALTHY, silence
//!   STALE then DEAD; only HEALTHY datanodes get new groups).
//! - Space reclamation: a deletion log written with every metadata change
//!   that frees block groups, and the block deleting service that sends
//!   DeleteBlocks to datanodes ([`run_block_deleting_service`]); open-key
//!   sessions expire after a lease.
//! - [`OmGrpcService`] / [`OmServer`]: the same over gRPC, with the
//!   background services.
//! - Repair: block reports ([`BlockReport`]) and the ReplicationManager
//!   ([`run_replication_manager`]) rebuild or copy what a DEAD or
//!   decommissioning datanode held, or a block a live datanode lost.
//! - [`add_replica`] / [`OmAdminGrpc`]: copy an EC replica to another
//!   datanode and record it as a spare location (Ozone's EC replication).
//! - [`OmError`]: typed errors; a failed gRPC call carries the error's name in
//!   the `x-om-error` header as a `proto_crate::OmErrorCode`.
//!
//! Layering: depends on `proto-crate` only.

mod admin;
mod block_reports;
mod block_tokens;
mod buckets;
mod clock;
mod cluster_id;
mod completed;
mod conditions;
mod decommission;
mod deletion;
mod error;
mod group_owner;
mod keys;
mod manager;
mod multipart;
mod nodes;
mod observability;
mod old_layout;
mod orphans;
mod placement;
mod reconstruction;
mod registrations;
mod repair_plan;
mod replication;
mod replication_manager;
mod s3_users;
mod server;
mod service;
mod service_lead;
mod session_rows;
mod sessions;
#[cfg(test)]
mod shared_store_tests;
mod store_moves;
#[cfg(test)]
mod store_suite;
mod tables;
#[cfg(test)]
mod test_oms;
mod upload_rows;

pub use admin::{AdminCallError, MAX_REPAIR_STATUS_WAIT, OmAdminClient, OmAdminGrpc};
pub use block_reports::{BlockReport, MAX_CHECKS_PER_PASS, MAX_REPORTED_BLOCKS};
pub use block_tokens::{
    BlockTokenConfig, DEFAULT_BLOCK_TOKEN_LIFETIME, MIN_BLOCK_TOKEN_LIFETIME, TokenOwner,
};
pub use buckets::{BucketFilter, MAX_BUCKET_PAGE};
pub use clock::{Clock, ManualClock, SystemClock};
pub use completed::COMPLETION_RETRY_WINDOW;
pub use decommission::OperationalState;
pub use deletion::{DELETE_BATCH, TXN_BATCH, run_block_deleting_service};
pub use error::OmError;
pub use manager::{
    DEFAULT_DELETION_GRACE, DEFAULT_MAX_SESSIONS_PER_CLIENT, DEFAULT_OPEN_KEY_LEASE,
    DEFAULT_SERVICE_INTERVAL, OmConfig, OpenKey, OzoneManager,
};
pub use multipart::MAX_PART_NUMBER;
pub use nodes::{DatanodeStatus, Liveness, NodeState, NodeStats, list_datanode_statuses};
pub use reconstruction::{RECONSTRUCTION_TIMEOUT, reconstruct_ec_indexes};
pub use replication::add_replica;
pub use replication_manager::{
    DEFAULT_FULL_SCAN_INTERVAL, DEFAULT_MAX_REPAIRS_IN_FLIGHT, DEFAULT_MAX_REPAIRS_PER_DATANODE,
    MAX_RETRY_BACKOFF, RepairConfig, RepairStatus, run_replication_manager,
};
pub use s3_users::{
    MAX_ACCESS_KEYS_PER_USER, MAX_BUCKETS_PER_OWNER, MAX_S3_USERS, RESERVED_USER, S3Credentials,
    S3User,
};
pub use server::OmServer;
pub use service::OmGrpcService;
pub use service_lead::{OM_ELECTION, ServiceLeadConfig, lead_services};
pub use sessions::{
    ANONYMOUS_CLIENT, LOCAL_ID_BATCH, MAX_OPEN_SESSIONS, MAX_SESSION_ROW_BYTES,
    SESSION_CENSUS_INTERVAL,
};
pub use upload_rows::{COMPLETION_HOLD_MS, MAX_LIST_PAGE, UploadsMarker};
