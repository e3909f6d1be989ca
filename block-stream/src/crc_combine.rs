//! CRC combination: the CRC of bytes A followed by bytes B, from A's CRC,
//! B's CRC and B's length, without reading a byte.
//!
//! A verified read off checksum-window boundaries folds the datanode's edge
//! checksums into each window's CRC ([`checksum_combine`]), and the S3
//! gateway folds part CRCs into a full-object CRC; both need this once or
//! twice per call. The crates the workspace computes CRCs with (`crc32c`
//! 0.6, `crc-fast` 1.10) combine by repeated squaring of a 32×32 (64×64)
//! bit matrix, which measured 18–22 µs per combination of a 12 KiB tail on
//! this project's machine: more than half of a whole 4 KiB pread. Here a
//! combination is one carry-less multiplication modulo the polynomial per
//! nonzero hex digit of B's length, by precomputed powers of x, each done
//! four bits at a time: 0.04–0.15 µs for lengths below 64 KiB before the
//! four-bit steps, about two thirds of that with them. For the 32-bit CRCs
//! on an x86-64 CPU with PCLMULQDQ (detected at run time) each
//! multiplication is one carry-less multiply instruction and four table
//! steps of the CRC's own byte-wise reduction instead.
//!
//! The identity used, for a reflected CRC whose initial value equals its
//! final XOR (all ones for CRC-32/ISO-HDLC, CRC-32/ISCSI and CRC-64/NVME):
//! `crc(A ‖ B) = crc(A) · x^(8·|B|) mod P ⊕ crc(B)`; the two register
//! presets cancel in the XOR.
//!
//! [`checksum_combine`]: crate::checksum::checksum_combine

/// A reflected CRC of `width` bits (8 to 64) whose initial value equals its
/// final XOR, with the powers of x it combines by.
///
/// Values are held in the CRC's own bit order: the register's top bit is
/// the coefficient of `x^0`, bit 0 that of `x^(width-1)`.
#[derive(Debug, Clone)]
pub struct ReflectedCrc {
    width: u32,
    /// The polynomial without its `x^width` term, reflected (e.g.
    /// `0xEDB8_8320` for CRC-32).
    poly: u64,
    /// `shifts[k][j] = x^(8 · j · 16^k) mod P`: the shift past `j · 16^k`
    /// bytes, for each hex digit `k` of a 64-bit length. A length's shift
    /// is the product of one entry per nonzero digit (at most 4 below
    /// 64 KiB), 2 KiB per CRC.
    shifts: [[u64; 16]; 16],
    /// `times_x4[v]`: the 4-bit polynomial in a value's lowest four bits
    /// (its `x^(width-4) .. x^(width-1)` coefficients) times `x^4`, mod P:
    /// what shifting a value right by four bits must add back.
    times_x4: [u64; 16],
    /// `times_x8[v]`: the 8-bit polynomial in a value's lowest eight bits
    /// times `x^8`, mod P (the CRC's byte-wise table): what shifting a value
    /// right by eight bits must add back.
    times_x8: [u64; 256],
}

/// CRC-32/ISO-HDLC (zlib's CRC-32; Ozone's `CRC32`, crc32fast).
pub static CRC32: ReflectedCrc = ReflectedCrc::new(32, 0xEDB8_8320);
/// CRC-32/ISCSI (Castagnoli; Ozone's `CRC32C`, the crc32c crate).
pub static CRC32C: ReflectedCrc = ReflectedCrc::new(32, 0x82F6_3B78);
/// CRC-64/NVME (S3's `CRC64NVME` checksum).
pub static CRC64_NVME: ReflectedCrc = ReflectedCrc::new(64, 0x9A6C_9329_AC4B_C9B5);

impl ReflectedCrc {
    /// The CRC of `width` bits (8..=64, a multiple of 4) with reflected polynomial `poly`
    /// (below `2^width`); its table of shifts is computed at compile time
    /// when used in a constant or static.
    ///
    /// # Panics
    /// At compile time (or at the call) when `width` is outside 8..=64 or
    /// not a multiple of 4, or `poly` has bits at or above `width`.
    #[must_use]
    pub const fn new(width: u32, poly: u64) -> Self {
        assert!(
            width >= 8 && width <= 64 && width.is_multiple_of(4),
            "CRC width must be 8..=64 bits, a multiple of 4"
        );
        assert!(
            width == 64 || poly >> width == 0,
            "the polynomial must fit in the width"
        );
        let one = 1u64 << (width - 1); // x^0
        let mut crc = Self {
            width,
            poly,
            shifts: [[one; 16]; 16],
            times_x4: [0; 16],
            times_x8: [0; 256],
        };
        let mut v = 0;
        while v < 256 {
            crc.times_x8[v] = crc.times_x_steps(v as u64, 8);
            v += 1;
        }
        let mut v = 0;
        while v < 16 {
            crc.times_x4[v] = crc.times_x_steps(v as u64, 4);
            v += 1;
        }
        // x^8: one byte. x^1 is the coefficient next to x^0's top bit.
        let mut byte = 1u64 << (width - 2);
        let mut i = 0;
        while i < 3 {
            byte = crc.multiply(byte, byte);
            i += 1;
        }
        // step = x^(8 · 16^k), squared four times per digit.
        let mut step = byte;
        let mut k = 0;
        while k < 16 {
            let mut j = 1;
            while j < 16 {
                crc.shifts[k][j] = crc.multiply(crc.shifts[k][j - 1], step);
                j += 1;
            }
            let mut sq = 0;
            while sq < 4 {
                step = crc.multiply(step, step);
                sq += 1;
            }
            k += 1;
        }
        crc
    }

    /// The CRC of A ‖ B from `a` = crc(A), `b` = crc(B) and `len_b` = |B| in
    /// bytes. Bits of `a` and `b` above the width are ignored.
    #[must_use]
    pub fn combine(&self, a: u64, b: u64, len_b: u64) -> u64 {
        let mask = self.mask();
        let (mut a, b) = (a & mask, b & mask);
        // a · x^(8·len_b): one multiplication per nonzero hex digit.
        let mut n = len_b;
        let mut k = 0;
        while n != 0 {
            let digit = (n & 15) as usize;
            if digit != 0 {
                a = self.multiply_fast(a, self.shifts[k][digit]);
            }
            n >>= 4;
            k += 1;
        }
        a ^ b
    }

    /// `v` times `x^steps`, mod P, one power of x at a time (`v`'s bits are
    /// coefficients of the top powers; each step reduces the one that
    /// overflows).
    const fn times_x_steps(&self, v: u64, steps: u32) -> u64 {
        let mut t = v;
        let mut step = 0;
        while step < steps {
            t = if t & 1 == 1 {
                (t >> 1) ^ self.poly
            } else {
                t >> 1
            };
            step += 1;
        }
        t
    }

    /// `a · b mod P` (both below `2^width`) the fastest way this CPU has:
    /// the carry-less [`clmul::product`] reduced by
    /// [`reduce_product_32`](Self::reduce_product_32) for a 32-bit CRC where
    /// the CPU has the instruction, else
    /// [`multiply_by_nibbles`](Self::multiply_by_nibbles).
    fn multiply_fast(&self, a: u64, b: u64) -> u64 {
        if self.width == 32
            && let Some(p) = clmul::product(a, b)
        {
            return self.reduce_product_32(p);
        }
        self.multiply_by_nibbles(a, b)
    }

    /// `a · b mod P` for a 32-bit CRC from the carry-less product `p` of
    /// `a` and `b`: with both in the CRC's bit order, `p`'s bits 62..0 hold
    /// the product's coefficients of `x^0 .. x^62`, so `p << 1` holds
    /// `x^0 .. x^31` in its upper half, in the CRC's order, and in its lower
    /// half a value `L` standing for `L · x^32`, which four byte-wise steps
    /// of the CRC's table reduce (a table-driven CRC's register update with
    /// a zero byte is exactly `r · x^8 mod P`). On this project's machine
    /// (2026-12-07) the four combinations of a verified 4 KiB pread (three
    /// on the datanode, one on the client) executed 640 instructions with
    /// it against 1,770 with four-bit steps (callgrind, `raw-verified`
    /// reads, 10,000 against 2,000 reads).
    fn reduce_product_32(&self, p: u64) -> u64 {
        let p = p << 1;
        let mut low = p & 0xFFFF_FFFF;
        for _ in 0..4 {
            low = (low >> 8) ^ self.times_x8[(low & 0xFF) as usize];
        }
        (p >> 32) ^ low
    }

    /// `a · b mod P` four coefficients of `a` at a time (Horner's rule from
    /// `a`'s highest powers down): `b` times each 4-bit polynomial is one
    /// entry of a 16-entry table built per call, and each step multiplies
    /// the running product by `x^4` with [`times_x4`](Self::times_x4). On
    /// this project's machine (2026-12-07) a CRC32 multiplication takes 18 ns
    /// against 27 ns for [`multiply`](Self::multiply)'s bit-by-bit loop, and
    /// a verified 4 KiB pread, whose datanode and client combine four times,
    /// executes 5,000 fewer of the 12,800 instructions its checking cost
    /// (callgrind, `raw-verified` against `raw-readchunk` reads).
    fn multiply_by_nibbles(&self, a: u64, b: u64) -> u64 {
        // b · x^i for i = 0..4, then every sum of them: table[v] is b times
        // the polynomial whose x^0..x^3 coefficients are v's bits 3..0 (the
        // order a's reflected bits come in).
        let times_x = |p: u64| {
            if p & 1 == 1 {
                (p >> 1) ^ self.poly
            } else {
                p >> 1
            }
        };
        let b1 = times_x(b);
        let b2 = times_x(b1);
        let b3 = times_x(b2);
        let mut table = [0u64; 16];
        (table[8], table[4], table[2], table[1]) = (b, b1, b2, b3);
        for v in 3..16usize {
            // Every other entry: the one without v's lowest set bit, plus it.
            let low = v & v.wrapping_neg();
            table[v] = table[v ^ low] ^ table[low];
        }
        let mut product = 0u64;
        // a's nibbles from its highest powers (its lowest bits) up to x^0.
        let mut shift = 0;
        while shift < self.width {
            let times_x4 = (product >> 4) ^ self.times_x4[(product & 15) as usize];
            product = times_x4 ^ table[((a >> shift) & 15) as usize];
            shift += 4;
        }
        product
    }

    const fn mask(&self) -> u64 {
        if self.width == 64 {
            u64::MAX
        } else {
            (1 << self.width) - 1
        }
    }

    /// `a · b mod P`, both in the CRC's bit order.
    const fn multiply(&self, a: u64, mut b: u64) -> u64 {
        let mut product = 0;
        // Walk a's coefficients from x^0 (the top bit) up, with b · x^i.
        let mut bit = 1u64 << (self.width - 1);
        while bit != 0 {
            if a & bit != 0 {
                product ^= b;
            }
            // The rest of a is zero: no more terms.
            if a & (bit - 1) == 0 {
                break;
            }
            bit >>= 1;
            b = if b & 1 == 1 {
                (b >> 1) ^ self.poly
            } else {
                b >> 1
            };
        }
        product
    }
}

/// The carry-less multiplication instruction (x86-64 PCLMULQDQ), detected at
/// run time: the one use of `unsafe` in this crate.
mod clmul {
    /// The carry-less product of `a` and `b`, each below `2^32` (at most 63
    /// bits), or `None` when this CPU (or target) has no carry-less
    /// multiplication instruction.
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    pub(super) fn product(a: u64, b: u64) -> Option<u64> {
        if a >> 32 != 0 || b >> 32 != 0 || !std::arch::is_x86_feature_detected!("pclmulqdq") {
            return None;
        }
        // SAFETY: the CPU supports PCLMULQDQ (checked just above), the only
        // requirement of `pclmul`.
        Some(unsafe { pclmul(a, b) })
    }

    /// See the x86-64 [`product`].
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn product(_a: u64, _b: u64) -> Option<u64> {
        None
    }

    /// The carry-less product of the 32-bit `a` and `b`.
    ///
    /// # Safety
    /// The CPU must support PCLMULQDQ.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "pclmulqdq")]
    #[allow(unsafe_code)]
    unsafe fn pclmul(a: u64, b: u64) -> u64 {
        use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi64_si128, _mm_cvtsi128_si64};
        // The casts reinterpret bits: both inputs and the product's low 64
        // bits (all of it, for 32-bit inputs) are taken as they are.
        #[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
        let p = _mm_cvtsi128_si64(_mm_clmulepi64_si128(
            _mm_cvtsi64_si128(a as i64),
            _mm_cvtsi64_si128(b as i64),
            0,
        )) as u64;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crc32(b: &[u8]) -> u64 {
        u64::from(crc32fast::hash(b))
    }
    fn crc32c(b: &[u8]) -> u64 {
        u64::from(crc32c::crc32c(b))
    }
    /// CRC-64/NVME bit by bit, from its parameters (reflected, poly
    /// 0xAD93D23594C93659 reflected to 0x9A6C9329AC4BC9B5, init and xorout
    /// all ones), so the test does not lean on the code it checks.
    fn crc64_nvme(b: &[u8]) -> u64 {
        let mut r = u64::MAX;
        for &byte in b {
            r ^= u64::from(byte);
            for _ in 0..8 {
                r = if r & 1 == 1 {
                    (r >> 1) ^ 0x9A6C_9329_AC4B_C9B5
                } else {
                    r >> 1
                };
            }
        }
        !r
    }

    #[test]
    fn check_values_and_known_splits() {
        // The catalogue's check values of "123456789", to pin the reference
        // functions used below.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc64_nvme(b"123456789"), 0xAE8B_1486_0A79_9888);
        let msg = b"123456789";
        for split in 0..=msg.len() {
            let (a, b) = msg.split_at(split);
            for (crc, f) in [
                (&CRC32, crc32 as fn(&[u8]) -> u64),
                (&CRC32C, crc32c),
                (&CRC64_NVME, crc64_nvme),
            ] {
                assert_eq!(
                    crc.combine(f(a), f(b), b.len() as u64),
                    f(msg),
                    "split at {split}"
                );
            }
        }
    }

    #[test]
    fn the_carry_less_product_is_exact() {
        // Available exactly where the CPU has the instruction, so that the
        // proptests below check the path combinations take.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            clmul::product(1, 1).is_some(),
            std::arch::is_x86_feature_detected!("pclmulqdq")
        );
        if let Some(p) = clmul::product(0xFFFF_FFFF, 0xFFFF_FFFF) {
            // Bit m of the square counts the pairs i + j = m, odd for even m.
            assert_eq!(p, 0x5555_5555_5555_5555);
        }
        assert_eq!(clmul::product(1 << 32, 1), None, "wider than 32 bits");
    }

    #[test]
    fn agrees_with_the_libraries_on_huge_lengths() {
        // No bytes to check against at 2^40 or u64::MAX bytes: the
        // libraries' own (slow) combinations are the reference.
        for len in [1u64 << 40, u64::MAX, (1 << 33) + 12_345] {
            let (a, b) = (0x1234_5678, 0x9ABC_DEF0);
            let mut h = crc32fast::Hasher::new_with_initial_len(a, 0);
            h.combine(&crc32fast::Hasher::new_with_initial_len(b, len));
            assert_eq!(
                CRC32.combine(a.into(), b.into(), len),
                u64::from(h.finalize())
            );
            if let Ok(n) = usize::try_from(len) {
                assert_eq!(
                    CRC32C.combine(a.into(), b.into(), len),
                    u64::from(crc32c::crc32c_combine(a, b, n))
                );
            }
        }
    }

    proptest! {
        /// The nibble-wise multiplication combinations use equals the
        /// bit-by-bit one the tables are built with, for every CRC.
        #[test]
        fn both_multiplications_agree(a in any::<u64>(), b in any::<u64>()) {
            for crc in [&CRC32, &CRC32C, &CRC64_NVME] {
                let (a, b) = (a & crc.mask(), b & crc.mask());
                prop_assert_eq!(crc.multiply_by_nibbles(a, b), crc.multiply(a, b));
            }
        }

        /// The reduction of a carry-less product equals the bit-by-bit
        /// multiplication on any CPU (the product computed in software).
        #[test]
        fn reducing_a_carry_less_product_agrees(a in any::<u32>(), b in any::<u32>()) {
            let mut p = 0u64;
            for i in 0..32 {
                if b >> i & 1 == 1 {
                    p ^= u64::from(a) << i;
                }
            }
            for crc in [&CRC32, &CRC32C] {
                prop_assert_eq!(crc.reduce_product_32(p), crc.multiply(a.into(), b.into()));
            }
        }

        /// The multiplication combinations use (carry-less where the CPU
        /// has it) equals the bit-by-bit one, for every CRC.
        #[test]
        fn the_fast_multiplication_agrees(a in any::<u64>(), b in any::<u64>()) {
            for crc in [&CRC32, &CRC32C, &CRC64_NVME] {
                let (a, b) = (a & crc.mask(), b & crc.mask());
                prop_assert_eq!(crc.multiply_fast(a, b), crc.multiply(a, b));
            }
        }

        #[test]
        fn combining_equals_computing_the_concatenation(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            split in any::<prop::sample::Index>(),
        ) {
            let at = split.index(data.len() + 1);
            let (a, b) = data.split_at(at);
            let n = b.len() as u64;
            prop_assert_eq!(CRC32.combine(crc32(a), crc32(b), n), crc32(&data));
            prop_assert_eq!(CRC32C.combine(crc32c(a), crc32c(b), n), crc32c(&data));
            prop_assert_eq!(CRC64_NVME.combine(crc64_nvme(a), crc64_nvme(b), n), crc64_nvme(&data));
        }

        /// Every digit of the table of each CRC, against the libraries'
        /// own combinations (no bytes exist to check such lengths against).
        #[test]
        fn agrees_with_the_libraries_at_any_length(
            a in any::<u64>(),
            b in any::<u64>(),
            len in any::<u64>(),
        ) {
            let (a32, b32) = (a as u32, b as u32);
            let mut h = crc32fast::Hasher::new_with_initial_len(a32, 0);
            h.combine(&crc32fast::Hasher::new_with_initial_len(b32, len));
            prop_assert_eq!(CRC32.combine(a32.into(), b32.into(), len), u64::from(h.finalize()));
            let n = usize::try_from(len).expect("64-bit usize");
            prop_assert_eq!(
                CRC32C.combine(a32.into(), b32.into(), len),
                u64::from(crc32c::crc32c_combine(a32, b32, n))
            );
            prop_assert_eq!(
                CRC64_NVME.combine(a, b, len),
                crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc64Nvme, a, b, len)
            );
        }
    }
}
