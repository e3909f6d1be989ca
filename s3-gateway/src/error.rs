//! Client errors as S3 errors (code, status, message): the one place that
//! decides what an S3 client sees when the cluster says no.

use ec_client::ClientError;
use s3s::{S3Error, S3ErrorCode};

/// Maps a client error to the S3 error a client expects.
///
/// Missing keys and buckets are `NoSuchKey`/`NoSuchBucket` (404); the om's
/// multipart refusals keep their S3 names; a read that lost more than p
/// indexes, or a cluster without enough datanodes, is `ServiceUnavailable`
/// (503); anything else is `InternalError` (500).
#[must_use]
pub fn to_s3(e: ClientError) -> S3Error {
    let code = match &e {
        ClientError::KeyNotFound { .. } => S3ErrorCode::NoSuchKey,
        ClientError::BucketNotFound(_) => S3ErrorCode::NoSuchBucket,
        ClientError::Om { name, .. } => match name.as_str() {
            "KEY_NOT_FOUND" => S3ErrorCode::NoSuchKey,
            "BUCKET_NOT_FOUND" => S3ErrorCode::NoSuchBucket,
            "BUCKET_ALREADY_EXISTS" => S3ErrorCode::BucketAlreadyOwnedByYou,
            "BUCKET_NOT_EMPTY" => S3ErrorCode::BucketNotEmpty,
            "NO_SUCH_UPLOAD" => S3ErrorCode::NoSuchUpload,
            "INVALID_PART" => S3ErrorCode::InvalidPart,
            "INVALID_PART_ORDER" => S3ErrorCode::InvalidPartOrder,
            "ENTITY_TOO_SMALL" => S3ErrorCode::EntityTooSmall,
            "INVALID_ARGUMENT" => S3ErrorCode::InvalidArgument,
            "NOT_ENOUGH_DATANODES" => S3ErrorCode::ServiceUnavailable,
            "TOO_MANY_OPEN_SESSIONS" => S3ErrorCode::SlowDown,
            _ => S3ErrorCode::InternalError,
        },
        ClientError::InsufficientLocations { .. }
        | ClientError::WriteFailed { .. }
        | ClientError::OmTimeout { .. } => S3ErrorCode::ServiceUnavailable,
        ClientError::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        _ => S3ErrorCode::InternalError,
    };
    S3Error::with_message(code, e.to_string())
}
