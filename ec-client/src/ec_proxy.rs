//! [`EcBlockInputStreamProxy`]: the entry point for reading one EC block group.
//!
//! Models Ozone's `ECBlockInputStreamProxy`:
//! - while the group is healthy, reads go to an [`EcBlockInputStream`] built
//!   once (no RPC) and kept for the proxy's life, so positioned reads reuse
//!   its cached per-index streams ([`ReadMode::Reuse`], the default);
//! - on a failed location the proxy drops the attempt's output, marks the
//!   (replica index, datanode) failed, and retries the whole read with a
//!   reader that starts with every failed location excluded: a striped
//!   reader on a spare replica of the index if one exists, otherwise an
//!   [`EcBlockReconstructedStripeInputStream`];
//! - that degraded reader is kept and reused by later reads (positioned and
//!   sequential) — nothing is rebuilt per call;
//! - exclusions are not forever: when a read finds too few locations
//!   ([`ClientError::InsufficientLocations`]), and when the proxy has been
//!   degraded for longer than `ClientConfig::degraded_probe_interval`, it
//!   looks the key up again (spare replicas added since the open are used),
//!   forgets its exclusions and goes back to a striped reader; a location
//!   that is still down fails over again, one that came back serves on the
//!   fast path with no reconstruction. A read refreshes at most once.
//!
//! [`ReadMode::ReaderPerCall`] builds a fresh striped reader for every
//! positioned read instead (the old behaviour, for the benchmark only).
//!
//! The state lock is held only to clone or swap the current reader, never
//! across I/O.

use block_stream::BlockTokenSource;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ec_codec::{EcReplicationConfig, ReplicaIndex};
use proto_crate::{BlockGroup, DatanodeId};

use crate::ec_input::{EcBlockInputStream, EcReadError, IndexFailure, choose_locations};
use crate::ec_reconstruct::EcBlockReconstructedStripeInputStream;
use crate::metrics::EcReadMetrics;
use crate::read_context::ReadContext;
use crate::{ClientError, ReadMode, Result};

/// The reader the proxy currently sends reads to.
#[derive(Debug, Clone)]
enum ActiveReader {
    Striped(Arc<EcBlockInputStream>),
    Reconstructed(Arc<EcBlockReconstructedStripeInputStream>),
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
    /// The group's locations: as opened, or as the last refresh found them.
    group: BlockGroup,
    /// Failed (replica index, datanode uuid) locations. Bounded by the
    /// group's locations; emptied by a refresh.
    excluded: HashSet<(ReplicaIndex, DatanodeId)>,
    reader: ActiveReader,
    /// Bumped each time `reader` is replaced.
    generation: u64,
    /// When the proxy last left the fast path (first exclusion since the
    /// last refresh).
    degraded_since: Option<Instant>,
}

/// Reads one EC block group, choosing, caching and replacing its reader.
#[derive(Debug)]
pub struct EcBlockInputStreamProxy {
    ctx: Arc<ReadContext>,
    /// The group's block token (security on), shared by every reader the
    /// proxy builds and renewed through the om when refused.
    token: Option<Arc<BlockTokenSource>>,
    /// (bucket, key) the group belongs to, to look its locations up again.
    key: (String, String),
    /// Container and local id: the group's identity across refreshes.
    id: (u64, u64),
    length: u64,
    ec: EcReplicationConfig,
    state: Mutex<ProxyState>,
}

/// Why a read refreshes the proxy's locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refresh {
    /// Too few locations answered.
    Insufficient,
    /// Degraded for longer than the probe interval.
    Probe,
}

impl EcBlockInputStreamProxy {
    /// A proxy over `group` of key `bucket/key`; builds its standing striped
    /// reader (no RPC).
    pub(crate) fn new(
        ctx: Arc<ReadContext>,
        key: (String, String),
        group: BlockGroup,
        ec: EcReplicationConfig,
    ) -> Result<Self> {
        let token = crate::block_tokens::for_reader(&ctx.om, (&key.0, &key.1), &group);
        let reader = EcBlockInputStream::new(&ctx, &group, ec, &HashSet::new(), token.as_ref())?;
        Ok(Self {
            ctx,
            token,
            key,
            id: (group.container_id, group.local_id),
            length: group.length,
            ec,
            state: Mutex::new(ProxyState {
                group,
                excluded: HashSet::new(),
                reader: ActiveReader::Striped(Arc::new(reader)),
                generation: 0,
                degraded_since: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProxyState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The reader for one call, the generation it belongs to, and whether
    /// the proxy has been degraded for longer than the probe interval.
    ///
    /// The cached reader is an `Arc` clone. Only `ReadMode::ReaderPerCall`
    /// copies the group and its exclusions, to build a fresh reader outside
    /// the lock; copying them for every call, as this did before, cost each
    /// 4 KiB pread about ten allocations (callgrind).
    fn reader_for_call(&self) -> Result<(ActiveReader, u64, bool)> {
        let (reader, generation, probe, per_call) = {
            let st = self.lock();
            let probe = st
                .degraded_since
                .is_some_and(|t| t.elapsed() >= self.ctx.config.degraded_probe_interval);
            let per_call = match (self.ctx.config.read_mode, &st.reader) {
                (ReadMode::ReaderPerCall, ActiveReader::Striped(_)) => {
                    Some((st.group.clone(), st.excluded.clone()))
                }
                _ => None,
            };
            (st.reader.clone(), st.generation, probe, per_call)
        };
        match per_call {
            Some((group, excluded)) => {
                let fresh = EcBlockInputStream::new(
                    &self.ctx,
                    &group,
                    self.ec,
                    &excluded,
                    self.token.as_ref(),
                )?;
                Ok((ActiveReader::Striped(Arc::new(fresh)), generation, probe))
            }
            None => Ok((reader, generation, probe)),
        }
    }

    /// Looks the key up again, takes this group's current locations (spares
    /// added since), forgets every exclusion and goes back to a striped
    /// reader — unless another call already replaced the reader since
    /// `generation`. A failed lookup (the om unreachable, the key rewritten
    /// or deleted) keeps the known locations but still forgets exclusions.
    async fn refresh(&self, generation: u64, why: Refresh) -> Result<()> {
        let fresh = match self.ctx.om.lookup_key(&self.key.0, &self.key.1).await {
            Ok(info) => info
                .block_groups
                .into_iter()
                .find(|g| (g.container_id, g.local_id) == self.id),
            Err(e) => {
                tracing::debug!(bucket = %self.key.0, key = %self.key.1, error = %e, "refreshing locations failed; retrying the known ones");
                None
            }
        };
        let group = match fresh {
            Some(g) => g,
            None => self.lock().group.clone(),
        };
        // Build first: a failure leaves the proxy as it was.
        let reader = EcBlockInputStream::new(
            &self.ctx,
            &group,
            self.ec,
            &HashSet::new(),
            self.token.as_ref(),
        )?;
        let mut st = self.lock();
        if st.generation != generation {
            return Ok(());
        }
        st.group = group;
        st.excluded.clear();
        st.reader = ActiveReader::Striped(Arc::new(reader));
        st.generation += 1;
        st.degraded_since = None;
        let counter = match why {
            Refresh::Insufficient => &self.ctx.ec_metrics.location_refreshes,
            Refresh::Probe => &self.ctx.ec_metrics.degraded_probes,
        };
        EcReadMetrics::inc(counter);
        Ok(())
    }

    /// Records a failed location and, unless another call already did so for
    /// this generation, replaces the reader with one that excludes it.
    fn fail_over(&self, generation: u64, failure: &IndexFailure) -> Result<()> {
        let mut st = self.lock();
        let new_exclusion = failure
            .datanode
            .as_ref()
            .is_some_and(|d| st.excluded.insert((failure.replica_index, d.clone())));
        if !new_exclusion && st.generation != generation {
            return Ok(());
        }
        let group = st.group.clone();
        let locations = choose_locations(
            &self.ctx,
            &group,
            &self.ec,
            &st.excluded,
            self.token.as_ref(),
        )?;
        let layout = ec_codec::BlockGroupLayout::new(self.ec, self.length);
        let striped_ok = (0..layout.expected_data_locations())
            .all(|unit| locations.get(unit).is_some_and(|l| !l.is_empty()));
        st.reader = if striped_ok {
            let has_spare = locations
                .get(failure.replica_index.unit())
                .is_some_and(|l| !l.is_empty());
            if has_spare {
                EcReadMetrics::inc(&self.ctx.ec_metrics.spare_switches);
            }
            ActiveReader::Striped(Arc::new(EcBlockInputStream::new(
                &self.ctx,
                &group,
                self.ec,
                &st.excluded,
                self.token.as_ref(),
            )?))
        } else {
            ActiveReader::Reconstructed(Arc::new(EcBlockReconstructedStripeInputStream::new(
                &self.ctx,
                &group,
                self.ec,
                &st.excluded,
                self.token.as_ref(),
            )?))
        };
        st.generation += 1;
        st.degraded_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Positioned read of group-relative `pos`; fills `buf` up to the end of
    /// the group and returns the bytes read (0 at or past the end). Bytes of
    /// a failed attempt are never returned: the retry rewrites the whole range.
    ///
    /// # Errors
    /// [`ClientError::InsufficientLocations`] when more than p indexes are
    /// lost even after refreshing the locations; the last location error if
    /// failover runs out of locations; caller errors.
    pub async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        let mut refreshed = false;
        let mut attempts = 0;
        loop {
            let (reader, generation, probe) = self.reader_for_call()?;
            if probe && !refreshed {
                refreshed = true;
                self.refresh(generation, Refresh::Probe).await?;
                continue;
            }
            let failure = match reader.read_at(pos, buf).await {
                Ok(n) => return Ok(n),
                Err(EcReadError::Fatal(e)) => e,
                Err(EcReadError::Location(f)) => {
                    attempts += 1;
                    EcReadMetrics::inc(&self.ctx.ec_metrics.failovers);
                    tracing::debug!(block = %self.lock().group.block_id(f.replica_index), error = %f.error, "EC read failed over");
                    // Each failover excludes one more location, so this is
                    // bounded by the number of locations; the +1 lets the
                    // last reader be tried.
                    let max_attempts = self.lock().group.pipeline.locations.len() + 1;
                    if attempts >= max_attempts {
                        return Err(ClientError::BlockStream(f.error));
                    }
                    match self.fail_over(generation, &f) {
                        Ok(()) => continue,
                        Err(e) => e,
                    }
                }
            };
            match failure {
                ClientError::InsufficientLocations { .. } if !refreshed => {
                    refreshed = true;
                    attempts = 0;
                    let generation = self.lock().generation;
                    self.refresh(generation, Refresh::Insufficient).await?;
                }
                e => return Err(e),
            }
        }
    }
}
