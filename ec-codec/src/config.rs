//! `EcReplicationConfig`: the erasure-coding scheme of a key, parsed from and printed as Ozone's
//! `rs-3-2-1024k` form.

use std::fmt;
use std::str::FromStr;

use crate::coder::ErasureCoder;
use crate::error::EcError;
use crate::replica_index::ReplicaIndex;
use crate::rs::RsCodec;
use crate::xor::XorCodec;

/// Largest supported `data + parity` unit count.
///
/// Ozone's built-in schemes go up to rs-10-4 (14 units). The Cauchy construction itself works up
/// to 256 units in GF(2^8), but every unit needs its own datanode and decoding cost grows with
/// the square of the unit count, so this crate caps the total at 32.
pub const MAX_UNITS: usize = 32;

/// Largest supported cell (EC chunk) size: 32 MiB, in bytes.
///
/// Ozone's default is 1 MiB. A cell travels as one WriteChunk, and the datanode caps a ReadChunk
/// answer at 32 MiB (ARCHITECTURE.md), so a cell never outgrows one RPC either way.
pub const MAX_CELL_SIZE: u64 = 32 * 1024 * 1024;

/// The erasure codec of a scheme, as in Ozone's `ECReplicationConfig.EcCodec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EcCodec {
    /// Reed-Solomon with ISA-L/Hadoop's systematic Cauchy matrix (`rs`).
    Rs,
    /// Single-parity XOR (`xor`); requires exactly one parity unit.
    Xor,
}

impl EcCodec {
    /// Lower-case name used in replication strings: `"rs"` or `"xor"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EcCodec::Rs => "rs",
            EcCodec::Xor => "xor",
        }
    }
}

impl fmt::Display for EcCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EcCodec {
    type Err = EcError;

    /// Parses `rs` or `xor`, ignoring ASCII case. Anything else is
    /// [`EcError::InvalidReplicationConfig`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("rs") {
            Ok(EcCodec::Rs)
        } else if s.eq_ignore_ascii_case("xor") {
            Ok(EcCodec::Xor)
        } else {
            Err(EcError::InvalidReplicationConfig {
                input: s.to_owned(),
                reason: "unknown codec (expected \"rs\" or \"xor\")".to_owned(),
            })
        }
    }
}

/// An erasure-coding scheme: codec, `data` + `parity` units, and the cell (EC chunk) size.
///
/// Models Ozone's `ECReplicationConfig`. A block group written with this scheme has
/// `data + parity` internal blocks (replica indexes `1..=data` hold data, the rest parity), and
/// data is striped over the data blocks in cells of [`cell_size`](Self::cell_size) bytes.
///
/// String form (see [`FromStr`] and [`Display`](fmt::Display)): `<codec>-<data>-<parity>-<size>`
/// where `<size>` is `<n>k` (n KiB, as Ozone writes it) or `<n>b` (n bytes, this crate's
/// extension so that every valid config, including tiny test cells, round-trips).
/// The default is Ozone's default, `rs-3-2-1024k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EcReplicationConfig {
    data: usize,
    parity: usize,
    cell_size: u64,
    codec: EcCodec,
}

impl EcReplicationConfig {
    /// Builds and validates a scheme.
    ///
    /// Limits: `data >= 1`, `parity >= 1`, `data + parity <=` [`MAX_UNITS`], `xor` needs
    /// `parity == 1`, and `1 <= cell_size <=` [`MAX_CELL_SIZE`] bytes. Any cell size in that range
    /// is accepted (tests use tiny cells); only the string form insists on a unit suffix.
    ///
    /// # Errors
    /// [`EcError::InvalidUnitCounts`] or [`EcError::InvalidCellSize`] naming the violated limit.
    pub fn new(
        codec: EcCodec,
        data: usize,
        parity: usize,
        cell_size: u64,
    ) -> Result<Self, EcError> {
        check_units(codec, data, parity)?;
        let reason = if cell_size == 0 {
            "cell size must be at least 1 byte"
        } else if cell_size > MAX_CELL_SIZE {
            "cell size exceeds 32 MiB"
        } else {
            return Ok(Self {
                data,
                parity,
                cell_size,
                codec,
            });
        };
        Err(EcError::InvalidCellSize { cell_size, reason })
    }

    /// Number of data units `d` (replica indexes `1..=d`).
    #[must_use]
    pub fn data(&self) -> usize {
        self.data
    }

    /// Number of parity units `p` (replica indexes `d+1..=d+p`).
    #[must_use]
    pub fn parity(&self) -> usize {
        self.parity
    }

    /// Cell (EC chunk) size `c` in bytes: how many consecutive data bytes go to one internal
    /// block before the stripe moves to the next one.
    #[must_use]
    pub fn cell_size(&self) -> u64 {
        self.cell_size
    }

    /// The codec.
    #[must_use]
    pub fn codec(&self) -> EcCodec {
        self.codec
    }

    /// `d + p`: internal blocks per block group.
    #[must_use]
    pub fn total(&self) -> usize {
        self.data + self.parity
    }

    /// Every replica index of the scheme, `1..=d+p`, data first.
    pub fn replica_indexes(&self) -> impl DoubleEndedIterator<Item = ReplicaIndex> {
        ReplicaIndex::all(self.total())
    }

    /// The data indexes `1..=d`.
    pub fn data_indexes(&self) -> impl DoubleEndedIterator<Item = ReplicaIndex> {
        ReplicaIndex::all(self.data)
    }

    /// Whether `index` names a data unit (`<= d`); parity indexes and indexes past `d + p`
    /// are not data.
    #[must_use]
    pub fn is_data(&self, index: ReplicaIndex) -> bool {
        index.unit() < self.data
    }

    /// Whether `index` names a parity unit (`d+1..=d+p`).
    #[must_use]
    pub fn is_parity(&self, index: ReplicaIndex) -> bool {
        (self.data..self.total()).contains(&index.unit())
    }

    /// Stripe size `S = d * c` in bytes: data bytes in one full stripe (parity excluded).
    #[must_use]
    pub fn stripe_size(&self) -> u64 {
        // Cannot overflow: d <= 32 and c <= 32 MiB.
        self.data as u64 * self.cell_size
    }

    /// A coder (encoder + decoder) for this scheme's codec and unit counts.
    #[must_use]
    pub fn coder(&self) -> ErasureCoder {
        match self.codec {
            EcCodec::Rs => ErasureCoder::Rs(RsCodec::new_unchecked(self.data, self.parity)),
            EcCodec::Xor => ErasureCoder::Xor(XorCodec::new_unchecked(self.data)),
        }
    }
}

/// Checks unit counts against the limits of [`EcReplicationConfig::new`]; shared with the
/// codecs' constructors.
pub(crate) fn check_units(codec: EcCodec, data: usize, parity: usize) -> Result<(), EcError> {
    let reason = if data == 0 {
        "at least one data unit is required"
    } else if parity == 0 {
        "at least one parity unit is required"
    } else if data.saturating_add(parity) > MAX_UNITS {
        "data + parity exceeds 32 units"
    } else if codec == EcCodec::Xor && parity != 1 {
        "xor supports exactly one parity unit"
    } else {
        return Ok(());
    };
    Err(EcError::InvalidUnitCounts {
        codec,
        data,
        parity,
        reason,
    })
}

impl Default for EcReplicationConfig {
    /// `rs-3-2-1024k`, Ozone's default EC scheme.
    fn default() -> Self {
        Self {
            data: 3,
            parity: 2,
            cell_size: 1024 * 1024,
            codec: EcCodec::Rs,
        }
    }
}

impl fmt::Display for EcReplicationConfig {
    /// Canonical lower-case form: `rs-3-2-1024k` when the cell size is a whole number of KiB,
    /// else the byte count with a `b` suffix (`rs-3-2-1000b`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}-", self.codec, self.data, self.parity)?;
        let kib = self.cell_size / 1024;
        if kib * 1024 == self.cell_size {
            write!(f, "{kib}k")
        } else {
            write!(f, "{}b", self.cell_size)
        }
    }
}

impl FromStr for EcReplicationConfig {
    type Err = EcError;

    /// Parses `<codec>-<data>-<parity>-<size>`, ASCII case-insensitively, with no surrounding
    /// whitespace. `<codec>` is `rs` or `xor`; counts are decimal digits; `<size>` is
    /// decimal digits followed by `k` (KiB, Ozone's form) or `b` (bytes). The result must pass
    /// [`EcReplicationConfig::new`]'s limits.
    ///
    /// # Errors
    /// [`EcError::InvalidReplicationConfig`] with the input and a reason; never panics.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| EcError::InvalidReplicationConfig {
            input: s.to_owned(),
            reason,
        };
        let parts: Vec<&str> = s.split('-').collect();
        let [codec, data, parity, size] = parts.as_slice() else {
            return Err(fail(
                "expected <codec>-<data>-<parity>-<cellsize>, e.g. rs-3-2-1024k".to_owned(),
            ));
        };
        let codec: EcCodec = codec.parse().map_err(|_| {
            fail(format!(
                "unknown codec {codec:?} (expected \"rs\" or \"xor\")"
            ))
        })?;
        let data = parse_decimal(data, "data unit count").map_err(&fail)?;
        let parity = parse_decimal(parity, "parity unit count").map_err(&fail)?;
        let cell_size = parse_cell_size(size).map_err(&fail)?;
        let data = usize::try_from(data).map_err(|_| fail("data unit count too large".into()))?;
        let parity =
            usize::try_from(parity).map_err(|_| fail("parity unit count too large".into()))?;
        Self::new(codec, data, parity, cell_size).map_err(|e| match e {
            EcError::InvalidUnitCounts { reason, .. } | EcError::InvalidCellSize { reason, .. } => {
                fail(reason.to_owned())
            }
            other => other,
        })
    }
}

/// Parses a non-empty run of ASCII digits into a u64, rejecting signs, spaces and overflow.
fn parse_decimal(s: &str, what: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {s:?} is not a decimal number"));
    }
    s.parse::<u64>()
        .map_err(|_| format!("{what} {s:?} is too large"))
}

/// Parses `<n>k` (KiB) or `<n>b` (bytes) into a byte count.
fn parse_cell_size(s: &str) -> Result<u64, String> {
    let (digits, multiplier) = if let Some(d) = s.strip_suffix(['k', 'K']) {
        (d, 1024)
    } else if let Some(d) = s.strip_suffix(['b', 'B']) {
        (d, 1)
    } else {
        return Err(format!(
            "cell size {s:?} needs a unit suffix: 'k' (KiB) or 'b' (bytes)"
        ));
    };
    let n = parse_decimal(digits, "cell size")?;
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("cell size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> Result<EcReplicationConfig, EcError> {
        s.parse()
    }

    /// Ozone's built-in schemes parse to the expected numbers and print back unchanged.
    #[test]
    fn parses_ozone_schemes() {
        for (s, codec, d, p) in [
            ("rs-3-2-1024k", EcCodec::Rs, 3, 2),
            ("rs-6-3-1024k", EcCodec::Rs, 6, 3),
            ("rs-10-4-1024k", EcCodec::Rs, 10, 4),
            ("xor-2-1-1024k", EcCodec::Xor, 2, 1),
        ] {
            let cfg = parse(s).expect("valid config");
            assert_eq!((cfg.codec(), cfg.data(), cfg.parity()), (codec, d, p));
            assert_eq!(cfg.cell_size(), 1024 * 1024);
            assert_eq!(cfg.total(), d + p);
            assert_eq!(cfg.stripe_size(), d as u64 * 1024 * 1024);
            assert_eq!(cfg.to_string(), s);
        }
    }

    /// Upper case input is accepted and printed in canonical lower case.
    #[test]
    fn case_insensitive() {
        let cfg = parse("RS-3-2-1024K").expect("valid config");
        assert_eq!(cfg, EcReplicationConfig::default());
        assert_eq!(cfg.to_string(), "rs-3-2-1024k");
        assert_eq!(
            parse("Xor-4-1-4k").expect("valid config").to_string(),
            "xor-4-1-4k"
        );
    }

    /// Small and unusual cell sizes.
    #[test]
    fn cell_sizes() {
        assert_eq!(parse("rs-3-2-4k").expect("valid config").cell_size(), 4096);
        assert_eq!(
            parse("rs-3-2-2048k").expect("valid config").cell_size(),
            2 * 1024 * 1024
        );
        assert_eq!(
            parse("rs-3-2-1000k").expect("valid config").cell_size(),
            1000 * 1024
        );
        assert_eq!(
            parse("rs-3-2-1000b").expect("valid config").cell_size(),
            1000
        );
        assert_eq!(
            parse("rs-3-2-2048b").expect("valid config").to_string(),
            "rs-3-2-2k"
        );
        let tiny = EcReplicationConfig::new(EcCodec::Rs, 3, 2, 7).expect("valid config");
        assert_eq!(tiny.to_string(), "rs-3-2-7b");
        assert_eq!(
            parse("rs-3-2-32768k").expect("valid config").cell_size(),
            MAX_CELL_SIZE
        );
        assert!(parse("rs-3-2-32769k").is_err());
    }

    /// Malformed or out-of-limit strings are rejected with InvalidReplicationConfig.
    #[test]
    fn rejects_bad_strings() {
        for s in [
            "",
            "foo",
            "rs-3-2",
            "rs-3-2-",
            "rs-3-2-k",
            "rs-0-2-1024k",
            "rs-3-0-1024k",
            "rs-3-2-1500",
            "rs-3-2-0k",
            "rs-3-2-0b",
            "rs-3-2-65537k",
            "xor-2-2-1024k",
            "ec-3-2-1024k",
            "rs-3-2-1024k-",
            "rs--3-2-1024k",
            "rs-+3-2-1024k",
            "rs- 3-2-1024k",
            " rs-3-2-1024k",
            "rs-3-2-1024m",
            "rs-30-3-1024k",
            "rs-99999999999999999999-2-1024k",
            "rs-3-2-99999999999999999999k",
            "rs-3-2-18014398509481984k",
            "rs-3-18446744073709551615-1024k",
        ] {
            match parse(s) {
                Err(EcError::InvalidReplicationConfig { input, reason }) => {
                    assert_eq!(input, s);
                    assert!(!reason.is_empty());
                }
                other => panic!("{s:?} gave {other:?}"),
            }
        }
    }

    /// Numeric validation in `new`.
    #[test]
    fn new_validates() {
        assert!(EcReplicationConfig::new(EcCodec::Rs, 3, 2, 4096).is_ok());
        assert!(EcReplicationConfig::new(EcCodec::Rs, 1, 1, 1).is_ok());
        assert!(EcReplicationConfig::new(EcCodec::Rs, 16, 16, 1).is_ok());
        for (codec, d, p, c) in [
            (EcCodec::Rs, 0, 2, 1024),
            (EcCodec::Rs, 3, 0, 1024),
            (EcCodec::Rs, 30, 3, 1024),
            (EcCodec::Rs, usize::MAX, usize::MAX, 1024),
            (EcCodec::Xor, 3, 2, 1024),
            (EcCodec::Rs, 3, 2, 0),
            (EcCodec::Rs, 3, 2, MAX_CELL_SIZE + 1),
        ] {
            assert!(matches!(
                EcReplicationConfig::new(codec, d, p, c),
                Err(EcError::InvalidUnitCounts { .. } | EcError::InvalidCellSize { .. })
            ));
        }
    }

    /// The default is Ozone's rs-3-2-1024k.
    #[test]
    fn default_is_rs_3_2_1024k() {
        assert_eq!(EcReplicationConfig::default().to_string(), "rs-3-2-1024k");
        assert_eq!(
            EcReplicationConfig::default(),
            EcReplicationConfig::new(EcCodec::Rs, 3, 2, 1 << 20).expect("valid config")
        );
    }

    fn any_config() -> impl Strategy<Value = EcReplicationConfig> {
        (
            any::<bool>(),
            1usize..=31,
            1usize..=31,
            1u64..=MAX_CELL_SIZE,
        )
            .prop_filter_map("within limits", |(xor, d, p, c)| {
                let (codec, p) = if xor {
                    (EcCodec::Xor, 1)
                } else {
                    (EcCodec::Rs, p)
                };
                EcReplicationConfig::new(codec, d, p, c).ok()
            })
    }

    proptest! {
        /// Display then FromStr gives back the same config, for every valid config.
        #[test]
        fn display_from_str_round_trip(cfg in any_config()) {
            let s = cfg.to_string();
            prop_assert_eq!(parse(&s), Ok(cfg));
            prop_assert_eq!(parse(&s.to_uppercase()), Ok(cfg));
        }

        /// Arbitrary strings never panic the parser, and anything accepted round-trips.
        #[test]
        fn arbitrary_strings_never_panic(s in ".{0,40}") {
            if let Ok(cfg) = parse(&s) {
                prop_assert_eq!(parse(&cfg.to_string()), Ok(cfg));
            }
        }

        /// Strings shaped like configs with arbitrary numbers never panic either.
        #[test]
        fn config_shaped_strings_never_panic(
            codec in "(rs|xor|RS|x)",
            d in "[0-9]{1,22}",
            p in "[0-9]{1,22}",
            c in "[0-9]{0,22}[kKbBm]?",
        ) {
            let s = format!("{codec}-{d}-{p}-{c}");
            if let Ok(cfg) = parse(&s) {
                prop_assert!(cfg.total() <= MAX_UNITS);
                prop_assert!(cfg.cell_size() >= 1 && cfg.cell_size() <= MAX_CELL_SIZE);
            }
        }
    }
}
