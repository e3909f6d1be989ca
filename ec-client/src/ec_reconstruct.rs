//! [`EcBlockReconstructedStripeInputStream`]: reads an EC block group when
//! some of its indexes are lost, decoding the missing cells from parity.
//!
//! Models Ozone's `ECBlockReconstructedStripeInputStream`. For each stripe a
//! read touches: cells on healthy data indexes are read directly; if any
//! touched cell is on a lost index, the reader reads the same column window
//! (only the bytes under the requested range, not whole cells) from d
//! surviving units — the surviving data indexes first, then as many parity
//! indexes as cells are missing — all in parallel (a touched healthy cell that
//! is also one of those units is read once: its bytes under the window serve
//! both the caller and the decoder), zero-pads units whose cell
//! is shorter (partial last stripe, padding indexes beyond the data; never
//! read), decodes, and copies out the requested bytes. An index that fails
//! mid-stripe is marked lost and the stripe is re-planned and re-read; once
//! fewer than d units survive the read fails with
//! [`ClientError::InsufficientLocations`], never with partial data.

use block_stream::BlockTokenSource;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use ec_codec::{BlockGroupLayout, CellSpan, EcReplicationConfig, ErasureCoder, ReplicaIndex};
use futures::future::join_all;
use proto_crate::{BlockGroup, DatanodeId};

use crate::ec_input::{EcReadError, IndexStreams, LocationUse, choose_locations, split_pieces};
use crate::metrics::EcReadMetrics;
use crate::read_context::ReadContext;
use crate::{ClientError, Result};

/// Reads an EC block group through reconstruction of its lost indexes.
#[derive(Debug)]
pub struct EcBlockReconstructedStripeInputStream {
    streams: IndexStreams,
    ec: EcReplicationConfig,
    coder: ErasureCoder,
    /// Lost replica indexes -> `HOST:PORT` (or "" if it never had a location).
    /// Grows as reads fail; locked only to copy or insert, never across I/O.
    lost: Mutex<BTreeMap<ReplicaIndex, String>>,
    metrics: Arc<EcReadMetrics>,
}

impl EcBlockReconstructedStripeInputStream {
    /// A reader of `group` that avoids the `excluded` (replica index, datanode
    /// uuid) locations; indexes left without a location start out lost. No
    /// RPC is made; counts one reconstruction reader created.
    pub(crate) fn new(
        ctx: &ReadContext,
        group: &BlockGroup,
        ec: EcReplicationConfig,
        excluded: &HashSet<(ReplicaIndex, DatanodeId)>,
        token: Option<&Arc<BlockTokenSource>>,
    ) -> Result<Self> {
        let locations = choose_locations(ctx, group, &ec, excluded, token)?;
        let mut lost = BTreeMap::new();
        for (r, locs) in ec.replica_indexes().zip(&locations) {
            if locs.is_empty() {
                let addresses = excluded
                    .iter()
                    .filter(|(idx, _)| *idx == r)
                    .filter_map(|(_, uuid)| {
                        group
                            .pipeline
                            .locations
                            .iter()
                            .find(|l| &l.datanode.uuid == uuid)
                            .map(|l| l.datanode.address.clone())
                    })
                    .collect::<Vec<_>>();
                let why = if addresses.is_empty() {
                    "no location in the key's metadata".to_string()
                } else {
                    format!(
                        "{} failed earlier in this read and is excluded",
                        addresses.join(", ")
                    )
                };
                lost.insert(r, why);
            }
        }
        EcReadMetrics::inc(&ctx.ec_metrics.reconstruction_readers_created);
        Ok(Self {
            streams: IndexStreams::new(
                ctx,
                group,
                BlockGroupLayout::new(ec, group.length),
                locations,
                ec.total(),
                LocationUse::All,
            ),
            coder: ec.coder(),
            ec,
            lost: Mutex::new(lost),
            metrics: Arc::clone(&ctx.ec_metrics),
        })
    }

    /// Group length, data bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.streams.layout().group_len()
    }

    fn lost(&self) -> BTreeMap<ReplicaIndex, String> {
        self.lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records index `r` as lost, with `why` (its first failure's message).
    fn mark_lost(&self, r: ReplicaIndex, why: String) {
        self.lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(r)
            .or_insert(why);
    }

    fn group(&self) -> &BlockGroup {
        self.streams.group()
    }

    fn insufficient(&self, lost: &BTreeMap<ReplicaIndex, String>) -> ClientError {
        ClientError::InsufficientLocations {
            block: self.group().id(),
            needed: self.ec.data(),
            failed: lost.iter().map(|(r, a)| (*r, a.clone())).collect(),
        }
    }

    /// Positioned read of group-relative `pos` into `buf`; returns the bytes
    /// read, short only at the end of the group. Reads only the stripes the
    /// range touches.
    ///
    /// # Errors
    /// [`ClientError::InsufficientLocations`] when more than p indexes are
    /// lost for a stripe the range touches; caller errors.
    pub(crate) async fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        let len = self.len();
        if pos >= len || buf.is_empty() {
            return Ok(0);
        }
        let n = usize::try_from((len - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let end = pos + n as u64;
        let layout = *self.streams.layout();
        for stripe in layout.stripes_for_range(pos..end)? {
            let sr = layout.stripe_range(stripe);
            let (a, b) = (pos.max(sr.start), end.min(sr.end));
            let spans: Vec<CellSpan> = layout.cells_for_range(a..b)?.collect();
            let from = usize::try_from(a - pos).unwrap_or(usize::MAX);
            let to = usize::try_from(b - pos).unwrap_or(usize::MAX);
            self.read_stripe(stripe, &spans, &mut buf[from..to]).await?;
        }
        Ok(n)
    }

    /// Reads the `spans` of one stripe into `out` (which starts at the first
    /// span), re-planning after each lost index. It fails only when more than
    /// p indexes are lost whose cells hold data under the column window of
    /// the missing cells: a lost index whose bytes there are all padding is
    /// still known (zeros), so the outcome does not depend on which indexes
    /// earlier reads happened to find lost.
    async fn read_stripe(&self, stripe: u64, spans: &[CellSpan], out: &mut [u8]) -> Result<()> {
        loop {
            let lost = self.lost();
            match self.try_stripe(stripe, spans, out, &lost).await {
                Ok(()) => return Ok(()),
                Err(EcReadError::Fatal(e)) => return Err(e),
                Err(EcReadError::Location(f)) => {
                    tracing::debug!(block = %self.group().id(), index = %f.replica_index, error = %f.error, "index lost during reconstruction; re-planning");
                    self.mark_lost(f.replica_index, f.error.to_string());
                }
            }
        }
    }

    async fn try_stripe(
        &self,
        stripe: u64,
        spans: &[CellSpan],
        out: &mut [u8],
        lost: &BTreeMap<ReplicaIndex, String>,
    ) -> std::result::Result<(), EcReadError> {
        let layout = *self.streams.layout();
        let cell = self.ec.cell_size();
        let is_lost = |r: ReplicaIndex| lost.contains_key(&r);
        let mut pieces = split_pieces(out, spans.iter().map(|s| s.len));

        // Column window of the missing cells.
        let missing: Vec<usize> = (0..spans.len())
            .filter(|&i| is_lost(spans[i].replica_index))
            .collect();
        let window = missing.iter().fold(None::<(u64, u64)>, |w, &i| {
            let (lo, hi) = (
                spans[i].offset_in_cell,
                spans[i].offset_in_cell + spans[i].len,
            );
            Some(w.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        });

        // Plan the units to decode from: surviving data indexes, then parity.
        // A lost index is still usable when its cell ends at or before the
        // window: every byte it holds there is encoding padding (zeros).
        let mut units: Vec<ReplicaIndex> = Vec::new();
        if let Some((lo, _)) = window {
            let usable =
                |r: ReplicaIndex| !is_lost(r) || layout.cell_len(stripe, r).is_ok_and(|l| l <= lo);
            units = self
                .ec
                .replica_indexes()
                .filter(|&r| usable(r))
                .take(self.ec.data())
                .collect();
            if units.len() < self.ec.data() {
                return Err(EcReadError::Fatal(self.insufficient(lost)));
            }
        }
        let (lo, hi) = window.unwrap_or((0, 0));
        let width = usize::try_from(hi - lo).unwrap_or(usize::MAX);
        let mut unit_bufs: Vec<Vec<u8>> = units.iter().map(|_| vec![0u8; width]).collect();

        // A healthy touched cell that is also a decode unit is read once: its
        // bytes under the window come from the unit's read (copied out after
        // the reads), only the rest of it is read directly. Reading it twice
        // (once for the caller, once to decode) moved (d-1)/d more bytes in
        // a whole-stripe degraded read.
        let mut from_units: Vec<(&mut [u8], usize, usize)> = Vec::new();
        {
            // Direct reads of healthy touched cells, and unit windows, all at once.
            let mut reads = Vec::new();
            for (i, piece) in pieces.iter_mut().enumerate() {
                let s = &spans[i];
                if is_lost(s.replica_index) {
                    continue;
                }
                let (a, b) = (s.offset_in_cell, s.offset_in_cell + s.len);
                let unit = units.iter().position(|&r| r == s.replica_index);
                let (mid_lo, mid_hi) = (a.max(lo), b.min(hi));
                let Some(u) = unit.filter(|_| mid_lo < mid_hi) else {
                    reads.push(self.streams.read(s.replica_index, s.offset_in_block, piece));
                    continue;
                };
                // piece = [a, mid_lo) direct ‖ [mid_lo, mid_hi) from the unit
                // ‖ [mid_hi, b) direct.
                let cut = |x: u64| usize::try_from(x - a).unwrap_or(usize::MAX);
                let (before, rest) = piece.split_at_mut(cut(mid_lo));
                let (middle, after) = rest.split_at_mut(cut(mid_hi) - cut(mid_lo));
                if !before.is_empty() {
                    reads.push(
                        self.streams
                            .read(s.replica_index, s.offset_in_block, before),
                    );
                }
                if !after.is_empty() {
                    let at = s.offset_in_block + (mid_hi - a);
                    reads.push(self.streams.read(s.replica_index, at, after));
                }
                let in_unit = usize::try_from(mid_lo - lo).unwrap_or(usize::MAX);
                from_units.push((middle, u, in_unit));
            }
            for (&r, buf) in units.iter().zip(unit_bufs.iter_mut()) {
                let real = layout.cell_len(stripe, r).map_err(ClientError::from)?;
                if lo < real {
                    let take = usize::try_from(hi.min(real) - lo).unwrap_or(usize::MAX);
                    reads.push(self.streams.read(r, stripe * cell + lo, &mut buf[..take]));
                }
                // Bytes past the cell's real length stay zero: encoding padding.
            }
            for result in join_all(reads).await {
                result?;
            }
        }
        for (middle, u, at) in from_units {
            let n = middle.len();
            middle.copy_from_slice(&unit_bufs[u][at..at + n]);
        }
        if missing.is_empty() {
            return Ok(());
        }

        // Decode the missing data cells over the window.
        let wanted: Vec<usize> = missing
            .iter()
            .map(|&i| spans[i].replica_index.unit())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut present: Vec<Option<&[u8]>> = vec![None; self.ec.total()];
        for (&r, buf) in units.iter().zip(&unit_bufs) {
            if let Some(slot) = present.get_mut(r.unit()) {
                *slot = Some(buf.as_slice());
            }
        }
        let mut decoded: Vec<Vec<u8>> = wanted.iter().map(|_| vec![0u8; width]).collect();
        {
            let mut outs: Vec<&mut [u8]> = decoded.iter_mut().map(Vec::as_mut_slice).collect();
            self.coder
                .reconstruct(&present, &wanted, &mut outs)
                .map_err(ClientError::from)?;
        }
        for &i in &missing {
            let s = &spans[i];
            let w = wanted
                .iter()
                .position(|&u| u == s.replica_index.unit())
                .unwrap_or(0);
            let from = usize::try_from(s.offset_in_cell - lo).unwrap_or(usize::MAX);
            let n = usize::try_from(s.len).unwrap_or(usize::MAX);
            pieces[i].copy_from_slice(&decoded[w][from..from + n]);
        }
        EcReadMetrics::inc(&self.metrics.stripes_reconstructed);
        Ok(())
    }
}
