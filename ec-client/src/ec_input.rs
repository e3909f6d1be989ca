//! [`ECBlockInputStream`]: reads one EC block group from its data indexes.
//!
//! Models Ozone's `ECBlockInputStream`: one [`BlockInputStream`] per data
//! replica index, created lazily on first use and cached for the reader's
//! life (a once-cell per index; the stream's own GetBlock is lazy too). A
//! positioned read maps the group range to cells with the layout math and
//! calls the cached streams' stateless `read_at`; no lock is held across I/O
//! and cells on different indexes may be read concurrently.
//!
//! A failed location is reported as an [`IndexFailure`] naming the replica
//! index and datanode, so that the proxy can exclude it and retry.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use block_stream::{BlockInputStream, BlockStreamError, XceiverClient};
use ec_codec::{BlockGroupLayout, EcReplicationConfig};
use futures::future::try_join_all;
use proto_crate::BlockGroup;

use crate::metrics::EcReadMetrics;
use crate::read_context::ReadContext;
use crate::{ClientError, Result};

/// A read failure pinned on one replica index of a group.
#[derive(Debug)]
pub(crate) struct IndexFailure {
    /// 1-based replica index.
    pub(crate) replica_index: u32,
    /// Uuid of the datanode that failed (empty if the index had no location).
    pub(crate) datanode_uuid: String,
    /// What happened.
    pub(crate) error: BlockStreamError,
}

/// Either a failure that another location may fix, or a caller/bug error.
#[derive(Debug)]
pub(crate) enum EcReadError {
    /// A location failed; exclude it and retry.
    Location(IndexFailure),
    /// Anything else; surface as is.
    Fatal(ClientError),
}

impl From<ClientError> for EcReadError {
    fn from(e: ClientError) -> Self {
        Self::Fatal(e)
    }
}

/// Location chosen for one replica index.
#[derive(Debug, Clone)]
pub(crate) struct IndexLocation {
    pub(crate) uuid: String,
    pub(crate) client: XceiverClient,
}

/// Picks, for every replica index 1..=d+p, the first location of the group's
/// pipeline that is not in `excluded` ((replica index, datanode uuid) pairs).
pub(crate) fn choose_locations(
    ctx: &ReadContext,
    group: &BlockGroup,
    ec: &EcReplicationConfig,
    excluded: &HashSet<(u32, String)>,
) -> Result<Vec<Option<IndexLocation>>> {
    let mut out = Vec::with_capacity(ec.total());
    for r in 1..=ec.total() {
        let r = u32::try_from(r)
            .map_err(|_| ClientError::InvalidArgument("replica index overflow".into()))?;
        let chosen = group
            .pipeline
            .nodes_for(r)
            .find(|d| !excluded.contains(&(r, d.uuid.clone())));
        out.push(match chosen {
            Some(d) => Some(IndexLocation {
                uuid: d.uuid.clone(),
                client: ctx.xceivers.client(&d.address)?,
            }),
            None => None,
        });
    }
    Ok(out)
}

/// Reads an EC block group through its data indexes' cached block streams.
#[derive(Debug)]
pub struct ECBlockInputStream {
    group: BlockGroup,
    layout: BlockGroupLayout,
    locations: Vec<Option<IndexLocation>>,
    streams: Vec<OnceLock<Arc<BlockInputStream>>>,
    parallel: bool,
}

impl ECBlockInputStream {
    /// A reader of `group` (of length `group.length`) under `ec`, avoiding the
    /// `excluded` (replica index, datanode uuid) locations. No RPC is made;
    /// counts one EC reader created.
    pub(crate) fn new(
        ctx: &ReadContext,
        group: &BlockGroup,
        ec: EcReplicationConfig,
        excluded: &HashSet<(u32, String)>,
    ) -> Result<Self> {
        let locations = choose_locations(ctx, group, &ec, excluded)?;
        EcReadMetrics::inc(&ctx.ec_metrics.ec_readers_created);
        Ok(Self {
            group: group.clone(),
            layout: BlockGroupLayout::new(ec, group.length),
            streams: (0..ec.data()).map(|_| OnceLock::new()).collect(),
            locations,
            parallel: ctx.config.parallel_cell_reads,
        })
    }

    /// Group length, data bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.layout.group_len()
    }

    /// Whether the group holds no data.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.layout.group_len() == 0
    }

    /// Whether every data index this reader can touch has a location.
    pub(crate) fn has_all_data_locations(&self) -> bool {
        (1..=self.layout.expected_data_locations())
            .all(|r| self.locations.get(r - 1).is_some_and(Option::is_some))
    }

    /// The cached stream of data index `r` (1-based), created on first use.
    fn stream(&self, r: usize) -> std::result::Result<&Arc<BlockInputStream>, EcReadError> {
        if let Some(s) = self.streams.get(r - 1).and_then(OnceLock::get) {
            return Ok(s);
        }
        let ri = u32::try_from(r).unwrap_or(u32::MAX);
        let Some(Some(loc)) = self.locations.get(r - 1) else {
            return Err(EcReadError::Location(IndexFailure {
                replica_index: ri,
                datanode_uuid: String::new(),
                error: BlockStreamError::InvalidArgument(format!(
                    "block group {} has no usable location for replica index {r}",
                    self.group.block_id(0)
                )),
            }));
        };
        let len = self
            .layout
            .internal_block_len(r)
            .map_err(ClientError::from)?;
        let s = BlockInputStream::new(self.group.block_id(ri), len, vec![loc.client.clone()])
            .map_err(ClientError::from)?;
        let cell = &self.streams[r - 1];
        Ok(cell.get_or_init(|| Arc::new(s)))
    }

    /// Number of per-index block streams created so far.
    #[must_use]
    pub fn streams_created(&self) -> usize {
        self.streams.iter().filter(|s| s.get().is_some()).count()
    }

    /// Positioned read of group-relative `pos` into `buf`; returns the bytes
    /// read, short only at the end of the group (0 at or past it).
    pub(crate) async fn read_at(
        &self,
        pos: u64,
        buf: &mut [u8],
    ) -> std::result::Result<usize, EcReadError> {
        let len = self.layout.group_len();
        if pos >= len || buf.is_empty() {
            return Ok(0);
        }
        let n = usize::try_from((len - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let spans: Vec<_> = self
            .layout
            .cells_for_range(pos..pos + n as u64)
            .map_err(ClientError::from)?
            .collect();
        let mut pieces = Vec::with_capacity(spans.len());
        let mut rest = &mut buf[..n];
        for span in &spans {
            let (piece, tail) = rest.split_at_mut(usize::try_from(span.len).unwrap_or(usize::MAX));
            pieces.push((span, piece));
            rest = tail;
        }
        if self.parallel && pieces.len() > 1 {
            try_join_all(pieces.into_iter().map(|(span, piece)| {
                self.read_span(span.replica_index, span.offset_in_block, piece)
            }))
            .await?;
        } else {
            for (span, piece) in pieces {
                self.read_span(span.replica_index, span.offset_in_block, piece)
                    .await?;
            }
        }
        Ok(n)
    }

    async fn read_span(
        &self,
        r: usize,
        offset: u64,
        piece: &mut [u8],
    ) -> std::result::Result<(), EcReadError> {
        let stream = self.stream(r)?;
        let uuid = || {
            self.locations
                .get(r - 1)
                .and_then(Option::as_ref)
                .map(|l| l.uuid.clone())
                .unwrap_or_default()
        };
        let replica_index = u32::try_from(r).unwrap_or(u32::MAX);
        match stream.read_at(offset, piece).await {
            Ok(got) if got == piece.len() => Ok(()),
            Ok(got) => Err(EcReadError::Location(IndexFailure {
                replica_index,
                datanode_uuid: uuid(),
                error: BlockStreamError::ShortRead {
                    block: stream.block_id(),
                    datanode: stream.locations().next().unwrap_or_default().to_string(),
                    offset,
                    expected: piece.len() as u64,
                    got: got as u64,
                },
            })),
            Err(e) if e.is_location_failure() => Err(EcReadError::Location(IndexFailure {
                replica_index,
                datanode_uuid: uuid(),
                error: e,
            })),
            Err(e) => Err(EcReadError::Fatal(e.into())),
        }
    }
}
