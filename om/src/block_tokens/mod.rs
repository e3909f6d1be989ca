//! The om's block token secrets (Ozone's `SecretKeyManager` with its block
//! token secret keys): generated here, kept in the metadata store, rotated,
//! handed to datanodes in registration and heartbeat answers, and used to
//! sign the token that goes with every block location the om hands out.
//!
//! Schedule, with `L` the configured token lifetime: key `k` signs from its
//! `active_from` for `L`, and each token it signs lasts `L`, so the key
//! expires at `active_from + 2L`. Key `k+1` is made when `k` starts signing
//! and activates at `active_from(k) + L`: datanodes hear of each key a whole
//! lifetime before the first token it signs reaches them. At most three keys
//! exist at once (the one that last signed, the signer, the next).
//!
//! Storage: the table `block_token_keys` of the metadata store (key id →
//! encoded `BlockTokenSecret`), so every om that opens the same store signs
//! with the same keys (one om per store today; ARCHITECTURE.md, "Moving the
//! om onto the store"). Each om
//! keeps the keys in memory and signs from that copy; [`rotate`] reads the
//! stored keys, adds and drops what the schedule needs in one `transact`
//! body, and refreshes the copy. Two oms rotating at once commit one set of
//! keys: the loser's body reruns, finds the schedule met, and writes
//! nothing. The om server rotates every [`rotation_interval`], so an om
//! learns of a key another om made well before that key signs; an om whose
//! copy has fallen behind still signs with the newest of its keys whose
//! signing has begun, and every datanode accepts those tokens. Signing never
//! rotates: an om embedded without its server and without heartbeats stops
//! signing two to three lifetimes after its last rotation
//! ([`OzoneManager::rotate_block_token_keys`]), when its last key expires.
//!
//! [`rotate`]: BlockTokenSecretManager::rotate

use std::sync::RwLock;
use std::time::Duration;

use meta_store::{MetaStore, RedbStore, Table, transact};
use prost::Message;
use proto_crate::block_token::{
    AccessModes, BlockToken, BlockTokenIdentifier, BlockTokenSecret, SECRET_LEN, TokenScope,
    now_unix_ms,
};
use proto_crate::wire::om as pb;
use rand::RngCore;
use redb::{Database, TableDefinition};

use proto_crate::{BlockGroup, KeyInfo};

use crate::{OmError, OzoneManager};

/// Block token secrets in the store: key id → encoded `BlockTokenSecret`.
const KEYS: Table<u32, Vec<u8>> = Table::new("block_token_keys");

/// The redb table of the layout before the store, read once by
/// [`move_onto_store`].
const OLD_KEYS: TableDefinition<u32, &[u8]> = TableDefinition::new("block_token_keys");

/// Most key rows a rotation reads. The schedule keeps at most three; more
/// means the table was written by something else, and the om stops rather
/// than sign with a key it cannot account for.
const MAX_STORED_KEYS: usize = 16;

/// Default block token lifetime (`--block-token-lifetime`): one day, Ozone's
/// `hdds.block.token.expiry.time`.
pub const DEFAULT_BLOCK_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The shortest lifetime accepted: keys must reach every datanode (one
/// heartbeat) well within a lifetime.
pub const MIN_BLOCK_TOKEN_LIFETIME: Duration = Duration::from_secs(1);

/// Longest time between two rotations of the om server (a read of at most
/// three rows when nothing is due).
const MAX_ROTATION_INTERVAL: Duration = Duration::from_secs(60);

/// Block token settings of an om with security on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTokenConfig {
    /// How long a token is valid from its issue (and how long a key signs).
    pub lifetime: Duration,
}

impl Default for BlockTokenConfig {
    fn default() -> Self {
        Self {
            lifetime: DEFAULT_BLOCK_TOKEN_LIFETIME,
        }
    }
}

/// How often the om server rotates and re-reads the keys for `lifetime`: a
/// quarter of it, at most [`MAX_ROTATION_INTERVAL`]. A key is made within
/// one interval of its predecessor starting to sign, so datanodes (and the
/// other oms) hear of it at least three quarters of a lifetime before it
/// signs.
pub(crate) fn rotation_interval(lifetime: Duration) -> Duration {
    (lifetime / 4).min(MAX_ROTATION_INTERVAL)
}

/// The secrets and the signing schedule.
#[derive(Debug)]
pub(crate) struct BlockTokenSecretManager {
    lifetime_ms: u64,
    /// The keys as last read from the store, sorted by key id.
    keys: RwLock<Vec<BlockTokenSecret>>,
    /// Runs this om's rotations one at a time, so the copy is always the
    /// set the last one read (even when the store went back, restored from
    /// a snapshot) and no rotation answers with a set older than the copy.
    rotations: tokio::sync::Mutex<()>,
}

/// What the schedule changes at one time: keys to drop and keys to add.
#[derive(Debug, Default)]
struct Rotation {
    expired: Vec<u32>,
    added: Vec<BlockTokenSecret>,
}

/// The key that signs at `now` (ms since the Unix epoch) among `keys`
/// (sorted by id): the newest unexpired one whose signing has begun, or,
/// when none has, the first unexpired one (made by an om whose clock runs
/// ahead; datanodes check a token against its key's expiry, not its start).
fn signer(keys: &[BlockTokenSecret], now: u64) -> Option<&BlockTokenSecret> {
    let mut live = keys.iter().filter(|k| k.expires_unix_ms > now);
    live.clone()
        .rev()
        .find(|k| k.active_from_unix_ms <= now)
        .or_else(|| live.next())
}

fn fresh_secret() -> [u8; SECRET_LEN] {
    let mut s = [0u8; SECRET_LEN];
    rand::rng().fill_bytes(&mut s);
    s
}

fn decode_secret(bytes: &[u8]) -> Result<BlockTokenSecret, OmError> {
    crate::manager::decode::<pb::BlockTokenSecret, BlockTokenSecret>(bytes, "block token secret")
}

fn encode_secret(k: &BlockTokenSecret) -> Vec<u8> {
    pb::BlockTokenSecret::from(k).encode_to_vec()
}

impl BlockTokenSecretManager {
    /// Reads the keys in `store` and brings the schedule up to date.
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a lifetime under
    /// [`MIN_BLOCK_TOKEN_LIFETIME`]; those of [`rotate`](Self::rotate).
    pub(crate) async fn open(store: &MetaStore, config: BlockTokenConfig) -> Result<Self, OmError> {
        if config.lifetime < MIN_BLOCK_TOKEN_LIFETIME {
            return Err(OmError::InvalidArgument(format!(
                "block token lifetime {:?} is shorter than {:?}",
                config.lifetime, MIN_BLOCK_TOKEN_LIFETIME
            )));
        }
        let m = Self {
            lifetime_ms: u64::try_from(config.lifetime.as_millis()).unwrap_or(u64::MAX),
            keys: RwLock::new(Vec::new()),
            rotations: tokio::sync::Mutex::new(()),
        };
        m.rotate(store, now_unix_ms()).await?;
        Ok(m)
    }

    /// Whether `keys` already cover `now`: one signs, a later one is announced.
    fn current(keys: &[BlockTokenSecret], now: u64) -> bool {
        keys.iter().any(|k| k.active_from_unix_ms <= now)
            && keys.last().is_some_and(|k| k.active_from_unix_ms > now)
    }

    /// What the schedule needs at `now` from the stored `keys` (sorted by
    /// id): `None` when they already cover it.
    fn plan(&self, keys: &[BlockTokenSecret], now: u64) -> Option<Rotation> {
        if Self::current(keys, now) {
            return None;
        }
        let mut rotation = Rotation {
            expired: keys
                .iter()
                .filter(|k| k.expires_unix_ms <= now)
                .map(|k| k.key_id)
                .collect(),
            added: Vec::new(),
        };
        let next_id_after = |id: u32| id.wrapping_add(1).max(1);
        let mut next_id = keys.last().map_or(1, |k| next_id_after(k.key_id));
        let live = || keys.iter().filter(|k| k.expires_unix_ms > now);
        let mut newest = live().next_back().map(|k| k.active_from_unix_ms);
        if newest.is_none() {
            // First start, or no om ran for longer than the schedule
            // reached: a signer from now (datanodes learn it at their next
            // heartbeat; until then they answer that they lack it). Live
            // keys that are all still to come were made by an om whose
            // clock runs ahead of this one's: they are used as they are,
            // not doubled (see `signer`).
            rotation.added.push(self.key(next_id, now));
            next_id = next_id_after(next_id);
            newest = Some(now);
        }
        while let Some(active_from) = newest.filter(|a| *a <= now) {
            let after = active_from.saturating_add(self.lifetime_ms);
            let k = self.key(next_id, after.max(now.saturating_add(1)));
            next_id = next_id_after(next_id);
            newest = Some(k.active_from_unix_ms);
            rotation.added.push(k);
        }
        Some(rotation)
    }

    /// Reads the stored keys and, in the same transaction, adds the keys
    /// the schedule needs at `now` (ms since the Unix epoch) and drops the
    /// expired ones; the om's copy becomes what the store then holds.
    ///
    /// # Errors
    /// The store's errors ([`OmError::Store`]); [`OmError::CorruptRecord`]
    /// for a stored key that does not decode; [`OmError::Internal`] when
    /// more than [`MAX_STORED_KEYS`] keys are stored.
    pub(crate) async fn rotate(
        &self,
        store: &MetaStore,
        now: u64,
    ) -> Result<Vec<BlockTokenSecret>, OmError> {
        let _one_at_a_time = self.rotations.lock().await;
        let committed = transact(store, |tx| {
            Box::pin(async move {
                let page = KEYS.scan_in(&tx, &(), None, MAX_STORED_KEYS).await?;
                if page.more {
                    return Err(OmError::Internal(format!(
                        "more than {MAX_STORED_KEYS} block token keys are stored"
                    )));
                }
                let mut keys = page
                    .rows
                    .iter()
                    .map(|(_, v)| decode_secret(v))
                    .collect::<Result<Vec<_>, _>>()?;
                let Some(rotation) = self.plan(&keys, now) else {
                    return Ok((keys, Rotation::default()));
                };
                for id in &rotation.expired {
                    KEYS.delete_in(&tx, id);
                }
                for k in &rotation.added {
                    KEYS.put_in(&tx, &k.key_id, &encode_secret(k));
                }
                keys.retain(|k| !rotation.expired.contains(&k.key_id));
                keys.extend(rotation.added.iter().cloned());
                Ok((keys, rotation))
            })
        })
        .await?;
        let (keys, rotation) = committed.value;
        if !rotation.added.is_empty() || !rotation.expired.is_empty() {
            tracing::info!(
                added = ?rotation.added.iter().map(|k| k.key_id).collect::<Vec<_>>(),
                expired = ?rotation.expired,
                "block token keys rotated"
            );
        }
        keys.clone_into(
            &mut self
                .keys
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        Ok(keys)
    }

    fn key(&self, key_id: u32, active_from: u64) -> BlockTokenSecret {
        BlockTokenSecret {
            key_id,
            secret: fresh_secret(),
            active_from_unix_ms: active_from,
            expires_unix_ms: active_from.saturating_add(self.lifetime_ms.saturating_mul(2)),
        }
    }

    /// Every key a valid token may name now, and the next one: what a
    /// datanode is sent. Reads the store only when the om's copy no longer
    /// covers now.
    ///
    /// # Errors
    /// Those of [`rotate`](Self::rotate).
    pub(crate) async fn secrets(
        &self,
        store: &MetaStore,
    ) -> Result<Vec<BlockTokenSecret>, OmError> {
        let now = now_unix_ms();
        {
            let keys = self
                .keys
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if Self::current(&keys, now) {
                return Ok(keys.clone());
            }
        }
        self.rotate(store, now).await
    }

    /// A token for `scope` with `modes`, issued to `owner`, valid for the
    /// lifetime from now (or to its key's expiry, if sooner), signed by the
    /// key [`signer`] picks from the om's copy.
    ///
    /// # Errors
    /// [`OmError::Internal`] when every key in the copy has expired: the om
    /// has not rotated for two lifetimes or more (its store was
    /// unreachable).
    pub(crate) fn mint(
        &self,
        scope: TokenScope,
        modes: AccessModes,
        owner: &str,
    ) -> Result<BlockToken, OmError> {
        self.mint_at(scope, modes, owner, now_unix_ms())
    }

    /// [`mint`](Self::mint) at `now`, ms since the Unix epoch.
    fn mint_at(
        &self,
        scope: TokenScope,
        modes: AccessModes,
        owner: &str,
        now: u64,
    ) -> Result<BlockToken, OmError> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let signer = signer(&keys, now).ok_or_else(|| {
            OmError::Internal(
                "every block token key has expired: the keys have not been rotated for \
                     a whole lifetime (is the metadata store reachable?)"
                    .into(),
            )
        })?;
        let id = BlockTokenIdentifier {
            scope,
            modes,
            expiry_unix_ms: now
                .saturating_add(self.lifetime_ms)
                .min(signer.expires_unix_ms),
            key_id: signer.key_id,
            owner: if owner.is_empty() {
                "anonymous".into()
            } else {
                owner.to_string()
            },
        };
        Ok(signer.sign(&id))
    }
}

/// Copies the keys of an `om.redb` from before the store (the redb table
/// `block_token_keys`) into `own`, which must be the store over the same
/// file, then drops the old table. Rows already in the store are kept (a
/// crash between the copy and the drop repeats the copy harmlessly).
///
/// # Errors
/// Database and store errors; [`OmError::Internal`] when there are rows to
/// copy and `own` is `None` (the om's store is elsewhere).
pub(crate) fn move_onto_store(db: &Database, own: Option<&RedbStore>) -> Result<(), OmError> {
    crate::store_moves::move_old_table(db, own, OLD_KEYS, |id, v, rows| {
        // Checked here so that a corrupt row stops the om before the old
        // table is dropped.
        decode_secret(v)?;
        rows.push(KEYS.row_bytes(&id, &v.to_vec()));
        Ok(())
    })?;
    Ok(())
}
/// Who asks for a fresh token of one group ([`OzoneManager::block_token_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOwner {
    /// The open key or part session that allocated the group: READ and WRITE.
    Session(u64),
    /// The committed key `bucket/key` holding the group: READ.
    Key {
        /// Bucket name.
        bucket: String,
        /// Key name.
        key: String,
    },
}

impl OzoneManager {
    /// Whether block tokens are on (`--security`).
    #[must_use]
    pub fn security_enabled(&self) -> bool {
        self.tokens.is_some()
    }

    /// The secrets datanodes verify tokens with (empty with security off):
    /// sent in registration and heartbeat answers.
    ///
    /// # Errors
    /// Store errors of a rotation.
    pub async fn block_token_secrets(&self) -> Result<Vec<BlockTokenSecret>, OmError> {
        match &self.tokens {
            Some(t) => t.secrets(&self.store).await,
            None => Ok(Vec::new()),
        }
    }

    /// Rotates the block token keys as the schedule needs now and re-reads
    /// the ones other oms on the same store made (module docs); the om
    /// server does it every quarter lifetime (at most every minute).
    /// Nothing with security off.
    ///
    /// # Errors
    /// Store errors; [`OmError::CorruptRecord`] for a stored key that does
    /// not decode; [`OmError::Internal`] when more keys are stored than the
    /// schedule ever keeps.
    pub async fn rotate_block_token_keys(&self) -> Result<(), OmError> {
        if let Some(t) = &self.tokens {
            t.rotate(&self.store, now_unix_ms()).await?;
        }
        Ok(())
    }

    /// How often the om server calls
    /// [`rotate_block_token_keys`](Self::rotate_block_token_keys): `None`
    /// with security off.
    pub(crate) fn block_token_rotation_interval(&self) -> Option<Duration> {
        self.config
            .block_tokens
            .map(|c| rotation_interval(c.lifetime))
    }

    /// A token for `scope` with `modes` issued to `owner`; `None` with security off.
    pub(crate) fn mint(
        &self,
        scope: TokenScope,
        modes: AccessModes,
        owner: &str,
    ) -> Result<Option<BlockToken>, OmError> {
        self.tokens
            .as_ref()
            .map(|t| t.mint(scope, modes, owner))
            .transpose()
    }

    /// The om's own token for its services' data RPCs (deletion, repair
    /// copies, block report checks): every mode on every block, for one
    /// lifetime. `None` with security off.
    ///
    /// # Errors
    /// [`OmError::Internal`] when the keys have fallen a lifetime behind.
    pub fn service_token(&self) -> Result<Option<BlockToken>, OmError> {
        self.mint(TokenScope::AllBlocks, AccessModes::ALL, "om")
    }

    /// `g` with a token for every index of it (`modes`, issued to `owner`).
    pub(crate) fn with_token(
        &self,
        mut g: BlockGroup,
        modes: AccessModes,
        owner: &str,
    ) -> Result<BlockGroup, OmError> {
        g.token = self.mint(TokenScope::group_of(g.id()), modes, owner)?;
        Ok(g)
    }

    /// `g`, just allocated to a session of `client`, with its writer's token
    /// (READ and WRITE, issued to the client).
    ///
    /// # Errors
    /// As [`service_token`](Self::service_token).
    pub(crate) fn with_session_token(
        &self,
        client: &str,
        g: BlockGroup,
    ) -> Result<BlockGroup, OmError> {
        if self.tokens.is_none() {
            return Ok(g);
        }
        self.with_token(g, AccessModes::READ_WRITE, client)
    }

    /// `k` with a READ token on each of its groups, issued to `owner`.
    ///
    /// # Errors
    /// As [`service_token`](Self::service_token).
    pub fn with_read_tokens(&self, mut k: KeyInfo, owner: &str) -> Result<KeyInfo, OmError> {
        if self.tokens.is_some() {
            for g in &mut k.block_groups {
                g.token = self.mint(TokenScope::group_of(g.id()), AccessModes::READ, owner)?;
            }
        }
        Ok(k)
    }

    /// A fresh token for group `container_id:local_id` (a client's expired
    /// mid-stream): READ and WRITE for a group `owner`'s session allocated,
    /// READ for a group of `owner`'s committed key. `None` with security off.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::KeyNotFound`] or
    /// [`OmError::BucketNotFound`] for an owner that is not there;
    /// [`OmError::InvalidArgument`] when the group is not the owner's;
    /// [`OmError::Internal`] as [`service_token`](Self::service_token).
    pub async fn block_token_for(
        &self,
        owner: &TokenOwner,
        container_id: u64,
        local_id: u64,
    ) -> Result<Option<BlockToken>, OmError> {
        if self.tokens.is_none() {
            return Ok(None);
        }
        let scope = TokenScope::Group {
            container_id,
            local_id,
            replica_index: None,
        };
        let is = |g: &BlockGroup| (g.container_id, g.local_id) == (container_id, local_id);
        match owner {
            TokenOwner::Session(id) => {
                let s = self.session(*id).await?;
                if !s.allocated.iter().any(is) {
                    return Err(OmError::InvalidArgument(format!(
                        "block group {container_id}:{local_id} was not allocated to session {id}"
                    )));
                }
                self.mint(scope, AccessModes::READ_WRITE, &s.client)
            }
            TokenOwner::Key { bucket, key } => {
                let k = self.lookup_key(bucket, key).await?;
                if !k.block_groups.iter().any(is) {
                    return Err(OmError::InvalidArgument(format!(
                        "block group {container_id}:{local_id} is not part of key {bucket}/{key}"
                    )));
                }
                self.mint(scope, AccessModes::READ, "")
            }
        }
    }
}

#[cfg(test)]
mod tests;
