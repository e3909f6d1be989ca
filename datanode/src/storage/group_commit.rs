//! Group commit of durable PutBlocks (a syncing or closing PutBlock,
//! `BlockCommit::Sync`/`Close`).
//!
//! A durable PutBlock must have its block file's bytes and its metadata
//! record on disk before it answers. Each block file needs its own
//! `fdatasync`, but the records of every PutBlock that arrived while the
//! previous batch was being synced go into one redb transaction, so N
//! concurrent PutBlocks cost N file syncs and one database commit instead
//! of N of each.
//!
//! Leadership: a PutBlock queues its request and then takes the leader lock;
//! whoever holds it drains the queue and runs the whole batch on the
//! blocking pool, answering every request from there. A request is applied
//! completely once queued — its file sync, its record, and its in-memory
//! publication — even if the PutBlock that queued it is cancelled, and the
//! block's write lock travels with it, so a deletion or another write of the
//! same block waits until the commit is over. Nothing is left half-done for
//! a later batch to apply out of order.

use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proto_crate::BlockId;
use redb::Database;
use tokio::sync::{OwnedMutexGuard, oneshot};

use super::{BLOCKS, CLOSED, OpenBlock, Result, key};
use crate::DatanodeError;
use crate::file_cache::FileCache;

/// One durable PutBlock waiting for its batch.
pub(crate) struct DurableCommit {
    pub(crate) block: BlockId,
    /// The encoded `BlockData` record.
    pub(crate) record: Vec<u8>,
    /// Whether the block is closed by this commit (an eof PutBlock).
    pub(crate) close: bool,
    /// The block file to `fdatasync` (none for a record with no chunks).
    pub(crate) file: Option<PathBuf>,
    /// Cut the block file to this length first: a close at a length below
    /// what was written (a writer giving up on a stripe) drops the tail.
    pub(crate) truncate_to: Option<u64>,
    /// The container directory to sync (the block's first durable commit,
    /// which makes the file's directory entry durable too).
    pub(crate) dir: Option<PathBuf>,
    /// The block's write lock, held until the commit is applied.
    pub(crate) guard: OwnedMutexGuard<OpenBlock>,
    /// Publishes the record in memory once it is durable (the committed map,
    /// the write state); runs on the batch's thread, under `guard`.
    pub(crate) publish: Box<dyn FnOnce(&mut OpenBlock) + Send>,
}

type Waiter = oneshot::Sender<Result<()>>;

/// Counters of the durable path, exact (tests assert them).
#[derive(Debug, Default)]
pub(crate) struct CommitCounters {
    /// Block files `fdatasync`ed by durable PutBlocks.
    pub(crate) file_syncs: AtomicU64,
    /// Database transactions that committed block records (one per batch).
    pub(crate) db_commits: AtomicU64,
    /// Records made durable.
    pub(crate) records: AtomicU64,
}

/// Batches durable PutBlocks (see the module doc).
pub(crate) struct GroupCommitter {
    queue: Mutex<Vec<(DurableCommit, Waiter)>>,
    leader: tokio::sync::Mutex<()>,
    db: Arc<Database>,
    files: Arc<FileCache>,
    pub(crate) counters: Arc<CommitCounters>,
}

impl std::fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommitter")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl GroupCommitter {
    pub(crate) fn new(db: Arc<Database>, files: Arc<FileCache>) -> Self {
        Self {
            queue: Mutex::default(),
            leader: tokio::sync::Mutex::new(()),
            db,
            files,
            counters: Arc::default(),
        }
    }

    /// Makes `c` durable and published, batched with the others queued
    /// meanwhile. Returns when its batch is over.
    ///
    /// # Errors
    /// The I/O error of syncing (or truncating) this block's file or its
    /// directory (the record is then not written); a database error of the
    /// batch's transaction (no record of the batch is written).
    pub(crate) async fn commit(&self, c: DurableCommit) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((c, tx));
        {
            let _leader = self.leader.lock().await;
            let batch = std::mem::take(
                &mut *self
                    .queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if !batch.is_empty() {
                let db = Arc::clone(&self.db);
                let files = Arc::clone(&self.files);
                let counters = Arc::clone(&self.counters);
                // Runs to its end even if this future is dropped; a panic
                // there drops the waiters' senders, answered below.
                let _ = tokio::task::spawn_blocking(move || {
                    run_batch(&db, &files, &counters, batch);
                })
                .await;
            }
        }
        rx.await.map_err(|_| {
            DatanodeError::io(
                "committing a block",
                std::io::Error::other("the commit batch ended without an answer"),
            )
        })?
    }
}

/// Syncs every file of the batch, commits the records whose files synced in
/// one transaction, publishes them and answers every waiter.
fn run_batch(
    db: &Database,
    files: &FileCache,
    counters: &CommitCounters,
    batch: Vec<(DurableCommit, Waiter)>,
) {
    let mut synced_dirs = HashSet::new();
    let mut ready = Vec::with_capacity(batch.len());
    for (c, tx) in batch {
        match sync_files(&c, files, counters, &mut synced_dirs) {
            Ok(()) => ready.push((c, tx)),
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    }
    if ready.is_empty() {
        return;
    }
    let committed = (|| -> Result<()> {
        let txn = db.begin_write()?;
        {
            let mut blocks = txn.open_table(BLOCKS)?;
            let mut closed = txn.open_table(CLOSED)?;
            for (c, _) in &ready {
                blocks.insert(key(c.block), c.record.as_slice())?;
                if c.close {
                    closed.insert(key(c.block), ())?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    })();
    match committed {
        Ok(()) => {
            counters.db_commits.fetch_add(1, Ordering::Relaxed);
            counters
                .records
                .fetch_add(ready.len() as u64, Ordering::Relaxed);
            for (mut c, tx) in ready {
                (c.publish)(&mut c.guard);
                drop(c.guard);
                let _ = tx.send(Ok(()));
            }
        }
        Err(e) => {
            let message = e.to_string();
            for (c, tx) in ready {
                let _ = tx.send(Err(DatanodeError::io(
                    format!("committing block {}", c.block),
                    std::io::Error::other(message.clone()),
                )));
            }
        }
    }
}

fn sync_files(
    c: &DurableCommit,
    files: &FileCache,
    counters: &CommitCounters,
    synced_dirs: &mut HashSet<PathBuf>,
) -> Result<()> {
    let b = c.block;
    if let Some(path) = &c.file {
        files
            .retry_on_emfile(|| {
                let f = File::options().write(true).open(path)?;
                if let Some(len) = c.truncate_to {
                    f.set_len(len)?;
                }
                f.sync_data()
            })
            .map_err(|e| DatanodeError::io(format!("syncing block {b}"), e))?;
        counters.file_syncs.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(d) = &c.dir
        && !synced_dirs.contains(d)
    {
        files
            .retry_on_emfile(|| File::open(d).and_then(|f| f.sync_all()))
            .map_err(|e| DatanodeError::io(format!("syncing {}", d.display()), e))?;
        synced_dirs.insert(d.clone());
    }
    Ok(())
}
