//! The block scan behind block reports (Ozone's container metadata scanner, HDFS's
//! `DirectoryScanner`): every committed block's file is checked against its record. A block
//! whose file is gone (`NotFound`) or shorter than its committed length is *lost*; once two
//! consecutive scans agree, its record is dropped (memory and database), so GetBlock answers
//! NO_SUCH_BLOCK, reads fail over at once instead of failing on I/O, and the block is missing
//! from the report the om compares with its locations. The scan checks metadata (existence,
//! length), not checksums.
//!
//! Dropping a record is not undone, so the scan is careful about what it calls lost:
//! - only a missing or short file counts; any other error (a permission change, an I/O error,
//!   a volume being remounted) leaves the record alone and keeps the block out of the report,
//!   so the om asks the datanode — which still holds the record — and repairs nothing;
//! - the same block must look lost in two scans in a row;
//! - when more than a tenth of the blocks (and over 10) look lost at once, that is a volume
//!   problem, not lost blocks: nothing is dropped, and the scan says so in the log;
//! - a record is dropped only if it is still the one the scan saw (a write or deletion since
//!   wins), in memory and in the database alike.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prost::Message;
use proto_crate::wire::datanode as pb;
use proto_crate::{BlockData, BlockId};
use redb::ReadableTable;

use super::{BLOCKS, BlockKey, CLOSED, ContainerStore, Result, blocking};

/// What one scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockScan {
    /// Blocks present: the id (with the replica index stored here) and the committed length,
    /// bytes. In no particular order.
    pub present: Vec<(BlockId, u64)>,
    /// Blocks whose records this scan dropped (lost in this scan and the one before).
    pub lost: Vec<BlockId>,
}

/// What a block's file says about its record.
enum FileState {
    /// It holds at least the committed length (or the block is empty).
    Backs,
    /// Gone, or shorter than the committed length: lost, with why.
    Lost(String),
    /// It could not be checked (an error other than not-found): neither reported nor dropped.
    Unknown(String),
}

fn file_state(path: &std::path::Path, size: u64) -> FileState {
    if size == 0 {
        return FileState::Backs;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.len() >= size => FileState::Backs,
        Ok(m) => FileState::Lost(format!("file holds {} of {size} committed bytes", m.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            FileState::Lost("file not found".into())
        }
        Err(e) => FileState::Unknown(format!("file not checkable: {e}")),
    }
}

impl ContainerStore {
    /// Checks every committed block's file (on the blocking pool) and drops the records of
    /// the lost ones (see the module documentation). A block deleted or rewritten while the
    /// scan ran is left alone.
    ///
    /// # Errors
    /// Database errors dropping lost records from the database (they are out of memory
    /// already; a restart loads them back and the scans drop them again).
    pub async fn scan_blocks(self: &Arc<Self>) -> Result<BlockScan> {
        let snapshot: Vec<Arc<BlockData>> = self
            .committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let total = snapshot.len();
        let store = Arc::clone(self);
        let (present, suspects) = blocking(move || {
            let mut present = Vec::with_capacity(snapshot.len());
            let mut suspects = Vec::new();
            for d in snapshot {
                let path = store.path_of(d.block_id.container_id, d.block_id.local_id);
                match file_state(&path, d.size) {
                    FileState::Backs => present.push((d.block_id, d.size)),
                    FileState::Lost(why) => suspects.push((d, why)),
                    FileState::Unknown(why) => {
                        tracing::warn!(block = %d.block_id, reason = %why,
                            "block left out of the block report");
                    }
                }
            }
            Ok((present, suspects))
        })
        .await?;
        let keys: HashSet<BlockKey> = suspects
            .iter()
            .map(|(d, _)| super::key(d.block_id))
            .collect();
        let previous = std::mem::replace(
            &mut *self
                .lost_suspects
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            keys,
        );
        if suspects.len() > 10 && suspects.len() * 10 > total {
            tracing::error!(
                lost = suspects.len(),
                blocks = total,
                "a large share of block files are gone or short: a failed or unmounted volume? dropping no records"
            );
            return Ok(BlockScan {
                present,
                lost: Vec::new(),
            });
        }
        let confirmed: Vec<(Arc<BlockData>, String)> = suspects
            .into_iter()
            .filter(|(d, _)| previous.contains(&super::key(d.block_id)))
            .collect();
        let lost = self.drop_lost(confirmed).await?;
        Ok(BlockScan { present, lost })
    }

    /// Drops the records of `confirmed` that are still the committed records (a deletion or
    /// a rewrite since the snapshot wins) and whose files are still bad.
    async fn drop_lost(&self, confirmed: Vec<(Arc<BlockData>, String)>) -> Result<Vec<BlockId>> {
        if confirmed.is_empty() {
            return Ok(Vec::new());
        }
        let mut dropped: Vec<Arc<BlockData>> = Vec::new();
        {
            let mut committed = self
                .committed
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (d, why) in confirmed {
                let k: BlockKey = super::key(d.block_id);
                let current = committed.get(&k).is_some_and(|c| Arc::ptr_eq(c, &d));
                if !current
                    || !matches!(
                        file_state(&self.path_of(k.0, k.1), d.size),
                        FileState::Lost(_)
                    )
                {
                    continue;
                }
                committed.remove(&k);
                self.used_bytes.fetch_sub(d.size, Ordering::Relaxed);
                tracing::error!(block = %d.block_id, size = d.size, reason = %why,
                    "block lost: its record is dropped and block reports leave it out");
                dropped.push(d);
            }
        }
        for d in &dropped {
            self.files.remove(super::key(d.block_id));
            self.fine.remove(super::key(d.block_id));
        }
        let db = Arc::clone(&self.db);
        // Each dropped block's row, and its fine checksums file (the block
        // file is gone or short: they go too).
        let rows: Vec<(BlockKey, Vec<u8>, std::path::PathBuf)> = dropped
            .iter()
            .map(|d| {
                (
                    super::key(d.block_id),
                    pb::BlockData::from((**d).clone()).encode_to_vec(),
                    self.fine_path_of(d.block_id.container_id, d.block_id.local_id),
                )
            })
            .collect();
        blocking(move || {
            let txn = db.begin_write()?;
            {
                let mut blocks = txn.open_table(BLOCKS)?;
                let mut closed = txn.open_table(CLOSED)?;
                for (k, encoded, fine) in &rows {
                    // Only the row the scan judged: a PutBlock that committed a new one since
                    // keeps it.
                    let same = blocks
                        .get(k)?
                        .is_some_and(|v| v.value() == encoded.as_slice());
                    if same {
                        blocks.remove(k)?;
                        closed.remove(k)?;
                        // Before the commit, while this transaction holds the
                        // database: a close that commits after it writes its
                        // file after this removal. Best effort: a start-up
                        // removes what has no record.
                        if let Err(e) = std::fs::remove_file(fine)
                            && e.kind() != std::io::ErrorKind::NotFound
                        {
                            tracing::warn!(file = %fine.display(), error = %e,
                                "removing a lost block's fine checksums");
                        }
                    }
                }
            }
            txn.commit()?;
            Ok(())
        })
        .await?;
        Ok(dropped.iter().map(|d| d.block_id).collect())
    }
}
