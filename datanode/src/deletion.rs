//! Block deletion on the datanode (the DeleteBlocks command the om's block
//! deletion service sends, as SCM's DeletedBlockLog drives Ozone datanodes).
//!
//! Deleting a batch: each block's write lock is taken (so no WriteChunk or
//! PutBlock of it runs concurrently) and marked deleted; one durable
//! transaction removes the blocks' metadata and records a tombstone per
//! block; then the files are removed. A crash between the commit and the
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
    BLOCKS, BlockKey, CLOSED, ContainerStore, DELETED, TOMBSTONE_TTL_MS, blocking, key,
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
        // Hold every block's write lock across the commit, in key order (no
        // deadlock between concurrent batches).
        let mut handles = Vec::with_capacity(keys.len());
        for &(container_id, local_id) in &keys {
            handles.push(self.open_block(BlockId {
                container_id,
                local_id,
                replica_index: 0,
            })?);
        }
        let mut guards = Vec::with_capacity(handles.len());
        for h in &handles {
            guards.push(h.lock().await);
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
        for g in &mut guards {
            g.deleted = true;
        }
        drop(guards);
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
        for &(container_id, local_id) in &keys {
            self.files.remove((container_id, local_id));
            self.remove_block_file(container_id, local_id)?;
        }
        Ok(held)
    }

    /// Removes the file of a block, if there is one.
    pub(crate) fn remove_block_file(&self, container_id: u64, local_id: u64) -> Result<()> {
        let path = self.path_of(container_id, local_id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(DatanodeError::io(format!("removing {}", path.display()), e)),
        }
    }
}
