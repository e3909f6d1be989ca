//! Integrity claims of a request body, verified before anything becomes visible (Amazon S3 User
//! Guide, "Checking object integrity"): `Content-MD5`, one `x-amz-checksum-{crc32, crc32c,
//! crc64nvme, sha1, sha256}` given as a header or announced in `x-amz-trailer` and sent after
//! an aws-chunked body, `x-amz-sdk-checksum-algorithm`, and the declared length
//! (`x-amz-decoded-content-length`, else `Content-Length`).
//!
//! Errors follow Amazon: a mismatch is 400 `BadDigest`; a malformed or empty `Content-MD5` is
//! 400 `InvalidDigest`; a malformed checksum value, two checksum headers, an unknown or
//! contradictory algorithm or a missing announced trailer is 400 `InvalidRequest`; a body
//! shorter or longer than declared is 400 `IncompleteBody`. The writer is dropped on any of
//! them, so nothing is committed and the previous object stays.
//!
//! Every object and part gets a checksum computed here and stored with it: the one the client
//! named, else CRC64NVME (Amazon's default for objects written without one).

use std::collections::BTreeMap;

use base64::Engine;
use futures::StreamExt;
use http::HeaderMap;
use md5::{Digest, Md5};
use s3s::crypto::{Checksum, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::StreamingBlob;
use s3s::{S3Result, TrailingHeaders, s3_error};

use crate::Gateway;
use crate::digests::{BodyDigests, Digests};
use crate::error::to_s3;

/// Metadata key of a stored object's or part's checksum algorithm (`CRC32`, ...).
pub(crate) const CHECKSUM_ALGORITHM: &str = "checksum-algorithm";
/// Metadata key of a stored checksum: base64 of the digest (`-N` appended for a composite
/// multipart checksum).
pub(crate) const CHECKSUM_VALUE: &str = "checksum-value";
/// Metadata key of a stored checksum's type: `FULL_OBJECT` or `COMPOSITE`.
pub(crate) const CHECKSUM_TYPE: &str = "checksum-type";

/// A checksum algorithm of S3's flexible checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub(crate) const ALL: [Algorithm; 5] = [
        Self::Crc32,
        Self::Crc32c,
        Self::Crc64Nvme,
        Self::Sha1,
        Self::Sha256,
    ];

    /// Amazon's name (`x-amz-checksum-algorithm` values).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64Nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// The header (and trailer) carrying a value of this algorithm.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::Crc32 => "x-amz-checksum-crc32",
            Self::Crc32c => "x-amz-checksum-crc32c",
            Self::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Self::Sha1 => "x-amz-checksum-sha1",
            Self::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Digest length, bytes.
    fn len(self) -> usize {
        match self {
            Self::Crc32 | Self::Crc32c => 4,
            Self::Crc64Nvme => 8,
            Self::Sha1 => 20,
            Self::Sha256 => 32,
        }
    }

    /// Whether it is a CRC (which can be combined over parts into a full-object value).
    pub(crate) fn is_crc(self) -> bool {
        matches!(self, Self::Crc32 | Self::Crc32c | Self::Crc64Nvme)
    }

    /// The algorithm named `name` (case-insensitive).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The digest of `data`.
    pub(crate) fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut h = Hasher::new(self);
        h.update(data);
        h.finish()
    }
}

/// An incremental digest of one algorithm.
pub(crate) enum Hasher {
    Crc32(Crc32),
    Crc32c(Crc32c),
    Crc64Nvme(Crc64Nvme),
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Hasher {
    pub(crate) fn new(a: Algorithm) -> Self {
        match a {
            Algorithm::Crc32 => Self::Crc32(Crc32::new()),
            Algorithm::Crc32c => Self::Crc32c(Crc32c::new()),
            Algorithm::Crc64Nvme => Self::Crc64Nvme(Crc64Nvme::new()),
            Algorithm::Sha1 => Self::Sha1(Sha1::new()),
            Algorithm::Sha256 => Self::Sha256(Sha256::new()),
        }
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        match self {
            Self::Crc32(h) => h.update(data),
            Self::Crc32c(h) => h.update(data),
            Self::Crc64Nvme(h) => h.update(data),
            Self::Sha1(h) => h.update(data),
            Self::Sha256(h) => h.update(data),
        }
    }

    /// The digest, big-endian for CRCs (as Amazon encodes them).
    pub(crate) fn finish(self) -> Vec<u8> {
        match self {
            Self::Crc32(h) => h.finalize().to_vec(),
            Self::Crc32c(h) => h.finalize().to_vec(),
            Self::Crc64Nvme(h) => h.finalize().to_vec(),
            Self::Sha1(h) => h.finalize().to_vec(),
            Self::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The header a client sends to claim the `algorithm` (`CRC32`, `CRC32C`, `CRC64NVME`, `SHA1`
/// or `SHA256`, any case) checksum of `data`, and its value (base64 of the digest, big-endian
/// for CRCs), as the SDKs compute it. `None` for an unknown algorithm. For tools that send
/// checksums (the S3 benchmark).
#[must_use]
pub fn checksum_header(algorithm: &str, data: &[u8]) -> Option<(&'static str, String)> {
    let a = Algorithm::parse(algorithm)?;
    Some((a.header(), b64(&a.digest(data))))
}

/// Decodes a checksum value of `a` given in `field`.
///
/// # Errors
/// 400 `InvalidRequest` when it is not base64 of a digest of the algorithm's length.
pub(crate) fn decode_value(a: Algorithm, value: &str, field: &str) -> S3Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
        .filter(|d| d.len() == a.len())
        .ok_or_else(|| s3_error!(InvalidRequest, "Value for {field} header is invalid."))
}

/// Where a request's checksum value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// None given: computed and stored only.
    Computed,
    /// A header, with its decoded digest.
    Header(Vec<u8>),
    /// A trailer announced in `x-amz-trailer`, sent after the body.
    Trailer,
}

/// What a request claims about its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    /// The algorithm computed and stored.
    pub(crate) algorithm: Algorithm,
    source: Source,
    /// `Content-MD5`, decoded.
    content_md5: Option<Vec<u8>>,
    /// The body length the client declared, bytes.
    declared_len: Option<u64>,
}

fn text<'a>(h: &'a HeaderMap, name: &str) -> S3Result<Option<&'a str>> {
    h.get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| s3_error!(InvalidRequest, "{name} is not text"))
        })
        .transpose()
}

impl Claims {
    /// The claims of a request with headers `h`. `default` is the algorithm computed when the
    /// request names none (CRC64NVME for an object; the upload's algorithm for a part);
    /// `required`, when set, is the only algorithm the request may name (a part of an upload
    /// created with one).
    ///
    /// # Errors
    /// As the module documentation says for malformed or contradictory claims.
    pub(crate) fn from_headers(
        h: &HeaderMap,
        default: Algorithm,
        required: Option<Algorithm>,
    ) -> S3Result<Self> {
        let content_md5 = match text(h, "content-md5")? {
            None => None,
            Some(v) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(v.trim())
                    .ok()
                    .filter(|d| d.len() == 16)
                    .ok_or_else(|| {
                        s3_error!(InvalidDigest, "The Content-MD5 you specified was invalid.")
                    })?,
            ),
        };
        let mut given = Vec::new();
        for a in Algorithm::ALL {
            if let Some(v) = text(h, a.header())? {
                given.push((a, decode_value(a, v, a.header())?));
            }
        }
        if given.len() > 1 {
            return Err(s3_error!(
                InvalidRequest,
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
            ));
        }
        let trailer = match text(h, "x-amz-trailer")? {
            None => None,
            Some(t) => Some(
                Algorithm::ALL
                    .into_iter()
                    .find(|a| a.header().eq_ignore_ascii_case(t.trim()))
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidRequest,
                            "The value specified in the x-amz-trailer header is not supported"
                        )
                    })?,
            ),
        };
        let sdk = match text(h, "x-amz-sdk-checksum-algorithm")? {
            None => None,
            Some(v) => Some(Algorithm::parse(v).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Checksum algorithm provided is unsupported. Please try again with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]"
                )
            })?),
        };
        let (algorithm, source) = match (given.pop(), trailer) {
            (Some(_), Some(_)) => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Expecting a single x-amz-checksum- header, not a header and a trailer"
                ));
            }
            (Some((a, digest)), None) => (a, Source::Header(digest)),
            (None, Some(a)) => (a, Source::Trailer),
            (None, None) => (sdk.or(required).unwrap_or(default), Source::Computed),
        };
        if sdk.is_some_and(|s| s != algorithm) {
            return Err(s3_error!(
                InvalidRequest,
                "Value for x-amz-sdk-checksum-algorithm header is invalid."
            ));
        }
        if let Some(r) = required
            && r != algorithm
        {
            return Err(s3_error!(
                InvalidRequest,
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                r.name().to_ascii_lowercase(),
                algorithm.name().to_ascii_lowercase()
            ));
        }
        let declared = text(h, "x-amz-decoded-content-length")?
            .or(text(h, "content-length")?)
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    s3_error!(
                        InvalidArgument,
                        "the declared content length is not a number"
                    )
                })
            })
            .transpose()?;
        Ok(Self {
            algorithm,
            source,
            content_md5,
            declared_len: declared,
        })
    }
}

/// Largest single PUT and largest part, bytes: 5 GiB (Amazon's limits).
pub(crate) const MAX_BODY: u64 = 5 * 1024 * 1024 * 1024;

impl Claims {
    /// Refuses a declared length over [`MAX_BODY`] with 400 `EntityTooLarge`, before any byte
    /// is read (the length is checked again against what arrives).
    ///
    /// # Errors
    /// As said.
    pub(crate) fn check_size(&self) -> S3Result<()> {
        match self.declared_len {
            Some(n) if n > MAX_BODY => Err(s3_error!(
                EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed object size: {n} bytes, at most {MAX_BODY}"
            )),
            _ => Ok(()),
        }
    }
}

/// A body as received and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Received {
    /// Bytes.
    pub(crate) len: u64,
    /// Hex MD5 (the ETag of a single-part object or of a part).
    pub(crate) md5_hex: String,
    /// The checksum's algorithm.
    pub(crate) algorithm: Algorithm,
    /// The checksum's digest.
    pub(crate) digest: Vec<u8>,
}

impl Received {
    /// The metadata a full-object checksum is stored under.
    pub(crate) fn metadata(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                CHECKSUM_ALGORITHM.to_string(),
                self.algorithm.name().to_string(),
            ),
            (CHECKSUM_VALUE.to_string(), b64(&self.digest)),
            (CHECKSUM_TYPE.to_string(), "FULL_OBJECT".to_string()),
        ])
    }
}

/// Streams `body` into `writer` while computing its MD5 and checksum, then verifies every claim
/// (`trailers` carries a trailer's value once the body is read).
///
/// # Errors
/// As the module documentation says; write failures.
pub(crate) async fn receive(
    gw: &Gateway,
    body: Option<StreamingBlob>,
    writer: &mut ec_client::KeyOutputStream,
    claims: &Claims,
    trailers: Option<&TrailingHeaders>,
) -> S3Result<Received> {
    // MD5 and the checksum are computed on a thread of their own while the bytes are
    // written (crate::digests); the body's chunks and those still being digested together
    // stay within the request's buffer bound.
    let mut digests = BodyDigests::start(claims.algorithm, None, gw.max_buffer() / 2);
    let mut n = 0u64;
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| body_error(&*e))?;
            if n.saturating_add(chunk.len() as u64) > MAX_BODY {
                return Err(s3_error!(
                    EntityTooLarge,
                    "the body exceeds {MAX_BODY} bytes"
                ));
            }
            let len = chunk.len() as u64;
            digests.update(chunk.clone()).await?;
            writer.write(&chunk).await.map_err(to_s3)?;
            n += len;
            gw.metrics().bytes_in(len);
        }
    }
    let Digests {
        md5,
        checksum: digest,
        ..
    } = digests.finish().await?;
    if let Some(declared) = claims.declared_len
        && declared != n
    {
        return Err(s3_error!(
            IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header: {n} received, {declared} declared"
        ));
    }
    if claims
        .content_md5
        .as_ref()
        .is_some_and(|m| m.as_slice() != md5.as_slice())
    {
        return Err(s3_error!(
            BadDigest,
            "The Content-MD5 you specified did not match what we received."
        ));
    }
    let claimed = match &claims.source {
        Source::Computed => None,
        Source::Header(d) => Some(d.clone()),
        Source::Trailer => {
            let header = claims.algorithm.header();
            let value = trailers
                .and_then(|t| {
                    t.read(|h| {
                        h.get(header)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string)
                    })
                })
                .flatten()
                .ok_or_else(|| {
                    s3_error!(
                        InvalidRequest,
                        "The {header} trailer announced in x-amz-trailer was not sent"
                    )
                })?;
            Some(decode_value(claims.algorithm, &value, header)?)
        }
    };
    if claimed.is_some_and(|c| c != digest) {
        return Err(s3_error!(
            BadDigest,
            "The {} you specified did not match the calculated checksum.",
            claims.algorithm.name()
        ));
    }
    Ok(Received {
        len: n,
        md5_hex: hex::encode(md5),
        algorithm: claims.algorithm,
        digest,
    })
}

/// Largest XML request body verified in memory (DeleteObjects of 1,000 long keys fits).
pub(crate) const MAX_XML_BODY: usize = 4 * 1024 * 1024;

/// Which claims describe the small XML body of a request the gateway parses, if it is one:
/// DeleteObjects and PutObjectTagging (`Content-MD5` and `x-amz-checksum-*`), and
/// CompleteMultipartUpload (`Content-MD5` only — its `x-amz-checksum-*` claims the completed
/// object's checksum, checked in `multipart`). `Some(true)`: all claims are the body's.
pub(crate) fn xml_body(method: &http::Method, uri: &http::Uri) -> Option<bool> {
    let keys: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .map(|kv| kv.split_once('=').map_or(kv, |(k, _)| k))
        .collect();
    match *method {
        http::Method::POST if keys.contains(&"delete") => Some(true),
        http::Method::POST if keys.contains(&"uploadId") => Some(false),
        http::Method::PUT if keys.contains(&"tagging") => Some(true),
        _ => None,
    }
}

/// Whether `h` makes an integrity claim about the body (`checksums`: the `x-amz-checksum-*`
/// headers count too).
pub(crate) fn claims_anything(h: &HeaderMap, checksums: bool) -> bool {
    h.contains_key("content-md5")
        || (checksums && Algorithm::ALL.iter().any(|a| h.contains_key(a.header())))
}

/// Verifies the integrity claims of a whole, buffered body: `Content-MD5`, the declared
/// length, and (`checksums`) one `x-amz-checksum-*` header.
///
/// # Errors
/// As [`receive`] does for a streamed body; a trailer claim is `InvalidRequest` (such bodies
/// are not streamed).
pub(crate) fn verify_buffered(h: &HeaderMap, body: &[u8], checksums: bool) -> S3Result<()> {
    let claims = if checksums {
        Claims::from_headers(h, Algorithm::Crc64Nvme, None)?
    } else {
        let mut only_md5 = HeaderMap::new();
        for name in ["content-md5", "content-length"] {
            if let Some(v) = h.get(name) {
                only_md5.insert(name, v.clone());
            }
        }
        Claims::from_headers(&only_md5, Algorithm::Crc64Nvme, None)?
    };
    if claims.declared_len.is_some_and(|n| n != body.len() as u64) {
        return Err(s3_error!(
            IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header"
        ));
    }
    if let Some(m) = &claims.content_md5
        && m.as_slice() != Md5::digest(body).as_slice()
    {
        return Err(s3_error!(
            BadDigest,
            "The Content-MD5 you specified did not match what we received."
        ));
    }
    match &claims.source {
        Source::Computed => Ok(()),
        Source::Header(d) if *d == claims.algorithm.digest(body) => Ok(()),
        Source::Header(_) => Err(s3_error!(
            BadDigest,
            "The {} you specified did not match the calculated checksum.",
            claims.algorithm.name()
        )),
        Source::Trailer => Err(s3_error!(
            InvalidRequest,
            "a checksum trailer on a request that is not streamed"
        )),
    }
}

/// The S3 error for a request body that failed while it was read. s3s verifies the payload's
/// SHA-256 and the aws-chunked signatures as the body streams, and its error types are private:
/// they are told apart by what they say. A payload whose hash is not the signed one is 400
/// `XAmzContentSHA256Mismatch`, a chunk whose signature is wrong 403 `SignatureDoesNotMatch`;
/// anything else (the connection cut, a malformed chunk) 400 `IncompleteBody`.
fn body_error(e: &(dyn std::error::Error + 'static)) -> s3s::S3Error {
    // The client went silent (in_flight::IdleBody): its place is given back with this answer.
    if crate::in_flight::is_idle_timeout(e) {
        return crate::in_flight::request_timeout();
    }
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if text.contains("Sha256Mismatch") {
        let mut e = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        e
    } else if text.contains("SignatureMismatch") {
        s3_error!(
            SignatureDoesNotMatch,
            "The chunk signature we calculated does not match the signature you provided."
        )
    } else {
        s3_error!(IncompleteBody, "reading the request body: {text}")
    }
}

/// The full-object CRC of parts whose CRCs (big-endian digests) and lengths are `parts`, in
/// order: the CRC of their concatenation, by CRC combination (no data is read).
pub(crate) fn combine_crcs(a: Algorithm, parts: &[(Vec<u8>, u64)]) -> Option<Vec<u8>> {
    use ec_client::crc_combine::{CRC32, CRC32C, CRC64_NVME};
    let crc = match a {
        Algorithm::Crc32 => &CRC32,
        Algorithm::Crc32c => &CRC32C,
        Algorithm::Crc64Nvme => &CRC64_NVME,
        Algorithm::Sha1 | Algorithm::Sha256 => return None,
    };
    let value = |d: &[u8]| d.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let mut it = parts.iter();
    let (first, _) = it.next()?;
    let mut acc = value(first);
    for (d, len) in it {
        acc = crc.combine(acc, value(d), *len);
    }
    let bytes = acc.to_be_bytes();
    Some(bytes[8 - a.len()..].to_vec())
}

/// Sets the `checksum_*` field of algorithm `$alg` of an output or part DTO to `$value`
/// (base64).
macro_rules! set_checksum {
    ($out:expr, $alg:expr, $value:expr) => {{
        let v = Some($value);
        match $alg {
            $crate::integrity::Algorithm::Crc32 => $out.checksum_crc32 = v,
            $crate::integrity::Algorithm::Crc32c => $out.checksum_crc32c = v,
            $crate::integrity::Algorithm::Crc64Nvme => $out.checksum_crc64nvme = v,
            $crate::integrity::Algorithm::Sha1 => $out.checksum_sha1 = v,
            $crate::integrity::Algorithm::Sha256 => $out.checksum_sha256 = v,
        }
    }};
}
pub(crate) use set_checksum;

/// The `checksum_*` field of algorithm `$alg` of a DTO (a part listed in a Complete).
macro_rules! get_checksum {
    ($in:expr, $alg:expr) => {
        match $alg {
            $crate::integrity::Algorithm::Crc32 => $in.checksum_crc32.as_deref(),
            $crate::integrity::Algorithm::Crc32c => $in.checksum_crc32c.as_deref(),
            $crate::integrity::Algorithm::Crc64Nvme => $in.checksum_crc64nvme.as_deref(),
            $crate::integrity::Algorithm::Sha1 => $in.checksum_sha1.as_deref(),
            $crate::integrity::Algorithm::Sha256 => $in.checksum_sha256.as_deref(),
        }
    };
}
pub(crate) use get_checksum;

/// A stored checksum (algorithm, base64 value, type) from object or part metadata.
pub(crate) fn stored(meta: &BTreeMap<String, String>) -> Option<(Algorithm, &str, &str)> {
    let a = Algorithm::parse(meta.get(CHECKSUM_ALGORITHM)?)?;
    let v = meta.get(CHECKSUM_VALUE)?;
    let t = meta
        .get(CHECKSUM_TYPE)
        .map_or("FULL_OBJECT", String::as_str);
    Some((a, v.as_str(), t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests_in_amazons_encoding() {
        // The CRC32 of "hello\n" as aws-cli prints it (the example).
        assert_eq!(b64(&Algorithm::Crc32.digest(b"hello\n")), "NjowIA==");
        assert_eq!(Algorithm::Crc64Nvme.digest(b"").len(), 8);
    }

    #[test]
    fn combined_crcs_equal_the_crc_of_the_concatenation() {
        let (a, b, c) = (b"abc".as_slice(), b"defgh".as_slice(), b"".as_slice());
        for alg in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let parts: Vec<(Vec<u8>, u64)> = [a, b, c]
                .iter()
                .map(|p| (alg.digest(p), p.len() as u64))
                .collect();
            assert_eq!(
                combine_crcs(alg, &parts),
                Some(alg.digest(b"abcdefgh")),
                "{alg:?}"
            );
        }
        assert_eq!(combine_crcs(Algorithm::Sha256, &[]), None);
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn malformed_and_contradictory_claims_are_refused() {
        let code = |h: HeaderMap| {
            Claims::from_headers(&h, Algorithm::Crc64Nvme, None)
                .map(|_| ())
                .map_err(|e| e.code().as_str().to_string())
        };
        assert_eq!(
            code(headers(&[("content-md5", "")])),
            Err("InvalidDigest".into())
        );
        assert_eq!(
            code(headers(&[("content-md5", "AAAA")])),
            Err("InvalidDigest".into())
        );
        assert_eq!(
            code(headers(&[("x-amz-checksum-crc32", "AAAA")])),
            Err("InvalidRequest".into()),
            "three bytes, not four"
        );
        assert_eq!(
            code(headers(&[
                ("x-amz-checksum-crc32", "AAAAAA=="),
                ("x-amz-checksum-crc32c", "AAAAAA==")
            ])),
            Err("InvalidRequest".into())
        );
        assert_eq!(
            code(headers(&[("x-amz-sdk-checksum-algorithm", "MD4")])),
            Err("InvalidRequest".into())
        );
        assert_eq!(
            code(headers(&[
                ("x-amz-sdk-checksum-algorithm", "SHA1"),
                ("x-amz-checksum-crc32", "AAAAAA==")
            ])),
            Err("InvalidRequest".into())
        );
        assert_eq!(
            code(headers(&[("x-amz-trailer", "x-amz-checksum-md4")])),
            Err("InvalidRequest".into())
        );
        let ok = Claims::from_headers(
            &headers(&[("x-amz-sdk-checksum-algorithm", "crc32c")]),
            Algorithm::Crc64Nvme,
            None,
        )
        .expect("valid");
        assert_eq!(ok.algorithm, Algorithm::Crc32c);
        let part = Claims::from_headers(
            &headers(&[("x-amz-checksum-sha256", &b64(&[0; 32]))]),
            Algorithm::Crc32,
            Some(Algorithm::Crc32),
        );
        assert!(part.is_err(), "a part must use its upload's algorithm");
    }
}
