//! Key-level domain types: keys, buckets and multipart uploads, with their
//! wire conversions (`TryFrom` from the wire, `From` to it).

use std::collections::BTreeMap;

use crate::ProtocolError;
use crate::domain::{BlockGroup, ReplicationConfig};
use crate::wire::om;

/// A committed key: its length, replication and block groups in key order
/// (Ozone's `OmKeyInfo` with its `OmKeyLocationInfo`s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// Bucket name.
    pub bucket: String,
    /// Key name.
    pub name: String,
    /// Total data bytes; equals the sum of the groups' lengths.
    pub length: u64,
    /// How the key was written.
    pub replication: ReplicationConfig,
    /// Block groups in key order.
    pub block_groups: Vec<BlockGroup>,
    /// Size bound of each internal block, bytes.
    pub block_size: u64,
    /// Commit time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Free-form object metadata (etag, content type, user metadata).
    pub metadata: BTreeMap<String, String>,
    /// Changes at every commit of the key (Ozone's `updateID`): the metadata store's
    /// revision of the commit that made it, unique and increasing across all keys (keys
    /// committed before the om kept the store keep the counter value they had, all below
    /// every later one). What [`WriteCondition::Generation`] compares; 0 only inside the om,
    /// before a commit has its revision.
    pub generation: u64,
}

/// A condition a key's commit or deletion must meet, checked by the om in the same
/// transaction as the change: S3's conditional writes (`If-None-Match: *`, `If-Match`), and
/// object_store's `PutMode::Create` / `PutMode::Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCondition {
    /// The key must not exist.
    NotExists,
    /// The key must exist with this [`KeyInfo::generation`].
    Generation(u64),
}

impl From<WriteCondition> for om::WriteCondition {
    fn from(c: WriteCondition) -> Self {
        use om::write_condition::Kind;
        Self {
            kind: Some(match c {
                WriteCondition::NotExists => Kind::NotExists(true),
                WriteCondition::Generation(g) => Kind::Generation(g),
            }),
        }
    }
}

impl TryFrom<om::WriteCondition> for WriteCondition {
    type Error = ProtocolError;
    fn try_from(c: om::WriteCondition) -> Result<Self, ProtocolError> {
        use om::write_condition::Kind;
        match c.kind {
            Some(Kind::NotExists(true)) => Ok(Self::NotExists),
            Some(Kind::Generation(g)) => Ok(Self::Generation(g)),
            Some(Kind::NotExists(false)) | None => {
                Err(ProtocolError::MissingField("condition.kind"))
            }
        }
    }
}

impl TryFrom<om::KeyInfo> for KeyInfo {
    type Error = ProtocolError;
    fn try_from(k: om::KeyInfo) -> Result<Self, ProtocolError> {
        let block_groups: Vec<BlockGroup> = k
            .block_groups
            .into_iter()
            .map(BlockGroup::try_from)
            .collect::<Result<_, _>>()?;
        let sum = block_groups
            .iter()
            .try_fold(0u64, |acc, g| acc.checked_add(g.length));
        if sum != Some(k.length) {
            return Err(ProtocolError::InvalidField {
                field: "key.length",
                reason: format!(
                    "key length {} differs from the sum of its block groups ({sum:?})",
                    k.length
                ),
            });
        }
        Ok(Self {
            bucket: k.bucket,
            name: k.name,
            length: k.length,
            replication: k.replication.parse()?,
            block_groups,
            block_size: k.block_size,
            created_unix_ms: k.created_unix_ms,
            metadata: k.metadata.into_iter().collect(),
            generation: k.generation,
        })
    }
}

impl From<KeyInfo> for om::KeyInfo {
    fn from(k: KeyInfo) -> Self {
        Self {
            bucket: k.bucket,
            name: k.name,
            length: k.length,
            replication: k.replication.to_string(),
            block_groups: k.block_groups.into_iter().map(Into::into).collect(),
            block_size: k.block_size,
            created_unix_ms: k.created_unix_ms,
            metadata: k.metadata.into_iter().collect(),
            generation: k.generation,
        }
    }
}

/// Metadata key under which a key completed from a multipart upload records
/// its parts' sizes in bytes, comma-separated in part order (the om writes
/// it at completion; S3 GET `?partNumber=N` reads it).
pub const MULTIPART_PART_SIZES_KEY: &str = "mpu-part-sizes";

/// The names under which a key's [`KeyInfo::metadata`] holds what an object
/// store keeps beside the bytes, shared by every front end (the S3 gateway and
/// the object_store adapter write and read the same entries, so an object
/// written through one shows its content type, user metadata and tags through
/// the other). Source: Amazon S3 User Guide, "Working with object metadata"
/// (system-defined and user-defined metadata) and "Categorizing your storage
/// using tags".
pub mod object_metadata {
    /// The object's S3 ETag (hex MD5, or the multipart form `hex-N`), when an
    /// S3 PUT, Copy or Complete recorded one.
    pub const ETAG: &str = "etag";
    /// `Content-Type`.
    pub const CONTENT_TYPE: &str = "content-type";
    /// `Cache-Control`.
    pub const CACHE_CONTROL: &str = "cache-control";
    /// `Content-Disposition`.
    pub const CONTENT_DISPOSITION: &str = "content-disposition";
    /// `Content-Encoding`.
    pub const CONTENT_ENCODING: &str = "content-encoding";
    /// `Content-Language`.
    pub const CONTENT_LANGUAGE: &str = "content-language";
    /// `Expires` (an HTTP date).
    pub const EXPIRES: &str = "expires";
    /// Prefix of user-defined metadata (`x-amz-meta-NAME`, the name in lower case).
    pub const USER_METADATA_PREFIX: &str = "x-amz-meta-";
    /// Prefix of object tags (`tag:KEY` → value).
    pub const TAG_PREFIX: &str = "tag:";
    /// Prefix of the object's access control entries (only [`CANNED_ACL`]).
    pub const ACL_PREFIX: &str = "acl:";
    /// The object's canned ACL ([`CannedAcl::name`](crate::CannedAcl::name));
    /// absent means `private`.
    pub const CANNED_ACL: &str = "acl:canned";
}

/// An S3 canned ACL (Amazon S3 User Guide, "Canned ACL"): the grants a
/// bucket or object carries besides its owner's FULL_CONTROL. Only the
/// forms that grant reads are modelled; writes always need the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CannedAcl {
    /// The owner only (the default).
    #[default]
    Private,
    /// Everyone, anonymous requests included, may read.
    PublicRead,
    /// Every authenticated user may read.
    AuthenticatedRead,
}

impl CannedAcl {
    /// Every canned ACL modelled here.
    pub const ALL: [CannedAcl; 3] = [Self::Private, Self::PublicRead, Self::AuthenticatedRead];

    /// The name S3 uses in `x-amz-acl` (`private`, `public-read`,
    /// `authenticated-read`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::PublicRead => "public-read",
            Self::AuthenticatedRead => "authenticated-read",
        }
    }

    /// The ACL named `name` (as [`name`](Self::name) spells it, ASCII case
    /// ignored; empty means `private`, as stored for buckets that predate
    /// ACLs).
    ///
    /// # Errors
    /// [`ProtocolError::InvalidField`] (field `acl`) for any other name
    /// (`public-read-write` and the `bucket-owner-*` forms are not modelled).
    pub fn parse(name: &str) -> Result<Self, ProtocolError> {
        let n = name.trim();
        if n.is_empty() {
            return Ok(Self::Private);
        }
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(n))
            .ok_or_else(|| ProtocolError::InvalidField {
                field: "acl",
                reason: format!("unsupported canned ACL {name:?}"),
            })
    }

    /// Whether this ACL lets a requester read: `authenticated` is false for
    /// an anonymous (unsigned) request. The owner is not asked about here.
    #[must_use]
    pub fn grants_read(self, authenticated: bool) -> bool {
        match self {
            Self::Private => false,
            Self::PublicRead => true,
            Self::AuthenticatedRead => authenticated,
        }
    }
}

impl std::fmt::Display for CannedAcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One uploaded part of a multipart upload (S3's part; its data lives in
/// block groups that become the key's when the upload completes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartInfo {
    /// 1..=10000.
    pub part_number: u32,
    /// The part's ETag (hex MD5 of its bytes, without quotes).
    pub etag: String,
    /// Bytes in the part; equals the sum of its groups' lengths.
    pub size: u64,
    /// Block groups holding the part, in order.
    pub block_groups: Vec<BlockGroup>,
    /// Upload time, milliseconds since the Unix epoch.
    pub modified_unix_ms: u64,
    /// Free-form part metadata (the S3 gateway keeps the part's checksum here).
    pub metadata: BTreeMap<String, String>,
}

impl TryFrom<om::PartInfo> for PartInfo {
    type Error = ProtocolError;
    fn try_from(p: om::PartInfo) -> Result<Self, ProtocolError> {
        Ok(Self {
            part_number: p.part_number,
            etag: p.etag,
            size: p.size,
            block_groups: p
                .block_groups
                .into_iter()
                .map(BlockGroup::try_from)
                .collect::<Result<_, _>>()?,
            modified_unix_ms: p.modified_unix_ms,
            metadata: p.metadata.into_iter().collect(),
        })
    }
}

impl From<PartInfo> for om::PartInfo {
    fn from(p: PartInfo) -> Self {
        Self {
            part_number: p.part_number,
            etag: p.etag,
            size: p.size,
            block_groups: p.block_groups.into_iter().map(Into::into).collect(),
            modified_unix_ms: p.modified_unix_ms,
            metadata: p.metadata.into_iter().collect(),
        }
    }
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUpload {
    /// Opaque id.
    pub upload_id: String,
    /// Bucket.
    pub bucket: String,
    /// Key the upload becomes.
    pub key: String,
    /// Replication of every part.
    pub replication: ReplicationConfig,
    /// Initiation time, milliseconds since the Unix epoch.
    pub initiated_unix_ms: u64,
    /// Uploaded parts by part number (empty in listings of uploads).
    pub parts: Vec<PartInfo>,
    /// Metadata the key gets at completion.
    pub metadata: BTreeMap<String, String>,
}

impl TryFrom<om::MultipartUploadInfo> for MultipartUpload {
    type Error = ProtocolError;
    fn try_from(u: om::MultipartUploadInfo) -> Result<Self, ProtocolError> {
        Ok(Self {
            upload_id: u.upload_id,
            bucket: u.bucket,
            key: u.key,
            replication: u.replication.parse()?,
            initiated_unix_ms: u.initiated_unix_ms,
            parts: u
                .parts
                .into_iter()
                .map(PartInfo::try_from)
                .collect::<Result<_, _>>()?,
            metadata: u.metadata.into_iter().collect(),
        })
    }
}

impl From<MultipartUpload> for om::MultipartUploadInfo {
    fn from(u: MultipartUpload) -> Self {
        Self {
            upload_id: u.upload_id,
            bucket: u.bucket,
            key: u.key,
            replication: u.replication.to_string(),
            initiated_unix_ms: u.initiated_unix_ms,
            parts: u.parts.into_iter().map(Into::into).collect(),
            metadata: u.metadata.into_iter().collect(),
        }
    }
}

/// A bucket and its defaults for new keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInfo {
    /// Bucket name.
    pub name: String,
    /// Replication of keys that do not name their own.
    pub default_replication: ReplicationConfig,
    /// Internal block size of new keys, bytes.
    pub block_size: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The S3 user who owns the bucket; empty for a bucket created outside
    /// S3 (the `ozone` CLI, `ec-client`), which only administrators reach
    /// through the gateway.
    pub owner: String,
    /// Who besides the owner may list the bucket.
    pub acl: CannedAcl,
}

impl TryFrom<om::BucketInfo> for BucketInfo {
    type Error = ProtocolError;
    fn try_from(b: om::BucketInfo) -> Result<Self, ProtocolError> {
        Ok(Self {
            name: b.name,
            default_replication: b.default_replication.parse()?,
            block_size: b.block_size,
            created_unix_ms: b.created_unix_ms,
            owner: b.owner,
            acl: CannedAcl::parse(&b.acl)?,
        })
    }
}

impl From<BucketInfo> for om::BucketInfo {
    fn from(b: BucketInfo) -> Self {
        Self {
            name: b.name,
            default_replication: b.default_replication.to_string(),
            block_size: b.block_size,
            created_unix_ms: b.created_unix_ms,
            owner: b.owner,
            acl: b.acl.name().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_info_rejects_length_mismatch() {
        let k = om::KeyInfo {
            bucket: "b".into(),
            name: "k".into(),
            length: 10,
            replication: "rs-3-2-1024k".into(),
            block_groups: vec![om::BlockGroup {
                length: 9,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(KeyInfo::try_from(k).is_err());
    }

    #[test]
    fn multipart_upload_round_trips() {
        let part = PartInfo {
            part_number: 2,
            etag: "abc".into(),
            size: 7,
            block_groups: vec![BlockGroup {
                container_id: 1,
                local_id: 2,
                length: 7,
                pipeline: crate::Pipeline::default(),
                token: None,
            }],
            modified_unix_ms: 5,
            metadata: BTreeMap::from([("checksum".to_string(), "x".to_string())]),
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("content-type".to_string(), "x/y".to_string());
        let upload = MultipartUpload {
            upload_id: "u".into(),
            bucket: "b".into(),
            key: "k".into(),
            replication: ReplicationConfig::Replicated { factor: 3 },
            initiated_unix_ms: 9,
            parts: vec![part],
            metadata,
        };
        let back = MultipartUpload::try_from(om::MultipartUploadInfo::from(upload.clone()))
            .expect("valid wire message");
        assert_eq!(back, upload);
        let bad = om::MultipartUploadInfo {
            replication: "rs-0-0-0k".into(),
            ..Default::default()
        };
        assert!(MultipartUpload::try_from(bad).is_err());
    }
}
