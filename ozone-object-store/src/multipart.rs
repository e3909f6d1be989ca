//! Multipart uploads over the om's multipart API: [`OzoneUpload`]
//! (object_store's `MultipartUpload`, parts numbered as they are started)
//! and the `MultipartStore` calls (parts numbered by the caller's index).
//! Parts are invisible until completion, which links their block groups into
//! the key without copying; the om enforces no minimum part size here (S3's
//! 5 MiB rule is the S3 gateway's).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use ec_client::{Client, ClientError};
use md5::{Digest, Md5};
use object_store::multipart::PartId;
use object_store::path::Path;
use object_store::{
    MultipartId, MultipartUpload, PutMultipartOptions, PutPayload, PutResult, Result, UploadPart,
};

use crate::OzoneStore;
use crate::error::{OzoneStoreError, from_client, generic};
use crate::meta::{etag_of, key_of, to_metadata};

/// The most parts an upload holds (S3's limit, which the om keeps too).
const MAX_PARTS: u32 = 10_000;

/// A multipart upload of one object in progress: `put_part` calls may run
/// concurrently; `complete` links the parts into the key in the order they
/// were started. Dropping it without `complete` or `abort` leaves the upload
/// in the om, as on S3, until it is aborted (its parts' blocks are then
/// reclaimed).
#[derive(Debug)]
pub struct OzoneUpload {
    store: OzoneStore,
    location: Path,
    upload_id: String,
    /// Parts started so far (numbered 1..=started).
    started: u32,
    /// Parts finished: part number → ETag (hex MD5).
    finished: Arc<Mutex<BTreeMap<u32, String>>>,
}

impl OzoneUpload {
    /// Starts an upload of `location` with `opts`' attributes and tags
    /// (given to the key at completion).
    ///
    /// # Errors
    /// `NotSupported` for an unsupported attribute; om failures.
    pub(crate) async fn start(
        store: &OzoneStore,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Self> {
        let upload_id = create(store, location, opts).await?;
        Ok(Self {
            store: store.clone(),
            location: location.clone(),
            upload_id,
            started: 0,
            finished: Arc::default(),
        })
    }

    /// The om's id of this upload (what S3's ListMultipartUploads shows).
    #[must_use]
    pub fn upload_id(&self) -> &str {
        &self.upload_id
    }
}

#[async_trait::async_trait]
impl MultipartUpload for OzoneUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        if self.started >= MAX_PARTS {
            return Box::pin(futures::future::ready(Err(generic(
                OzoneStoreError::TooManyParts,
            ))));
        }
        self.started += 1;
        let part = self.started;
        let client = self.store.client.clone();
        let upload_id = self.upload_id.clone();
        let location = self.location.clone();
        let finished = Arc::clone(&self.finished);
        Box::pin(async move {
            let etag = write_part(&client, &upload_id, part, &data)
                .await
                .map_err(|e| from_client(&location, e))?;
            finished
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(part, etag);
            Ok(())
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(missing) = (1..=self.started).find(|n| !finished.contains_key(n)) {
            return Err(generic(OzoneStoreError::PartMissing(missing)));
        }
        finish(
            &self.store,
            &self.location,
            &self.upload_id,
            finished.into_iter().collect(),
        )
        .await
    }

    async fn abort(&mut self) -> Result<()> {
        self.store
            .client
            .abort_multipart_upload(&self.upload_id)
            .await
            .map_err(|e| from_client(&self.location, e))
    }
}

/// Writes part `part` of `upload_id` from `data` and commits it under the
/// hex MD5 of its bytes (the ETag S3's ListParts reports). Returns the ETag.
async fn write_part(
    client: &Client,
    upload_id: &str,
    part: u32,
    data: &PutPayload,
) -> Result<String, ClientError> {
    let mut w = client.upload_part(upload_id, part).await?;
    let mut md5 = Md5::new();
    for chunk in data {
        md5.update(chunk);
        w.write(chunk).await?;
    }
    let etag = hex::encode(md5.finalize());
    w.close_part(&etag).await?;
    Ok(etag)
}

/// Completes `upload_id` from `parts` ((number, ETag), ascending). An upload
/// with no part becomes an empty object (object_store's contract; the om,
/// like S3, wants at least one part, so an empty part 1 is written).
async fn finish(
    store: &OzoneStore,
    location: &Path,
    upload_id: &str,
    mut parts: Vec<(u32, String)>,
) -> Result<PutResult> {
    if parts.is_empty() {
        let etag = write_part(&store.client, upload_id, 1, &PutPayload::default())
            .await
            .map_err(|e| from_client(location, e))?;
        parts.push((1, etag));
    }
    let info = store
        .client
        .complete_multipart_upload(upload_id, &parts, 0, BTreeMap::new())
        .await
        .map_err(|e| from_client(location, e))?;
    Ok(PutResult {
        e_tag: Some(etag_of(&info)),
        version: None,
        extensions: Default::default(),
    })
}

/// `create_multipart_opts`: a new upload of `path` in the store's bucket.
pub(crate) async fn create(
    store: &OzoneStore,
    path: &Path,
    opts: PutMultipartOptions,
) -> Result<MultipartId> {
    let PutMultipartOptions {
        tags,
        attributes,
        extensions: _,
    } = opts;
    let metadata = to_metadata(&attributes, &tags)?;
    store
        .client
        .initiate_multipart_upload(&store.bucket, key_of(path), None, metadata)
        .await
        .map_err(|e| from_client(path, e))
}

/// Checks that `id` is an upload of `path` in this store's bucket, so that a
/// stray id cannot write into another object. The om has no "describe
/// upload" call, so the first check of an id lists the upload (with its
/// parts) to learn its key; the id is then remembered (bounded), so later
/// parts of the same upload are not listed again.
async fn check_upload(store: &OzoneStore, path: &Path, id: &MultipartId) -> Result<()> {
    let known = store
        .checked_uploads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(id)
        .cloned();
    if let Some(key) = known {
        if key == key_of(path) {
            return Ok(());
        }
        return Err(generic(OzoneStoreError::UploadOfAnotherKey {
            upload_id: id.clone(),
            bucket: store.bucket.clone(),
            key,
        }));
    }
    let upload = store
        .client
        .multipart_upload(id)
        .await
        .map_err(|e| from_client(path, e))?;
    if upload.bucket != store.bucket || upload.key != key_of(path) {
        return Err(generic(OzoneStoreError::UploadOfAnotherKey {
            upload_id: id.clone(),
            bucket: upload.bucket,
            key: upload.key,
        }));
    }
    let mut checked = store
        .checked_uploads
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if checked.len() >= crate::CHECKED_UPLOADS {
        checked.clear();
    }
    checked.insert(id.clone(), upload.key);
    Ok(())
}

/// The part number of a 0-based part index.
fn part_number(part_idx: usize) -> Result<u32> {
    u32::try_from(part_idx)
        .ok()
        .and_then(|i| i.checked_add(1))
        .filter(|n| *n <= MAX_PARTS)
        .ok_or_else(|| generic(OzoneStoreError::TooManyParts))
}

/// `put_part`: part `part_idx + 1` of upload `id`.
pub(crate) async fn put_part(
    store: &OzoneStore,
    path: &Path,
    id: &MultipartId,
    part_idx: usize,
    data: PutPayload,
) -> Result<PartId> {
    let part = part_number(part_idx)?;
    check_upload(store, path, id).await?;
    let content_id = write_part(&store.client, id, part, &data)
        .await
        .map_err(|e| from_client(path, e))?;
    Ok(PartId { content_id })
}

/// `complete_multipart`: `parts[i]` is part `i + 1`.
pub(crate) async fn complete(
    store: &OzoneStore,
    path: &Path,
    id: &MultipartId,
    parts: Vec<PartId>,
) -> Result<PutResult> {
    check_upload(store, path, id).await?;
    let numbered = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| Ok((part_number(i)?, p.content_id)))
        .collect::<Result<Vec<_>>>()?;
    let done = finish(store, path, id, numbered).await;
    if done.is_ok() {
        forget(store, id);
    }
    done
}

/// `abort_multipart`.
pub(crate) async fn abort(store: &OzoneStore, path: &Path, id: &MultipartId) -> Result<()> {
    check_upload(store, path, id).await?;
    forget(store, id);
    store
        .client
        .abort_multipart_upload(id)
        .await
        .map_err(|e| from_client(path, e))
}

/// Drops `id` from the checked uploads (it ended).
fn forget(store: &OzoneStore, id: &MultipartId) {
    store
        .checked_uploads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
}
