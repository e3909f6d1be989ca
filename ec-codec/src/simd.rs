//! The vectorised GF(2^8) kernel: split-table multiplication (Plank, Greenan and Miller,
//! "Screaming Fast Galois Field Arithmetic Using Intel SIMD Instructions", FAST 2013; the
//! method ISA-L's `gf_vect_dot_prod` uses). A product `c * b` is `lo[b & 15] ^ hi[b >> 4]`
//! with two 16-entry tables per coefficient (`lo[x] = c * x`, `hi[x] = c * (x << 4)`), and a
//! byte shuffle (`vpshufb`) looks up 32 bytes at once.
//!
//! The matrix is applied column-wise: for each 32-byte column, every output accumulates the
//! products of every input in a register and is stored once, so an output is written once per
//! column instead of read and written once per input. The tail shorter than a vector goes
//! through the same tables in scalar code.
//!
//! Runtime detection picks AVX2 where the CPU has it (x86-64 only); elsewhere the caller uses
//! the scalar kernel. This is the one module of the crate that uses `unsafe`: the intrinsics
//! and the unaligned loads and stores, whose bounds are checked before the loop starts.

#![allow(unsafe_code)]

use reed_solomon_erasure::galois_8 as gf;

/// The two lookup tables of each coefficient, in row-major order: `[lo; 16] ++ [hi; 16]`.
pub(crate) fn tables(coeffs: &[u8]) -> Vec<[u8; 32]> {
    coeffs
        .iter()
        .map(|&c| {
            let mut t = [0u8; 32];
            for x in 0..16u8 {
                t[usize::from(x)] = gf::mul(c, x);
                t[16 + usize::from(x)] = gf::mul(c, x << 4);
            }
            t
        })
        .collect()
}

/// Whether this CPU runs the vectorised kernel.
#[must_use]
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `outputs[i] = sum_j coeffs[i * n + j] * inputs[j]` over the first `len` bytes, with the
/// vector kernel. Returns false (and touches nothing) when the CPU lacks it or a slice is
/// shorter than `len`: the caller then uses the scalar kernel.
pub(crate) fn apply_matrix(
    coeffs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
) -> bool {
    if !available()
        || inputs.is_empty()
        || coeffs.len() != inputs.len() * outputs.len()
        || inputs.iter().any(|i| i.len() < len)
        || outputs.iter().any(|o| o.len() < len)
    {
        return false;
    }
    let tables = tables(coeffs);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available()` confirmed AVX2, and every slice holds at least `len` bytes,
        // which is all the kernel reads or writes.
        unsafe { avx2::apply(&tables, inputs, outputs, len) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = tables;
        false
    }
}

/// Scalar use of the split tables, for the bytes after the last full vector.
fn apply_tail(
    tables: &[[u8; 32]],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    from: usize,
    len: usize,
) {
    let n_in = inputs.len();
    for (r, out) in outputs.iter_mut().enumerate() {
        for i in from..len {
            let mut acc = 0u8;
            for (j, input) in inputs.iter().enumerate() {
                let t = &tables[r * n_in + j];
                let b = input[i];
                acc ^= t[usize::from(b & 15)] ^ t[16 + usize::from(b >> 4)];
            }
            out[i] = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm_loadu_si128, _mm256_and_si256, _mm256_broadcastsi128_si256,
        _mm256_loadu_si256, _mm256_set1_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8,
        _mm256_srli_epi64, _mm256_storeu_si256, _mm256_xor_si256,
    };

    /// Bytes per vector.
    const LANES: usize = 32;

    /// The vector kernel.
    ///
    /// # Safety
    /// The CPU must support AVX2; every input and output must hold at least `len` bytes; and
    /// `tables` must hold `inputs.len() * outputs.len()` entries.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn apply(
        tables: &[[u8; 32]],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        len: usize,
    ) {
        let n_in = inputs.len();
        let mask = _mm256_set1_epi8(0x0f);
        let full = len / LANES * LANES;
        let mut at = 0;
        while at < full {
            for (r, out) in outputs.iter_mut().enumerate() {
                let mut acc: __m256i = _mm256_setzero_si256();
                for (j, input) in inputs.iter().enumerate() {
                    let t = &tables[r * n_in + j];
                    // SAFETY: `t` holds 32 bytes; `at + LANES <= full <= len <= input.len()`.
                    let (lo, hi, x) = unsafe {
                        (
                            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())),
                            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().add(16).cast())),
                            _mm256_loadu_si256(input.as_ptr().add(at).cast()),
                        )
                    };
                    let low = _mm256_and_si256(x, mask);
                    let high = _mm256_and_si256(_mm256_srli_epi64::<4>(x), mask);
                    acc = _mm256_xor_si256(
                        acc,
                        _mm256_xor_si256(
                            _mm256_shuffle_epi8(lo, low),
                            _mm256_shuffle_epi8(hi, high),
                        ),
                    );
                }
                // SAFETY: `at + LANES <= full <= len <= out.len()`.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(at).cast(), acc) };
            }
            at += LANES;
        }
        super::apply_tail(tables, inputs, outputs, full, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(coeffs: &[u8], inputs: &[&[u8]], n_out: usize, len: usize) -> Vec<Vec<u8>> {
        (0..n_out)
            .map(|r| {
                (0..len)
                    .map(|i| {
                        inputs.iter().enumerate().fold(0u8, |acc, (j, input)| {
                            acc ^ gf::mul(coeffs[r * inputs.len() + j], input[i])
                        })
                    })
                    .collect()
            })
            .collect()
    }

    proptest::proptest! {
        /// The vector kernel (where the CPU has it) and its tables agree with scalar field
        /// arithmetic for any coefficients, any shape up to 10 x 4 and any length, tails
        /// included.
        #[test]
        fn agrees_with_scalar_arithmetic(
            n_in in 1usize..=10,
            n_out in 1usize..=4,
            len in 0usize..300,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut state = seed;
            let mut next = || {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            };
            let coeffs: Vec<u8> = (0..n_in * n_out).map(|_| next()).collect();
            let data: Vec<Vec<u8>> = (0..n_in).map(|_| (0..len).map(|_| next()).collect()).collect();
            let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let want = scalar(&coeffs, &inputs, n_out, len);
            let mut got: Vec<Vec<u8>> = vec![vec![0xa5; len]; n_out];
            let mut outs: Vec<&mut [u8]> = got.iter_mut().map(Vec::as_mut_slice).collect();
            if apply_matrix(&coeffs, &inputs, &mut outs, len) {
                proptest::prop_assert_eq!(&got, &want);
            }
            let tables = tables(&coeffs);
            let mut tail: Vec<Vec<u8>> = vec![vec![0x5a; len]; n_out];
            let mut outs: Vec<&mut [u8]> = tail.iter_mut().map(Vec::as_mut_slice).collect();
            apply_tail(&tables, &inputs, &mut outs, 0, len);
            proptest::prop_assert_eq!(&tail, &want);
        }
    }

    #[test]
    fn short_slices_are_refused_not_read() {
        let a = [1u8; 10];
        let mut o = [0u8; 64];
        assert!(!apply_matrix(&[2], &[&a], &mut [&mut o], 64));
    }
}
