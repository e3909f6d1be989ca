//! [`KeyOutputStream`]: the writer [`Client::create_key`](crate::Client::create_key)
//! returns, EC or replicated behind one API.

#[cfg(doc)]
use crate::ClientError;
use std::collections::BTreeMap;

use proto_crate::{KeyInfo, PartInfo, WriteCondition};

use crate::om_client::{Commit, Committed};
use crate::{EcKeyOutputStream, ReplicatedKeyOutputStream, Result};

/// A key being written. Nothing is visible until [`close`](Self::close).
#[derive(Debug)]
pub enum KeyOutputStream {
    /// Erasure coded.
    Ec(EcKeyOutputStream),
    /// Replicated.
    Replicated(ReplicatedKeyOutputStream),
}

impl KeyOutputStream {
    /// Appends `buf` to the key.
    ///
    /// # Errors
    /// The underlying writer's failure (see [`EcKeyOutputStream::write`] and
    /// [`ReplicatedKeyOutputStream::write`]).
    pub async fn write(&mut self, buf: &[u8]) -> Result<()> {
        match self {
            Self::Ec(w) => w.write(buf).await,
            Self::Replicated(w) => w.write(buf).await,
        }
    }

    /// A no-op for both kinds (data moves a stripe or a chunk at a time).
    ///
    /// # Errors
    /// A failure recorded earlier.
    pub fn flush(&mut self) -> Result<()> {
        match self {
            Self::Ec(w) => w.flush(),
            Self::Replicated(_) => Ok(()),
        }
    }

    /// Durability of everything written so far: supported on replicated
    /// keys, an explicit `Unsupported` error on EC keys.
    ///
    /// # Errors
    /// [`ClientError::Unsupported`](crate::ClientError::Unsupported) on EC;
    /// write failures on replicated keys.
    pub async fn hsync(&mut self) -> Result<()> {
        match self {
            Self::Ec(w) => w.hsync(),
            Self::Replicated(w) => w.hsync().await,
        }
    }

    /// Bytes accepted so far.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::Ec(w) => w.len(),
            Self::Replicated(w) => w.len(),
        }
    }

    /// Whether nothing was written yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes what is buffered and commits the key; returns it.
    ///
    /// # Errors
    /// Any write failure: the key is then not committed.
    pub async fn close(self) -> Result<KeyInfo> {
        self.close_with(BTreeMap::new()).await
    }

    /// Writes what is buffered and commits the key with object `metadata`
    /// (the S3 gateway keeps the ETag, content type and user metadata here).
    ///
    /// # Errors
    /// Any write failure; the om's refusal if this stream writes a multipart
    /// upload's part.
    pub async fn close_with(self, metadata: BTreeMap<String, String>) -> Result<KeyInfo> {
        self.finish(Commit::Key(metadata, None)).await?.into_key()
    }

    /// [`close_with`](Self::close_with), provided `condition` holds for the key when the om
    /// commits it — checked in the commit's own transaction, so no other writer can slip in
    /// between (S3's `If-None-Match: *` / `If-Match`, object_store's `PutMode::Create` /
    /// `Update`). When it does not hold nothing is committed and the written blocks are
    /// reclaimed.
    ///
    /// # Errors
    /// As `close_with`; [`ClientError::Om`] with `CONDITION_FAILED`
    /// ([`ClientError::is_condition_failed`]).
    pub async fn close_if(
        self,
        metadata: BTreeMap<String, String>,
        condition: WriteCondition,
    ) -> Result<KeyInfo> {
        self.finish(Commit::Key(metadata, Some(condition)))
            .await?
            .into_key()
    }

    /// Writes what is buffered and commits this stream as part of its
    /// multipart upload, with the part's `etag` (hex MD5 of its bytes).
    ///
    /// # Errors
    /// Any write failure; the om's refusal if this stream writes a key.
    pub async fn close_part(self, etag: &str) -> Result<PartInfo> {
        self.close_part_with(etag, BTreeMap::new()).await
    }

    /// [`close_part`](Self::close_part) with part `metadata`, kept with the part (the S3
    /// gateway stores the part's checksum there).
    ///
    /// # Errors
    /// As `close_part`.
    pub async fn close_part_with(
        self,
        etag: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<PartInfo> {
        self.finish(Commit::Part {
            etag: etag.to_string(),
            metadata,
        })
        .await?
        .into_part()
    }

    async fn finish(self, commit: Commit) -> Result<Committed> {
        match self {
            Self::Ec(w) => w.finish(commit).await,
            Self::Replicated(w) => w.finish(commit).await,
        }
    }
}
