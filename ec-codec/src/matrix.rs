//! Small dense matrices over GF(2^8) (polynomial 0x11d) for building encode and decode
//! matrices. Element arithmetic comes from `reed_solomon_erasure::galois_8`, whose tables are
//! generated from that polynomial (generator 2), the same field ISA-L and Hadoop use.
//! Matrices here are at most 32 x 32, so scalar element operations are fine; the bulk work on
//! cells happens in `rs.rs` with the slice kernels.

use reed_solomon_erasure::galois_8 as gf;

/// Row-major matrix over GF(2^8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matrix {
    rows: usize,
    cols: usize,
    cells: Vec<u8>,
}

impl Matrix {
    pub(crate) fn zeros(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            cells: vec![0; rows * cols],
        }
    }

    pub(crate) fn identity(n: usize) -> Self {
        let mut m = Self::zeros(n, n);
        for i in 0..n {
            m.cells[i * n + i] = 1;
        }
        m
    }

    /// The systematic generator of a `data + parity` code: `data` identity rows on top of
    /// `parity` Cauchy rows, where entry (i, j) of the whole matrix (i >= data) is
    /// `1 / (i xor j)`. This is the construction of ISA-L's `gf_gen_cauchy1_matrix`, which
    /// Hadoop's and Ozone's RS coders use. Requires `data + parity <= 256` so that every
    /// `i xor j` is a nonzero byte (callers cap the total at 32).
    pub(crate) fn cauchy_generator(data: usize, parity: usize) -> Self {
        let mut m = Self::zeros(data + parity, data);
        for j in 0..data {
            m.cells[j * data + j] = 1;
        }
        for i in data..data + parity {
            for j in 0..data {
                // i > j and both < 256, so i ^ j is in 1..=255 and the cast is lossless.
                #[allow(clippy::cast_possible_truncation)]
                let x = (i ^ j) as u8;
                m.cells[i * data + j] = gf::div(1, x);
            }
        }
        m
    }

    /// Row `r` as a slice of `cols` coefficients.
    pub(crate) fn row(&self, r: usize) -> &[u8] {
        &self.cells[r * self.cols..(r + 1) * self.cols]
    }

    /// All coefficients, row-major.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.cells
    }

    /// A new matrix made of the given rows, in the given order.
    pub(crate) fn select_rows(&self, rows: &[usize]) -> Self {
        let mut cells = Vec::with_capacity(rows.len() * self.cols);
        for &r in rows {
            cells.extend_from_slice(self.row(r));
        }
        Self {
            rows: rows.len(),
            cols: self.cols,
            cells,
        }
    }

    /// `self * other`; `self.cols` must equal `other.rows`.
    pub(crate) fn mul(&self, other: &Matrix) -> Matrix {
        debug_assert_eq!(self.cols, other.rows);
        let mut out = Matrix::zeros(self.rows, other.cols);
        for r in 0..self.rows {
            for k in 0..self.cols {
                let a = self.cells[r * self.cols + k];
                if a == 0 {
                    continue;
                }
                for c in 0..other.cols {
                    out.cells[r * other.cols + c] ^= gf::mul(a, other.cells[k * other.cols + c]);
                }
            }
        }
        out
    }

    /// Inverse of a square matrix by Gauss-Jordan elimination, or `None` if it is singular.
    pub(crate) fn invert(&self) -> Option<Matrix> {
        debug_assert_eq!(self.rows, self.cols);
        let n = self.rows;
        let mut a = self.clone();
        let mut inv = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| a.cells[r * n + col] != 0)?;
            if pivot != col {
                a.swap_rows(pivot, col);
                inv.swap_rows(pivot, col);
            }
            let scale = gf::div(1, a.cells[col * n + col]);
            a.scale_row(col, scale);
            inv.scale_row(col, scale);
            for r in 0..n {
                let factor = a.cells[r * n + col];
                if r != col && factor != 0 {
                    a.add_scaled_row(col, r, factor);
                    inv.add_scaled_row(col, r, factor);
                }
            }
        }
        Some(inv)
    }

    fn swap_rows(&mut self, x: usize, y: usize) {
        for c in 0..self.cols {
            self.cells.swap(x * self.cols + c, y * self.cols + c);
        }
    }

    fn scale_row(&mut self, r: usize, factor: u8) {
        for v in &mut self.cells[r * self.cols..(r + 1) * self.cols] {
            *v = gf::mul(*v, factor);
        }
    }

    /// `row[dst] += factor * row[src]` (addition is xor).
    fn add_scaled_row(&mut self, src: usize, dst: usize, factor: u8) {
        for c in 0..self.cols {
            let v = gf::mul(self.cells[src * self.cols + c], factor);
            self.cells[dst * self.cols + c] ^= v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field is GF(2^8) mod x^8+x^4+x^3+x^2+1 (0x11d): 2 * 0x80 wraps to 0x1d, and the
    /// inverses ISA-L's Cauchy rows start with hold.
    #[test]
    fn field_is_0x11d() {
        assert_eq!(gf::mul(2, 0x80), 0x1d);
        assert_eq!(gf::div(1, 2), 0x8e);
        assert_eq!(gf::div(1, 3), 0xf4);
        for x in 1..=255u8 {
            assert_eq!(gf::mul(x, gf::div(1, x)), 1);
        }
    }

    /// Generator rows for rs-3-2 match the README's listing and the identity sits on top.
    #[test]
    fn generator_shape() {
        let g = Matrix::cauchy_generator(3, 2);
        assert_eq!((g.rows, g.cols), (5, 3));
        assert_eq!(g.select_rows(&[0, 1, 2]), Matrix::identity(3));
        assert_eq!(g.row(3), &[0xf4, 0x8e, 0x01]);
        assert_eq!(g.row(4), &[0x47, 0xa7, 0x7a]);
    }

    /// Every d x d row selection of the generator is invertible, and inverse * matrix = I.
    #[test]
    fn all_square_submatrices_invert() {
        for (d, p) in [(3, 2), (6, 3), (4, 4), (2, 1)] {
            let g = Matrix::cauchy_generator(d, p);
            let n = d + p;
            for mask in 0u32..(1 << n) {
                if mask.count_ones() as usize != d {
                    continue;
                }
                let rows: Vec<usize> = (0..n).filter(|&r| mask & (1 << r) != 0).collect();
                let sub = g.select_rows(&rows);
                let inv = sub.invert().expect("Cauchy submatrix must be invertible");
                assert_eq!(inv.mul(&sub), Matrix::identity(d));
                assert_eq!(sub.mul(&inv), Matrix::identity(d));
            }
        }
    }

    /// A singular matrix is reported, not inverted.
    #[test]
    fn singular() {
        let m = Matrix {
            rows: 2,
            cols: 2,
            cells: vec![1, 2, 1, 2],
        };
        assert_eq!(m.invert(), None);
        assert!(m.as_slice().len() == 4);
    }
}
