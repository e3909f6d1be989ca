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
use crate::integrity::{
    Algorithm, CHECKSUM_ALGORITHM, CHECKSUM_TYPE, CHECKSUM_VALUE, Claims, b64, combine_crcs,
    decode_value, get_checksum, receive, set_checksum, stored,
};
use crate::object_meta::{ETAG, object_metadata, timestamp};

/// Smallest part S3 accepts for all but the last part: 5 MiB.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// Checks the upload belongs to `bucket/key` (S3 answers NoSuchUpload otherwise).
pub(crate) async fn upload_of(
    gw: &Gateway,
    upload_id: &str,
    bucket: &str,
    key: &str,
) -> S3Result<ec_client::MultipartUpload> {
    let u = gw
        .client()
        .multipart_upload(upload_id)
        .await
        .map_err(to_s3)?;
    if u.bucket != bucket || u.key != key {
        return Err(not_for(upload_id, bucket, key));
    }
    Ok(u)
}

/// NoSuchUpload for an upload id that names an upload of another object than `bucket/key`.
fn not_for(upload_id: &str, bucket: &str, key: &str) -> s3s::S3Error {
    s3_error!(NoSuchUpload, "upload {upload_id} is not for {bucket}/{key}")
}

/// The checksum an upload's object gets, from CreateMultipartUpload's
/// `x-amz-checksum-algorithm` and `x-amz-checksum-type` (Amazon: full-object checksums exist
/// for CRCs only, CRC64NVME has no composite form, a type needs an algorithm; an algorithm
/// alone is COMPOSITE except CRC64NVME). `None` when the request names none.
fn upload_checksum(
    algorithm: Option<&dto::ChecksumAlgorithm>,
    ty: Option<&dto::ChecksumType>,
) -> S3Result<Option<(Algorithm, &'static str)>> {
    let Some(a) = algorithm else {
        return match ty {
            None => Ok(None),
            Some(_) => Err(s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )),
        };
    };
    let a = Algorithm::parse(a.as_str()).ok_or_else(|| {
        s3_error!(
            InvalidRequest,
            "Checksum algorithm provided is unsupported."
        )
    })?;
    let full = match ty.map(|t| t.as_str().to_ascii_uppercase()) {
        None => a == Algorithm::Crc64Nvme,
        Some(t) if t == dto::ChecksumType::FULL_OBJECT => true,
        Some(t) if t == dto::ChecksumType::COMPOSITE => false,
        Some(t) => return Err(s3_error!(InvalidRequest, "Unknown x-amz-checksum-type {t}")),
    };
    match (a.is_crc(), full, a) {
        (false, true, _) => Err(s3_error!(
            InvalidRequest,
            "The FULL_OBJECT checksum type cannot be used with the {} checksum algorithm.",
            a.name().to_ascii_lowercase()
        )),
        (_, false, Algorithm::Crc64Nvme) => Err(s3_error!(
            InvalidRequest,
            "The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm."
        )),
        _ => Ok(Some((a, if full { "FULL_OBJECT" } else { "COMPOSITE" }))),
    }
}

pub(crate) async fn create(
    gw: &Gateway,
    i: dto::CreateMultipartUploadInput,
    tags: BTreeMap<String, String>,
) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
    crate::object_meta::check_user_metadata(i.metadata.as_ref())?;
    let mut meta = object_metadata(crate::object_meta::system_metadata!(i), i.metadata.as_ref());
    meta.extend(tags);
    crate::acl::apply_requested(&mut meta, i.acl.as_ref())?;
    let checksum = upload_checksum(i.checksum_algorithm.as_ref(), i.checksum_type.as_ref())?;
    if let Some((a, ty)) = checksum {
        meta.insert(CHECKSUM_ALGORITHM.to_string(), a.name().to_string());
        meta.insert(CHECKSUM_TYPE.to_string(), ty.to_string());
    }
    let upload_id = gw
        .client()
        .initiate_multipart_upload(&i.bucket, &i.key, None, meta)
        .await
        .map_err(to_s3)?;
    Ok(S3Response::new(dto::CreateMultipartUploadOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(upload_id),
        checksum_algorithm: checksum
            .map(|(a, _)| dto::ChecksumAlgorithm::from(a.name().to_string())),
        checksum_type: checksum.map(|(_, t)| dto::ChecksumType::from(t.to_string())),
        ..Default::default()
    }))
}

/// The algorithm an upload was created with, if it named one.
pub(crate) fn upload_algorithm(u: &ec_client::MultipartUpload) -> Option<Algorithm> {
    u.metadata
        .get(CHECKSUM_ALGORITHM)
        .and_then(|a| Algorithm::parse(a))
}

pub(crate) async fn upload_part(
    gw: &Gateway,
    req: s3s::S3Request<dto::UploadPartInput>,
) -> S3Result<S3Response<dto::UploadPartOutput>> {
    crate::unsupported::refuse_unsupported(&req.headers)?;
    let trailers = req.trailing_headers;
    let i = req.input;
    let part_number = u32::try_from(i.part_number)
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| s3_error!(InvalidArgument, "part number must be between 1 and 10000"))?;
    let u = upload_of(gw, &i.upload_id, &i.bucket, &i.key).await?;
    let required = upload_algorithm(&u);
    let claims = Claims::from_headers(
        &req.headers,
        required.unwrap_or(Algorithm::Crc64Nvme),
        required,
    )?;
    claims.check_size()?;
    let mut w = gw
        .client()
        .upload_part(&i.upload_id, part_number)
        .await
        .map_err(to_s3)?;
    // A failed claim drops the writer: the part is not recorded.
    let got = receive(gw, i.body, &mut w, &claims, trailers.as_ref()).await?;
    let meta = BTreeMap::from([
        (
            CHECKSUM_ALGORITHM.to_string(),
            got.algorithm.name().to_string(),
        ),
        (CHECKSUM_VALUE.to_string(), b64(&got.digest)),
    ]);
    w.close_part_with(&got.md5_hex, meta)
        .await
        .map_err(crate::write_conditions::commit_error)?;
    let mut out = dto::UploadPartOutput {
        e_tag: Some(ETag::Strong(got.md5_hex.clone())),
        ..Default::default()
    };
    set_checksum!(out, got.algorithm, b64(&got.digest));
    Ok(S3Response::new(out))
}

/// The object checksum of a completed upload from its listed parts' stored checksums (in
/// order, with sizes): FULL_OBJECT combines CRCs, COMPOSITE hashes the concatenated part
/// digests and appends `-N`. An upload created without an algorithm gets FULL_OBJECT when all
/// parts share one CRC, COMPOSITE when they share a SHA, none when they differ.
fn object_checksum(
    u: &ec_client::MultipartUpload,
    parts: &[(Algorithm, Vec<u8>, u64)],
) -> Option<(Algorithm, String, &'static str)> {
    let (first, ..) = parts.first()?;
    if parts.iter().any(|(a, ..)| a != first) {
        return None;
    }
    let a = upload_algorithm(u).unwrap_or(*first);
    let full = match u.metadata.get(CHECKSUM_TYPE).map(String::as_str) {
        Some("FULL_OBJECT") => true,
        Some(_) => false,
        None => a.is_crc(),
    };
    if full {
        let crcs: Vec<(Vec<u8>, u64)> = parts.iter().map(|(_, d, n)| (d.clone(), *n)).collect();
        Some((a, b64(&combine_crcs(a, &crcs)?), "FULL_OBJECT"))
    } else {
        let joined: Vec<u8> = parts
            .iter()
            .flat_map(|(_, d, _)| d.iter().copied())
            .collect();
        Some((
            a,
            format!("{}-{}", b64(&a.digest(&joined)), parts.len()),
            "COMPOSITE",
        ))
    }
}

/// (part number, ETag without quotes) of each part a Complete lists, in order.
fn listed_parts(listed: &[dto::CompletedPart]) -> S3Result<Vec<(u32, String)>> {
    if listed.is_empty() {
        return Err(s3_error!(MalformedXML, "the part list is empty"));
    }
    listed
        .iter()
        .map(|p| {
            let number = p
                .part_number
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| s3_error!(InvalidPart, "a part has no part number"))?;
            match &p.e_tag {
                Some(ETag::Strong(s) | ETag::Weak(s)) => {
                    Ok((number, s.trim_matches('"').to_string()))
                }
                None => Err(s3_error!(InvalidPart, "part {number} has no ETag")),
            }
        })
        .collect()
}

/// The answer to a Complete the om already carried out (a retry after a lost response): the
/// key that completion made, with its ETag and checksum, as Amazon answers such a retry.
///
/// # Errors
/// 404 `NoSuchUpload` when there is no such completion for this key and part list.
async fn completed_before(
    gw: &Gateway,
    i: dto::CompleteMultipartUploadInput,
) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
    let listed = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
    let parts = listed_parts(&listed)?;
    let key = gw
        .client()
        .complete_multipart_upload(&i.upload_id, &parts, MIN_PART_SIZE, BTreeMap::new())
        .await
        .map_err(to_s3)?;
    if key.bucket != *i.bucket || key.name != *i.key {
        return Err(not_for(&i.upload_id, &i.bucket, &i.key));
    }
    Ok(S3Response::new(completed(&key)))
}

/// The answer to a completion that made `key`: its ETag and stored checksum, as recorded.
fn completed(key: &ec_client::KeyInfo) -> dto::CompleteMultipartUploadOutput {
    let mut out = dto::CompleteMultipartUploadOutput {
        bucket: Some(key.bucket.clone()),
        key: Some(key.name.clone()),
        e_tag: Some(ETag::Strong(crate::object_meta::etag_of(key))),
        location: Some(format!("/{}/{}", key.bucket, key.name)),
        ..Default::default()
    };
    if let Some((a, value, ty)) = stored(&key.metadata) {
        set_checksum!(out, a, value.to_string());
        out.checksum_type = Some(dto::ChecksumType::from(ty.to_string()));
    }
    out
}

pub(crate) async fn complete(
    gw: &Gateway,
    i: dto::CompleteMultipartUploadInput,
) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
    // Only an upload that no longer exists may be a completion being retried (the om then
    // answers from its record of completions and changes nothing); one that exists for
    // another key is simply not this request's.
    let u = match gw.client().list_parts(&i.upload_id).await {
        Ok(u) if u.bucket == *i.bucket && u.key == *i.key => u,
        Ok(_) => {
            return Err(not_for(&i.upload_id, &i.bucket, &i.key));
        }
        Err(ec_client::ClientError::Om {
            code: ec_client::OmErrorCode::NoSuchUpload,
            ..
        }) => return completed_before(gw, i).await,
        Err(e) => return Err(to_s3(e)),
    };
    let condition = crate::write_conditions::write_condition(
        gw,
        &i.bucket,
        &i.key,
        i.if_match.as_ref(),
        i.if_none_match.as_ref(),
    )
    .await?;
    let listed = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
    let parts = listed_parts(&listed)?;
    let mut digests = Vec::with_capacity(listed.len() * 16);
    let mut checksums = Vec::with_capacity(listed.len());
    let mut total = 0u64;
    for (p, (number, etag)) in listed.iter().zip(&parts) {
        let number = *number;
        let bin = hex::decode(etag)
            .ok()
            .ok_or_else(|| s3_error!(InvalidPart, "part {number} has a malformed ETag"))?;
        digests.extend_from_slice(&bin);
        // A part the upload does not hold is the om's InvalidPart below.
        if let Some(held) = u.parts.iter().find(|h| h.part_number == number) {
            total = total.saturating_add(held.size);
            if let Some((a, value, _)) = stored(&held.metadata) {
                let digest = decode_value(a, value, CHECKSUM_VALUE)?;
                // A checksum the client lists must be the one the part was stored with.
                for other in Algorithm::ALL {
                    if let Some(listed) = get_checksum!(p, other)
                        && (other != a || listed.trim() != value)
                    {
                        return Err(s3_error!(
                            InvalidPart,
                            "One or more of the specified parts could not be found or the specified checksum did not match: part {number}"
                        ));
                    }
                }
                checksums.push((a, digest, held.size));
            }
        }
    }
    if let Some(declared) = i.mpu_object_size
        && u64::try_from(declared).ok() != Some(total)
    {
        return Err(s3_error!(
            InvalidRequest,
            "The provided 'x-amz-mp-object-size' header value {declared} does not match what was computed: {total}"
        ));
    }
    let checksum = if checksums.len() == parts.len() {
        object_checksum(&u, &checksums)
    } else {
        None
    };
    // A claim that cannot be checked is refused, never accepted unchecked.
    for other in Algorithm::ALL {
        if get_checksum!(i, other).is_some() && checksum.as_ref().is_none_or(|(a, ..)| *a != other)
        {
            return Err(s3_error!(
                InvalidRequest,
                "The {} checksum you specified cannot be checked: the object's checksum is {}",
                other.name(),
                checksum
                    .as_ref()
                    .map_or("not computed (its parts' checksums differ)", |(a, ..)| a
                        .name())
            ));
        }
    }
    if let Some((a, value, _)) = &checksum
        && let Some(claimed) = get_checksum!(i, *a)
        && claimed.trim() != value.as_str()
        && claimed.trim() != value.split('-').next().unwrap_or_default()
    {
        return Err(s3_error!(
            BadDigest,
            "The {} you specified did not match the calculated checksum.",
            a.name()
        ));
    }
    let etag = format!("{}-{}", hex::encode(Md5::digest(&digests)), parts.len());
    let mut meta = BTreeMap::new();
    meta.insert(ETAG.to_string(), etag.clone());
    let numbers: Vec<String> = parts.iter().map(|(n, _)| n.to_string()).collect();
    meta.insert(
        crate::object_meta::PART_NUMBERS.to_string(),
        numbers.join(","),
    );
    if let Some((a, value, ty)) = &checksum {
        meta.insert(CHECKSUM_ALGORITHM.to_string(), a.name().to_string());
        meta.insert(CHECKSUM_VALUE.to_string(), value.clone());
        meta.insert(CHECKSUM_TYPE.to_string(), (*ty).to_string());
        let sums: Vec<String> = checksums.iter().map(|(_, d, _)| b64(d)).collect();
        meta.insert(
            crate::object_meta::PART_CHECKSUMS.to_string(),
            sums.join(","),
        );
    }
    // The om records the part sizes itself, from the parts it stitches.
    let key = gw
        .client()
        .complete_multipart_upload_if(&i.upload_id, &parts, MIN_PART_SIZE, meta, condition)
        .await
        .map_err(crate::write_conditions::commit_error)?;
    Ok(S3Response::new(completed(&key)))
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
    let marker = i
        .part_number_marker
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(0);
    let max = i
        .max_parts
        .map_or(1000, |m| u32::try_from(m.clamp(1, 1000)).unwrap_or(1000));
    // One page from the om: the upload's header and the parts shown.
    let (mut u, truncated) = gw
        .client()
        .list_parts_page(&i.upload_id, marker, max)
        .await
        .map_err(to_s3)?;
    if u.bucket != *i.bucket || u.key != *i.key {
        return Err(not_for(&i.upload_id, &i.bucket, &i.key));
    }
    let shown = std::mem::take(&mut u.parts);
    let next = shown.last().and_then(|p| i32::try_from(p.part_number).ok());
    let algorithm = upload_algorithm(&u);
    Ok(S3Response::new(dto::ListPartsOutput {
        checksum_algorithm: algorithm.map(|a| dto::ChecksumAlgorithm::from(a.name().to_string())),
        checksum_type: algorithm
            .and(u.metadata.get(CHECKSUM_TYPE))
            .map(|t| dto::ChecksumType::from(t.clone())),
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
                .map(|p| {
                    let mut part = dto::Part {
                        part_number: i32::try_from(p.part_number).ok(),
                        e_tag: Some(ETag::Strong(p.etag.clone())),
                        size: i64::try_from(p.size).ok(),
                        last_modified: Some(timestamp(p.modified_unix_ms)),
                        ..Default::default()
                    };
                    if let Some((a, value, _)) = stored(&p.metadata) {
                        set_checksum!(part, a, value.to_string());
                    }
                    part
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
    let max = i
        .max_uploads
        .map_or(1000, |m| usize::try_from(m.clamp(1, 1000)).unwrap_or(1000));
    let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
    let mut shown = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut last: Option<(String, String)> = None;
    // Pages from the om in S3's order (key, then initiation), resuming after the markers;
    // with a delimiter, many uploads may roll up into one common prefix, so pages are read
    // until `max` entries are shown or the uploads end.
    let mut key_marker = i.key_marker.clone().unwrap_or_default();
    let mut id_marker = i
        .upload_id_marker
        .clone()
        .filter(|_| !key_marker.is_empty())
        .unwrap_or_default();
    // The client's markers carry no time (the om looks the upload up); the next om page
    // resumes after this page's last upload by its time too, as it may complete meanwhile.
    let mut ms_marker = 0;
    'pages: loop {
        let (page, more) = gw
            .client()
            .list_multipart_uploads_page(
                &i.bucket,
                &prefix,
                (&key_marker, &id_marker, ms_marker),
                0,
            )
            .await
            .map_err(to_s3)?;
        let Some(end) = page
            .last()
            .map(|u| (u.key.clone(), u.upload_id.clone(), u.initiated_unix_ms))
        else {
            break;
        };
        for u in page {
            let common = delimiter.as_deref().and_then(|d| {
                u.key
                    .get(prefix.len()..)
                    .and_then(|rest| rest.find(d))
                    .map(|j| u.key[..prefix.len() + j + d.len()].to_string())
            });
            if let Some(cp) = &common
                && prefixes.last() == Some(cp)
            {
                // Rolled up into the prefix shown: the next page resumes after it.
                last = Some((u.key, u.upload_id));
                continue;
            }
            if shown.len() + prefixes.len() == max {
                truncated = true;
                break 'pages;
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
        // Without a delimiter the next upload is an entry of its own: a full page with
        // more to come is truncated, with no call to learn it.
        if !more || (delimiter.is_none() && shown.len() == max) {
            truncated = more;
            break;
        }
        (key_marker, id_marker, ms_marker) = end;
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
