//! Wire protocol of the datanode and the om, and the domain types the rest of
//! the workspace speaks.
//!
//! The `.proto` sources under `proto/` are compiled at build time with `protox`
//! (no system `protoc`). Generated code stays inside this crate, in [`wire`];
//! every other crate uses the domain types re-exported here ([`BlockId`],
//! [`ChunkInfo`], [`ChecksumData`], [`BlockData`], [`DatanodeDetails`],
//! [`Pipeline`], [`BlockGroup`], [`KeyInfo`], [`ReplicationConfig`]).
//! Conversions from the wire are `TryFrom` returning [`ProtocolError`] (a
//! required field that is missing or a value out of its domain); conversions
//! to the wire are `From`. Failed calls carry a [`ResultCode`] in the gRPC
//! status details, written by [`status`] and read by [`result_code`].
//!
//! Layering: depends only on `ec-codec` (for [`EcReplicationConfig`]); no
//! other workspace crate may be used from here.

pub mod address;
pub mod block_token;
mod datanode_id;
mod db_error;
mod dir_lock;
mod domain;
mod error;
mod logging;
mod metadata;
pub mod metrics_http;
mod om_code;
pub mod request_id;
mod result;
mod rpc_kind;
pub mod rpc_metrics;
mod serving;
pub mod tls;
pub mod transport;

/// Generated protobuf and gRPC code. Only servers and clients in the
/// `datanode`, `om` and `block-stream` crates touch these types directly.
pub mod wire {
    /// Datanode protocol (`proto/datanode.proto`).
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod datanode {
        tonic::include_proto!("ozone.datanode.v1");
    }
    /// Admin protocols (`proto/admin.proto`): fault injection, spare
    /// replicas, minicluster control.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod admin {
        tonic::include_proto!("ozone.admin.v1");
    }
    /// Om protocol (`proto/om.proto`).
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod om {
        tonic::include_proto!("ozone.om.v1");
    }
}

pub use datanode_id::DatanodeId;
pub use dir_lock::{DirLock, DirLockError, FORK_WINDOW_WAIT, LOCK_FILE};
pub use domain::{
    BLOCK_GROUP_LENGTH_KEY, BlockCommit, BlockData, BlockGroup, BlockId, BlockLocation,
    ChecksumData, ChecksumType, ChunkInfo, DatanodeDetails, Pipeline, ReplicationConfig,
};
pub use ec_codec::{EcReplicationConfig, ReplicaIndex};
pub use error::ProtocolError;
pub use logging::{LogFormat, ShutdownSignals, init_logging, init_logging_as};
pub use metadata::{
    BucketInfo, CannedAcl, KeyInfo, MULTIPART_PART_SIZES_KEY, MultipartUpload, PartInfo,
    WriteCondition, object_metadata,
};
pub use om_code::{OM_ERROR_HEADER, OmErrorCode};
pub use result::{ResultCode, result_code, status};
pub use rpc_kind::RpcKind;
pub use serving::{ServingTask, ShutdownSignal, Stopped};
