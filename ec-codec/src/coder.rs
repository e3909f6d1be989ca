//! `ErasureCoder`: one handle over the RS and XOR codecs, plus the argument checks they share.

use crate::error::EcError;
use crate::rs::RsCodec;
use crate::xor::XorCodec;

/// The coder for a scheme's codec, as built by [`crate::EcReplicationConfig::coder`].
///
/// Both codecs share one calling convention, modelled on Hadoop's `RawErasureEncoder` /
/// `RawErasureDecoder`: units are addressed by **0-based unit index** in `0..d+p`, data units
/// first (`0..d`) then parity (`d..d+p`); that is, unit index = replica index - 1. All cells of
/// one call have the same length in bytes; a partial stripe's short data cells must be
/// zero-padded by the caller to the stripe's parity length (the length of its first cell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErasureCoder {
    /// Cauchy Reed-Solomon.
    Rs(RsCodec),
    /// Single-parity XOR.
    Xor(XorCodec),
}

impl ErasureCoder {
    /// Number of data units `d`.
    #[must_use]
    pub fn data_units(&self) -> usize {
        match self {
            ErasureCoder::Rs(c) => c.data_units(),
            ErasureCoder::Xor(c) => c.data_units(),
        }
    }

    /// Number of parity units `p`.
    #[must_use]
    pub fn parity_units(&self) -> usize {
        match self {
            ErasureCoder::Rs(c) => c.parity_units(),
            ErasureCoder::Xor(c) => c.parity_units(),
        }
    }

    /// `d + p`.
    #[must_use]
    pub fn total_units(&self) -> usize {
        self.data_units() + self.parity_units()
    }

    /// Computes the parity cells of one stripe; see [`RsCodec::encode`].
    ///
    /// # Errors
    /// [`EcError::WrongUnitCount`] or [`EcError::CellLengthMismatch`] on badly shaped buffers.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), EcError> {
        match self {
            ErasureCoder::Rs(c) => c.encode(data, parity),
            ErasureCoder::Xor(c) => c.encode(data, parity),
        }
    }

    /// Recomputes missing units of one stripe; see [`RsCodec::reconstruct`].
    ///
    /// # Errors
    /// [`EcError::TooManyErasures`] if fewer than `d` units are present, and the shape errors
    /// of [`RsCodec::reconstruct`].
    pub fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EcError> {
        match self {
            ErasureCoder::Rs(c) => c.reconstruct(units, wanted, out),
            ErasureCoder::Xor(c) => c.reconstruct(units, wanted, out),
        }
    }
}

/// Checks an encode call's shape and returns the common cell length in bytes.
pub(crate) fn check_encode(
    d: usize,
    p: usize,
    data: &[&[u8]],
    parity: &[&mut [u8]],
) -> Result<usize, EcError> {
    if data.len() != d {
        return Err(EcError::WrongUnitCount {
            what: "data cells",
            expected: d,
            actual: data.len(),
        });
    }
    if parity.len() != p {
        return Err(EcError::WrongUnitCount {
            what: "parity cells",
            expected: p,
            actual: parity.len(),
        });
    }
    let len = data.first().map_or(0, |c| c.len());
    let lens = data
        .iter()
        .map(|c| c.len())
        .chain(parity.iter().map(|c| c.len()));
    for (unit, actual) in lens.enumerate() {
        if actual != len {
            return Err(EcError::CellLengthMismatch {
                unit,
                expected: len,
                actual,
            });
        }
    }
    Ok(len)
}

/// Checks a reconstruct call's shape. Returns the cell length in bytes and the 0-based
/// indexes of the first `d` present units, which are the ones decoding reads.
pub(crate) fn check_reconstruct(
    d: usize,
    total: usize,
    units: &[Option<&[u8]>],
    wanted: &[usize],
    out: &[&mut [u8]],
) -> Result<(usize, Vec<usize>), EcError> {
    if units.len() != total {
        return Err(EcError::WrongUnitCount {
            what: "unit slots",
            expected: total,
            actual: units.len(),
        });
    }
    if out.len() != wanted.len() {
        return Err(EcError::WrongUnitCount {
            what: "output buffers",
            expected: wanted.len(),
            actual: out.len(),
        });
    }
    if let Some(&unit) = wanted.iter().find(|&&w| w >= total) {
        return Err(EcError::InvalidUnitIndex { unit, total });
    }
    let present: Vec<(usize, &[u8])> = units
        .iter()
        .enumerate()
        .filter_map(|(i, u)| u.map(|u| (i, u)))
        .collect();
    let Some(&(_, first)) = present.first().filter(|_| present.len() >= d) else {
        return Err(EcError::TooManyErasures {
            available: present.len(),
            needed: d,
        });
    };
    let len = first.len();
    let in_lens = present.iter().map(|&(i, u)| (i, u.len()));
    let out_lens = wanted.iter().zip(out).map(|(&w, o)| (w, o.len()));
    for (unit, actual) in in_lens.chain(out_lens) {
        if actual != len {
            return Err(EcError::CellLengthMismatch {
                unit,
                expected: len,
                actual,
            });
        }
    }
    Ok((len, present.iter().take(d).map(|&(i, _)| i).collect()))
}
