//! GetObjectAttributes (`GET /bucket/key?attributes`): the attributes the request names in
//! `x-amz-object-attributes` — ETag, Checksum, ObjectParts (with each part's size and, when
//! the upload recorded them, checksum; paged by `max-parts` / `part-number-marker`),
//! StorageClass, ObjectSize — from the key's record alone, without reading data.

use s3s::dto::{self, ETag};
use s3s::{S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;
use crate::integrity::{set_checksum, stored};
use crate::object_meta::{PART_CHECKSUMS, PART_NUMBERS, PART_SIZES, etag_of, timestamp};

pub(crate) async fn get(
    gw: &Gateway,
    i: dto::GetObjectAttributesInput,
) -> S3Result<S3Response<dto::GetObjectAttributesOutput>> {
    if i.version_id.as_deref().is_some_and(|v| v != "null") {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid version id specified: this bucket is not versioned"
        ));
    }
    let k = gw
        .client()
        .key_info(&i.bucket, &i.key)
        .await
        .map_err(to_s3)?;
    gw.metrics().key_lookup();
    // One header may list several, comma-separated (as the SDKs send them).
    let wants = |a: &str| {
        i.object_attributes
            .iter()
            .flat_map(|x| x.as_str().split(','))
            .any(|x| x.trim() == a)
    };
    let mut out = dto::GetObjectAttributesOutput {
        last_modified: Some(timestamp(k.created_unix_ms)),
        ..Default::default()
    };
    if wants(dto::ObjectAttributes::ETAG) {
        out.e_tag = Some(ETag::Strong(etag_of(&k)));
    }
    if wants(dto::ObjectAttributes::OBJECT_SIZE) {
        out.object_size = i64::try_from(k.length).ok();
    }
    if wants(dto::ObjectAttributes::STORAGE_CLASS) {
        out.storage_class = Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD));
    }
    let checksum = stored(&k.metadata);
    if wants(dto::ObjectAttributes::CHECKSUM)
        && let Some((a, value, ty)) = checksum
    {
        let mut c = dto::Checksum {
            checksum_type: Some(dto::ChecksumType::from(ty.to_string())),
            ..Default::default()
        };
        // The composite form's `-N` belongs to the ETag-like header, not the attribute.
        set_checksum!(c, a, value.split('-').next().unwrap_or(value).to_string());
        out.checksum = Some(c);
    }
    if wants(dto::ObjectAttributes::OBJECT_PARTS)
        && let Some(sizes) = k.metadata.get(PART_SIZES)
    {
        let sizes: Vec<u64> = sizes.split(',').filter_map(|s| s.parse().ok()).collect();
        let sums: Vec<&str> = k
            .metadata
            .get(PART_CHECKSUMS)
            .map(|s| s.split(',').collect())
            .unwrap_or_default();
        // The numbers the parts were uploaded under (positions for objects completed before
        // they were recorded).
        let numbers: Vec<i32> = k
            .metadata
            .get(PART_NUMBERS)
            .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
            .filter(|n: &Vec<i32>| n.len() == sizes.len())
            .unwrap_or_else(|| (1..=i32::try_from(sizes.len()).unwrap_or(i32::MAX)).collect());
        let marker = i.part_number_marker.unwrap_or(0).max(0);
        let max = i.max_parts.map_or(1000, |m| m.clamp(1, 1000));
        let after: Vec<(usize, i32, u64)> = sizes
            .iter()
            .zip(&numbers)
            .enumerate()
            .map(|(at, (s, n))| (at, *n, *s))
            .filter(|(_, n, _)| *n > marker)
            .collect();
        let take = usize::try_from(max).unwrap_or(1000);
        let truncated = after.len() > take;
        let shown: Vec<(usize, i32, u64)> = after.into_iter().take(take).collect();
        let parts = shown
            .iter()
            .map(|(at, n, size)| {
                let mut p = dto::ObjectPart {
                    part_number: Some(*n),
                    size: i64::try_from(*size).ok(),
                    ..Default::default()
                };
                if let Some((a, ..)) = checksum
                    && let Some(v) = sums.get(*at)
                {
                    set_checksum!(p, a, (*v).to_string());
                }
                p
            })
            .collect();
        out.object_parts = Some(dto::GetObjectAttributesParts {
            total_parts_count: i32::try_from(sizes.len()).ok(),
            part_number_marker: Some(marker),
            next_part_number_marker: shown.last().map(|(_, n, _)| *n).filter(|_| truncated),
            max_parts: Some(max),
            is_truncated: Some(truncated),
            parts: Some(parts),
        });
    }
    Ok(S3Response::new(out))
}
