//! [`ECBlockInputStreamProxy`]: the entry point for reading one EC block group.
//!
//! Models Ozone's `ECBlockInputStreamProxy`:
//! - while the group is healthy, reads go to an [`ECBlockInputStream`] built
//!   once (no RPC) and kept for the proxy's life, so positioned reads reuse
//!   its cached per-index streams ([`ReadMode::Reuse`], the default);
//! - on a failed location the proxy drops the attempt's output, marks the
//!   (replica index, datanode) failed, and retries the whole read with a
//!   reader that starts with every failed location excluded: a striped
//!   reader on a spare replica of the index if one exists, otherwise an
//!   [`ECBlockReconstructedStripeInputStream`];
//! - that degraded reader is kept and reused by later reads (positioned and
//!   sequential) — nothing is rebuilt per call.
//!
//! [`ReadMode::ReaderPerCall`] builds a fresh striped reader for every
//! positioned read instead (the old behaviour, for the benchmark only).
//!
//! The state lock is held only to clone or swap the current reader, never
//! across I/O.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use ec_codec::EcReplicationConfig;
use proto_crate::BlockGroup;

use crate::ec_input::{ECBlockInputStream, EcReadError, IndexFailure, choose_locations};
use crate::ec_reconstruct::ECBlockReconstructedStripeInputStream;
use crate::metrics::EcReadMetrics;
use crate::read_context::ReadContext;
use crate::{ClientError, ReadMode, Result};

/// The reader the proxy currently sends reads to.
#[derive(Debug, Clone)]
enum ActiveReader {
    Striped(Arc<ECBlockInputStream>),
    Reconstructed(Arc<ECBlockReconstructedStripeInputStream>),
}

impl ActiveReader {
    async fn read_at(&self, pos: u64, buf: &mut [u8]) -> std::result::Result<usize, EcReadError> {
        match self {
            Self::Striped(r) => r.read_at(pos, buf).await,
            Self::Reconstructed(r) => r.read_at(pos, buf).await.map_err(EcReadError::Fatal),
        }
    }
}

#[derive(Debug)]
struct ProxyState {
    /// Failed (replica index, datanode uuid) locations.
    excluded: HashSet<(u32, String)>,
    reader: ActiveReader,
    /// Bumped each time `reader` is replaced.
    generation: u64,
}

/// Reads one EC block group, choosing, caching and replacing its reader.
#[derive(Debug)]
pub struct ECBlockInputStreamProxy {
    ctx: Arc<ReadContext>,
    group: BlockGroup,
    ec: EcReplicationConfig,
    state: Mutex<ProxyState>,
}

impl ECBlockInputStreamProxy {
    /// A proxy over `group`; builds its standing striped reader (no RPC).
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
            state: Mutex::new(ProxyState {
                excluded: HashSet::new(),
                reader: ActiveReader::Striped(Arc::new(reader)),
                generation: 0,
            }),
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

    /// Whether reads currently go through reconstruction.
    #[must_use]
    pub fn is_degraded(&self) -> bool {
        matches!(self.lock().reader, ActiveReader::Reconstructed(_))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProxyState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The reader for one call and the generation it belongs to.
    fn reader_for_call(&self) -> Result<(ActiveReader, u64)> {
        let (reader, generation, excluded) = {
            let st = self.lock();
            (st.reader.clone(), st.generation, st.excluded.clone())
        };
        match (self.ctx.config.read_mode, &reader) {
            (ReadMode::ReaderPerCall, ActiveReader::Striped(_)) => {
                let fresh = ECBlockInputStream::new(&self.ctx, &self.group, self.ec, &excluded)?;
                Ok((ActiveReader::Striped(Arc::new(fresh)), generation))
            }
            _ => Ok((reader, generation)),
        }
    }

    /// Records a failed location and, unless another call already did so for
    /// this generation, replaces the reader with one that excludes it.
    fn fail_over(&self, generation: u64, failure: &IndexFailure) -> Result<()> {
        let mut st = self.lock();
        let new_exclusion = !failure.datanode_uuid.is_empty()
            && st
                .excluded
                .insert((failure.replica_index, failure.datanode_uuid.clone()));
        if !new_exclusion && st.generation != generation {
            return Ok(());
        }
        let locations = choose_locations(&self.ctx, &self.group, &self.ec, &st.excluded)?;
        let layout = ec_codec::BlockGroupLayout::new(self.ec, self.group.length);
        let striped_ok = (1..=layout.expected_data_locations())
            .all(|r| locations.get(r - 1).is_some_and(|l| !l.is_empty()));
        st.reader = if striped_ok {
            let has_spare = locations
                .get((failure.replica_index as usize).wrapping_sub(1))
                .is_some_and(|l| !l.is_empty());
            if has_spare {
                EcReadMetrics::inc(&self.ctx.ec_metrics.spare_switches);
            }
            ActiveReader::Striped(Arc::new(ECBlockInputStream::new(
                &self.ctx,
                &self.group,
                self.ec,
                &st.excluded,
            )?))
        } else {
            ActiveReader::Reconstructed(Arc::new(ECBlockReconstructedStripeInputStream::new(
                &self.ctx,
                &self.group,
                self.ec,
                &st.excluded,
            )?))
        };
        st.generation += 1;
        Ok(())
    }

    /// Positioned read of group-relative `pos`; fills `buf` up to the end of
    /// the group and returns the bytes read (0 at or past the end). Bytes of
    /// a failed attempt are never returned: the retry rewrites the whole range.
    ///
    /// # Errors
    /// [`ClientError::InsufficientLocations`] when more than p indexes are
    /// lost; the last location error if failover runs out of locations;
    /// caller errors.
    pub async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        // Each failover excludes one more location, so this is bounded by
        // the number of locations; the +1 lets the last reader be tried.
        let max_attempts = self.group.pipeline.locations.len() + 1;
        let mut attempts = 0;
        loop {
            let (reader, generation) = self.reader_for_call()?;
            match reader.read_at(pos, buf).await {
                Ok(n) => return Ok(n),
                Err(EcReadError::Fatal(e)) => return Err(e),
                Err(EcReadError::Location(f)) => {
                    attempts += 1;
                    EcReadMetrics::inc(&self.ctx.ec_metrics.failovers);
                    tracing::debug!(block = %self.group.block_id(f.replica_index), error = %f.error, "EC read failed over");
                    if attempts >= max_attempts {
                        return Err(ClientError::BlockStream(f.error));
                    }
                    self.fail_over(generation, &f)?;
                }
            }
        }
    }
}
