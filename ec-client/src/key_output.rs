//! [`KeyOutputStream`]: the writer [`Client::create_key`](crate::Client::create_key)
//! returns, EC or replicated behind one API.

use proto_crate::KeyInfo;

use crate::{ECKeyOutputStream, ReplicatedKeyOutputStream, Result};

/// A key being written. Nothing is visible until [`close`](Self::close).
#[derive(Debug)]
pub enum KeyOutputStream {
    /// Erasure coded.
    Ec(ECKeyOutputStream),
    /// Replicated.
    Replicated(ReplicatedKeyOutputStream),
}

impl KeyOutputStream {
    /// Appends `buf` to the key.
    ///
    /// # Errors
    /// The underlying writer's failure (see [`ECKeyOutputStream::write`] and
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
        match self {
            Self::Ec(w) => w.close().await,
            Self::Replicated(w) => w.close().await,
        }
    }
}
