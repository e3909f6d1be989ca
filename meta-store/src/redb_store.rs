//! [`RedbStore`]: the metadata store in one embedded redb file.
//!
//! One table maps each key to `(create_revision, mod_revision, value)`; a
//! second holds the store's revision. A commit is one redb write
//! transaction: redb runs one writer at a time, so its compares and ops see
//! no other writer in between, and it is durable when `commit` returns (redb
//! syncs the file). Calls run on tokio's blocking pool, since redb's are
//! synchronous and a commit waits for the disk.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::{Compare, Entry, Op, Outcome, Page, StoreError, Txn};

/// Key -> (create_revision, mod_revision, value).
const KV: TableDefinition<&[u8], (u64, u64, &[u8])> = TableDefinition::new("meta_kv");
/// "revision" -> the store's revision.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta_revision");
const REVISION: &str = "revision";

/// The metadata store in a redb file (one om on one machine). Cheap to clone:
/// clones share the database.
#[derive(Clone)]
pub struct RedbStore {
    db: Arc<Database>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store at `path`, creating the file (and its tables) if it
    /// does not exist.
    ///
    /// # Errors
    /// [`StoreError::Redb`] if the file cannot be created, opened or read
    /// (another process holds it, it is corrupt, the disk fails).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(KV)?;
        txn.open_table(META)?;
        txn.commit()?;
        Ok(Self { db: Arc::new(db) })
    }

    /// The store in `db`, a redb file another user already holds open (the
    /// om keeps its older tables in the same file while its modules move
    /// onto the store): the store's two tables are created in it if absent.
    ///
    /// # Errors
    /// [`StoreError::Redb`] if the tables cannot be created.
    pub fn with_database(db: Arc<Database>) -> Result<Self, StoreError> {
        let txn = db.begin_write()?;
        txn.open_table(KV)?;
        txn.open_table(META)?;
        txn.commit()?;
        Ok(Self { db })
    }

    /// The redb file the store lives in (shared with whoever built the store with
    /// [`with_database`](Self::with_database): the om keeps older tables beside it).
    #[must_use]
    pub fn database(&self) -> &Arc<Database> {
        &self.db
    }

    /// Writes those of `rows` (key, value) whose key is absent, in one
    /// durable commit at one new revision, synchronously: for copying data
    /// in from an older layout while opening, before anything reads the
    /// store (no runtime needed). A key that is present keeps its value, so
    /// a copy never overwrites what was written since, and an interrupted
    /// copy can simply run again. Returns how many rows it wrote.
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; [`StoreError::Redb`].
    pub fn import(&self, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<usize, StoreError> {
        self.write_blocking(rows, false)
    }

    /// Sets each of `rows` (key, value), present or not, as [`import`](Self::import)
    /// writes (one commit, synchronously, at open): for values derived from
    /// the store's own rows, such as a count.
    ///
    /// # Errors
    /// As [`import`](Self::import).
    pub fn set_at_open(&self, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<usize, StoreError> {
        self.write_blocking(rows, true)
    }

    /// Moves the store's revision up to `at_least` if it is below, synchronously (at open,
    /// as [`import`](Self::import)): for numbers that were handed out before the data moved
    /// here and that later revisions must stay above (the om's key generations become commit
    /// revisions). Returns the revision after.
    ///
    /// # Errors
    /// [`StoreError::Redb`].
    pub fn raise_revision(&self, at_least: u64) -> Result<u64, StoreError> {
        let write = self.db.begin_write()?;
        let now = {
            let mut meta = write.open_table(META)?;
            let now = read_revision(&meta)?;
            if now >= at_least {
                return Ok(now);
            }
            meta.insert(REVISION, at_least)?;
            at_least
        };
        write.commit()?;
        Ok(now)
    }

    /// How many keys start with `prefix`, synchronously (at open, as
    /// [`import`](Self::import)).
    ///
    /// # Errors
    /// [`StoreError::EmptyKey`]; [`StoreError::Redb`].
    pub fn count_prefix(&self, prefix: &[u8]) -> Result<u64, StoreError> {
        if prefix.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let read = self.db.begin_read()?;
        let table = read.open_table(KV)?;
        let iter = match crate::prefix_end(prefix) {
            Some(end) => table.range(prefix..end.as_slice())?,
            None => table.range(prefix..)?,
        };
        let mut n = 0;
        for item in iter {
            item?;
            n += 1;
        }
        Ok(n)
    }

    /// Whether the store holds no key, synchronously (at open, as
    /// [`import`](Self::import)).
    ///
    /// # Errors
    /// [`StoreError::Redb`].
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let read = self.db.begin_read()?;
        Ok(read.open_table(KV)?.is_empty()?)
    }

    fn write_blocking(
        &self,
        rows: &[(Vec<u8>, Vec<u8>)],
        overwrite: bool,
    ) -> Result<usize, StoreError> {
        if rows.iter().any(|(k, _)| k.is_empty()) {
            return Err(StoreError::EmptyKey);
        }
        let write = self.db.begin_write()?;
        let mut written = 0;
        {
            let mut table = write.open_table(KV)?;
            let mut meta = write.open_table(META)?;
            let next = read_revision(&meta)? + 1;
            for (k, v) in rows {
                let old = table
                    .get(k.as_slice())?
                    .map(|e| (e.value().0, e.value().2 == v.as_slice()));
                let created = match old {
                    None => next,
                    Some((created, false)) if overwrite => created,
                    Some(_) => continue,
                };
                table.insert(k.as_slice(), (created, next, v.as_slice()))?;
                written += 1;
            }
            if written > 0 {
                meta.insert(REVISION, next)?;
            }
        }
        write.commit()?;
        Ok(written)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || f(&db)).await?
    }

    pub(crate) async fn get(&self, key: &[u8]) -> Result<Option<Entry>, StoreError> {
        let key = key.to_vec();
        self.blocking(move |db| get_in(&db.begin_read()?, key))
            .await
    }

    pub(crate) async fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let (start, end) = (start.to_vec(), end.map(<[u8]>::to_vec));
        self.blocking(move |db| range_in(&db.begin_read()?, &start, end.as_deref(), limit))
            .await
    }

    pub(crate) async fn count(&self, start: &[u8], end: Option<&[u8]>) -> Result<u64, StoreError> {
        let (start, end) = (start.to_vec(), end.map(<[u8]>::to_vec));
        self.blocking(move |db| {
            let read = db.begin_read()?;
            let table = read.open_table(KV)?;
            let iter = match &end {
                Some(end) if end.as_slice() <= start.as_slice() => return Ok(0),
                Some(end) => table.range(start.as_slice()..end.as_slice())?,
                None => table.range(start.as_slice()..)?,
            };
            let mut n = 0;
            for item in iter {
                item?;
                n += 1;
            }
            Ok(n)
        })
        .await
    }

    /// A read transaction to serve a [`Snapshot`](crate::Snapshot)'s reads from, and its
    /// revision.
    pub(crate) async fn begin_snapshot(
        &self,
    ) -> Result<(Arc<redb::ReadTransaction>, u64), StoreError> {
        self.blocking(|db| {
            let read = db.begin_read()?;
            let revision = read_revision(&read.open_table(META)?)?;
            Ok((Arc::new(read), revision))
        })
        .await
    }

    pub(crate) async fn commit(&self, txn: Txn) -> Result<Outcome, StoreError> {
        self.blocking(move |db| {
            let write = db.begin_write()?;
            // Whether a commit changed anything: one that did not (a
            // check of reads, a delete of absent keys) is not written, so it
            // costs no sync.
            let mut changed = false;
            let outcome = {
                let mut table = write.open_table(KV)?;
                let mut meta = write.open_table(META)?;
                let revision = read_revision(&meta)?;
                let holds = |c: &Compare| -> Result<bool, StoreError> {
                    Ok(match c {
                        Compare::Absent(k) => table.get(k.as_slice())?.is_none(),
                        Compare::ModRevision(k, r) => {
                            table.get(k.as_slice())?.is_some_and(|v| v.value().1 == *r)
                        }
                        Compare::Leading(f) => {
                            return Err(StoreError::ForeignFence {
                                election: f.election().to_string(),
                            });
                        }
                        Compare::RangeUnchangedSince {
                            start,
                            end,
                            revision,
                        } => {
                            let iter = match end {
                                Some(e) if e.as_slice() <= start.as_slice() => return Ok(true),
                                Some(e) => table.range(start.as_slice()..e.as_slice())?,
                                None => table.range(start.as_slice()..)?,
                            };
                            let mut unchanged = true;
                            for item in iter {
                                if item?.1.value().1 > *revision {
                                    unchanged = false;
                                    break;
                                }
                            }
                            unchanged
                        }
                    })
                };
                let mut all = true;
                for c in txn.compares() {
                    if !holds(c)? {
                        all = false;
                        break;
                    }
                }
                if all {
                    // etcd advances the revision only when something changed
                    // (a delete of an absent key changes nothing).
                    let next = revision + 1;
                    for op in txn.ops() {
                        match op {
                            Op::Put(k, v) => {
                                let created =
                                    table.get(k.as_slice())?.map_or(next, |old| old.value().0);
                                table.insert(k.as_slice(), (created, next, v.as_slice()))?;
                                changed = true;
                            }
                            Op::Delete(k) => {
                                changed |= table.remove(k.as_slice())?.is_some();
                            }
                        }
                    }
                    let revision = if changed {
                        meta.insert(REVISION, next)?;
                        next
                    } else {
                        revision
                    };
                    Outcome::Committed { revision }
                } else {
                    Outcome::Conflict
                }
            };
            if changed {
                write.commit()?;
            } else {
                write.abort()?;
            }
            Ok(outcome)
        })
        .await
    }

    pub(crate) async fn revision(&self) -> Result<u64, StoreError> {
        self.blocking(|db| {
            let read = db.begin_read()?;
            read_revision(&read.open_table(META)?)
        })
        .await
    }
}

/// The entry at `key` in `read`.
pub(crate) fn get_in(
    read: &redb::ReadTransaction,
    key: Vec<u8>,
) -> Result<Option<Entry>, StoreError> {
    let table = read.open_table(KV)?;
    Ok(table.get(key.as_slice())?.map(|v| {
        let (create_revision, mod_revision, value) = v.value();
        Entry {
            key: key.clone(),
            value: value.to_vec(),
            create_revision,
            mod_revision,
        }
    }))
}

/// At most `limit` entries with `start <= key < end` in `read`, in key order.
pub(crate) fn range_in(
    read: &redb::ReadTransaction,
    start: &[u8],
    end: Option<&[u8]>,
    limit: usize,
) -> Result<Page, StoreError> {
    let table = read.open_table(KV)?;
    let revision = read_revision(&read.open_table(META)?)?;
    let mut entries = Vec::new();
    let mut more = false;
    let iter = match end {
        // An empty or inverted range holds nothing (etcd's answer too).
        Some(e) if e <= start => {
            return Ok(Page {
                entries,
                more,
                revision,
            });
        }
        Some(e) => table.range(start..e)?,
        None => table.range(start..)?,
    };
    for item in iter {
        let (k, v) = item?;
        if entries.len() == limit {
            more = true;
            break;
        }
        let (create_revision, mod_revision, value) = v.value();
        entries.push(Entry {
            key: k.value().to_vec(),
            value: value.to_vec(),
            create_revision,
            mod_revision,
        });
    }
    Ok(Page {
        entries,
        more,
        revision,
    })
}

/// The store's revision (1 before any write, as etcd's first revision).
fn read_revision(meta: &impl ReadableTable<&'static str, u64>) -> Result<u64, StoreError> {
    Ok(meta.get(REVISION)?.map_or(1, |v| v.value()))
}
