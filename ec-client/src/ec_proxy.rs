//! [`ECBlockInputStreamProxy`]: the entry point for reading one EC block group.
//!
//! Models Ozone's `ECBlockInputStreamProxy`. In [`ReadMode::Reuse`] (the
//! default) it keeps one [`ECBlockInputStream`] for the group, created when the
//! key is opened (no RPC), and every positioned or sequential read goes
//! through that reader's cached per-index streams. In
//! [`ReadMode::ReaderPerCall`] every positioned read builds and drops a fresh
//! reader, reproducing the old behaviour for the benchmark.

use std::collections::HashSet;
use std::sync::Arc;

use ec_codec::EcReplicationConfig;
use proto_crate::BlockGroup;

use crate::ec_input::{ECBlockInputStream, EcReadError};
use crate::read_context::ReadContext;
use crate::{ClientError, ReadMode, Result};

/// Reads one EC block group, choosing and caching the reader.
#[derive(Debug)]
pub struct ECBlockInputStreamProxy {
    ctx: Arc<ReadContext>,
    group: BlockGroup,
    ec: EcReplicationConfig,
    reader: ECBlockInputStream,
}

impl ECBlockInputStreamProxy {
    /// A proxy over `group`; builds its standing reader (no RPC).
    pub(crate) fn new(
        ctx: Arc<ReadContext>,
        group: BlockGroup,
        ec: EcReplicationConfig,
    ) -> Result<Self> {
        let reader = ECBlockInputStream::new(&ctx, &group, ec, &HashSet::new())?;
        Ok(Self {
            ctx,
            group,
            ec,
            reader,
        })
    }

    /// Group length, data bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.group.length
    }

    /// Whether the group holds no data.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.group.length == 0
    }

    /// Positioned read of group-relative `pos`; fills `buf` up to the end of
    /// the group and returns the bytes read (0 at or past the end).
    ///
    /// # Errors
    /// The failing location's error; caller errors.
    pub async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        let result = match self.ctx.config.read_mode {
            ReadMode::Reuse => self.reader.read_at(pos, buf).await,
            ReadMode::ReaderPerCall => {
                let fresh =
                    ECBlockInputStream::new(&self.ctx, &self.group, self.ec, &HashSet::new())?;
                fresh.read_at(pos, buf).await
            }
        };
        result.map_err(|e| match e {
            EcReadError::Location(f) => ClientError::BlockStream(f.error),
            EcReadError::Fatal(e) => e,
        })
    }
}
