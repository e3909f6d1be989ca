//! [`OzoneManager`]: the metadata service as an in-process library.
//!
//! Holds the datanode registry (SCM's role) and buckets and keys (OM's role)
//! in one redb database; open-key sessions live in memory (a key being
//! written when the om restarts is lost, never half-visible). Keys become
//! visible only at commit, as in Ozone's open-key / allocate / commit flow.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use proto_crate::wire::om as pb;
use proto_crate::{
    BlockGroup, BlockLocation, BucketInfo, DatanodeDetails, KeyInfo, Pipeline, ReplicationConfig,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::OmError;

type Result<T, E = OmError> = std::result::Result<T, E>;

const DATANODES: TableDefinition<&str, &str> = TableDefinition::new("datanodes");
pub(crate) const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
pub(crate) const KEYS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("keys");
/// Multipart uploads in progress: upload id -> encoded `MultipartUploadInfo`.
pub(crate) const UPLOADS: TableDefinition<&str, &[u8]> = TableDefinition::new("multipart_uploads");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// Blocks placed in one container before the om opens a new one on the same
/// pipeline (a stand-in for Ozone's 5 GB container size).
const BLOCKS_PER_CONTAINER: u32 = 1000;

/// Settings of an om.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OmConfig {
    /// Where the database lives.
    pub data_dir: PathBuf,
    /// Replication of buckets created without one (default `rs-3-2-1024k`).
    pub default_replication: ReplicationConfig,
    /// Internal block size of buckets created without one (default 256 MiB).
    pub default_block_size: u64,
}

impl OmConfig {
    /// Defaults (rs-3-2-1024k, 256 MiB blocks) storing under `data_dir`.
    #[must_use]
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            default_replication: ReplicationConfig::default(),
            default_block_size: 256 * 1024 * 1024,
        }
    }

    /// Sets the default internal block size, bytes.
    #[must_use]
    pub fn with_default_block_size(mut self, bytes: u64) -> Self {
        self.default_block_size = bytes;
        self
    }

    /// Sets the default replication.
    #[must_use]
    pub fn with_default_replication(mut self, r: ReplicationConfig) -> Self {
        self.default_replication = r;
        self
    }
}

/// What an open session commits into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionTarget {
    /// A key (`commit_key`).
    Key,
    /// A part of a multipart upload (`commit_part`).
    Part { upload_id: String, part_number: u32 },
}

#[derive(Debug)]
pub(crate) struct OpenKeySession {
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) replication: ReplicationConfig,
    pub(crate) block_size: u64,
    pub(crate) allocated: Vec<BlockGroup>,
    pub(crate) target: SessionTarget,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    datanodes: BTreeMap<String, DatanodeDetails>,
    pub(crate) sessions: HashMap<u64, OpenKeySession>,
    next_session: u64,
    allocations: u64,
    open_containers: HashMap<Vec<String>, (u64, u32)>,
}

/// What an opened key session tells the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenKey {
    /// Id to allocate groups and commit with.
    pub session_id: u64,
    /// Replication of the key.
    pub replication: ReplicationConfig,
    /// Internal block size, bytes.
    pub block_size: u64,
}

/// The metadata service.
#[derive(Debug)]
pub struct OzoneManager {
    config: OmConfig,
    pub(crate) db: Database,
    state: Mutex<State>,
    /// Number of open sessions, published on every change.
    sessions_open: tokio::sync::watch::Sender<usize>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn decode<M: Message + Default, T: TryFrom<M, Error = proto_crate::ProtocolError>>(
    bytes: &[u8],
    what: &str,
) -> Result<T> {
    let m =
        M::decode(bytes).map_err(|e| OmError::Db(format!("{what} record does not decode: {e}")))?;
    T::try_from(m).map_err(|e| OmError::Db(format!("{what} record is invalid: {e}")))
}

fn validate_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(OmError::InvalidArgument(format!("{kind} name is empty")));
    }
    if name.len() > 1024 || name.contains('\0') {
        return Err(OmError::InvalidArgument(format!(
            "{kind} name must be at most 1024 bytes and contain no NUL"
        )));
    }
    Ok(())
}

impl OzoneManager {
    /// Opens (or creates) the om's database under `config.data_dir` and loads
    /// the datanode registry.
    ///
    /// # Errors
    /// I/O and database errors.
    pub fn open(config: OmConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| OmError::Db(format!("creating {}: {e}", config.data_dir.display())))?;
        let db = Database::create(config.data_dir.join("om.redb"))?;
        let txn = db.begin_write()?;
        {
            txn.open_table(DATANODES)?;
            txn.open_table(BUCKETS)?;
            txn.open_table(KEYS)?;
            txn.open_table(COUNTERS)?;
            txn.open_table(UPLOADS)?;
        }
        txn.commit()?;
        let mut state = State::default();
        {
            let read = db.begin_read()?;
            for entry in read.open_table(DATANODES)?.iter()? {
                let (k, v) = entry?;
                let d = DatanodeDetails {
                    uuid: k.value().to_string(),
                    address: v.value().to_string(),
                };
                state.datanodes.insert(d.uuid.clone(), d);
            }
        }
        Ok(Self {
            config,
            db,
            state: Mutex::new(state),
            sessions_open: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The directory holding the database.
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds or updates (same uuid, new address) a datanode in the registry.
    ///
    /// # Errors
    /// Database errors.
    pub fn register_datanode(&self, d: DatanodeDetails) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(DATANODES)?
            .insert(d.uuid.as_str(), d.address.as_str())?;
        txn.commit()?;
        tracing::info!(datanode = %d, "datanode registered");
        self.state().datanodes.insert(d.uuid.clone(), d);
        Ok(())
    }

    /// Open key and part sessions (written but neither committed nor aborted).
    #[must_use]
    pub fn open_sessions(&self) -> usize {
        self.state().sessions.len()
    }

    /// A receiver of the number of open sessions, updated whenever a session
    /// opens, commits or is aborted (to wait on without polling).
    #[must_use]
    pub fn watch_open_sessions(&self) -> tokio::sync::watch::Receiver<usize> {
        self.sessions_open.subscribe()
    }

    fn publish_sessions(&self, st: &State) {
        self.sessions_open.send_replace(st.sessions.len());
    }

    /// Every registered datanode, by uuid.
    #[must_use]
    pub fn datanodes(&self) -> Vec<DatanodeDetails> {
        self.state().datanodes.values().cloned().collect()
    }

    /// Creates a bucket; `None` takes the om's default replication / block size.
    ///
    /// # Errors
    /// [`OmError::BucketAlreadyExists`], [`OmError::InvalidArgument`] for a bad
    /// name or a zero block size, database errors.
    pub fn create_bucket(
        &self,
        name: &str,
        replication: Option<ReplicationConfig>,
        block_size: Option<u64>,
    ) -> Result<BucketInfo> {
        validate_name("bucket", name)?;
        let block_size = block_size.unwrap_or(self.config.default_block_size);
        if block_size == 0 {
            return Err(OmError::InvalidArgument(
                "block size must be positive".into(),
            ));
        }
        let default_replication = replication.unwrap_or(self.config.default_replication);
        if let ReplicationConfig::Ec(ec) = default_replication
            && !block_size.is_multiple_of(ec.cell_size())
        {
            return Err(OmError::InvalidArgument(format!(
                "block size {block_size} is not a multiple of the {ec} cell size {}",
                ec.cell_size()
            )));
        }
        let info = BucketInfo {
            name: name.to_string(),
            default_replication,
            block_size,
            created_unix_ms: now_ms(),
        };
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(BUCKETS)?;
            if t.get(name)?.is_some() {
                return Err(OmError::BucketAlreadyExists(name.to_string()));
            }
            t.insert(
                name,
                pb::BucketInfo::from(info.clone())
                    .encode_to_vec()
                    .as_slice(),
            )?;
        }
        txn.commit()?;
        Ok(info)
    }

    /// The bucket named `name`.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], database errors.
    pub fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let read = self.db.begin_read()?;
        let t = read.open_table(BUCKETS)?;
        let v = t
            .get(name)?
            .ok_or_else(|| OmError::BucketNotFound(name.to_string()))?;
        decode::<pb::BucketInfo, _>(v.value(), "bucket")
    }

    /// Every bucket, by name.
    ///
    /// # Errors
    /// Database errors.
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let read = self.db.begin_read()?;
        let t = read.open_table(BUCKETS)?;
        let mut out = Vec::new();
        for entry in t.iter()? {
            let (_, v) = entry?;
            out.push(decode::<pb::BucketInfo, _>(v.value(), "bucket")?);
        }
        Ok(out)
    }

    /// Deletes an empty bucket.
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], [`OmError::BucketNotEmpty`], database errors.
    pub fn delete_bucket(&self, name: &str) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let keys = txn.open_table(KEYS)?;
            if keys
                .range((name, "")..)?
                .next()
                .transpose()?
                .is_some_and(|(k, _)| k.value().0 == name)
            {
                return Err(OmError::BucketNotEmpty(name.to_string()));
            }
            let mut t = txn.open_table(BUCKETS)?;
            if t.remove(name)?.is_none() {
                return Err(OmError::BucketNotFound(name.to_string()));
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Opens a key for writing. Nothing is visible until [`commit_key`](Self::commit_key).
    ///
    /// # Errors
    /// [`OmError::BucketNotFound`], [`OmError::InvalidArgument`] for a bad key name.
    pub fn open_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<OpenKey> {
        self.open_session(bucket, key, replication, SessionTarget::Key)
    }

    pub(crate) fn open_session(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        target: SessionTarget,
    ) -> Result<OpenKey> {
        validate_name("key", key)?;
        let b = self.get_bucket(bucket)?;
        let replication = replication.unwrap_or(b.default_replication);
        let mut st = self.state();
        st.next_session += 1;
        let session_id = st.next_session;
        st.sessions.insert(
            session_id,
            OpenKeySession {
                bucket: bucket.to_string(),
                key: key.to_string(),
                replication,
                block_size: b.block_size,
                allocated: Vec::new(),
                target,
            },
        );
        self.publish_sessions(&st);
        Ok(OpenKey {
            session_id,
            replication,
            block_size: b.block_size,
        })
    }

    fn next_counter(&self, name: &str, by: u64) -> Result<u64> {
        let txn = self.db.begin_write()?;
        let v;
        {
            let mut t = txn.open_table(COUNTERS)?;
            v = t.get(name)?.map_or(1, |g| g.value());
            t.insert(name, v + by)?;
        }
        txn.commit()?;
        Ok(v)
    }

    /// Allocates a new block group for an open key: d+p (EC) or factor
    /// (replicated) distinct datanodes none of which is in `exclude` (uuids),
    /// a container and a local id, and a replica index per location (1..=d+p
    /// for EC, 0 when replicated). Placement rotates over the registry so that
    /// successive groups spread indexes across datanodes.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::NotEnoughDatanodes`], database errors.
    pub fn allocate_block_group(&self, session_id: u64, exclude: &[String]) -> Result<BlockGroup> {
        let (replication, candidates, rotation) = {
            let mut st = self.state();
            let s = st
                .sessions
                .get(&session_id)
                .ok_or(OmError::NoSuchSession(session_id))?;
            let replication = s.replication;
            let excluded: HashSet<&str> = exclude.iter().map(String::as_str).collect();
            let candidates: Vec<DatanodeDetails> = st
                .datanodes
                .values()
                .filter(|d| !excluded.contains(d.uuid.as_str()))
                .cloned()
                .collect();
            let needed = replication.required_nodes();
            if candidates.len() < needed {
                return Err(OmError::NotEnoughDatanodes {
                    needed,
                    available: candidates.len(),
                    excluded: st.datanodes.len() - candidates.len(),
                });
            }
            st.allocations += 1;
            (replication, candidates, st.allocations)
        };
        let needed = replication.required_nodes();
        let n = candidates.len();
        let start = usize::try_from(rotation % n as u64).unwrap_or(0);
        let chosen: Vec<DatanodeDetails> = (0..needed)
            .map(|i| candidates[(start + i) % n].clone())
            .collect();
        let locations: Vec<BlockLocation> = chosen
            .into_iter()
            .enumerate()
            .map(|(i, datanode)| BlockLocation {
                datanode,
                replica_index: match replication {
                    ReplicationConfig::Ec(_) => u32::try_from(i + 1).unwrap_or(u32::MAX),
                    ReplicationConfig::Replicated { .. } => 0,
                },
            })
            .collect();
        let pipeline_key: Vec<String> = locations.iter().map(|l| l.datanode.uuid.clone()).collect();
        let local_id = self.next_counter("next_local_id", 1)?;
        let container_id = {
            let existing = {
                let mut st = self.state();
                match st.open_containers.get_mut(&pipeline_key) {
                    Some((cid, used)) if *used < BLOCKS_PER_CONTAINER => {
                        *used += 1;
                        Some(*cid)
                    }
                    _ => None,
                }
            };
            match existing {
                Some(cid) => cid,
                None => {
                    let cid = self.next_counter("next_container_id", 1)?;
                    self.state().open_containers.insert(pipeline_key, (cid, 1));
                    cid
                }
            }
        };
        let group = BlockGroup {
            container_id,
            local_id,
            length: 0,
            pipeline: Pipeline { locations },
        };
        let mut st = self.state();
        let s = st
            .sessions
            .get_mut(&session_id)
            .ok_or(OmError::NoSuchSession(session_id))?;
        s.allocated.push(group.clone());
        Ok(group)
    }

    /// Commits an open key: `groups` (in key order, each with its acknowledged
    /// length; groups of length 0 are dropped) must be groups allocated to this
    /// session, and their lengths must sum to `length`. Locations are taken
    /// from the om's own allocation record. Replaces any key of the same name.
    ///
    /// # Errors
    /// [`OmError::NoSuchSession`], [`OmError::InvalidArgument`] for unknown
    /// groups or a length mismatch, database errors.
    pub fn commit_key(
        &self,
        session_id: u64,
        groups: &[BlockGroup],
        length: u64,
        metadata: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        let (s, committed) = self.take_session(session_id, groups, length, &SessionTarget::Key)?;
        let info = KeyInfo {
            bucket: s.bucket.clone(),
            name: s.key.clone(),
            length,
            replication: s.replication,
            block_groups: committed,
            block_size: s.block_size,
            created_unix_ms: now_ms(),
            metadata,
        };
        self.put_key(&info)?;
        Ok(info)
    }

    /// Stores `info` as a committed key, replacing any key of the same name.
    pub(crate) fn put_key(&self, info: &KeyInfo) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            if txn
                .open_table(BUCKETS)?
                .get(info.bucket.as_str())?
                .is_none()
            {
                return Err(OmError::BucketNotFound(info.bucket.clone()));
            }
            txn.open_table(KEYS)?.insert(
                (info.bucket.as_str(), info.name.as_str()),
                pb::KeyInfo::from(info.clone()).encode_to_vec().as_slice(),
            )?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Ends session `session_id` (which must commit into `target`): checks
    /// `groups` were allocated to it and sum to `length`; returns the session
    /// and the groups with their lengths and the om's locations (groups of
    /// length 0 dropped).
    pub(crate) fn take_session(
        &self,
        session_id: u64,
        groups: &[BlockGroup],
        length: u64,
        target: &SessionTarget,
    ) -> Result<(OpenKeySession, Vec<BlockGroup>)> {
        let s = {
            let mut st = self.state();
            match st.sessions.get(&session_id) {
                None => return Err(OmError::NoSuchSession(session_id)),
                Some(s) if std::mem::discriminant(&s.target) != std::mem::discriminant(target) => {
                    return Err(OmError::InvalidArgument(format!(
                        "session {session_id} commits into {:?}, not {target:?}",
                        s.target
                    )));
                }
                Some(_) => {}
            }
            let s = st
                .sessions
                .remove(&session_id)
                .ok_or(OmError::NoSuchSession(session_id))?;
            self.publish_sessions(&st);
            s
        };
        let mut committed = Vec::new();
        let mut sum = 0u64;
        for g in groups {
            let Some(allocated) = s
                .allocated
                .iter()
                .find(|a| a.container_id == g.container_id && a.local_id == g.local_id)
            else {
                return Err(OmError::InvalidArgument(format!(
                    "block group {}:{} was not allocated to session {session_id}",
                    g.container_id, g.local_id
                )));
            };
            sum = sum
                .checked_add(g.length)
                .ok_or_else(|| OmError::InvalidArgument("group lengths overflow".into()))?;
            if g.length > 0 {
                committed.push(BlockGroup {
                    length: g.length,
                    ..allocated.clone()
                });
            }
        }
        if sum != length {
            return Err(OmError::InvalidArgument(format!(
                "key length {length} differs from the sum of its group lengths {sum}"
            )));
        }
        Ok((s, committed))
    }

    /// Abandons an open key; nothing becomes visible. Unknown sessions are fine.
    pub fn abort_key(&self, session_id: u64) {
        let mut st = self.state();
        st.sessions.remove(&session_id);
        self.publish_sessions(&st);
    }
}
