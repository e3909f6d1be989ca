//! Client errors as S3 errors (code, status, message): the one place that
//! decides what an S3 client sees when the cluster says no.

use ec_client::{ClientError, OmErrorCode};
use s3s::{S3Error, S3ErrorCode};

/// Maps a client error to the S3 error a client expects.
///
/// Missing keys and buckets are `NoSuchKey`/`NoSuchBucket` (404); the om's
/// multipart refusals keep their S3 names; too many open writes of one
/// client, and calls that lost to concurrent changes of the same metadata,
/// are `SlowDown` (503, "reduce your request rate"); a read that lost more than p
/// indexes, an om that cannot be reached, or anything else
/// [`ClientError::is_retryable`] calls retryable is `ServiceUnavailable`
/// (503, which S3 clients retry); anything else is `InternalError` (500).
#[must_use]
pub fn to_s3(e: ClientError) -> S3Error {
    // A writer's report wraps the failure that decides the answer.
    let code = match e.root() {
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
            OmErrorCode::TooManyOpenSessions | OmErrorCode::Contention => S3ErrorCode::SlowDown,
            c if c.is_retryable() => S3ErrorCode::ServiceUnavailable,
            _ => S3ErrorCode::InternalError,
        },
        ClientError::InvalidArgument(_) => S3ErrorCode::InvalidArgument,
        // The cluster may answer a retry (datanodes or the om were down).
        e if e.is_retryable() => S3ErrorCode::ServiceUnavailable,
        _ => S3ErrorCode::InternalError,
    };
    // What a client shows its user: S3's own wording for the answers that say something
    // does not exist or conflicts (not the om call that found out), the cause otherwise.
    let message = match &code {
        S3ErrorCode::NoSuchKey => "The specified key does not exist".to_string(),
        S3ErrorCode::NoSuchBucket => "The specified bucket does not exist".to_string(),
        S3ErrorCode::NoSuchUpload => "The specified multipart upload does not exist: the upload \
                                      ID may be wrong, or the upload was aborted or completed"
            .to_string(),
        S3ErrorCode::BucketNotEmpty => "The bucket you tried to delete is not empty".to_string(),
        S3ErrorCode::BucketAlreadyOwnedByYou => {
            "The bucket already exists and is yours".to_string()
        }
        _ => e.to_string(),
    };
    S3Error::with_message(code, message)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn om(code: OmErrorCode) -> ClientError {
        ClientError::Om {
            op: "Test",
            code,
            message: "m".into(),
        }
    }

    fn aborted(cause: ClientError) -> ClientError {
        ClientError::WriteAborted {
            key: "b/k".into(),
            cause: Arc::new(cause),
        }
    }

    #[test]
    fn a_writers_failure_is_answered_by_what_caused_it() {
        let code = |e: ClientError| to_s3(e).code().clone();
        assert_eq!(code(om(OmErrorCode::KeyNotFound)), S3ErrorCode::NoSuchKey);
        assert_eq!(
            code(aborted(om(OmErrorCode::NotEnoughDatanodes))),
            S3ErrorCode::ServiceUnavailable,
            "too few datanodes now: worth a retry"
        );
        assert_eq!(
            code(aborted(om(OmErrorCode::Unavailable))),
            S3ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(aborted(ClientError::InvalidArgument("x".into()))),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(aborted(om(OmErrorCode::Internal))),
            S3ErrorCode::InternalError
        );
        assert_eq!(
            code(ClientError::WriteCancelled { key: "b/k".into() }),
            S3ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(om(OmErrorCode::Contention)),
            S3ErrorCode::SlowDown,
            "lost to concurrent changes of the same metadata: back off"
        );
        assert_eq!(
            code(om(OmErrorCode::StoreFull)),
            S3ErrorCode::ServiceUnavailable
        );
    }

    /// Caller errors and internal errors stay apart all the way up: a broken invariant of
    /// the client (a length mismatch in a writer) or a panicked stage is the server's fault.
    #[test]
    fn internal_failures_are_server_errors() {
        let code = |e: ClientError| to_s3(e).code().clone();
        let mismatch = ClientError::Internal("5 bytes written but 4 acknowledged".into());
        assert_eq!(code(aborted(mismatch)), S3ErrorCode::InternalError);
        assert_eq!(
            code(ClientError::TaskLost("the EC flush stage: panicked".into())),
            S3ErrorCode::InternalError
        );
        assert_eq!(
            code(ClientError::InvalidArgument("bad range".into())),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn the_message_keeps_the_cause() {
        let e = to_s3(aborted(om(OmErrorCode::NotEnoughDatanodes)));
        let msg = e.message().unwrap_or_default().to_string();
        assert!(msg.contains("NOT_ENOUGH_DATANODES"), "{msg}");
    }
}
