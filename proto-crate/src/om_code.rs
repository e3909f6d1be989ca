//! Codes of failed om calls, carried in the `x-om-error` metadata header of
//! the gRPC status (the om's counterpart of the datanodes' [`ResultCode`]
//! in the status details). Clients and the S3 gateway match on the code,
//! never on message text.
//!
//! [`ResultCode`]: crate::ResultCode

use tonic::{Code, Status};

/// Metadata header carrying an [`OmErrorCode`]'s name on a failed om call.
pub const OM_ERROR_HEADER: &str = "x-om-error";

/// Why an om call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OmErrorCode {
    /// The om attached no code: a transport failure (see the gRPC code in
    /// the message), or a foreign server.
    Unspecified,
    /// No such bucket.
    BucketNotFound,
    /// The bucket exists already.
    BucketAlreadyExists,
    /// The bucket still holds keys or multipart uploads.
    BucketNotEmpty,
    /// No such key.
    KeyNotFound,
    /// No open key session with this id.
    NoSuchSession,
    /// Too few HEALTHY datanodes outside the exclude list for one group.
    NotEnoughDatanodes,
    /// A client (or the om) holds as many open sessions as allowed.
    TooManyOpenSessions,
    /// The request is malformed.
    InvalidArgument,
    /// Copying a block to a new replica failed.
    ReplicationFailed,
    /// No multipart upload with this id.
    NoSuchUpload,
    /// A part named in a complete is missing or has another ETag.
    InvalidPart,
    /// Parts named in a complete are not in ascending order.
    InvalidPartOrder,
    /// A part other than the last is under the minimum part size.
    EntityTooSmall,
    /// A commit's or deletion's [`WriteCondition`](crate::WriteCondition) did not hold.
    ConditionFailed,
    /// The om, or a datanode or metadata store it had to reach, is
    /// unavailable or answered too late. A change may have been applied:
    /// read before repeating it.
    Unavailable,
    /// The om failed internally (its database, its data dir).
    Internal,
    /// The caller may not make this call: a datanode call (register,
    /// heartbeat, block report) from a peer without a certificate the
    /// cluster CA signed, while the om runs with TLS.
    PermissionDenied,
    /// No S3 access key with this id (never issued, or revoked).
    AccessKeyNotFound,
    /// A bounded table is full: a user holds as many access keys as
    /// allowed, or the om as many users.
    LimitExceeded,
    /// Other om calls kept changing the metadata this call read, and the
    /// om gave up retrying it (`meta_store::StoreError::Contention`):
    /// nothing was written, so sending it again later is safe.
    Contention,
    /// The metadata store is out of space (etcd's quota, or a full disk
    /// under redb): nothing can be added until rows are freed and the
    /// space reclaimed. etcd may have applied the refused write, so read
    /// before repeating a change.
    StoreFull,
    /// This om does not answer this call: only the om that leads its
    /// metadata store's background services does (the message names it,
    /// when known), as for the ReplicationManager's status; or a write made
    /// through a store fenced by a lead (`meta_store::MetaStore::fenced`) was
    /// refused because that lead was lost. Nothing was applied, though a call
    /// that writes in steps may have made its earlier ones (clean-ups a
    /// repeat makes again). Any call, changes included, is safe to send to
    /// another om (Ozone's `OMNotLeaderException`, on which its clients fail
    /// over).
    NotLeader,
}

impl OmErrorCode {
    /// Every code.
    pub const ALL: [OmErrorCode; 23] = [
        Self::Unspecified,
        Self::BucketNotFound,
        Self::BucketAlreadyExists,
        Self::BucketNotEmpty,
        Self::KeyNotFound,
        Self::NoSuchSession,
        Self::NotEnoughDatanodes,
        Self::TooManyOpenSessions,
        Self::InvalidArgument,
        Self::ReplicationFailed,
        Self::NoSuchUpload,
        Self::InvalidPart,
        Self::InvalidPartOrder,
        Self::EntityTooSmall,
        Self::ConditionFailed,
        Self::Unavailable,
        Self::Internal,
        Self::PermissionDenied,
        Self::AccessKeyNotFound,
        Self::LimitExceeded,
        Self::Contention,
        Self::StoreFull,
        Self::NotLeader,
    ];

    /// Stable upper-case name, as sent in [`OM_ERROR_HEADER`].
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Unspecified => "UNSPECIFIED",
            Self::BucketNotFound => "BUCKET_NOT_FOUND",
            Self::BucketAlreadyExists => "BUCKET_ALREADY_EXISTS",
            Self::BucketNotEmpty => "BUCKET_NOT_EMPTY",
            Self::KeyNotFound => "KEY_NOT_FOUND",
            Self::NoSuchSession => "NO_SUCH_SESSION",
            Self::NotEnoughDatanodes => "NOT_ENOUGH_DATANODES",
            Self::TooManyOpenSessions => "TOO_MANY_OPEN_SESSIONS",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::ReplicationFailed => "REPLICATION_FAILED",
            Self::NoSuchUpload => "NO_SUCH_UPLOAD",
            Self::InvalidPart => "INVALID_PART",
            Self::InvalidPartOrder => "INVALID_PART_ORDER",
            Self::EntityTooSmall => "ENTITY_TOO_SMALL",
            Self::ConditionFailed => "CONDITION_FAILED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Internal => "INTERNAL",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::AccessKeyNotFound => "ACCESS_KEY_NOT_FOUND",
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::Contention => "CONTENTION",
            Self::StoreFull => "METADATA_STORE_FULL",
            Self::NotLeader => "NOT_LEADER",
        }
    }

    /// The code named `name` (exactly as [`name`](Self::name) spells it).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The gRPC code the om answers this code with.
    #[must_use]
    pub fn grpc_code(self) -> Code {
        match self {
            Self::BucketNotFound
            | Self::KeyNotFound
            | Self::NoSuchSession
            | Self::NoSuchUpload
            | Self::AccessKeyNotFound => Code::NotFound,
            Self::BucketAlreadyExists => Code::AlreadyExists,
            Self::BucketNotEmpty | Self::ConditionFailed => Code::FailedPrecondition,
            Self::NotEnoughDatanodes
            | Self::TooManyOpenSessions
            | Self::LimitExceeded
            | Self::StoreFull => Code::ResourceExhausted,
            // gRPC's code for a transaction that lost to a concurrent one.
            Self::Contention => Code::Aborted,
            Self::InvalidArgument
            | Self::InvalidPart
            | Self::InvalidPartOrder
            | Self::EntityTooSmall => Code::InvalidArgument,
            Self::ReplicationFailed | Self::Unavailable | Self::NotLeader => Code::Unavailable,
            Self::Unspecified | Self::Internal => Code::Internal,
            Self::PermissionDenied => Code::PermissionDenied,
        }
    }

    /// A status with this code's gRPC code, `message`, and the code in
    /// [`OM_ERROR_HEADER`].
    #[must_use]
    pub fn status(self, message: impl Into<String>) -> Status {
        let mut s = Status::new(self.grpc_code(), message);
        if let Ok(v) = self.name().parse() {
            s.metadata_mut().insert(OM_ERROR_HEADER, v);
        }
        s
    }

    /// The code a failed call carried. Every answer of the om's handlers
    /// carries one, so a status without one never got an answer: a refused
    /// or lost connection, a deadline, a reset stream (`Unavailable`,
    /// `DeadlineExceeded`, `Unknown`, `Cancelled`, `Aborted`) counts as
    /// [`Unavailable`](Self::Unavailable); anything else (say, a message
    /// too large for the transport) as [`Unspecified`](Self::Unspecified).
    #[must_use]
    pub fn of(status: &Status) -> Self {
        match status
            .metadata()
            .get(OM_ERROR_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(Self::from_name)
        {
            Some(c) => c,
            None => match status.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Cancelled
                | Code::Aborted => Self::Unavailable,
                _ => Self::Unspecified,
            },
        }
    }

    /// Whether trying the same call again later may succeed: the om or its
    /// datanodes were unavailable or out of room, not the request wrong.
    #[must_use]
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::Unavailable
                | Self::NotEnoughDatanodes
                | Self::TooManyOpenSessions
                | Self::ReplicationFailed
                | Self::Contention
                | Self::StoreFull
                | Self::NotLeader
        )
    }
}

impl std::fmt::Display for OmErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_a_status() {
        for c in OmErrorCode::ALL {
            assert_eq!(OmErrorCode::from_name(c.name()), Some(c));
            if c != OmErrorCode::Unspecified {
                assert_eq!(OmErrorCode::of(&c.status("m")), c, "{c}");
            }
        }
    }

    #[test]
    fn a_status_without_a_code_is_classified_by_its_grpc_code() {
        assert_eq!(
            OmErrorCode::of(&Status::unavailable("connection refused")),
            OmErrorCode::Unavailable
        );
        assert_eq!(
            OmErrorCode::of(&Status::unknown("h2 reset")),
            OmErrorCode::Unavailable,
            "a stream reset by a killed om"
        );
        assert_eq!(
            OmErrorCode::of(&Status::out_of_range("message too large")),
            OmErrorCode::Unspecified
        );
    }
}
