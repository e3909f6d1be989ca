//! The write side of the container store: WriteChunk (a block file
//! written at an offset, uncommitted until PutBlock) and PutBlock (fsync,
//! then the metadata commit). See the parent module for the layout and the
//! durability rules.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use prost::Message;
use proto_crate::wire::datanode as pb;
use proto_crate::{BlockData, BlockId, ChunkInfo};
use redb::ReadableDatabase;

use super::{
    BLOCKS, CLOSED, ContainerStore, DELETED, MAX_READ_LEN, OpenBlock, Result, blocking, key,
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
        let dir_synced = self.committed_block(b).is_some_and(|d| d.size > 0);
        let (closed, deleted) = {
            let read = self.db.begin_read()?;
            (
                read.open_table(CLOSED)?.get(key(b))?.is_some(),
                read.open_table(DELETED)?.get(key(b))?.is_some(),
            )
        };
        let ob = Arc::new(tokio::sync::Mutex::new(OpenBlock {
            replica_index,
            file_len,
            closed,
            deleted,
            // A block with committed data had its directory synced by that commit.
            dir_synced,
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
        let mut ob = ob.lock().await;
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
        let files = Arc::clone(&self.files);
        blocking(move || {
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
            }
            f.write_all_at(&data, offset)
                .map_err(|e| DatanodeError::io(format!("writing block {b}"), e))
        })
        .await?;
        // Cached read handles stay valid after a truncate (same inode).
        ob.file_len = offset + chunk.len;
        Ok(())
    }

    /// Commits `data` (chunk list, size, metadata) for its block: fsyncs the
    /// block file, then records the metadata durably. Returns the committed
    /// length in bytes. A block with no chunks (an EC index past the data) is
    /// recorded with size 0 and no file.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`] for a chunk list that is not
    /// contiguous from 0 or a size the file does not hold;
    /// [`DatanodeError::ReplicaIndexMismatch`]; I/O and database errors.
    pub async fn put_block(&self, data: BlockData, eof: bool) -> Result<u64> {
        let b = data.block_id;
        data.validate_chunks()
            .map_err(|e| DatanodeError::InvalidArgument(format!("PutBlock of {b}: {e}")))?;
        self.create_container(b.container_id).await?;
        let ob_handle = self.open_block(b)?;
        let mut ob = ob_handle.lock().await;
        check_writable(&ob, b)?;
        if data.size > ob.file_len {
            return Err(DatanodeError::InvalidArgument(format!(
                "PutBlock of {b} commits {} bytes but only {} were written",
                data.size, ob.file_len
            )));
        }
        let committed = self.committed_block(b).map_or(0, |d| d.size);
        if data.size < committed {
            return Err(DatanodeError::InvalidArgument(format!(
                "PutBlock of {b} commits {} bytes, less than the {committed} already committed",
                data.size
            )));
        }
        // The fsyncs and the durable commit run on the blocking pool.
        let path = (data.size > 0).then(|| self.block_path(b));
        // The first commit of a block also syncs its directory, so that the
        // file's directory entry is as durable as its metadata.
        let dir = (data.size > 0 && !ob.dir_synced).then(|| self.container_dir(b.container_id));
        let encoded = pb::BlockData::from(data.clone()).encode_to_vec();
        let db = Arc::clone(&self.db);
        let files = Arc::clone(&self.files);
        blocking(move || {
            if let Some(path) = path {
                files
                    .retry_on_emfile(|| File::open(&path).and_then(|f| f.sync_data()))
                    .map_err(|e| DatanodeError::io(format!("syncing block {b}"), e))?;
            }
            if let Some(d) = dir {
                files
                    .retry_on_emfile(|| File::open(&d).and_then(|f| f.sync_all()))
                    .map_err(|e| DatanodeError::io(format!("syncing {}", d.display()), e))?;
            }
            let txn = db.begin_write()?;
            txn.open_table(BLOCKS)?.insert(key(b), encoded.as_slice())?;
            if eof {
                txn.open_table(CLOSED)?.insert(key(b), ())?;
            }
            txn.commit()?;
            Ok(())
        })
        .await?;
        if data.size > 0 {
            ob.dir_synced = true;
        }
        ob.closed = eof;
        let size = data.size;
        let previous = self
            .committed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key(b), Arc::new(data));
        self.used_bytes
            .fetch_add(size - previous.map_or(0, |p| p.size), Ordering::Relaxed);
        if eof {
            // A closed block takes no more writes: its write state is
            // dropped (a later write re-reads `closed` from the database).
            drop(ob);
            self.open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key(b));
        }
        Ok(size)
    }
}

fn check_writable(ob: &OpenBlock, b: BlockId) -> Result<()> {
    if ob.deleted {
        return Err(DatanodeError::BlockDeleted { block: b });
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
