//! [`EcBlockInputStream`]: reads one EC block group from its data indexes.
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

use block_stream::BlockTokenSource;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use block_stream::{BlockInputStream, BlockStreamError, RetryPolicy, XceiverClient};
use ec_codec::{BlockGroupLayout, EcReplicationConfig, ReplicaIndex};
use futures::future::try_join_all;
use proto_crate::{BlockGroup, DatanodeId};

use crate::metrics::EcReadMetrics;
use crate::read_context::ReadContext;
use crate::{ClientError, Result};

/// A read failure pinned on one replica index of a group.
#[derive(Debug)]
pub(crate) struct IndexFailure {
    /// The index that failed.
    pub(crate) replica_index: ReplicaIndex,
    /// The datanode that failed (`None` if the index had no location).
    pub(crate) datanode: Option<DatanodeId>,
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
    pub(crate) uuid: DatanodeId,
    pub(crate) client: XceiverClient,
}

/// Lists, for every replica index 1..=d+p, the locations of the group's
/// pipeline that are not in `excluded` ((replica index, datanode uuid)
/// pairs), primary first then spare replicas.
///
/// Each location's client sends `token`'s block token (security on).
pub(crate) fn choose_locations(
    ctx: &ReadContext,
    group: &BlockGroup,
    ec: &EcReplicationConfig,
    excluded: &HashSet<(ReplicaIndex, DatanodeId)>,
    token: Option<&Arc<BlockTokenSource>>,
) -> Result<Vec<Vec<IndexLocation>>> {
    let mut out = Vec::with_capacity(ec.total());
    for r in ec.replica_indexes() {
        let mut usable = Vec::new();
        for d in group.pipeline.nodes_for(r) {
            if !excluded.contains(&(r, d.uuid.clone())) {
                usable.push(IndexLocation {
                    uuid: d.uuid.clone(),
                    client: ctx.xceivers.client(&d.address)?.with_token(token.cloned()),
                });
            }
        }
        out.push(usable);
    }
    Ok(out)
}

/// How many of an index's usable locations its block stream may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocationUse {
    /// Only the first: a failure surfaces, so the proxy can count it and
    /// switch readers (the striped reader).
    First,
    /// All of them, in order: an index is lost only when every copy failed
    /// (the reconstruction reader).
    All,
}

/// Lazily created, cached [`BlockInputStream`]s of one group's replica
/// indexes, shared by both EC readers.
#[derive(Debug)]
pub(crate) struct IndexStreams {
    group: BlockGroup,
    layout: BlockGroupLayout,
    locations: Vec<Vec<IndexLocation>>,
    streams: Vec<OnceLock<Arc<BlockInputStream>>>,
    retry: RetryPolicy,
    usage: LocationUse,
}

impl IndexStreams {
    /// Streams for replica indexes 1..=`count` of `group`, at `locations`
    /// (index r at `locations[r.unit()]`), using them as `usage` says.
    pub(crate) fn new(
        ctx: &ReadContext,
        group: &BlockGroup,
        layout: BlockGroupLayout,
        locations: Vec<Vec<IndexLocation>>,
        count: usize,
        usage: LocationUse,
    ) -> Self {
        Self {
            group: group.clone(),
            layout,
            locations,
            streams: (0..count).map(|_| OnceLock::new()).collect(),
            retry: ctx.config.xceiver.retry,
            usage,
        }
    }

    pub(crate) fn layout(&self) -> &BlockGroupLayout {
        &self.layout
    }

    pub(crate) fn group(&self) -> &BlockGroup {
        &self.group
    }

    fn index_locations(&self, r: ReplicaIndex) -> &[IndexLocation] {
        self.locations.get(r.unit()).map_or(&[], Vec::as_slice)
    }

    /// `HOST:PORT` of index `r`'s first location, or "" when it has none.
    pub(crate) fn address(&self, r: ReplicaIndex) -> String {
        self.index_locations(r)
            .first()
            .map(|l| l.client.address().to_string())
            .unwrap_or_default()
    }

    /// Uuid of the location of index `r` that `error` came from (the first
    /// location when the error names none).
    fn uuid_of(&self, r: ReplicaIndex, error: &BlockStreamError) -> Option<DatanodeId> {
        let locs = self.index_locations(r);
        error
            .datanode()
            .and_then(|a| locs.iter().find(|l| l.client.address() == a))
            .or_else(|| locs.first())
            .map(|l| l.uuid.clone())
    }

    /// The cached stream of replica index `r`, created on first use.
    fn stream(&self, r: ReplicaIndex) -> std::result::Result<&Arc<BlockInputStream>, EcReadError> {
        let slot = self.streams.get(r.unit()).ok_or_else(|| {
            EcReadError::Fatal(ClientError::Internal(format!(
                "replica index {r} out of range"
            )))
        })?;
        if let Some(s) = slot.get() {
            return Ok(s);
        }
        let locs = self.index_locations(r);
        if locs.is_empty() {
            return Err(EcReadError::Location(IndexFailure {
                replica_index: r,
                datanode: None,
                error: BlockStreamError::InvalidArgument(format!(
                    "block group {} has no usable location for replica index {r}",
                    self.group.id()
                )),
            }));
        }
        let clients: Vec<_> = match self.usage {
            LocationUse::First => locs.iter().take(1).map(|l| l.client.clone()).collect(),
            LocationUse::All => locs.iter().map(|l| l.client.clone()).collect(),
        };
        let len = self
            .layout
            .internal_block_len(r)
            .map_err(ClientError::from)?;
        let s = BlockInputStream::new(self.group.block_id(r), len, clients, self.retry)
            .map_err(ClientError::from)?;
        Ok(slot.get_or_init(|| Arc::new(s)))
    }

    /// Reads exactly `piece.len()` bytes of index `r` at block offset `offset`.
    pub(crate) async fn read(
        &self,
        r: ReplicaIndex,
        offset: u64,
        piece: &mut [u8],
    ) -> std::result::Result<(), EcReadError> {
        let stream = self.stream(r)?;
        let replica_index = r;
        match stream.read_at(offset, piece).await {
            Ok(got) if got == piece.len() => Ok(()),
            Ok(got) => {
                let error = BlockStreamError::ShortRead {
                    block: stream.block_id(),
                    datanode: self.address(r),
                    offset,
                    expected: piece.len() as u64,
                    got: got as u64,
                };
                Err(EcReadError::Location(IndexFailure {
                    replica_index,
                    datanode: self.uuid_of(r, &error),
                    error,
                }))
            }
            Err(e) if e.is_location_failure() => Err(EcReadError::Location(IndexFailure {
                replica_index,
                datanode: self.uuid_of(r, &e),
                error: e,
            })),
            Err(e) => Err(EcReadError::Fatal(e.into())),
        }
    }
}

/// Splits `buf` into consecutive pieces of the given lengths.
pub(crate) fn split_pieces(
    mut buf: &mut [u8],
    lens: impl IntoIterator<Item = u64>,
) -> Vec<&mut [u8]> {
    let mut out = Vec::new();
    for len in lens {
        let n = usize::try_from(len).unwrap_or(usize::MAX).min(buf.len());
        let (piece, tail) = buf.split_at_mut(n);
        out.push(piece);
        buf = tail;
    }
    out
}

/// Reads an EC block group through its data indexes' cached block streams.
#[derive(Debug)]
pub struct EcBlockInputStream {
    streams: IndexStreams,
    parallel: bool,
}

impl EcBlockInputStream {
    /// A reader of `group` (of length `group.length`) under `ec`, avoiding the
    /// `excluded` (replica index, datanode uuid) locations. No RPC is made;
    /// counts one EC reader created.
    pub(crate) fn new(
        ctx: &ReadContext,
        group: &BlockGroup,
        ec: EcReplicationConfig,
        excluded: &HashSet<(ReplicaIndex, DatanodeId)>,
        token: Option<&Arc<BlockTokenSource>>,
    ) -> Result<Self> {
        let locations = choose_locations(ctx, group, &ec, excluded, token)?;
        EcReadMetrics::inc(&ctx.ec_metrics.ec_readers_created);
        Ok(Self {
            streams: IndexStreams::new(
                ctx,
                group,
                BlockGroupLayout::new(ec, group.length),
                locations,
                ec.data(),
                LocationUse::First,
            ),
            parallel: ctx.config.parallel_cell_reads,
        })
    }

    /// Group length, data bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.streams.layout().group_len()
    }

    /// Positioned read of group-relative `pos` into `buf`; returns the bytes
    /// read, short only at the end of the group (0 at or past it).
    pub(crate) async fn read_at(
        &self,
        pos: u64,
        buf: &mut [u8],
    ) -> std::result::Result<usize, EcReadError> {
        let len = self.len();
        if pos >= len || buf.is_empty() {
            return Ok(0);
        }
        let n = usize::try_from((len - pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let spans: Vec<_> = self
            .streams
            .layout()
            .cells_for_range(pos..pos + n as u64)
            .map_err(ClientError::from)?
            .collect();
        let pieces = split_pieces(&mut buf[..n], spans.iter().map(|s| s.len));
        let reads = spans.iter().zip(pieces).map(|(span, piece)| {
            self.streams
                .read(span.replica_index, span.offset_in_block, piece)
        });
        if self.parallel && spans.len() > 1 {
            try_join_all(reads).await?;
        } else {
            for r in reads {
                r.await?;
            }
        }
        Ok(n)
    }
}
