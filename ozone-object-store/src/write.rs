//! Writes: `put_opts` (overwrite, create, update — the condition checked by
//! the om in the commit's transaction), `copy_opts` (streamed, bounded
//! memory), and deletion.

use ec_client::{ClientError, WriteCondition};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, PutMode, PutOptions, PutPayload, PutResult, RenameOptions,
    RenameTargetMode, Result,
};
use tokio::io::AsyncReadExt;

use crate::OzoneStore;
use crate::error::{from_client, from_conditional, generic};
use crate::meta::{copied, etag_of, generation_of, key_of, to_metadata};

/// Bytes a copy moves per read.
const COPY_PIECE: usize = 1 << 20;

/// Deletions a `delete_stream` keeps in flight (what object_store's own
/// stores without a bulk call use).
const DELETES_IN_FLIGHT: usize = 10;

/// `put_opts`: the payload written as a new key version, committed with the
/// mode's condition. The key is invisible until the commit; a refused
/// condition commits nothing (the written blocks are reclaimed).
pub(crate) async fn put(
    store: &OzoneStore,
    location: &Path,
    payload: PutPayload,
    opts: PutOptions,
) -> Result<PutResult> {
    let PutOptions {
        mode,
        tags,
        attributes,
        extensions: _,
    } = opts;
    let metadata = to_metadata(&attributes, &tags)?;
    let condition = match &mode {
        PutMode::Overwrite => None,
        PutMode::Create => Some(WriteCondition::NotExists),
        PutMode::Update(v) => Some(WriteCondition::Generation(
            generation_of(v.e_tag.as_deref()).map_err(generic)?,
        )),
    };
    let mut w = store
        .client
        .create_key(&store.bucket, key_of(location), None)
        .await
        .map_err(|e| from_client(location, e))?;
    for chunk in &payload {
        w.write(chunk).await.map_err(|e| from_client(location, e))?;
    }
    let committed = match condition {
        None => w.close_with(metadata).await,
        Some(c) => w.close_if(metadata, c).await,
    };
    let info =
        committed.map_err(|e| from_conditional(location, e, matches!(mode, PutMode::Create)))?;
    Ok(PutResult {
        e_tag: Some(etag_of(&info)),
        version: None,
        extensions: Default::default(),
    })
}

/// `copy_opts`: the source's bytes streamed into a new version of `to`
/// (same replication, its attributes, user metadata and tags), through a
/// bounded buffer. `CopyMode::Create` commits only if `to` does not exist
/// when the om commits.
pub(crate) async fn copy(
    store: &OzoneStore,
    from: &Path,
    to: &Path,
    options: CopyOptions,
) -> Result<()> {
    let create = match options.mode {
        CopyMode::Overwrite => false,
        CopyMode::Create => true,
    };
    let mut reader = store
        .client
        .open_key(&store.bucket, key_of(from))
        .await
        .map_err(|e| from_client(from, e))?;
    let info = reader.info().clone();
    let mut w = store
        .client
        .create_key(&store.bucket, key_of(to), Some(info.replication))
        .await
        .map_err(|e| from_client(to, e))?;
    let mut buf = vec![0u8; COPY_PIECE];
    loop {
        let n = reader
            .read(&mut buf)
            .await
            .map_err(|e| match ClientError::from_io(e) {
                Ok(client) => from_client(from, client),
                Err(io) => generic(io),
            })?;
        if n == 0 {
            break;
        }
        w.write(&buf[..n]).await.map_err(|e| from_client(to, e))?;
    }
    let metadata = copied(&info.metadata);
    let committed = if create {
        w.close_if(metadata, WriteCondition::NotExists).await
    } else {
        w.close_with(metadata).await
    };
    committed.map_err(|e| from_conditional(to, e, true))?;
    Ok(())
}

/// `rename_opts`: the om's rename, one transaction; `RenameTargetMode::Create`
/// renames only if nothing is at `to` when the om commits.
pub(crate) async fn rename(
    store: &OzoneStore,
    from: &Path,
    to: &Path,
    options: RenameOptions,
) -> Result<()> {
    let (bucket, source, target) = (&store.bucket, key_of(from), key_of(to));
    let renamed = match options.target_mode {
        RenameTargetMode::Overwrite => store.client.rename_key(bucket, source, target).await,
        RenameTargetMode::Create => {
            store
                .client
                .rename_key_if(bucket, source, target, WriteCondition::NotExists)
                .await
        }
    };
    renamed.map_err(|e| {
        if e.is_condition_failed() {
            from_conditional(to, e, true)
        } else {
            from_client(from, e)
        }
    })?;
    Ok(())
}

/// `delete_stream`: each path deleted, [`DELETES_IN_FLIGHT`] at a time,
/// answers in input order. Deleting a missing key succeeds, as on S3 and
/// object_store's in-memory store (the contract allows either).
pub(crate) fn delete_stream(
    store: OzoneStore,
    locations: BoxStream<'static, Result<Path>>,
) -> BoxStream<'static, Result<Path>> {
    locations
        .map(move |location| {
            let store = store.clone();
            async move {
                let location = location?;
                match store
                    .client
                    .delete_key(&store.bucket, key_of(&location))
                    .await
                {
                    Ok(()) => Ok(location),
                    Err(e) => match from_client(&location, e) {
                        object_store::Error::NotFound { .. } => Ok(location),
                        other => Err(other),
                    },
                }
            }
        })
        .buffered(DELETES_IN_FLIGHT)
        .boxed()
}
