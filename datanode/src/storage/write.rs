//! The write side of the container store: WriteChunk (a block file
//! written at an offset, uncommitted until PutBlock) and PutBlock (published
//! in memory, or synced and committed durably through the group committer).
//! See the parent module for the layout and the durability rules.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message;
use proto_crate::wire::datanode as pb;
use proto_crate::{BlockCommit, BlockData, BlockId, ChunkInfo};
use redb::ReadableDatabase;

use super::fine::{FineBuilder, FineCache, FineChecksums};
use super::group_commit::DurableCommit;
use super::{
    BLOCKS, CLOSED, CommittedMap, ContainerStore, DELETED, MAX_READ_LEN, OpenBlock, OpenMap,
    Result, blocking, key,
};
use crate::DatanodeError;

impl ContainerStore {
    pub(crate) fn open_block(&self, b: BlockId) -> Result<Arc<tokio::sync::Mutex<OpenBlock>>> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ob) = open.get(&key(b)) {
            return Ok(Arc::clone(ob));
        }
        let path = self.block_path(b);
        let file_len = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(DatanodeError::io(format!("stat {}", path.display()), e)),
        };
        let replica_index = self
            .committed_block(b)
            .map_or(b.replica_index, |d| d.block_id.replica_index);
        let (closed, deleted, durable) = {
            let read = self.db.begin_read()?;
            (
                read.open_table(CLOSED)?.get(key(b))?.is_some(),
                read.open_table(DELETED)?.get(key(b))?.is_some(),
                read.open_table(BLOCKS)?.get(key(b))?.is_some(),
            )
        };
        // A new write state means no PutBlock published a record since the
        // last durable one (or the restart), so the record in memory, if
        // durable, is the durable one. Its commit synced the directory.
        let durable_len = if durable {
            self.committed_block(b).map_or(0, |d| d.size)
        } else {
            0
        };
        let dir_synced = durable_len > 0;
        let ob = Arc::new(tokio::sync::Mutex::new(OpenBlock {
            replica_index,
            file_len,
            closed,
            deleted,
            dir_synced,
            durable_len,
            sync_failed: false,
            // Prefix CRCs follow a file written from offset 0 only: a block
            // reopened over bytes already on disk (after a restart) is read
            // by whole windows.
            fine: (file_len == 0).then(FineBuilder::default),
        }));
        open.insert(key(b), Arc::clone(&ob));
        Ok(ob)
    }

    /// Writes `data` as `chunk` of block `b`: the chunk must start at or before
    /// the end of the block file and not inside the committed prefix (a chunk
    /// that starts before the end of the file replaces the uncommitted tail, so
    /// a retried WriteChunk is harmless). Creates the container on first use.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] when `data` and `chunk.len` differ,
    /// are empty, or exceed [`MAX_READ_LEN`]; [`DatanodeError::ReplicaIndexMismatch`];
    /// [`DatanodeError::ChunkOffsetMismatch`]; I/O errors.
    pub async fn write_chunk(&self, b: BlockId, chunk: &ChunkInfo, data: Bytes) -> Result<()> {
        if chunk.len > MAX_READ_LEN {
            // A chunk must be readable in one ReadChunk (checksum windows
            // widen reads to whole windows inside the chunk).
            return Err(DatanodeError::InvalidArgument(format!(
                "chunk {} of block {b} is {} bytes; chunks hold at most {MAX_READ_LEN}",
                chunk.name, chunk.len
            )));
        }
        if data.len() as u64 != chunk.len || data.is_empty() {
            return Err(DatanodeError::InvalidArgument(format!(
                "chunk {} of block {b} says {} bytes but carries {}",
                chunk.name,
                chunk.len,
                data.len()
            )));
        }
        self.create_container(b.container_id).await?;
        let ob = self.open_block(b)?;
        // Owned: the lock goes with the write onto the blocking pool and is
        // released only when the write is over, even if this request is
        // cancelled meanwhile (a deletion waiting for the lock then never
        // races a write that recreates the file it removed).
        let mut ob = ob.lock_owned().await;
        check_writable(&ob, b)?;
        let committed = self.committed_block(b).map_or(0, |d| d.size);
        if chunk.offset > ob.file_len || chunk.offset < committed {
            return Err(DatanodeError::ChunkOffsetMismatch {
                block: b,
                offset: chunk.offset,
                file_len: ob.file_len,
                committed,
            });
        }
        let path = self.block_path(b);
        let offset = chunk.offset;
        let truncate = offset < ob.file_len;
        let len = chunk.len;
        let ty = chunk.checksum.ty;
        let files = Arc::clone(&self.files);
        blocking(move || {
            // Taken out while the file changes: a write that fails leaves
            // the block without fine checksums (its file is then unknown).
            let mut fine = ob.fine.take();
            let f = files
                .retry_on_emfile(|| {
                    OpenOptions::new()
                        .create(true)
                        .write(true)
                        .truncate(false)
                        .open(&path)
                })
                .map_err(|e| DatanodeError::io(format!("opening {}", path.display()), e))?;
            if truncate {
                f.set_len(offset)
                    .map_err(|e| DatanodeError::io(format!("truncating block {b}"), e))?;
                ob.file_len = offset;
            }
            f.write_all_at(&data, offset)
                .map_err(|e| DatanodeError::io(format!("writing block {b}"), e))?;
            // Cached read handles stay valid after a truncate (same inode).
            ob.file_len = offset + len;
            if let Some(f) = fine.as_mut()
                && !f.write(ty, offset, &data)
            {
                fine = None;
            }
            ob.fine = fine;
            Ok(())
        })
        .await
    }

    /// Commits `data` (chunk list, size, metadata) for its block as `commit`
    /// asks: [`BlockCommit::Flush`] publishes the record for reads at once
    /// and syncs nothing (a restart rolls the block back to its last durable
    /// record); [`BlockCommit::Sync`] and [`BlockCommit::Close`] fsync the
    /// block file and commit the record durably (batched with concurrent
    /// ones, `group_commit.rs`) before returning; `Close` also closes the
    /// block and cuts its file to `data.size` when more was written. Returns
    /// the committed length in bytes. A block with no chunks (an EC index
    /// past the data) is recorded with size 0 and no file.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] for a chunk list that is not
    /// contiguous from 0, a size the file does not hold, or one below what
    /// is already committed; [`DatanodeError::ReplicaIndexMismatch`];
    /// [`DatanodeError::BlockClosed`]; [`DatanodeError::BlockDeleted`]; I/O
    /// and database errors (the block's state is then unchanged).
    pub async fn put_block(&self, data: BlockData, commit: BlockCommit) -> Result<u64> {
        let b = data.block_id;
        data.validate_chunks()
            .map_err(|e| DatanodeError::InvalidArgument(format!("PutBlock of {b}: {e}")))?;
        self.create_container(b.container_id).await?;
        let ob_handle = self.open_block(b)?;
        let mut ob = ob_handle.lock_owned().await;
        check_writable(&ob, b)?;
        if data.size > ob.file_len {
            return Err(DatanodeError::InvalidArgument(format!(
                "PutBlock of {b} commits {} bytes but only {} were written",
                data.size, ob.file_len
            )));
        }
        let close = commit == BlockCommit::Close;
        // A close may roll back what was only published (a writer sealing a
        // block at its last acknowledged stripe); nothing goes below what is
        // durable.
        let floor = if close {
            ob.durable_len
        } else {
            self.committed_block(b).map_or(0, |d| d.size)
        };
        if data.size < floor {
            return Err(DatanodeError::InvalidArgument(format!(
                "PutBlock of {b} commits {} bytes, less than the {floor} already committed",
                data.size
            )));
        }
        let size = data.size;
        let publisher = Publisher {
            committed: Arc::clone(&self.committed),
            open: Arc::clone(&self.open),
            used_bytes: Arc::clone(&self.used_bytes),
            files: Arc::clone(&self.files),
            fine: Arc::clone(&self.fine),
        };
        if !commit.is_durable() {
            publisher.publish(&mut ob, data, false, None);
            return Ok(size);
        }
        // A close below what was written drops the tail (a writer that gave
        // up on a stripe closes at its last acknowledged length).
        let truncate_to = (close && size < ob.file_len).then_some(size);
        let file = (size > 0).then(|| self.block_path(b));
        // The first durable commit of a block also syncs its directory, so
        // that the file's directory entry is as durable as its record.
        let dir = (size > 0 && !ob.dir_synced).then(|| self.container_dir(b.container_id));
        let record = pb::BlockData::from(data.clone()).encode_to_vec();
        let cut = truncate_to.map(|len| (self.block_path(b), len));
        // A closed block keeps its prefix CRCs if they agree with every
        // window checksum the writer sent (`fine.rs`).
        let fine = if close {
            ob.fine
                .take()
                .and_then(|f| f.finish(size))
                .filter(|f| match f.agrees_with(&data) {
                    Ok(()) => true,
                    Err(why) => {
                        tracing::warn!(block = %b, %why,
                            "the written bytes disagree with the writer's checksums; no fine checksums kept");
                        false
                    }
                })
                .map(Arc::new)
        } else {
            None
        };
        let fine_path = self.fine_path_of(b.container_id, b.local_id);
        self.committer
            .commit(DurableCommit {
                block: b,
                record,
                close,
                file,
                dir,
                guard: ob,
                publish: Box::new(move |ob: &mut OpenBlock| {
                    if size > 0 {
                        ob.dir_synced = true;
                    }
                    ob.durable_len = size;
                    // The fine checksums' file is written before the closed
                    // record is published, so a read that sees the record
                    // finds the file whole. It is not synced: a crash may
                    // leave it torn or missing, which its own CRC and the
                    // check against the record catch (`fine.rs`).
                    // A close that keeps none removes any file an earlier
                    // life of the block left (a removal that failed).
                    let written = match &fine {
                        Some(f) => {
                            let row = f.encode();
                            publisher
                                .files
                                .retry_on_emfile(|| std::fs::write(&fine_path, &row))
                        }
                        None if close => match std::fs::remove_file(&fine_path) {
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                            other => other,
                        },
                        None => Ok(()),
                    };
                    if let Err(e) = &written {
                        tracing::warn!(block = %b, file = %fine_path.display(), error = %e,
                            "writing or removing a closed block's fine checksums");
                    }
                    let fine = fine.filter(|_| written.is_ok());
                    publisher.publish_durable(ob, data, close, cut, fine);
                }),
            })
            .await?;
        Ok(size)
    }
}

/// Publishes a committed record in memory: the committed map reads use,
/// the store's used bytes, the block's write state (dropped at close).
struct Publisher {
    committed: Arc<CommittedMap>,
    open: Arc<OpenMap>,
    used_bytes: Arc<AtomicU64>,
    files: Arc<crate::file_cache::FileCache>,
    fine: Arc<FineCache>,
}

impl Publisher {
    /// [`publish`](Self::publish) for a durable commit, cutting a closed
    /// block's file to its committed length first (`cut`: path and length)
    /// while the block's write state still guards the file (best effort: a
    /// file longer than its record is cut at the next start, recovery.rs,
    /// and reads stop at the committed length meanwhile).
    fn publish_durable(
        &self,
        ob: &mut OpenBlock,
        data: BlockData,
        close: bool,
        cut: Option<(std::path::PathBuf, u64)>,
        fine: Option<Arc<FineChecksums>>,
    ) {
        let b = data.block_id;
        if let Some((path, len)) = cut {
            match self
                .files
                .retry_on_emfile(|| OpenOptions::new().write(true).open(&path)?.set_len(len))
            {
                Ok(()) => ob.file_len = len,
                Err(e) => tracing::warn!(block = %b, error = %e, "cutting a closed block's tail"),
            }
        }
        self.publish(ob, data, close, fine);
    }

    /// Publishes `data`, and a closed block's `fine` checksums for reads
    /// of that record (before its write state goes: a deletion that finds
    /// none runs only after this, so it drops them too).
    fn publish(
        &self,
        ob: &mut OpenBlock,
        data: BlockData,
        close: bool,
        fine: Option<Arc<FineChecksums>>,
    ) {
        let b = data.block_id;
        let size = data.size;
        ob.closed = close;
        let record = Arc::new(data);
        let previous = self
            .committed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key(b), Arc::clone(&record));
        let before = previous.map_or(0, |p| p.size);
        if size >= before {
            self.used_bytes.fetch_add(size - before, Ordering::Relaxed);
        } else {
            self.used_bytes.fetch_sub(before - size, Ordering::Relaxed);
        }
        if fine.is_some() {
            self.fine.insert(key(b), record, fine);
        }
        if close {
            // A closed block takes no more writes: its write state is
            // dropped (a later write re-reads `closed` from the database).
            self.open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key(b));
        }
    }
}

fn check_writable(ob: &OpenBlock, b: BlockId) -> Result<()> {
    if ob.deleted {
        return Err(DatanodeError::BlockDeleted { block: b });
    }
    if ob.sync_failed {
        return Err(DatanodeError::SyncFailed { block: b });
    }
    if ob.replica_index != b.replica_index {
        return Err(DatanodeError::ReplicaIndexMismatch {
            block: b,
            asked: b.replica_index,
            stored: ob.replica_index,
        });
    }
    if ob.closed {
        return Err(DatanodeError::BlockClosed { block: b });
    }
    Ok(())
}
