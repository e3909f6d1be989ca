//! Exclusive ownership of a data directory by one process.
//!
//! Every process that keeps state in a directory (om, datanode, minicluster)
//! holds an exclusive advisory lock (`flock`) on `DIR/LOCK` for as long as it
//! uses the directory, and writes its pid and role into that file. A second
//! owner is refused with [`DirLockError::InUse`], which names the first, so
//! that two clusters never share (and never delete) each other's data. The
//! lock is released when the [`DirLock`] is dropped or the process dies,
//! however it dies.
//!
//! A child forked by this process holds a copy of every descriptor until it
//! calls `exec` (the lock file is opened close-on-exec), and an `flock` lives
//! as long as any copy: a directory released here and taken again while
//! another thread spawns a process can look held by this very process. This
//! process knows which directories it holds ([`DirLock`]s alive), so a lock
//! that names this process but is held by none of them is waited for, at
//! most [`FORK_WINDOW_WAIT`].

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest wait for a lock held by this process's descriptor but by none of
/// its [`DirLock`]s (a forked child between `fork` and `exec`): 2 s.
pub const FORK_WINDOW_WAIT: Duration = Duration::from_secs(2);

/// Directories (canonical paths) this process holds through a live [`DirLock`].
static HELD: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn held() -> std::sync::MutexGuard<'static, Option<HashSet<PathBuf>>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Name of the lock file inside a locked directory.
pub const LOCK_FILE: &str = "LOCK";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirLockError {
    /// Another process (or another owner in this one) holds the directory.
    #[error(
        "data dir {} is in use by {holder} (lock file {}); stop it or choose another directory",
        dir.display(),
        lock.display()
    )]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// What the holder wrote into the lock file ("pid 123 (datanode)").
        holder: String,
        /// The holder's pid, when the lock file names one.
        pid: Option<u32>,
    },
    /// Creating, opening or writing the lock file failed.
    #[error("locking data dir {}: {source}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A held lock on a directory; released on drop.
#[derive(Debug)]
pub struct DirLock {
    dir: PathBuf,
    /// `dir` canonical: the entry in [`HELD`].
    canonical: PathBuf,
    _file: File,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if let Some(set) = held().as_mut() {
            set.remove(&self.canonical);
        }
    }
}

impl DirLockError {
    /// Whether the holder is this very process (an in-process owner that is
    /// still shutting down, as a datanode restarted in a minicluster).
    #[must_use]
    pub fn held_by_this_process(&self) -> bool {
        matches!(self, Self::InUse { pid: Some(p), .. } if *p == std::process::id())
    }
}

impl DirLock {
    /// Creates `dir` if needed and takes its lock for `role` ("datanode",
    /// "om", "minicluster"), recording this process's pid and `role`.
    ///
    /// # Errors
    /// [`DirLockError::InUse`] when another owner holds it;
    /// [`DirLockError::Io`] for file-system errors.
    pub fn acquire(dir: &Path, role: &str) -> Result<Self, DirLockError> {
        let io = |source| DirLockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let canonical = std::fs::canonicalize(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let deadline = Instant::now() + FORK_WINDOW_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let err = in_use(&mut file, dir, &path);
                    // Ours by descriptor, but no owner here holds it: a
                    // forked child's copy, gone at its exec.
                    let stray_copy = err.held_by_this_process()
                        && !held().as_ref().is_some_and(|set| set.contains(&canonical));
                    if !stray_copy || Instant::now() >= deadline {
                        return Err(err);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "pid {} ({role})", std::process::id()).map_err(io)?;
        held()
            .get_or_insert_with(HashSet::new)
            .insert(canonical.clone());
        Ok(Self {
            dir: dir.to_path_buf(),
            canonical,
            _file: file,
        })
    }

    /// The locked directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The refusal for `dir`, naming the holder its lock file records.
fn in_use(file: &mut File, dir: &Path, path: &Path) -> DirLockError {
    let mut holder = String::new();
    // Best effort: the holder may be rewriting it right now.
    let _ = file
        .rewind()
        .and_then(|()| file.read_to_string(&mut holder));
    let holder = holder.trim();
    let pid = holder
        .strip_prefix("pid ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok());
    DirLockError::InUse {
        pid,
        dir: dir.to_path_buf(),
        lock: path.to_path_buf(),
        holder: if holder.is_empty() {
            "another process".to_string()
        } else {
            holder.to_string()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_with_the_first_named() {
        let dir = std::env::temp_dir().join(format!("dirlock-test-{}", std::process::id()));
        let first = DirLock::acquire(&dir, "datanode").expect("the first lock");
        let err = DirLock::acquire(&dir, "om").expect_err("a second owner is refused");
        assert!(err.held_by_this_process());
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {} (datanode)", std::process::id())),
            "{msg}"
        );
        drop(first);
        let again = DirLock::acquire(&dir, "om").expect("free again after drop");
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Regression: an om reopened in a test binary that spawns processes
    /// was refused with its own pid (a forked child's copy of the lock's
    /// descriptor, held until its exec). A second descriptor locked and
    /// released after 200 ms stands in for the child.
    #[test]
    fn a_copy_of_our_own_descriptor_is_waited_for() {
        let dir = std::env::temp_dir().join(format!("dirlock-fork-{}", std::process::id()));
        drop(DirLock::acquire(&dir, "om").expect("lock"));
        let copy = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .expect("open");
        copy.try_lock().expect("the copy locks");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(copy);
        });
        let lock = DirLock::acquire(&dir, "om").expect("taken once the copy is closed");
        release.join().expect("join");
        // A live owner in this process is still refused at once.
        let started = Instant::now();
        let err = DirLock::acquire(&dir, "datanode").expect_err("held by a live owner");
        assert!(err.held_by_this_process());
        assert!(
            started.elapsed() < FORK_WINDOW_WAIT,
            "refused without waiting"
        );
        drop(lock);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
