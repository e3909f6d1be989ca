//! What an object stores besides its bytes (ETag, content type, user
//! metadata, part sizes, as key metadata in the om): shared by PUT and COPY
//! (`objects`), UploadPart and Complete (`multipart`) and GET/HEAD (`get`).
//! How a request body becomes a key, verified, is `integrity`.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use ec_client::KeyInfo;
use md5::{Digest, Md5};
use s3s::dto::{self, Timestamp};

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
