//! [`OzoneStore`]: one Ozone bucket as an [`object_store::ObjectStore`], over
//! [`ec_client::Client`] — what DataFusion, Polars, delta-rs and many services
//! read and write through.
//!
//! # How paths map to keys
//!
//! A store is bound to one bucket. An [`object_store::path::Path`] becomes
//! the key named by its canonical string (`Path::as_ref`): segments joined
//! by `/`, each percent-encoded as `Path` encodes it. So `Path::from("a/b")`
//! is the key `a/b`, and `Path::from_iter(["a", "b/c"])` is `a/b%2Fc`. A key
//! written by another front end (the S3 gateway) is listed under
//! `Path::parse(key)`; a key that is not a valid path (`a//b`, a trailing
//! `/`) makes the listing fail with [`object_store::Error::InvalidPath`], as
//! object_store's own S3 store does.
//!
//! # Versions and ETags
//!
//! An object's [`ObjectMeta::e_tag`](object_store::ObjectMeta::e_tag) is its
//! key generation (Ozone's `updateID`, decimal): the om assigns a new one,
//! cluster-wide unique, at every commit. `PutMode::Update` therefore maps
//! exactly onto the om's [`WriteCondition::Generation`], checked in the
//! commit's own transaction, and `PutMode::Create` onto
//! [`WriteCondition::NotExists`]. The S3 gateway reports MD5 ETags for the
//! same objects; the two are different tags of the same version. The om
//! keeps no old versions: `version` is always `None`, and a read asking for
//! a version is refused with `NotSupported`.
//!
//! # Attributes and tags
//!
//! Content type, cache control, disposition, encoding, language and user
//! metadata are stored as the S3 gateway stores them
//! ([`ec_client::object_metadata`]), and so are tags: an object written here
//! shows them through S3 and the other way round. `StorageClass` is refused
//! (`NotSupported`): Ozone chooses replication per bucket or key, not by an
//! S3 storage class.
//!
//! # Renames
//!
//! `rename` and `rename_if_not_exists` are the om's key rename: one
//! transaction, no data copied, the key at its new name with a new
//! generation (object_store's default is a copy and a delete).
//!
//! # Source
//!
//! The `ObjectStore` contract as object_store 0.14 documents it and its
//! `integration` suite checks it; this crate passes that suite
//! (`tests/it/conformance.rs`).

mod error;
mod list;
mod meta;
mod multipart;
mod read;
mod write;

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use ec_client::Client;
use futures::stream::BoxStream;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartId, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

pub use error::OzoneStoreError;
pub use multipart::OzoneUpload;

#[cfg(doc)]
use ec_client::WriteCondition;

/// The store name object_store errors carry (`Error::Generic { store, .. }`).
pub const STORE: &str = "Ozone";

/// One Ozone bucket as an [`ObjectStore`] (and a [`MultipartStore`]). Cheap
/// to clone; clones share the client's channels.
#[derive(Clone)]
pub struct OzoneStore {
    client: Client,
    bucket: String,
    /// Multipart upload ids already checked to belong to a path (id → key),
    /// so that `MultipartStore::put_part` lists an upload's parts once, not
    /// once per part. Bounded: cleared when it reaches [`CHECKED_UPLOADS`].
    checked_uploads: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// Upload ids [`OzoneStore`] remembers as checked.
const CHECKED_UPLOADS: usize = 1024;

impl OzoneStore {
    /// The bucket `bucket` of the cluster `client` is connected to. Nothing
    /// is checked here: a missing bucket fails each call with
    /// `Error::Generic` naming it.
    #[must_use]
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            checked_uploads: std::sync::Arc::default(),
        }
    }

    /// The client calls go through.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket this store is bound to.
    #[must_use]
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

impl fmt::Debug for OzoneStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OzoneStore")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for OzoneStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OzoneStore({})", self.bucket)
    }
}

#[async_trait]
impl ObjectStore for OzoneStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        write::put(self, location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = OzoneUpload::start(self, location, opts).await?;
        Ok(Box::new(upload))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        read::get(self, location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        read::get_ranges(self, location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        write::delete_stream(self.clone(), locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        list::list(self.clone(), prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        list::list(self.clone(), prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        list::list_with_delimiter(self, prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        write::copy(self, from, to, options).await
    }

    /// An atomic om rename (no copy, no window in which both or neither
    /// name exists), unlike object_store's default copy-then-delete.
    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        write::rename(self, from, to, options).await
    }
}

#[async_trait]
impl MultipartStore for OzoneStore {
    async fn create_multipart(&self, path: &Path) -> Result<MultipartId> {
        multipart::create(self, path, PutMultipartOptions::default()).await
    }

    async fn create_multipart_opts(
        &self,
        path: &Path,
        opts: PutMultipartOptions,
    ) -> Result<MultipartId> {
        multipart::create(self, path, opts).await
    }

    async fn put_part(
        &self,
        path: &Path,
        id: &MultipartId,
        part_idx: usize,
        data: PutPayload,
    ) -> Result<PartId> {
        multipart::put_part(self, path, id, part_idx, data).await
    }

    async fn complete_multipart(
        &self,
        path: &Path,
        id: &MultipartId,
        parts: Vec<PartId>,
    ) -> Result<PutResult> {
        multipart::complete(self, path, id, parts).await
    }

    async fn abort_multipart(&self, path: &Path, id: &MultipartId) -> Result<()> {
        multipart::abort(self, path, id).await
    }
}

/// README.md's code blocks, compiled as this crate's doctests (it sees both
/// `ec_client` and `object_store`), so that the README's library snippets
/// stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
