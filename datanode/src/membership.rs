//! The cluster a datanode belongs to, kept in `DIR/cluster.id` (HDFS's and
//! Ozone's datanodes keep the clusterID in their VERSION file): empty until
//! an om first accepts the datanode's registration, then that om's cluster
//! id for good. Every registration, heartbeat and block report carries it,
//! and an om of another cluster refuses them (`om/src/cluster_id.rs`), so a
//! datanode that has joined a cluster and is restarted against an om with a
//! new store, or given the oms of two clusters, is never filled or swept by
//! a cluster that does not know its blocks. (A data dir written before
//! cluster ids existed has blocks and no file: it joins the first om that
//! answers, with a warning.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::DatanodeError;

/// The file under the data dir that holds the cluster id.
pub const CLUSTER_ID_FILE: &str = "cluster.id";

/// Longest cluster id taken from an om or the file (an om's is 36 bytes).
const MAX_ID_LEN: usize = 128;

/// Whether `id` can be a cluster id: 1 to [`MAX_ID_LEN`] printable ASCII
/// characters without spaces.
fn valid(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Why an om's answer was not taken as this datanode's cluster.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JoinError {
    /// The data dir belongs to another cluster.
    #[error(
        "this data dir belongs to cluster {ours} ({file}), but the om serves cluster {theirs}; \
         to join that cluster, start the datanode on a new data dir"
    )]
    OtherCluster {
        /// The cluster in the file.
        ours: String,
        /// The om's.
        theirs: String,
        /// The file, for the message.
        file: String,
    },
    /// The om's answer names no valid cluster id.
    #[error("the om named no valid cluster id: {0:?}")]
    InvalidId(String),
    /// The id could not be written durably (local I/O).
    #[error("recording cluster {id} in {file}: {source}")]
    Record {
        /// The cluster being joined.
        id: String,
        /// The file.
        file: String,
        /// What the file system said.
        source: std::io::Error,
    },
}

/// The cluster this datanode has joined, and where that is kept.
#[derive(Debug)]
pub(crate) struct Membership {
    joined: Mutex<Option<String>>,
    file: PathBuf,
}

impl Membership {
    /// The membership recorded under `dir` (none if the datanode never
    /// joined a cluster).
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] for a file that does not hold a
    /// cluster id (refused, never replaced: it decides which oms may use
    /// the blocks); an I/O error reading it.
    pub(crate) fn load(dir: &Path) -> Result<Self, DatanodeError> {
        let file = dir.join(CLUSTER_ID_FILE);
        let joined = match std::fs::read_to_string(&file) {
            Ok(s) if valid(s.trim()) => Some(s.trim().to_string()),
            Ok(s) => {
                return Err(DatanodeError::InvalidArgument(format!(
                    "{} does not hold a cluster id: {:?}",
                    file.display(),
                    s.chars().take(MAX_ID_LEN).collect::<String>()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(DatanodeError::io(format!("reading {}", file.display()), e)),
        };
        Ok(Self {
            joined: Mutex::new(joined),
            file,
        })
    }

    /// The cluster id joined, or `""` before the first registration (what
    /// requests carry).
    pub(crate) fn joined(&self) -> String {
        self.lock().clone().unwrap_or_default()
    }

    /// Takes an om's answer naming cluster `theirs`: joins it, durably,
    /// when none is joined yet. An empty id (an om older than cluster ids)
    /// passes. `held_blocks` is how many blocks the data dir holds: a data
    /// dir written before cluster ids existed holds blocks without a
    /// `cluster.id`, and joins the first om's cluster with a warning.
    ///
    /// # Errors
    /// [`JoinError`]: another cluster, an answer that is no cluster id, or
    /// the file not written (nothing is joined then; the file may hold the
    /// id when only the directory's sync failed).
    pub(crate) fn accept(&self, theirs: &str, held_blocks: u64) -> Result<(), JoinError> {
        if theirs.is_empty() {
            return Ok(());
        }
        let mut joined = self.lock();
        match joined.as_deref() {
            Some(ours) if ours == theirs => Ok(()),
            Some(ours) => Err(JoinError::OtherCluster {
                ours: ours.to_string(),
                theirs: theirs.to_string(),
                file: self.file.display().to_string(),
            }),
            None if !valid(theirs) => Err(JoinError::InvalidId(
                theirs.chars().take(MAX_ID_LEN).collect(),
            )),
            None => {
                write_durably(&self.file, theirs).map_err(|source| JoinError::Record {
                    id: theirs.to_string(),
                    file: self.file.display().to_string(),
                    source,
                })?;
                if held_blocks > 0 {
                    tracing::warn!(
                        cluster = theirs,
                        blocks = held_blocks,
                        "this data dir holds blocks but had no cluster id (written before cluster \
                         ids); it joined the cluster of the om that answered first, whose \
                         metadata must be the one those blocks belong to"
                    );
                } else {
                    tracing::info!(cluster = theirs, "joined cluster");
                }
                *joined = Some(theirs.to_string());
                Ok(())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.joined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes `text` to `path` so that a crash leaves the old file or the new
/// one, whole: a temporary file, synced, renamed over, the directory synced.
///
/// # Errors
/// The first I/O error.
pub(crate) fn write_durably(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cluster_is_joined_for_good_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = Membership::load(dir.path()).expect("load");
        assert_eq!(m.joined(), "");
        m.accept("", 0).expect("an om without ids passes");
        assert_eq!(m.joined(), "");
        m.accept("bad id", 0).expect_err("not an id");
        assert_eq!(m.joined(), "", "nothing joined");
        m.accept("CID-a", 0).expect("join");
        m.accept("CID-a", 0).expect("the same");
        let e = m.accept("CID-b", 0).expect_err("another cluster");
        assert!(matches!(e, JoinError::OtherCluster { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("CID-a") && text.contains("CID-b"), "{text}");

        let again = Membership::load(dir.path()).expect("reload");
        assert_eq!(again.joined(), "CID-a");
        again.accept("CID-b", 0).expect_err("still another cluster");
        // A file edited by hand keeps working with a trailing newline.
        std::fs::write(dir.path().join(CLUSTER_ID_FILE), "CID-c\n").expect("write");
        assert_eq!(
            Membership::load(dir.path()).expect("reload").joined(),
            "CID-c"
        );
    }

    #[test]
    fn a_file_without_a_cluster_id_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["", "  \n", "two words", &"x".repeat(MAX_ID_LEN + 1)] {
            std::fs::write(dir.path().join(CLUSTER_ID_FILE), bad).expect("write");
            let e = Membership::load(dir.path()).expect_err(bad);
            assert!(
                matches!(e, DatanodeError::InvalidArgument(_)),
                "{bad:?}: {e:?}"
            );
        }
    }

    #[test]
    fn an_id_that_cannot_be_recorded_is_not_joined() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The temporary file's name taken by a directory: the write fails,
        // even for root.
        std::fs::create_dir(dir.path().join("cluster.tmp")).expect("mkdir");
        let m = Membership::load(dir.path()).expect("load");
        let e = m.accept("CID-a", 7).expect_err("cannot write");
        assert!(matches!(e, JoinError::Record { .. }), "{e:?}");
        assert_eq!(m.joined(), "", "nothing joined");
        assert!(!dir.path().join(CLUSTER_ID_FILE).exists());
    }
}
