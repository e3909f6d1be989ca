//! Bulk kernels: multiply cells by GF(2^8) constants and accumulate. [`Kernel::Auto`] runs the
//! vectorised split-table kernel (`simd.rs`) where the CPU has it; the scalar kernel drives
//! `reed_solomon_erasure::galois_8`'s slice routines, with coefficients 0 and 1 (common in
//! systematic decode matrices) on plain copy/xor paths that the compiler vectorises.

use reed_solomon_erasure::galois_8 as gf;

/// Bytes processed per pass over all inputs and outputs: small enough that a pass over an
/// rs-10-4 stripe slice stays in L2 while the outputs stay hot in L1.
const BLOCK: usize = 16 * 1024;

/// `out = c * input`. Slices must be equally long.
fn mul_into(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => out.fill(0),
        1 => out.copy_from_slice(input),
        // The kernels index element 0, so they must not see empty slices.
        _ if input.is_empty() => {}
        _ => gf::mul_slice(c, input, out),
    }
}

/// `out ^= c * input`. Slices must be equally long.
fn mul_add_into(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => {}
        1 => xor_into(input, out),
        _ if input.is_empty() => {}
        _ => gf::mul_slice_xor(c, input, out),
    }
}

/// `out ^= input`, over the shorter of the two lengths.
pub(crate) fn xor_into(input: &[u8], out: &mut [u8]) {
    for (o, i) in out.iter_mut().zip(input) {
        *o ^= *i;
    }
}

/// Which GF(2^8) bulk kernel a codec runs. Both give the same bytes; they differ in speed
/// only (`cargo xtask bench codec` compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernel {
    /// The vectorised split-table kernel where the CPU has it (AVX2 on x86-64), else scalar.
    #[default]
    Auto,
    /// Scalar table lookups only.
    Scalar,
}

impl Kernel {
    /// Whether this CPU runs the vectorised kernel (AVX2 on x86-64); without it
    /// [`Kernel::Auto`] is the scalar kernel.
    #[must_use]
    pub fn simd_available() -> bool {
        crate::simd::available()
    }
}

/// `outputs[i] = sum_j coeffs[i * inputs.len() + j] * inputs[j]` over GF(2^8), with `kernel`.
///
/// All slices must be `len` bytes long, `inputs` non-empty, and `coeffs` hold
/// `outputs.len() * inputs.len()` entries; callers validate shapes first.
pub(crate) fn apply_matrix(
    kernel: Kernel,
    coeffs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
) {
    if kernel == Kernel::Auto && crate::simd::apply_matrix(coeffs, inputs, outputs, len) {
        return;
    }
    apply_matrix_scalar(coeffs, inputs, outputs, len);
}

/// The scalar kernel of [`apply_matrix`].
fn apply_matrix_scalar(coeffs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], len: usize) {
    let n_in = inputs.len();
    debug_assert!(n_in > 0);
    debug_assert_eq!(coeffs.len(), n_in * outputs.len());
    let mut start = 0;
    while start < len {
        let end = len.min(start + BLOCK);
        for (row, out) in coeffs.chunks_exact(n_in).zip(outputs.iter_mut()) {
            let out = &mut out[start..end];
            let mut terms = row.iter().zip(inputs);
            if let Some((&c, input)) = terms.next() {
                mul_into(c, &input[start..end], out);
            }
            for (&c, input) in terms {
                mul_add_into(c, &input[start..end], out);
            }
        }
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels agree with scalar field multiplication for every coefficient, including
    /// the 0 and 1 shortcuts, across a block boundary.
    #[test]
    fn matches_scalar() {
        let input: Vec<u8> = (0..BLOCK + 37).map(|i| (i * 7 + 3) as u8).collect();
        for c in 0..=255u8 {
            let mut out = vec![0xa5u8; input.len()];
            mul_into(c, &input, &mut out);
            assert!(out.iter().zip(&input).all(|(&o, &i)| o == gf::mul(c, i)));
            mul_add_into(c, &input, &mut out);
            assert!(out.iter().all(|&o| o == 0));
        }
        let mut out = vec![0u8; 0];
        mul_into(9, &[], &mut out);
        mul_add_into(9, &[], &mut out);
        apply_matrix(Kernel::Scalar, &[3, 4], &[&[], &[]], &mut [&mut []], 0);
        apply_matrix(Kernel::Auto, &[3, 4], &[&[], &[]], &mut [&mut []], 0);
    }

    /// apply_matrix computes a matrix-vector product per byte.
    #[test]
    fn matrix_product() {
        let a: Vec<u8> = (0..BLOCK * 2 + 5).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..a.len()).map(|i| (i % 13) as u8).collect();
        let mut o1 = vec![0u8; a.len()];
        let mut o2 = vec![0u8; a.len()];
        let coeffs = [2, 1, 0, 0x8e];
        for kernel in [Kernel::Scalar, Kernel::Auto] {
            apply_matrix(kernel, &coeffs, &[&a, &b], &mut [&mut o1, &mut o2], a.len());
            for i in 0..a.len() {
                assert_eq!(o1[i], gf::mul(2, a[i]) ^ b[i], "{kernel:?}");
                assert_eq!(o2[i], gf::mul(0x8e, b[i]), "{kernel:?}");
            }
        }
    }
}
