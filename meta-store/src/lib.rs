//! The om's metadata store: an ordered map of byte keys to byte values with
//! store-wide revisions and revision-guarded transactions, on one of two
//! back ends that behave the same.
//!
//! - [`RedbStore`]: an embedded redb file, for one machine (the default).
//! - [`EtcdStore`]: an etcd cluster, so that several om processes share one
//!   copy of the metadata and losing one machine loses nothing (issue 18;
//!   Ozone answers the same need with OM HA over Raft, JuiceFS by keeping
//!   metadata in an existing distributed store, as here).
//!
//! The model is etcd's v3 key-value API, cut to what the om needs:
//!
//! - every successful write advances the store's **revision** by one; each
//!   key records the revision that created it (`create_revision`) and the one
//!   that last changed it (`mod_revision`);
//! - a [`Txn`] is a list of [`Compare`]s (a key is absent; a key is present
//!   with a given `mod_revision`) and a list of [`Op`]s (put, delete). It
//!   commits atomically when every compare holds and changes nothing
//!   otherwise ([`Outcome::Conflict`]). A read-modify-write reads the keys,
//!   then commits its writes guarded by the revisions it read: optimistic
//!   concurrency, never a read-then-write without a guard.
//! - A range compare ([`Compare::RangeUnchangedSince`]) sees every key put
//!   in a range after a revision, but not a key deleted from it (etcd's range
//!   compares look only at the keys that exist); a reader that must see any
//!   change to a range guards on the range and on each key it saw there.
//!   [`Transaction`] and [`transact`] do this bookkeeping: the body reads and
//!   writes as if alone, and commits guarded on all it read, or runs again.
//!
//! On top, [`Table`] gives typed tables (keys and values encoded by
//! [`codec`] so that tuple keys keep their order), as redb's
//! `TableDefinition`s do for the om today.
//!
//! Both back ends enforce etcd's default limit on a transaction's compares
//! and ops ([`MAX_TXN_OPS`]) and its rules (no empty key, a key at most once
//! among one transaction's ops), so the shapes of the transactions that run
//! on redb run on etcd. The size of a request ([`MAX_REQUEST_BYTES`]) is
//! etcd's alone: on redb one machine's om keeps what it kept before the
//! store (a key of any number of block groups), and what is larger than
//! etcd's limit is refused only there.
//! What happens when a store is full, and how space comes back, is in
//! [`space`].

pub mod codec;
mod election;
mod error;
mod etcd_config;
mod etcd_store;
mod leader_service;
pub mod local_etcd;
mod redb_store;
mod snapshot;
pub mod space;
mod table;
mod transaction;

pub use election::{Leadership, MIN_TTL};
pub use error::StoreError;
pub use etcd_config::{EtcdConfig, EtcdTls};
pub use etcd_store::{EtcdStore, MAX_NAMESPACE_BYTES, MAX_PAGE_BYTES};
pub use leader_service::run_while_leading;
pub use redb_store::RedbStore;
pub use snapshot::Snapshot;
pub use space::MemberSpace;
pub use table::{Row, Rows, Table, TxnRows};
pub use transaction::{
    Committed, MAX_ATTEMPTS, ScanPage, Transaction, TxnFuture, transact, transact_fenced,
};

/// Most compares, and most ops, in one [`Txn`]: etcd's default
/// `--max-txn-ops` (128), which bounds each list separately.
pub const MAX_TXN_OPS: usize = 128;

/// Largest request, bytes: etcd's default `--max-request-bytes` (1.5 MiB).
/// A transaction's size is counted as the bytes of its keys and values plus
/// [`ENTRY_OVERHEAD_BYTES`] per compare and op, which over-estimates etcd's
/// protobuf encoding, so a transaction this store accepts etcd accepts too.
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Bytes counted for each compare and op on top of its key and value, for
/// [`MAX_REQUEST_BYTES`]: field tags, lengths, revisions, the request's own
/// framing, and the etcd store's namespace (at most [`MAX_NAMESPACE_BYTES`])
/// on its key — on both keys of a range compare — rounded up.
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

/// One stored key and its value, with the revisions etcd keeps for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key (never empty).
    pub key: Vec<u8>,
    /// The value (may be empty).
    pub value: Vec<u8>,
    /// Store revision of the write that created the key (since its last delete).
    pub create_revision: u64,
    /// Store revision of the write that last changed the key.
    pub mod_revision: u64,
}

/// The entries of one [`MetaStore::range`] call, in ascending key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// At most the call's `limit` entries.
    pub entries: Vec<Entry>,
    /// Whether the range holds entries past the last one returned.
    pub more: bool,
    /// The store revision the page was read at.
    pub revision: u64,
}

/// A condition of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key does not exist (etcd: `create_revision == 0`).
    Absent(Vec<u8>),
    /// The key exists and was last changed at this revision (etcd:
    /// `mod_revision == r`); it fails for a key that does not exist.
    ModRevision(Vec<u8>, u64),
    /// No key in `start <= key < end` (`end` `None`: to the end of the
    /// keyspace) was put after `revision` (etcd: `mod_revision <
    /// revision + 1` over the range). It holds for an empty range. A key
    /// *deleted* from the range since is not seen: guard each key read there
    /// with [`ModRevision`](Self::ModRevision) as well.
    RangeUnchangedSince {
        /// First key of the range.
        start: Vec<u8>,
        /// First key past the range, or `None` for the end of the keyspace.
        end: Option<Vec<u8>>,
        /// The store revision the range was read at.
        revision: u64,
    },
    /// The leadership `Fence` was taken from still holds: etcd's leader key
    /// of that campaign still exists with the same `create_revision` (etcd's
    /// own test of election ownership in a transaction). A fenced write of a
    /// deposed leader fails it.
    Leading(Fence),
}

/// Proof that a candidate led an election, to guard its writes with
/// ([`Leadership::fence`], [`transact_fenced`]): a leader that lost its
/// lease without noticing (a long pause, a partition) and goes on writing
/// is refused by the store, not trusted to stop in time. Only an etcd
/// leadership has one: on redb the one om leads for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    election: String,
    /// The leader key in etcd (namespace, `e/`, name, lease): outside the
    /// store's own keys.
    key: Vec<u8>,
    create_revision: u64,
}

impl Fence {
    pub(crate) fn new(election: &str, key: &[u8], create_revision: u64) -> Self {
        Self {
            election: election.to_string(),
            key: key.to_vec(),
            create_revision,
        }
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    pub(crate) fn create_revision(&self) -> u64 {
        self.create_revision
    }

    /// The election this fence is of.
    #[must_use]
    pub fn election(&self) -> &str {
        &self.election
    }
}

impl Compare {
    fn key(&self) -> &[u8] {
        match self {
            Self::Absent(k) | Self::ModRevision(k, _) => k,
            Self::RangeUnchangedSince { start, .. } => start,
            Self::Leading(f) => &f.key,
        }
    }

    /// Key bytes the compare carries (its range end too).
    fn key_bytes(&self) -> usize {
        match self {
            Self::Absent(k) | Self::ModRevision(k, _) => k.len(),
            Self::Leading(f) => f.key.len(),
            Self::RangeUnchangedSince { start, end, .. } => {
                start.len() + end.as_ref().map_or(0, Vec::len)
            }
        }
    }
}

/// A write of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets the key to the value (creating it if absent).
    Put(Vec<u8>, Vec<u8>),
    /// Removes the key (nothing happens if it is absent).
    Delete(Vec<u8>),
}

impl Op {
    fn key(&self) -> &[u8] {
        match self {
            Self::Put(k, _) | Self::Delete(k) => k,
        }
    }
}

/// An atomic, conditional write: every [`Op`] happens if every [`Compare`]
/// holds, none otherwise (etcd's `Txn` with an empty else branch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    compares: Vec<Compare>,
    ops: Vec<Op>,
}

impl Txn {
    /// An empty transaction (commits unconditionally, changes nothing).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the condition that `key` does not exist.
    #[must_use]
    pub fn when_absent(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.compares.push(Compare::Absent(key.into()));
        self
    }

    /// Adds the condition that `key` exists and was last changed at `mod_revision`.
    #[must_use]
    pub fn when_unchanged(mut self, key: impl Into<Vec<u8>>, mod_revision: u64) -> Self {
        self.compares
            .push(Compare::ModRevision(key.into(), mod_revision));
        self
    }

    /// Adds the condition that `key` is as `seen` says: absent when `None`,
    /// else unchanged since that read.
    #[must_use]
    pub fn when_as_read(self, key: impl Into<Vec<u8>>, seen: Option<&Entry>) -> Self {
        match seen {
            None => self.when_absent(key),
            Some(e) => self.when_unchanged(key, e.mod_revision),
        }
    }

    /// Adds the condition that no key in `start <= key < end` (`end` `None`:
    /// to the end of the keyspace) was put after `revision` (see
    /// [`Compare::RangeUnchangedSince`] for what it does not see).
    #[must_use]
    pub fn when_range_unchanged_since(
        mut self,
        start: impl Into<Vec<u8>>,
        end: Option<Vec<u8>>,
        revision: u64,
    ) -> Self {
        self.compares.push(Compare::RangeUnchangedSince {
            start: start.into(),
            end,
            revision,
        });
        self
    }

    /// Adds the condition that the leadership `fence` was taken from still
    /// holds ([`Compare::Leading`]).
    #[must_use]
    pub fn when_leading(mut self, fence: &Fence) -> Self {
        self.compares.push(Compare::Leading(fence.clone()));
        self
    }

    /// Adds a put of `value` at `key`.
    #[must_use]
    pub fn put(mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Op::Put(key.into(), value.into()));
        self
    }

    /// Adds a delete of `key`.
    #[must_use]
    pub fn delete(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.ops.push(Op::Delete(key.into()));
        self
    }

    /// The conditions, in the order added.
    #[must_use]
    pub fn compares(&self) -> &[Compare] {
        &self.compares
    }

    /// The writes, in the order added.
    #[must_use]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The bytes this transaction counts against [`MAX_REQUEST_BYTES`].
    #[must_use]
    pub fn request_bytes(&self) -> usize {
        let compares: usize = self
            .compares
            .iter()
            .map(|c| c.key_bytes() + ENTRY_OVERHEAD_BYTES)
            .sum();
        let ops: usize = self
            .ops
            .iter()
            .map(|o| match o {
                Op::Put(k, v) => k.len() + v.len(),
                Op::Delete(k) => k.len(),
            } + ENTRY_OVERHEAD_BYTES)
            .sum();
        compares + ops
    }

    /// Checks etcd's rules: [`validate_shape`](Self::validate_shape) and at
    /// most [`MAX_REQUEST_BYTES`].
    ///
    /// # Errors
    /// As [`validate_shape`](Self::validate_shape);
    /// [`StoreError::RequestTooLarge`].
    pub fn validate(&self) -> Result<(), StoreError> {
        self.validate_shape()?;
        let bytes = self.request_bytes();
        if bytes > MAX_REQUEST_BYTES {
            return Err(StoreError::RequestTooLarge { bytes });
        }
        Ok(())
    }

    /// Checks the rules both back ends share: no empty key, at most
    /// [`MAX_TXN_OPS`] compares and ops (etcd's rules); each key at most
    /// once among the ops (stricter than etcd, which allows deleting one key
    /// twice); no compare on revision 0 (etcd would read it as "absent",
    /// redb as "never").
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`], [`StoreError::TooManyOps`],
    /// [`StoreError::DuplicateKey`], [`StoreError::ZeroRevision`].
    pub fn validate_shape(&self) -> Result<(), StoreError> {
        if self.compares.iter().any(|c| c.key().is_empty())
            || self.ops.iter().any(|o| o.key().is_empty())
        {
            return Err(StoreError::EmptyKey);
        }
        let most = self.compares.len().max(self.ops.len());
        if most > MAX_TXN_OPS {
            return Err(StoreError::TooManyOps {
                compares: self.compares.len(),
                ops: self.ops.len(),
            });
        }
        if let Some(Compare::ModRevision(k, _)) = self
            .compares
            .iter()
            .find(|c| matches!(c, Compare::ModRevision(_, 0)))
        {
            return Err(StoreError::ZeroRevision {
                key: String::from_utf8_lossy(k).into_owned(),
            });
        }
        let mut keys: Vec<&[u8]> = self.ops.iter().map(Op::key).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(StoreError::DuplicateKey {
                key: String::from_utf8_lossy(w[0]).into_owned(),
            });
        }
        Ok(())
    }
}

/// What [`MetaStore::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every compare held and every op was applied; `revision` is the
    /// store's revision after the commit (its ops' `mod_revision`, when it
    /// changed anything; unchanged when it changed nothing).
    Committed {
        /// Store revision after the commit.
        revision: u64,
    },
    /// A compare failed; nothing was written.
    Conflict,
}

impl Outcome {
    /// Whether the transaction was applied.
    #[must_use]
    pub fn committed(self) -> bool {
        matches!(self, Self::Committed { .. })
    }
}

/// The end of the range of every key that starts with `prefix` (the first
/// key past them), or `None` when no such key exists (`prefix` is empty or
/// all `0xff`): the range then runs to the end of the keyspace.
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The limit a range read of `start` uses (at least 1), after refusing an empty `start`.
pub(crate) fn range_limit(start: &[u8], limit: usize) -> Result<usize, StoreError> {
    if start.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(limit.max(1))
}

/// The om's metadata store, on one of its back ends.
#[derive(Debug, Clone)]
pub enum MetaStore {
    /// Embedded redb file (one machine).
    Redb(RedbStore),
    /// An etcd cluster (several oms, no single point of loss).
    Etcd(EtcdStore),
}

impl MetaStore {
    /// The entry at `key`, if any.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; the back end's errors.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Entry>, StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        match self {
            Self::Redb(s) => s.get(key).await,
            Self::Etcd(s) => s.get(key).await,
        }
    }

    /// Entries with `start <= key < end` (`end` `None`: to the end of the
    /// keyspace) in ascending key order, at most `limit` of them (`limit` at
    /// least 1). To go on, call again with `start` = the last key + `\0`.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`] for an empty `start`; the back end's errors.
    pub async fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = range_limit(start, limit)?;
        match self {
            Self::Redb(s) => s.range(start, end, limit).await,
            Self::Etcd(s) => s.range(start, end, limit).await,
        }
    }

    /// The entries whose key starts with `prefix` (not empty), as [`range`](Self::range).
    ///
    /// # Errors
    /// As [`range`](Self::range).
    pub async fn scan_prefix(&self, prefix: &[u8], limit: usize) -> Result<Page, StoreError> {
        let end = prefix_end(prefix);
        self.range(prefix, end.as_deref(), limit).await
    }

    /// How many keys start with `prefix` (not empty), now: etcd counts them without sending
    /// them; redb walks the range's keys.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; the back end's errors.
    pub async fn count_prefix(&self, prefix: &[u8]) -> Result<u64, StoreError> {
        if prefix.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let end = prefix_end(prefix);
        match self {
            Self::Redb(s) => s.count(prefix, end.as_deref()).await,
            Self::Etcd(s) => s.count(prefix, end.as_deref()).await,
        }
    }

    /// Applies `txn` atomically if its compares hold.
    ///
    /// On a [`fenced`](Self::fenced) store a conflict is checked against
    /// the leadership: [`StoreError::NotLeader`] when it has ended; a check
    /// that cannot be made leaves [`Outcome::Conflict`] (a retry meets the
    /// fence again).
    ///
    /// # Errors
    /// The rules of [`Txn::validate`] on etcd, of [`Txn::validate_shape`] on
    /// redb; the back end's errors. A commit whose
    /// answer was lost (etcd unreachable after sending) is an error, and
    /// may or may not have been applied: callers re-read and retry.
    pub async fn commit(&self, txn: Txn) -> Result<Outcome, StoreError> {
        match self {
            Self::Redb(s) => {
                txn.validate_shape()?;
                s.commit(txn).await
            }
            Self::Etcd(s) => {
                let fence = s.fence.as_ref().filter(|_| !txn.ops().is_empty());
                let txn = match fence {
                    Some(f) => txn.when_leading(f),
                    None => txn,
                };
                txn.validate()?;
                let outcome = s.commit(txn).await?;
                // A check that cannot be made leaves the conflict standing:
                // the caller's retry meets the fence again.
                if let (Outcome::Conflict, Some(f)) = (&outcome, fence)
                    && !s
                        .commit(Txn::new().when_leading(f))
                        .await
                        .map_or(true, |o| o.committed())
                {
                    return Err(StoreError::NotLeader {
                        election: f.election().to_string(),
                    });
                }
                Ok(outcome)
            }
        }
    }

    /// This store, with every commit that writes guarded by `fence`
    /// ([`Compare::Leading`]): once the leadership it was taken from ends,
    /// whether or not its holder has noticed, every write is refused with
    /// [`StoreError::NotLeader`] and nothing is written. For a process that
    /// must be the only writer of a store (one active om per etcd
    /// namespace): the fence is etcd's, so a holder paused past its lease
    /// cannot write over its successor. Reads are not fenced. Each commit
    /// carries one more compare, so a [`transact`] body may read one key
    /// fewer ([`max_guards`](Self::max_guards)).
    ///
    /// # Errors
    /// [`StoreError::ForeignFence`] on redb (its one om needs no fence).
    pub fn fenced(&self, fence: Fence) -> Result<Self, StoreError> {
        match self {
            Self::Redb(_) => Err(StoreError::ForeignFence {
                election: fence.election().to_string(),
            }),
            Self::Etcd(s) => {
                let mut s = s.clone();
                s.fence = Some(fence);
                Ok(Self::Etcd(s))
            }
        }
    }

    /// Most guards (compares) a [`transact`] body's reads may add to its
    /// commit: [`MAX_TXN_OPS`], less one on a [`fenced`](Self::fenced) store.
    #[must_use]
    pub fn max_guards(&self) -> usize {
        match self {
            Self::Etcd(s) if s.fence.is_some() => MAX_TXN_OPS - 1,
            _ => MAX_TXN_OPS,
        }
    }

    /// The store's current revision.
    ///
    /// # Errors
    /// The back end's errors.
    pub async fn revision(&self) -> Result<u64, StoreError> {
        match self {
            Self::Redb(s) => s.revision().await,
            Self::Etcd(s) => s.revision().await,
        }
    }

    /// Drops the versions older than the last `retain` revisions (etcd's
    /// compaction; the om runs it periodically so that etcd's history stays
    /// bounded). Current values and guarded commits are unaffected. Returns
    /// the revision compacted to, or `None` if there was nothing to compact
    /// (always `None` on redb, which keeps one version per key).
    ///
    /// # Errors
    /// The back end's errors.
    pub async fn compact_history(&self, retain: u64) -> Result<Option<u64>, StoreError> {
        match self {
            Self::Redb(_) => Ok(None),
            Self::Etcd(s) => s.compact_history(retain).await,
        }
    }

    /// Gives back the space of deleted rows after [`StoreError::SpaceExhausted`]
    /// (etcd's recovery from NOSPACE: compact all history, defragment every
    /// member in turn, disarm the alarm). Returns each member's backend size
    /// before and after; empty on redb, which reuses freed pages itself.
    ///
    /// Defragmenting blocks a member's reads and writes while it rewrites
    /// its file: run it when the store is full, not on a timer.
    ///
    /// # Errors
    /// [`StoreError::Etcd`] if a member cannot be reached (every member must
    /// be up) or refuses — defragmentation and alarms need etcd's `root`
    /// role, and a user without it has compacted all history before the
    /// refusal; [`StoreError::Timeout`].
    pub async fn reclaim_space(&self) -> Result<Vec<MemberSpace>, StoreError> {
        match self {
            Self::Redb(_) => Ok(Vec::new()),
            Self::Etcd(s) => s.reclaim_space().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"a/"), Some(b"a0".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn validate_enforces_etcds_rules() {
        assert!(matches!(
            Txn::new().put("", "v").validate(),
            Err(StoreError::EmptyKey)
        ));
        assert!(matches!(
            Txn::new().when_absent("").validate(),
            Err(StoreError::EmptyKey)
        ));
        assert!(matches!(
            Txn::new().put("k", "1").delete("k").validate(),
            Err(StoreError::DuplicateKey { .. })
        ));
        let mut t = Txn::new();
        for i in 0..=MAX_TXN_OPS {
            t = t.put(format!("k{i}"), "v");
        }
        assert!(matches!(t.validate(), Err(StoreError::TooManyOps { .. })));
        let big = vec![0u8; MAX_REQUEST_BYTES];
        assert!(matches!(
            Txn::new().put("k", big).validate(),
            Err(StoreError::RequestTooLarge { .. })
        ));
        assert!(matches!(
            Txn::new().when_unchanged("k", 0).validate(),
            Err(StoreError::ZeroRevision { .. })
        ));
        // The same key may be compared and written.
        assert!(Txn::new().when_absent("k").put("k", "v").validate().is_ok());
    }
}
