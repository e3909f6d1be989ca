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
//! Leadership: a PutBlock queues its request and spawns a leader task that
//! takes the leader lock, drains the queue and runs the whole batch on the
//! blocking pool, answering every request from there; the PutBlock only
//! awaits its answer. The leader is a task of its own so that cancelling
//! the PutBlock (a client deadline, a dropped stream) can neither strand its
//! request in the queue nor release the leader lock while a batch still
//! runs. A request is applied completely once queued — its file sync, its
//! record, and its in-memory publication — and the block's write lock
//! travels with it, so a deletion or another write of the same block waits
//! until the commit is over.
//!
//! Order inside a batch: every block file is synced, then one transaction
//! commits the records whose files synced, then each record is published in
//! memory (which is when a closed block's file is cut to its committed
//! length, still under the block's lock; best effort, a longer file is cut
//! at the next start anyway), so a failed sync or commit leaves the block
//! exactly as it was.

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
    /// The container directory to sync (the block's first durable commit,
    /// which makes the file's directory entry durable too).
    pub(crate) dir: Option<PathBuf>,
    /// The block's write lock, held until the commit is applied.
    pub(crate) guard: OwnedMutexGuard<OpenBlock>,
    /// Publishes the record in memory once it is durable (the committed map,
    /// the write state; a close below what was written also cuts the file's
    /// tail there); runs on the batch's thread, under `guard`.
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
    /// Tests: how many of the next block-file syncs fail with EIO.
    #[cfg(test)]
    pub(crate) fail_file_syncs: AtomicU64,
}

/// Batches durable PutBlocks (see the module doc).
pub(crate) struct GroupCommitter {
    inner: Arc<Inner>,
    pub(crate) counters: Arc<CommitCounters>,
}

struct Inner {
    queue: Mutex<Vec<(DurableCommit, Waiter)>>,
    leader: tokio::sync::Mutex<()>,
    /// The store's database, not owned: a leader task that outlives its
    /// store (a PutBlock cancelled, then the store closed) must not keep
    /// the database open, so that the data dir can be opened again.
    db: std::sync::Weak<Database>,
    files: Arc<FileCache>,
    counters: Arc<CommitCounters>,
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
        let counters = Arc::new(CommitCounters::default());
        Self {
            inner: Arc::new(Inner {
                queue: Mutex::default(),
                leader: tokio::sync::Mutex::new(()),
                db: Arc::downgrade(&db),
                files,
                counters: Arc::clone(&counters),
            }),
            counters,
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
        self.inner
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((c, tx));
        // The leader is a task of its own (see the module doc); it finds
        // this request in the queue, or an earlier leader already took it.
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.lead().await });
        rx.await.map_err(|_| {
            DatanodeError::io(
                "committing a block",
                std::io::Error::other("the commit batch ended without an answer"),
            )
        })?
    }
}

impl Inner {
    /// Takes the leader lock and runs whatever is queued as one batch.
    async fn lead(self: Arc<Self>) {
        let _leader = self.leader.lock().await;
        let batch = std::mem::take(
            &mut *self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if batch.is_empty() {
            return;
        }
        // The store is gone: dropping the batch answers its waiters with
        // an error.
        let Some(db) = self.db.upgrade() else {
            return;
        };
        let this = Arc::clone(&self);
        // A panic there drops the batch's senders: its waiters get an error.
        let _ = tokio::task::spawn_blocking(move || {
            run_batch(db, &this.files, &this.counters, batch);
        })
        .await;
    }
}

/// Syncs every file of the batch, commits the records whose files synced in
/// one transaction, publishes them, cuts closed blocks' files to their
/// committed length and answers every waiter.
fn run_batch(
    db: Arc<Database>,
    files: &FileCache,
    counters: &CommitCounters,
    batch: Vec<(DurableCommit, Waiter)>,
) {
    let mut synced_dirs = HashSet::new();
    let mut ready = Vec::with_capacity(batch.len());
    let mut failed = Vec::new();
    for (mut c, tx) in batch {
        match sync_files(&c, files, counters, &mut synced_dirs) {
            Ok(()) => ready.push((c, tx)),
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty
                // pages it could not write, and a later fsync can succeed
                // without them: the block takes no more writes or commits
                // here (its writer fails over; a restart brings it back to
                // its last durable record).
                c.guard.sync_failed = true;
                failed.push((c, tx, e));
            }
        }
    }
    let committed = (|| -> Result<()> {
        if ready.is_empty() {
            return Ok(());
        }
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
    // Released before anyone is answered: a caller that closes the store
    // once its PutBlock returned can open the data dir again at once.
    drop(db);
    for (c, tx, e) in failed {
        drop(c);
        let _ = tx.send(Err(e));
    }
    match committed {
        Ok(()) if ready.is_empty() => {}
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
        #[cfg(test)]
        if counters
            .fail_file_syncs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(DatanodeError::io(
                format!("syncing block {b}"),
                std::io::Error::from_raw_os_error(5),
            ));
        }
        files
            .retry_on_emfile(|| File::open(path).and_then(|f| f.sync_data()))
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
