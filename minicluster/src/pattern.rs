//! A deterministic byte pattern addressable by offset, so that data of any
//! size can be written and verified without holding it in memory.
//!
//! Byte `i` of the pattern with seed `s` is byte `i % 8` (little-endian) of
//! splitmix64's output for word `i / 8` — the same generator the EC golden
//! vectors use, seeded per word.

/// splitmix64 of `x` (one round of its output function).
#[must_use]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of `seed` starting at byte `offset`.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let seed = splitmix64(seed);
    let mut i = 0usize;
    while i < buf.len() {
        let at = offset + i as u64;
        let word = splitmix64(seed ^ (at / 8)).to_le_bytes();
        let from = usize::try_from(at % 8).unwrap_or(0);
        let n = (8 - from).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[from..from + n]);
        i += n;
    }
}

/// `len` bytes of the pattern of `seed` from `offset`.
#[must_use]
pub fn bytes(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, offset, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_window_equals_the_slice_of_the_whole() {
        let whole = bytes(5, 0, 1000);
        for (off, len) in [(0, 1), (3, 17), (8, 8), (999, 1), (123, 400)] {
            assert_eq!(bytes(5, off as u64, len), whole[off..off + len]);
        }
        assert_ne!(bytes(5, 0, 64), bytes(6, 0, 64));
    }
}
