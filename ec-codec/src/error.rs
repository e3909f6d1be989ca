//! The crate's single error type.

use crate::config::EcCodec;
use crate::replica_index::ReplicaIndex;

/// Everything that can go wrong in `ec-codec`.
///
/// Every variant carries the numbers involved so that a caller can log or report the failure
/// without re-deriving context. None of these errors are transient: they all describe a bad
/// argument (a malformed replication string, an index or offset out of range, buffers of the
/// wrong shape) or an unrecoverable erasure pattern, so retrying the same call never helps.
/// Whether a failure should make a reader "try another location" is decided by the I/O crates
/// above this one; from the codec's side only [`EcError::TooManyErasures`] means "fetch more
/// units".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EcError {
    /// A replication string such as `rs-3-2-1024k` could not be parsed or describes an
    /// unsupported scheme. `input` is the string as given; `reason` says what is wrong.
    #[error("invalid EC replication config {input:?}: {reason}")]
    InvalidReplicationConfig {
        /// The string that was parsed.
        input: String,
        /// Human-readable explanation.
        reason: String,
    },

    /// Data/parity unit counts are outside the supported limits; see
    /// [`crate::EcReplicationConfig::new`] and [`crate::MAX_UNITS`].
    #[error("unsupported EC unit counts {codec}-{data}-{parity}: {reason}")]
    InvalidUnitCounts {
        /// Codec requested.
        codec: EcCodec,
        /// Number of data units requested.
        data: usize,
        /// Number of parity units requested.
        parity: usize,
        /// Which limit was violated.
        reason: &'static str,
    },

    /// A cell size (bytes) is outside `1..=`[`crate::MAX_CELL_SIZE`].
    #[error("unsupported EC cell size of {cell_size} bytes: {reason}")]
    InvalidCellSize {
        /// Cell size requested, in bytes.
        cell_size: u64,
        /// Which limit was violated.
        reason: &'static str,
    },

    /// A 1-based replica index is outside `1..=total` (`total` = data + parity).
    #[error("replica index {replica_index} is out of range 1..={total}")]
    InvalidReplicaIndex {
        /// The index given.
        replica_index: ReplicaIndex,
        /// Data + parity units of the scheme.
        total: usize,
    },

    /// A replica index that must name a data unit (`1..=data`) named a parity unit.
    #[error("replica index {replica_index} is not a data index (data indexes are 1..={data})")]
    NotADataIndex {
        /// The index given.
        replica_index: ReplicaIndex,
        /// Number of data units of the scheme.
        data: usize,
    },

    /// A group-relative byte position is at or past the end of the block group.
    #[error("position {pos} is past the end of a {len}-byte block group")]
    OffsetPastEnd {
        /// Group-relative position, in bytes.
        pos: u64,
        /// Group length (data bytes only), in bytes.
        len: u64,
    },

    /// An offset inside an internal block is at or past that internal block's length.
    #[error(
        "offset {offset} is past the end of internal block {replica_index} ({block_len} bytes)"
    )]
    BlockOffsetPastEnd {
        /// The 1-based replica index of the internal block.
        replica_index: ReplicaIndex,
        /// Offset inside the internal block, in bytes.
        offset: u64,
        /// Length of that internal block, in bytes.
        block_len: u64,
    },

    /// A group-relative byte range is reversed or extends past the end of the group.
    #[error("byte range {start}..{end} is not within a {len}-byte block group")]
    InvalidRange {
        /// Range start (inclusive), group-relative bytes.
        start: u64,
        /// Range end (exclusive), group-relative bytes.
        end: u64,
        /// Group length, in bytes.
        len: u64,
    },

    /// A codec call got the wrong number of buffers.
    #[error("expected {expected} {what}, got {actual}")]
    WrongUnitCount {
        /// Which argument: "data cells", "parity cells", "unit slots", "output buffers".
        what: &'static str,
        /// Count the codec needs.
        expected: usize,
        /// Count that was passed.
        actual: usize,
    },

    /// Cells handed to a codec call do not all have the same length. Callers must zero-pad
    /// short cells of a partial stripe up to the stripe's parity length before encoding.
    #[error("cell {unit} is {actual} bytes, expected {expected} (all cells must be equally long)")]
    CellLengthMismatch {
        /// 0-based unit position of the offending buffer.
        unit: usize,
        /// Length of the first cell, in bytes.
        expected: usize,
        /// Length of this cell, in bytes.
        actual: usize,
    },

    /// A 0-based unit position passed to a codec is outside `0..total`.
    #[error("unit index {unit} is out of range 0..{total}")]
    InvalidUnitIndex {
        /// The position given.
        unit: usize,
        /// Data + parity units of the codec.
        total: usize,
    },

    /// Fewer than `needed` (= data units) units are available, so the stripe cannot be decoded.
    #[error("cannot reconstruct: {available} units available, {needed} needed")]
    TooManyErasures {
        /// Units present.
        available: usize,
        /// Units required (the number of data units).
        needed: usize,
    },

    /// The d x d submatrix chosen for decoding could not be inverted. Every square submatrix
    /// of a Cauchy generator is invertible, so this indicates a bug; it is reported instead of
    /// panicking. `units` are the 0-based unit positions that were chosen.
    #[error("decode matrix for units {units:?} is singular")]
    SingularDecodeMatrix {
        /// 0-based unit positions whose generator rows formed the matrix.
        units: Vec<usize>,
    },
}
