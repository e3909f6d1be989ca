//! The block token a stream sends with each data RPC, and how it is renewed.
//!
//! The om hands out one token per block group (`BlockGroup::token`); every
//! stream over the group shares one [`BlockTokenSource`]. When a datanode
//! refuses it (`BLOCK_TOKEN_VERIFICATION_FAILED`: expired mid-stream, most
//! often) the client that made the call asks the source's refresher (the
//! om's `GetBlockToken`) for a new one once and repeats the call with it;
//! concurrent refusals of the same token share one refresh. Like Ozone's
//! client, a token failure is never taken for a bad location.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use proto_crate::block_token::BlockToken;

/// What a refresher's future gives: a new token, `None` (the om runs without
/// security now), or why none could be had.
pub type RefreshResult = std::result::Result<Option<BlockToken>, String>;

/// Asks the om for a fresh token of one group.
pub type TokenRefresher =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = RefreshResult> + Send>> + Send + Sync>;

/// What [`BlockTokenSource::renew`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// A new token was fetched from the om by this call.
    Fetched,
    /// A concurrent call had already replaced the refused token.
    ByAnother,
    /// No new token to be had (no refresher, or the om gave none).
    None,
}

/// The current token of one block group, shared by the streams over it.
pub struct BlockTokenSource {
    current: RwLock<BlockToken>,
    refresher: Option<TokenRefresher>,
    /// Held while a refresh runs: concurrent refusals wait for it.
    refreshing: tokio::sync::Mutex<()>,
}

impl fmt::Debug for BlockTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockTokenSource")
            .field("current", &self.current())
            .field("refreshable", &self.refresher.is_some())
            .finish()
    }
}

impl BlockTokenSource {
    /// A token that is never renewed (the om's own service tokens, tools).
    #[must_use]
    pub fn fixed(token: BlockToken) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(token),
            refresher: None,
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// `token`, renewed through `refresher` when a datanode refuses it.
    #[must_use]
    pub fn refreshable(token: BlockToken, refresher: TokenRefresher) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(token),
            refresher: Some(refresher),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// The token to send now.
    #[must_use]
    pub fn current(&self) -> BlockToken {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether a refused token can be renewed.
    #[must_use]
    pub fn can_refresh(&self) -> bool {
        self.refresher.is_some()
    }

    /// After `refused` was refused: makes sure a newer token is current.
    ///
    /// # Errors
    /// The refresher's failure, as text.
    pub(crate) async fn renew(&self, refused: &BlockToken) -> std::result::Result<Renewal, String> {
        let _one = self.refreshing.lock().await;
        if self.current() != *refused {
            return Ok(Renewal::ByAnother);
        }
        let Some(refresh) = &self.refresher else {
            return Ok(Renewal::None);
        };
        match refresh().await? {
            Some(t) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = t;
                Ok(Renewal::Fetched)
            }
            None => Ok(Renewal::None),
        }
    }
}
