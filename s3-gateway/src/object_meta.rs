//! What an object stores besides its bytes (ETag, content type, user
//! metadata, part sizes, as key metadata in the om) and how a request body
//! becomes a key: shared by PUT and COPY (`objects`), UploadPart and
//! Complete (`multipart`) and GET/HEAD (`get`).

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use ec_client::KeyInfo;
use futures::StreamExt;
use md5::{Digest, Md5};
use s3s::dto::{self, StreamingBlob, Timestamp};
use s3s::{S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;

/// Metadata key of an object's ETag (hex MD5, or the multipart form `hex-N`).
pub(crate) const ETAG: &str = "etag";
/// Metadata key of an object's content type.
pub(crate) const CONTENT_TYPE: &str = "content-type";
/// Metadata key prefix of user metadata (`x-amz-meta-*`).
pub(crate) const USER_META: &str = "x-amz-meta-";
/// Metadata key of a multipart object's part sizes (comma-separated bytes).
pub(crate) const PART_SIZES: &str = ec_client::MULTIPART_PART_SIZES_KEY;

pub(crate) fn timestamp(unix_ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(unix_ms))
}

/// The object's ETag: the one stored at PUT or Complete, or — for keys
/// written through the native client, which stores none — an MD5 of the
/// key's identity (its block groups, length and commit time), so that it
/// still changes whenever the key is rewritten.
pub(crate) fn etag_of(info: &KeyInfo) -> String {
    if let Some(e) = info.metadata.get(ETAG) {
        return e.clone();
    }
    let mut h = Md5::new();
    h.update(info.length.to_le_bytes());
    h.update(info.created_unix_ms.to_le_bytes());
    for g in &info.block_groups {
        h.update(g.container_id.to_le_bytes());
        h.update(g.local_id.to_le_bytes());
        h.update(g.length.to_le_bytes());
    }
    hex::encode(h.finalize())
}

/// Object metadata to store from a request's content type and user metadata.
pub(crate) fn object_metadata(
    content_type: Option<&str>,
    user: Option<&dto::Metadata>,
) -> BTreeMap<String, String> {
    let mut meta = BTreeMap::new();
    if let Some(ct) = content_type {
        meta.insert(CONTENT_TYPE.to_string(), ct.to_string());
    }
    for (k, v) in user.into_iter().flatten() {
        meta.insert(format!("{USER_META}{}", k.to_ascii_lowercase()), v.clone());
    }
    meta
}

/// Streams `body` into `writer`, hashing it; returns (bytes, hex MD5).
pub(crate) async fn drain_body(
    gw: &Gateway,
    body: Option<StreamingBlob>,
    writer: &mut ec_client::KeyOutputStream,
) -> S3Result<(u64, String)> {
    let mut md5 = Md5::new();
    let mut n = 0u64;
    if let Some(mut body) = body {
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| s3_error!(IncompleteBody, "reading the request body: {e}"))?;
            md5.update(&chunk);
            writer.write(&chunk).await.map_err(to_s3)?;
            n += chunk.len() as u64;
            gw.metrics().bytes_in(chunk.len() as u64);
        }
    }
    Ok((n, hex::encode(md5.finalize())))
}

/// Checks a `Content-MD5` header (base64 of the binary digest) against `etag`.
pub(crate) fn check_content_md5(content_md5: Option<&str>, etag: &str) -> S3Result<()> {
    let Some(b64) = content_md5 else {
        return Ok(());
    };
    let given = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
    if hex::encode(given) != etag {
        return Err(s3_error!(
            BadDigest,
            "the Content-MD5 you specified did not match what was received"
        ));
    }
    Ok(())
}
