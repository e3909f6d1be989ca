//! [`BlockInputStream`]: reads one block that lives on one or more datanodes.
//!
//! Models Ozone's `BlockInputStream`, with the positioned read made stateless:
//! the committed [`BlockData`] is fetched once (lazy GetBlock behind a
//! once-cell) and every `read_at` finds its chunks by binary search and issues
//! ReadChunk RPCs, holding no lock across I/O. The sequential cursor belongs to
//! `&mut self` calls only and is never touched by `read_at`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proto_crate::{BlockData, BlockId};
use tokio::sync::OnceCell;

use crate::{BlockStreamError, Result, RetryPolicy, XceiverClient};

/// Largest range one ReadChunk asks for before widening to checksum windows:
/// half the datanode's 32 MiB cap leaves room for any window (at most
/// [`MAX_BYTES_PER_CHECKSUM`](crate::config::MAX_BYTES_PER_CHECKSUM)) on each side.
pub const MAX_READ_PIECE: u64 = 16 * 1024 * 1024;

/// One block on 1..n datanodes (replicas of the same bytes: the replicas of a
/// replicated block, or an EC internal block and its spare copies).
///
/// `length` is the number of bytes the caller's metadata says the block holds
/// (the om's block length, or the EC layout's internal block length); a
/// datanode that reports fewer committed bytes is a failed location.
#[derive(Debug)]
pub struct BlockInputStream {
    block_id: BlockId,
    length: u64,
    locations: Vec<XceiverClient>,
    /// Committed block data, from the first location that answered GetBlock.
    block_data: OnceCell<Arc<BlockData>>,
    /// Location to try first (a hint moved past locations that failed).
    preferred: AtomicUsize,
    /// Retries of one location after it was unavailable.
    retry: RetryPolicy,
    /// Sequential cursor, block-relative bytes.
    cursor: u64,
}

impl BlockInputStream {
    /// A stream over `block_id` of `length` bytes at `locations` (in preference
    /// order), retrying an unavailable location as `retry` says before moving
    /// on. No RPC is made until the first read.
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`] when `locations` is empty.
    pub fn new(
        block_id: BlockId,
        length: u64,
        locations: Vec<XceiverClient>,
        retry: RetryPolicy,
    ) -> Result<Self> {
        if locations.is_empty() {
            return Err(BlockStreamError::InvalidArgument(format!(
                "block {block_id} has no locations"
            )));
        }
        Ok(Self {
            block_id,
            length,
            locations,
            block_data: OnceCell::new(),
            preferred: AtomicUsize::new(0),
            retry,
            cursor: 0,
        })
    }

    /// The block read.
    #[must_use]
    pub fn block_id(&self) -> BlockId {
        self.block_id
    }

    /// Bytes in the block (as the caller's metadata says).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether the block holds no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// `HOST:PORT` of every location, in preference order.
    pub fn locations(&self) -> impl Iterator<Item = &str> {
        self.locations.iter().map(XceiverClient::address)
    }

    /// Whether GetBlock has already succeeded (the stream is warm).
    #[must_use]
    pub fn is_initialized(&self) -> bool {
        self.block_data.initialized()
    }

    /// The committed block data, fetched with one GetBlock on first call
    /// (trying each location in turn) and cached for the stream's life.
    ///
    /// # Errors
    /// The last location's error when every location failed GetBlock;
    /// [`BlockStreamError::BlockTooShort`] when a location holds fewer bytes
    /// than `len()` (that location is skipped).
    pub async fn block_data(&self) -> Result<Arc<BlockData>> {
        self.block_data
            .get_or_try_init(|| async {
                let mut last = None;
                for i in self.order() {
                    let loc = &self.locations[i];
                    match self.with_retries(|| self.fetch_block_data(loc)).await {
                        Ok(d) => {
                            self.preferred.store(i, Ordering::Relaxed);
                            return Ok(Arc::new(d));
                        }
                        Err(e) if e.is_location_failure() => last = Some(e),
                        Err(e) => return Err(e),
                    }
                }
                Err(self.no_locations(last))
            })
            .await
            .cloned()
    }

    async fn fetch_block_data(&self, loc: &XceiverClient) -> Result<BlockData> {
        let d = loc.get_block(self.block_id).await?;
        if d.size < self.length {
            return Err(BlockStreamError::BlockTooShort {
                block: self.block_id,
                datanode: loc.address().to_string(),
                available: d.size,
                needed: self.length,
            });
        }
        d.validate_chunks()
            .map_err(|source| BlockStreamError::Protocol {
                datanode: loc.address().to_string(),
                source,
            })?;
        Ok(d)
    }

    /// Only an unavailable datanode is worth retrying in place: deadlines,
    /// checksum mismatches and short answers would repeat, so they fail the
    /// location at once (a short answer never turns into a retry loop).
    fn transient(e: &BlockStreamError) -> bool {
        matches!(e, BlockStreamError::Unavailable { .. })
    }

    async fn with_retries<T, F, Fut>(&self, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            match f().await {
                Err(e) if Self::transient(&e) && attempt < self.retry.retries => {
                    attempt += 1;
                    if !self.retry.backoff.is_zero() {
                        tokio::time::sleep(self.retry.backoff).await;
                    }
                }
                other => return other,
            }
        }
    }

    fn order(&self) -> impl Iterator<Item = usize> + use<> {
        let n = self.locations.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        (0..n).map(move |i| (first + i) % n)
    }

    fn no_locations(&self, last: Option<BlockStreamError>) -> BlockStreamError {
        match last {
            Some(e) if self.locations.len() == 1 => e,
            Some(e) => BlockStreamError::NoLocations {
                block: self.block_id,
                last: Box::new(e),
            },
            None => BlockStreamError::InvalidArgument(format!(
                "block {} has no locations",
                self.block_id
            )),
        }
    }

    /// Positioned read: fills `buf` from block-relative `pos`, up to the end
    /// of the block. Returns the bytes read (0 at or past the end). Stateless:
    /// the cursor does not move and concurrent calls do not wait on each other.
    ///
    /// A location that fails (unavailable, deadline, checksum mismatch, short
    /// answer, not found) is skipped for this call; the next location is tried.
    /// The bytes in `buf` are only meaningful when `Ok` is returned.
    ///
    /// # Errors
    /// The last location's error once every location failed; caller errors at once.
    pub async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        if pos >= self.length || buf.is_empty() {
            return Ok(0);
        }
        let n = usize::try_from((self.length - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let buf = &mut buf[..n];
        let data = self.block_data().await?;
        let mut last = None;
        for i in self.order() {
            let loc = &self.locations[i];
            let mut attempt = 0;
            let result = loop {
                match self.read_from(loc, &data, pos, buf).await {
                    Err(e) if Self::transient(&e) && attempt < self.retry.retries => {
                        attempt += 1;
                        if !self.retry.backoff.is_zero() {
                            tokio::time::sleep(self.retry.backoff).await;
                        }
                    }
                    other => break other,
                }
            };
            match result {
                Ok(()) => return Ok(n),
                Err(e) if e.is_location_failure() => {
                    tracing::debug!(block = %self.block_id, datanode = self.locations[i].address(), error = %e, "location failed, trying next");
                    if self.locations.len() > 1 {
                        self.preferred
                            .store((i + 1) % self.locations.len(), Ordering::Relaxed);
                    }
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(self.no_locations(last))
    }

    /// Reads `buf.len()` bytes at `pos` (all inside the committed block) from
    /// one location, chunk by chunk, verifying checksums unless the
    /// location's client was configured not to.
    async fn read_from(
        &self,
        loc: &XceiverClient,
        data: &BlockData,
        pos: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let end = pos + buf.len() as u64;
        // First chunk whose end is past `pos`.
        let mut idx = data.chunks.partition_point(|c| c.end() <= pos);
        let mut at = pos;
        while at < end {
            let Some(chunk) = data.chunks.get(idx) else {
                return Err(BlockStreamError::BlockTooShort {
                    block: self.block_id,
                    datanode: loc.address().to_string(),
                    available: data.size,
                    needed: end,
                });
            };
            // At most MAX_READ_PIECE per ReadChunk, so that a read widened
            // to checksum windows stays under the datanode's 32 MiB cap.
            let piece_end = end.min(chunk.end()).min(at + MAX_READ_PIECE);
            let len = piece_end - at;
            // Verified, only the piece's bytes still cross the network (the
            // datanode adds the checksums of the window bytes around them);
            // unverified, it is fetched as is (Ozone's reader with
            // verify.checksum off).
            let bytes = if loc.verifies_checksum() {
                loc.read_chunk_verified(self.block_id, chunk, at, len)
                    .await?
            } else {
                loc.read_chunk(self.block_id, chunk, at, len).await?
            };
            let dst_from = usize::try_from(at - pos).unwrap_or(usize::MAX);
            let dst_to = usize::try_from(piece_end - pos).unwrap_or(usize::MAX);
            buf[dst_from..dst_to].copy_from_slice(&bytes);
            at = piece_end;
            // A chunk longer than one read piece takes several pieces: move
            // to the next chunk only once this one is read to its end.
            if piece_end >= chunk.end() {
                idx += 1;
            }
        }
        Ok(())
    }

    /// Sequential read at the cursor; advances it by the bytes read (0 at the end).
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at).
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.read_at(self.cursor, buf).await?;
        self.cursor += n as u64;
        Ok(n)
    }

    /// Moves the sequential cursor to block-relative `pos` (may be past the end;
    /// reads there return 0). No I/O.
    pub fn seek(&mut self, pos: u64) {
        self.cursor = pos;
    }

    /// The sequential cursor, block-relative bytes.
    #[must_use]
    pub fn position(&self) -> u64 {
        self.cursor
    }
}
