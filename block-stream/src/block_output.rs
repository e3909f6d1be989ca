//! [`BlockOutputStream`]: writes one block to each of its datanodes.
//!
//! Models Ozone's `BlockOutputStream`: each chunk goes out as a WriteChunk with
//! its checksums to every location at once; PutBlock then commits the
//! cumulative chunk list (and metadata such as `blockGroupLength`) on every
//! location, as a [`BlockCommit`] says (published, synced, or closed). An EC
//! writer drives one of these per replica index.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::future::try_join_all;
use proto_crate::{BlockCommit, BlockData, BlockId, ChecksumType, ChunkInfo};

use crate::{BlockStreamError, Result, WriteOrigin, XceiverClient, checksum};

/// Writer of one block on 1..n datanodes (n = replication factor for replicated
/// blocks, 1 for an EC internal block).
#[derive(Debug)]
pub struct BlockOutputStream {
    block_id: BlockId,
    locations: Vec<XceiverClient>,
    checksum_type: ChecksumType,
    bytes_per_checksum: u32,
    chunks: Vec<ChunkInfo>,
    written: u64,
    committed: u64,
    origin: WriteOrigin,
}

impl BlockOutputStream {
    /// A writer of `block_id` to every client in `locations`, checksumming each
    /// chunk with `checksum_type` per `bytes_per_checksum` bytes.
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`] when `locations` is empty.
    pub fn new(
        block_id: BlockId,
        locations: Vec<XceiverClient>,
        checksum_type: ChecksumType,
        bytes_per_checksum: u32,
    ) -> Result<Self> {
        if locations.is_empty() {
            return Err(BlockStreamError::InvalidArgument(format!(
                "block {block_id} has no locations to write to"
            )));
        }
        Ok(Self {
            block_id,
            locations,
            checksum_type,
            bytes_per_checksum,
            chunks: Vec::new(),
            written: 0,
            committed: 0,
            origin: WriteOrigin::Client,
        })
    }

    /// The same writer, writing on behalf of `origin` (default [`WriteOrigin::Client`]).
    #[must_use]
    pub fn with_origin(mut self, origin: WriteOrigin) -> Self {
        self.origin = origin;
        self
    }

    /// The block written.
    #[must_use]
    pub fn block_id(&self) -> BlockId {
        self.block_id
    }

    /// Bytes every location acknowledged with WriteChunk so far (not all of
    /// them are necessarily committed: see [`committed`](Self::committed)).
    #[must_use]
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes the last successful PutBlock committed on every location: what a
    /// reader of this block may rely on.
    #[must_use]
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Chunks acknowledged so far, in offset order.
    #[must_use]
    pub fn chunks(&self) -> &[ChunkInfo] {
        &self.chunks
    }

    /// `HOST:PORT` of every location.
    pub fn locations(&self) -> impl Iterator<Item = &str> {
        self.locations.iter().map(XceiverClient::address)
    }

    /// Sends `data` as the block's next chunk to every location in parallel and
    /// waits for all of them. An empty `data` is a no-op.
    ///
    /// # Errors
    /// The first location's failure; the chunk is then not recorded and the
    /// block's state on the datanodes is unspecified past `written()`.
    pub async fn write_chunk(&mut self, data: Bytes) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let chunk = ChunkInfo {
            name: format!("{}_chunk_{}", self.block_id.local_id, self.chunks.len() + 1),
            offset: self.written,
            len: data.len() as u64,
            checksum: checksum::compute(self.checksum_type, self.bytes_per_checksum, &data),
        };
        try_join_all(
            self.locations.iter().map(|l| {
                l.write_chunk_from(self.origin, self.block_id, chunk.clone(), data.clone())
            }),
        )
        .await?;
        self.written += chunk.len;
        self.chunks.push(chunk);
        Ok(())
    }

    /// Commits the chunks written so far with `metadata` on every location in
    /// parallel, as `commit` says (visible to reads when it returns; durable
    /// too unless [`BlockCommit::Flush`]); on success
    /// [`committed`](Self::committed) becomes [`written`](Self::written).
    /// [`BlockCommit::Close`] is the block's last PutBlock.
    ///
    /// # Errors
    /// The first location's failure; `committed` is then unchanged.
    pub async fn put_block(
        &mut self,
        metadata: &BTreeMap<String, String>,
        commit: BlockCommit,
    ) -> Result<()> {
        let chunks = self.chunks.clone();
        self.commit_chunks(chunks, self.written, metadata, commit)
            .await
    }

    /// Closes the block durably at `len` bytes: a [`BlockCommit::Close`] of
    /// the chunks that end at or before `len`. What a writer giving up on the
    /// block after a failed chunk does, so that its acknowledged prefix is
    /// durable and the unacknowledged tail is dropped on the datanodes (which
    /// accept a close below a length only published by
    /// [`BlockCommit::Flush`], never below a durable one).
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`] when `len` is past
    /// [`written`](Self::written) or inside a chunk; the first location's
    /// failure.
    pub async fn close_at(&mut self, len: u64, metadata: &BTreeMap<String, String>) -> Result<()> {
        let chunks: Vec<ChunkInfo> = self
            .chunks
            .iter()
            .take_while(|c| c.end() <= len)
            .cloned()
            .collect();
        if len > self.written || chunks.last().map_or(0, ChunkInfo::end) != len {
            return Err(BlockStreamError::InvalidArgument(format!(
                "block {}: cannot close at {len} bytes ({} written, chunks end at {:?})",
                self.block_id,
                self.written,
                self.chunks.iter().map(ChunkInfo::end).collect::<Vec<_>>()
            )));
        }
        self.commit_chunks(chunks, len, metadata, BlockCommit::Close)
            .await
    }

    async fn commit_chunks(
        &mut self,
        chunks: Vec<ChunkInfo>,
        size: u64,
        metadata: &BTreeMap<String, String>,
        commit: BlockCommit,
    ) -> Result<()> {
        let data = BlockData {
            block_id: self.block_id,
            chunks,
            size,
            metadata: metadata.clone(),
        };
        let committed = try_join_all(
            self.locations
                .iter()
                .map(|l| l.put_block_from(self.origin, data.clone(), commit)),
        )
        .await?;
        for (loc, len) in self.locations.iter().zip(committed) {
            if len != size {
                return Err(BlockStreamError::CommitMismatch {
                    block: self.block_id,
                    datanode: loc.address().to_string(),
                    expected: size,
                    committed: len,
                });
            }
        }
        self.committed = size;
        Ok(())
    }
}
