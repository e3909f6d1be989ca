//! Where reads find fine checksums: a byte-bounded LRU of what each closed
//! block has, loaded from its `.fine` file on the first read with edges
//! (see the parent module), and the store's planning of a ReadChunk with
//! edges around it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OnceCell, Semaphore};

use proto_crate::{BlockData, BlockId, ChecksumType, ChunkInfo};

use super::{EdgePlan, FineChecksums, FineError, MAX_FINE_FILE};
use crate::DatanodeError;
use crate::lru::WeightedLru;
use crate::storage::{BlockKey, ContainerStore, Result, blocking, key};

/// Default [`StoreOptions::fine_checksum_cache_bytes`](crate::StoreOptions):
/// 64 MiB, the fine checksums of 8 GiB of blocks.
pub const DEFAULT_FINE_CHECKSUM_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Most fine checksums files loaded at once (each up to [`MAX_FINE_FILE`],
/// 8 MiB, while it is read and checked).
const MAX_CONCURRENT_LOADS: usize = 4;

/// A load of one block's file for one record, shared by every read that
/// misses the cache meanwhile.
type Flight = Arc<OnceCell<Option<Arc<FineChecksums>>>>;

/// What the cache knows of a block's fine checksums, for one record of it.
#[derive(Debug, Clone)]
struct FineEntry {
    /// The committed record the file was checked against.
    record: Arc<BlockData>,
    /// The block's fine checksums; `None`: none usable.
    fine: Option<Arc<FineChecksums>>,
}

/// Fine checksums of recently read or closed blocks, bounded in bytes
/// (least recently used out); a block without usable ones is remembered
/// too.
#[derive(Debug)]
pub(crate) struct FineCache {
    capacity: u64,
    lru: Mutex<WeightedLru<BlockKey, FineEntry>>,
    /// Loads under way, by block and record (its address; the load holds
    /// the record, so the address is not reused meanwhile).
    flights: Mutex<HashMap<(BlockKey, usize), Flight>>,
    /// Bounds the loads under way, store-wide.
    load_permits: Semaphore,
    /// Files loaded since the store was opened.
    loads: AtomicU64,
}

impl FineCache {
    /// A cache of at most `capacity` bytes (0: fine checksums are not used).
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            lru: Mutex::new(WeightedLru::new(capacity)),
            flights: Mutex::default(),
            load_permits: Semaphore::new(MAX_CONCURRENT_LOADS),
            loads: AtomicU64::new(0),
        }
    }

    /// Fine checksums files loaded since the store was opened.
    pub(crate) fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// The load of block `k`'s file for `record`: the one under way, or a
    /// new one.
    fn flight(&self, k: BlockKey, record: &Arc<BlockData>) -> Flight {
        let mut flights = self
            .flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            flights
                .entry((k, Arc::as_ptr(record) as usize))
                .or_default(),
        )
    }

    /// Forgets `flight` once it is over (a later miss, after an eviction,
    /// loads again).
    fn land(&self, k: BlockKey, record: &Arc<BlockData>, flight: &Flight) {
        let mut flights = self
            .flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = (k, Arc::as_ptr(record) as usize);
        if flights.get(&id).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(&id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WeightedLru<BlockKey, FineEntry>> {
        self.lru
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether reads use fine checksums at all (a zero capacity turns them
    /// off).
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// What is cached for block `k` as of `record`: `Some(None)` for a block
    /// known to have no usable fine checksums; `None` when nothing is cached
    /// for this record (a newer record was committed since, or none is).
    fn get(&self, k: BlockKey, record: &Arc<BlockData>) -> Option<Option<Arc<FineChecksums>>> {
        let entry = self.lock().get(k)?;
        Arc::ptr_eq(&entry.record, record).then_some(entry.fine)
    }

    /// Caches what block `k` has as of `record`. Fine checksums heavier
    /// than the whole cache are remembered as unusable (a read would load
    /// them again every time).
    pub(crate) fn insert(
        &self,
        k: BlockKey,
        record: Arc<BlockData>,
        fine: Option<Arc<FineChecksums>>,
    ) {
        let entry = std::mem::size_of::<FineEntry>() as u64;
        let fine = fine.filter(|f| entry + f.weight() <= self.capacity);
        let weight = entry + fine.as_ref().map_or(0, |f| f.weight());
        self.lock().insert(k, FineEntry { record, fine }, weight);
    }

    /// Bytes held.
    pub(crate) fn weight(&self) -> u64 {
        self.lock().weight()
    }

    /// Forgets block `k` (deleted or dropped).
    pub(crate) fn remove(&self, k: BlockKey) {
        self.lock().remove(k);
    }
}

impl ContainerStore {
    /// How a ReadChunk of `len` bytes at block offset `offset` of `chunk`,
    /// answered with the edges of its `bpc`-byte `ty` checksum windows,
    /// reads block `b`'s file: through the block's fine checksums when it
    /// has them and the windows start and end on their points (the range
    /// and at most 511 bytes on each side), else whole windows. Loads the
    /// block's fine checksums from their file on the blocking pool the
    /// first time.
    ///
    /// # Errors
    /// As [`check_read`](Self::check_read), for the requested range.
    pub(crate) async fn edge_plan(
        &self,
        b: BlockId,
        chunk: &ChunkInfo,
        ty: ChecksumType,
        bpc: u32,
        offset: u64,
        len: u64,
    ) -> Result<EdgePlan> {
        let record = self.checked_record(b, chunk, offset, len)?;
        let fine = self.fine_checksums(b, &record).await;
        let plan = fine
            .and_then(|f| f.plan(chunk, ty, bpc, offset, len))
            .unwrap_or_else(|| EdgePlan::windows(chunk, ty, bpc, offset, len));
        let counter = if plan.is_fine() { 0 } else { 1 };
        self.edge_reads[counter].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(plan)
    }

    /// Block `b`'s fine checksums as of `record`: from the cache, or loaded
    /// from their file and checked against `record` (a file that does not
    /// decode or agree is logged and not used).
    async fn fine_checksums(
        &self,
        b: BlockId,
        record: &Arc<BlockData>,
    ) -> Option<Arc<FineChecksums>> {
        if !self.fine.enabled() {
            return None;
        }
        let k = key(b);
        if let Some(cached) = self.fine.get(k, record) {
            return cached;
        }
        if self.being_written(k) {
            return None;
        }
        // Reads that miss together share one load.
        let flight = self.fine.flight(k, record);
        let fine = flight
            .get_or_init(|| self.load_fine_checksums(b, record))
            .await
            .clone();
        self.fine.land(k, record, &flight);
        fine
    }

    /// Loads block `b`'s fine checksums file for `record` on the blocking
    /// pool (at most `MAX_CONCURRENT_LOADS` at once), checks it and caches
    /// the outcome for `record` if that is still the committed record.
    async fn load_fine_checksums(
        &self,
        b: BlockId,
        record: &Arc<BlockData>,
    ) -> Option<Arc<FineChecksums>> {
        let k = key(b);
        // The semaphore is never closed.
        let _permit = self.fine.load_permits.acquire().await.ok()?;
        self.fine.loads.fetch_add(1, Ordering::Relaxed);
        let path = self.fine_path_of(k.0, k.1);
        let checked = Arc::clone(record);
        let loaded = blocking(move || Ok(load(&path, &checked))).await;
        let fine = match loaded {
            Ok(Ok(fine)) => fine.map(Arc::new),
            Ok(Err(why)) => {
                // Remembered for this record (an I/O error too: a read that
                // failed once is not retried by every ReadChunk).
                tracing::warn!(block = %b, %why, "fine checksums not used; reads take whole windows");
                None
            }
            Err(e) => {
                tracing::warn!(block = %b, error = %e, "loading fine checksums");
                return None;
            }
        };
        // Only for the record still committed, checked and cached under the
        // committed map's lock: a close publishing a newer record (which
        // caches its own entry after taking that lock) is not overwritten.
        let committed = self
            .committed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if committed.get(&k).is_some_and(|r| Arc::ptr_eq(r, record)) {
            self.fine.insert(k, Arc::clone(record), fine.clone());
        }
        fine
    }

    /// Whether block `k` is being written (it has write state and is not
    /// closed): it has no fine checksums yet, and each of its PutBlocks
    /// publishes a new record, so none is looked up. Write state left by a
    /// write refused after the close (a retried close) does not count.
    fn being_written(&self, k: BlockKey) -> bool {
        let open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.get(&k)
            .is_some_and(|ob| ob.try_lock().map_or(true, |ob| !ob.closed))
    }
}

/// Reads and checks a block's fine checksums file (on the blocking pool):
/// `Ok(None)` when there is none.
///
/// # Errors
/// The I/O error reading it; why it cannot be used ([`FineError`], or a
/// file longer than [`MAX_FINE_FILE`]) in the inner result.
fn load(
    path: &std::path::Path,
    record: &BlockData,
) -> std::result::Result<Option<FineChecksums>, FineLoadError> {
    let io = |e| FineLoadError::Io(DatanodeError::io(format!("reading {}", path.display()), e));
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if len > MAX_FINE_FILE {
        return Err(FineLoadError::TooLong { len });
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let fine = FineChecksums::decode(&bytes)?;
    fine.agrees_with(record)?;
    Ok(Some(fine))
}

/// Why a block's fine checksums file was not loaded.
#[derive(Debug, thiserror::Error)]
enum FineLoadError {
    /// Reading it failed.
    #[error(transparent)]
    Io(DatanodeError),
    /// It is longer than any block's.
    #[error("{len} bytes, longer than the {MAX_FINE_FILE} of the largest block followed")]
    TooLong { len: u64 },
    /// Its contents cannot be used.
    #[error(transparent)]
    Unusable(#[from] FineError),
}
