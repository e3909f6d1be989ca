//! The block token sources of a client's streams: one per block group a
//! reader or writer opens, renewed through the om's `GetBlockToken` when a
//! datanode refuses the token (see `block_stream::BlockTokenSource`).

use std::sync::Arc;

use block_stream::{BlockTokenSource, TokenRefresher};
use proto_crate::BlockGroup;
use proto_crate::wire::om::KeyRef;
use proto_crate::wire::om::get_block_token_request::Owner;

use crate::om_client::OmClient;

fn source(om: &OmClient, owner: Owner, group: &BlockGroup) -> Option<Arc<BlockTokenSource>> {
    let token = group.token.clone()?;
    let om = om.clone();
    let (container_id, local_id) = (group.container_id, group.local_id);
    let refresher: TokenRefresher = Arc::new(move || {
        let om = om.clone();
        let owner = owner.clone();
        Box::pin(async move {
            om.get_block_token(owner, container_id, local_id)
                .await
                .map_err(|e| e.to_string())
        })
    });
    Some(BlockTokenSource::refreshable(token, refresher))
}

/// The token source of a reader of `group` in committed key `bucket/key`
/// (`None` with security off: the group came without a token).
pub(crate) fn for_reader(
    om: &OmClient,
    (bucket, key): (&str, &str),
    group: &BlockGroup,
) -> Option<Arc<BlockTokenSource>> {
    let owner = Owner::Key(KeyRef {
        bucket: bucket.to_string(),
        key: key.to_string(),
    });
    source(om, owner, group)
}

/// The token source of a writer of `group`, allocated to session `session_id`.
pub(crate) fn for_writer(
    om: &OmClient,
    session_id: u64,
    group: &BlockGroup,
) -> Option<Arc<BlockTokenSource>> {
    source(om, Owner::SessionId(session_id), group)
}
