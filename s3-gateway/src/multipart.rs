//! Multipart upload operations. Parts are written as their own block groups
//! (through the om's part sessions); Complete stitches the parts' groups
//! into one key without copying data. The object's ETag takes S3's
//! multipart form: hex MD5 of the concatenated binary part MD5s, `-N`.

use std::collections::BTreeMap;

use md5::{Digest, Md5};
use s3s::dto::{self, ETag};
use s3s::{S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;
use crate::object_meta::{ETAG, check_content_md5, drain_body, object_metadata, timestamp};

/// Smallest part S3 accepts for all but the last part: 5 MiB.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// Checks the upload belongs to `bucket/key` (S3 answers NoSuchUpload otherwise).
async fn upload_of(
    gw: &Gateway,
    upload_id: &str,
    bucket: &str,
    key: &str,
) -> S3Result<ec_client::MultipartUpload> {
    let u = gw.client().list_parts(upload_id).await.map_err(to_s3)?;
    if u.bucket != bucket || u.key != key {
        return Err(s3_error!(
            NoSuchUpload,
            "upload {upload_id} is not for {bucket}/{key}"
        ));
    }
    Ok(u)
}

pub(crate) async fn create(
    gw: &Gateway,
    i: dto::CreateMultipartUploadInput,
) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
    let meta = object_metadata(i.content_type.as_deref(), i.metadata.as_ref());
    let upload_id = gw
        .client()
        .initiate_multipart_upload(&i.bucket, &i.key, None, meta)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::CreateMultipartUploadOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(upload_id),
        ..Default::default()
    }))
}

pub(crate) async fn upload_part(
    gw: &Gateway,
    i: dto::UploadPartInput,
) -> S3Result<S3Response<dto::UploadPartOutput>> {
    let part_number = u32::try_from(i.part_number)
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| s3_error!(InvalidArgument, "part number must be between 1 and 10000"))?;
    upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    let mut w = gw
        .client()
        .upload_part(&i.upload_id, part_number)
        .await
        .map_err(to_s3)?;
    let (_, etag) = drain_body(gw, i.body, &mut w).await?;
    check_content_md5(i.content_md5.as_deref(), &etag)?;
    w.close_part(&etag).await.map_err(to_s3)?;
    Ok(S3Response::new(dto::UploadPartOutput {
        e_tag: Some(ETag::Strong(etag)),
        ..Default::default()
    }))
}

pub(crate) async fn complete(
    gw: &Gateway,
    i: dto::CompleteMultipartUploadInput,
) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
    upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    let condition = crate::write_conditions::write_condition(
        gw,
        &i.bucket,
        &i.key,
        i.if_match.as_ref(),
        i.if_none_match.as_ref(),
    )
    .await?;
    let listed = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
    if listed.is_empty() {
        return Err(s3_error!(MalformedXML, "the part list is empty"));
    }
    let mut parts = Vec::with_capacity(listed.len());
    let mut digests = Vec::with_capacity(listed.len() * 16);
    for p in &listed {
        let number = p
            .part_number
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| s3_error!(InvalidPart, "a part has no part number"))?;
        let etag = match &p.e_tag {
            Some(ETag::Strong(s) | ETag::Weak(s)) => s.trim_matches('"').to_string(),
            None => return Err(s3_error!(InvalidPart, "part {number} has no ETag")),
        };
        let bin = hex::decode(&etag)
            .ok()
            .ok_or_else(|| s3_error!(InvalidPart, "part {number} has a malformed ETag"))?;
        digests.extend_from_slice(&bin);
        parts.push((number, etag));
    }
    let etag = format!("{}-{}", hex::encode(Md5::digest(&digests)), parts.len());
    let mut meta = BTreeMap::new();
    meta.insert(ETAG.to_string(), etag.clone());
    // The om records the part sizes itself, from the parts it stitches.
    let key = gw
        .client()
        .complete_multipart_upload_if(&i.upload_id, &parts, MIN_PART_SIZE, meta, condition)
        .await
        .map_err(crate::write_conditions::commit_error)?;
    Ok(S3Response::new(dto::CompleteMultipartUploadOutput {
        bucket: Some(key.bucket.clone()),
        key: Some(key.name.clone()),
        e_tag: Some(ETag::Strong(etag)),
        location: Some(format!("/{}/{}", key.bucket, key.name)),
        ..Default::default()
    }))
}

pub(crate) async fn abort(
    gw: &Gateway,
    i: dto::AbortMultipartUploadInput,
) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
    upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    gw.client()
        .abort_multipart_upload(&i.upload_id)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    gw: &Gateway,
    i: dto::ListPartsInput,
) -> S3Result<S3Response<dto::ListPartsOutput>> {
    let u = upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    let marker = i
        .part_number_marker
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(0);
    let max = i
        .max_parts
        .map_or(1000, |m| usize::try_from(m.clamp(1, 1000)).unwrap_or(1000));
    let after: Vec<_> = u.parts.iter().filter(|p| p.part_number > marker).collect();
    let truncated = after.len() > max;
    let shown: Vec<_> = after.into_iter().take(max).collect();
    let next = shown.last().and_then(|p| i32::try_from(p.part_number).ok());
    Ok(S3Response::new(dto::ListPartsOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(i.upload_id),
        part_number_marker: i.part_number_marker,
        next_part_number_marker: if truncated { next } else { None },
        max_parts: i32::try_from(max).ok(),
        is_truncated: Some(truncated),
        parts: Some(
            shown
                .into_iter()
                .map(|p| dto::Part {
                    part_number: i32::try_from(p.part_number).ok(),
                    e_tag: Some(ETag::Strong(p.etag.clone())),
                    size: i64::try_from(p.size).ok(),
                    last_modified: Some(timestamp(p.modified_unix_ms)),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }))
}

pub(crate) async fn list_uploads(
    gw: &Gateway,
    i: dto::ListMultipartUploadsInput,
) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
    let prefix = i.prefix.clone().unwrap_or_default();
    let uploads = gw
        .client()
        .list_multipart_uploads(&i.bucket, &prefix)
        .await
        .map_err(to_s3)?;
    let max = i
        .max_uploads
        .map_or(1000, |m| usize::try_from(m.clamp(1, 1000)).unwrap_or(1000));
    let key_marker = i.key_marker.clone().unwrap_or_default();
    // Uploads come sorted by key, then initiation; resume after the marker
    // upload (or after every upload of the marker key without an id marker).
    let start = match &i.upload_id_marker {
        Some(id) if !key_marker.is_empty() => uploads
            .iter()
            .position(|u| u.key == key_marker && &u.upload_id == id)
            .map_or_else(
                || uploads.partition_point(|u| u.key <= key_marker),
                |p| p + 1,
            ),
        _ if key_marker.is_empty() => 0,
        _ => uploads.partition_point(|u| u.key <= key_marker),
    };
    let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
    let mut shown = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut last: Option<(String, String)> = None;
    for u in uploads.into_iter().skip(start) {
        let common = delimiter.as_deref().and_then(|d| {
            u.key
                .get(prefix.len()..)
                .and_then(|rest| rest.find(d))
                .map(|j| u.key[..prefix.len() + j + d.len()].to_string())
        });
        if let Some(cp) = &common
            && prefixes.last() == Some(cp)
        {
            continue;
        }
        if shown.len() + prefixes.len() == max {
            truncated = true;
            break;
        }
        last = Some((u.key.clone(), u.upload_id.clone()));
        match common {
            Some(cp) => prefixes.push(cp),
            None => shown.push(dto::MultipartUpload {
                key: Some(u.key),
                upload_id: Some(u.upload_id),
                initiated: Some(timestamp(u.initiated_unix_ms)),
                ..Default::default()
            }),
        }
    }
    let (next_key, next_id) = match (truncated, last) {
        (true, Some((k, id))) => (Some(k), Some(id)),
        _ => (None, None),
    };
    Ok(S3Response::new(dto::ListMultipartUploadsOutput {
        bucket: Some(i.bucket),
        prefix: i.prefix,
        delimiter: i.delimiter,
        key_marker: i.key_marker,
        upload_id_marker: i.upload_id_marker,
        max_uploads: i32::try_from(max).ok(),
        is_truncated: Some(truncated),
        next_key_marker: next_key,
        next_upload_id_marker: next_id,
        uploads: Some(shown),
        common_prefixes: Some(
            prefixes
                .into_iter()
                .map(|p| dto::CommonPrefix { prefix: Some(p) })
                .collect(),
        ),
        ..Default::default()
    }))
}
