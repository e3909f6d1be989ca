//! Listing: recursive (`list`, `list_with_offset`, paged from the om in name
//! order) and one level at `/` (`list_with_delimiter`, through
//! [`ec_client::Client::list_page`], which steps over each common prefix in
//! one fetch).

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ListResult, ObjectMeta, Result};

use crate::OzoneStore;
use crate::error::generic;
use crate::meta::{dir_prefix, object_meta, path_of};

/// Keys fetched from the om per `ListKeys` call.
const BATCH: u32 = 1000;

/// Every object under `prefix` (segment-wise), after `offset` if given, in
/// name order, fetched [`BATCH`] keys at a time as the caller consumes them.
pub(crate) fn list(
    store: OzoneStore,
    prefix: Option<&Path>,
    offset: Option<&Path>,
) -> BoxStream<'static, Result<ObjectMeta>> {
    let key_prefix = dir_prefix(prefix);
    let start = offset.map(|o| o.as_ref().to_string()).unwrap_or_default();
    futures::stream::try_unfold(Some(start), move |cursor| {
        let store = store.clone();
        let key_prefix = key_prefix.clone();
        async move {
            let Some(cursor) = cursor else {
                return Ok::<_, object_store::Error>(None);
            };
            let keys = store
                .client
                .list_keys(&store.bucket, &key_prefix, &cursor, BATCH)
                .await
                .map_err(generic)?;
            let next = (keys.len() >= BATCH as usize)
                .then(|| keys.last().map(|k| k.name.clone()))
                .flatten();
            let metas: Vec<Result<ObjectMeta>> = keys
                .iter()
                .map(|k| Ok(object_meta(path_of(&k.name)?, k)))
                .collect();
            Ok(Some((futures::stream::iter(metas), next)))
        }
    })
    .try_flatten()
    .boxed()
}

/// The objects directly under `prefix` and the next level's common
/// prefixes (without their trailing `/`).
pub(crate) async fn list_with_delimiter(
    store: &OzoneStore,
    prefix: Option<&Path>,
) -> Result<ListResult> {
    let key_prefix = dir_prefix(prefix);
    let page = store
        .client
        .list_page(&store.bucket, &key_prefix, Some("/"), "", usize::MAX)
        .await
        .map_err(generic)?;
    let common_prefixes = page
        .prefixes
        .iter()
        .map(|p| path_of(p.strip_suffix('/').unwrap_or(p)))
        .collect::<Result<Vec<_>>>()?;
    let objects = page
        .objects
        .iter()
        .map(|k| Ok(object_meta(path_of(&k.name)?, k)))
        .collect::<Result<Vec<_>>>()?;
    Ok(ListResult {
        common_prefixes,
        objects,
        extensions: Default::default(),
    })
}
