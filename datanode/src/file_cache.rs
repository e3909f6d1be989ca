//! A bounded cache of open block-file read handles (least recently used out).
//!
//! A datanode serving reads keeps a handle per hot block so that a ReadChunk
//! costs one `pread` and no `open`. Without a bound it holds one descriptor
//! per block it has ever read and eventually fails every `open` with `EMFILE`
//! (the repro of issue 10: 60 keys read with a 100-descriptor limit). This
//! cache holds at most `capacity` handles; a handle is dropped from the cache
//! when its block is deleted (a rewrite of an uncommitted tail keeps the same
//! file, so its handle stays valid), when it is the least recently used
//! at an insert past capacity, and all at once when the process runs out of
//! descriptors ([`FileCache::retry_on_emfile`]). A read in flight keeps its
//! own `Arc<File>`, so eviction never cuts a read short; the descriptor closes
//! when the last holder drops it.

use std::fs::File;
use std::sync::{Arc, Mutex};

use crate::lru::WeightedLru;

/// Default `--max-open-files`: well under the usual soft limit of 1024, which
/// also has to cover sockets, the database and the runtime's own descriptors.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

/// How many times an operation that failed with `EMFILE`/`ENFILE` is retried
/// after the cache has been emptied.
const EMFILE_RETRIES: usize = 3;

type BlockKey = (u64, u64);

/// Bounded LRU of read handles, keyed by (container id, local id).
#[derive(Debug)]
pub struct FileCache {
    capacity: usize,
    inner: Mutex<WeightedLru<BlockKey, Arc<File>>>,
}

fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    // EMFILE: this process's limit; ENFILE: the system's.
    matches!(e.raw_os_error(), Some(24 | 23))
}

impl FileCache {
    /// A cache of at most `capacity` handles (0 caches nothing: every read
    /// opens and closes its file).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(WeightedLru::new(capacity as u64)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WeightedLru<BlockKey, Arc<File>>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached handle of `key`, marking it most recently used.
    pub fn get(&self, key: BlockKey) -> Option<Arc<File>> {
        self.lock().get(key)
    }

    /// Caches `file` for `key` (replacing an older handle), evicting the
    /// least recently used handles past capacity.
    pub fn insert(&self, key: BlockKey, file: Arc<File>) {
        self.lock().insert(key, file, 1);
    }

    /// Drops the cached handle of `key` (its block was deleted or truncated).
    pub fn remove(&self, key: BlockKey) {
        self.lock().remove(key);
    }

    /// Drops every cached handle.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Handles currently cached (each is one open descriptor, plus those
    /// held by reads in flight after eviction).
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no handle is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most handles this cache holds.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs `op` (an `open` or anything else that needs a descriptor); when
    /// it fails because the process or system is out of descriptors, empties
    /// the cache (closing the handles no read holds) and tries again, up to
    /// `EMFILE_RETRIES` times.
    ///
    /// # Errors
    /// `op`'s error once retries are exhausted or when it is not `EMFILE`/`ENFILE`.
    pub fn retry_on_emfile<T>(
        &self,
        mut op: impl FnMut() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut tries = 0;
        loop {
            match op() {
                Err(e) if is_out_of_descriptors(&e) && tries < EMFILE_RETRIES => {
                    tries += 1;
                    tracing::warn!(
                        cached = self.len(),
                        "out of file descriptors; closing cached block handles and retrying"
                    );
                    self.clear();
                    // Give reads in flight that still hold evicted handles a
                    // moment to finish and close them.
                    if tries > 1 {
                        std::thread::sleep(std::time::Duration::from_millis(5 * tries as u64));
                    }
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Arc<File> {
        Arc::new(tempfile::tempfile().expect("a temp file"))
    }

    #[test]
    fn evicts_least_recently_used_past_capacity() {
        let c = FileCache::new(2);
        c.insert((1, 1), file());
        c.insert((1, 2), file());
        assert!(c.get((1, 1)).is_some(), "touch 1 so that 2 is the oldest");
        c.insert((1, 3), file());
        assert_eq!(c.len(), 2);
        assert!(c.get((1, 2)).is_none(), "least recently used is evicted");
        assert!(c.get((1, 1)).is_some());
        assert!(c.get((1, 3)).is_some());
        c.remove((1, 1));
        assert_eq!(c.len(), 1);
        assert!(c.get((1, 1)).is_none());
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let c = FileCache::new(0);
        c.insert((1, 1), file());
        assert!(c.is_empty());
    }

    #[test]
    fn emfile_empties_the_cache_and_retries() {
        let c = FileCache::new(4);
        c.insert((1, 1), file());
        let mut calls = 0;
        let r = c.retry_on_emfile(|| {
            calls += 1;
            if calls == 1 {
                Err(std::io::Error::from_raw_os_error(24))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.expect("the retry succeeds"), 2);
        assert!(c.is_empty(), "EMFILE closes cached handles");
        let mut calls = 0;
        let r: std::io::Result<()> = c.retry_on_emfile(|| {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(24))
        });
        assert!(r.is_err());
        assert_eq!(calls, EMFILE_RETRIES + 1, "bounded retries");
        let mut calls = 0;
        let r: std::io::Result<()> = c.retry_on_emfile(|| {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(2))
        });
        assert!(r.is_err());
        assert_eq!(calls, 1, "other errors are not retried");
    }
}
