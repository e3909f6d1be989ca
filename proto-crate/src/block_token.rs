//! Block tokens: the capability the om hands out with every block location
//! and every datanode checks on every data RPC (Ozone's
//! `OzoneBlockTokenIdentifier` and HDFS's `BlockTokenIdentifier`).
//!
//! A token is an encoded [`BlockTokenIdentifier`] (which block group, which
//! replica index or any, which [`AccessModes`], until when, signed by which
//! key) and its HMAC-SHA256 under one of the om's [`BlockTokenSecret`]s. The
//! om keeps the secrets and shares them with datanodes in registration and
//! heartbeat answers; a client never sees one. Clients treat the token as
//! opaque bytes ([`BlockToken`]) and send it as the binary metadata entry
//! [`BLOCK_TOKEN_METADATA`] of each data RPC.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use prost::Message;

use crate::BlockId;
use crate::wire::datanode as pb;
use crate::wire::om as om_pb;
use ec_codec::ReplicaIndex;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The binary gRPC metadata entry a data RPC carries its token in.
pub const BLOCK_TOKEN_METADATA: &str = "ozone-block-token-bin";

/// Length of a [`BlockTokenSecret`]'s key material, bytes.
pub const SECRET_LEN: usize = 32;

/// Milliseconds since the Unix epoch, now (0 if the clock is before it).
#[must_use]
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A set of access modes (the identifier's `modes` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessModes(u32);

impl AccessModes {
    /// GetBlock, ReadChunk, GetCommittedBlockLength, ListBlock.
    pub const READ: Self = Self(1);
    /// WriteChunk, PutBlock, CreateContainer.
    pub const WRITE: Self = Self(2);
    /// DeleteBlocks (the om's deletion service only).
    pub const DELETE: Self = Self(4);
    /// What a writer's session gets for the groups it allocated.
    pub const READ_WRITE: Self = Self(1 | 2);
    /// What the om's own service tokens carry.
    pub const ALL: Self = Self(1 | 2 | 4);

    /// Whether every mode of `other` is in `self`.
    #[must_use]
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bit set, as on the wire.
    #[must_use]
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl fmt::Display for AccessModes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (Self::READ, "READ"),
            (Self::WRITE, "WRITE"),
            (Self::DELETE, "DELETE"),
        ]
        .into_iter()
        .filter(|(m, _)| self.contains(*m))
        .map(|(_, n)| n)
        .collect();
        if names.is_empty() {
            f.write_str("no access")
        } else {
            f.write_str(&names.join("+"))
        }
    }
}

/// What a token grants access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenScope {
    /// One block group: every internal block of it (`replica_index: None`), or one.
    Group {
        /// Container of the group.
        container_id: u64,
        /// Local id of the group.
        local_id: u64,
        /// One replica index only, or any.
        replica_index: Option<u32>,
    },
    /// Any block of any container: the om's own service token (deletion,
    /// repair copies, listing). Never issued to clients.
    AllBlocks,
}

impl TokenScope {
    /// Every internal block of the group `block` belongs to.
    #[must_use]
    pub fn group_of(block: BlockId) -> Self {
        Self::Group {
            container_id: block.container_id,
            local_id: block.local_id,
            replica_index: None,
        }
    }

    fn covers_block(self, block: BlockId) -> bool {
        match self {
            Self::AllBlocks => true,
            Self::Group {
                container_id,
                local_id,
                replica_index,
            } => {
                container_id == block.container_id
                    && local_id == block.local_id
                    && replica_index
                        .is_none_or(|r| r == block.replica_index.map_or(0, ReplicaIndex::get))
            }
        }
    }
}

/// The signed content of a block token (Ozone's `OzoneBlockTokenIdentifier`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTokenIdentifier {
    /// The blocks it is for.
    pub scope: TokenScope,
    /// What it allows on them.
    pub modes: AccessModes,
    /// Milliseconds since the Unix epoch after which it is refused.
    pub expiry_unix_ms: u64,
    /// The [`BlockTokenSecret::key_id`] that signed it.
    pub key_id: u32,
    /// Whom it was issued to (a client id), for logs.
    pub owner: String,
}

impl BlockTokenIdentifier {
    fn to_wire(&self) -> pb::BlockTokenIdentifier {
        let (container_id, local_id, replica_index, all_blocks) = match self.scope {
            TokenScope::Group {
                container_id,
                local_id,
                replica_index,
            } => (container_id, local_id, replica_index.unwrap_or(0), false),
            TokenScope::AllBlocks => (0, 0, 0, true),
        };
        pb::BlockTokenIdentifier {
            container_id,
            local_id,
            replica_index,
            all_blocks,
            modes: self.modes.0,
            expiry_unix_ms: self.expiry_unix_ms,
            key_id: self.key_id,
            owner: self.owner.clone(),
        }
    }

    fn from_wire(w: pb::BlockTokenIdentifier) -> Self {
        let scope = if w.all_blocks {
            TokenScope::AllBlocks
        } else {
            TokenScope::Group {
                container_id: w.container_id,
                local_id: w.local_id,
                replica_index: (w.replica_index != 0).then_some(w.replica_index),
            }
        };
        Self {
            scope,
            modes: AccessModes(w.modes),
            expiry_unix_ms: w.expiry_unix_ms,
            key_id: w.key_id,
            owner: w.owner,
        }
    }
}

/// An encoded, signed block token as the om hands it out and a client sends
/// it back (Ozone's `encodedToken`): opaque bytes to the client.
///
/// It keeps its metadata value encoded once (binary metadata travels as
/// base64), so that a stream sending it with every call does not encode it
/// every time.
#[derive(Clone)]
pub struct BlockToken {
    bytes: Bytes,
    header: tonic::metadata::BinaryMetadataValue,
}

impl PartialEq for BlockToken {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for BlockToken {}

impl fmt::Debug for BlockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The bytes are a credential: never printed.
        match self.identifier() {
            Ok(id) => write!(
                f,
                "BlockToken({} on {:?} until {} ms, key {})",
                id.modes, id.scope, id.expiry_unix_ms, id.key_id
            ),
            Err(_) => f.write_str("BlockToken(<undecodable>)"),
        }
    }
}

impl BlockToken {
    /// The token in `bytes` as the om sent it (not checked here).
    #[must_use]
    pub fn from_bytes(bytes: Bytes) -> Self {
        Self {
            header: tonic::metadata::MetadataValue::from_bytes(&bytes),
            bytes,
        }
    }

    /// The encoded token, as sent in [`BLOCK_TOKEN_METADATA`].
    #[must_use]
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The identifier inside, unverified (a client reads its expiry).
    ///
    /// # Errors
    /// [`TokenError::Malformed`] when the bytes are not a token.
    pub fn identifier(&self) -> Result<BlockTokenIdentifier, TokenError> {
        let t = pb::BlockToken::decode(self.bytes.as_ref()).map_err(|_| TokenError::Malformed)?;
        let id = pb::BlockTokenIdentifier::decode(t.identifier.as_ref())
            .map_err(|_| TokenError::Malformed)?;
        Ok(BlockTokenIdentifier::from_wire(id))
    }

    /// Whether the token's expiry is within `margin_ms` of `now_ms` (or
    /// past, or the token cannot be read): time to ask the om for a new one.
    #[must_use]
    pub fn expires_within(&self, now_ms: u64, margin_ms: u64) -> bool {
        self.identifier().map_or(true, |id| {
            id.expiry_unix_ms <= now_ms.saturating_add(margin_ms)
        })
    }
}

/// Puts `token` (if any) into `req`'s metadata as [`BLOCK_TOKEN_METADATA`].
pub fn attach<T>(req: &mut tonic::Request<T>, token: Option<&BlockToken>) {
    if let Some(t) = token {
        req.metadata_mut()
            .insert_bin(BLOCK_TOKEN_METADATA, t.header.clone());
    }
}

/// `msg` as a request carrying `token` (if any).
pub fn request<T>(msg: T, token: Option<&BlockToken>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    attach(&mut req, token);
    req
}

/// The encoded token a call carries in [`BLOCK_TOKEN_METADATA`], if any.
///
/// # Errors
/// [`TokenError::Malformed`] when the entry is not valid base64.
pub fn carried(md: &tonic::metadata::MetadataMap) -> Result<Option<Bytes>, TokenError> {
    md.get_bin(BLOCK_TOKEN_METADATA)
        .map(|v| v.to_bytes().map_err(|_| TokenError::Malformed))
        .transpose()
}

/// One of the om's signing secrets (Ozone's block token secret key).
#[derive(Clone, PartialEq, Eq)]
pub struct BlockTokenSecret {
    /// Named by the tokens it signs.
    pub key_id: u32,
    /// [`SECRET_LEN`] bytes of key material.
    pub secret: [u8; SECRET_LEN],
    /// Milliseconds since the Unix epoch from which the om signs with it.
    pub active_from_unix_ms: u64,
    /// Milliseconds since the Unix epoch after which no token it signed is valid.
    pub expires_unix_ms: u64,
}

impl fmt::Debug for BlockTokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockTokenSecret")
            .field("key_id", &self.key_id)
            .field("active_from_unix_ms", &self.active_from_unix_ms)
            .field("expires_unix_ms", &self.expires_unix_ms)
            .finish_non_exhaustive()
    }
}

impl BlockTokenSecret {
    /// Signs `id` (whose `key_id` should be this secret's).
    #[must_use]
    pub fn sign(&self, id: &BlockTokenIdentifier) -> BlockToken {
        let identifier = id.to_wire().encode_to_vec();
        let signature = self.mac(&identifier).finalize().into_bytes().to_vec();
        BlockToken::from_bytes(Bytes::from(
            pb::BlockToken {
                identifier: identifier.into(),
                signature: signature.into(),
            }
            .encode_to_vec(),
        ))
    }

    fn mac(&self, identifier: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length: a 32-byte key never fails.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(identifier);
        mac
    }
}

impl From<&BlockTokenSecret> for om_pb::BlockTokenSecret {
    fn from(s: &BlockTokenSecret) -> Self {
        Self {
            key_id: s.key_id,
            secret: Bytes::copy_from_slice(&s.secret),
            active_from_unix_ms: s.active_from_unix_ms,
            expires_unix_ms: s.expires_unix_ms,
        }
    }
}

impl TryFrom<om_pb::BlockTokenSecret> for BlockTokenSecret {
    type Error = crate::ProtocolError;
    fn try_from(s: om_pb::BlockTokenSecret) -> Result<Self, crate::ProtocolError> {
        let secret = <[u8; SECRET_LEN]>::try_from(s.secret.as_ref()).map_err(|_| {
            crate::ProtocolError::InvalidField {
                field: "block_token_secrets.secret",
                reason: format!("{} bytes, expected {SECRET_LEN}", s.secret.len()),
            }
        })?;
        Ok(Self {
            key_id: s.key_id,
            secret,
            active_from_unix_ms: s.active_from_unix_ms,
            expires_unix_ms: s.expires_unix_ms,
        })
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The call carried no token.
    #[error("the call carries no block token (security is on)")]
    Missing,
    /// The bytes are not a token.
    #[error("the block token cannot be decoded")]
    Malformed,
    /// The signature does not match the identifier under the named key.
    #[error("the block token's signature does not verify (forged or altered)")]
    BadSignature,
    /// The token names a key the verifier does not hold and will not
    /// (older than every key it holds: long expired).
    #[error("the block token was signed by key {0}, which has expired")]
    UnknownKey(u32),
    /// The token names a key newer than every key the verifier holds: the om
    /// has not told this datanode about it yet. Transient.
    #[error("the block token was signed by key {0}, which this datanode has not received yet")]
    KeyNotYetKnown(u32),
    /// The verifier holds no key at all: the datanode has not yet registered
    /// with the om. Transient.
    #[error("this datanode has no block token secrets yet (not registered with the om)")]
    NoSecrets,
    /// Past its expiry.
    #[error("the block token expired at {expiry_unix_ms} ms (now {now_unix_ms} ms)")]
    Expired {
        /// The token's expiry, ms since the epoch.
        expiry_unix_ms: u64,
        /// The verifier's clock, ms since the epoch.
        now_unix_ms: u64,
    },
    /// Valid, but for other blocks.
    #[error("the block token is for {scope}, not block {block}")]
    WrongBlock {
        /// What the token covers, described.
        scope: String,
        /// The block the call named.
        block: BlockId,
    },
    /// Valid for the block, but without the mode the call needs.
    #[error("the block token allows {granted}, but {rpc} needs {needed}")]
    WrongMode {
        /// The token's modes.
        granted: AccessModes,
        /// The modes the call needs.
        needed: AccessModes,
        /// The call.
        rpc: &'static str,
    },
}

impl TokenError {
    /// Whether trying again later (after the next heartbeat) may succeed:
    /// the datanode lacks a key it will soon receive.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::KeyNotYetKnown(_) | Self::NoSecrets)
    }
}

fn describe(scope: TokenScope) -> String {
    match scope {
        TokenScope::AllBlocks => "all blocks".into(),
        TokenScope::Group {
            container_id,
            local_id,
            replica_index: None,
        } => format!("block group {container_id}:{local_id}"),
        TokenScope::Group {
            container_id,
            local_id,
            replica_index: Some(r),
        } => format!("block {container_id}:{local_id} index {r}"),
    }
}

/// Checks `token` against `secrets` (the om's current keys, as a datanode
/// holds them) for a call `rpc` needing `needed` on `block` (`None`: a call
/// that names no single block, which only an all-blocks token may make), at
/// time `now_ms` (ms since the Unix epoch).
///
/// # Errors
/// The [`TokenError`] that says why it is refused.
pub fn verify(
    secrets: &[BlockTokenSecret],
    token: Option<&[u8]>,
    block: Option<BlockId>,
    needed: AccessModes,
    rpc: &'static str,
    now_ms: u64,
) -> Result<BlockTokenIdentifier, TokenError> {
    let (id, expiry) = authenticate(secrets, token)?;
    check_claims(&id, expiry, block, needed, rpc, now_ms)?;
    Ok(id)
}

/// The first half of [`verify`]: decodes `token` and checks its signature
/// with the secret it names. Returns the identifier and the expiry that
/// holds for it (ms since the Unix epoch: its own, or its secret's if
/// sooner). What it returns depends only on the token's bytes and the
/// secrets, so a verifier may remember it for the same bytes while its
/// secrets are unchanged.
///
/// # Errors
/// [`TokenError::Missing`], `Malformed`, `NoSecrets`, `KeyNotYetKnown`,
/// `UnknownKey`, `BadSignature`.
pub fn authenticate(
    secrets: &[BlockTokenSecret],
    token: Option<&[u8]>,
) -> Result<(BlockTokenIdentifier, u64), TokenError> {
    let token = token.ok_or(TokenError::Missing)?;
    let t = pb::BlockToken::decode(token).map_err(|_| TokenError::Malformed)?;
    let raw = pb::BlockTokenIdentifier::decode(t.identifier.as_ref())
        .map_err(|_| TokenError::Malformed)?;
    let key_id = raw.key_id;
    let secret = match secrets.iter().find(|s| s.key_id == key_id) {
        Some(s) => s,
        None => {
            return Err(match secrets.iter().map(|s| s.key_id).max() {
                None => TokenError::NoSecrets,
                Some(newest) if key_id > newest => TokenError::KeyNotYetKnown(key_id),
                Some(_) => TokenError::UnknownKey(key_id),
            });
        }
    };
    secret
        .mac(&t.identifier)
        .verify_slice(&t.signature)
        .map_err(|_| TokenError::BadSignature)?;
    let id = BlockTokenIdentifier::from_wire(raw);
    let expiry = id.expiry_unix_ms.min(secret.expires_unix_ms);
    Ok((id, expiry))
}

/// The second half of [`verify`]: whether an authenticated identifier
/// (`id`, valid until `expiry`, ms since the Unix epoch) allows call `rpc`
/// needing `needed` on `block` at `now_ms`.
///
/// # Errors
/// [`TokenError::Expired`], `WrongBlock`, `WrongMode`.
pub fn check_claims(
    id: &BlockTokenIdentifier,
    expiry: u64,
    block: Option<BlockId>,
    needed: AccessModes,
    rpc: &'static str,
    now_ms: u64,
) -> Result<(), TokenError> {
    if now_ms > expiry {
        return Err(TokenError::Expired {
            expiry_unix_ms: expiry,
            now_unix_ms: now_ms,
        });
    }
    let covered = match block {
        Some(b) => id.scope.covers_block(b),
        None => id.scope == TokenScope::AllBlocks,
    };
    if !covered {
        return Err(TokenError::WrongBlock {
            scope: describe(id.scope),
            block: block.unwrap_or(BlockId {
                container_id: 0,
                local_id: 0,
                replica_index: None,
            }),
        });
    }
    if !id.modes.contains(needed) {
        return Err(TokenError::WrongMode {
            granted: id.modes,
            needed,
            rpc,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(key_id: u32, fill: u8) -> BlockTokenSecret {
        BlockTokenSecret {
            key_id,
            secret: [fill; SECRET_LEN],
            active_from_unix_ms: 0,
            expires_unix_ms: 10_000,
        }
    }

    fn block(local_id: u64, index: Option<u32>) -> BlockId {
        BlockId {
            container_id: 3,
            local_id,
            replica_index: index.and_then(ReplicaIndex::new),
        }
    }

    fn id(key_id: u32, modes: AccessModes) -> BlockTokenIdentifier {
        BlockTokenIdentifier {
            scope: TokenScope::group_of(block(7, None)),
            modes,
            expiry_unix_ms: 5_000,
            key_id,
            owner: "client-a".into(),
        }
    }

    fn check(
        secrets: &[BlockTokenSecret],
        token: &BlockToken,
        b: BlockId,
        needed: AccessModes,
        now: u64,
    ) -> Result<BlockTokenIdentifier, TokenError> {
        verify(
            secrets,
            Some(token.as_bytes()),
            Some(b),
            needed,
            "ReadChunk",
            now,
        )
    }

    #[test]
    fn a_signed_token_verifies_for_every_index_of_its_group() {
        let s = [secret(1, 9)];
        let t = s[0].sign(&id(1, AccessModes::READ_WRITE));
        for index in [None, Some(1), Some(5)] {
            let got = check(&s, &t, block(7, index), AccessModes::WRITE, 4_999).expect("valid");
            assert_eq!(got, id(1, AccessModes::READ_WRITE));
        }
        assert_eq!(
            t.identifier().expect("decodes"),
            id(1, AccessModes::READ_WRITE)
        );
    }

    #[test]
    fn forged_expired_wrong_block_and_wrong_mode_tokens_are_refused() {
        let s = [secret(1, 9), secret(2, 8)];
        let read = s[0].sign(&id(1, AccessModes::READ));
        // Signed with another secret under the same key id: a forgery.
        let forged = secret(1, 0x55).sign(&id(1, AccessModes::ALL));
        assert_eq!(
            check(&s, &forged, block(7, Some(1)), AccessModes::READ, 1),
            Err(TokenError::BadSignature)
        );
        // An altered identifier keeps the old signature.
        let mut t = pb::BlockToken::decode(read.as_bytes().as_ref()).expect("decodes");
        t.identifier = id(1, AccessModes::ALL).to_wire().encode_to_vec().into();
        let altered = BlockToken::from_bytes(t.encode_to_vec().into());
        assert_eq!(
            check(&s, &altered, block(7, Some(1)), AccessModes::WRITE, 1),
            Err(TokenError::BadSignature)
        );
        assert!(matches!(
            check(&s, &read, block(7, Some(1)), AccessModes::READ, 5_001),
            Err(TokenError::Expired {
                expiry_unix_ms: 5_000,
                ..
            })
        ));
        assert!(matches!(
            check(&s, &read, block(8, Some(1)), AccessModes::READ, 1),
            Err(TokenError::WrongBlock { .. })
        ));
        assert!(matches!(
            check(&s, &read, block(7, Some(1)), AccessModes::WRITE, 1),
            Err(TokenError::WrongMode { .. })
        ));
        assert_eq!(
            verify(
                &s,
                None,
                Some(block(7, None)),
                AccessModes::READ,
                "GetBlock",
                1
            ),
            Err(TokenError::Missing)
        );
        assert_eq!(
            verify(
                &s,
                Some(b"junk"),
                Some(block(7, None)),
                AccessModes::READ,
                "GetBlock",
                1
            ),
            Err(TokenError::Malformed)
        );
        // A group token never allows a call that names no block.
        assert!(matches!(
            verify(
                &s,
                Some(read.as_bytes()),
                None,
                AccessModes::READ,
                "ListBlock",
                1
            ),
            Err(TokenError::WrongBlock { .. })
        ));
    }

    #[test]
    fn a_token_for_one_index_covers_only_that_index() {
        let s = [secret(1, 9)];
        let mut one = id(1, AccessModes::READ);
        one.scope = TokenScope::Group {
            container_id: 3,
            local_id: 7,
            replica_index: Some(2),
        };
        let t = s[0].sign(&one);
        assert!(check(&s, &t, block(7, Some(2)), AccessModes::READ, 1).is_ok());
        assert!(matches!(
            check(&s, &t, block(7, Some(3)), AccessModes::READ, 1),
            Err(TokenError::WrongBlock { .. })
        ));
    }

    #[test]
    fn keys_unknown_to_the_verifier_say_whether_waiting_helps() {
        let t = secret(5, 1).sign(&id(5, AccessModes::READ));
        assert_eq!(
            check(&[], &t, block(7, None), AccessModes::READ, 1),
            Err(TokenError::NoSecrets)
        );
        let newer = check(&[secret(4, 1)], &t, block(7, None), AccessModes::READ, 1)
            .expect_err("not known yet");
        assert_eq!(newer, TokenError::KeyNotYetKnown(5));
        assert!(newer.is_transient());
        let older =
            check(&[secret(6, 1)], &t, block(7, None), AccessModes::READ, 1).expect_err("purged");
        assert_eq!(older, TokenError::UnknownKey(5));
        assert!(!older.is_transient());
    }

    #[test]
    fn a_token_is_refused_once_its_secret_has_expired() {
        let mut s = secret(1, 9);
        s.expires_unix_ms = 3_000;
        let t = s.sign(&id(1, AccessModes::READ));
        assert!(check(&[s.clone()], &t, block(7, None), AccessModes::READ, 2_999).is_ok());
        assert!(matches!(
            check(&[s], &t, block(7, None), AccessModes::READ, 3_001),
            Err(TokenError::Expired { .. })
        ));
    }

    #[test]
    fn all_blocks_tokens_cover_calls_without_a_block() {
        let s = [secret(1, 9)];
        let mut service = id(1, AccessModes::ALL);
        service.scope = TokenScope::AllBlocks;
        let t = s[0].sign(&service);
        assert!(
            verify(
                &s,
                Some(t.as_bytes()),
                None,
                AccessModes::DELETE,
                "DeleteBlocks",
                1
            )
            .is_ok()
        );
        assert!(check(&s, &t, block(99, Some(4)), AccessModes::WRITE, 1).is_ok());
    }

    #[test]
    fn debug_never_prints_the_secret_or_the_token_bytes() {
        let s = secret(1, 0xab);
        assert!(!format!("{s:?}").contains("171"));
        let t = s.sign(&id(1, AccessModes::READ));
        let shown = format!("{t:?}");
        assert!(shown.contains("READ") && shown.contains("key 1"), "{shown}");
    }
}
