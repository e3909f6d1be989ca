//! The datanode's error, and its mapping to wire result codes.

use proto_crate::{BlockId, ReplicaIndex, ResultCode};

/// Why a container command failed on this datanode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatanodeError {
    /// The container does not exist here.
    #[error("container {container_id} not found")]
    ContainerNotFound {
        /// Container asked for.
        container_id: u64,
    },
    /// The container exists but has no committed block with this id.
    #[error("block {block} not found")]
    NoSuchBlock {
        /// Block asked for.
        block: BlockId,
    },
    /// The block exists with another replica index.
    #[error(
        "block {block}: replica index {} asked for, but this datanode holds index {} (0: replicated)",
        ReplicaIndex::to_wire(*.asked),
        ReplicaIndex::to_wire(*.stored)
    )]
    ReplicaIndexMismatch {
        /// Block asked for.
        block: BlockId,
        /// Index in the request (`None`: a replicated block).
        asked: Option<ReplicaIndex>,
        /// Index stored here (`None`: a replicated block).
        stored: Option<ReplicaIndex>,
    },
    /// A read outside the committed block or outside the chunk named.
    #[error("block {block}: range {offset}+{len} is outside {what} ({start}..{end})")]
    OutOfRange {
        /// Block read.
        block: BlockId,
        /// Requested block-relative offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// "the committed block" or "the chunk".
        what: &'static str,
        /// Start of the allowed range.
        start: u64,
        /// End of the allowed range.
        end: u64,
    },
    /// A read longer than the per-call cap.
    #[error("read of {len} bytes exceeds the {cap}-byte cap")]
    LengthTooLarge {
        /// Bytes asked for.
        len: u64,
        /// The cap.
        cap: u64,
    },
    /// A WriteChunk that does not continue the block.
    #[error(
        "block {block}: chunk at offset {offset} does not continue the block (file holds {file_len} bytes, {committed} committed)"
    )]
    ChunkOffsetMismatch {
        /// Block written.
        block: BlockId,
        /// Chunk offset sent.
        offset: u64,
        /// Bytes in the block file.
        file_len: u64,
        /// Committed bytes (cannot be overwritten).
        committed: u64,
    },
    /// A WriteChunk to a block closed by an eof PutBlock.
    #[error("block {block} is closed")]
    BlockClosed {
        /// Block written.
        block: BlockId,
    },
    /// A write to a block that was deleted (its key was deleted, overwritten
    /// or its write abandoned): the block cannot come back.
    #[error("block {block} was deleted")]
    BlockDeleted {
        /// Block written.
        block: BlockId,
    },
    /// An earlier fsync of the block's file failed: the kernel may have
    /// dropped bytes it could not write, so the block takes no more writes
    /// or commits here until a restart rolls it back to its last durable
    /// record (the "fsyncgate" rule: a failed fsync is never retried over).
    #[error("block {block}: an earlier sync of its file failed; it takes no more writes")]
    SyncFailed {
        /// Block written.
        block: BlockId,
    },
    /// A malformed request.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Local disk I/O failed.
    #[error("I/O error {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or datanode) owns the data dir; the message names it.
    #[error("{message}")]
    DataDirInUse {
        /// Names the directory and its holder.
        message: String,
        /// The holder is this process (an earlier incarnation still closing).
        this_process: bool,
    },
    /// The metadata database failed (redb's error, typed).
    #[error("metadata database: {0}")]
    Db(#[from] redb::Error),
    /// A stored block record does not decode (the database is corrupt or
    /// was written by an incompatible version).
    #[error("block record {key:?} is corrupt: {source}")]
    CorruptRecord {
        /// (container id, local id) of the record.
        key: (u64, u64),
        /// The decoding failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl DatanodeError {
    /// The wire result code of this error.
    #[must_use]
    pub fn result_code(&self) -> ResultCode {
        match self {
            Self::ContainerNotFound { .. } => ResultCode::ContainerNotFound,
            Self::NoSuchBlock { .. } => ResultCode::NoSuchBlock,
            Self::ReplicaIndexMismatch { .. } => ResultCode::ReplicaIndexMismatch,
            Self::OutOfRange { .. } => ResultCode::OutOfRange,
            Self::LengthTooLarge { .. } => ResultCode::LengthTooLarge,
            Self::ChunkOffsetMismatch { .. } => ResultCode::ChunkOffsetMismatch,
            Self::BlockClosed { .. } => ResultCode::BlockClosed,
            Self::BlockDeleted { .. } => ResultCode::NoSuchBlock,
            Self::InvalidArgument(_) => ResultCode::InvalidArgument,
            Self::Io { .. } | Self::SyncFailed { .. } => ResultCode::IoException,
            Self::DataDirInUse { .. } | Self::Db(_) | Self::CorruptRecord { .. } => {
                ResultCode::Internal
            }
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<DatanodeError> for tonic::Status {
    fn from(e: DatanodeError) -> Self {
        proto_crate::status(e.result_code(), e.to_string())
    }
}

proto_crate::redb_error_conversions!(DatanodeError, Db);
