//! [`StoreError`]: what the metadata store's calls fail with.

/// Errors of [`MetaStore`](crate::MetaStore) calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A key was empty (etcd refuses empty keys; so does every back end).
    #[error("empty key")]
    EmptyKey,
    /// A transaction had more than [`MAX_TXN_OPS`](crate::MAX_TXN_OPS)
    /// compares or ops (etcd's `--max-txn-ops`).
    #[error(
        "transaction has {compares} compares and {ops} ops; at most {} of each are allowed",
        crate::MAX_TXN_OPS
    )]
    TooManyOps {
        /// Compares in the transaction.
        compares: usize,
        /// Ops in the transaction.
        ops: usize,
    },
    /// A transaction was larger than [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES)
    /// (etcd's `--max-request-bytes`).
    #[error(
        "transaction is {bytes} bytes; at most {} are allowed",
        crate::MAX_REQUEST_BYTES
    )]
    RequestTooLarge {
        /// Bytes counted by [`Txn::request_bytes`](crate::Txn::request_bytes).
        bytes: usize,
    },
    /// A key appeared twice among one transaction's ops (etcd refuses it).
    #[error("key {key:?} is written twice in one transaction")]
    DuplicateKey {
        /// The key, lossily as text.
        key: String,
    },
    /// An etcd namespace was empty or too long.
    #[error(
        "etcd namespace of {len} bytes; it must have 1 to {} bytes",
        crate::etcd_store::MAX_NAMESPACE_BYTES
    )]
    InvalidNamespace {
        /// Its length, bytes.
        len: usize,
    },
    /// An etcd endpoint was not a URL of the form the config needs
    /// (`http://HOST:PORT`, or `https://` with TLS), or there was none.
    #[error("etcd endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A row of a [`Table`](crate::Table) did not decode as its types.
    #[error("table {table}: stored row does not decode: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What did not decode.
        reason: String,
    },
    /// The store is out of space. On etcd the backend would pass its quota
    /// (`--quota-backend-bytes`; a cluster in NOSPACE alarm refuses every
    /// write that adds data, while reads and deletes run): the commit was
    /// refused before it was proposed — or, when the backend reached the
    /// quota between that check and applying it, applied and still answered
    /// this (etcd checks again at apply time, after writing), so re-read
    /// before retrying (a guarded retry conflicts if it was applied). Free rows, then
    /// [`MetaStore::reclaim_space`](crate::MetaStore::reclaim_space). On
    /// redb the disk is full: redb refuses every later call after an I/O
    /// failure, so free disk space and reopen the store. See
    /// [`crate::space`].
    #[error("metadata store out of space: {0}")]
    SpaceExhausted(String),
    /// The redb file failed (I/O, corruption).
    #[error("redb metadata store: {0}")]
    Redb(redb::Error),
    /// etcd refused a call, or could not be reached within the deadline
    /// (a read, or a commit that was never sent).
    #[error("etcd metadata store: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// A call got no answer within its deadline: a read from any member,
    /// authentication, a lease grant, or a compaction (which may still have
    /// been applied).
    #[error("etcd metadata store: no answer within {0:?}")]
    Timeout(std::time::Duration),
    /// A compare named revision 0, which no write has (etcd would read it
    /// as "the key is absent"; say [`Compare::Absent`](crate::Compare) instead).
    #[error("a compare names revision 0 of key {key:?}; use Absent")]
    ZeroRevision {
        /// The key, lossily as text.
        key: String,
    },
    /// [`transact`](crate::transact) ran its body [`MAX_ATTEMPTS`](crate::MAX_ATTEMPTS)
    /// times and each commit met a change to what the body had read: other
    /// writers keep changing the same rows. Nothing was written.
    #[error("gave up after {attempts} attempts: other writers kept changing the rows read")]
    Contention {
        /// Times the body ran.
        attempts: u32,
    },
    /// An election name was empty or held `/` (etcd appends `/` to a name, so
    /// `a` and `a/b` would share candidates).
    #[error("election name {0:?} must be non-empty and without '/'")]
    InvalidElectionName(String),
    /// A candidate's lease expired or could not be renewed while it waited
    /// to lead.
    #[error("the lease of candidate {candidate} in election {election} was lost while it waited")]
    LeaseLost {
        /// The election.
        election: String,
        /// The candidate.
        candidate: String,
    },
    /// A fenced commit ([`transact_fenced`](crate::transact_fenced)) was
    /// refused because the leadership its [`Fence`](crate::Fence) was taken
    /// from has ended (resigned, or its lease expired and another candidate
    /// may lead): a deposed leader's write. Nothing was written.
    #[error("no longer the leader of election {election}; the write was refused")]
    NotLeader {
        /// The election.
        election: String,
    },
    /// A fence from an etcd election was used on a store with no elections
    /// of that kind (a redb store).
    #[error("a fence of etcd election {election} used on a redb store")]
    ForeignFence {
        /// The election.
        election: String,
    },
    /// A commit failed in transport after it may have reached a member: it
    /// may or may not have been applied. Read the keys it guards or writes
    /// to tell before retrying it.
    #[error("etcd commit may or may not have been applied: {0}")]
    CommitOutcomeUnknown(etcd_client::Error),
    /// A [`Snapshot`](crate::Snapshot) read asked for a revision whose
    /// history etcd has compacted since the snapshot was taken
    /// ([`MetaStore::compact_history`](crate::MetaStore::compact_history)):
    /// take a new snapshot and read again.
    #[error("snapshot at revision {revision} is gone: etcd compacted its history")]
    Compacted {
        /// The snapshot's revision.
        revision: u64,
    },
    /// etcd answered something this store cannot use (a negative revision,
    /// a key outside the store's namespace).
    #[error("etcd metadata store answered {0}")]
    Protocol(String),
    /// A blocking task of the redb store did not finish (the runtime is
    /// shutting down).
    #[error("redb metadata store task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl StoreError {
    /// Whether the store could not be reached, answered too late or was
    /// overloaded (a member down, a connection lost, a deadline passed,
    /// etcd's "too many requests"): the same call may succeed later, and a
    /// change may have been applied. A refusal (bad arguments, permissions,
    /// a full store: [`SpaceExhausted`](Self::SpaceExhausted), contention)
    /// is not.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::CommitOutcomeUnknown(_) => true,
            // What the store's own calls retry on, and overload (the quota
            // is `SpaceExhausted`, made apart from it).
            Self::Etcd(e) => {
                crate::etcd_store::transient(e)
                    || matches!(e, etcd_client::Error::GRpcStatus(s)
                        if s.code() == tonic::Code::ResourceExhausted)
            }
            _ => false,
        }
    }
}

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                crate::space::redb_failure(redb::Error::from(e))
            }
        }
    )*};
}
redb_errors!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
