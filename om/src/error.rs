//! The om's error, and its mapping to gRPC statuses (and back, for clients).

use proto_crate::OmErrorCode;
use tonic::Status;

/// Why an om operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OmError {
    /// No such bucket.
    #[error("bucket `{0}` not found")]
    BucketNotFound(String),
    /// The bucket exists already.
    #[error("bucket `{0}` already exists")]
    BucketAlreadyExists(String),
    /// The bucket still holds keys.
    #[error("bucket `{0}` is not empty")]
    BucketNotEmpty(String),
    /// No such key.
    #[error("key `{bucket}/{key}` not found")]
    KeyNotFound {
        /// Bucket name.
        bucket: String,
        /// Key name.
        key: String,
    },
    /// A commit's or deletion's write condition did not hold (S3's 412/409).
    #[error("condition on `{bucket}/{key}` failed: {reason}")]
    ConditionFailed {
        /// Bucket name.
        bucket: String,
        /// Key name.
        key: String,
        /// What the key is instead.
        reason: String,
    },
    /// No open key with this session id (never opened, committed, aborted, or
    /// lost in an om restart).
    #[error("no open key session {0}")]
    NoSuchSession(u64),
    /// Too few HEALTHY datanodes outside the exclude list for one block group.
    #[error(
        "need {needed} healthy datanodes for a block group but only {available} are available \
         ({healthy} of {registered} registered datanodes are healthy; {excluded} healthy ones excluded)"
    )]
    NotEnoughDatanodes {
        /// Datanodes one group needs.
        needed: usize,
        /// Healthy and not excluded.
        available: usize,
        /// Healthy datanodes, excluded or not.
        healthy: usize,
        /// Registered datanodes, whatever their state.
        registered: usize,
        /// How many healthy datanodes were excluded.
        excluded: usize,
    },
    /// A client holds as many open key and part sessions as the om allows.
    #[error(
        "client `{client}` already holds {limit} open key sessions (the om's limit); commit or abort some"
    )]
    TooManyOpenSessions {
        /// The client's id (empty for anonymous clients).
        client: String,
        /// The limit.
        limit: usize,
    },
    /// A malformed request.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No multipart upload with this id (never started, completed or aborted).
    #[error("no multipart upload {0}")]
    NoSuchUpload(String),
    /// What the call would change is held by another call under way (a part commit or a
    /// repair of a part while the upload's completion reads its parts): nothing was
    /// written; retry ([`OmErrorCode::Contention`]). A refused part commit ends its session
    /// as any failed commit does (its groups are reclaimed), so the part is uploaded again,
    /// as S3 SDKs do on the gateway's SlowDown.
    #[error("busy: {0}")]
    Busy(String),
    /// A listed part was not uploaded or its ETag differs.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// Listed parts are not in ascending order.
    #[error("invalid part order: {0}")]
    InvalidPartOrder(String),
    /// A part other than the last is below the minimum size.
    #[error("entity too small: {0}")]
    EntityTooSmall(String),
    /// Copying a replica to another datanode failed.
    #[error("replication failed: {0}")]
    ReplicationFailed(String),
    /// A block group cannot be repaired now: fewer than d of its indexes (or none of its
    /// copies) are readable. Not worth retrying until a datanode returns.
    #[error("unrecoverable for now: {0}")]
    InsufficientSources(String),
    /// No S3 access key with this id (never issued, or revoked).
    #[error("no S3 access key {0}")]
    AccessKeyNotFound(String),
    /// A bounded table is full (access keys of one user, users).
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The caller may not make this call (see
    /// [`OmErrorCode::PermissionDenied`]).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The om could not be reached (client-side helpers only).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// Another process owns the om's data dir (the message names it).
    #[error("{0}")]
    DataDirInUse(String),
    /// Locking the data dir failed for another reason (I/O).
    #[error("locking the data dir: {0}")]
    DataDirLock(#[source] proto_crate::DirLockError),
    /// The metadata database failed (redb's error, typed).
    #[error("metadata database: {0}")]
    Db(#[from] redb::Error),
    /// The metadata store failed (the modules moved onto `meta_store`):
    /// [`OmErrorCode::Contention`] when other calls kept changing what this
    /// one read, [`OmErrorCode::StoreFull`] when the store is out of space,
    /// [`OmErrorCode::Unavailable`] when it could not be reached or was
    /// overloaded ([`meta_store::StoreError::is_transient`]) or this om's
    /// leadership ended,
    /// [`OmErrorCode::Internal`] otherwise.
    #[error("metadata store: {0}")]
    Store(#[from] meta_store::StoreError),
    /// A stored record does not decode (the database is corrupt or was
    /// written by an incompatible version).
    #[error("{what} record is corrupt: {source}")]
    CorruptRecord {
        /// What the record holds (bucket, key, upload, ...).
        what: String,
        /// The decoding failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An invariant of the om's own state does not hold.
    #[error("internal error: {0}")]
    Internal(String),
    /// A database task on the blocking pool panicked or was cancelled.
    #[error("database task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl OmError {
    /// The code clients see (sent in `proto_crate::OM_ERROR_HEADER`).
    #[must_use]
    pub fn code(&self) -> OmErrorCode {
        match self {
            Self::BucketNotFound(_) => OmErrorCode::BucketNotFound,
            Self::BucketAlreadyExists(_) => OmErrorCode::BucketAlreadyExists,
            Self::BucketNotEmpty(_) => OmErrorCode::BucketNotEmpty,
            Self::KeyNotFound { .. } => OmErrorCode::KeyNotFound,
            Self::ConditionFailed { .. } => OmErrorCode::ConditionFailed,
            Self::NoSuchSession(_) => OmErrorCode::NoSuchSession,
            Self::NotEnoughDatanodes { .. } => OmErrorCode::NotEnoughDatanodes,
            Self::TooManyOpenSessions { .. } => OmErrorCode::TooManyOpenSessions,
            Self::InvalidArgument(_) => OmErrorCode::InvalidArgument,
            Self::ReplicationFailed(_) | Self::InsufficientSources(_) => {
                OmErrorCode::ReplicationFailed
            }
            Self::NoSuchUpload(_) => OmErrorCode::NoSuchUpload,
            Self::InvalidPart(_) => OmErrorCode::InvalidPart,
            Self::InvalidPartOrder(_) => OmErrorCode::InvalidPartOrder,
            Self::EntityTooSmall(_) => OmErrorCode::EntityTooSmall,
            Self::Unreachable(_) => OmErrorCode::Unavailable,
            Self::PermissionDenied(_) => OmErrorCode::PermissionDenied,
            Self::AccessKeyNotFound(_) => OmErrorCode::AccessKeyNotFound,
            Self::LimitExceeded(_) => OmErrorCode::LimitExceeded,
            Self::Busy(_) => OmErrorCode::Contention,
            Self::Store(e) => store_code(e),
            Self::DataDirInUse(_)
            | Self::DataDirLock(_)
            | Self::Db(_)
            | Self::CorruptRecord { .. }
            | Self::Internal(_)
            | Self::Task(_) => OmErrorCode::Internal,
        }
    }
}

/// The code a client sees for a failure of the metadata store: whether it
/// may try again, and whether the call may have been applied.
fn store_code(e: &meta_store::StoreError) -> OmErrorCode {
    use meta_store::StoreError as S;
    match e {
        S::Contention { .. } => OmErrorCode::Contention,
        S::SpaceExhausted(_) => OmErrorCode::StoreFull,
        // The store could not be reached, or answered too late; a change
        // may have been applied (which `Unavailable` tells the client).
        e if e.is_transient() => OmErrorCode::Unavailable,
        // A deposed leader's write: nothing was written, another om leads.
        S::NotLeader { .. } => OmErrorCode::NotLeader,
        // A key or part of too many block groups for one etcd request: repeating the
        // same write cannot succeed (`sessions.rs`, `too_large`).
        S::RequestTooLarge { .. } => OmErrorCode::InvalidArgument,
        _ => OmErrorCode::Internal,
    }
}

impl From<OmError> for Status {
    fn from(e: OmError) -> Self {
        e.code().status(e.to_string())
    }
}

proto_crate::redb_error_conversions!(OmError, Db);

#[cfg(test)]
mod tests {
    use meta_store::StoreError;
    use tonic::Code;

    use super::*;

    fn etcd_client_error(s: Status) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(s)
    }

    /// A client can tell a call that lost to concurrent ones, or met a full
    /// store, from an om fault: both are retryable, with their own codes.
    #[test]
    fn store_failures_reach_the_client_as_their_own_codes() {
        let cases = [
            (
                StoreError::Contention { attempts: 32 },
                OmErrorCode::Contention,
                Code::Aborted,
            ),
            (
                StoreError::SpaceExhausted("etcdserver: mvcc: database space exceeded".into()),
                OmErrorCode::StoreFull,
                Code::ResourceExhausted,
            ),
            (
                StoreError::Timeout(std::time::Duration::from_secs(5)),
                OmErrorCode::Unavailable,
                Code::Unavailable,
            ),
            (
                StoreError::Etcd(etcd_client_error(Status::unavailable("member down"))),
                OmErrorCode::Unavailable,
                Code::Unavailable,
            ),
            (
                StoreError::Etcd(etcd_client_error(Status::resource_exhausted(
                    "etcdserver: too many requests",
                ))),
                OmErrorCode::Unavailable,
                Code::Unavailable,
            ),
            (
                StoreError::NotLeader {
                    election: "om".into(),
                },
                OmErrorCode::NotLeader,
                Code::Unavailable,
            ),
            (
                StoreError::Etcd(etcd_client_error(Status::permission_denied("no role"))),
                OmErrorCode::Internal,
                Code::Internal,
            ),
            (
                StoreError::Protocol("a negative revision".into()),
                OmErrorCode::Internal,
                Code::Internal,
            ),
        ];
        for (store, code, grpc) in cases {
            let status = Status::from(OmError::Store(store));
            assert_eq!(OmErrorCode::of(&status), code, "{status:?}");
            assert_eq!(status.code(), grpc, "{status:?}");
            assert_eq!(code.is_retryable(), code != OmErrorCode::Internal, "{code}");
        }
    }
}
