//! S3 identities and bucket ACLs: the users the S3 gateway authenticates,
//! their access keys, and the canned ACL of each bucket.
//!
//! Storage: table `s3_users` (user name → creation time, ms since the Unix
//! epoch) and table `s3_access_keys` (access key → [`S3AccessKeyRecord`]).
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

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{BucketInfo, CannedAcl};
use rand::Rng;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::manager::{BUCKETS, decode, now_ms};
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// User name → creation time (ms since the Unix epoch).
pub(crate) const S3_USERS: TableDefinition<&str, u64> = TableDefinition::new("s3_users");
/// Access key → encoded `S3AccessKeyRecord`.
pub(crate) const S3_ACCESS_KEYS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("s3_access_keys");

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

impl OzoneManager {
    /// Issues a new access key pair for S3 user `user`, creating the user
    /// first if it does not exist (one transaction).
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a bad name; [`OmError::LimitExceeded`]
    /// when the user already holds [`MAX_ACCESS_KEYS_PER_USER`] keys or the om
    /// [`MAX_S3_USERS`] users; database errors.
    pub fn create_s3_key(&self, user: &str) -> Result<S3Credentials> {
        validate_user_name(user)?;
        const UPPER_DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let txn = self.db.begin_write()?;
        let issued;
        {
            let mut users = txn.open_table(S3_USERS)?;
            if users.get(user)?.is_none() {
                if users.len()? >= MAX_S3_USERS {
                    return Err(OmError::LimitExceeded(format!(
                        "the om holds {MAX_S3_USERS} S3 users already"
                    )));
                }
                users.insert(user, now_ms())?;
            }
            let mut keys = txn.open_table(S3_ACCESS_KEYS)?;
            let mut held = 0;
            for entry in keys.iter()? {
                let (_, v) = entry?;
                if decode_key(v.value())?.user == user {
                    held += 1;
                }
            }
            if held >= MAX_ACCESS_KEYS_PER_USER {
                return Err(OmError::LimitExceeded(format!(
                    "user {user} already holds {MAX_ACCESS_KEYS_PER_USER} access keys; \
                     revoke one first"
                )));
            }
            let access_key = loop {
                let k = format!("OZ{}", random_string(ACCESS_KEY_LEN - 2, UPPER_DIGITS));
                if keys.get(k.as_str())?.is_none() {
                    break k;
                }
            };
            let record = pb::S3AccessKeyRecord {
                access_key: access_key.clone(),
                user: user.to_string(),
                secret_key: random_string(SECRET_KEY_LEN, ALNUM),
                created_unix_ms: now_ms(),
            };
            keys.insert(access_key.as_str(), record.encode_to_vec().as_slice())?;
            issued = S3Credentials {
                user: record.user,
                access_key: record.access_key,
                secret_key: record.secret_key,
            };
        }
        txn.commit()?;
        tracing::info!(user, access_key = %issued.access_key, "issued an S3 access key");
        Ok(issued)
    }

    /// Every S3 user with its active access keys, by name.
    ///
    /// # Errors
    /// Database errors.
    pub fn list_s3_users(&self) -> Result<Vec<S3User>> {
        let read = self.db.begin_read()?;
        // By name (the table's order).
        let mut users = std::collections::BTreeMap::new();
        for entry in read.open_table(S3_USERS)?.iter()? {
            let (k, v) = entry?;
            let name = k.value().to_string();
            users.insert(
                name.clone(),
                S3User {
                    name,
                    created_unix_ms: v.value(),
                    access_keys: Vec::new(),
                },
            );
        }
        let mut keys = Vec::new();
        for entry in read.open_table(S3_ACCESS_KEYS)?.iter()? {
            let (_, v) = entry?;
            keys.push(decode_key(v.value())?);
        }
        keys.sort_by_key(|k| k.created_unix_ms);
        for k in keys {
            if let Some(u) = users.get_mut(&k.user) {
                u.access_keys.push(k.access_key);
            }
        }
        Ok(users.into_values().collect())
    }

    /// Revokes `access_key`: requests signed with it fail from then on (the
    /// gateway asks the om for the secret on every signed request). The user
    /// and its buckets stay. Returns the user the key belonged to.
    ///
    /// # Errors
    /// [`OmError::AccessKeyNotFound`]; database errors.
    pub fn revoke_s3_key(&self, access_key: &str) -> Result<String> {
        let txn = self.db.begin_write()?;
        let user = {
            let mut keys = txn.open_table(S3_ACCESS_KEYS)?;
            let removed = keys.remove(access_key)?;
            let record =
                removed.ok_or_else(|| OmError::AccessKeyNotFound(access_key.to_string()))?;
            decode_key(record.value())?.user
        };
        txn.commit()?;
        tracing::info!(user, access_key, "revoked an S3 access key");
        Ok(user)
    }

    /// The user and secret of `access_key`.
    ///
    /// # Errors
    /// [`OmError::AccessKeyNotFound`]; database errors.
    pub fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        let read = self.db.begin_read()?;
        let t = read.open_table(S3_ACCESS_KEYS)?;
        let v = t
            .get(access_key)?
            .ok_or_else(|| OmError::AccessKeyNotFound(access_key.to_string()))?;
        let r = decode_key(v.value())?;
        Ok((r.user, r.secret_key))
    }

    /// Replaces bucket `name`'s canned ACL (S3 PutBucketAcl), in one
    /// transaction.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<BucketInfo> {
        let txn = self.db.begin_write()?;
        let info = {
            let mut t = txn.open_table(BUCKETS)?;
            let mut info: BucketInfo = {
                let v = t
                    .get(name)?
                    .ok_or_else(|| OmError::BucketNotFound(name.to_string()))?;
                decode::<pb::BucketInfo, _>(v.value(), "bucket")?
            };
            info.acl = acl;
            t.insert(
                name,
                pb::BucketInfo::from(info.clone())
                    .encode_to_vec()
                    .as_slice(),
            )?;
            info
        };
        txn.commit()?;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OmConfig;

    fn om() -> (tempfile::TempDir, OzoneManager) {
        let dir = tempfile::tempdir().expect("temp dir");
        let om = OzoneManager::open(OmConfig::new(dir.path())).expect("open the om");
        (dir, om)
    }

    #[test]
    fn keys_are_issued_listed_looked_up_and_revoked() {
        let (_dir, om) = om();
        let a = om.create_s3_key("alice").expect("issue a key");
        assert_eq!(a.access_key.len(), 20);
        assert!(a.access_key.starts_with("OZ"));
        assert_eq!(a.secret_key.len(), 40);
        let a2 = om.create_s3_key("alice").expect("issue a key");
        assert_ne!(a.access_key, a2.access_key);
        assert_ne!(a.secret_key, a2.secret_key);
        assert_eq!(
            om.s3_secret(&a.access_key).expect("the om call"),
            ("alice".to_string(), a.secret_key.clone())
        );
        // A third key is refused: the bound holds.
        assert!(matches!(
            om.create_s3_key("alice"),
            Err(OmError::LimitExceeded(_))
        ));
        let users = om.list_s3_users().expect("the om call");
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].access_keys.len(), 2);
        assert_eq!(
            om.revoke_s3_key(&a.access_key).expect("the om call"),
            "alice"
        );
        assert!(matches!(
            om.s3_secret(&a.access_key),
            Err(OmError::AccessKeyNotFound(_))
        ));
        assert!(matches!(
            om.revoke_s3_key(&a.access_key),
            Err(OmError::AccessKeyNotFound(_))
        ));
        assert_eq!(
            om.list_s3_users().expect("the om call")[0].access_keys,
            vec![a2.access_key.clone()]
        );
        // After a revocation the user may hold a new key.
        om.create_s3_key("alice").expect("issue a key");
    }

    #[test]
    fn bad_user_names_are_refused() {
        let (_dir, om) = om();
        for bad in ["", "a b", "ü", &"x".repeat(65), "a/b", RESERVED_USER] {
            assert!(
                matches!(om.create_s3_key(bad), Err(OmError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(om.list_s3_users().expect("the om call").is_empty());
    }

    #[test]
    fn users_and_keys_survive_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let k = {
            let om = OzoneManager::open(OmConfig::new(dir.path())).expect("open the om");
            om.create_s3_key("bob").expect("issue a key")
        };
        let om = OzoneManager::open(OmConfig::new(dir.path())).expect("open the om");
        assert_eq!(
            om.s3_secret(&k.access_key).expect("the om call").1,
            k.secret_key
        );
    }

    #[test]
    fn bucket_acls_are_stored_with_the_owner() {
        let (_dir, om) = om();
        let b = om
            .create_bucket_as("b1", None, None, "alice", CannedAcl::Private)
            .expect("the om call");
        assert_eq!((b.owner.as_str(), b.acl), ("alice", CannedAcl::Private));
        om.set_bucket_acl("b1", CannedAcl::PublicRead)
            .expect("the om call");
        let b = om.get_bucket("b1").expect("the om call");
        assert_eq!((b.owner.as_str(), b.acl), ("alice", CannedAcl::PublicRead));
        assert!(matches!(
            om.set_bucket_acl("nope", CannedAcl::PublicRead),
            Err(OmError::BucketNotFound(_))
        ));
    }
}
