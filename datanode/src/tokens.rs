//! Block token checks on the datanode (security on): the oms' secrets,
//! received in every heartbeat answer, and the check each data RPC makes
//! before touching the store (Ozone's `BlockTokenVerifier`).
//!
//! A datanode configured with several oms keeps each om's last list apart
//! and accepts a token that any of them authenticates. Oms of one cluster
//! share their keys through the metadata store, but each re-reads them on
//! its own timer, so for a moment one om may sign with a key another has
//! not sent yet (or has already dropped); and two oms that do not share a
//! store number their keys alike, so one merged list would let one om's
//! key 1 hide the other's.

use std::collections::{BTreeMap, HashMap};
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
    /// Each om's last list, by the om's place in the datanode's om list
    /// (only oms that have answered).
    secrets: RwLock<BTreeMap<usize, Vec<BlockTokenSecret>>>,
    /// Token, as its metadata value arrives (base64) → its identifier and
    /// expiry ([`block_token::authenticate`]'s answer). Cleared whenever the
    /// secrets change; each call still checks expiry, block and modes.
    authenticated: RwLock<HashMap<Bytes, (BlockTokenIdentifier, u64)>>,
}

impl BlockTokenVerifier {
    /// Replaces what om `om` (its place in the datanode's om list, from 0)
    /// sent before with its current list (every registration and heartbeat
    /// answer). The other oms' lists stay.
    pub fn update(&self, om: usize, secrets: Vec<BlockTokenSecret>) {
        let mut held = self
            .secrets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.get(&om) != Some(&secrets) {
            held.insert(om, secrets);
            self.authenticated
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
    }

    /// How many secrets are held, summed over the oms' lists (0 until the
    /// first answer).
    #[must_use]
    pub fn secrets_held(&self) -> usize {
        self.secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(Vec::len)
            .sum()
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
        // Held until the answer is remembered, so that an update (which
        // clears what is remembered) cannot fall in between.
        let secrets = self
            .secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = authenticate_with_any(secrets.values(), &token)?;
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

/// The first of `lists` that authenticates `token`; when none does, the
/// refusal that says most: a bad signature under a key some om sent (final:
/// the oms of one cluster share their keys, so no other om's key of that id
/// differs), before a key not received yet from any om (transient: it
/// arrives with a heartbeat), before a key every om has dropped, before no
/// secrets at all.
fn authenticate_with_any<'a>(
    lists: impl Iterator<Item = &'a Vec<BlockTokenSecret>>,
    token: &[u8],
) -> Result<(BlockTokenIdentifier, u64), TokenError> {
    let rank = |e: &TokenError| match e {
        TokenError::BadSignature => 0,
        TokenError::KeyNotYetKnown(_) => 1,
        TokenError::UnknownKey(_) => 2,
        _ => 3,
    };
    let mut refusal = TokenError::NoSecrets;
    for list in lists {
        match block_token::authenticate(list, Some(token)) {
            Ok(answer) => return Ok(answer),
            // The same bytes under every list.
            Err(TokenError::Malformed) => return Err(TokenError::Malformed),
            Err(e) if rank(&e) < rank(&refusal) => refusal = e,
            Err(_) => {}
        }
    }
    Err(refusal)
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
        v.update(0, vec![s.clone()]);
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
        v.update(0, vec![secret(2, 4)]);
        assert_eq!(v.remembered_tokens(), 0);
        v.check(&md, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("its key is gone");
        // The same secrets again change nothing.
        v.update(0, vec![secret(2, 4)]);
        let md2 = carrying(&token(&secret(2, 4), u64::MAX));
        v.check(&md2, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("signed by the new key");
        v.update(0, vec![secret(2, 4)]);
        assert_eq!(v.remembered_tokens(), 1);
    }

    #[test]
    fn each_oms_list_is_kept_apart_and_any_of_them_authenticates() {
        let v = BlockTokenVerifier::default();
        // Two oms that number their keys alike (separate stores): key 1 twice.
        let (a1, b1) = (secret(1, 1), secret(1, 2));
        v.update(0, vec![a1.clone()]);
        v.update(1, vec![b1.clone()]);
        assert_eq!(v.secrets_held(), 2);
        for s in [&a1, &b1] {
            let md = carrying(&token(s, u64::MAX));
            v.check(&md, Some(block(7)), AccessModes::READ, "ReadChunk")
                .expect("either om's key 1");
        }
        // One om's answer replaces its own list only.
        let a2 = secret(2, 5);
        v.update(0, vec![a1.clone(), a2.clone()]);
        let md_b1 = carrying(&token(&b1, u64::MAX));
        v.check(&md_b1, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("om 1's list stayed");
        // A key one om sent and the other has not yet (a rotation seen first by one).
        let md_a2 = carrying(&token(&a2, u64::MAX));
        v.check(&md_a2, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect("om 0's new key");
        // A key no om has sent yet is transient.
        let ahead = carrying(&token(&secret(3, 6), u64::MAX));
        let e = v
            .check(&ahead, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("key 3 unknown");
        assert_eq!(
            proto_crate::result_code(&e),
            ResultCode::Unavailable,
            "{e:?}"
        );
        // A forgery under a key both hold is refused for good.
        let forged = carrying(&token(&secret(1, 9), u64::MAX));
        let e = v
            .check(&forged, Some(block(7)), AccessModes::READ, "ReadChunk")
            .expect_err("forged");
        assert_eq!(
            proto_crate::result_code(&e),
            ResultCode::BlockTokenVerificationFailed,
            "{e:?}"
        );
        assert!(e.message().contains("signature"), "{e:?}");
    }
}
