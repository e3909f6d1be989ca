//! Client errors as S3 errors (code, status, message): the one place that
//! decides what an S3 client sees when the cluster says no.

use ec_client::{ClientError, OmErrorCode};
use s3s::{S3Error, S3ErrorCode};

/// Maps a client error to the S3 error a client expects.
///
/// Missing keys and buckets are `NoSuchKey`/`NoSuchBucket` (404); the om's
/// multipart refusals keep their S3 names; a read that lost more than p
/// indexes, an om that cannot be reached, or anything else
/// [`ClientError::is_retryable`] calls retryable is `ServiceUnavailable`
/// (503, which S3 clients retry); anything else is `InternalError` (500).
#[must_use]
pub fn to_s3(e: ClientError) -> S3Error {
    let code = match &e {
        ClientError::KeyNotFound { .. } => S3ErrorCode::NoSuchKey,
        ClientError::BucketNotFound(_) => S3ErrorCode::NoSuchBucket,
        ClientError::Om { code, .. } => match code {
            OmErrorCode::KeyNotFound => S3ErrorCode::NoSuchKey,
            OmErrorCode::BucketNotFound => S3ErrorCode::NoSuchBucket,
            OmErrorCode::BucketAlreadyExists => S3ErrorCode::BucketAlreadyOwnedByYou,
            OmErrorCode::BucketNotEmpty => S3ErrorCode::BucketNotEmpty,
            OmErrorCode::NoSuchUpload => S3ErrorCode::NoSuchUpload,
            OmErrorCode::InvalidPart => S3ErrorCode::InvalidPart,
            OmErrorCode::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
            OmErrorCode::EntityTooSmall => S3ErrorCode::EntityTooSmall,
            OmErrorCode::InvalidArgument => S3ErrorCode::InvalidArgument,
            OmErrorCode::TooManyOpenSessions => S3ErrorCode::SlowDown,
            c if c.is_retryable() => S3ErrorCode::ServiceUnavailable,
            _ => S3ErrorCode::InternalError,
        },
        ClientError::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        // The cluster may answer a retry (datanodes or the om were down).
        e if e.is_retryable() => S3ErrorCode::ServiceUnavailable,
        _ => S3ErrorCode::InternalError,
    };
    S3Error::with_message(code, e.to_string())
}
