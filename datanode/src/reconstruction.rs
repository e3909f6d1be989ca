//! [`EcReconstructionCoordinator`]: rebuilds lost internal blocks of one EC block group (Ozone's
//! `ECReconstructionCoordinator`, run by the datanode that the om's repair picks).
//!
//! Given the group's length, its scheme, the surviving copies (`sources`) and one target datanode
//! per index to rebuild, the coordinator:
//!
//! 1. opens every source with GetBlock (a source that fails is skipped),
//! 2. for each stripe, reads d usable units — surviving data indexes first, then parity; an index
//!    whose cell in that stripe is empty (padding) is known zeros and needs no source — through
//!    [`BlockInputStream`], which verifies every byte against its stored checksums; a source that
//!    fails (unreachable, short, corrupt) is skipped and the stripe re-planned with another index,
//! 3. decodes the missing cells with the scheme's codec,
//! 4. writes each rebuilt cell's real bytes (never padding) as the next chunk of the target block
//!    through [`BlockOutputStream`], with the checksum type and `bytesPerChecksum` of the sources,
//! 5. commits each target with one eof PutBlock carrying `blockGroupLength`, and checks that the
//!    committed length is what [`BlockGroupLayout::internal_block_len`] gives — the length the
//!    write path commits (parity as long as index 1; a padding index an empty record).
//!
//! Reads and writes are pipelined: a stripe's rebuilt cells are written (to every target at
//! once) while the next stripe is read. Memory is two stripes — d source cells and one cell per
//! target each — whatever the block size. The number of reconstructions a datanode runs at once
//! is bounded (the rest wait their turn).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use block_stream::{
    BlockInputStream, BlockOutputStream, BlockStreamError, WriteOrigin, XceiverClientManager,
    XceiverConfig,
};
use bytes::Bytes;
use ec_codec::{BlockGroupLayout, EcError, EcReplicationConfig, ReplicaIndex};
use futures::future::join_all;
use proto_crate::wire::datanode as pb;
use proto_crate::{
    BLOCK_GROUP_LENGTH_KEY, BlockCommit, BlockId, ChecksumType, ReplicationConfig, ResultCode,
};
use tokio::sync::Semaphore;

/// Reconstructions one datanode runs at once by default; more wait.
pub const DEFAULT_MAX_RECONSTRUCTIONS: usize = 2;

/// One replica index at one datanode (`HOST:PORT`).
pub type IndexAddress = (ReplicaIndex, String);

/// What to rebuild: the wire's `ReconstructEcGroupRequest`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcReconstructionCommand {
    /// Container of the group.
    pub container_id: u64,
    /// Local id shared by the group's internal blocks.
    pub local_id: u64,
    /// The group's data length in bytes (its `blockGroupLength`).
    pub group_length: u64,
    /// The scheme.
    pub ec: EcReplicationConfig,
    /// Surviving copies, each index possibly more than once.
    pub sources: Vec<IndexAddress>,
    /// The indexes to rebuild and where each goes; each index once.
    pub targets: Vec<IndexAddress>,
    /// With security on: the block token the command came with (READ and
    /// WRITE on the group), sent with every source read and target write.
    /// Travels as the call's metadata, not in the message.
    pub token: Option<proto_crate::block_token::BlockToken>,
}

/// What a reconstruction did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EcReconstructionReport {
    /// Committed length in bytes of each rebuilt index, in the command's target order.
    pub rebuilt: Vec<(ReplicaIndex, u64)>,
    /// Bytes read from sources.
    pub bytes_read: u64,
    /// Sources that failed and were replaced by another index.
    pub skipped: Vec<IndexAddress>,
}

/// `skipped` for a message: `index 2 at host:port, ...`, or `none`.
fn skipped_list(skipped: &[IndexAddress]) -> String {
    if skipped.is_empty() {
        return "none".into();
    }
    skipped
        .iter()
        .map(|(i, address)| format!("index {i} at {address}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a reconstruction did not complete. Targets may then hold a partial, uncommitted or
/// unreferenced block; the om never points a location at it and logs the targets for
/// deletion (unless the om itself stops or crashes first: then the block stays until a
/// later repair reuses the target).
#[derive(Debug, thiserror::Error)]
pub enum ReconstructionError {
    /// The command itself is malformed.
    #[error("invalid reconstruction command: {0}")]
    InvalidCommand(String),
    /// Fewer than d indexes of a stripe are readable (after skipping failed sources).
    #[error(
        "group {container_id}:{local_id} stripe {stripe}: {usable} of {needed} source indexes \
         usable (skipped: {})",
        skipped_list(skipped)
    )]
    InsufficientSources {
        /// Container of the group.
        container_id: u64,
        /// Local id of the group.
        local_id: u64,
        /// The stripe that could not be decoded (0-based).
        stripe: u64,
        /// Indexes usable for it.
        usable: usize,
        /// Indexes needed (d).
        needed: usize,
        /// Sources skipped so far.
        skipped: Vec<IndexAddress>,
    },
    /// Writing or committing a target failed.
    #[error("target {index} at {address}: {source}")]
    Target {
        /// The index being rebuilt.
        index: ReplicaIndex,
        /// Its target datanode.
        address: String,
        /// What failed.
        #[source]
        source: BlockStreamError,
    },
    /// The codec refused (a bug: the plan always gives it d units).
    #[error(transparent)]
    Codec(#[from] EcError),
}

impl ReconstructionError {
    /// The result code the datanode answers with.
    #[must_use]
    pub fn code(&self) -> ResultCode {
        match self {
            Self::InvalidCommand(_) => ResultCode::InvalidArgument,
            Self::InsufficientSources { .. } => ResultCode::InsufficientSources,
            Self::Target { source, .. } => match source {
                BlockStreamError::Datanode { code, .. } => *code,
                _ => ResultCode::Unavailable,
            },
            Self::Codec(_) => ResultCode::Internal,
        }
    }
}

fn index_of(
    r: u32,
    ec: &EcReplicationConfig,
    what: &str,
) -> Result<ReplicaIndex, ReconstructionError> {
    ReplicaIndex::new(r)
        .filter(|i| i.unit() < ec.total())
        .ok_or_else(|| {
            ReconstructionError::InvalidCommand(format!(
                "{what} index {r} is outside 1..={} of {ec}",
                ec.total()
            ))
        })
}

fn addresses(
    list: Vec<pb::IndexAddress>,
    ec: &EcReplicationConfig,
    what: &str,
) -> Result<Vec<IndexAddress>, ReconstructionError> {
    list.into_iter()
        .map(|a| {
            if a.address.is_empty() {
                return Err(ReconstructionError::InvalidCommand(format!(
                    "{what} index {} has no address",
                    a.replica_index
                )));
            }
            Ok((index_of(a.replica_index, ec, what)?, a.address))
        })
        .collect()
}

impl TryFrom<pb::ReconstructEcGroupRequest> for EcReconstructionCommand {
    type Error = ReconstructionError;

    /// # Errors
    /// [`ReconstructionError::InvalidCommand`] for a scheme that is not EC, an index outside
    /// `1..=d+p`, an empty address, no target, a target index named twice, or more targets
    /// than parity units.
    fn try_from(r: pb::ReconstructEcGroupRequest) -> Result<Self, ReconstructionError> {
        let ec = match r.replication.parse::<ReplicationConfig>() {
            Ok(ReplicationConfig::Ec(ec)) => ec,
            Ok(other) => {
                return Err(ReconstructionError::InvalidCommand(format!(
                    "{other} is not an EC scheme"
                )));
            }
            Err(e) => return Err(ReconstructionError::InvalidCommand(e.to_string())),
        };
        let sources = addresses(r.sources, &ec, "source")?;
        let targets = addresses(r.targets, &ec, "target")?;
        if targets.is_empty() {
            return Err(ReconstructionError::InvalidCommand("no target".into()));
        }
        let distinct: BTreeSet<ReplicaIndex> = targets.iter().map(|(i, _)| *i).collect();
        if distinct.len() != targets.len() {
            return Err(ReconstructionError::InvalidCommand(
                "a target index is named twice".into(),
            ));
        }
        if targets.len() > ec.parity() {
            return Err(ReconstructionError::InvalidCommand(format!(
                "{} targets, but {ec} can rebuild at most {}",
                targets.len(),
                ec.parity()
            )));
        }
        Ok(Self {
            container_id: r.container_id,
            local_id: r.local_id,
            group_length: r.group_length,
            ec,
            sources,
            targets,
            token: None,
        })
    }
}

impl From<EcReconstructionCommand> for pb::ReconstructEcGroupRequest {
    fn from(c: EcReconstructionCommand) -> Self {
        let wire = |list: Vec<IndexAddress>| {
            list.into_iter()
                .map(|(i, address)| pb::IndexAddress {
                    replica_index: i.get(),
                    address,
                })
                .collect()
        };
        Self {
            container_id: c.container_id,
            local_id: c.local_id,
            group_length: c.group_length,
            replication: c.ec.to_string(),
            sources: wire(c.sources),
            targets: wire(c.targets),
        }
    }
}

impl From<EcReconstructionReport> for pb::ReconstructEcGroupResponse {
    fn from(r: EcReconstructionReport) -> Self {
        Self {
            rebuilt: r
                .rebuilt
                .into_iter()
                .map(|(i, length)| pb::IndexLength {
                    replica_index: i.get(),
                    length,
                })
                .collect(),
            bytes_read: r.bytes_read,
            skipped: r
                .skipped
                .into_iter()
                .map(|(i, address)| pb::IndexAddress {
                    replica_index: i.get(),
                    address,
                })
                .collect(),
        }
    }
}

/// Runs reconstructions on this datanode, at most a fixed number at once.
#[derive(Debug)]
pub struct EcReconstructionCoordinator {
    xceivers: XceiverClientManager,
    permits: Semaphore,
}

impl Default for EcReconstructionCoordinator {
    fn default() -> Self {
        Self::new(XceiverConfig::default(), DEFAULT_MAX_RECONSTRUCTIONS)
    }
}

/// One source copy being read.
struct Source {
    index: ReplicaIndex,
    address: String,
    stream: BlockInputStream,
}

impl EcReconstructionCoordinator {
    /// A coordinator whose reads and writes use `config` (timeouts, retries), running at most
    /// `max_at_once` reconstructions at a time (at least 1). Its reads always verify checksums,
    /// whatever `config` says: a corrupt source must fail, not be rebuilt into a new replica.
    #[must_use]
    pub fn new(config: XceiverConfig, max_at_once: usize) -> Self {
        Self {
            xceivers: XceiverClientManager::new(config.with_verify_checksum(true), Arc::default()),
            permits: Semaphore::new(max_at_once.max(1)),
        }
    }

    /// Rebuilds `cmd.targets` from `cmd.sources`; see the module documentation.
    ///
    /// # Errors
    /// [`ReconstructionError::InsufficientSources`] when a stripe has fewer than d usable
    /// indexes; [`ReconstructionError::Target`] when a target cannot be written or committed.
    pub async fn reconstruct(
        &self,
        cmd: &EcReconstructionCommand,
    ) -> Result<EcReconstructionReport, ReconstructionError> {
        let _permit =
            self.permits.acquire().await.map_err(|_| {
                ReconstructionError::InvalidCommand("datanode shutting down".into())
            })?;
        let ec = cmd.ec;
        let layout = BlockGroupLayout::new(ec, cmd.group_length);
        let group = BlockId {
            container_id: cmd.container_id,
            local_id: cmd.local_id,
            replica_index: None,
        };
        let target_set: BTreeSet<ReplicaIndex> = cmd.targets.iter().map(|(i, _)| *i).collect();
        let mut report = EcReconstructionReport::default();

        // Open every source copy that is not itself a target, all at once (an unreachable one
        // costs one connect timeout, not one each); the first of an index that answers GetBlock
        // with the group's length and the layout's block length serves it, the rest of that
        // index's copies stay in reserve.
        let mut sources: BTreeMap<ReplicaIndex, Vec<Source>> = BTreeMap::new();
        let mut checksum: Option<(ChecksumType, u32)> = None;
        let opening = cmd
            .sources
            .iter()
            .filter(|(index, _)| !target_set.contains(index))
            .map(|(index, address)| async move {
                let opened = async {
                    let client = self
                        .xceivers
                        .client(address)?
                        .with_fixed_token(cmd.token.as_ref());
                    let expected = layout.internal_block_len(*index).unwrap_or(0);
                    let stream = BlockInputStream::new(
                        group.with_replica_index(*index),
                        expected,
                        vec![client],
                        self.xceivers.config().retry,
                    )?;
                    let data = stream.block_data().await?;
                    if data.size != expected
                        || data
                            .block_group_length()
                            .is_some_and(|l| l != cmd.group_length)
                    {
                        return Err(BlockStreamError::InvalidArgument(format!(
                            "{} at {address} holds {} bytes of a {:?}-byte group; the group is \
                             {} bytes, so this index holds {expected}",
                            stream.block_id(),
                            data.size,
                            data.block_group_length(),
                            cmd.group_length
                        )));
                    }
                    Ok::<_, BlockStreamError>((stream, data))
                }
                .await;
                (*index, address, opened)
            });
        for (index, address, opened) in join_all(opening).await {
            let index = &index;
            match opened {
                Ok((stream, data)) => {
                    if let Some(c) = data.chunks.first() {
                        checksum.get_or_insert((c.checksum.ty, c.checksum.bytes_per_checksum));
                    }
                    sources.entry(*index).or_default().push(Source {
                        index: *index,
                        address: address.clone(),
                        stream,
                    });
                }
                Err(e) => {
                    tracing::warn!(block = %group.with_replica_index(*index), %address, error = %e, "reconstruction source skipped");
                    report.skipped.push((*index, address.clone()));
                }
            }
        }
        let defaults = self.xceivers.config();
        let (checksum_type, bytes_per_checksum) =
            checksum.unwrap_or((defaults.checksum_type, defaults.bytes_per_checksum));

        let mut writers = Vec::with_capacity(cmd.targets.len());
        for (index, address) in &cmd.targets {
            let target_error = |source| ReconstructionError::Target {
                index: *index,
                address: address.clone(),
                source,
            };
            let client = self
                .xceivers
                .client(address)
                .map_err(target_error)?
                .with_fixed_token(cmd.token.as_ref());
            let w = BlockOutputStream::new(
                group.with_replica_index(*index),
                vec![client],
                checksum_type,
                bytes_per_checksum,
            )
            .map_err(target_error)?
            .with_origin(WriteOrigin::Repair);
            writers.push((*index, address.clone(), w));
        }

        // Pipelined: stripe n's rebuilt cells are written while stripe n+1 is read (two
        // stripes in memory at most).
        let coder = ec.coder();
        let stripes = layout.stripe_count();
        let width_of = |stripe: u64| -> Result<usize, ReconstructionError> {
            Ok(
                usize::try_from(layout.cell_len(stripe, ReplicaIndex::FIRST)?)
                    .unwrap_or(usize::MAX),
            )
        };
        let mut next = if stripes > 0 {
            let w = width_of(0)?;
            Some(
                self.read_stripe(cmd, &layout, 0, w, &target_set, &mut sources, &mut report)
                    .await?,
            )
        } else {
            None
        };
        for stripe in 0..stripes {
            let Some((units, bufs)) = next.take() else {
                break;
            };
            let width = width_of(stripe)?;
            let mut present: Vec<Option<&[u8]>> = vec![None; ec.total()];
            for (r, buf) in units.iter().zip(&bufs) {
                if let Some(slot) = present.get_mut(r.unit()) {
                    *slot = Some(buf.as_slice());
                }
            }
            let wanted: Vec<usize> = writers.iter().map(|(i, _, _)| i.unit()).collect();
            let mut decoded: Vec<Vec<u8>> = wanted.iter().map(|_| vec![0u8; width]).collect();
            {
                let mut outs: Vec<&mut [u8]> = decoded.iter_mut().map(Vec::as_mut_slice).collect();
                coder.reconstruct(&present, &wanted, &mut outs)?;
            }
            drop(present);
            drop(bufs);
            let mut cells = Vec::with_capacity(decoded.len());
            for ((index, _, _), mut cell) in writers.iter().zip(decoded) {
                cell.truncate(usize::try_from(layout.cell_len(stripe, *index)?).unwrap_or(0));
                cells.push(Bytes::from(cell));
            }
            let write =
                async {
                    let writes = writers.iter_mut().zip(cells).map(
                        |((index, address, w), cell)| async move {
                            w.write_chunk(cell).await.map_err(|source| {
                                ReconstructionError::Target {
                                    index: *index,
                                    address: address.clone(),
                                    source,
                                }
                            })
                        },
                    );
                    join_all(writes)
                        .await
                        .into_iter()
                        .collect::<Result<Vec<()>, _>>()
                };
            if stripe + 1 < stripes {
                let w = width_of(stripe + 1)?;
                let read = self.read_stripe(
                    cmd,
                    &layout,
                    stripe + 1,
                    w,
                    &target_set,
                    &mut sources,
                    &mut report,
                );
                let (written, read) = tokio::join!(write, read);
                written?;
                next = Some(read?);
            } else {
                write.await?;
            }
        }

        let mut meta = BTreeMap::new();
        meta.insert(
            BLOCK_GROUP_LENGTH_KEY.to_string(),
            cmd.group_length.to_string(),
        );
        for (index, address, w) in &mut writers {
            w.put_block(&meta, BlockCommit::Close)
                .await
                .map_err(|source| ReconstructionError::Target {
                    index: *index,
                    address: address.clone(),
                    source,
                })?;
            // Each cell written was the layout's cell length and PutBlock checked that the
            // datanode committed all of it: this is the write path's length.
            report.rebuilt.push((*index, w.committed()));
        }
        Ok(report)
    }

    /// Reads d units of `stripe` into `width`-byte buffers (zero-padded past each cell's real
    /// length), re-planning after each failed source; a re-plan keeps the units it already
    /// read and reads only the ones it adds. Returns the units and their buffers.
    #[allow(clippy::too_many_arguments)]
    async fn read_stripe(
        &self,
        cmd: &EcReconstructionCommand,
        layout: &BlockGroupLayout,
        stripe: u64,
        width: usize,
        targets: &BTreeSet<ReplicaIndex>,
        sources: &mut BTreeMap<ReplicaIndex, Vec<Source>>,
        report: &mut EcReconstructionReport,
    ) -> Result<(Vec<ReplicaIndex>, Vec<Vec<u8>>), ReconstructionError> {
        let ec = cmd.ec;
        let cell = ec.cell_size();
        // Units already read (and verified) in this stripe: a re-plan after a
        // failed source reads only the units it adds, not the d-1 it has.
        let mut have: BTreeMap<ReplicaIndex, Vec<u8>> = BTreeMap::new();
        loop {
            // Usable: a padding cell (known zeros) or an index with a source left.
            let units: Vec<ReplicaIndex> = ec
                .replica_indexes()
                .filter(|r| !targets.contains(r))
                .filter(|&r| {
                    layout.cell_len(stripe, r).is_ok_and(|l| l == 0)
                        || sources.get(&r).is_some_and(|s| !s.is_empty())
                })
                .take(ec.data())
                .collect();
            if units.len() < ec.data() {
                return Err(ReconstructionError::InsufficientSources {
                    container_id: cmd.container_id,
                    local_id: cmd.local_id,
                    stripe,
                    usable: units.len(),
                    needed: ec.data(),
                    skipped: report.skipped.clone(),
                });
            }
            let read_before: BTreeSet<ReplicaIndex> = units
                .iter()
                .copied()
                .filter(|r| have.contains_key(r))
                .collect();
            let mut bufs: Vec<Vec<u8>> = units
                .iter()
                .map(|r| have.remove(r).unwrap_or_else(|| vec![0u8; width]))
                .collect();
            let mut reads = Vec::new();
            for (r, buf) in units.iter().zip(bufs.iter_mut()) {
                let real = usize::try_from(layout.cell_len(stripe, *r)?).unwrap_or(0);
                if real == 0 || read_before.contains(r) {
                    continue;
                }
                let Some(source) = sources.get(r).and_then(|s| s.first()) else {
                    continue;
                };
                let piece = &mut buf[..real.min(width)];
                reads.push(async move {
                    let offset = stripe * cell;
                    let got = source.stream.read_at(offset, piece).await;
                    (source, offset, piece.len(), got)
                });
            }
            let mut failed = Vec::new();
            for (source, offset, want, got) in join_all(reads).await {
                match got {
                    Ok(n) if n == want => report.bytes_read += n as u64,
                    Ok(n) => failed.push((
                        source.index,
                        BlockStreamError::ShortRead {
                            block: source.stream.block_id(),
                            datanode: source.address.clone(),
                            offset,
                            expected: want as u64,
                            got: n as u64,
                        },
                    )),
                    Err(e) => failed.push((source.index, e)),
                }
            }
            if failed.is_empty() {
                return Ok((units, bufs));
            }
            let failed_indexes: BTreeSet<ReplicaIndex> = failed.iter().map(|(r, _)| *r).collect();
            for (r, buf) in units.iter().zip(bufs) {
                if !failed_indexes.contains(r) {
                    have.insert(*r, buf);
                }
            }
            for (index, error) in failed {
                if let Some(list) = sources.get_mut(&index)
                    && !list.is_empty()
                {
                    let s = list.remove(0);
                    tracing::warn!(block = %s.stream.block_id(), address = %s.address, %error, "reconstruction source failed; re-planning the stripe");
                    report.skipped.push((index, s.address));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_sources_names_the_skipped_ones_plainly() {
        let err = |skipped: Vec<IndexAddress>| ReconstructionError::InsufficientSources {
            container_id: 3,
            local_id: 9,
            stripe: 2,
            usable: 2,
            needed: 3,
            skipped,
        };
        let two = ReplicaIndex::new(2).expect("index 2");
        assert_eq!(
            err(vec![(two, "127.0.0.1:9000".into())]).to_string(),
            "group 3:9 stripe 2: 2 of 3 source indexes usable \
             (skipped: index 2 at 127.0.0.1:9000)"
        );
        assert!(err(Vec::new()).to_string().ends_with("(skipped: none)"));
    }
}
