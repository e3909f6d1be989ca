//! The copies: CopyObject and UploadPartCopy. The gateway reads the source (a range of it for
//! a part) through the client and writes it as the destination, in steps of half its request
//! buffer, while the MD5 ETag and a checksum of the bytes are computed on a thread of their
//! own (`crate::digests`); nothing passes through the S3 client.

use std::collections::BTreeMap;

use s3s::dto::{self, ETag};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::digests::{BodyDigests, Digests};
use crate::error::to_s3;
use crate::integrity::{
    Algorithm, CHECKSUM_ALGORITHM, CHECKSUM_TYPE, CHECKSUM_VALUE, b64, set_checksum,
};
use crate::object_meta::{
    ETAG, PART_CHECKSUMS, PART_SIZES, check_user_metadata, object_metadata, system_metadata,
    timestamp,
};
use crate::unsupported::refuse_unsupported;
use crate::write_conditions::{
    check_copy_source, commit_error, copy_source_conditions, header_condition, write_condition,
};

/// The source's stored full-object checksum, checked while a whole source is copied: a copy
/// never gives bytes that do not match their source's checksum a fresh, valid-looking one.
struct SourceCheck {
    algorithm: Algorithm,
    want: Vec<u8>,
}

impl SourceCheck {
    /// The check for copying `range` of `src`, when it is the whole source and the source
    /// has a full-object checksum.
    fn of(src: &ec_client::KeyInfo, range: &std::ops::Range<u64>) -> Option<Self> {
        let (algorithm, value, ty) = crate::integrity::stored(&src.metadata)?;
        if ty != "FULL_OBJECT" || *range != (0..src.length) {
            return None;
        }
        let want = crate::integrity::decode_value(algorithm, value, "the stored checksum").ok()?;
        Some(Self { algorithm, want })
    }

    /// # Errors
    /// 500 `InternalError` when `got`, the digest of the bytes read in the check's
    /// algorithm, does not match.
    fn check(&self, got: &[u8]) -> S3Result<()> {
        if got == self.want.as_slice() {
            return Ok(());
        }
        Err(S3Error::with_message(
            S3ErrorCode::InternalError,
            format!(
                "the copy source's bytes do not match its stored {} checksum; nothing was written",
                self.algorithm.name()
            ),
        ))
    }
}

/// The copy source: its bucket and key, opened for reading.
///
/// # Errors
/// 501 for an access point; 400 `InvalidArgument` for a version other than `null`; lookup
/// failures.
async fn open_source(
    gw: &Gateway,
    source: &dto::CopySource,
    extensions: &http::Extensions,
) -> S3Result<(String, String, ec_client::KeyInputStream)> {
    let dto::CopySource::Bucket {
        bucket,
        key,
        version_id,
    } = source
    else {
        return Err(s3_error!(NotImplemented, "copy from an access point"));
    };
    if version_id.as_deref().is_some_and(|v| v != "null") {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid version id specified: this bucket is not versioned"
        ));
    }
    let src = gw.client().open_key(bucket, key).await.map_err(to_s3)?;
    gw.metrics().key_lookup();
    // A source the object's ACL let the requester read is decided again on the record copied.
    crate::access::recheck_read(extensions, &src.info().metadata)?;
    Ok((bucket.to_string(), key.to_string(), src))
}

/// CopyObject: the source read and written again by the gateway (one object, its ETag the MD5
/// of its bytes and its checksum computed afresh), honouring the copy-source conditions, the
/// destination's write conditions, the metadata directive and Amazon's self-copy rule.
pub(crate) async fn copy_object(
    gw: &Gateway,
    req: S3Request<dto::CopyObjectInput>,
) -> S3Result<S3Response<dto::CopyObjectOutput>> {
    refuse_unsupported(&req.headers)?;
    let req_tags = crate::tagging::from_headers(&req.headers)?;
    let req_tagging_directive = req
        .headers
        .get("x-amz-tagging-directive")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_uppercase());
    let if_match = header_condition(&req.headers, "if-match")?;
    let if_none_match = header_condition(&req.headers, "if-none-match")?;
    let extensions = req.extensions;
    let i = req.input;
    let (bucket, key, src) = open_source(gw, &i.copy_source, &extensions).await?;
    check_copy_source(copy_source_conditions!(i), src.info())?;
    let condition = write_condition(
        gw,
        &i.bucket,
        &i.key,
        if_match.as_ref(),
        if_none_match.as_ref(),
    )
    .await?;
    let replace = match i.metadata_directive.as_ref().map(|d| d.as_str()) {
        None | Some(dto::MetadataDirective::COPY) => false,
        Some(dto::MetadataDirective::REPLACE) => true,
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "Unknown metadata directive: {other}"
            ));
        }
    };
    if replace {
        check_user_metadata(i.metadata.as_ref())?;
    }
    // Amazon refuses a copy onto itself that changes nothing.
    if *bucket == *i.bucket && *key == *i.key && !replace && i.checksum_algorithm.is_none() {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    if src.len() > crate::integrity::MAX_BODY {
        return Err(s3_error!(
            InvalidRequest,
            "The specified copy source is larger than the maximum allowable size for a copy source: {}",
            crate::integrity::MAX_BODY
        ));
    }
    let mut meta = if replace {
        object_metadata(system_metadata!(i), i.metadata.as_ref())
    } else {
        src.info().metadata.clone()
    };
    // Tags follow their own directive: the source's (COPY, the default) or the request's.
    meta.retain(|k, _| !k.starts_with(crate::tagging::TAG_PREFIX));
    let tags = match req_tagging_directive.as_deref() {
        None | Some("COPY") => crate::tagging::of(&src.info().metadata),
        Some("REPLACE") => req_tags,
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "Unknown tagging directive: {other}"
            ));
        }
    };
    meta.extend(tags);
    // A copy does not carry its source's ACL: it gets the request's (Amazon's CopyObject).
    crate::acl::apply_requested(&mut meta, i.acl.as_ref())?;
    let mut w = gw
        .client()
        .create_key(&i.bucket, &i.key, None)
        .await
        .map_err(to_s3)?;
    // The copy is one object: its checksum is computed afresh (a multipart source's
    // composite checksum does not describe it), in the algorithm asked for.
    let algorithm = match &i.checksum_algorithm {
        Some(a) => Algorithm::parse(a.as_str()).ok_or_else(|| {
            s3_error!(
                InvalidRequest,
                "Checksum algorithm provided is unsupported."
            )
        })?,
        None => Algorithm::Crc64Nvme,
    };
    let (etag, digest) = copy_bytes(&src, 0..src.len(), &mut w, algorithm, gw.max_buffer()).await?;
    // A copy keeps the source's ETag form only for single-part objects;
    // the copy is one object, so its ETag is the MD5 of its bytes.
    meta.insert(ETAG.to_string(), etag.clone());
    meta.remove(PART_SIZES);
    meta.remove(PART_CHECKSUMS);
    meta.remove(crate::object_meta::PART_NUMBERS);
    meta.insert(CHECKSUM_ALGORITHM.to_string(), algorithm.name().to_string());
    meta.insert(CHECKSUM_VALUE.to_string(), b64(&digest));
    meta.insert(CHECKSUM_TYPE.to_string(), "FULL_OBJECT".to_string());
    let info = match condition {
        Some(c) => w.close_if(meta, c).await.map_err(commit_error)?,
        None => w.close_with(meta).await.map_err(commit_error)?,
    };
    Ok(S3Response::new(dto::CopyObjectOutput {
        copy_object_result: Some(dto::CopyObjectResult {
            e_tag: Some(ETag::Strong(etag)),
            last_modified: Some(timestamp(info.created_unix_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

/// Copies bytes `range` (source-relative offsets) of `src` into `w`, reading at most half of
/// `buffer` (the gateway's per-request bound, bytes) at a time while the bytes already read
/// are digested on a thread of their own ([`BodyDigests`], within the other half), and
/// verifies the source's stored full-object checksum when the range is the whole source
/// ([`SourceCheck`]; the checksum computed for the copy serves when the algorithms are the
/// same). Returns the copied bytes' MD5 as hex (their ETag) and their checksum in `algorithm`.
///
/// # Errors
/// `InternalError` when the source ends before the range does; read and write failures as
/// [`to_s3`] maps them; the source check's mismatch.
async fn copy_bytes(
    src: &ec_client::KeyInputStream,
    range: std::ops::Range<u64>,
    w: &mut ec_client::KeyOutputStream,
    algorithm: Algorithm,
    buffer: u64,
) -> S3Result<(String, Vec<u8>)> {
    let step = (buffer / 2).max(1);
    let source_check = SourceCheck::of(src.info(), &range);
    let second = source_check
        .as_ref()
        .map(|c| c.algorithm)
        .filter(|a| *a != algorithm);
    let mut digests = BodyDigests::start(algorithm, second, buffer - step);
    let mut at = range.start;
    while at < range.end {
        let chunk = src
            .read_range(at, step.min(range.end - at))
            .await
            .map_err(to_s3)?;
        if chunk.is_empty() {
            return Err(s3_error!(InternalError, "the copy source ended early"));
        }
        let len = chunk.len() as u64;
        digests.update(chunk.clone()).await?;
        w.write(&chunk).await.map_err(to_s3)?;
        at += len;
    }
    let Digests {
        md5,
        checksum,
        second,
    } = digests.finish().await?;
    if let Some(c) = &source_check {
        c.check(second.as_deref().unwrap_or(&checksum))?;
    }
    Ok((hex::encode(md5), checksum))
}

/// The byte range an `x-amz-copy-source-range` names in a source of `size` bytes (the whole
/// source when absent).
///
/// # Errors
/// 400 `InvalidArgument` for anything but `bytes=first-last` inside the source.
fn copy_range(range: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(r) = range else {
        return Ok(0..size);
    };
    let bad = || {
        s3_error!(
            InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy, inside a source of {size} bytes"
        )
    };
    let (first, last) = r
        .trim()
        .strip_prefix("bytes=")
        .and_then(|s| s.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = first.parse().map_err(|_| bad())?;
    let last: u64 = last.parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(bad());
    }
    Ok(first..last + 1)
}

/// UploadPartCopy: a part made of (a range of) another object, copied by the gateway from the
/// source's datanodes to the part's without a round trip through the client; the part gets
/// its MD5 ETag and a checksum of the upload's algorithm (CRC64NVME when it named none), as an
/// uploaded part does.
pub(crate) async fn upload_part_copy(
    gw: &Gateway,
    req: s3s::S3Request<dto::UploadPartCopyInput>,
) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
    crate::unsupported::refuse_unsupported(&req.headers)?;
    let extensions = req.extensions;
    let i = req.input;
    let part_number = u32::try_from(i.part_number)
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| s3_error!(InvalidArgument, "part number must be between 1 and 10000"))?;
    let u = crate::multipart::upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    let (_, _, src) = open_source(gw, &i.copy_source, &extensions).await?;
    crate::write_conditions::check_copy_source(
        crate::write_conditions::copy_source_conditions!(i),
        src.info(),
    )?;
    let range = copy_range(i.copy_source_range.as_deref(), src.len())?;
    if range.end - range.start > crate::integrity::MAX_BODY {
        return Err(s3_error!(
            InvalidRequest,
            "The specified copy source is larger than the maximum allowable size for a copy source: {}",
            crate::integrity::MAX_BODY
        ));
    }
    let algorithm = crate::multipart::upload_algorithm(&u).unwrap_or(Algorithm::Crc64Nvme);
    let mut w = gw
        .client()
        .upload_part(&i.upload_id, part_number)
        .await
        .map_err(to_s3)?;
    let (etag, digest) = copy_bytes(&src, range, &mut w, algorithm, gw.max_buffer()).await?;
    let meta = BTreeMap::from([
        (CHECKSUM_ALGORITHM.to_string(), algorithm.name().to_string()),
        (CHECKSUM_VALUE.to_string(), b64(&digest)),
    ]);
    let part = w.close_part_with(&etag, meta).await.map_err(commit_error)?;
    let mut result = dto::CopyPartResult {
        e_tag: Some(ETag::Strong(etag)),
        last_modified: Some(timestamp(part.modified_unix_ms)),
        ..Default::default()
    };
    set_checksum!(result, algorithm, b64(&digest));
    Ok(S3Response::new(dto::UploadPartCopyOutput {
        copy_part_result: Some(result),
        ..Default::default()
    }))
}
