//! Which record a block group belongs to — a committed key, or a part of a multipart upload in
//! progress — and reading or rewriting one group of it inside a transaction. Repair works on
//! both: a part's blocks are as exposed to a lost datanode as a key's, and an upload may stay
//! open for days before it completes (S3 sets no limit).

use std::fmt;

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{BlockGroup, KeyInfo, PartInfo, ReplicationConfig};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::manager::{KEYS, decode};
use crate::upload_rows::{PARTS, UPLOADS};
use crate::{OmError, OzoneManager};

/// The record holding a block group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum GroupOwner {
    /// The committed key `bucket/key`.
    Key { bucket: String, key: String },
    /// Part `part_number` of the multipart upload `upload_id` (in progress).
    Part { upload_id: String, part_number: u32 },
}

impl fmt::Display for GroupOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key { bucket, key } => write!(f, "{bucket}/{key}"),
            Self::Part {
                upload_id,
                part_number,
            } => write!(f, "part {part_number} of upload {upload_id}"),
        }
    }
}

impl GroupOwner {
    /// The key `bucket/key`.
    pub(crate) fn key(bucket: &str, key: &str) -> Self {
        Self::Key {
            bucket: bucket.to_string(),
            key: key.to_string(),
        }
    }

    fn gone(&self) -> OmError {
        match self {
            Self::Key { bucket, key } => OmError::KeyNotFound {
                bucket: bucket.clone(),
                key: key.clone(),
            },
            Self::Part { upload_id, .. } => OmError::NoSuchUpload(upload_id.clone()),
        }
    }

    /// Reads the owner's record from `keys`, or `uploads` and `parts` (tables of a read or
    /// a write transaction): its replication and groups. `None` when the record (or the
    /// part) is gone.
    fn fetch(
        &self,
        keys: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
        uploads: &impl ReadableTable<&'static str, &'static [u8]>,
        parts: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
    ) -> Result<Option<Loaded>, OmError> {
        match self {
            Self::Key { bucket, key } => {
                let Some(v) = keys.get((bucket.as_str(), key.as_str()))? else {
                    return Ok(None);
                };
                let k: KeyInfo = decode::<pb::KeyInfo, _>(v.value(), "key")?;
                Ok(Some(Loaded {
                    replication: k.replication,
                    groups: k.block_groups.clone(),
                    record: Record::Key(k),
                }))
            }
            Self::Part {
                upload_id,
                part_number,
            } => {
                let Some(u) = crate::upload_rows::header(uploads, upload_id)? else {
                    return Ok(None);
                };
                let Some(p) = crate::upload_rows::part(parts, upload_id, *part_number)? else {
                    return Ok(None);
                };
                Ok(Some(Loaded {
                    replication: u.replication,
                    groups: p.block_groups.clone(),
                    record: Record::Part(u.upload_id, p),
                }))
            }
        }
    }

    fn load(&self, txn: &WriteTransaction) -> Result<Option<Loaded>, OmError> {
        self.fetch(
            &txn.open_table(KEYS)?,
            &txn.open_table(UPLOADS)?,
            &txn.open_table(PARTS)?,
        )
    }

    /// The replication and group `group` (from 0) of the owner, read in `txn`.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`] / [`OmError::NoSuchUpload`] when the record is gone;
    /// [`OmError::InvalidArgument`] for a group it does not have; database errors.
    pub(crate) fn group(
        &self,
        txn: &WriteTransaction,
        group: usize,
    ) -> Result<(ReplicationConfig, BlockGroup), OmError> {
        self.load(txn)?
            .ok_or_else(|| self.gone())?
            .pick(self, group)
    }

    /// Runs `change` on group `group` of the owner and writes the record back, in `txn`.
    ///
    /// # Errors
    /// As [`group`](Self::group), and whatever `change` returns (nothing is written then);
    /// [`OmError::Busy`] for a part of an upload a completion is reading.
    pub(crate) fn update_group<T>(
        &self,
        txn: &WriteTransaction,
        group: usize,
        change: impl FnOnce(&mut BlockGroup) -> Result<T, OmError>,
    ) -> Result<T, OmError> {
        let mut loaded = self.load(txn)?.ok_or_else(|| self.gone())?;
        // A completion reading the upload's parts holds them: the key it writes would carry
        // the locations it read, not this change.
        if let Record::Part(upload_id, _) = &loaded.record {
            crate::upload_rows::parts_writable(txn, upload_id, crate::manager::now_ms())?;
        }
        let count = loaded.groups.len();
        let g = loaded.groups.get_mut(group).ok_or_else(|| {
            OmError::InvalidArgument(format!("{self} has {count} block groups, no group {group}"))
        })?;
        let out = change(g)?;
        match loaded.record {
            Record::Key(mut k) => {
                k.block_groups = loaded.groups;
                let (bucket, name) = (k.bucket.clone(), k.name.clone());
                txn.open_table(KEYS)?.insert(
                    (bucket.as_str(), name.as_str()),
                    pb::KeyInfo::from(k).encode_to_vec().as_slice(),
                )?;
            }
            Record::Part(upload_id, mut p) => {
                p.block_groups = loaded.groups;
                crate::upload_rows::put_part(txn, &upload_id, &p)?;
            }
        }
        Ok(out)
    }
}

/// A record as read, to write back.
enum Record {
    Key(KeyInfo),
    /// The upload id and the part read.
    Part(String, PartInfo),
}

struct Loaded {
    replication: ReplicationConfig,
    groups: Vec<BlockGroup>,
    record: Record,
}

impl Loaded {
    /// The replication and group `group` (from 0) of `owner`'s record.
    fn pick(
        self,
        owner: &GroupOwner,
        group: usize,
    ) -> Result<(ReplicationConfig, BlockGroup), OmError> {
        let count = self.groups.len();
        let g = self.groups.into_iter().nth(group).ok_or_else(|| {
            OmError::InvalidArgument(format!(
                "{owner} has {count} block groups, no group {group}"
            ))
        })?;
        Ok((self.replication, g))
    }
}

impl OzoneManager {
    /// The replication and group `group` of `owner`, as recorded now.
    ///
    /// # Errors
    /// As [`GroupOwner::group`].
    pub(crate) fn owned_group(
        &self,
        owner: &GroupOwner,
        group: usize,
    ) -> Result<(ReplicationConfig, BlockGroup), OmError> {
        let read = self.db.begin_read()?;
        let loaded = owner
            .fetch(
                &read.open_table(KEYS)?,
                &read.open_table(UPLOADS)?,
                &read.open_table(PARTS)?,
            )?
            .ok_or_else(|| owner.gone())?;
        let (replication, mut g) = loaded.pick(owner, group)?;
        self.current_addresses(std::iter::once(&mut g));
        Ok((replication, g))
    }
}
