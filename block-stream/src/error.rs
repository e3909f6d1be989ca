//! The crate's error, and the one place that decides which errors mean "try
//! another location".

use std::time::Duration;

use proto_crate::{BlockId, ProtocolError, ResultCode};

use crate::RpcKind;

/// Result alias of this crate.
pub type Result<T, E = BlockStreamError> = std::result::Result<T, E>;

/// What went wrong talking to a datanode or reading a block.
///
/// Every variant names the datanode (its `HOST:PORT`) and, where there is one,
/// the block. [`BlockStreamError::is_location_failure`] says whether a reader
/// should fail over to another location.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockStreamError {
    /// The datanode answered with an error result code.
    #[error(
        "{kind} on {datanode}{} failed with {code}: {message}",
        for_block(block)
    )]
    Datanode {
        /// RPC that failed.
        kind: RpcKind,
        /// `HOST:PORT`.
        datanode: String,
        /// Block involved, if any.
        block: Option<BlockId>,
        /// Result code the datanode attached.
        code: ResultCode,
        /// Server message.
        message: String,
    },
    /// The connection failed or the datanode is down.
    #[error(
        "{kind} on {datanode}{}: datanode unavailable: {message}",
        for_block(block)
    )]
    Unavailable {
        /// RPC that failed.
        kind: RpcKind,
        /// `HOST:PORT`.
        datanode: String,
        /// Block involved, if any.
        block: Option<BlockId>,
        /// Transport message.
        message: String,
    },
    /// One attempt ran past its deadline.
    #[error("{kind} on {datanode}{} timed out after {after:?}", for_block(block))]
    Timeout {
        /// RPC that timed out.
        kind: RpcKind,
        /// `HOST:PORT`.
        datanode: String,
        /// Block involved, if any.
        block: Option<BlockId>,
        /// The deadline that passed.
        after: Duration,
    },
    /// Returned bytes did not match the chunk's checksums.
    #[error(
        "checksum mismatch reading block {block} from {datanode} at block offset {offset} \
         (window of {len} bytes): expected {expected:#010x}, computed {computed:#010x}"
    )]
    ChecksumMismatch {
        /// Block read.
        block: BlockId,
        /// `HOST:PORT`.
        datanode: String,
        /// Block-relative offset of the failing window.
        offset: u64,
        /// Window length, bytes.
        len: u64,
        /// Checksum recorded at write.
        expected: u32,
        /// Checksum of the bytes received.
        computed: u32,
    },
    /// The datanode answered with fewer (or more) bytes than asked for.
    #[error(
        "short read of block {block} from {datanode}: asked {expected} bytes at block offset \
         {offset}, got {got}"
    )]
    ShortRead {
        /// Block read.
        block: BlockId,
        /// `HOST:PORT`.
        datanode: String,
        /// Block-relative offset asked for.
        offset: u64,
        /// Bytes asked for.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// The block's committed data ends before the range the caller needs.
    #[error("block {block} on {datanode} holds {available} bytes but {needed} are needed")]
    BlockTooShort {
        /// Block read.
        block: BlockId,
        /// `HOST:PORT`.
        datanode: String,
        /// Committed bytes reported.
        available: u64,
        /// Bytes the caller's layout says it must hold.
        needed: u64,
    },
    /// PutBlock was acknowledged with another committed length than sent.
    #[error(
        "PutBlock of block {block} on {datanode} committed {committed} bytes, expected {expected}"
    )]
    CommitMismatch {
        /// Block committed.
        block: BlockId,
        /// `HOST:PORT`.
        datanode: String,
        /// Bytes the writer sent.
        expected: u64,
        /// Bytes the datanode says it committed.
        committed: u64,
    },
    /// A message from the datanode violated the protocol.
    #[error("bad message from {datanode}: {source}")]
    Protocol {
        /// `HOST:PORT`.
        datanode: String,
        /// What was wrong.
        #[source]
        source: ProtocolError,
    },
    /// The caller asked for something impossible (range past the block, bad address...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The block has no locations left to try.
    #[error("block {block}: no location left to try; last error: {last}")]
    NoLocations {
        /// Block read.
        block: BlockId,
        /// Error of the last location tried.
        last: Box<BlockStreamError>,
    },
}

impl BlockStreamError {
    /// Whether this error means "this location failed; another replica (or
    /// reconstruction) may succeed": unavailable, timed out, not found, index
    /// mismatch, checksum mismatch, short data, I/O errors on the datanode.
    /// Caller errors (bad argument, out of range on a valid layout) are not.
    #[must_use]
    pub fn is_location_failure(&self) -> bool {
        match self {
            Self::Unavailable { .. }
            | Self::Timeout { .. }
            | Self::ChecksumMismatch { .. }
            | Self::ShortRead { .. }
            | Self::BlockTooShort { .. }
            | Self::CommitMismatch { .. }
            | Self::Protocol { .. }
            | Self::NoLocations { .. } => true,
            // A refused block token says nothing about the location: every
            // replica would refuse it the same way.
            Self::Datanode { code, .. } => !matches!(
                code,
                ResultCode::InvalidArgument
                    | ResultCode::LengthTooLarge
                    | ResultCode::BlockTokenVerificationFailed
            ),
            Self::InvalidArgument(_) => false,
        }
    }

    /// Whether the same call may succeed later without anything being
    /// repaired: the datanode was unavailable or slow (a restart, a
    /// network blip). Narrower than
    /// [`is_location_failure`](Self::is_location_failure): a checksum
    /// mismatch or a short block fails a location for good.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Timeout { .. } => true,
            Self::Datanode { code, .. } => matches!(code, ResultCode::Unavailable),
            Self::NoLocations { last, .. } => last.is_transient(),
            _ => false,
        }
    }

    /// Whether a datanode refused the call's block token.
    #[must_use]
    pub fn is_token_failure(&self) -> bool {
        match self {
            Self::Datanode { code, .. } => *code == ResultCode::BlockTokenVerificationFailed,
            Self::NoLocations { last, .. } => last.is_token_failure(),
            _ => false,
        }
    }

    /// The datanode (`HOST:PORT`) this error is about, if any.
    #[must_use]
    pub fn datanode(&self) -> Option<&str> {
        match self {
            Self::Datanode { datanode, .. }
            | Self::Unavailable { datanode, .. }
            | Self::Timeout { datanode, .. }
            | Self::ChecksumMismatch { datanode, .. }
            | Self::ShortRead { datanode, .. }
            | Self::BlockTooShort { datanode, .. }
            | Self::CommitMismatch { datanode, .. }
            | Self::Protocol { datanode, .. } => Some(datanode),
            Self::NoLocations { last, .. } => last.datanode(),
            Self::InvalidArgument(_) => None,
        }
    }
}

/// ` for block B` when a call names one, else nothing.
fn for_block(block: &Option<BlockId>) -> String {
    block.map_or_else(String::new, |b| format!(" for block {b}"))
}
