//! [`ECKeyOutputStream`]: writes a key as erasure-coded block groups.
//!
//! Models Ozone's `ECKeyOutputStream`. The caller's bytes fill the cells of a
//! stripe (d cells of `cell_size` bytes). When the stripe is full (or, at
//! close, partial) the parity cells are computed — their length is that of
//! the stripe's first cell, shorter data cells being zero-padded for encoding
//! only — and the stripe is flushed: every non-empty data cell and every
//! parity cell goes out as a WriteChunk to its replica index's datanode, all
//! at once; then PutBlock commits the cumulative chunk list with
//! `blockGroupLength` on all d+p indexes (indexes with no data get an empty
//! block record). A group holds d × block size data bytes; then the om
//! allocates the next one. The key becomes visible only at [`close`].
//!
//! This writer flushes one stripe at a time (encode, then write); overlapping
//! the two is the pipelined writer's job.
//!
//! [`close`]: ECKeyOutputStream::close

use std::collections::BTreeMap;
use std::sync::Arc;

use block_stream::BlockOutputStream;
use bytes::Bytes;
use ec_codec::{EcReplicationConfig, ErasureCoder};
use futures::future::try_join_all;
use proto_crate::{BLOCK_GROUP_LENGTH_KEY, BlockGroup, KeyInfo};

use crate::client::ClientShared;
use crate::{ClientError, Result};

/// The block group being written.
#[derive(Debug)]
struct GroupWriter {
    group: BlockGroup,
    /// One stream per replica index 1..=d+p.
    streams: Vec<BlockOutputStream>,
    /// Data bytes acknowledged (committed by PutBlock) in this group.
    length: u64,
    /// Whether the last PutBlock carried eof.
    closed: bool,
}

/// Writer of one EC key. Not `Sync`: one writer per key, driven by one task.
#[derive(Debug)]
pub struct ECKeyOutputStream {
    shared: Arc<ClientShared>,
    bucket: String,
    key: String,
    session_id: u64,
    ec: EcReplicationConfig,
    coder: ErasureCoder,
    /// Data bytes one group holds: d × block size.
    group_capacity: u64,
    /// The stripe being filled.
    stripe: Vec<u8>,
    group: Option<GroupWriter>,
    finished: Vec<BlockGroup>,
    /// Data bytes acknowledged over the whole key.
    acked: u64,
    /// Set when a flush failed: the key can no longer be committed.
    failed: Option<String>,
    committed: bool,
}

impl ECKeyOutputStream {
    pub(crate) fn new(
        shared: Arc<ClientShared>,
        bucket: &str,
        key: &str,
        session_id: u64,
        ec: EcReplicationConfig,
        block_size: u64,
    ) -> Result<Self> {
        if block_size == 0 || !block_size.is_multiple_of(ec.cell_size()) {
            return Err(ClientError::InvalidArgument(format!(
                "block size {block_size} is not a positive multiple of the {ec} cell size {}",
                ec.cell_size()
            )));
        }
        let group_capacity = block_size.checked_mul(ec.data() as u64).ok_or_else(|| {
            ClientError::InvalidArgument(format!("block size {block_size} too large"))
        })?;
        let stripe_size = usize::try_from(ec.stripe_size())
            .map_err(|_| ClientError::InvalidArgument(format!("stripe of {ec} too large")))?;
        Ok(Self {
            shared,
            bucket: bucket.to_string(),
            key: key.to_string(),
            session_id,
            coder: ec.coder(),
            ec,
            group_capacity,
            stripe: Vec::with_capacity(stripe_size),
            group: None,
            finished: Vec::new(),
            acked: 0,
            failed: None,
            committed: false,
        })
    }

    /// Data bytes accepted so far (acknowledged plus buffered).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.acked + self.stripe.len() as u64
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check_failed(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(ClientError::InvalidArgument(format!(
                "key {}/{} cannot be written after a failed flush: {why}",
                self.bucket, self.key
            ))),
            None => Ok(()),
        }
    }

    /// Appends `buf` to the key. Full stripes are encoded and flushed before
    /// this returns.
    ///
    /// # Errors
    /// A failed stripe flush (datanode or om error); after one, every later
    /// call fails and the key is never committed.
    pub async fn write(&mut self, mut buf: &[u8]) -> Result<()> {
        self.check_failed()?;
        let stripe_size = self.stripe.capacity();
        while !buf.is_empty() {
            let take = (stripe_size - self.stripe.len()).min(buf.len());
            self.stripe.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.stripe.len() == stripe_size {
                self.flush_stripe().await?;
            }
        }
        Ok(())
    }

    /// A no-op: EC data reaches the datanodes a whole stripe at a time (as in Ozone).
    ///
    /// # Errors
    /// Only a failure recorded by an earlier flush.
    pub fn flush(&mut self) -> Result<()> {
        self.check_failed()
    }

    /// hflush/hsync durability for a partial stripe is not supported on EC keys
    /// (Ozone's `ECKeyOutputStream.hsync` throws as well).
    ///
    /// # Errors
    /// Always [`ClientError::Unsupported`].
    pub fn hsync(&mut self) -> Result<()> {
        Err(ClientError::Unsupported(
            "hsync/hflush on an erasure-coded key".into(),
        ))
    }

    async fn flush_stripe(&mut self) -> Result<()> {
        let result = self.try_flush_stripe().await;
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }

    async fn ensure_group(&mut self) -> Result<&mut GroupWriter> {
        if self.group.is_none() {
            let group = self
                .shared
                .om
                .allocate_block_group(self.session_id, Vec::new())
                .await?;
            let mut streams = Vec::with_capacity(self.ec.total());
            for r in 1..=self.ec.total() {
                let ri = u32::try_from(r).unwrap_or(u32::MAX);
                let node = group.pipeline.nodes_for(ri).next().ok_or_else(|| {
                    ClientError::InvalidArgument(format!(
                        "om allocated group {} without replica index {r}",
                        group.block_id(0)
                    ))
                })?;
                let client = self.shared.read.xceivers.client(&node.address)?;
                let cfg = self.shared.read.xceivers.config();
                streams.push(BlockOutputStream::new(
                    group.block_id(ri),
                    vec![client],
                    cfg.checksum_type,
                    cfg.bytes_per_checksum,
                )?);
            }
            self.group = Some(GroupWriter {
                group,
                streams,
                length: 0,
                closed: false,
            });
        }
        self.group
            .as_mut()
            .ok_or_else(|| ClientError::InvalidArgument("no open block group".into()))
    }

    /// Encodes and writes the buffered stripe (full or partial), then commits it.
    async fn try_flush_stripe(&mut self) -> Result<()> {
        let len = self.stripe.len();
        if len == 0 {
            return Ok(());
        }
        let cell = usize::try_from(self.ec.cell_size()).unwrap_or(usize::MAX);
        let d = self.ec.data();
        let p = self.ec.parity();
        let data = Bytes::from(std::mem::replace(
            &mut self.stripe,
            Vec::with_capacity(d * cell),
        ));
        let cells: Vec<Bytes> = (0..d)
            .map(|i| data.slice((i * cell).min(len)..((i + 1) * cell).min(len)))
            .collect();
        let parity_len = cells[0].len();
        // Shorter cells are zero-padded to the first cell's length for encoding only.
        let padded: Vec<Vec<u8>> = cells
            .iter()
            .filter(|c| c.len() < parity_len)
            .map(|c| {
                let mut v = c.to_vec();
                v.resize(parity_len, 0);
                v
            })
            .collect();
        let mut padded_iter = padded.iter();
        let inputs: Vec<&[u8]> = cells
            .iter()
            .map(|c| {
                if c.len() < parity_len {
                    padded_iter.next().map_or(&c[..], Vec::as_slice)
                } else {
                    &c[..]
                }
            })
            .collect();
        let mut parity: Vec<Vec<u8>> = vec![vec![0u8; parity_len]; p];
        {
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            self.coder.encode(&inputs, &mut outs)?;
        }
        let capacity = self.group_capacity;
        let group = self.ensure_group().await?;
        let payloads: Vec<Bytes> = cells
            .into_iter()
            .chain(parity.into_iter().map(Bytes::from))
            .collect();
        try_join_all(
            group
                .streams
                .iter_mut()
                .zip(payloads)
                .filter(|(_, data)| !data.is_empty())
                .map(|(s, data)| s.write_chunk(data)),
        )
        .await?;
        group.length += len as u64;
        let full = group.length >= capacity;
        Self::put_block(group, full).await?;
        self.acked += len as u64;
        if full {
            self.finish_group();
        }
        Ok(())
    }

    async fn put_block(group: &mut GroupWriter, eof: bool) -> Result<()> {
        let mut meta = BTreeMap::new();
        meta.insert(BLOCK_GROUP_LENGTH_KEY.to_string(), group.length.to_string());
        try_join_all(group.streams.iter().map(|s| s.put_block(&meta, eof))).await?;
        group.closed = eof;
        Ok(())
    }

    fn finish_group(&mut self) {
        if let Some(g) = self.group.take() {
            self.finished.push(BlockGroup {
                length: g.length,
                ..g.group
            });
        }
    }

    /// Flushes the partial last stripe, closes the open group (eof PutBlock on
    /// every index) and commits the key with its exact length. Returns the
    /// committed key.
    ///
    /// # Errors
    /// A failed flush (now or earlier): the key is then not committed (the
    /// om session is aborted) and no key becomes visible.
    pub async fn close(mut self) -> Result<KeyInfo> {
        let result = self.try_close().await;
        if result.is_err() {
            let _ = self.shared.om.abort_key(self.session_id).await;
        }
        self.committed = true;
        result
    }

    async fn try_close(&mut self) -> Result<KeyInfo> {
        self.check_failed()?;
        self.flush_stripe().await?;
        if let Some(g) = self.group.as_mut()
            && !g.closed
        {
            Self::put_block(g, true).await?;
        }
        self.finish_group();
        let groups = std::mem::take(&mut self.finished);
        self.shared
            .om
            .commit_key(self.session_id, groups, self.acked)
            .await
    }
}

impl Drop for ECKeyOutputStream {
    /// A writer dropped without `close` commits nothing; the om session is
    /// aborted in the background when a runtime is available.
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let om = self.shared.om.clone();
            let session = self.session_id;
            handle.spawn(async move {
                let _ = om.abort_key(session).await;
            });
        }
    }
}
