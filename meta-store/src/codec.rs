//! Order-preserving encodings of typed keys and values, so that the om's
//! tables (a redb table with tuple keys today, such as `(bucket, key)`)
//! become ranges of one ordered byte keyspace with the same order.
//!
//! - `u32`, `u64`: fixed-width big-endian (byte order is numeric order).
//! - `String`, `Vec<u8>`: the bytes with every `0x00` written `0x00 0x01`,
//!   then the terminator `0x00 0x00`. Self-delimiting, and byte order is the
//!   strings' order (`"a" < "a\0" < "a\x01" < "ab"`) whatever parts follow:
//!   the terminator sorts below both an escaped `0x00` and any other byte.
//! - `()`: nothing.
//! - [`Raw`]: the bytes as they are, to the end (values only).
//! - Tuples: the parts one after another, so a tuple's encoding starts with
//!   the encoding of its leading parts: all keys of one bucket are one range.
//!
//! The same encodings serve values ([`Table`](crate::Table) stores `V` with
//! them), where order does not matter but a typed decode does.

/// Why bytes did not decode as the type asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes ended inside a part.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A string part had a `0x00` followed by neither `0x00` nor `0x01`.
    #[error("bad escape in a string part")]
    BadEscape,
    /// A string part was not UTF-8.
    #[error("string part is not UTF-8")]
    NotUtf8,
    /// Bytes were left after the last part.
    #[error("{0} bytes left after the last part")]
    Trailing(usize),
}

/// A type with an order-preserving, self-delimiting byte encoding.
pub trait Codec: Sized {
    /// Appends this value's encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads one value from the front of `input`, advancing it past it.
    ///
    /// # Errors
    /// [`DecodeError`] if `input` does not start with an encoding of `Self`.
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError>;
}

/// The encoding of `v` alone.
#[must_use]
pub fn to_bytes<T: Codec>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    v.encode(&mut out);
    out
}

/// Decodes `bytes` as exactly one `T`.
///
/// # Errors
/// [`DecodeError`], including [`DecodeError::Trailing`] for bytes past it.
pub fn from_bytes<T: Codec>(mut bytes: &[u8]) -> Result<T, DecodeError> {
    let v = T::decode(&mut bytes)?;
    if bytes.is_empty() {
        Ok(v)
    } else {
        Err(DecodeError::Trailing(bytes.len()))
    }
}

fn take<const N: usize>(input: &mut &[u8], what: &'static str) -> Result<[u8; N], DecodeError> {
    let Some((head, rest)) = input.split_first_chunk::<N>() else {
        return Err(DecodeError::Truncated(what));
    };
    *input = rest;
    Ok(*head)
}

impl Codec for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_be_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
        Ok(Self::from_be_bytes(take::<8>(input, "u64")?))
    }
}

impl Codec for u32 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_be_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
        Ok(Self::from_be_bytes(take::<4>(input, "u32")?))
    }
}

impl Codec for () {
    fn encode(&self, _out: &mut Vec<u8>) {}
    fn decode(_input: &mut &[u8]) -> Result<Self, DecodeError> {
        Ok(())
    }
}

/// Appends `bytes` as a string part (escaped, terminated).
fn encode_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(1);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

impl Codec for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
        let mut v = Vec::new();
        let mut i = 0;
        loop {
            match input.get(i) {
                None => return Err(DecodeError::Truncated("string")),
                Some(0) => match input.get(i + 1) {
                    Some(1) => {
                        v.push(0);
                        i += 2;
                    }
                    // The terminator: the next part (or the end) follows.
                    Some(0) => {
                        *input = &input[i + 2..];
                        return Ok(v);
                    }
                    Some(_) => return Err(DecodeError::BadEscape),
                    None => return Err(DecodeError::Truncated("string")),
                },
                Some(&b) => {
                    v.push(b);
                    i += 1;
                }
            }
        }
    }
}

impl Codec for String {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self.as_bytes(), out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
        String::from_utf8(Vec::<u8>::decode(input)?).map_err(|_| DecodeError::NotUtf8)
    }
}

/// Bytes stored as they are, not escaped: for a value that is one opaque blob (an encoded
/// protobuf message), where [`Vec<u8>`]'s escaping would only cost space and time. Not
/// self-delimiting: it takes every byte left, so it serves as a table's value or the last
/// part of one, never as a key part followed by another.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Raw(pub Vec<u8>);

impl Codec for Raw {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
        let v = input.to_vec();
        *input = &[];
        Ok(Self(v))
    }
}

macro_rules! tuple_codec {
    ($($t:ident),+) => {
        impl<$($t: Codec),+> Codec for ($($t,)+) {
            #[allow(non_snake_case)]
            fn encode(&self, out: &mut Vec<u8>) {
                let ($($t,)+) = self;
                $($t.encode(out);)+
            }
            fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
                Ok(($($t::decode(input)?,)+))
            }
        }
    };
}
tuple_codec!(A);
tuple_codec!(A, B);
tuple_codec!(A, B, C);
tuple_codec!(A, B, C, D);
tuple_codec!(A, B, C, D, E);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strings_with_nul_order_and_round_trip() {
        let words = ["", "\0", "\0\0", "a", "a\0", "a\0b", "a\x01", "ab", "b"];
        let enc: Vec<_> = words.iter().map(|w| to_bytes(&(*w).to_string())).collect();
        for w in enc.windows(2) {
            assert!(w[0] < w[1], "{:?} < {:?}", w[0], w[1]);
        }
        for (w, e) in words.iter().zip(&enc) {
            assert_eq!(from_bytes::<String>(e).as_deref(), Ok(*w));
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(
            from_bytes::<u64>(&[1, 2]),
            Err(DecodeError::Truncated("u64"))
        );
        assert_eq!(
            from_bytes::<String>(b"ab"),
            Err(DecodeError::Truncated("string"))
        );
        assert_eq!(
            from_bytes::<String>(&[b'a', 0]),
            Err(DecodeError::Truncated("string"))
        );
        assert_eq!(
            from_bytes::<String>(&[0xc3, 0, 0]),
            Err(DecodeError::NotUtf8)
        );
        assert_eq!(
            from_bytes::<String>(&[b'a', 0, 7]),
            Err(DecodeError::BadEscape)
        );
        assert_eq!(
            from_bytes::<u32>(&[0, 0, 0, 1, 9]),
            Err(DecodeError::Trailing(1))
        );
    }

    /// A string that is a prefix of another sorts first whatever follows it
    /// in the tuple (an all-0xff number after the shorter one included).
    #[test]
    fn a_shorter_string_sorts_first_whatever_follows() {
        let s = to_bytes(&("a".to_string(), u64::MAX));
        let t = to_bytes(&("a\0".to_string(), 0u64));
        assert!(s < t);
    }

    proptest! {
        /// Tuple keys sort as their encodings do, and decode back.
        #[test]
        fn tuple_order_is_byte_order(
            a in ("[a\\x00\\x01]{0,4}", any::<u64>(), proptest::collection::vec(0u8..3, 0..6)),
            b in ("[a\\x00\\x01]{0,4}", any::<u64>(), proptest::collection::vec(0u8..3, 0..6)),
        ) {
            let (ea, eb) = (to_bytes(&a), to_bytes(&b));
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            prop_assert_eq!(from_bytes::<(String, u64, Vec<u8>)>(&ea), Ok(a.clone()));
            // A tuple's encoding starts with its first part's.
            prop_assert!(ea.starts_with(&to_bytes(&a.0)));
        }

        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = from_bytes::<(String, u32, Vec<u8>)>(&bytes);
            let _ = from_bytes::<(u64, String)>(&bytes);
        }
    }
}
