//! Block token checks on the datanode (security on): the om's secrets,
//! received in every heartbeat answer, and the check each data RPC makes
//! before touching the store (Ozone's `BlockTokenVerifier`).

use std::sync::RwLock;

use proto_crate::block_token::{self, AccessModes, BlockTokenSecret, TokenError};
use proto_crate::{BlockId, ResultCode};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The secrets this datanode verifies tokens with.
#[derive(Debug, Default)]
pub struct BlockTokenVerifier {
    secrets: RwLock<Vec<BlockTokenSecret>>,
}

impl BlockTokenVerifier {
    /// Replaces the secrets with the om's current list (every heartbeat).
    pub fn update(&self, secrets: Vec<BlockTokenSecret>) {
        *self
            .secrets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = secrets;
    }

    /// How many secrets are held (0 until the first heartbeat answer).
    #[must_use]
    pub fn secrets_held(&self) -> usize {
        self.secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Checks the token `md` carries for `rpc` needing `needed` on `block`
    /// (`None`: a call over no single block, which needs an all-blocks token).
    ///
    /// # Errors
    /// `BLOCK_TOKEN_VERIFICATION_FAILED` saying why, or `UNAVAILABLE` while
    /// this datanode lacks the om's key the token names (it arrives with a
    /// heartbeat).
    pub fn check(
        &self,
        md: &MetadataMap,
        block: Option<BlockId>,
        needed: AccessModes,
        rpc: &'static str,
    ) -> Result<(), Status> {
        let outcome = block_token::carried(md).and_then(|token| {
            let secrets = self
                .secrets
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            block_token::verify(
                &secrets,
                token.as_deref(),
                block,
                needed,
                rpc,
                block_token::now_unix_ms(),
            )
        });
        match outcome {
            Ok(_) => Ok(()),
            Err(e) => Err(token_status(rpc, &e)),
        }
    }
}

fn token_status(rpc: &str, e: &TokenError) -> Status {
    let code = if e.is_transient() {
        ResultCode::Unavailable
    } else {
        ResultCode::BlockTokenVerificationFailed
    };
    tracing::debug!(rpc, error = %e, "block token refused");
    proto_crate::status(code, format!("{rpc} refused: {e}"))
}
