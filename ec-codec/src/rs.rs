//! Cauchy Reed-Solomon over GF(2^8), byte-compatible with ISA-L's `gf_gen_cauchy1_matrix` +
//! `ec_encode_data` and therefore with Hadoop's and Ozone's RS coders.

use crate::coder::{check_encode, check_reconstruct};
use crate::config::{EcCodec, check_units};
use crate::error::EcError;
use crate::kernel::{Kernel, apply_matrix};
use crate::matrix::Matrix;

/// A systematic Reed-Solomon coder for `d` data and `p` parity units.
///
/// The generator is `d` identity rows on top of `p` Cauchy rows: parity `i` (0-based) is
/// `sum_j M[i][j] * data_j` with `M[i][j] = 1 / ((d + i) xor j)` in GF(2^8) modulo 0x11d. This
/// is ISA-L's `gf_gen_cauchy1_matrix`, used by Hadoop's `RSRawEncoder`/ISA-L coders and thus
/// by Ozone, so parity written here is readable by them and vice versa (checked against
/// golden vectors from ISA-L 2.30). Because every square submatrix of a Cauchy matrix is
/// invertible, any `d` surviving units recover the stripe.
///
/// Units are addressed by 0-based unit index: data `0..d`, parity `d..d+p` (replica index
/// minus one). Construction precomputes the generator; calls allocate only small matrices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RsCodec {
    data: usize,
    parity: usize,
    /// `(d + p) x d` generator: identity rows, then the parity rows.
    generator: Matrix,
    /// The bulk kernel (default [`Kernel::Auto`]).
    kernel: Kernel,
}

impl RsCodec {
    /// A coder for `data` + `parity` units.
    ///
    /// # Errors
    /// [`EcError::InvalidUnitCounts`] unless `data >= 1`, `parity >= 1` and
    /// `data + parity <=` [`crate::MAX_UNITS`].
    pub fn new(data: usize, parity: usize) -> Result<Self, EcError> {
        check_units(EcCodec::Rs, data, parity)?;
        Ok(Self::new_unchecked(data, parity))
    }

    /// Builds the coder for counts already validated by `check_units`.
    pub(crate) fn new_unchecked(data: usize, parity: usize) -> Self {
        Self {
            data,
            parity,
            generator: Matrix::cauchy_generator(data, parity),
            kernel: Kernel::Auto,
        }
    }

    /// The same coder running `kernel` (the bytes are the same; benchmarks compare speeds).
    #[must_use]
    pub fn with_kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// Number of data units `d`.
    #[must_use]
    pub fn data_units(&self) -> usize {
        self.data
    }

    /// Number of parity units `p`.
    #[must_use]
    pub fn parity_units(&self) -> usize {
        self.parity
    }

    /// Encode-matrix row of parity unit `i` (0-based among parity units, so unit index
    /// `d + i`): the `d` coefficients that multiply data cells `0..d`. `None` if `i >= p`.
    #[must_use]
    pub fn parity_row(&self, i: usize) -> Option<&[u8]> {
        (i < self.parity).then(|| self.generator.row(self.data + i))
    }

    /// Computes the `p` parity cells of one stripe from its `d` data cells.
    ///
    /// `data` holds `d` cells and `parity` `p` cells, all of the same length in bytes (any
    /// length, including 0). Short cells of a partial stripe must be zero-padded by the caller
    /// to the parity length, as Ozone's EC writer does; the padding is never stored. Parity
    /// buffers are overwritten.
    ///
    /// # Errors
    /// [`EcError::WrongUnitCount`] if the counts differ from `d`/`p`;
    /// [`EcError::CellLengthMismatch`] (with the 0-based unit index) if lengths differ.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), EcError> {
        let len = check_encode(self.data, self.parity, data, parity)?;
        let parity_rows = &self.generator.as_slice()[self.data * self.data..];
        apply_matrix(self.kernel, parity_rows, data, parity, len);
        Ok(())
    }

    /// Recomputes the units listed in `wanted` from any `d` present units of one stripe.
    ///
    /// `units` has one slot per unit (`d + p`, 0-based unit index: data `0..d`, then parity);
    /// `Some(cell)` marks a unit that is available, `None` an erased one. `wanted` lists
    /// 0-based unit indexes to recompute (data and/or parity, in any order; a present unit is
    /// simply reproduced) and `out[k]` receives unit `wanted[k]`; outputs are overwritten. All
    /// cells have the same length in bytes.
    ///
    /// Like Hadoop's RS decoder, this decodes from the first `d` present units in index order:
    /// it inverts their `d x d` generator submatrix, composes it with the generator rows of
    /// the wanted units and applies the result in one pass, so wanted parity costs the same as
    /// wanted data. Extra present units are ignored (no consistency check).
    ///
    /// # Errors
    /// [`EcError::TooManyErasures`] if fewer than `d` units are present;
    /// [`EcError::WrongUnitCount`] if `units.len() != d + p` or `out.len() != wanted.len()`;
    /// [`EcError::InvalidUnitIndex`] for a wanted index `>= d + p`;
    /// [`EcError::CellLengthMismatch`] if present or output cells differ in length.
    pub fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EcError> {
        let total = self.data + self.parity;
        let (len, chosen) = check_reconstruct(self.data, total, units, wanted, out)?;
        if wanted.is_empty() {
            return Ok(());
        }
        let inverse = self
            .generator
            .select_rows(&chosen)
            .invert()
            .ok_or_else(|| EcError::SingularDecodeMatrix {
                units: chosen.clone(),
            })?;
        // Row w of (generator rows of `wanted`) * inverse maps the chosen units to unit w.
        let decode = self.generator.select_rows(wanted).mul(&inverse);
        let inputs: Vec<&[u8]> = chosen.iter().filter_map(|&i| units[i]).collect();
        apply_matrix(self.kernel, decode.as_slice(), &inputs, out, len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(d: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..d)
            .map(|j| {
                (0..len)
                    .map(|i| {
                        (i as u8)
                            .wrapping_mul(31)
                            .wrapping_add(seed ^ (j as u8 * 17))
                    })
                    .collect()
            })
            .collect()
    }

    fn encode_all(rs: &RsCodec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; rs.parity_units()];
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        rs.encode(&refs, &mut outs).expect("valid codec call");
        parity
    }

    /// Constructor limits.
    #[test]
    fn new_limits() {
        assert!(RsCodec::new(0, 2).is_err());
        assert!(RsCodec::new(3, 0).is_err());
        assert!(RsCodec::new(30, 3).is_err());
        assert!(RsCodec::new(16, 16).is_ok());
        assert_eq!(
            RsCodec::new(3, 2).expect("valid codec call").parity_row(2),
            None
        );
    }

    /// Shape errors from encode and reconstruct carry the numbers involved.
    #[test]
    fn shape_errors() {
        let rs = RsCodec::new(3, 2).expect("valid codec call");
        let a = [0u8; 4];
        let short = [0u8; 3];
        let (mut p0, mut p1, mut p2) = ([0u8; 4], [0u8; 4], [0u8; 4]);
        assert_eq!(
            rs.encode(&[&a, &a], &mut [&mut p0, &mut p1]),
            Err(EcError::WrongUnitCount {
                what: "data cells",
                expected: 3,
                actual: 2
            })
        );
        assert_eq!(
            rs.encode(&[&a, &a, &a], &mut [&mut p0, &mut p1, &mut p2]),
            Err(EcError::WrongUnitCount {
                what: "parity cells",
                expected: 2,
                actual: 3
            })
        );
        assert_eq!(
            rs.encode(&[&a, &short, &a], &mut [&mut p0, &mut p1]),
            Err(EcError::CellLengthMismatch {
                unit: 1,
                expected: 4,
                actual: 3
            })
        );
        let mut small = [0u8; 3];
        assert_eq!(
            rs.encode(&[&a, &a, &a], &mut [&mut p0, &mut small]),
            Err(EcError::CellLengthMismatch {
                unit: 4,
                expected: 4,
                actual: 3
            })
        );
        let units = [Some(&a[..]), None, Some(&a[..]), Some(&a[..]), None];
        assert_eq!(
            rs.reconstruct(&units[..4], &[1], &mut [&mut p0]),
            Err(EcError::WrongUnitCount {
                what: "unit slots",
                expected: 5,
                actual: 4
            })
        );
        assert_eq!(
            rs.reconstruct(&units, &[1, 4], &mut [&mut p0]),
            Err(EcError::WrongUnitCount {
                what: "output buffers",
                expected: 2,
                actual: 1
            })
        );
        assert_eq!(
            rs.reconstruct(&units, &[5], &mut [&mut p0]),
            Err(EcError::InvalidUnitIndex { unit: 5, total: 5 })
        );
        assert_eq!(
            rs.reconstruct(&units, &[1], &mut [&mut small]),
            Err(EcError::CellLengthMismatch {
                unit: 1,
                expected: 4,
                actual: 3
            })
        );
        let bad = [Some(&a[..]), None, Some(&short[..]), Some(&a[..]), None];
        assert!(matches!(
            rs.reconstruct(&bad, &[1], &mut [&mut p0]),
            Err(EcError::CellLengthMismatch { unit: 2, .. })
        ));
        let two = [Some(&a[..]), None, None, Some(&a[..]), None];
        assert_eq!(
            rs.reconstruct(&two, &[1], &mut [&mut p0]),
            Err(EcError::TooManyErasures {
                available: 2,
                needed: 3
            })
        );
        assert_eq!(
            rs.reconstruct(&[None; 5], &[], &mut []),
            Err(EcError::TooManyErasures {
                available: 0,
                needed: 3
            })
        );
        assert_eq!(rs.reconstruct(&units, &[], &mut []), Ok(()));
    }

    /// Zero-length cells encode and decode to nothing without touching the kernels.
    #[test]
    fn empty_cells() {
        let rs = RsCodec::new(3, 2).expect("valid codec call");
        let e: &[u8] = &[];
        let (mut p0, mut p1) = ([0u8; 0], [0u8; 0]);
        rs.encode(&[e, e, e], &mut [&mut p0, &mut p1])
            .expect("valid codec call");
        rs.reconstruct(
            &[None, None, Some(e), Some(e), Some(e)],
            &[0, 1],
            &mut [&mut p0, &mut p1],
        )
        .expect("valid codec call");
    }

    /// Encoding is linear: the parity of a single data byte 1 in unit j is column j of the
    /// parity rows.
    #[test]
    fn unit_vectors_give_matrix_columns() {
        let rs = RsCodec::new(6, 3).expect("valid codec call");
        for j in 0..6 {
            let mut data = vec![vec![0u8; 1]; 6];
            data[j][0] = 1;
            let parity = encode_all(&rs, &data);
            for (i, cell) in parity.iter().enumerate() {
                assert_eq!(cell[0], rs.parity_row(i).expect("valid codec call")[j]);
            }
        }
    }

    proptest! {
        /// Random schemes, lengths and erasure sets of at most p units: reconstruct recovers
        /// every erased unit, and reproduces a present unit when asked for it.
        #[test]
        fn random_erasures_recover(
            d in 1usize..=12,
            p in 1usize..=6,
            len in 0usize..300,
            seed: u8,
            erase_bits: u32,
            also_present: bool,
        ) {
            let rs = RsCodec::new(d, p)?;
            let data = sample(d, len, seed);
            let parity = encode_all(&rs, &data);
            let all: Vec<&Vec<u8>> = data.iter().chain(&parity).collect();
            let total = d + p;
            let mut erased: Vec<usize> = (0..total).filter(|i| erase_bits & (1 << i) != 0).collect();
            erased.truncate(p);
            let units: Vec<Option<&[u8]>> = (0..total)
                .map(|i| (!erased.contains(&i)).then(|| all[i].as_slice()))
                .collect();
            let mut wanted = erased.clone();
            let present = (0..total).find(|i| !erased.contains(i));
            wanted.extend(present.filter(|_| also_present));
            let mut bufs = vec![vec![0x5au8; len]; wanted.len()];
            let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            rs.reconstruct(&units, &wanted, &mut outs)?;
            for (k, &w) in wanted.iter().enumerate() {
                prop_assert_eq!(&bufs[k], all[w]);
            }
        }
    }
}
