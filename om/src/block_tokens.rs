//! The om's block token secrets (Ozone's `SecretKeyManager` with its block
//! token secret keys): generated here, persisted in the om's database,
//! rotated, handed to datanodes in registration and heartbeat answers, and
//! used to sign the token that goes with every block location the om hands
//! out.
//!
//! Schedule, with `L` the configured token lifetime: key `k` signs from its
//! `active_from` for `L`, and each token it signs lasts `L`, so the key
//! expires at `active_from + 2L`. Key `k+1` is made when `k` starts signing
//! and activates at `active_from(k) + L`: datanodes hear of each key a whole
//! lifetime before the first token it signs reaches them. At most three keys
//! exist at once (the one that last signed, the signer, the next).

use std::sync::RwLock;
use std::time::Duration;

use prost::Message;
use proto_crate::block_token::{
    AccessModes, BlockToken, BlockTokenIdentifier, BlockTokenSecret, SECRET_LEN, TokenScope,
    now_unix_ms,
};
use proto_crate::wire::om as pb;
use rand::RngCore;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use proto_crate::{BlockGroup, KeyInfo};

use crate::{OmError, OzoneManager};

/// Block token secrets: key id -> encoded `BlockTokenSecret`.
pub(crate) const BLOCK_TOKEN_KEYS: TableDefinition<u32, &[u8]> =
    TableDefinition::new("block_token_keys");

/// Default block token lifetime (`--block-token-lifetime`): one day, Ozone's
/// `hdds.block.token.expiry.time`.
pub const DEFAULT_BLOCK_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The shortest lifetime accepted: keys must reach every datanode (one
/// heartbeat) well within a lifetime.
pub const MIN_BLOCK_TOKEN_LIFETIME: Duration = Duration::from_secs(1);

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

/// The secrets and the signing schedule.
#[derive(Debug)]
pub(crate) struct BlockTokenSecretManager {
    lifetime_ms: u64,
    /// Sorted by key id (and so by `active_from`).
    keys: RwLock<Vec<BlockTokenSecret>>,
}

fn read_keys(db: &Database) -> Result<Vec<BlockTokenSecret>, OmError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(BLOCK_TOKEN_KEYS)?;
    let mut keys = Vec::new();
    for row in table.iter()? {
        let (_, v) = row?;
        keys.push(crate::manager::decode::<
            pb::BlockTokenSecret,
            BlockTokenSecret,
        >(v.value(), "block token secret")?);
    }
    keys.sort_by_key(|k| k.key_id);
    Ok(keys)
}

fn fresh_secret() -> [u8; SECRET_LEN] {
    let mut s = [0u8; SECRET_LEN];
    rand::rng().fill_bytes(&mut s);
    s
}

impl BlockTokenSecretManager {
    /// Loads the keys stored in `db` and brings the schedule up to date.
    pub(crate) fn open(db: &Database, config: BlockTokenConfig) -> Result<Self, OmError> {
        if config.lifetime < MIN_BLOCK_TOKEN_LIFETIME {
            return Err(OmError::InvalidArgument(format!(
                "block token lifetime {:?} is shorter than {:?}",
                config.lifetime, MIN_BLOCK_TOKEN_LIFETIME
            )));
        }
        let m = Self {
            lifetime_ms: u64::try_from(config.lifetime.as_millis()).unwrap_or(u64::MAX),
            keys: RwLock::new(read_keys(db)?),
        };
        m.refresh(db, now_unix_ms())?;
        Ok(m)
    }

    /// Whether the keys already cover `now`: one signs, a later one is announced.
    fn current(keys: &[BlockTokenSecret], now: u64) -> bool {
        keys.iter().any(|k| k.active_from_unix_ms <= now)
            && keys.last().is_some_and(|k| k.active_from_unix_ms > now)
    }

    /// Adds the keys the schedule needs at `now` and drops expired ones,
    /// persisting the change in one transaction.
    fn refresh(&self, db: &Database, now: u64) -> Result<(), OmError> {
        let mut keys = self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if Self::current(&keys, now) {
            return Ok(());
        }
        let mut next = keys.clone();
        let expired: Vec<u32> = next
            .iter()
            .filter(|k| k.expires_unix_ms < now)
            .map(|k| k.key_id)
            .collect();
        next.retain(|k| k.expires_unix_ms >= now);
        let mut added = Vec::new();
        let mut next_id = keys.last().map_or(1, |k| k.key_id.wrapping_add(1).max(1));
        if !next.iter().any(|k| k.active_from_unix_ms <= now) {
            // First start, or the om was down for longer than the schedule
            // reached: a signer from now (datanodes learn it at their next
            // heartbeat; until then they answer that they lack it).
            added.push(self.key(next_id, now));
            next_id = next_id.wrapping_add(1).max(1);
            next.push(added[added.len() - 1].clone());
        }
        while next.last().is_some_and(|k| k.active_from_unix_ms <= now) {
            let after = next.last().map_or(now, |k| {
                k.active_from_unix_ms.saturating_add(self.lifetime_ms)
            });
            let k = self.key(next_id, after.max(now.saturating_add(1)));
            next_id = next_id.wrapping_add(1).max(1);
            next.push(k.clone());
            added.push(k);
        }
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(BLOCK_TOKEN_KEYS)?;
            for id in &expired {
                table.remove(id)?;
            }
            for k in &added {
                table.insert(
                    k.key_id,
                    pb::BlockTokenSecret::from(k).encode_to_vec().as_slice(),
                )?;
            }
        }
        txn.commit()?;
        tracing::info!(
            added = ?added.iter().map(|k| k.key_id).collect::<Vec<_>>(),
            expired = ?expired,
            "block token keys rotated"
        );
        *keys = next;
        Ok(())
    }

    fn key(&self, key_id: u32, active_from: u64) -> BlockTokenSecret {
        BlockTokenSecret {
            key_id,
            secret: fresh_secret(),
            active_from_unix_ms: active_from,
            expires_unix_ms: active_from.saturating_add(self.lifetime_ms.saturating_mul(2)),
        }
    }

    /// Brings the schedule up to date if it has fallen behind (cheap when not).
    fn ensure_current(&self, db: &Database, now: u64) -> Result<(), OmError> {
        let ok = Self::current(
            &self
                .keys
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            now,
        );
        if ok { Ok(()) } else { self.refresh(db, now) }
    }

    /// Every key a valid token may name now, and the next one: what a
    /// datanode is sent.
    pub(crate) fn secrets(&self, db: &Database) -> Result<Vec<BlockTokenSecret>, OmError> {
        self.ensure_current(db, now_unix_ms())?;
        Ok(self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone())
    }

    /// A token for `scope` with `modes`, issued to `owner`, valid for the
    /// lifetime from now, signed by the current key.
    pub(crate) fn mint(
        &self,
        db: &Database,
        scope: TokenScope,
        modes: AccessModes,
        owner: &str,
    ) -> Result<BlockToken, OmError> {
        let now = now_unix_ms();
        self.ensure_current(db, now)?;
        let keys = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let signer = keys
            .iter()
            .rev()
            .find(|k| k.active_from_unix_ms <= now)
            .ok_or_else(|| OmError::Internal("no block token key is active".into()))?;
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
    /// Database errors of a rotation.
    pub fn block_token_secrets(&self) -> Result<Vec<BlockTokenSecret>, OmError> {
        match &self.tokens {
            Some(t) => t.secrets(&self.db),
            None => Ok(Vec::new()),
        }
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
            .map(|t| t.mint(&self.db, scope, modes, owner))
            .transpose()
    }

    /// The om's own token for its services' data RPCs (deletion, repair
    /// copies, block report checks): every mode on every block, for one
    /// lifetime. `None` with security off.
    ///
    /// # Errors
    /// Database errors of a rotation.
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

    /// `g`, just allocated to session `session_id`, with its writer's token
    /// (READ and WRITE, issued to the session's client).
    pub(crate) fn with_session_token(
        &self,
        session_id: u64,
        g: BlockGroup,
    ) -> Result<BlockGroup, OmError> {
        if self.tokens.is_none() {
            return Ok(g);
        }
        let client = self
            .state()
            .sessions
            .get(&session_id)
            .map(|s| s.client.clone())
            .unwrap_or_default();
        self.with_token(g, AccessModes::READ_WRITE, &client)
    }

    /// `k` with a READ token on each of its groups, issued to `owner`.
    ///
    /// # Errors
    /// Database errors of a rotation.
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
    /// [`OmError::InvalidArgument`] when the group is not the owner's.
    pub fn block_token_for(
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
                let client = {
                    let state = self.state();
                    let s = state.sessions.get(id).ok_or(OmError::NoSuchSession(*id))?;
                    if !s.allocated.iter().any(is) {
                        return Err(OmError::InvalidArgument(format!(
                            "block group {container_id}:{local_id} was not allocated to session {id}"
                        )));
                    }
                    s.client.clone()
                };
                self.mint(scope, AccessModes::READ_WRITE, &client)
            }
            TokenOwner::Key { bucket, key } => {
                let k = self.lookup_key(bucket, key)?;
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
mod tests {
    use super::*;

    fn manager(dir: &std::path::Path, lifetime: Duration) -> (Database, BlockTokenSecretManager) {
        let db = Database::create(dir.join("t.redb")).expect("db");
        let txn = db.begin_write().expect("txn");
        txn.open_table(BLOCK_TOKEN_KEYS).expect("table");
        txn.commit().expect("commit");
        let m = BlockTokenSecretManager::open(&db, BlockTokenConfig { lifetime }).expect("open");
        (db, m)
    }

    #[test]
    fn a_signer_and_an_announced_next_key_exist_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("dir");
        let (db, m) = manager(dir.path(), Duration::from_secs(3600));
        let keys = m.secrets(&db).expect("secrets");
        assert_eq!(keys.len(), 2, "{keys:?}");
        let now = now_unix_ms();
        assert!(keys[0].active_from_unix_ms <= now && keys[1].active_from_unix_ms > now);
        assert_eq!(
            keys[1].active_from_unix_ms,
            keys[0].active_from_unix_ms + 3_600_000
        );
        let t = m
            .mint(&db, TokenScope::AllBlocks, AccessModes::READ, "")
            .expect("mint");
        let id = proto_crate::block_token::verify(
            &keys,
            Some(t.as_bytes()),
            None,
            AccessModes::READ,
            "ListBlock",
            now,
        )
        .expect("verifies");
        assert_eq!(id.key_id, keys[0].key_id);
        assert_eq!(id.owner, "anonymous");
        drop(m);
        let reopened = BlockTokenSecretManager::open(
            &db,
            BlockTokenConfig {
                lifetime: Duration::from_secs(3600),
            },
        )
        .expect("reopen");
        assert_eq!(
            reopened.secrets(&db).expect("secrets"),
            keys,
            "persisted, not regenerated"
        );
    }

    #[test]
    fn keys_rotate_on_schedule_and_expired_ones_are_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let (db, m) = manager(dir.path(), Duration::from_secs(1));
        let first = m.secrets(&db).expect("secrets");
        let t0 = first[0].active_from_unix_ms;
        // Two and a half lifetimes on: the first key expired, its successor
        // signed and still verifies, a third signs, a fourth is announced.
        m.refresh(&db, t0 + 2_500).expect("refresh");
        let later = m.keys.read().expect("lock").clone();
        assert!(
            later.iter().all(|k| k.key_id != first[0].key_id),
            "{later:?}"
        );
        assert!(later.iter().any(|k| k.key_id == first[1].key_id));
        assert!(BlockTokenSecretManager::current(&later, t0 + 2_500));
        assert_eq!(read_keys(&db).expect("stored"), later);
    }

    #[test]
    fn a_lifetime_below_the_minimum_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let db = Database::create(dir.path().join("t.redb")).expect("db");
        let err = BlockTokenSecretManager::open(
            &db,
            BlockTokenConfig {
                lifetime: Duration::from_millis(10),
            },
        )
        .expect_err("too short");
        assert!(matches!(err, OmError::InvalidArgument(_)), "{err}");
    }
}
