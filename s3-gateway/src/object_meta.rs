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
pub(crate) const ETAG: &str = ec_client::object_metadata::ETAG;
/// Metadata key of an object's content type.
pub(crate) const CONTENT_TYPE: &str = ec_client::object_metadata::CONTENT_TYPE;
/// Metadata key prefix of user metadata (`x-amz-meta-*`).
pub(crate) const USER_META: &str = ec_client::object_metadata::USER_METADATA_PREFIX;
/// Metadata key of a multipart object's part numbers as uploaded (comma-separated, in part
/// order), recorded at Complete: GetObjectAttributes reports them.
pub(crate) const PART_NUMBERS: &str = "mpu-part-numbers";
/// Metadata key of a multipart object's part checksums (comma-separated base64, in part
/// order, of the object's checksum algorithm), recorded at Complete when every part has one.
pub(crate) const PART_CHECKSUMS: &str = "mpu-part-checksums";
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

/// The system-defined metadata headers an object keeps and GET/HEAD return (Amazon S3 User
/// Guide, "System-defined object metadata"): the header name is also the metadata key.
pub(crate) const SYSTEM_HEADERS: [&str; 6] = [
    CONTENT_TYPE,
    ec_client::object_metadata::CACHE_CONTROL,
    ec_client::object_metadata::CONTENT_DISPOSITION,
    ec_client::object_metadata::CONTENT_ENCODING,
    ec_client::object_metadata::CONTENT_LANGUAGE,
    ec_client::object_metadata::EXPIRES,
];

/// The system-defined metadata of a request: its `Content-Type`, `Cache-Control`,
/// `Content-Disposition`, `Content-Encoding` (without the `aws-chunked` transfer coding, which
/// is not the object's), `Content-Language` and `Expires` (as an HTTP date).
#[derive(Debug, Clone, Default)]
pub(crate) struct SystemMetadata(pub(crate) Vec<(&'static str, String)>);

/// [`SystemMetadata`] of an S3 input that has the six fields (PutObject, CopyObject,
/// CreateMultipartUpload).
macro_rules! system_metadata {
    ($i:expr) => {
        $crate::object_meta::SystemMetadata::new(
            $i.content_type.as_deref(),
            $i.cache_control.as_deref(),
            $i.content_disposition.as_deref(),
            $i.content_encoding.as_deref(),
            $i.content_language.as_deref(),
            $i.expires.as_ref(),
        )
    };
}
pub(crate) use system_metadata;

impl SystemMetadata {
    pub(crate) fn new(
        content_type: Option<&str>,
        cache_control: Option<&str>,
        disposition: Option<&str>,
        encoding: Option<&str>,
        language: Option<&str>,
        expires: Option<&Timestamp>,
    ) -> Self {
        let encoding = encoding.map(|e| {
            e.split(',')
                .map(str::trim)
                .filter(|c| !c.eq_ignore_ascii_case("aws-chunked") && !c.is_empty())
                .collect::<Vec<_>>()
                .join(",")
        });
        let expires = expires.and_then(|t| {
            let mut buf = Vec::new();
            t.format(dto::TimestampFormat::HttpDate, &mut buf).ok()?;
            String::from_utf8(buf).ok()
        });
        let values = [
            content_type.map(str::to_string),
            cache_control.map(str::to_string),
            disposition.map(str::to_string),
            encoding,
            language.map(str::to_string),
            expires,
        ];
        Self(
            SYSTEM_HEADERS
                .into_iter()
                .zip(values)
                .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v)))
                .collect(),
        )
    }
}

/// Object metadata to store from a request's system-defined and user metadata.
pub(crate) fn object_metadata(
    system: SystemMetadata,
    user: Option<&dto::Metadata>,
) -> BTreeMap<String, String> {
    let mut meta: BTreeMap<String, String> = system
        .0
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (k, v) in user.into_iter().flatten() {
        meta.insert(format!("{USER_META}{}", k.to_ascii_lowercase()), v.clone());
    }
    meta
}

/// Most bytes of user-defined metadata (names and values, UTF-8) one object may carry: 2 KB,
/// Amazon's limit on `x-amz-meta-*` in a PUT request header.
pub(crate) const MAX_USER_METADATA: usize = 2 * 1024;

/// Refuses user metadata over [`MAX_USER_METADATA`] with 400 `MetadataTooLarge`.
pub(crate) fn check_user_metadata(user: Option<&dto::Metadata>) -> s3s::S3Result<()> {
    let size: usize = user
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if size > MAX_USER_METADATA {
        return Err(s3s::s3_error!(
            MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size: {size} bytes, at most {MAX_USER_METADATA}"
        ));
    }
    Ok(())
}

/// The owner every object and bucket here has (the gateway's one key pair).
pub(crate) fn owner() -> dto::Owner {
    dto::Owner {
        display_name: Some("ozone".into()),
        id: Some("ozone".into()),
    }
}
