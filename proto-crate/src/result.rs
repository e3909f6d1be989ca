//! Result codes of failed datanode calls, carried in the gRPC status details.
//!
//! Modelled on Ozone's `ContainerProtos.Result`: the gRPC code tells the
//! transport-level class, the result code tells the client exactly what went
//! wrong so that it can decide between "try another replica" and "caller error".

use prost::Message;
use tonic::{Code, Status};

use crate::wire::datanode as pb;

/// Why a datanode refused or failed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultCode {
    /// No result code was attached (a transport error, or a foreign server).
    Unspecified,
    /// The container is not on this datanode.
    ContainerNotFound,
    /// The container exists but holds no such block (or it is not committed).
    NoSuchBlock,
    /// The block exists with another replica index than the one asked for.
    ReplicaIndexMismatch,
    /// The requested range lies past the block's committed end, or outside the chunk.
    OutOfRange,
    /// The request is malformed.
    InvalidArgument,
    /// Local disk I/O failed on the datanode.
    IoException,
    /// Data did not match its checksum.
    ChecksumMismatch,
    /// A WriteChunk did not continue the block file.
    ChunkOffsetMismatch,
    /// The datanode is not serving (stopped, or an injected fault).
    Unavailable,
    /// A read length above the datanode's cap.
    LengthTooLarge,
    /// Anything else that went wrong inside the datanode.
    Internal,
    /// A WriteChunk to a block already closed by an eof PutBlock.
    BlockClosed,
    /// An EC reconstruction found fewer than d readable source indexes.
    InsufficientSources,
    /// With security on: the call's block token is missing, forged, expired,
    /// for another block, or lacks the access mode the call needs.
    BlockTokenVerificationFailed,
}

impl ResultCode {
    fn to_wire(self) -> pb::Result {
        match self {
            Self::Unspecified => pb::Result::Unspecified,
            Self::ContainerNotFound => pb::Result::ContainerNotFound,
            Self::NoSuchBlock => pb::Result::NoSuchBlock,
            Self::ReplicaIndexMismatch => pb::Result::ReplicaIndexMismatch,
            Self::OutOfRange => pb::Result::OutOfRange,
            Self::InvalidArgument => pb::Result::InvalidArgument,
            Self::IoException => pb::Result::IoException,
            Self::ChecksumMismatch => pb::Result::ChecksumMismatch,
            Self::ChunkOffsetMismatch => pb::Result::ChunkOffsetMismatch,
            Self::Unavailable => pb::Result::Unavailable,
            Self::LengthTooLarge => pb::Result::LengthTooLarge,
            Self::Internal => pb::Result::Internal,
            Self::BlockClosed => pb::Result::BlockClosed,
            Self::InsufficientSources => pb::Result::InsufficientSources,
            Self::BlockTokenVerificationFailed => pb::Result::BlockTokenVerificationFailed,
        }
    }

    fn from_wire(r: pb::Result) -> Self {
        match r {
            pb::Result::Unspecified => Self::Unspecified,
            pb::Result::ContainerNotFound => Self::ContainerNotFound,
            pb::Result::NoSuchBlock => Self::NoSuchBlock,
            pb::Result::ReplicaIndexMismatch => Self::ReplicaIndexMismatch,
            pb::Result::OutOfRange => Self::OutOfRange,
            pb::Result::InvalidArgument => Self::InvalidArgument,
            pb::Result::IoException => Self::IoException,
            pb::Result::ChecksumMismatch => Self::ChecksumMismatch,
            pb::Result::ChunkOffsetMismatch => Self::ChunkOffsetMismatch,
            pb::Result::Unavailable => Self::Unavailable,
            pb::Result::LengthTooLarge => Self::LengthTooLarge,
            pb::Result::Internal => Self::Internal,
            pb::Result::BlockClosed => Self::BlockClosed,
            pb::Result::InsufficientSources => Self::InsufficientSources,
            pb::Result::BlockTokenVerificationFailed => Self::BlockTokenVerificationFailed,
        }
    }

    /// The gRPC code a server uses for this result.
    #[must_use]
    pub fn grpc_code(self) -> Code {
        match self {
            Self::Unspecified | Self::Internal => Code::Internal,
            Self::ContainerNotFound | Self::NoSuchBlock => Code::NotFound,
            Self::ReplicaIndexMismatch | Self::ChunkOffsetMismatch | Self::BlockClosed => {
                Code::FailedPrecondition
            }
            Self::OutOfRange => Code::OutOfRange,
            Self::InvalidArgument | Self::LengthTooLarge => Code::InvalidArgument,
            Self::IoException => Code::DataLoss,
            Self::ChecksumMismatch => Code::DataLoss,
            Self::Unavailable => Code::Unavailable,
            Self::InsufficientSources => Code::FailedPrecondition,
            Self::BlockTokenVerificationFailed => Code::PermissionDenied,
        }
    }

    /// Stable upper-case name (as in Ozone's `Result` enum), used by CLIs and logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Unspecified => "UNSPECIFIED",
            Self::ContainerNotFound => "CONTAINER_NOT_FOUND",
            Self::NoSuchBlock => "NO_SUCH_BLOCK",
            Self::ReplicaIndexMismatch => "REPLICA_INDEX_MISMATCH",
            Self::OutOfRange => "OUT_OF_RANGE",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::IoException => "IO_EXCEPTION",
            Self::ChecksumMismatch => "CHECKSUM_MISMATCH",
            Self::ChunkOffsetMismatch => "CHUNK_OFFSET_MISMATCH",
            Self::Unavailable => "UNAVAILABLE",
            Self::LengthTooLarge => "LENGTH_TOO_LARGE",
            Self::Internal => "INTERNAL",
            Self::BlockClosed => "BLOCK_CLOSED",
            Self::InsufficientSources => "INSUFFICIENT_SOURCES",
            Self::BlockTokenVerificationFailed => "BLOCK_TOKEN_VERIFICATION_FAILED",
        }
    }

    /// Every code, for CLIs that accept a code by [`name`](Self::name).
    pub const ALL: [ResultCode; 15] = [
        Self::Unspecified,
        Self::ContainerNotFound,
        Self::NoSuchBlock,
        Self::ReplicaIndexMismatch,
        Self::OutOfRange,
        Self::InvalidArgument,
        Self::IoException,
        Self::ChecksumMismatch,
        Self::ChunkOffsetMismatch,
        Self::Unavailable,
        Self::LengthTooLarge,
        Self::Internal,
        Self::BlockClosed,
        Self::InsufficientSources,
        Self::BlockTokenVerificationFailed,
    ];

    /// Looks a code up by its [`name`](Self::name), case-insensitively.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for ResultCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds the status a datanode returns for a failed command: the gRPC code of
/// `result`, the message, and `result` encoded in the status details.
#[must_use]
pub fn status(result: ResultCode, message: impl Into<String>) -> Status {
    let detail = pb::ErrorDetail {
        result: result.to_wire() as i32,
    };
    Status::with_details(
        result.grpc_code(),
        message.into(),
        detail.encode_to_vec().into(),
    )
}

/// Reads the result code a datanode attached to `status`; a status without
/// one (a transport failure, say) maps from its gRPC code: `Unavailable`,
/// `DeadlineExceeded`-like codes are left as [`ResultCode::Unspecified`]
/// except `Unavailable`, which becomes [`ResultCode::Unavailable`].
#[must_use]
pub fn result_code(status: &Status) -> ResultCode {
    if !status.details().is_empty()
        && let Ok(detail) = pb::ErrorDetail::decode(status.details())
        && let Ok(r) = pb::Result::try_from(detail.result)
    {
        return ResultCode::from_wire(r);
    }
    match status.code() {
        Code::Unavailable => ResultCode::Unavailable,
        _ => ResultCode::Unspecified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_code_round_trips_through_status() {
        for code in ResultCode::ALL {
            let s = status(code, "boom");
            if code == ResultCode::Unspecified {
                assert_eq!(result_code(&s), ResultCode::Unspecified);
            } else {
                assert_eq!(result_code(&s), code, "{code}");
            }
            assert_eq!(s.code(), code.grpc_code());
            assert_eq!(ResultCode::from_name(code.name()), Some(code));
        }
    }

    #[test]
    fn bare_unavailable_status_maps_to_unavailable() {
        assert_eq!(
            result_code(&Status::unavailable("conn refused")),
            ResultCode::Unavailable
        );
        assert_eq!(result_code(&Status::internal("x")), ResultCode::Unspecified);
    }
}
