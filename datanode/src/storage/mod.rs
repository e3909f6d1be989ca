//! Container storage: one file per block (Ozone's FilePerBlock layout) under
//! `DATA_DIR/containers/<container id>/<local id>.block`, and committed block
//! metadata ([`BlockData`]: chunk list with checksums, size, metadata) in a
//! redb database at `DATA_DIR/metadata.redb`.
//!
//! Durability (ARCHITECTURE.md): WriteChunk writes to the page cache. A
//! plain PutBlock ([`Flush`](proto_crate::BlockCommit::Flush), the per-stripe commit of an EC
//! write) publishes its record in memory only: reads see it at once, and a
//! restart rolls the block back to its last durable record. A syncing or
//! closing PutBlock ([`Sync`](proto_crate::BlockCommit::Sync),
//! [`Close`](proto_crate::BlockCommit::Close)) fsyncs
//! the block file, then commits the record in a durable redb transaction
//! shared with the other durable PutBlocks of its batch (group commit,
//! `group_commit.rs`), and only then answers. On open, durable records are
//! loaded back into memory and block files are cut to them, so a restarted
//! datanode serves every block whose close or hsync it acknowledged.
//!
//! Reads never touch the database: committed metadata and open file handles
//! are cached in memory, and data is read with positioned reads (`pread`) so
//! concurrent readers do not contend. A closed block's fine checksums
//! (`fine.rs`, `<local id>.fine` beside the block file) are loaded on the
//! blocking pool by its first read with edges and then cached. Read handles live in a bounded LRU
//! ([`FileCache`], `--max-open-files`); running out of descriptors empties it
//! and retries instead of failing the request.
//!
//! Database commits and fsyncs run on the blocking pool, never on the async
//! workers, so a PutBlock does not stall other requests on the same runtime.
//!
//! What grows, and its bound: `committed` holds one entry per block stored
//! (bounded by the disk, released by deletion); `open` holds one entry per
//! block being written (released by the eof PutBlock or by deletion), with
//! its prefix CRCs (4 bytes per 512 written, kept up to `MAX_FINE_BLOCK`,
//! 1 GiB); the file cache holds at most `max_open_files` handles; the fine
//! checksum cache at most `fine_checksum_cache_bytes`.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use proto_crate::{BlockData, BlockId, ChunkInfo, ReplicaIndex};
use redb::{Database, TableDefinition};

use crate::DatanodeError;
use crate::file_cache::{DEFAULT_MAX_OPEN_FILES, FileCache};

type Result<T, E = DatanodeError> = std::result::Result<T, E>;

/// Committed blocks: (container id, local id) -> encoded `BlockData`.
pub(crate) const BLOCKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("blocks");
/// Containers present on this datanode: container id -> ().
pub(crate) const CONTAINERS: TableDefinition<u64, ()> = TableDefinition::new("containers");
/// Blocks closed by an eof PutBlock: (container id, local id) -> ().
pub(crate) const CLOSED: TableDefinition<(u64, u64), ()> = TableDefinition::new("closed_blocks");
/// Deleted blocks (tombstones): (container id, local id) -> deletion time,
/// unix ms. A write to a deleted block is refused, so a writer whose session
/// the om expired (it is not told) cannot bring the block back; tombstones
/// older than [`TOMBSTONE_TTL_MS`] are pruned.
pub(crate) const DELETED: TableDefinition<(u64, u64), u64> = TableDefinition::new("deleted_blocks");

/// How long a deleted block's tombstone is kept, ms (7 days). A writer that
/// resumes writing a block after its tombstone was pruned would recreate a
/// file no one references; that takes a writer stalled for a week (its
/// session expired after the om's open-key lease, an hour by default).
pub(crate) const TOMBSTONE_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Largest ReadChunk answer, bytes (ARCHITECTURE.md: 32 MiB). Longer requests are
/// rejected before any buffer is allocated.
pub const MAX_READ_LEN: u64 = 32 * 1024 * 1024;

pub(crate) type BlockKey = (u64, u64);
/// Committed block records by block, as reads see them.
pub(crate) type CommittedMap = RwLock<HashMap<BlockKey, Arc<BlockData>>>;
/// Write state of the blocks being written, by block.
pub(crate) type OpenMap = Mutex<HashMap<BlockKey, Arc<tokio::sync::Mutex<OpenBlock>>>>;

pub(crate) fn key(b: BlockId) -> BlockKey {
    (b.container_id, b.local_id)
}

/// A block whose file is being written (it may also have a committed prefix).
#[derive(Debug, Default)]
pub(crate) struct OpenBlock {
    replica_index: Option<ReplicaIndex>,
    file_len: u64,
    closed: bool,
    /// The block was deleted: writes are refused.
    pub(crate) deleted: bool,
    /// Whether the container directory was synced since this block's file
    /// was created.
    dir_synced: bool,
    /// Length of the block's durable record (0 without one): a close may
    /// cut the block below a length only published in memory, never below
    /// this.
    durable_len: u64,
    /// A sync of the block's file failed: its unsynced bytes may be lost
    /// even if a later sync succeeds, so every write is refused.
    pub(crate) sync_failed: bool,
    /// The block's prefix CRCs while its file is written from offset 0
    /// (`fine.rs`); dropped when the writes stop following that pattern.
    fine: Option<fine::FineBuilder>,
}

/// Tunables of a [`ContainerStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Most block files kept open for reading (`--max-open-files`, default
    /// [`DEFAULT_MAX_OPEN_FILES`]).
    pub max_open_files: usize,
    /// Bytes of closed blocks' fine checksums kept in memory for reads
    /// (`--fine-checksum-cache-mib`, default
    /// [`DEFAULT_FINE_CHECKSUM_CACHE_BYTES`], 64 MiB: 4 bytes per 512 bytes
    /// of block, so 8 GiB of blocks). 0 turns fine checksums off for reads:
    /// every ReadChunk with edges reads whole checksum windows.
    pub fine_checksum_cache_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_open_files: DEFAULT_MAX_OPEN_FILES,
            fine_checksum_cache_bytes: DEFAULT_FINE_CHECKSUM_CACHE_BYTES,
        }
    }
}

impl StoreOptions {
    /// Sets the most block files kept open for reading.
    #[must_use]
    pub fn with_max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }

    /// Sets the bytes of fine checksums kept in memory for reads (0: off).
    #[must_use]
    pub fn with_fine_checksum_cache_bytes(mut self, bytes: u64) -> Self {
        self.fine_checksum_cache_bytes = bytes;
        self
    }
}

/// Usage figures of a store, as heartbeats report them, and the counts of
/// its durable path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StoreStats {
    /// Committed bytes of every block stored.
    pub used_bytes: u64,
    /// Committed blocks stored.
    pub blocks: u64,
    /// Block files held open for reading by the cache.
    pub open_files: u64,
    /// Block files `fdatasync`ed by durable (syncing or closing) PutBlocks
    /// since the store was opened.
    pub block_file_syncs: u64,
    /// Database transactions that made block records durable since the
    /// store was opened (one per group-commit batch).
    pub record_commits: u64,
    /// Block records made durable since the store was opened.
    pub durable_records: u64,
    /// ReadChunks with edges served through fine checksums (reading the
    /// range and at most 511 bytes on each side) since the store was opened.
    pub fine_edge_reads: u64,
    /// ReadChunks with edges that read whole checksum windows (the block has
    /// no fine checksums, or its windows do not start and end on them).
    pub window_edge_reads: u64,
    /// Bytes of fine checksums held in memory for reads (at most
    /// [`StoreOptions::fine_checksum_cache_bytes`]).
    pub fine_cache_bytes: u64,
    /// Fine checksums files read since the store was opened (once per
    /// block and record while it stays cached; reads that miss together
    /// share one).
    pub fine_loads: u64,
}

/// The containers and blocks of one datanode.
#[derive(Debug)]
pub struct ContainerStore {
    pub(crate) root: PathBuf,
    pub(crate) db: Arc<Database>,
    containers: RwLock<std::collections::HashSet<u64>>,
    pub(crate) committed: Arc<CommittedMap>,
    pub(crate) open: Arc<OpenMap>,
    pub(crate) files: Arc<FileCache>,
    /// Fine checksums of closed blocks, for reads (`fine.rs`).
    pub(crate) fine: Arc<fine::FineCache>,
    /// ReadChunks with edges by how they read: through fine checksums, by
    /// whole windows.
    edge_reads: [AtomicU64; 2],
    pub(crate) used_bytes: Arc<AtomicU64>,
    /// Batches durable PutBlocks (`group_commit.rs`).
    committer: group_commit::GroupCommitter,
    /// When tombstones were last pruned, unix ms.
    pub(crate) last_prune_ms: AtomicU64,
    /// Blocks the last block scan found gone or short (dropped if the next scan agrees).
    pub(crate) lost_suspects: Mutex<std::collections::HashSet<BlockKey>>,
    /// What start-up recovery reclaimed.
    recovery: crate::recovery::RecoveryReport,
    /// Exclusive ownership of the data dir, released with the store.
    _lock: proto_crate::DirLock,
}

impl ContainerStore {
    /// Opens (or creates) the store under `root` with default options.
    ///
    /// # Errors
    /// As [`open_with`](Self::open_with).
    pub fn open(root: &Path) -> Result<Self> {
        Self::open_with(root, StoreOptions::default())
    }

    /// Opens (or creates) the store under `root`, loading committed metadata,
    /// reclaiming block bytes no PutBlock committed (files with no record
    /// removed, longer files truncated: [`recovery`](Self::recovery)) and
    /// finishing deletions a crash interrupted (files of tombstoned blocks
    /// are removed).
    ///
    /// # Errors
    /// [`DatanodeError::DataDirInUse`] when another owner holds the data
    /// dir's lock; I/O errors creating directories; database errors; a
    /// stored record that does not decode (reported, never silently skipped).
    pub fn open_with(root: &Path, options: StoreOptions) -> Result<Self> {
        let lock = proto_crate::DirLock::acquire(root, "datanode").map_err(|e| match e {
            proto_crate::DirLockError::InUse { .. } => DatanodeError::DataDirInUse {
                this_process: e.held_by_this_process(),
                message: e.to_string(),
            },
            other => DatanodeError::io("locking the data dir", std::io::Error::other(other)),
        })?;
        fs::create_dir_all(root.join("containers"))
            .map_err(|e| DatanodeError::io(format!("creating {}", root.display()), e))?;
        let db = Database::create(root.join("metadata.redb"))?;
        let txn = db.begin_write()?;
        {
            txn.open_table(BLOCKS)?;
            txn.open_table(CONTAINERS)?;
            txn.open_table(CLOSED)?;
            txn.open_table(DELETED)?;
        }
        txn.commit()?;

        let crate::recovery::Loaded {
            committed,
            containers,
            tombstoned,
        } = crate::recovery::load(&db)?;
        // Bytes a crash left past the last PutBlock: reclaimed before any
        // request is served.
        let recovery = crate::recovery::reclaim_uncommitted(root, &committed, &tombstoned)?;
        let used = committed.values().map(|d: &Arc<BlockData>| d.size).sum();
        let db = Arc::new(db);
        let files = Arc::new(FileCache::new(options.max_open_files));
        let store = Self {
            root: root.to_path_buf(),
            committer: group_commit::GroupCommitter::new(Arc::clone(&db), Arc::clone(&files)),
            db,
            containers: RwLock::new(containers),
            committed: Arc::new(RwLock::new(committed)),
            open: Arc::new(Mutex::new(HashMap::new())),
            files,
            fine: Arc::new(fine::FineCache::new(options.fine_checksum_cache_bytes)),
            edge_reads: Default::default(),
            used_bytes: Arc::new(AtomicU64::new(used)),
            last_prune_ms: AtomicU64::new(0),
            lost_suspects: Mutex::default(),
            recovery,
            _lock: lock,
        };
        // A deletion commits its tombstones before it removes files: finish
        // the removals a crash cut short.
        for (container_id, local_id) in tombstoned {
            store.remove_block_file(container_id, local_id)?;
        }
        Ok(store)
    }

    /// Tests: makes the next `n` block-file syncs of durable PutBlocks fail
    /// with EIO.
    #[cfg(test)]
    pub(crate) fn fail_next_file_syncs(&self, n: u64) {
        self.committer
            .counters
            .fail_file_syncs
            .store(n, Ordering::Relaxed);
    }

    /// Usage figures: committed bytes and blocks, open read handles.
    #[must_use]
    pub fn stats(&self) -> StoreStats {
        let blocks = self
            .committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len() as u64;
        let c = &self.committer.counters;
        StoreStats {
            used_bytes: self.used_bytes.load(Ordering::Relaxed),
            blocks,
            open_files: self.files.len() as u64,
            block_file_syncs: c.file_syncs.load(Ordering::Relaxed),
            record_commits: c.db_commits.load(Ordering::Relaxed),
            durable_records: c.records.load(Ordering::Relaxed),
            fine_edge_reads: self.edge_reads[0].load(Ordering::Relaxed),
            window_edge_reads: self.edge_reads[1].load(Ordering::Relaxed),
            fine_cache_bytes: self.fine.weight(),
            fine_loads: self.fine.loads(),
        }
    }

    /// What recovery did when this store was opened: block files with no
    /// committed metadata removed, uncommitted tails truncated (see
    /// `recovery.rs`).
    #[must_use]
    pub fn recovery(&self) -> crate::recovery::RecoveryReport {
        self.recovery
    }

    /// The directory this store keeps its containers and database in.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn container_dir(&self, container_id: u64) -> PathBuf {
        self.root.join("containers").join(container_id.to_string())
    }

    fn block_path(&self, b: BlockId) -> PathBuf {
        self.path_of(b.container_id, b.local_id)
    }

    pub(crate) fn path_of(&self, container_id: u64, local_id: u64) -> PathBuf {
        self.container_dir(container_id)
            .join(format!("{local_id}.block"))
    }

    /// The file of a closed block's fine checksums (`fine.rs`), beside its
    /// block file.
    pub(crate) fn fine_path_of(&self, container_id: u64, local_id: u64) -> PathBuf {
        self.container_dir(container_id)
            .join(format!("{local_id}{}", fine::FINE_SUFFIX))
    }

    fn has_container(&self, container_id: u64) -> bool {
        self.containers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&container_id)
    }

    /// Creates the container if it is not there yet (idempotent, durable).
    /// The directory sync and the database commit run on the blocking pool.
    ///
    /// # Errors
    /// I/O and database errors.
    pub async fn create_container(&self, container_id: u64) -> Result<()> {
        if self.has_container(container_id) {
            return Ok(());
        }
        let dir = self.container_dir(container_id);
        let parent = self.root.join("containers");
        let db = Arc::clone(&self.db);
        let files = Arc::clone(&self.files);
        blocking(move || {
            fs::create_dir_all(&dir)
                .map_err(|e| DatanodeError::io(format!("creating {}", dir.display()), e))?;
            // Make the new directory's entry durable before recording the container.
            files
                .retry_on_emfile(|| File::open(&parent).and_then(|f| f.sync_all()))
                .map_err(|e| DatanodeError::io(format!("syncing {}", parent.display()), e))?;
            let txn = db.begin_write()?;
            txn.open_table(CONTAINERS)?.insert(container_id, ())?;
            txn.commit()?;
            Ok(())
        })
        .await?;
        self.containers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(container_id);
        Ok(())
    }

    fn committed_block(&self, b: BlockId) -> Option<Arc<BlockData>> {
        self.committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key(b))
            .cloned()
    }

    /// The committed block `b`, checking the replica index.
    ///
    /// # Errors
    /// [`DatanodeError::ContainerNotFound`], [`DatanodeError::NoSuchBlock`],
    /// [`DatanodeError::ReplicaIndexMismatch`].
    pub fn get_block(&self, b: BlockId) -> Result<Arc<BlockData>> {
        let Some(data) = self.committed_block(b) else {
            if !self.has_container(b.container_id) {
                return Err(DatanodeError::ContainerNotFound {
                    container_id: b.container_id,
                });
            }
            return Err(DatanodeError::NoSuchBlock { block: b });
        };
        if data.block_id.replica_index != b.replica_index {
            return Err(DatanodeError::ReplicaIndexMismatch {
                block: b,
                asked: b.replica_index,
                stored: data.block_id.replica_index,
            });
        }
        Ok(data)
    }

    fn file(&self, b: BlockId) -> Result<Arc<File>> {
        if let Some(f) = self.files.get(key(b)) {
            return Ok(f);
        }
        let path = self.block_path(b);
        let f = Arc::new(
            self.files
                .retry_on_emfile(|| File::open(&path))
                .map_err(|e| DatanodeError::io(format!("opening {}", path.display()), e))?,
        );
        self.files.insert(key(b), Arc::clone(&f));
        // A deletion may have run between the caller's metadata check and
        // this open: never leave a deleted block's descriptor cached (it
        // would pin the file's space until evicted).
        if self.committed_block(b).is_none() {
            self.files.remove(key(b));
        }
        Ok(f)
    }

    /// Checks that `len` bytes of block `b` at block-relative `offset` may be
    /// read: at most [`MAX_READ_LEN`], inside `chunk` and inside the
    /// committed block. [`read`](Self::read) checks this itself; a caller
    /// that reads a wider range on behalf of a request (a ReadChunk with
    /// edges reads whole checksum windows) checks the request first, so that
    /// its errors name the range the client asked for.
    ///
    /// # Errors
    /// [`DatanodeError::LengthTooLarge`]; not-found and index errors as
    /// [`get_block`](Self::get_block); [`DatanodeError::OutOfRange`].
    pub fn check_read(&self, b: BlockId, chunk: &ChunkInfo, offset: u64, len: u64) -> Result<()> {
        self.checked_record(b, chunk, offset, len).map(drop)
    }

    /// [`check_read`](Self::check_read), returning the block's record.
    pub(crate) fn checked_record(
        &self,
        b: BlockId,
        chunk: &ChunkInfo,
        offset: u64,
        len: u64,
    ) -> Result<Arc<BlockData>> {
        if len > MAX_READ_LEN {
            return Err(DatanodeError::LengthTooLarge {
                len,
                cap: MAX_READ_LEN,
            });
        }
        let data = self.get_block(b)?;
        let end = offset.checked_add(len).ok_or_else(|| {
            DatanodeError::InvalidArgument(format!("offset {offset} + len {len} overflows"))
        })?;
        if end > data.size {
            return Err(DatanodeError::OutOfRange {
                block: b,
                offset,
                len,
                what: "the committed block",
                start: 0,
                end: data.size,
            });
        }
        if offset < chunk.offset || end > chunk.end() {
            return Err(DatanodeError::OutOfRange {
                block: b,
                offset,
                len,
                what: "the chunk",
                start: chunk.offset,
                end: chunk.end(),
            });
        }
        Ok(data)
    }

    /// Reads exactly `len` bytes of block `b` at block-relative `offset`, which
    /// must lie inside `chunk` and inside the committed block.
    ///
    /// # Errors
    /// As [`check_read`](Self::check_read) (before anything is allocated);
    /// I/O errors (including a file shorter than its committed length).
    pub async fn read(
        &self,
        b: BlockId,
        chunk: &ChunkInfo,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        self.check_read(b, chunk, offset, len)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let file = self.file(b)?;
        let n = usize::try_from(len).map_err(|_| DatanodeError::LengthTooLarge {
            len,
            cap: MAX_READ_LEN,
        })?;
        let read = move || read_exact_at(&file, n, offset).map(Bytes::from);
        // Small reads come from the page cache in microseconds: do them inline
        // rather than pay a thread hop. Large ones go to the blocking pool.
        let result = if len <= 256 * 1024 {
            read()
        } else {
            tokio::task::spawn_blocking(read)
                .await
                .map_err(|e| DatanodeError::io("reading chunk", std::io::Error::other(e)))?
        };
        result.map_err(|e| DatanodeError::io(format!("reading block {b} at {offset}+{len}"), e))
    }

    /// Up to `count` committed blocks of a container with local id at least
    /// `start_local_id`, in local-id order.
    ///
    /// # Errors
    /// [`DatanodeError::ContainerNotFound`].
    pub fn list_blocks(
        &self,
        container_id: u64,
        start_local_id: u64,
        count: u32,
    ) -> Result<Vec<Arc<BlockData>>> {
        if !self.has_container(container_id) {
            return Err(DatanodeError::ContainerNotFound { container_id });
        }
        let committed = self
            .committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sorted: BTreeMap<u64, &Arc<BlockData>> = committed
            .iter()
            .filter(|((c, l), _)| *c == container_id && *l >= start_local_id)
            .map(|((_, l), d)| (*l, d))
            .collect();
        let limit = if count == 0 {
            usize::MAX
        } else {
            count as usize
        };
        Ok(sorted.into_values().take(limit).cloned().collect())
    }
}

impl OpenBlock {
    /// Write state of a block being deleted: every write is refused.
    pub(crate) fn deleted() -> Self {
        Self {
            deleted: true,
            ..Self::default()
        }
    }
}

/// Runs `f` on the blocking pool (file syncs, database commits).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DatanodeError::io("a blocking storage task", std::io::Error::other(e)))?
}

mod fine;
mod group_commit;
mod scan;
mod write;

pub(crate) use fine::FINE_SUFFIX;
pub use fine::{DEFAULT_FINE_CHECKSUM_CACHE_BYTES, FINE_GRANULE};
pub use scan::BlockScan;

/// Reads exactly `n` bytes of `file` at `offset` into a new buffer, without
/// zero-filling it first: `pread` writes straight into the buffer's spare
/// capacity (rustix's `spare_capacity`, which sets the length to what the
/// kernel wrote). A zero-fill cost as much as the page-cache copy itself: in
/// a sequential EC read profile, 8.6% of all CPU time went to zero-filling
/// 1 MiB read buffers (2026-12-05).
///
/// # Errors
/// The `pread` error (interrupted calls are retried), or
/// [`std::io::ErrorKind::UnexpectedEof`] when the file ends before `n` bytes.
fn read_exact_at(file: &File, n: usize, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    while buf.len() < n {
        let at = offset.saturating_add(buf.len() as u64);
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file ends {} bytes into a {n}-byte read", buf.len()),
                ));
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // `with_capacity` promises at least `n`: a read may have filled more.
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests;
