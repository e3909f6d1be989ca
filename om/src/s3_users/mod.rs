//! S3 identities and bucket ACLs: the users the S3 gateway authenticates,
//! their access keys, and the canned ACL of each bucket.
//!
//! Storage: the first of the om's modules on the metadata store
//! (`meta_store`, over `om.redb`; ARCHITECTURE.md, "Moving the om onto the
//! store"). Tables: `s3_users` (user name → creation time, ms since the
//! Unix epoch), `s3_access_keys` (access key → [`S3AccessKeyRecord`]),
//! `s3_user_keys` ((user, access key) → creation time: a user's keys as one
//! range) and the row `s3_users` of `om_counts` (how many users: a
//! transaction reads at most 128 rows, so it cannot count a table). Every
//! change is one `transact` body, so two oms issuing keys at once cannot
//! pass a bound together. An `om.redb` from before the move has its rows
//! copied into the store when the om opens ([`move_onto_store`]).
//!
//! A secret is kept in the om's database as it was issued, like the
//! block-token secrets beside it: SigV4 is an HMAC keyed with the secret
//! itself, so whoever verifies a signature needs the secret, not a hash of
//! it. What protects it is the database file (readable by the om's user
//! only) and the channel: with TLS on, only a peer whose certificate the
//! cluster CA signed may read a secret (see `GetS3Secret` in the service).
//!
//! Bounds (the IAM quotas' shape): at most [`MAX_S3_USERS`] users and
//! [`MAX_ACCESS_KEYS_PER_USER`] active keys per user.
//!
//! [`S3AccessKeyRecord`]: proto_crate::wire::om::S3AccessKeyRecord

use meta_store::{RedbStore, Table, transact};
use prost::Message;
use proto_crate::wire::om as pb;
use rand::Rng;
use redb::{Database, TableDefinition};

use crate::manager::now_ms;
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// User name → creation time (ms since the Unix epoch).
const USERS: Table<String, u64> = Table::new("s3_users");
/// Access key → encoded `S3AccessKeyRecord`.
const ACCESS_KEYS: Table<String, Vec<u8>> = Table::new("s3_access_keys");
/// (user, access key) → creation time: each user's keys as one range.
const USER_KEYS: Table<(String, String), u64> = Table::new("s3_user_keys");
/// Counts the om keeps for its bounds, by name.
const COUNTS: Table<String, u64> = Table::new("om_counts");
/// The row of [`COUNTS`] that counts [`USERS`].
const USER_COUNT: &str = "s3_users";

/// The redb tables of the layout before the store, read once by
/// [`move_onto_store`].
const OLD_USERS: TableDefinition<&str, u64> = TableDefinition::new("s3_users");
const OLD_ACCESS_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("s3_access_keys");

/// Most S3 users the om holds (IAM's default quota of users per account).
pub const MAX_S3_USERS: u64 = 5000;
/// Most active access keys one user holds (IAM's limit): a key is rotated by
/// issuing the second, moving clients over, then revoking the first.
pub const MAX_ACCESS_KEYS_PER_USER: usize = 2;

/// Length of an access key id (as Amazon's: 20 characters).
const ACCESS_KEY_LEN: usize = 20;
/// Length of a secret key (as Amazon's: 40 characters).
const SECRET_KEY_LEN: usize = 40;

/// A new access key pair, as issued once to the administrator (its
/// `Debug` form hides the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// The user the key belongs to.
    pub user: String,
    /// The access key id: `OZ` and 18 upper-case letters and digits.
    pub access_key: String,
    /// The secret: 40 letters and digits (about 238 random bits).
    pub secret_key: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("user", &self.user)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

/// The owner id the gateway shows for what its administrator owns; no user
/// may take the name.
pub const RESERVED_USER: &str = "ozone";

/// Most buckets one S3 user owns (Amazon's default quota per account was
/// 100, now 10,000; 1,000 here). Buckets with no owner are not counted.
pub const MAX_BUCKETS_PER_OWNER: usize = 1000;

/// An S3 user as listed: never with secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3User {
    /// User name.
    pub name: String,
    /// Creation time, ms since the Unix epoch.
    pub created_unix_ms: u64,
    /// Active access keys, oldest first.
    pub access_keys: Vec<String>,
}

/// Checks an S3 user name with IAM's rules: 1 to 64 characters of letters,
/// digits and `+=,.@_-`; [`RESERVED_USER`] is refused.
fn validate_user_name(name: &str) -> Result<()> {
    if name == RESERVED_USER {
        return Err(OmError::InvalidArgument(format!(
            "user name {name:?} is reserved for the S3 administrator"
        )));
    }
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(OmError::InvalidArgument(format!(
            "user name {name:?} must be 1 to 64 letters, digits or +=,.@_-"
        )))
    }
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

fn decode_key(bytes: &[u8]) -> Result<pb::S3AccessKeyRecord> {
    pb::S3AccessKeyRecord::decode(bytes).map_err(|e| OmError::CorruptRecord {
        what: "s3 access key".into(),
        source: Box::new(e),
    })
}

/// Copies the S3 users and keys of an `om.redb` written before they moved
/// onto the store into `own`, the store over the same file, then drops the old tables (nothing to do when
/// neither exists). Only rows the store lacks are copied, so what was
/// written since (an om that was upgraded, rolled back and upgraded again
/// finds the old tables re-created by the older binary) is never
/// overwritten; the user count is then counted from the store's rows. A
/// crash before the drop repeats the copy harmlessly. Runs while the om
/// opens, before it serves.
///
/// # Errors
/// Database and store errors; [`OmError::CorruptRecord`] for an old access
/// key that does not decode; [`OmError::Internal`] when there are rows to
/// copy and `own` is `None` (the om's store is elsewhere).
pub(crate) fn move_onto_store(db: &Database, own: Option<&RedbStore>) -> Result<()> {
    use crate::store_moves::{move_old_table, move_old_table_then};
    // Keys first: the users' move recounts the users before its table goes,
    // so a crash anywhere leaves a table whose move repeats the count.
    move_old_table(db, own, OLD_ACCESS_KEYS, |_, v, rows| {
        let record = decode_key(v)?;
        rows.push(USER_KEYS.row_bytes(
            &(record.user.clone(), record.access_key.clone()),
            &record.created_unix_ms,
        ));
        rows.push(ACCESS_KEYS.row_bytes(&record.access_key, &v.to_vec()));
        Ok(())
    })?;
    move_old_table_then(
        db,
        own,
        OLD_USERS,
        |name, created, rows| {
            rows.push(USERS.row_bytes(&name.to_string(), &created));
            Ok(())
        },
        |redb| {
            let users = redb.count_prefix(&USERS.key_prefix())?;
            redb.set_at_open(&[COUNTS.row_bytes(&USER_COUNT.to_string(), &users)])?;
            tracing::info!(users, "S3 users counted");
            Ok(())
        },
    )?;
    Ok(())
}

impl OzoneManager {
    /// Issues a new access key pair for S3 user `user`, creating the user
    /// first if it does not exist (one transaction).
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a bad name; [`OmError::LimitExceeded`]
    /// when the user already holds [`MAX_ACCESS_KEYS_PER_USER`] keys or the om
    /// [`MAX_S3_USERS`] users; store errors.
    pub async fn create_s3_key(&self, user: &str) -> Result<S3Credentials> {
        validate_user_name(user)?;
        const UPPER_DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let user = &user.to_string();
        let issued = transact(&self.store, |tx| {
            Box::pin(async move {
                let now = now_ms();
                if USERS.get_in(&tx, user).await?.is_none() {
                    let count_key = USER_COUNT.to_string();
                    let count = COUNTS.get_in(&tx, &count_key).await?.unwrap_or(0);
                    if count >= MAX_S3_USERS {
                        return Err(OmError::LimitExceeded(format!(
                            "the om holds {MAX_S3_USERS} S3 users already"
                        )));
                    }
                    USERS.put_in(&tx, user, &now);
                    COUNTS.put_in(&tx, &count_key, &(count + 1));
                }
                let held = USER_KEYS
                    .scan_in(&tx, user, None, MAX_ACCESS_KEYS_PER_USER)
                    .await?;
                if held.rows.len() >= MAX_ACCESS_KEYS_PER_USER {
                    return Err(OmError::LimitExceeded(format!(
                        "user {user} already holds {MAX_ACCESS_KEYS_PER_USER} access keys; \
                         revoke one first"
                    )));
                }
                let access_key = loop {
                    let k = format!("OZ{}", random_string(ACCESS_KEY_LEN - 2, UPPER_DIGITS));
                    if ACCESS_KEYS.get_in(&tx, &k).await?.is_none() {
                        break k;
                    }
                };
                let record = pb::S3AccessKeyRecord {
                    access_key: access_key.clone(),
                    user: user.clone(),
                    secret_key: random_string(SECRET_KEY_LEN, ALNUM),
                    created_unix_ms: now,
                };
                ACCESS_KEYS.put_in(&tx, &access_key, &record.encode_to_vec());
                USER_KEYS.put_in(&tx, &(user.clone(), access_key), &now);
                Ok::<_, OmError>(S3Credentials {
                    user: record.user,
                    access_key: record.access_key,
                    secret_key: record.secret_key,
                })
            })
        })
        .await?
        .value;
        tracing::info!(user, access_key = %issued.access_key, "issued an S3 access key");
        Ok(issued)
    }

    /// Every S3 user with its active access keys (oldest first), by name.
    /// Read page by page, not as one snapshot: a key issued meanwhile may
    /// be missing.
    ///
    /// # Errors
    /// Store errors.
    pub async fn list_s3_users(&self) -> Result<Vec<S3User>> {
        const PAGE: usize = 1000;
        let mut users = Vec::new();
        let mut after = None;
        loop {
            let page = USERS.scan(&self.store, &(), after.as_ref(), PAGE).await?;
            after = page.rows.last().map(|r| r.key.clone());
            users.extend(page.rows.into_iter().map(|r| S3User {
                name: r.key,
                created_unix_ms: r.value,
                access_keys: Vec::new(),
            }));
            if !page.more {
                break;
            }
        }
        // (user, access key), (created ms, revision): keys issued in the
        // same millisecond keep the order of their commits.
        let mut keys: Vec<((String, String), (u64, u64))> = Vec::new();
        let mut after = None;
        loop {
            let page = USER_KEYS
                .scan(&self.store, &(), after.as_ref(), PAGE)
                .await?;
            after = page.rows.last().map(|r| r.key.clone());
            keys.extend(
                page.rows
                    .into_iter()
                    .map(|r| (r.key, (r.value, r.mod_revision))),
            );
            if !page.more {
                break;
            }
        }
        keys.sort_by_key(|(_, created)| *created);
        for ((user, access_key), _) in keys {
            if let Ok(i) = users.binary_search_by(|u| u.name.as_str().cmp(&user)) {
                users[i].access_keys.push(access_key);
            }
        }
        Ok(users)
    }

    /// Revokes `access_key`: requests signed with it fail from then on (the
    /// gateway asks the om for the secret on every signed request). The user
    /// and its buckets stay. Returns the user the key belonged to.
    ///
    /// # Errors
    /// [`OmError::AccessKeyNotFound`]; store errors.
    pub async fn revoke_s3_key(&self, access_key: &str) -> Result<String> {
        let access_key = &access_key.to_string();
        let user = transact(&self.store, |tx| {
            Box::pin(async move {
                let record = ACCESS_KEYS
                    .get_in(&tx, access_key)
                    .await?
                    .ok_or_else(|| OmError::AccessKeyNotFound(access_key.clone()))?;
                let user = decode_key(&record)?.user;
                ACCESS_KEYS.delete_in(&tx, access_key);
                USER_KEYS.delete_in(&tx, &(user.clone(), access_key.clone()));
                Ok::<_, OmError>(user)
            })
        })
        .await?
        .value;
        tracing::info!(user, access_key, "revoked an S3 access key");
        Ok(user)
    }

    /// The user and secret of `access_key`.
    ///
    /// # Errors
    /// [`OmError::AccessKeyNotFound`]; store errors.
    pub async fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        let row = ACCESS_KEYS
            .get(&self.store, &access_key.to_string())
            .await?
            .ok_or_else(|| OmError::AccessKeyNotFound(access_key.to_string()))?;
        let r = decode_key(&row.value)?;
        Ok((r.user, r.secret_key))
    }
}

#[cfg(test)]
mod tests;
