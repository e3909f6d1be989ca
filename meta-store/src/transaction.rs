//! [`Transaction`] and [`transact`]: a read-modify-write over the store
//! with optimistic concurrency, so that an om operation can be written as
//! if it ran alone.
//!
//! The body reads through a [`Transaction`] (each key's first read is
//! remembered, and later reads of it answer the same) and buffers its
//! writes there (later reads see them). When it returns, everything it read
//! becomes the guard of one [`Txn`]: each key read must still be as read
//! (absent, or unchanged since), and each range scanned must have had no
//! key put since the scan's revision. The commit applies the writes if
//! every guard holds; otherwise another writer changed something the body
//! decided on, and the body runs again on fresh reads, up to
//! [`MAX_ATTEMPTS`] times. The result is serializable: the writes happen
//! as of the commit's revision, with every read still true at it.
//!
//! An error the body returns is checked the same way before it is given
//! back: an error decided on reads that are no longer true (two reads
//! taken either side of another writer's commit, say) makes the body run
//! again instead of reaching the caller.
//!
//! What a body reads is bounded by etcd's transaction limits: every key
//! read and every page of a scan is one compare, and a transaction has at
//! most [`MAX_TXN_OPS`](crate::MAX_TXN_OPS) of them, so a scan inside a transaction reads a few
//! rows (is a bucket empty, the parts of a small upload); listing many rows
//! is a plain [`MetaStore::range`] outside one.

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::{Compare, Entry, Fence, MetaStore, Outcome, StoreError, Txn};

/// Times [`transact`] runs its body before it answers
/// [`StoreError::Contention`]. Of a fixed set of writers on the same rows
/// each round commits at least one, so this covers 32 of them racing once.
pub const MAX_ATTEMPTS: u32 = 32;

/// What a [`transact`] body returns: a boxed future that holds its
/// [`Transaction`] handle (`|tx| Box::pin(async move { ... })`). Boxed and
/// `Send` so that a transaction runs inside a spawned task (a gRPC
/// handler); `'env` is what the body borrows from its caller.
pub type TxnFuture<'env, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'env>>;

/// One run of a [`transact`] body: its reads and buffered writes. A cheap
/// handle (clones share the run); the body gets one by value. Used after
/// its body returned, it reads and writes nothing that is committed.
#[derive(Debug, Clone)]
pub struct Transaction {
    store: MetaStore,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Each key read from the store, as first read (`None`: absent).
    reads: BTreeMap<Vec<u8>, Option<Entry>>,
    /// One [`Compare::RangeUnchangedSince`] per page scanned.
    scans: Vec<Compare>,
    /// Buffered writes: `Some(value)` a put, `None` a delete.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Calls made to the store (a body that read once read atomically).
    store_calls: u32,
}

/// What [`Transaction::scan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// `(key, value)` pairs in ascending key order, the transaction's own
    /// buffered writes applied; at most the scan's `limit`.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Whether the range holds entries past the last one returned.
    pub more: bool,
}

/// A body's result that [`transact`] committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<T> {
    /// What the body returned.
    pub value: T,
    /// The store revision after the commit: every key the body put has it
    /// as its `mod_revision` (a body that only deleted absent keys changed
    /// nothing and gets the unchanged revision); `None` when the body
    /// buffered no write.
    pub revision: Option<u64>,
    /// Times the body ran (1 when nothing interfered).
    pub attempts: u32,
}

impl Transaction {
    fn new(store: &MetaStore) -> Self {
        Self {
            store: store.clone(),
            state: Arc::default(),
        }
    }

    /// The store this transaction reads.
    #[must_use]
    pub fn store(&self) -> &MetaStore {
        &self.store
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain maps, whole after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value at `key`: this transaction's own write if it made one, else
    /// the store's value as this transaction first read it.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; [`StoreError::TooManyOps`] when the read
    /// would take the transaction past [`MAX_TXN_OPS`](crate::MAX_TXN_OPS) guards; the store's
    /// errors.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        if let Some(known) = self.state().known(key) {
            return Ok(known);
        }
        self.state().check_room(1, self.store.max_guards())?;
        let entry = self.store.get(key).await?;
        let mut st = self.state();
        st.store_calls += 1;
        if !st.reads.contains_key(key) {
            // Checked again: reads run at once (a `join!`) passed the first
            // check together.
            st.check_room(1, self.store.max_guards())?;
            st.reads.insert(key.to_vec(), entry);
        }
        Ok(st.known(key).flatten())
    }

    /// [`get`](Self::get), with the `mod_revision` of the value returned: the store's, for a
    /// value as this transaction first read it; `None` for a value this transaction wrote
    /// (it has no revision until the commit).
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub async fn get_entry(
        &self,
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Option<u64>)>, StoreError> {
        let Some(value) = self.get(key).await? else {
            return Ok(None);
        };
        let st = self.state();
        let revision = match st.writes.get(key) {
            Some(_) => None,
            None => st
                .reads
                .get(key)
                .and_then(|first| first.as_ref().map(|e| e.mod_revision)),
        };
        Ok(Some((value, revision)))
    }

    /// At most `limit` (at least 1) entries with `start <= key < end` (`end`
    /// `None`: to the end of the keyspace) as this transaction sees them: the
    /// store's, with keys read earlier as first read and this transaction's
    /// writes applied. It reads one entry past `limit`, so that `more` rests
    /// on a guarded key too. The part of the range read is guarded on as a
    /// whole (no key put into it) and key by key (no key seen deleted).
    ///
    /// # Errors
    /// As [`get`](Self::get), for every key seen.
    pub async fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        if start.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let limit = limit.max(1);
        let mut view: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut from = start.to_vec();
        loop {
            // Enough for `limit` entries and one past them, if the store's
            // entries all count.
            let want = (limit + 1).saturating_sub(view.len()).max(1);
            let page = self.store.range(&from, end, want).await?;
            let mut st = self.state();
            st.store_calls += 1;
            let fresh = page
                .entries
                .iter()
                .filter(|e| !st.reads.contains_key(&e.key))
                .count();
            st.check_room(fresh + 1, self.store.max_guards())?;
            // A full page covers the range up to its last key; a short one
            // covers the rest of it.
            let covered_end = match page.entries.last() {
                Some(last) if page.more => {
                    let mut past = last.key.clone();
                    past.push(0);
                    Some(past)
                }
                _ => end.map(<[u8]>::to_vec),
            };
            st.scans.push(Compare::RangeUnchangedSince {
                start: from.clone(),
                end: covered_end.clone(),
                revision: page.revision,
            });
            let mut segment: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for e in page.entries {
                segment.insert(e.key.clone(), e.value.clone());
                st.reads.entry(e.key.clone()).or_insert(Some(e));
            }
            // Keys read earlier answer as first read; the body's writes win.
            for (k, first) in in_range(&st.reads, &from, covered_end.as_deref()) {
                match first {
                    Some(e) => segment.insert(k.clone(), e.value.clone()),
                    None => segment.remove(k),
                };
            }
            for (k, w) in in_range(&st.writes, &from, covered_end.as_deref()) {
                match w {
                    Some(v) => segment.insert(k.clone(), v.clone()),
                    None => segment.remove(k),
                };
            }
            drop(st);
            view.extend(segment);
            match covered_end {
                Some(next) if page.more && view.len() <= limit => from = next,
                _ => break,
            }
        }
        // Past `limit` is a key the view holds, so guarded; keys beyond
        // the part read are not, and are not claimed.
        let more = view.len() > limit;
        Ok(ScanPage {
            entries: view.into_iter().take(limit).collect(),
            more,
        })
    }

    /// Guards on `key` being absent, as a read that found nothing would, without asking the
    /// store: for a key the body expects to be new (a fresh random id) and then writes (a
    /// body that writes nothing commits nothing, so its assumption is never checked). If it
    /// exists at commit, the commit conflicts and the body runs again, so the body must then
    /// pick another key (a body that assumes the same key each run ends in
    /// [`StoreError::Contention`]). A key this transaction already read or wrote keeps what
    /// the transaction knows, and `assume_absent` returns whether that is "absent".
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; [`StoreError::TooManyOps`] as for [`get`](Self::get).
    pub fn assume_absent(&self, key: &[u8]) -> Result<bool, StoreError> {
        if key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let mut st = self.state();
        if let Some(known) = st.known(key) {
            return Ok(known.is_none());
        }
        st.check_room(1, self.store.max_guards())?;
        st.reads.insert(key.to_vec(), None);
        Ok(true)
    }

    /// Buffers a put of `value` at `key` (applied at commit; read back by
    /// this transaction at once).
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.state().writes.insert(key.into(), Some(value.into()));
    }

    /// Buffers a delete of `key`.
    pub fn delete(&self, key: impl Into<Vec<u8>>) {
        self.state().writes.insert(key.into(), None);
    }
}

impl State {
    /// What the transaction already knows of `key`: `Some(value)` from its
    /// writes or first reads, `None` if it must ask the store.
    fn known(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if let Some(w) = self.writes.get(key) {
            return Some(w.clone());
        }
        self.reads
            .get(key)
            .map(|first| first.as_ref().map(|e| e.value.clone()))
    }

    /// Fails when `more` guards would pass `limit` (etcd's, less what the
    /// store adds to every commit: [`MetaStore::max_guards`]).
    fn check_room(&self, more: usize, limit: usize) -> Result<(), StoreError> {
        let compares = self.reads.len() + self.scans.len() + more;
        if compares > limit {
            return Err(StoreError::TooManyOps {
                compares,
                ops: self.writes.len(),
            });
        }
        Ok(())
    }

    /// The guards: every key as read, every range scanned unchanged.
    fn guards(&self) -> Txn {
        let mut txn = self.reads.iter().fold(Txn::new(), |t, (k, e)| {
            t.when_as_read(k.clone(), e.as_ref())
        });
        for c in &self.scans {
            if let Compare::RangeUnchangedSince {
                start,
                end,
                revision,
            } = c
            {
                txn = txn.when_range_unchanged_since(start.clone(), end.clone(), *revision);
            }
        }
        txn
    }

    /// Whether what was read came from more than one store call (one call
    /// reads at one revision, so a single read needs no check).
    fn read_more_than_once(&self) -> bool {
        self.store_calls > 1
    }
}

/// The entries of `map` with `start <= key < end`.
fn in_range<'m, V>(
    map: &'m BTreeMap<Vec<u8>, V>,
    start: &[u8],
    end: Option<&[u8]>,
) -> impl Iterator<Item = (&'m Vec<u8>, &'m V)> {
    map.range(start.to_vec()..)
        .take_while(move |(k, _)| end.is_none_or(|e| k.as_slice() < e))
}

/// Runs `body` on a fresh [`Transaction`] and commits its writes guarded on
/// everything it read; runs it again when another writer changed any of
/// that first (module docs). A body that wrote nothing commits nothing, but
/// its reads are still checked when they took more than one store call, so
/// what it returns was true all at once.
///
/// The body may run several times: it must not act outside the transaction
/// (send RPCs, count) except idempotently.
///
/// # Errors
/// - the body's error, once its reads are found still true;
/// - [`StoreError::Contention`] after [`MAX_ATTEMPTS`] runs;
/// - the commit's errors ([`Txn::validate`]'s rules: at most
///   [`MAX_TXN_OPS`](crate::MAX_TXN_OPS) writes, [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES));
///   an error from the commit itself may leave it applied or not, as
///   [`MetaStore::commit`] says.
pub async fn transact<'env, T, E, F>(store: &MetaStore, body: F) -> Result<Committed<T>, E>
where
    F: FnMut(Transaction) -> TxnFuture<'env, T, E>,
    E: From<StoreError>,
{
    transact_fenced(store, None, body).await
}

/// [`transact`] for a leader's service: its writes also commit only while
/// the leadership `fence` was taken from holds ([`Compare::Leading`]), so a
/// leader deposed without noticing writes nothing. `None` (a redb store's
/// leader) fences nothing.
///
/// # Errors
/// As [`transact`]; [`StoreError::NotLeader`] when the leadership has
/// ended (found when a commit conflicts); [`StoreError::ForeignFence`] for
/// an etcd fence on a redb store.
pub async fn transact_fenced<'env, T, E, F>(
    store: &MetaStore,
    fence: Option<&Fence>,
    mut body: F,
) -> Result<Committed<T>, E>
where
    F: FnMut(Transaction) -> TxnFuture<'env, T, E>,
    E: From<StoreError>,
{
    for attempt in 1..=MAX_ATTEMPTS {
        let tx = Transaction::new(store);
        let outcome = body(tx.clone()).await;
        let st = std::mem::take(&mut *tx.state());
        match outcome {
            Ok(value) => {
                if st.writes.is_empty() && !st.read_more_than_once() {
                    return Ok(Committed {
                        value,
                        revision: None,
                        attempts: attempt,
                    });
                }
                let wrote = !st.writes.is_empty();
                let mut txn = st.guards();
                if let Some(f) = fence.filter(|_| wrote) {
                    txn = txn.when_leading(f);
                }
                for (k, w) in st.writes {
                    txn = match w {
                        Some(v) => txn.put(k, v),
                        None => txn.delete(k),
                    };
                }
                if let Outcome::Committed { revision } = store.commit(txn).await? {
                    return Ok(Committed {
                        value,
                        revision: wrote.then_some(revision),
                        attempts: attempt,
                    });
                }
                if let Some(f) = fence.filter(|_| wrote) {
                    // A check that cannot be made leaves the conflict
                    // standing: the next run meets the fence again.
                    let leading = store
                        .commit(Txn::new().when_leading(f))
                        .await
                        .map_or(true, |o| o.committed());
                    if !leading {
                        return Err(StoreError::NotLeader {
                            election: f.election().to_string(),
                        }
                        .into());
                    }
                }
            }
            Err(err) => {
                if !st.read_more_than_once() {
                    return Err(err);
                }
                // A check that cannot be made (the store is down) leaves
                // the body's own error standing.
                match store.commit(st.guards()).await {
                    Ok(Outcome::Conflict) => {}
                    Ok(Outcome::Committed { .. }) | Err(_) => return Err(err),
                }
            }
        }
        if attempt < MAX_ATTEMPTS {
            back_off(attempt).await;
        }
    }
    Err(StoreError::Contention {
        attempts: MAX_ATTEMPTS,
    }
    .into())
}

/// Sleeps a random 1 ms to 2^min(attempt, 6) ms, so that writers that
/// collided spread out instead of colliding again in step.
async fn back_off(attempt: u32) {
    let cap_ms = 1u64 << attempt.min(6);
    let jitter = std::collections::hash_map::RandomState::new().hash_one(attempt) % cap_ms;
    tokio::time::sleep(Duration::from_millis(1 + jitter)).await;
}
