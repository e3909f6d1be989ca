//! Which record a block group belongs to — a committed key, or a part of a multipart upload in
//! progress — and reading or rewriting one group of it inside a transaction. Repair works on
//! both: a part's blocks are as exposed to a lost datanode as a key's, and an upload may stay
//! open for days before it completes (S3 sets no limit).

use std::fmt;

use meta_store::Transaction;
use proto_crate::{BlockGroup, KeyInfo, PartInfo, ReplicationConfig};

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

    /// Reads the owner's record as `tx` sees it: its replication and groups. `None` when the
    /// record (or the part) is gone.
    async fn fetch(&self, tx: &Transaction) -> Result<Option<Loaded>, OmError> {
        match self {
            Self::Key { bucket, key } => {
                let Some(k) = crate::keys::key_in(tx, bucket, key).await? else {
                    return Ok(None);
                };
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
                let Some(u) = crate::upload_rows::header_in(tx, upload_id).await? else {
                    return Ok(None);
                };
                let Some(p) = crate::upload_rows::part_in(tx, upload_id, *part_number).await?
                else {
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

    /// The replication and group `group` (from 0) of the owner, read in `tx`.
    ///
    /// # Errors
    /// [`OmError::KeyNotFound`] / [`OmError::NoSuchUpload`] when the record is gone;
    /// [`OmError::InvalidArgument`] for a group it does not have; store errors.
    pub(crate) async fn group(
        &self,
        tx: &Transaction,
        group: usize,
    ) -> Result<(ReplicationConfig, BlockGroup), OmError> {
        self.fetch(tx)
            .await?
            .ok_or_else(|| self.gone())?
            .pick(self, group)
    }

    /// The owner's record read in `tx`, to change one group of and write back
    /// ([`Loaded::write_back`]).
    ///
    /// # Errors
    /// As [`group`](Self::group); [`OmError::Busy`] for a part of an upload a completion is
    /// reading (the key it writes would carry the locations it read, not this change).
    pub(crate) async fn load_for_update(&self, tx: &Transaction) -> Result<Loaded, OmError> {
        let loaded = self.fetch(tx).await?.ok_or_else(|| self.gone())?;
        if let Record::Part(upload_id, _) = &loaded.record {
            crate::upload_rows::parts_writable(tx, upload_id, crate::manager::now_ms()).await?;
        }
        Ok(loaded)
    }
}

/// A record as read, to write back.
enum Record {
    Key(KeyInfo),
    /// The upload id and the part read.
    Part(String, PartInfo),
}

pub(crate) struct Loaded {
    replication: ReplicationConfig,
    groups: Vec<BlockGroup>,
    record: Record,
}

impl Loaded {
    /// Group `group` (from 0) of `owner`'s record, to change.
    ///
    /// # Errors
    /// [`OmError::InvalidArgument`] for a group the record does not have.
    pub(crate) fn group_mut(
        &mut self,
        owner: &GroupOwner,
        group: usize,
    ) -> Result<&mut BlockGroup, OmError> {
        let count = self.groups.len();
        self.groups.get_mut(group).ok_or_else(|| {
            OmError::InvalidArgument(format!(
                "{owner} has {count} block groups, no group {group}"
            ))
        })
    }

    /// Writes the record back in `tx` with its groups as changed (a key keeps its generation).
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn write_back(self, tx: &Transaction) -> Result<(), OmError> {
        match self.record {
            Record::Key(mut k) => {
                k.block_groups = self.groups;
                crate::keys::put_key_in(tx, &k);
            }
            Record::Part(upload_id, mut p) => {
                p.block_groups = self.groups;
                crate::upload_rows::put_part_in(tx, &upload_id, &p).await?;
            }
        }
        Ok(())
    }

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
    pub(crate) async fn owned_group(
        &self,
        owner: &GroupOwner,
        group: usize,
    ) -> Result<(ReplicationConfig, BlockGroup), OmError> {
        let (replication, mut g) = meta_store::transact(&self.store, |tx| {
            Box::pin(async move { owner.group(&tx, group).await })
        })
        .await?
        .value;
        self.current_addresses(std::iter::once(&mut g));
        Ok((replication, g))
    }
}
