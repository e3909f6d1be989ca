//! Block token checks on the datanode (security on): the om's secrets,
//! received in every heartbeat answer, and the check each data RPC makes
//! before touching the store (Ozone's `BlockTokenVerifier`).

use std::collections::HashMap;
use std::sync::RwLock;

use bytes::Bytes;
use proto_crate::block_token::{
    self, AccessModes, BLOCK_TOKEN_METADATA, BlockTokenIdentifier, BlockTokenSecret, TokenError,
};
use proto_crate::{BlockId, ResultCode};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// Most authenticated tokens remembered; the memory is cleared when full
/// (a stream sends the same token with every call, so a handful suffice).
pub const MAX_REMEMBERED_TOKENS: usize = 4096;

/// The secrets this datanode verifies tokens with, and the tokens whose
/// signature it has already checked with them.
#[derive(Debug, Default)]
pub struct BlockTokenVerifier {
    secrets: RwLock<Vec<BlockTokenSecret>>,
    /// Token, as its metadata value arrives (base64) → its identifier and
    /// expiry ([`block_token::authenticate`]'s answer). Cleared whenever the
    /// secrets change; each call still checks expiry, block and modes.
    authenticated: RwLock<HashMap<Bytes, (BlockTokenIdentifier, u64)>>,
}

impl BlockTokenVerifier {
    /// Replaces the secrets with the om's current list (every heartbeat).
    pub fn update(&self, secrets: Vec<BlockTokenSecret>) {
        let mut held = self
            .secrets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *held != secrets {
            *held = secrets;
            self.authenticated
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
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
    /// A token whose signature was checked before (same bytes, same secrets)
    /// is not decoded or hashed again; its expiry, block and modes are
    /// checked on every call.
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
        let now = block_token::now_unix_ms();
        let outcome = match md.get_bin(BLOCK_TOKEN_METADATA) {
            None => Err(TokenError::Missing),
            Some(v) => {
                let encoded = v.as_encoded_bytes();
                let known = self
                    .authenticated
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(encoded)
                    .cloned();
                match known {
                    Some((id, expiry)) => {
                        block_token::check_claims(&id, expiry, block, needed, rpc, now)
                    }
                    None => {
                        self.authenticate(encoded, v.to_bytes().ok())
                            .and_then(|(id, expiry)| {
                                block_token::check_claims(&id, expiry, block, needed, rpc, now)
                            })
                    }
                }
            }
        };
        outcome.map_err(|e| token_status(rpc, &e))
    }

    /// Checks a token's signature and remembers the answer under its
    /// `encoded` metadata value; `decoded` is `None` for invalid base64.
    fn authenticate(
        &self,
        encoded: &[u8],
        decoded: Option<Bytes>,
    ) -> Result<(BlockTokenIdentifier, u64), TokenError> {
        let token = decoded.ok_or(TokenError::Malformed)?;
        let secrets = self
            .secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = block_token::authenticate(&secrets, Some(&token))?;
        let mut known = self
            .authenticated
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() >= MAX_REMEMBERED_TOKENS {
            known.clear();
        }
        known.insert(Bytes::copy_from_slice(encoded), answer.clone());
        Ok(answer)
    }

    /// How many authenticated tokens are remembered.
    #[must_use]
    pub fn remembered_tokens(&self) -> usize {
        self.authenticated
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
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

#[cfg(test)]
mod tests {
    use super::*;
    use proto_crate::block_token::{BlockToken, TokenScope};

    fn block(local_id: u64) -> BlockId {
        BlockId {
            container_id: 1,
            local_id,
            replica_index: None,
        }
    }

    fn secret(key_id: u32, fill: u8) -> BlockTokenSecret {
        BlockTokenSecret {
            key_id,
            secret: [fill; block_token::SECRET_LEN],
            active_from_unix_ms: 0,
            expires_unix_ms: u64::MAX,
        }
    }

    fn token(s: &BlockTokenSecret, expiry_unix_ms: u64) -> BlockToken {
        s.sign(&BlockTokenIdentifier {
            scope: TokenScope::group_of(block(7)),
            modes: AccessModes::READ,
            expiry_unix_ms,
            key_id: s.key_id,
            owner: "client".into(),
        })
    }

    fn carrying(t: &BlockToken) -> MetadataMap {
        let mut req = tonic::Request::new(());
        block_token::attach(&mut req, Some(t));
        req.metadata().clone()
    }

    #[test]
    fn a_token_is_authenticated_once_and_its_claims_checked_every_call() {
        let v = BlockTokenVerifier::default();
        let s = secret(1, 3);
        v.update(vec![s.clone()]);
        let md = carrying(&token(&s, u64::MAX));
        v.check(&md, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("a good token");
        v.check(&md, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("again, remembered");
        assert_eq!(v.remembered_tokens(), 1);
        // Remembered, yet still bound to its block and modes.
        let e = v
            .check(&md, Some(block(8)), AccessModes::READ, "ReadChunk")
            .expect_err("another block");
        assert!(e.message().contains("refused"), "{e:?}");
        v.check(&md, Some(block(7)), AccessModes::WRITE, "WriteChunk")
            .expect_err("another mode");
        // And to its expiry.
        let expired = carrying(&token(&s, 1));
        v.check(&expired, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("expired");
        // A forged token (another key's signature under this key id) is never remembered.
        let forged = carrying(&token(&secret(1, 9), u64::MAX));
        v.check(&forged, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("forged");
        assert_eq!(v.remembered_tokens(), 2, "the good and the expired one");
        // New secrets forget what the old ones authenticated.
        v.update(vec![secret(2, 4)]);
        assert_eq!(v.remembered_tokens(), 0);
        v.check(&md, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("its key is gone");
        // The same secrets again change nothing.
        v.update(vec![secret(2, 4)]);
        let md2 = carrying(&token(&secret(2, 4), u64::MAX));
        v.check(&md2, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("signed by the new key");
        v.update(vec![secret(2, 4)]);
        assert_eq!(v.remembered_tokens(), 1);
    }
}
