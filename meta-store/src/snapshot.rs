//! [`Snapshot`]: many reads at one revision, so that a scan of several tables in pages
//! (the om's orphan sweep, the ReplicationManager's scan of uploads then keys) sees one
//! consistent state, as a redb read transaction does.
//!
//! On etcd a snapshot is a revision: every read names it (etcd's `Range` with `revision`),
//! and answers from the store's history until that history is compacted
//! ([`MetaStore::compact_history`]), after which a read fails with
//! [`StoreError::Compacted`] and the caller starts again on a new snapshot. On redb a
//! snapshot holds one read transaction open (redb keeps the pages it reads until it is
//! dropped, so a snapshot should not outlive the scan it serves).

use std::sync::Arc;

use crate::{Entry, EtcdStore, MetaStore, Page, StoreError, prefix_end};

/// A consistent view of the store at one revision, read in pages. Cheap to clone.
#[derive(Clone)]
pub struct Snapshot {
    revision: u64,
    at: At,
}

#[derive(Clone)]
enum At {
    Redb(Arc<redb::ReadTransaction>),
    Etcd(EtcdStore),
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

impl MetaStore {
    /// A snapshot of the store as it is now.
    ///
    /// # Errors
    /// The back end's errors.
    pub async fn snapshot(&self) -> Result<Snapshot, StoreError> {
        match self {
            Self::Redb(s) => {
                let (read, revision) = s.begin_snapshot().await?;
                Ok(Snapshot {
                    revision,
                    at: At::Redb(read),
                })
            }
            Self::Etcd(s) => Ok(Snapshot {
                revision: s.revision().await?,
                at: At::Etcd(s.clone()),
            }),
        }
    }
}

impl Snapshot {
    /// The revision every read of this snapshot answers at.
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The entry at `key` as of the snapshot.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; [`StoreError::Compacted`] on etcd once the snapshot's
    /// history is compacted; the back end's errors.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Entry>, StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        match &self.at {
            At::Redb(read) => {
                let (read, key) = (Arc::clone(read), key.to_vec());
                tokio::task::spawn_blocking(move || crate::redb_store::get_in(&read, key)).await?
            }
            At::Etcd(s) => s.get_at(key, Some(self.revision)).await,
        }
    }

    /// Entries with `start <= key < end` as of the snapshot, as
    /// [`MetaStore::range`] reads them now; [`Page::revision`] is the snapshot's.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub async fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = crate::range_limit(start, limit)?;
        match &self.at {
            At::Redb(read) => {
                let read = Arc::clone(read);
                let (start, end) = (start.to_vec(), end.map(<[u8]>::to_vec));
                tokio::task::spawn_blocking(move || {
                    crate::redb_store::range_in(&read, &start, end.as_deref(), limit)
                })
                .await?
            }
            At::Etcd(s) => s.range_at(start, end, limit, Some(self.revision)).await,
        }
    }

    /// The entries whose key starts with `prefix` (not empty), as [`range`](Self::range).
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub async fn scan_prefix(&self, prefix: &[u8], limit: usize) -> Result<Page, StoreError> {
        let end = prefix_end(prefix);
        self.range(prefix, end.as_deref(), limit).await
    }
}
