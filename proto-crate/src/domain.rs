//! Domain types and their wire conversions.
//!
//! From the wire: `TryFrom<wire type>` with [`ProtocolError`]; to the wire:
//! `From<domain type>`. Required fields are not `Option` here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use ec_codec::{EcReplicationConfig, ReplicaIndex};

use crate::block_token::BlockToken;
use crate::wire::{datanode as dn, om};
use crate::{DatanodeId, ProtocolError};

/// Metadata key under which every internal block of an EC block group records
/// the group's data length (Ozone's `blockGroupLength`).
pub const BLOCK_GROUP_LENGTH_KEY: &str = "blockGroupLength";

fn required<T>(v: Option<T>, field: &'static str) -> Result<T, ProtocolError> {
    v.ok_or(ProtocolError::MissingField(field))
}

/// Identity of one (internal) block on a datanode: container, local id and
/// replica index (as Ozone's `BlockID`; the wire's replica index 0, a replicated block, is
/// `None` here).
///
/// Displayed as `container:local` for a replicated block (and for a whole EC block group, see
/// [`BlockGroup::id`]) and `container:local#index` for an EC internal block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId {
    /// Container holding the block.
    pub container_id: u64,
    /// Block id, unique within the cluster.
    pub local_id: u64,
    /// `None` for replicated blocks; for EC, `1..=d` data and `d+1..=d+p` parity.
    pub replica_index: Option<ReplicaIndex>,
}

impl BlockId {
    /// The same block with another replica index (an EC group's internal blocks
    /// share container and local id).
    #[must_use]
    pub fn with_replica_index(self, replica_index: ReplicaIndex) -> Self {
        Self {
            replica_index: Some(replica_index),
            ..self
        }
    }
}

/// `container C local id L` and, for one index of an EC group, `replica index R`: how
/// messages name a block (Ozone's `BlockID` prints the same three numbers).
impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "container {} local id {}",
            self.container_id, self.local_id
        )?;
        match self.replica_index {
            Some(r) => write!(f, " replica index {r}"),
            None => Ok(()),
        }
    }
}

impl From<dn::BlockId> for BlockId {
    fn from(b: dn::BlockId) -> Self {
        Self {
            container_id: b.container_id,
            local_id: b.local_id,
            replica_index: ReplicaIndex::from_wire(b.replica_index),
        }
    }
}

impl From<BlockId> for dn::BlockId {
    fn from(b: BlockId) -> Self {
        Self {
            container_id: b.container_id,
            local_id: b.local_id,
            replica_index: ReplicaIndex::to_wire(b.replica_index),
        }
    }
}

/// Checksum algorithm of a chunk (Ozone's `ChecksumType`; CRC32 is its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ChecksumType {
    /// No checksums are kept.
    None,
    /// CRC-32 (IEEE), Ozone's default.
    #[default]
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
}

impl TryFrom<i32> for ChecksumType {
    type Error = ProtocolError;
    fn try_from(v: i32) -> Result<Self, ProtocolError> {
        match dn::ChecksumType::try_from(v) {
            Ok(dn::ChecksumType::None) => Ok(Self::None),
            Ok(dn::ChecksumType::Crc32) => Ok(Self::Crc32),
            Ok(dn::ChecksumType::Crc32c) => Ok(Self::Crc32c),
            Ok(dn::ChecksumType::Unspecified) | Err(_) => Err(ProtocolError::InvalidField {
                field: "checksum_data.type",
                reason: format!("unknown checksum type {v}"),
            }),
        }
    }
}

impl From<ChecksumType> for dn::ChecksumType {
    fn from(t: ChecksumType) -> Self {
        match t {
            ChecksumType::None => Self::None,
            ChecksumType::Crc32 => Self::Crc32,
            ChecksumType::Crc32c => Self::Crc32c,
        }
    }
}

/// Checksums of one chunk: one value per `bytes_per_checksum` window, the last
/// window possibly short (Ozone's `ChecksumData`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChecksumData {
    /// Algorithm.
    pub ty: ChecksumType,
    /// Window size in bytes (Ozone's bytesPerChecksum; default 16 KiB). Never 0
    /// unless `ty` is [`ChecksumType::None`].
    pub bytes_per_checksum: u32,
    /// One checksum per window, in chunk order.
    pub checksums: Vec<u32>,
}

impl TryFrom<dn::ChecksumData> for ChecksumData {
    type Error = ProtocolError;
    fn try_from(c: dn::ChecksumData) -> Result<Self, ProtocolError> {
        let ty = ChecksumType::try_from(c.r#type)?;
        if ty != ChecksumType::None && c.bytes_per_checksum == 0 {
            return Err(ProtocolError::InvalidField {
                field: "checksum_data.bytes_per_checksum",
                reason: "must be positive".into(),
            });
        }
        Ok(Self {
            ty,
            bytes_per_checksum: c.bytes_per_checksum,
            checksums: c.checksums,
        })
    }
}

impl From<ChecksumData> for dn::ChecksumData {
    fn from(c: ChecksumData) -> Self {
        Self {
            r#type: dn::ChecksumType::from(c.ty) as i32,
            bytes_per_checksum: c.bytes_per_checksum,
            checksums: c.checksums,
        }
    }
}

/// One chunk of a block: a contiguous byte range written by one WriteChunk,
/// with its checksums (Ozone's `ChunkInfo`). `offset` is relative to the start
/// of the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Name, unique within the block (informational).
    pub name: String,
    /// Offset of the chunk's first byte inside the block, bytes.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Checksums of the chunk's bytes.
    pub checksum: ChecksumData,
}

impl ChunkInfo {
    /// Block-relative offset one past the chunk's last byte.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

impl TryFrom<dn::ChunkInfo> for ChunkInfo {
    type Error = ProtocolError;
    fn try_from(c: dn::ChunkInfo) -> Result<Self, ProtocolError> {
        check_extent(&c)?;
        Ok(Self {
            name: c.chunk_name,
            offset: c.offset,
            len: c.len,
            checksum: required(c.checksum_data, "chunk.checksum_data")?.try_into()?,
        })
    }
}

fn check_extent(c: &dn::ChunkInfo) -> Result<(), ProtocolError> {
    if c.offset.checked_add(c.len).is_none() {
        return Err(ProtocolError::InvalidField {
            field: "chunk.len",
            reason: "offset + len overflows u64".into(),
        });
    }
    Ok(())
}

impl ChunkInfo {
    /// The chunk as a ReadChunk request names it: name, offset and length,
    /// with no checksum list (`ReadChunkRequest.chunk` in `datanode.proto`:
    /// the datanode does not verify reads, the client does).
    #[must_use]
    pub fn to_read_wire(&self) -> dn::ChunkInfo {
        dn::ChunkInfo {
            chunk_name: self.name.clone(),
            offset: self.offset,
            len: self.len,
            checksum_data: None,
        }
    }

    /// The chunk a ReadChunk request names: its extent (name, offset,
    /// length); a checksum list, if sent, is ignored and
    /// [`ChecksumType::None`] recorded instead.
    ///
    /// # Errors
    /// [`ProtocolError::InvalidField`] when offset + len overflows.
    pub fn from_read_wire(c: dn::ChunkInfo) -> Result<Self, ProtocolError> {
        check_extent(&c)?;
        Ok(Self {
            name: c.chunk_name,
            offset: c.offset,
            len: c.len,
            checksum: ChecksumData {
                ty: ChecksumType::None,
                bytes_per_checksum: 0,
                checksums: Vec::new(),
            },
        })
    }
}

impl From<ChunkInfo> for dn::ChunkInfo {
    fn from(c: ChunkInfo) -> Self {
        Self {
            chunk_name: c.name,
            offset: c.offset,
            len: c.len,
            checksum_data: Some(c.checksum.into()),
        }
    }
}

/// What a PutBlock asks of the datanode (`PutBlockRequest.eof` and `.sync`
/// in `datanode.proto`). Ozone's datanode syncs neither chunk files nor block
/// metadata by default (`hdds.container.chunk.write.sync=false`); here the
/// close of a block, and an explicit hsync, are durable, and intermediate
/// commits are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockCommit {
    /// The record is visible to reads on the datanode when the PutBlock
    /// returns; nothing is synced, and a datanode restart rolls the block
    /// back to its last durable record (the per-stripe commit of an EC
    /// write, each chunk of a replicated write).
    Flush,
    /// The block file and the record are durable when the PutBlock returns;
    /// the block stays open for writes (a replicated writer's `hsync`).
    Sync,
    /// As [`Sync`](Self::Sync), and the block is closed: later WriteChunks
    /// and PutBlocks to it are refused (Ozone's `eof` PutBlock).
    Close,
}

impl BlockCommit {
    /// The `(eof, sync)` flags of a `PutBlockRequest` asking for this commit.
    #[must_use]
    pub fn flags(self) -> (bool, bool) {
        match self {
            Self::Flush => (false, false),
            Self::Sync => (false, true),
            Self::Close => (true, true),
        }
    }

    /// The commit a `PutBlockRequest`'s `eof` and `sync` flags ask for.
    #[must_use]
    pub fn from_flags(eof: bool, sync: bool) -> Self {
        match (eof, sync) {
            (true, _) => Self::Close,
            (false, true) => Self::Sync,
            (false, false) => Self::Flush,
        }
    }

    /// Whether the datanode must make the record durable before answering.
    #[must_use]
    pub fn is_durable(self) -> bool {
        !matches!(self, Self::Flush)
    }
}

/// A block's committed state as recorded at PutBlock: its chunk list (sorted by
/// offset, contiguous from 0), committed size and metadata such as
/// [`BLOCK_GROUP_LENGTH_KEY`] (Ozone's `BlockData`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockData {
    /// The block.
    pub block_id: BlockId,
    /// Chunks in offset order.
    pub chunks: Vec<ChunkInfo>,
    /// Committed length of the block in bytes.
    pub size: u64,
    /// Free-form metadata.
    pub metadata: BTreeMap<String, String>,
}

impl BlockData {
    /// The EC group length recorded in [`BLOCK_GROUP_LENGTH_KEY`], if any and numeric.
    #[must_use]
    pub fn block_group_length(&self) -> Option<u64> {
        self.metadata
            .get(BLOCK_GROUP_LENGTH_KEY)
            .and_then(|v| v.parse().ok())
    }

    /// Checks the chunk list is sorted, contiguous from offset 0 and sums to
    /// `size`. Returns a description of the first violation.
    ///
    /// # Errors
    /// [`ProtocolError::InvalidField`] naming the first chunk out of place.
    pub fn validate_chunks(&self) -> Result<(), ProtocolError> {
        let mut next = 0u64;
        for c in &self.chunks {
            if c.offset != next {
                return Err(ProtocolError::InvalidField {
                    field: "block_data.chunks",
                    reason: format!(
                        "chunk {} starts at {} but the previous one ends at {next}",
                        c.name, c.offset
                    ),
                });
            }
            next = c.end();
        }
        if next != self.size {
            return Err(ProtocolError::InvalidField {
                field: "block_data.size",
                reason: format!("size {} but chunks cover {next} bytes", self.size),
            });
        }
        Ok(())
    }
}

impl TryFrom<dn::BlockData> for BlockData {
    type Error = ProtocolError;
    fn try_from(b: dn::BlockData) -> Result<Self, ProtocolError> {
        let chunks = b
            .chunks
            .into_iter()
            .map(ChunkInfo::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            block_id: required(b.block_id, "block_data.block_id")?.into(),
            chunks,
            size: b.size,
            metadata: b
                .metadata
                .into_iter()
                .map(|kv| (kv.key, kv.value))
                .collect(),
        })
    }
}

impl From<BlockData> for dn::BlockData {
    fn from(b: BlockData) -> Self {
        Self {
            block_id: Some(b.block_id.into()),
            chunks: b.chunks.into_iter().map(Into::into).collect(),
            size: b.size,
            metadata: b
                .metadata
                .into_iter()
                .map(|(key, value)| dn::KeyValue { key, value })
                .collect(),
        }
    }
}

/// A datanode as the om knows it: a stable uuid and the `HOST:PORT` of its
/// gRPC service (Ozone's `DatanodeDetails`, reduced).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatanodeDetails {
    /// Stable identity, kept across restarts in the datanode's data dir.
    pub uuid: DatanodeId,
    /// `HOST:PORT` of the gRPC service.
    pub address: String,
}

impl fmt::Display for DatanodeDetails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.uuid, self.address)
    }
}

impl TryFrom<om::DatanodeDetails> for DatanodeDetails {
    type Error = ProtocolError;
    fn try_from(d: om::DatanodeDetails) -> Result<Self, ProtocolError> {
        if d.uuid.is_empty() {
            return Err(ProtocolError::MissingField("datanode.uuid"));
        }
        if d.address.is_empty() {
            return Err(ProtocolError::MissingField("datanode.address"));
        }
        Ok(Self {
            uuid: d.uuid.parse()?,
            address: d.address,
        })
    }
}

impl From<DatanodeDetails> for om::DatanodeDetails {
    fn from(d: DatanodeDetails) -> Self {
        Self {
            uuid: d.uuid.into(),
            address: d.address,
        }
    }
}

/// How a key's data is made durable: erasure coded, or replicated N ways
/// (Ozone's `ReplicationConfig`: `rs-3-2-1024k`, `ONE`, `THREE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicationConfig {
    /// Erasure coded block groups.
    Ec(EcReplicationConfig),
    /// Whole blocks copied to `factor` datanodes (no replica index; 0 on the wire).
    Replicated {
        /// Number of copies: 1 (`ONE`) or 3 (`THREE`) are what the om offers; other factors
        /// print and parse as `REPLICATED-N` so that any stored value reads back.
        factor: u8,
    },
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self::Ec(EcReplicationConfig::default())
    }
}

impl ReplicationConfig {
    /// Datanodes one block group needs: d + p for EC, the factor when replicated.
    #[must_use]
    pub fn required_nodes(&self) -> usize {
        match self {
            Self::Ec(ec) => ec.total(),
            Self::Replicated { factor } => usize::from(*factor),
        }
    }
}

impl fmt::Display for ReplicationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ec(ec) => write!(f, "{ec}"),
            Self::Replicated { factor: 1 } => f.write_str("ONE"),
            Self::Replicated { factor: 3 } => f.write_str("THREE"),
            Self::Replicated { factor } => write!(f, "REPLICATED-{factor}"),
        }
    }
}

impl FromStr for ReplicationConfig {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self, ProtocolError> {
        let upper = s.to_ascii_uppercase();
        match upper.as_str() {
            "ONE" => return Ok(Self::Replicated { factor: 1 }),
            "THREE" => return Ok(Self::Replicated { factor: 3 }),
            _ => {}
        }
        // What Display writes for other factors, so that a stored value reads back.
        if let Some(n) = upper.strip_prefix("REPLICATED-") {
            return match n.parse::<u8>() {
                Ok(factor) if factor > 0 => Ok(Self::Replicated { factor }),
                _ => Err(ProtocolError::InvalidField {
                    field: "replication",
                    reason: format!("`{s}` names no replication factor from 1 to 255"),
                }),
            };
        }
        s.parse::<EcReplicationConfig>()
            .map(Self::Ec)
            .map_err(|e| ProtocolError::InvalidField {
                field: "replication",
                reason: format!("`{s}` is neither ONE, THREE, REPLICATED-N nor an EC config: {e}"),
            })
    }
}

/// One location of a block: a datanode and the replica index it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockLocation {
    /// The datanode.
    pub datanode: DatanodeDetails,
    /// `None` for replicated (the wire's 0), `1..=d+p` for EC.
    pub replica_index: Option<ReplicaIndex>,
}

impl TryFrom<om::BlockLocation> for BlockLocation {
    type Error = ProtocolError;
    fn try_from(l: om::BlockLocation) -> Result<Self, ProtocolError> {
        Ok(Self {
            datanode: required(l.datanode, "location.datanode")?.try_into()?,
            replica_index: ReplicaIndex::from_wire(l.replica_index),
        })
    }
}

impl From<BlockLocation> for om::BlockLocation {
    fn from(l: BlockLocation) -> Self {
        Self {
            datanode: Some(l.datanode.into()),
            replica_index: ReplicaIndex::to_wire(l.replica_index),
        }
    }
}

/// The datanodes of one block group, each with its replica index (Ozone's
/// `Pipeline` with its replica indexes). An index may appear more than once:
/// the first location is the primary, later ones are spare replicas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pipeline {
    /// Every location in allocation order.
    pub locations: Vec<BlockLocation>,
}

impl Pipeline {
    /// Datanodes that hold EC index `replica_index` (or, given `None`, a replicated block's
    /// replicas), primary first.
    pub fn nodes_for(
        &self,
        replica_index: impl Into<Option<ReplicaIndex>>,
    ) -> impl Iterator<Item = &DatanodeDetails> {
        let replica_index = replica_index.into();
        self.locations
            .iter()
            .filter(move |l| l.replica_index == replica_index)
            .map(|l| &l.datanode)
    }

    /// Every datanode in the pipeline, once each, in allocation order.
    #[must_use]
    pub fn datanodes(&self) -> Vec<&DatanodeDetails> {
        let mut out: Vec<&DatanodeDetails> = Vec::new();
        for l in &self.locations {
            if !out.contains(&&l.datanode) {
                out.push(&l.datanode);
            }
        }
        out
    }
}

/// One block (replicated) or block group (EC) of a key, with where it lives.
///
/// Equality compares the blocks and their places, not [`token`](Self::token):
/// a token is a credential to reach the group, minted afresh on every answer.
#[derive(Debug, Clone)]
pub struct BlockGroup {
    /// Container of every internal block of the group.
    pub container_id: u64,
    /// Local id shared by every internal block of the group.
    pub local_id: u64,
    /// Data bytes in the group (EC: excludes parity). 0 while being written.
    pub length: u64,
    /// Where each replica index lives.
    pub pipeline: Pipeline,
    /// With security on, in the om's answers: the block token for every
    /// replica index of the group (READ for a committed key, READ and WRITE
    /// for a group allocated to a writer). `None` otherwise; never stored.
    pub token: Option<BlockToken>,
}

impl PartialEq for BlockGroup {
    fn eq(&self, other: &Self) -> bool {
        self.container_id == other.container_id
            && self.local_id == other.local_id
            && self.length == other.length
            && self.pipeline == other.pipeline
    }
}

impl Eq for BlockGroup {}

impl BlockGroup {
    /// The id of the group without a replica index: a replicated block's id, and the label of
    /// an EC group as a whole (in logs and errors that concern no single internal block).
    #[must_use]
    pub fn id(&self) -> BlockId {
        BlockId {
            container_id: self.container_id,
            local_id: self.local_id,
            replica_index: None,
        }
    }

    /// The id of the EC internal block with `replica_index` (given `None`, the same as
    /// [`id`](Self::id): a replicated block).
    #[must_use]
    pub fn block_id(&self, replica_index: impl Into<Option<ReplicaIndex>>) -> BlockId {
        BlockId {
            replica_index: replica_index.into(),
            ..self.id()
        }
    }
}

impl TryFrom<om::BlockGroup> for BlockGroup {
    type Error = ProtocolError;
    fn try_from(g: om::BlockGroup) -> Result<Self, ProtocolError> {
        Ok(Self {
            container_id: g.container_id,
            local_id: g.local_id,
            length: g.length,
            pipeline: Pipeline {
                locations: g
                    .locations
                    .into_iter()
                    .map(BlockLocation::try_from)
                    .collect::<Result<_, _>>()?,
            },
            token: (!g.token.is_empty()).then(|| BlockToken::from_bytes(g.token)),
        })
    }
}

impl From<BlockGroup> for om::BlockGroup {
    fn from(g: BlockGroup) -> Self {
        Self {
            container_id: g.container_id,
            local_id: g.local_id,
            length: g.length,
            locations: g.pipeline.locations.into_iter().map(Into::into).collect(),
            token: g.token.map(|t| t.as_bytes().clone()).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: u64, len: u64) -> ChunkInfo {
        ChunkInfo {
            name: format!("c{offset}"),
            offset,
            len,
            checksum: ChecksumData {
                ty: ChecksumType::Crc32,
                bytes_per_checksum: 16384,
                checksums: vec![1, 2],
            },
        }
    }

    #[test]
    fn block_data_round_trips_and_validates() {
        let mut metadata = BTreeMap::new();
        metadata.insert(BLOCK_GROUP_LENGTH_KEY.to_string(), "12345".to_string());
        let b = BlockData {
            block_id: BlockId {
                container_id: 1,
                local_id: 2,
                replica_index: ReplicaIndex::new(3),
            },
            chunks: vec![chunk(0, 10), chunk(10, 5)],
            size: 15,
            metadata,
        };
        let wire: dn::BlockData = b.clone().into();
        let back = BlockData::try_from(wire).expect("valid wire message");
        assert_eq!(back, b);
        assert_eq!(back.block_group_length(), Some(12345));
        back.validate_chunks().expect("valid wire message");

        let gap = BlockData {
            chunks: vec![chunk(0, 10), chunk(11, 5)],
            size: 16,
            ..b.clone()
        };
        assert!(gap.validate_chunks().is_err());
        let short = BlockData { size: 99, ..b };
        assert!(short.validate_chunks().is_err());
    }

    #[test]
    fn missing_fields_are_typed_errors() {
        let err = BlockData::try_from(dn::BlockData::default()).unwrap_err();
        assert_eq!(err, ProtocolError::MissingField("block_data.block_id"));
        let err = ChunkInfo::try_from(dn::ChunkInfo::default()).unwrap_err();
        assert_eq!(err, ProtocolError::MissingField("chunk.checksum_data"));
        let bad_type = dn::ChunkInfo {
            checksum_data: Some(dn::ChecksumData {
                r#type: 42,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(ChunkInfo::try_from(bad_type).is_err());
        let overflow = dn::ChunkInfo {
            offset: u64::MAX,
            len: 2,
            ..Default::default()
        };
        assert!(ChunkInfo::try_from(overflow).is_err());
    }

    #[test]
    fn replication_config_parses_and_prints() {
        for s in [
            "rs-3-2-1024k",
            "rs-6-3-1024k",
            "rs-10-4-1024k",
            "ONE",
            "THREE",
        ] {
            let r: ReplicationConfig = s.parse().expect("valid wire message");
            assert_eq!(r.to_string(), s);
        }
        assert_eq!(
            "three"
                .parse::<ReplicationConfig>()
                .expect("valid wire message"),
            ReplicationConfig::Replicated { factor: 3 }
        );
        // Every factor prints as something that parses back (a stored key or session
        // names its replication this way).
        for factor in 1..=u8::MAX {
            let r = ReplicationConfig::Replicated { factor };
            assert_eq!(r.to_string().parse::<ReplicationConfig>().ok(), Some(r));
        }
        assert!("REPLICATED-0".parse::<ReplicationConfig>().is_err());
        assert!("REPLICATED-256".parse::<ReplicationConfig>().is_err());
        assert!("TWO".parse::<ReplicationConfig>().is_err());
        assert!("".parse::<ReplicationConfig>().is_err());
    }
}
