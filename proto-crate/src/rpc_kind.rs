//! [`RpcKind`]: the datanode RPCs, one list for the client's counters
//! (`block-stream`), the datanode's counters and fault injection.

use std::fmt;

/// Kind of a datanode RPC (the `DatanodeService` methods), as counted on
/// both sides of the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RpcKind {
    /// GetBlock.
    GetBlock,
    /// ReadChunk.
    ReadChunk,
    /// WriteChunk.
    WriteChunk,
    /// PutBlock.
    PutBlock,
    /// ListBlock.
    ListBlock,
    /// GetCommittedBlockLength.
    GetCommittedBlockLength,
    /// CreateContainer.
    CreateContainer,
    /// DeleteBlocks (sent by the om's block deleting service).
    DeleteBlocks,
    /// ReconstructEcGroup (sent by the om's repair).
    ReconstructEcGroup,
}

impl RpcKind {
    /// Every kind, in a fixed order: the index of a counter array.
    pub const ALL: [RpcKind; 9] = [
        Self::GetBlock,
        Self::ReadChunk,
        Self::WriteChunk,
        Self::PutBlock,
        Self::ListBlock,
        Self::GetCommittedBlockLength,
        Self::CreateContainer,
        Self::DeleteBlocks,
        Self::ReconstructEcGroup,
    ];

    /// Position in [`ALL`](Self::ALL).
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The RPC's name as in the protocol (`GetBlock`, `ReadChunk`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::GetBlock => "GetBlock",
            Self::ReadChunk => "ReadChunk",
            Self::WriteChunk => "WriteChunk",
            Self::PutBlock => "PutBlock",
            Self::ListBlock => "ListBlock",
            Self::GetCommittedBlockLength => "GetCommittedBlockLength",
            Self::CreateContainer => "CreateContainer",
            Self::DeleteBlocks => "DeleteBlocks",
            Self::ReconstructEcGroup => "ReconstructEcGroup",
        }
    }
}

impl fmt::Display for RpcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
