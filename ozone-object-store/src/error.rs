//! How failures reach object_store callers: [`ClientError`]s mapped onto
//! [`object_store::Error`]'s kinds (a missing key is `NotFound`, a failed
//! write condition `AlreadyExists` or `Precondition`), and this crate's own
//! refusals ([`OzoneStoreError`]) carried inside them.

use ec_client::{ClientError, OmErrorCode};
use object_store::Error;
use object_store::path::Path;

use crate::STORE;

/// What this adapter itself refuses; it reaches callers as the `source` of an
/// [`object_store::Error`].
#[derive(Debug, thiserror::Error)]
pub enum OzoneStoreError {
    /// A range that does not fit the object (`start` past its end, or
    /// `start > end`), as object_store's `GetRange` rules judge it.
    #[error("range {start}..{end} is not satisfiable for an object of {len} bytes")]
    RangeNotSatisfiable {
        /// First byte asked for (object-relative).
        start: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The object's length, bytes.
        len: u64,
    },
    /// `PutMode::Update` named an ETag that is not one of this store's (a
    /// key generation in decimal), or named none.
    #[error("an update needs the e_tag this store reported (a key generation), got {0:?}")]
    BadUpdateVersion(Option<String>),
    /// A multipart upload id that belongs to another key or bucket.
    #[error("multipart upload {upload_id} is for {bucket}/{key}, not this path")]
    UploadOfAnotherKey {
        /// The upload.
        upload_id: String,
        /// Its bucket.
        bucket: String,
        /// Its key.
        key: String,
    },
    /// A multipart upload completed while a part it started had not
    /// finished (its `put_part` future was dropped or failed): completing
    /// would leave a hole in the object.
    #[error("part {0} of the upload did not finish; the upload cannot complete")]
    PartMissing(u32),
    /// More parts than S3's (and the om's) limit of 10,000.
    #[error("an upload holds at most 10000 parts")]
    TooManyParts,
}

/// `e` as object_store reports it for `path`: a missing key or upload is
/// `NotFound`; everything else is `Generic` with the client error as source.
pub(crate) fn from_client(path: &Path, e: ClientError) -> Error {
    match e.root() {
        ClientError::KeyNotFound { .. }
        | ClientError::Om {
            code: OmErrorCode::KeyNotFound | OmErrorCode::NoSuchUpload,
            ..
        } => Error::NotFound {
            path: path.to_string(),
            source: Box::new(e),
        },
        _ => generic(e),
    }
}

/// `e` as a failed conditional commit: `AlreadyExists` for a create,
/// `Precondition` for an update, when the om refused the condition;
/// otherwise as [`from_client`].
pub(crate) fn from_conditional(path: &Path, e: ClientError, create: bool) -> Error {
    if !e.is_condition_failed() {
        return from_client(path, e);
    }
    let path = path.to_string();
    let source = Box::new(e);
    if create {
        Error::AlreadyExists { path, source }
    } else {
        Error::Precondition { path, source }
    }
}

/// Any error as `Error::Generic` of this store.
pub(crate) fn generic(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
}

/// An unsupported request (`Error::NotSupported`).
pub(crate) fn not_supported(what: &str) -> Error {
    Error::NotSupported {
        source: format!("{STORE}: {what}").into(),
    }
}
