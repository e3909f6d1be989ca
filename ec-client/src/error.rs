//! The client's error.

use block_stream::BlockStreamError;
use ec_codec::{EcError, ReplicaIndex};
use proto_crate::{BlockId, DatanodeId, OmErrorCode, ProtocolError};

/// Result alias of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// What went wrong in a client operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The om refused or failed an operation.
    #[error("om {op} failed ({code}): {message}")]
    Om {
        /// The om operation.
        op: &'static str,
        /// The om's error code (`KeyNotFound`, `NotEnoughDatanodes`, ...);
        /// `Unavailable` when the call did not reach the om,
        /// `Unspecified` when it came back without a code.
        code: OmErrorCode,
        /// The om's message (with the gRPC code when the om attached none).
        message: String,
    },
    /// The key does not exist.
    #[error("key `{bucket}/{key}` not found")]
    KeyNotFound {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// The bucket does not exist.
    #[error("bucket `{0}` not found")]
    BucketNotFound(String),
    /// A datanode call or block read failed.
    #[error(transparent)]
    BlockStream(#[from] BlockStreamError),
    /// Layout or codec error (a bug or corrupt metadata; never caller input).
    #[error("erasure coding: {0}")]
    Ec(#[from] EcError),
    /// The om sent something malformed.
    #[error("bad message from the om: {0}")]
    Protocol(#[from] ProtocolError),
    /// A read needed bytes past the end of the key.
    #[error("unexpected end of key: {len} bytes at offset {pos} requested, key holds {key_len}")]
    UnexpectedEof {
        /// Offset asked for (key-relative).
        pos: u64,
        /// Bytes asked for.
        len: u64,
        /// Key length.
        key_len: u64,
    },
    /// More replica indexes of a block group are unreadable than parity can cover.
    #[error(
        "insufficient locations for block group {block}: {needed} readable indexes needed, \
         lost {}: {}",
        failed.len(),
        lost_list(failed)
    )]
    InsufficientLocations {
        /// The group (no replica index).
        block: BlockId,
        /// Indexes a read needs (d).
        needed: usize,
        /// The lost indexes, each with why: the failed datanode's `HOST:PORT`
        /// and its error, or why the index had no location to try.
        failed: Vec<(ReplicaIndex, String)>,
    },
    /// A stripe (EC) or chunk (replicated) could not be written even after
    /// rewriting it on new block groups.
    #[error(
        "write of stripe/chunk {stripe} failed after {attempts} attempts \
         (excluded datanodes: {}){}: {cause}",
        list_or_none(excluded),
        previous.as_ref().map(|p| format!(", after: {p}")).unwrap_or_default()
    )]
    WriteFailed {
        /// Position of the stripe or chunk in the key, from 0.
        stripe: u64,
        /// Attempts made.
        attempts: u32,
        /// Datanodes excluded along the way.
        excluded: Vec<DatanodeId>,
        /// The datanode failure that led to the last exclusion, when the
        /// last failure (`cause`) was the om's refusal of a new group.
        previous: Option<String>,
        /// The last failure.
        #[source]
        cause: Box<ClientError>,
    },
    /// The writer failed (now or earlier); no call can proceed and `close`
    /// commits nothing. Every call after a failure returns this, with the
    /// original failure as its source.
    #[error("writer of {key} failed: {cause}")]
    WriteAborted {
        /// `bucket/key`.
        key: String,
        /// The original failure.
        #[source]
        cause: std::sync::Arc<ClientError>,
    },
    /// An earlier `write` or `hsync` of this writer was cancelled (its
    /// future dropped) before it finished: what reached the datanodes is
    /// unknown, so the writer refuses to go on and `close` commits nothing
    /// (the caller writes the key again). Dropping a future at an await
    /// point is how `tokio::time::timeout` and `select!` cancel.
    #[error("writer of {key} was cancelled in the middle of a write; it commits nothing")]
    WriteCancelled {
        /// `bucket/key`.
        key: String,
    },
    /// A task the client runs in the background (an om call guarded against
    /// cancellation, an EC writer's flush stage or stripe encoding) ended
    /// without an answer:
    /// it panicked, or the runtime is shutting down.
    #[error("client task ended without an answer: {0}")]
    TaskLost(String),
    /// The operation is not supported for this kind of key (e.g. hsync on EC).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bad argument from the caller.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An invariant of the client broke — a bug, or an om answer that breaks the protocol's
    /// promises (a group without an index it must have, lengths that overflow) — never the
    /// caller's fault; an S3 gateway answers 500 `InternalError`.
    #[error("internal error: {0}")]
    Internal(String),
    /// The om call timed out.
    #[error("om {op} timed out after {after:?}")]
    OmTimeout {
        /// The om operation.
        op: &'static str,
        /// The deadline.
        after: std::time::Duration,
    },
    /// Connecting to the om failed.
    #[error("connecting to om at {address}: {message}")]
    Connect {
        /// `HOST:PORT` (several, comma-separated, for an om list of which
        /// none answered).
        address: String,
        /// Why.
        message: String,
    },
}

/// The datanode ids joined with `, ` (UUIDs as the om registered them), or
/// `none`.
fn list_or_none(items: &[DatanodeId]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `index 1 (why); index 3 (why)`.
fn lost_list(failed: &[(ReplicaIndex, String)]) -> String {
    failed
        .iter()
        .map(|(r, why)| format!("index {r} ({why})"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl ClientError {
    /// The failure behind a writer's report: the innermost cause of
    /// [`WriteAborted`](Self::WriteAborted) and [`WriteFailed`](Self::WriteFailed),
    /// or `self` for every other error. Callers that map errors (an S3
    /// gateway choosing a status) map this one.
    #[must_use]
    pub fn root(&self) -> &ClientError {
        match self {
            Self::WriteAborted { cause, .. } => cause.root(),
            Self::WriteFailed { cause, .. } => cause.root(),
            e => e,
        }
    }

    /// Whether the om refused a commit or deletion because its [`WriteCondition`] did not
    /// hold (the key exists, or is at another generation): the root is an om error with
    /// [`OmErrorCode::ConditionFailed`].
    ///
    /// [`WriteCondition`]: crate::WriteCondition
    #[must_use]
    pub fn is_condition_failed(&self) -> bool {
        matches!(
            self.root(),
            Self::Om {
                code: OmErrorCode::ConditionFailed,
                ..
            }
        )
    }

    /// Whether trying again later (the same call, or for a writer that
    /// failed, writing the key again) may succeed: the om, datanodes or the
    /// network were unavailable, timed out or out of room, or a write was
    /// cancelled. Missing keys, bad arguments and corrupt metadata are not
    /// retryable. An S3 gateway answers retryable errors with 503.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Om { code, .. } => code.is_retryable(),
            Self::OmTimeout { .. }
            | Self::Connect { .. }
            | Self::InsufficientLocations { .. }
            | Self::WriteCancelled { .. } => true,
            Self::BlockStream(e) => e.is_transient(),
            Self::WriteFailed { cause, .. } => cause.is_retryable(),
            Self::WriteAborted { cause, .. } => cause.is_retryable(),
            Self::KeyNotFound { .. }
            | Self::BucketNotFound(_)
            | Self::Ec(_)
            | Self::Protocol(_)
            | Self::UnexpectedEof { .. }
            | Self::Unsupported(_)
            | Self::InvalidArgument(_)
            | Self::Internal(_)
            | Self::TaskLost(_) => false,
        }
    }

    /// The client error an `std::io::Error` carries: what
    /// [`KeyInputStream`](crate::KeyInputStream)'s `AsyncRead` / `AsyncSeek` return wraps
    /// one (see the `From<ClientError>` conversion), and this takes it back out, so a caller
    /// that read through `tokio::io` can still ask [`is_retryable`](Self::is_retryable) or
    /// match a missing key.
    ///
    /// # Errors
    /// `e` itself, unchanged, when it carries no client error (an I/O error of the caller's
    /// own, say).
    pub fn from_io(e: std::io::Error) -> std::result::Result<ClientError, std::io::Error> {
        if !e.get_ref().is_some_and(|inner| inner.is::<ClientError>()) {
            return Err(e);
        }
        let kind = e.kind();
        match e.into_inner().map(|inner| inner.downcast::<ClientError>()) {
            Some(Ok(client)) => Ok(*client),
            Some(Err(other)) => Err(std::io::Error::new(kind, other)),
            None => Err(std::io::Error::from(kind)),
        }
    }
}

impl From<ClientError> for std::io::Error {
    fn from(e: ClientError) -> Self {
        let kind = match &e {
            ClientError::UnexpectedEof { .. } => std::io::ErrorKind::UnexpectedEof,
            ClientError::KeyNotFound { .. } | ClientError::BucketNotFound(_) => {
                std::io::ErrorKind::NotFound
            }
            ClientError::InvalidArgument(_) => std::io::ErrorKind::InvalidInput,
            ClientError::Unsupported(_) => std::io::ErrorKind::Unsupported,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_error_survives_the_trip_through_io_error() {
        let e = std::io::Error::from(ClientError::KeyNotFound {
            bucket: "b".into(),
            key: "k".into(),
        });
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let back = ClientError::from_io(e).expect("carries a client error");
        assert!(matches!(back, ClientError::KeyNotFound { .. }), "{back}");
        let own = std::io::Error::other("disk full");
        let same = ClientError::from_io(own).expect_err("no client error inside");
        assert_eq!(same.to_string(), "disk full");
    }

    #[test]
    fn a_write_failure_names_its_excluded_datanodes_plainly() {
        let failed = |excluded: Vec<DatanodeId>| ClientError::WriteFailed {
            stripe: 7,
            attempts: 3,
            excluded,
            previous: None,
            cause: Box::new(ClientError::InvalidArgument("no room".into())),
        };
        let ids: Vec<DatanodeId> = [
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-000000000004",
        ]
        .iter()
        .map(|s| s.parse().expect("a datanode id"))
        .collect();
        assert_eq!(
            failed(ids).to_string(),
            "write of stripe/chunk 7 failed after 3 attempts \
             (excluded datanodes: 00000000-0000-0000-0000-000000000001, \
             00000000-0000-0000-0000-000000000004): invalid argument: no room"
        );
        assert!(
            failed(Vec::new())
                .to_string()
                .contains("(excluded datanodes: none)")
        );
    }
}
