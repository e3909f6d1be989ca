//! Single-parity XOR codec, Ozone's `xor-d-1` schemes.

use crate::coder::{check_encode, check_reconstruct};
use crate::config::{EcCodec, check_units};
use crate::error::EcError;
use crate::kernel::xor_into;

/// XOR coder for `d` data units and one parity unit: `parity = data[0] ^ ... ^ data[d-1]`,
/// as Hadoop's `XORRawEncoder`. Any single lost unit is the xor of the other `d`.
///
/// Uses the same conventions as [`crate::RsCodec`]: 0-based unit indexes (data `0..d`, the
/// parity unit is `d`), equally long cells, caller-side zero padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorCodec {
    data: usize,
}

impl XorCodec {
    /// A coder for `data` data units plus one parity unit.
    ///
    /// # Errors
    /// [`EcError::InvalidUnitCounts`] unless `1 <= data` and `data + 1 <=` [`crate::MAX_UNITS`].
    pub fn new(data: usize) -> Result<Self, EcError> {
        check_units(EcCodec::Xor, data, 1)?;
        Ok(Self::new_unchecked(data))
    }

    /// Builds the coder for a count already validated by `check_units`.
    pub(crate) fn new_unchecked(data: usize) -> Self {
        Self { data }
    }

    /// Number of data units `d`.
    #[must_use]
    pub fn data_units(&self) -> usize {
        self.data
    }

    /// Number of parity units: always 1.
    #[must_use]
    pub fn parity_units(&self) -> usize {
        1
    }

    /// Writes the xor of the `d` data cells into the single parity cell (`parity.len() == 1`).
    ///
    /// # Errors
    /// As [`crate::RsCodec::encode`]: [`EcError::WrongUnitCount`],
    /// [`EcError::CellLengthMismatch`].
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), EcError> {
        check_encode(self.data, 1, data, parity)?;
        if let [out] = parity {
            xor_all(data, out);
        }
        Ok(())
    }

    /// Recomputes the units in `wanted` (0-based, `0..=d`) into `out`; `units` has `d + 1`
    /// slots and at least `d` must be `Some`. A wanted unit is the xor of the first `d`
    /// present units other than itself, or a copy if it is present.
    ///
    /// # Errors
    /// As [`crate::RsCodec::reconstruct`]: [`EcError::TooManyErasures`],
    /// [`EcError::WrongUnitCount`], [`EcError::InvalidUnitIndex`],
    /// [`EcError::CellLengthMismatch`].
    pub fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EcError> {
        check_reconstruct(self.data, self.data + 1, units, wanted, out)?;
        for (&w, dst) in wanted.iter().zip(out.iter_mut()) {
            if let Some(Some(cell)) = units.get(w) {
                dst.copy_from_slice(cell);
            } else {
                // w is the single missing unit, so all the others are present.
                let others: Vec<&[u8]> = units.iter().flatten().copied().collect();
                xor_all(&others, dst);
            }
        }
        Ok(())
    }
}

/// `out = xor of all inputs` (inputs non-empty, all as long as `out`).
fn xor_all(inputs: &[&[u8]], out: &mut [u8]) {
    let mut inputs = inputs.iter();
    if let Some(first) = inputs.next() {
        out.copy_from_slice(first);
    }
    for input in inputs {
        xor_into(input, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xor-3-1: parity is the xor of the data, and every single erasure is recovered.
    #[test]
    fn encode_and_recover_each_unit() {
        let x = XorCodec::new(3).expect("valid codec call");
        let data: Vec<Vec<u8>> = (0..3u8)
            .map(|j| (0..100u8).map(|i| i.wrapping_mul(j + 3) ^ j).collect())
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut parity = vec![0u8; 100];
        x.encode(&refs, &mut [&mut parity])
            .expect("valid codec call");
        for i in 0..100 {
            assert_eq!(parity[i], data[0][i] ^ data[1][i] ^ data[2][i]);
        }
        let all: Vec<&[u8]> = refs.iter().copied().chain([parity.as_slice()]).collect();
        for lost in 0..4 {
            let units: Vec<Option<&[u8]>> = (0..4).map(|i| (i != lost).then_some(all[i])).collect();
            let mut a = vec![0u8; 100];
            let mut b = vec![0u8; 100];
            let present = (lost + 1) % 4;
            x.reconstruct(&units, &[lost, present], &mut [&mut a, &mut b])
                .expect("valid codec call");
            assert_eq!(a, all[lost]);
            assert_eq!(b, all[present]);
        }
        let two_lost = [None, None, Some(all[2]), Some(all[3])];
        assert_eq!(
            x.reconstruct(&two_lost, &[0], &mut [&mut [0u8; 100]]),
            Err(EcError::TooManyErasures {
                available: 2,
                needed: 3
            })
        );
    }

    /// Limits and shape checks.
    #[test]
    fn errors() {
        assert!(XorCodec::new(0).is_err());
        assert!(XorCodec::new(32).is_err());
        let x = XorCodec::new(2).expect("valid codec call");
        let a = [1u8; 2];
        let (mut p, mut q) = ([0u8; 2], [0u8; 2]);
        assert!(matches!(
            x.encode(&[&a, &a], &mut [&mut p, &mut q]),
            Err(EcError::WrongUnitCount { .. })
        ));
        assert!(matches!(
            x.encode(&[&a, &a[..1]], &mut [&mut p]),
            Err(EcError::CellLengthMismatch { unit: 1, .. })
        ));
    }
}
