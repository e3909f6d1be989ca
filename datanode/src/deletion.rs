//! Block deletion on the datanode (the DeleteBlocks command the om's block
//! deletion service sends, as SCM's DeletedBlockLog drives Ozone datanodes).
//!
//! Deleting a batch: each block's write state is marked deleted under its
//! write lock (a write in progress finishes first; later ones are refused);
//! one durable transaction, on the blocking pool, removes the blocks'
//! metadata and records a tombstone per block; then the files are removed
//! and their cached read handles dropped. A crash between the commit and the
//! removals is finished at the next start ([`ContainerStore::open_with`]
//! removes the files of tombstoned blocks). Deletion is idempotent: a block
//! that is not here (never written, or deleted before) counts as deleted.
//! Tombstones make later writes to the block fail with
//! [`DatanodeError::BlockDeleted`]; they are pruned after
//! [`TOMBSTONE_TTL_MS`](crate::storage::TOMBSTONE_TTL_MS).

use std::sync::atomic::Ordering;

use proto_crate::BlockId;

use crate::DatanodeError;
use crate::storage::{
    BLOCKS, BlockKey, CLOSED, ContainerStore, DELETED, OpenBlock, TOMBSTONE_TTL_MS, blocking, key,
};

type Result<T, E = DatanodeError> = std::result::Result<T, E>;

/// Tombstones are pruned at most this often, ms.
const PRUNE_EVERY_MS: u64 = 10 * 60 * 1000;

/// Most blocks one DeleteBlocks call may name.
pub const MAX_DELETE_BATCH: usize = 10_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ContainerStore {
    /// Deletes the blocks `ids` (container id and local id; the replica
    /// index is ignored, a datanode holds one replica of a block): metadata,
    /// file and cached handle. Returns how many of them held data here.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] for more than [`MAX_DELETE_BATCH`]
    /// blocks; database errors (nothing is deleted then); I/O errors removing
    /// files (the metadata is gone and the removal is retried at restart).
    pub async fn delete_blocks(&self, ids: &[BlockId]) -> Result<u64> {
        if ids.len() > MAX_DELETE_BATCH {
            return Err(DatanodeError::InvalidArgument(format!(
                "DeleteBlocks names {} blocks; at most {MAX_DELETE_BATCH} per call",
                ids.len()
            )));
        }
        let mut keys: Vec<BlockKey> = ids.iter().map(|b| key(*b)).collect();
        keys.sort_unstable();
        keys.dedup();
        // Mark every block deleted under its write lock before anything
        // else: a block without write state gets a placeholder that is
        // already deleted (no stat or database read here), an existing one
        // is locked (waiting out a write in progress) and marked. From then
        // on every WriteChunk/PutBlock of these blocks is refused, even
        // before the tombstones commit.
        let handles: Vec<_> = {
            let mut open = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            keys.iter()
                .map(|k| {
                    std::sync::Arc::clone(open.entry(*k).or_insert_with(|| {
                        std::sync::Arc::new(tokio::sync::Mutex::new(OpenBlock::deleted()))
                    }))
                })
                .collect()
        };
        for h in &handles {
            h.lock().await.deleted = true;
        }
        let now = now_ms();
        let prune = now.saturating_sub(self.last_prune_ms.load(Ordering::Relaxed)) > PRUNE_EVERY_MS;
        let db = std::sync::Arc::clone(&self.db);
        let batch = keys.clone();
        blocking(move || {
            let txn = db.begin_write()?;
            {
                let mut blocks = txn.open_table(BLOCKS)?;
                let mut closed = txn.open_table(CLOSED)?;
                let mut deleted = txn.open_table(DELETED)?;
                if prune {
                    let cutoff = now.saturating_sub(TOMBSTONE_TTL_MS);
                    deleted.retain(|_, at| at >= cutoff)?;
                }
                for k in &batch {
                    blocks.remove(k)?;
                    closed.remove(k)?;
                    deleted.insert(k, now)?;
                }
            }
            txn.commit()?;
            Ok(())
        })
        .await?;
        if prune {
            self.last_prune_ms.store(now, Ordering::Relaxed);
        }
        let mut held = 0u64;
        {
            let mut committed = self
                .committed
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for k in &keys {
                if let Some(d) = committed.remove(k) {
                    held += 1;
                    self.used_bytes.fetch_sub(d.size, Ordering::Relaxed);
                }
            }
        }
        {
            // The write states go; a later write re-reads the tombstone.
            let mut open = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for k in &keys {
                open.remove(k);
            }
        }
        for &k in &keys {
            self.files.remove(k);
            self.fine.remove(k);
        }
        // Unlinking is disk I/O: on the blocking pool.
        let paths: Vec<std::path::PathBuf> = keys
            .iter()
            .flat_map(|&(c, l)| [self.path_of(c, l), self.fine_path_of(c, l)])
            .collect();
        blocking(move || paths.iter().try_for_each(|p| remove_file(p))).await?;
        Ok(held)
    }

    /// Lifts the tombstone of block `b`, if it has one, so that it can be written again.
    /// Called for the first write of a repair the om ordered (the om is making this datanode
    /// the block's holder again, e.g. after an earlier failed rebuild here was cleaned up); a
    /// key writer's writes never call it. Returns whether a tombstone was lifted.
    ///
    /// # Errors
    /// Database errors.
    pub async fn revive(&self, b: BlockId) -> Result<bool> {
        let k = key(b);
        let db = std::sync::Arc::clone(&self.db);
        let lifted = blocking(move || {
            if redb::ReadableDatabase::begin_read(&*db)?
                .open_table(DELETED)?
                .get(k)?
                .is_none()
            {
                return Ok(false);
            }
            let txn = db.begin_write()?;
            let lifted = txn.open_table(DELETED)?.remove(k)?.is_some();
            txn.commit()?;
            Ok(lifted)
        })
        .await?;
        if lifted {
            // The cached write state says "deleted"; the next write re-reads it.
            self.open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&k);
            tracing::info!(block = %b, "tombstone lifted for a reconstruction");
        }
        Ok(lifted)
    }

    /// Removes the file of a block and its fine checksums, if there are.
    pub(crate) fn remove_block_file(&self, container_id: u64, local_id: u64) -> Result<()> {
        remove_file(&self.path_of(container_id, local_id))?;
        remove_file(&self.fine_path_of(container_id, local_id))
    }
}

/// Removes `path`; a file that is not there is fine (deletion is idempotent).
fn remove_file(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DatanodeError::io(format!("removing {}", path.display()), e)),
    }
}
