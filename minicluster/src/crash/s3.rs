//! The crash test's S3 operations: PutObject and a one-part multipart
//! upload (CreateMultipartUpload, UploadPart, CompleteMultipartUpload)
//! through the gateway's S3 handlers, called in-process (no HTTP), so that
//! an S3 PUT or Complete that returned Ok is held to the same rule as a
//! client `close()`.

use bytes::Bytes;
use s3_gateway::Gateway;
use s3s::S3;
use s3s::dto::{
    CompleteMultipartUploadInput, CompletedMultipartUpload, CompletedPart,
    CreateMultipartUploadInput, PutObjectInput, StreamingBlob, UploadPartInput,
};

/// A failure: its kind for the report (`s3 <code>`).
pub(super) type S3Failure = String;

fn failure(e: &s3s::S3Error) -> S3Failure {
    format!("s3 {}", e.code().as_str())
}

fn built(e: impl std::fmt::Display) -> S3Failure {
    format!("s3 request not built: {e}")
}

/// `data` as a request body arriving in 64 KiB pieces.
fn body(data: &[u8]) -> StreamingBlob {
    let pieces: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    StreamingBlob::wrap(futures::stream::iter(pieces))
}

/// PutObject of `data`.
pub(super) async fn put(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> Result<(), S3Failure> {
    let input = PutObjectInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .body(Some(body(data)))
        .build()
        .map_err(built)?;
    gw.put_object(Gateway::request(input))
        .await
        .map(|_| ())
        .map_err(|e| failure(&e))
}

/// A one-part multipart upload of `data`. The flag says whether the
/// Complete call was made (its outcome then may be unknown).
pub(super) async fn multipart(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> (bool, Result<(), S3Failure>) {
    let create = match CreateMultipartUploadInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .build()
    {
        Ok(i) => i,
        Err(e) => return (false, Err(built(e))),
    };
    let upload_id = match gw.create_multipart_upload(Gateway::request(create)).await {
        Ok(r) => r.output.upload_id.unwrap_or_default(),
        Err(e) => return (false, Err(failure(&e))),
    };
    let part = match UploadPartInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .upload_id(upload_id.clone())
        .part_number(1)
        .body(Some(body(data)))
        .build()
    {
        Ok(i) => i,
        Err(e) => return (false, Err(built(e))),
    };
    let etag = match gw.upload_part(Gateway::request(part)).await {
        Ok(r) => r.output.e_tag,
        Err(e) => return (false, Err(failure(&e))),
    };
    let complete = match CompleteMultipartUploadInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .upload_id(upload_id)
        .multipart_upload(Some(CompletedMultipartUpload {
            parts: Some(vec![CompletedPart {
                e_tag: etag,
                part_number: Some(1),
                ..Default::default()
            }]),
        }))
        .build()
    {
        Ok(i) => i,
        Err(e) => return (false, Err(built(e))),
    };
    let r = gw
        .complete_multipart_upload(Gateway::request(complete))
        .await
        .map(|_| ())
        .map_err(|e| failure(&e));
    (true, r)
}
