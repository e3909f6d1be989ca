//! What an object is besides its bytes, in both directions: key name ↔
//! [`Path`], [`KeyInfo`] → [`ObjectMeta`] (size, commit time, ETag = key
//! generation), and [`Attributes`] / [`TagSet`] ↔ key metadata under the
//! names the S3 gateway uses ([`ec_client::object_metadata`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ec_client::KeyInfo;
use ec_client::object_metadata::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_TYPE,
    TAG_PREFIX, USER_METADATA_PREFIX,
};
use object_store::path::Path;
use object_store::{Attribute, AttributeValue, Attributes, ObjectMeta, Result, TagSet};

use crate::error::{OzoneStoreError, not_supported};

/// The key a path names: its canonical string.
pub(crate) fn key_of(path: &Path) -> &str {
    path.as_ref()
}

/// The key prefix that lists everything under `prefix` segment-wise:
/// `""` for none (or the root), else `prefix/` (so `foo` lists `foo/x` but
/// not `foo.bar/y`).
pub(crate) fn dir_prefix(prefix: Option<&Path>) -> String {
    match prefix.map(Path::as_ref) {
        None | Some("") => String::new(),
        Some(p) => format!("{p}/"),
    }
}

/// The path of a listed key.
///
/// # Errors
/// `InvalidPath` for a key that is not a valid object_store path.
pub(crate) fn path_of(key: &str) -> Result<Path> {
    Ok(Path::parse(key)?)
}

/// The ETag this store reports for a key version: its generation, decimal.
pub(crate) fn etag_of(info: &KeyInfo) -> String {
    info.generation.to_string()
}

/// The generation an `e_tag` this store reported names.
///
/// # Errors
/// [`OzoneStoreError::BadUpdateVersion`] for anything else.
pub(crate) fn generation_of(e_tag: Option<&str>) -> Result<u64, OzoneStoreError> {
    e_tag
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| OzoneStoreError::BadUpdateVersion(e_tag.map(str::to_string)))
}

/// `info` as object_store describes it, at `location`.
pub(crate) fn object_meta(location: Path, info: &KeyInfo) -> ObjectMeta {
    let ms = i64::try_from(info.created_unix_ms).unwrap_or(i64::MAX);
    ObjectMeta {
        location,
        last_modified: DateTime::<Utc>::from_timestamp_millis(ms)
            .unwrap_or(DateTime::<Utc>::MAX_UTC),
        size: info.length,
        e_tag: Some(etag_of(info)),
        version: None,
    }
}

/// The metadata name of a standard attribute.
fn name_of(a: &Attribute) -> Option<&'static str> {
    match a {
        Attribute::ContentDisposition => Some(CONTENT_DISPOSITION),
        Attribute::ContentEncoding => Some(CONTENT_ENCODING),
        Attribute::ContentLanguage => Some(CONTENT_LANGUAGE),
        Attribute::ContentType => Some(CONTENT_TYPE),
        Attribute::CacheControl => Some(CACHE_CONTROL),
        _ => None,
    }
}

/// The key metadata that stores `attributes` and `tags`.
///
/// # Errors
/// `NotSupported` for `StorageClass` (and any attribute kind object_store
/// adds later): it would otherwise be accepted and dropped.
pub(crate) fn to_metadata(
    attributes: &Attributes,
    tags: &TagSet,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (a, v) in attributes {
        let value = v.as_ref().to_string();
        match a {
            Attribute::Metadata(name) => {
                out.insert(
                    format!("{USER_METADATA_PREFIX}{}", name.to_ascii_lowercase()),
                    value,
                );
            }
            other => {
                let name = name_of(other).ok_or_else(|| {
                    not_supported(&format!(
                        "attribute {other:?} (replication is chosen per bucket or key)"
                    ))
                })?;
                out.insert(name.to_string(), value);
            }
        }
    }
    for (k, v) in form_urlencoded::parse(tags.encoded().as_bytes()) {
        out.insert(format!("{TAG_PREFIX}{k}"), v.into_owned());
    }
    Ok(out)
}

/// The attributes a key's metadata holds (standard ones and user metadata;
/// tags are not attributes).
pub(crate) fn attributes_of(metadata: &BTreeMap<String, String>) -> Attributes {
    let standard = [
        Attribute::ContentDisposition,
        Attribute::ContentEncoding,
        Attribute::ContentLanguage,
        Attribute::ContentType,
        Attribute::CacheControl,
    ];
    let mut out = Attributes::new();
    for a in standard {
        if let Some(v) = name_of(&a).and_then(|n| metadata.get(n)) {
            out.insert(a, AttributeValue::from(v.clone()));
        }
    }
    for (k, v) in metadata {
        if let Some(name) = k.strip_prefix(USER_METADATA_PREFIX) {
            out.insert(
                Attribute::Metadata(name.to_string().into()),
                AttributeValue::from(v.clone()),
            );
        }
    }
    out
}

/// The entries of `metadata` a copy carries: attributes, user metadata and
/// tags — not what describes the source's own bytes and upload (its S3
/// ETag, multipart part sizes and checksums), which the copy does not share.
pub(crate) fn copied(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .filter(|(k, _)| {
            [
                CONTENT_DISPOSITION,
                CONTENT_ENCODING,
                CONTENT_LANGUAGE,
                CONTENT_TYPE,
                CACHE_CONTROL,
                ec_client::object_metadata::EXPIRES,
            ]
            .contains(&k.as_str())
                || k.starts_with(USER_METADATA_PREFIX)
                || k.starts_with(TAG_PREFIX)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_tags_round_trip_through_key_metadata() {
        let attributes = Attributes::from_iter([
            (Attribute::ContentType, "text/html"),
            (Attribute::CacheControl, "max-age=60"),
            (Attribute::Metadata("Owner".into()), "ops team"),
        ]);
        let mut tags = TagSet::default();
        tags.push("team", "storage & io");
        let m = to_metadata(&attributes, &tags).expect("supported");
        assert_eq!(m.get("content-type").map(String::as_str), Some("text/html"));
        assert_eq!(
            m.get("x-amz-meta-owner").map(String::as_str),
            Some("ops team")
        );
        assert_eq!(m.get("tag:team").map(String::as_str), Some("storage & io"));
        let back = attributes_of(&m);
        assert_eq!(
            back.get(&Attribute::ContentType).map(AsRef::as_ref),
            Some("text/html")
        );
        assert_eq!(
            back.get(&Attribute::Metadata("owner".into()))
                .map(AsRef::as_ref),
            Some("ops team")
        );
        assert_eq!(back.len(), 3, "tags are not attributes");
    }

    #[test]
    fn a_storage_class_is_refused_not_dropped() {
        let attributes = Attributes::from_iter([(Attribute::StorageClass, "GLACIER")]);
        let e = to_metadata(&attributes, &TagSet::default()).expect_err("refused");
        assert!(matches!(e, object_store::Error::NotSupported { .. }), "{e}");
    }

    #[test]
    fn prefixes_list_segment_wise() {
        assert_eq!(dir_prefix(None), "");
        assert_eq!(dir_prefix(Some(&Path::from("/"))), "");
        assert_eq!(dir_prefix(Some(&Path::from("foo"))), "foo/");
        assert_eq!(key_of(&Path::from_iter(["a", "b/c"])), "a/b%2Fc");
    }

    #[test]
    fn only_this_stores_etags_name_a_generation() {
        assert_eq!(generation_of(Some("42")).ok(), Some(42));
        assert!(generation_of(Some("\"d41d8cd98f00b204e9800998ecf8427e\"")).is_err());
        assert!(generation_of(None).is_err());
    }
}
