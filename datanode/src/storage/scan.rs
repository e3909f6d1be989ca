//! The block scan behind block reports (Ozone's container metadata scanner, HDFS's
//! `DirectoryScanner`): every committed block's file is checked against its record, and a
//! block whose file is gone or shorter than its committed length is *lost*: its record is
//! dropped (memory and database), so GetBlock answers NO_SUCH_BLOCK, reads fail over at once
//! instead of failing on I/O, and the block is missing from the report the om compares with
//! its locations. The scan checks metadata (existence, length), not checksums.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use proto_crate::{BlockData, BlockId};

use super::{BLOCKS, BlockKey, CLOSED, ContainerStore, Result, blocking};

/// What one scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockScan {
    /// Blocks present: the id (with the replica index stored here) and the committed length,
    /// bytes. In no particular order.
    pub present: Vec<(BlockId, u64)>,
    /// Blocks found lost by this scan (their records are now dropped).
    pub lost: Vec<BlockId>,
}

/// Why a block's file does not back its record, if it does not: `None` when the file holds
/// at least `size` bytes (an empty block needs no file).
fn file_problem(path: &std::path::Path, size: u64) -> Option<String> {
    if size == 0 {
        return None;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.len() >= size => None,
        Ok(m) => Some(format!("file holds {} of {size} committed bytes", m.len())),
        Err(e) => Some(format!("file unreadable: {e}")),
    }
}

impl ContainerStore {
    /// Checks every committed block's file (on the blocking pool) and drops the records of
    /// the lost ones (see the module documentation). A block deleted or rewritten while the
    /// scan ran is left alone.
    ///
    /// # Errors
    /// Database errors dropping lost records from the database (they are out of memory
    /// already; a restart loads them back and the next scan drops them again).
    pub async fn scan_blocks(self: &Arc<Self>) -> Result<BlockScan> {
        let snapshot: Vec<Arc<BlockData>> = self
            .committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let store = Arc::clone(self);
        let (present, suspects) = blocking(move || {
            let mut present = Vec::with_capacity(snapshot.len());
            let mut suspects = Vec::new();
            for d in snapshot {
                let path = store.path_of(d.block_id.container_id, d.block_id.local_id);
                match file_problem(&path, d.size) {
                    None => present.push((d.block_id, d.size)),
                    Some(why) => suspects.push((d, why)),
                }
            }
            Ok((present, suspects))
        })
        .await?;
        let lost = self.drop_lost(suspects).await?;
        Ok(BlockScan { present, lost })
    }

    /// Drops the records of `suspects` that are still the committed records (a deletion or a
    /// rewrite since the snapshot wins) and whose files are still bad.
    async fn drop_lost(&self, suspects: Vec<(Arc<BlockData>, String)>) -> Result<Vec<BlockId>> {
        if suspects.is_empty() {
            return Ok(Vec::new());
        }
        let mut lost = Vec::new();
        {
            let mut committed = self
                .committed
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (d, why) in suspects {
                let k: BlockKey = super::key(d.block_id);
                let current = committed.get(&k).is_some_and(|c| Arc::ptr_eq(c, &d));
                if !current || file_problem(&self.path_of(k.0, k.1), d.size).is_none() {
                    continue;
                }
                committed.remove(&k);
                self.used_bytes.fetch_sub(d.size, Ordering::Relaxed);
                tracing::error!(block = %d.block_id, size = d.size, reason = %why,
                    "block lost: its record is dropped and block reports leave it out");
                lost.push(d.block_id);
            }
        }
        for b in &lost {
            self.files.remove(super::key(*b));
        }
        let db = Arc::clone(&self.db);
        let keys: Vec<BlockKey> = lost.iter().map(|b| super::key(*b)).collect();
        blocking(move || {
            let txn = db.begin_write()?;
            {
                let mut blocks = txn.open_table(BLOCKS)?;
                let mut closed = txn.open_table(CLOSED)?;
                for k in &keys {
                    blocks.remove(k)?;
                    closed.remove(k)?;
                }
            }
            txn.commit()?;
            Ok(())
        })
        .await?;
        Ok(lost)
    }
}
