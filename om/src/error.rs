//! The om's error, and its mapping to gRPC statuses (and back, for clients).

use tonic::{Code, Status};

/// Metadata header carrying an [`OmError`]'s stable name on a failed call.
pub const OM_ERROR_HEADER: &str = "x-om-error";

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
    /// The om could not be reached (client-side helpers only).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// Another process owns the om's data dir (the message names it).
    #[error("{0}")]
    DataDirInUse(String),
    /// The metadata database failed.
    #[error("metadata database: {0}")]
    Db(String),
}

impl OmError {
    /// Stable name, sent in the [`OM_ERROR_HEADER`] header.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::BucketNotFound(_) => "BUCKET_NOT_FOUND",
            Self::BucketAlreadyExists(_) => "BUCKET_ALREADY_EXISTS",
            Self::BucketNotEmpty(_) => "BUCKET_NOT_EMPTY",
            Self::KeyNotFound { .. } => "KEY_NOT_FOUND",
            Self::NoSuchSession(_) => "NO_SUCH_SESSION",
            Self::NotEnoughDatanodes { .. } => "NOT_ENOUGH_DATANODES",
            Self::TooManyOpenSessions { .. } => "TOO_MANY_OPEN_SESSIONS",
            Self::InvalidArgument(_) => "INVALID_ARGUMENT",
            Self::ReplicationFailed(_) => "REPLICATION_FAILED",
            Self::NoSuchUpload(_) => "NO_SUCH_UPLOAD",
            Self::InvalidPart(_) => "INVALID_PART",
            Self::InvalidPartOrder(_) => "INVALID_PART_ORDER",
            Self::EntityTooSmall(_) => "ENTITY_TOO_SMALL",
            Self::Unreachable(_) => "UNAVAILABLE",
            Self::DataDirInUse(_) | Self::Db(_) => "INTERNAL",
        }
    }

    fn code(&self) -> Code {
        match self {
            Self::BucketNotFound(_) | Self::KeyNotFound { .. } | Self::NoSuchSession(_) => {
                Code::NotFound
            }
            Self::BucketAlreadyExists(_) => Code::AlreadyExists,
            Self::BucketNotEmpty(_) => Code::FailedPrecondition,
            Self::NotEnoughDatanodes { .. } | Self::TooManyOpenSessions { .. } => {
                Code::ResourceExhausted
            }
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::ReplicationFailed(_) | Self::Unreachable(_) => Code::Unavailable,
            Self::NoSuchUpload(_) => Code::NotFound,
            Self::InvalidPart(_) | Self::InvalidPartOrder(_) | Self::EntityTooSmall(_) => {
                Code::InvalidArgument
            }
            Self::DataDirInUse(_) | Self::Db(_) => Code::Internal,
        }
    }
}

impl From<OmError> for Status {
    fn from(e: OmError) -> Self {
        let mut s = Status::new(e.code(), e.to_string());
        if let Ok(v) = e.name().parse() {
            s.metadata_mut().insert(OM_ERROR_HEADER, v);
        }
        s
    }
}

/// The [`OmError::name`] a failed om call carried, if any.
#[must_use]
pub fn om_error_name(status: &Status) -> Option<&str> {
    status
        .metadata()
        .get(OM_ERROR_HEADER)
        .and_then(|v| v.to_str().ok())
}

macro_rules! db_error {
    ($($t:ty),*) => {$(
        impl From<$t> for OmError {
            fn from(e: $t) -> Self {
                Self::Db(e.to_string())
            }
        }
    )*};
}
db_error!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
