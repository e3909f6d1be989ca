//! `EncodingType=url` of S3 listings. The listing itself (prefix, delimiter,
//! paging) is `ec_client::listing`.
//!
//! Source: AWS S3 API reference, ListObjectsV2 (`EncodingType=url`).

use s3s::dto;

/// `EncodingType=url` of a listing: keys and prefixes are percent-encoded in
/// the answer (clients decode them), so that any key survives XML and the
/// client's decoding (a `+` or `%` in a key, say).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Encoding(bool);

/// What stays literal under `EncodingType=url`: unreserved characters and `/`.
const URL_KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

impl Encoding {
    /// The encoding a request asked for.
    pub(crate) fn of(e: Option<&dto::EncodingType>) -> Self {
        Self(e.is_some_and(|e| e.as_str() == dto::EncodingType::URL))
    }

    /// `v` as the answer carries it.
    pub(crate) fn s(self, v: String) -> String {
        if self.0 {
            percent_encoding::utf8_percent_encode(&v, URL_KEEP).to_string()
        } else {
            v
        }
    }

    /// An optional `v` as the answer carries it.
    pub(crate) fn o(self, v: Option<String>) -> Option<String> {
        v.map(|v| self.s(v))
    }
}
