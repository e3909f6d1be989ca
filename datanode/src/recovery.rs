//! Start-up of a datanode's store: loading the committed records, and
//! recovering block files after a crash.
//!
//! WriteChunk writes a block file without syncing it; only a durable
//! PutBlock (sync or eof: fsync, then the record's commit) makes bytes part
//! of a block across a restart. A publishing PutBlock (an EC writer's
//! per-stripe commit) is held in memory only. A datanode stopped or killed
//! before a block's durable PutBlock thus leaves bytes on disk that no
//! durable record covers:
//! - a block file with no durable record at all (its writer got at most
//!   publishing answers; a key commits only after a close, so such a block
//!   belongs to a write that never completed here, and the om's
//!   ReplicationManager rebuilds it from the other indexes if the key did
//!   commit without this index closing): the file is removed;
//! - a block whose file is longer than its durable record (chunks written
//!   or published after the last durable PutBlock): the file is truncated to
//!   the record's size, so the tail is neither served nor counted.
//!
//! Reads never went past the committed size anyway (see
//! `ContainerStore::read`); recovery reclaims the space and makes the file
//! match its record, as Ozone's container scanner does for FilePerBlock
//! containers. A file shorter than its committed size cannot come from a
//! crash when fsync is honoured; it is reported, not changed (reads of it
//! fail and clients fail over to another replica).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use prost::Message;
use proto_crate::BlockData;
use proto_crate::wire::datanode as pb;
use redb::{Database, ReadableDatabase, ReadableTable};

use crate::DatanodeError;
use crate::storage::{BLOCKS, BlockKey, CONTAINERS, DELETED, FINE_SUFFIX};

/// What the store's database holds, loaded at start.
pub(crate) struct Loaded {
    /// Committed blocks by (container id, local id).
    pub(crate) committed: HashMap<BlockKey, Arc<BlockData>>,
    /// Containers present.
    pub(crate) containers: HashSet<u64>,
    /// Deleted blocks whose tombstone is still kept.
    pub(crate) tombstoned: HashSet<BlockKey>,
}

/// Loads every committed block record, container and tombstone.
///
/// # Errors
/// Database errors; a stored record that does not decode (reported, never
/// silently skipped).
pub(crate) fn load(db: &Database) -> Result<Loaded, DatanodeError> {
    let mut loaded = Loaded {
        committed: HashMap::new(),
        containers: HashSet::new(),
        tombstoned: HashSet::new(),
    };
    let read = db.begin_read()?;
    for entry in read.open_table(BLOCKS)?.iter()? {
        let (k, v) = entry?;
        let corrupt =
            |source: Box<dyn std::error::Error + Send + Sync>| DatanodeError::CorruptRecord {
                key: k.value(),
                source,
            };
        let wire = pb::BlockData::decode(v.value()).map_err(|e| corrupt(Box::new(e)))?;
        let data = BlockData::try_from(wire).map_err(|e| corrupt(Box::new(e)))?;
        loaded.committed.insert(k.value(), Arc::new(data));
    }
    for entry in read.open_table(CONTAINERS)?.iter()? {
        loaded.containers.insert(entry?.0.value());
    }
    for entry in read.open_table(DELETED)?.iter()? {
        loaded.tombstoned.insert(entry?.0.value());
    }
    Ok(loaded)
}

/// Log message of a block file removed at start-up (process tests count it).
pub const RECOVERY_ORPHAN_LOG: &str = "removed a block file with no committed metadata";
/// Log message of a block file truncated at start-up.
pub const RECOVERY_TAIL_LOG: &str = "truncated an uncommitted block tail";

/// What start-up recovery found and did (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecoveryReport {
    /// Block files with no committed metadata, removed.
    pub orphans_removed: u64,
    /// Committed blocks whose file held an uncommitted tail, truncated.
    pub tails_truncated: u64,
    /// Bytes freed by both.
    pub bytes_reclaimed: u64,
    /// Committed blocks whose file is shorter than the committed size.
    pub short_files: u64,
    /// Fine checksums files (`<local id>.fine`) of blocks with no committed
    /// record, removed (a crash after a lost block's record was dropped).
    pub fine_orphans_removed: u64,
}

/// Scans `root/containers/*/*.block` (and the blocks' `*.fine` files)
/// against `committed` and reclaims what no committed record covers. Files of `tombstoned` blocks are left to the
/// deletion's own clean-up (they are not orphans).
///
/// # Errors
/// I/O errors listing, removing or truncating files.
pub(crate) fn reclaim_uncommitted(
    root: &Path,
    committed: &HashMap<BlockKey, Arc<BlockData>>,
    tombstoned: &HashSet<BlockKey>,
) -> Result<RecoveryReport, DatanodeError> {
    let io = |what: String| move |e| DatanodeError::io(what, e);
    let mut report = RecoveryReport::default();
    let containers = root.join("containers");
    for dir in
        std::fs::read_dir(&containers).map_err(io(format!("listing {}", containers.display())))?
    {
        let dir = dir.map_err(io(format!("listing {}", containers.display())))?;
        let Some(container_id) = dir.file_name().to_str().and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = dir.path();
        if !path.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&path).map_err(io(format!("listing {}", path.display())))? {
            let file = file.map_err(io(format!("listing {}", path.display())))?;
            let name = file.file_name();
            if let Some(local_id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(FINE_SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            {
                let k = (container_id, local_id);
                if !committed.contains_key(&k) && !tombstoned.contains(&k) {
                    let fpath = file.path();
                    let len = file.metadata().map_or(0, |m| m.len());
                    std::fs::remove_file(&fpath)
                        .map_err(io(format!("removing {}", fpath.display())))?;
                    report.fine_orphans_removed += 1;
                    report.bytes_reclaimed += len;
                    tracing::info!(file = %fpath.display(), "removed fine checksums of a block with no committed metadata");
                }
                continue;
            }
            let Some(local_id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".block"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let fpath = file.path();
            let len = file
                .metadata()
                .map_err(io(format!("stat {}", fpath.display())))?
                .len();
            match committed.get(&(container_id, local_id)) {
                None if tombstoned.contains(&(container_id, local_id)) => {}
                None => {
                    std::fs::remove_file(&fpath)
                        .map_err(io(format!("removing {}", fpath.display())))?;
                    report.orphans_removed += 1;
                    report.bytes_reclaimed += len;
                    tracing::info!(file = %fpath.display(), bytes = len, "{RECOVERY_ORPHAN_LOG}");
                }
                Some(data) if len > data.size => {
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&fpath)
                        .map_err(io(format!("opening {}", fpath.display())))?;
                    f.set_len(data.size)
                        .and_then(|()| f.sync_all())
                        .map_err(io(format!("truncating {}", fpath.display())))?;
                    report.tails_truncated += 1;
                    report.bytes_reclaimed += len - data.size;
                    tracing::info!(file = %fpath.display(), committed = data.size, bytes = len - data.size, "{RECOVERY_TAIL_LOG}");
                }
                Some(data) if len < data.size => {
                    report.short_files += 1;
                    tracing::error!(file = %fpath.display(), committed = data.size, len, "block file is shorter than its committed size");
                }
                Some(_) => {}
            }
        }
    }
    Ok(report)
}
