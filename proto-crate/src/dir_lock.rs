//! Exclusive ownership of a data directory by one process.
//!
//! Every process that keeps state in a directory (om, datanode, minicluster)
//! holds an exclusive advisory lock (`flock`) on `DIR/LOCK` for as long as it
//! uses the directory, and writes its pid and role into that file. A second
//! owner is refused with [`DirLockError::InUse`], which names the first, so
//! that two clusters never share (and never delete) each other's data. The
//! lock is released when the [`DirLock`] is dropped or the process dies,
//! however it dies.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

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
    _file: File,
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
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // Best effort: the holder may be rewriting it right now.
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let pid = holder
                    .strip_prefix("pid ")
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|p| p.parse().ok());
                return Err(DirLockError::InUse {
                    pid,
                    dir: dir.to_path_buf(),
                    lock: path,
                    holder: if holder.is_empty() {
                        "another process".to_string()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "pid {} ({role})", std::process::id()).map_err(io)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            _file: file,
        })
    }

    /// The locked directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
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
}
