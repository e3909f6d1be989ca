//! [`ReplicatedKeyOutputStream`]: writes a key as replicated blocks.
//!
//! Models Ozone's `KeyOutputStream` over Ratis/standalone pipelines, reduced:
//! the caller's bytes are cut into chunks (`replicated_chunk_size`, default
//! 4 MiB); each chunk goes to every replica of the current block in parallel,
//! then a syncing PutBlock (`BlockCommit::Sync`) commits it durably on all of
//! them, as a Ratis pipeline's log makes each write durable on the replicas
//! before acknowledging it. A block holds at most the
//! bucket's block size. When any replica fails, its datanode is excluded,
//! the block is closed at its last acknowledged length, a new block is
//! allocated and the chunk is rewritten there.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use block_stream::BlockOutputStream;
use bytes::Bytes;
use proto_crate::{BlockCommit, BlockGroup, DatanodeId, KeyInfo};

use crate::client::ClientShared;
use crate::lease::LeaseKeeper;
use crate::om_client::{Commit, Committed};
use crate::write_state::WriteState;
use crate::{ClientError, Result};

#[derive(Debug)]
struct OpenBlock {
    group: BlockGroup,
    stream: BlockOutputStream,
}

/// Writer of one replicated key.
#[derive(Debug)]
pub struct ReplicatedKeyOutputStream {
    /// Keeps the om session alive while the writer lives.
    _lease: LeaseKeeper,
    shared: Arc<ClientShared>,
    /// Failure, cancellation and the om session.
    state: WriteState,
    block_size: u64,
    chunk_size: usize,
    buffer: Vec<u8>,
    block: Option<OpenBlock>,
    finished: Vec<BlockGroup>,
    excluded: BTreeSet<DatanodeId>,
    acked: u64,
    chunks_written: u64,
}

impl ReplicatedKeyOutputStream {
    pub(crate) fn new(
        shared: Arc<ClientShared>,
        state: WriteState,
        block_size: u64,
        lease: LeaseKeeper,
    ) -> Result<Self> {
        if block_size == 0 {
            return Err(ClientError::InvalidArgument(
                "block size must be positive".into(),
            ));
        }
        let chunk_size = shared
            .read
            .config
            .replicated_chunk_size
            .clamp(1, 32 * 1024 * 1024)
            .min(usize::try_from(block_size).unwrap_or(usize::MAX));
        Ok(Self {
            shared,
            state,
            block_size,
            chunk_size,
            buffer: Vec::with_capacity(chunk_size),
            block: None,
            finished: Vec::new(),
            excluded: BTreeSet::new(),
            acked: 0,
            chunks_written: 0,
            _lease: lease,
        })
    }

    /// Data bytes accepted so far.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.acked + self.buffer.len() as u64
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block being written, with its replicas; `None` between blocks.
    #[must_use]
    pub fn current_block(&self) -> Option<BlockGroup> {
        self.block.as_ref().map(|b| b.group.clone())
    }

    /// Appends `buf`; every full chunk is written to all replicas and
    /// committed before this returns.
    ///
    /// # Errors
    /// A chunk that could not be written after `ec_write_retries` rewrites.
    /// [`ClientError::WriteCancelled`] after an earlier call was cancelled.
    pub async fn write(&mut self, buf: &[u8]) -> Result<()> {
        self.state.begin()?;
        let result = self.buffer_and_flush(buf).await;
        self.state.end(result)
    }

    async fn buffer_and_flush(&mut self, mut buf: &[u8]) -> Result<()> {
        while !buf.is_empty() {
            let room = self.chunk_size - self.buffer.len();
            // Room left in the current block for bytes not yet buffered.
            let block_used =
                self.block.as_ref().map_or(0, |b| b.stream.written()) + self.buffer.len() as u64;
            let block_room = self.block_size.saturating_sub(block_used);
            let take = room
                .min(buf.len())
                .min(usize::try_from(block_room).unwrap_or(usize::MAX));
            self.buffer.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.buffer.len() == self.chunk_size || take as u64 == block_room {
                self.flush_chunk().await?;
            }
        }
        Ok(())
    }

    /// Writes the buffered bytes as one chunk now (Ozone's `hsync`: the
    /// bytes are committed and durable on every replica when this returns;
    /// every chunk's PutBlock syncs).
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn hsync(&mut self) -> Result<()> {
        self.state.begin()?;
        let result = self.flush_chunk().await;
        self.state.end(result)
    }

    async fn flush_chunk(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(self.chunk_size),
        ));
        self.write_chunk(data).await
    }

    async fn write_chunk(&mut self, data: Bytes) -> Result<()> {
        let retries = self.shared.read.config.ec_write_retries;
        let mut attempts = 0u32;
        let block_size = self.block_size;
        let mut last_cause: Option<String> = None;
        loop {
            let block = match self.open_block().await {
                Ok(b) => b,
                Err(e) if attempts > 0 => {
                    return Err(ClientError::WriteFailed {
                        stripe: self.chunks_written,
                        attempts,
                        excluded: self.excluded.iter().cloned().collect(),
                        previous: last_cause,
                        cause: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            };
            let result = async {
                block.stream.write_chunk(data.clone()).await?;
                block
                    .stream
                    .put_block(&BTreeMap::new(), BlockCommit::Sync)
                    .await
            }
            .await;
            let block_full = block.stream.written() >= block_size;
            let failed_uuid = result.as_ref().err().and_then(|e| {
                let addr = e.datanode()?;
                block
                    .group
                    .pipeline
                    .locations
                    .iter()
                    .find(|l| l.datanode.address == addr)
                    .map(|l| l.datanode.uuid.clone())
            });
            match result {
                Ok(()) => {
                    self.acked += data.len() as u64;
                    self.chunks_written += 1;
                    if block_full {
                        self.close_block(true).await;
                    }
                    return Ok(());
                }
                Err(e) => {
                    attempts += 1;
                    if let Some(uuid) = failed_uuid {
                        self.excluded.insert(uuid);
                    }
                    tracing::debug!(error = %e, "replicated chunk write failed; rewriting on a new block");
                    self.close_block(false).await;
                    if attempts > retries {
                        return Err(ClientError::WriteFailed {
                            stripe: self.chunks_written,
                            attempts,
                            excluded: self.excluded.iter().cloned().collect(),
                            previous: None,
                            cause: Box::new(e.into()),
                        });
                    }
                    last_cause = Some(e.to_string());
                }
            }
        }
    }

    async fn open_block(&mut self) -> Result<&mut OpenBlock> {
        if self.block.is_none() {
            let group = self
                .shared
                .om
                .allocate_block_group(
                    self.state.session_id(),
                    self.excluded.iter().cloned().collect(),
                )
                .await?;
            let cfg = self.shared.read.xceivers.config();
            let token =
                crate::block_tokens::for_writer(&self.shared.om, self.state.session_id(), &group);
            let clients = group
                .pipeline
                .datanodes()
                .into_iter()
                .map(|d| {
                    self.shared
                        .read
                        .xceivers
                        .client(&d.address)
                        .map(|c| c.with_token(token.clone()))
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let stream = BlockOutputStream::new(
                group.id(),
                clients,
                cfg.checksum_type,
                cfg.bytes_per_checksum,
            )?;
            self.block = Some(OpenBlock { group, stream });
        }
        self.block
            .as_mut()
            .ok_or_else(|| ClientError::Internal("no open block".into()))
    }

    /// Ends the open block at its committed length; `eof` sends a closing
    /// PutBlock first (a failure there loses nothing: every byte is committed).
    async fn close_block(&mut self, eof: bool) {
        if let Some(mut b) = self.block.take() {
            // What the last successful PutBlock committed: a chunk whose
            // PutBlock failed is not part of this block (it is rewritten).
            let len = b.stream.committed();
            if eof
                && len > 0
                && len == b.stream.written()
                && let Err(e) = b
                    .stream
                    .put_block(&BTreeMap::new(), BlockCommit::Close)
                    .await
            {
                tracing::warn!(block = %b.group.id(), error = %e, "closing PutBlock failed");
            }
            if len > 0 {
                self.finished.push(BlockGroup {
                    length: len,
                    ..b.group
                });
            }
        }
    }

    /// Writes the buffered tail, closes the last block and commits the key.
    ///
    /// # Errors
    /// A failed write (now or earlier): nothing is committed and the session
    /// is aborted.
    pub async fn close(self) -> Result<KeyInfo> {
        self.finish(Commit::Key(BTreeMap::new(), None))
            .await?
            .into_key()
    }

    /// Gives the key up: the session is aborted now, waiting for the om.
    pub(crate) async fn abort(mut self) {
        self.state.abort().await;
    }

    /// Like [`close`](Self::close), ending the session as `commit` says.
    pub(crate) async fn finish(mut self, commit: Commit) -> Result<Committed> {
        let result = async {
            self.state.check()?;
            let flushed = self.flush_chunk().await;
            self.state.end(flushed)?;
            self.close_block(true).await;
            let groups = std::mem::take(&mut self.finished);
            self.shared
                .om
                .commit(self.state.session_id(), groups, self.acked, commit)
                .await
        }
        .await;
        self.state.settle(&result).await;
        result
    }
}
