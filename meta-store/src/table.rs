//! [`Table`]: a typed table over the store's one keyspace, as a redb
//! `TableDefinition<K, V>` is over a redb file. Table `name`'s entry `k`
//! lives at key `name / encode(k)` with value `encode(v)` ([`codec`](crate::codec)),
//! so a table is one key range and its entries sort as their keys do.

use std::marker::PhantomData;

use crate::codec::{Codec, from_bytes, to_bytes};
use crate::{Entry, MetaStore, Page, Snapshot, StoreError, Transaction, Txn, prefix_end};

/// A typed table: keys `K`, values `V`, under `name` (lower-case ASCII
/// letters, digits and `_`, so that no table's range holds another's).
#[derive(Debug)]
pub struct Table<K, V> {
    name: &'static str,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for Table<K, V> {}

/// One row read from a [`Table`], with the revision to guard a write on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
    /// Store revision of the write that last changed the row
    /// (what [`Table::when_as_read`] guards on).
    pub mod_revision: u64,
}

/// Rows of one [`Table::scan`] call, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows<K, V> {
    /// The rows.
    pub rows: Vec<Row<K, V>>,
    /// Whether more rows follow the last one.
    pub more: bool,
}

/// Rows of one [`Table::scan_in`] call, in key order, as the transaction
/// sees them (its own writes applied, so no revisions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRows<K, V> {
    /// `(key, value)` pairs.
    pub rows: Vec<(K, V)>,
    /// Whether more rows follow the last one.
    pub more: bool,
}

impl<K: Codec, V: Codec> Table<K, V> {
    /// The table `name`.
    ///
    /// # Panics
    /// At compile time (it is `const`) or at once, when `name` is empty or
    /// has a character other than `a-z`, `0-9` and `_`: a programming error.
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        let b = name.as_bytes();
        assert!(!b.is_empty(), "table names are not empty");
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            assert!(
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_',
                "table names are a-z, 0-9 and _"
            );
            i += 1;
        }
        Self {
            name,
            _types: PhantomData,
        }
    }

    /// The table's name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The store key of `key`: `name/` then its encoding.
    #[must_use]
    pub fn store_key(&self, key: &K) -> Vec<u8> {
        let mut k = self.prefix();
        key.encode(&mut k);
        k
    }

    /// The store key every row of this table starts with (`name/`).
    #[must_use]
    pub fn key_prefix(&self) -> Vec<u8> {
        self.prefix()
    }

    fn prefix(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.name.len() + 16);
        k.extend_from_slice(self.name.as_bytes());
        k.push(b'/');
        k
    }

    fn decode_key(&self, store_key: &[u8]) -> Result<K, StoreError> {
        let prefix_len = self.name.len() + 1;
        store_key
            .get(prefix_len..)
            .ok_or_else(|| StoreError::Corrupt {
                table: self.name,
                reason: "a key shorter than the table's prefix".into(),
            })
            .and_then(|k| {
                from_bytes::<K>(k).map_err(|err| StoreError::Corrupt {
                    table: self.name,
                    reason: format!("key: {err}"),
                })
            })
    }

    fn decode_value(&self, value: &[u8]) -> Result<V, StoreError> {
        from_bytes::<V>(value).map_err(|err| StoreError::Corrupt {
            table: self.name,
            reason: format!("value: {err}"),
        })
    }

    fn row(&self, e: Entry) -> Result<Row<K, V>, StoreError> {
        Ok(Row {
            key: self.decode_key(&e.key)?,
            value: self.decode_value(&e.value)?,
            mod_revision: e.mod_revision,
        })
    }

    /// The range of `prefix`'s rows after `after` (exclusive): its first key
    /// and the first key past it (`None`: the end of the keyspace).
    fn scan_range<P: Codec>(&self, prefix: &P, after: Option<&K>) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut start = self.prefix();
        prefix.encode(&mut start);
        let end = prefix_end(&start);
        if let Some(a) = after {
            let mut past = self.store_key(a);
            // The first key after `a`: `a`'s own key plus a 0x00 byte.
            past.push(0);
            if past > start {
                start = past;
            }
        }
        (start, end)
    }

    /// The range of `prefix`'s rows at or after `from`.
    fn range_from<P: Codec>(&self, prefix: &P, from: &K) -> (Vec<u8>, Option<Vec<u8>>) {
        let (start, end) = self.scan_range(prefix, None);
        (start.max(self.store_key(from)), end)
    }

    /// The row at `key`, if any.
    ///
    /// # Errors
    /// The store's errors; [`StoreError::Corrupt`] if the stored bytes do not
    /// decode as `K`/`V`.
    pub async fn get(&self, store: &MetaStore, key: &K) -> Result<Option<Row<K, V>>, StoreError> {
        match store.get(&self.store_key(key)).await? {
            Some(e) => Ok(Some(self.row(e)?)),
            None => Ok(None),
        }
    }

    /// At most `limit` rows whose key's encoding starts with `prefix`'s (a
    /// leading part of the key, such as the bucket of `(bucket, key)`; `()`
    /// for the whole table), after `after` (exclusive) when given, in key
    /// order.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub async fn scan<P: Codec>(
        &self,
        store: &MetaStore,
        prefix: &P,
        after: Option<&K>,
        limit: usize,
    ) -> Result<Rows<K, V>, StoreError> {
        let (start, end) = self.scan_range(prefix, after);
        self.rows(store.range(&start, end.as_deref(), limit).await?)
    }

    /// How many rows have keys whose encoding starts with `prefix`'s (`()`: the table),
    /// now ([`MetaStore::count_prefix`]).
    ///
    /// # Errors
    /// The store's errors.
    pub async fn count<P: Codec>(&self, store: &MetaStore, prefix: &P) -> Result<u64, StoreError> {
        let mut start = self.prefix();
        prefix.encode(&mut start);
        store.count_prefix(&start).await
    }

    /// [`scan`](Self::scan) from `from` (inclusive) instead of after a key: the rows of
    /// `prefix` at or after `from`.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub async fn scan_from<P: Codec>(
        &self,
        store: &MetaStore,
        prefix: &P,
        from: &K,
        limit: usize,
    ) -> Result<Rows<K, V>, StoreError> {
        let (start, end) = self.range_from(prefix, from);
        self.rows(store.range(&start, end.as_deref(), limit).await?)
    }

    /// The row at `key` as of `snapshot`.
    ///
    /// # Errors
    /// As [`Snapshot::get`]; [`StoreError::Corrupt`] if the stored bytes do not decode.
    pub async fn get_at(
        &self,
        snapshot: &Snapshot,
        key: &K,
    ) -> Result<Option<Row<K, V>>, StoreError> {
        match snapshot.get(&self.store_key(key)).await? {
            Some(e) => Ok(Some(self.row(e)?)),
            None => Ok(None),
        }
    }

    /// [`scan`](Self::scan) as of `snapshot`: pages read one after another this way all
    /// see the same state.
    ///
    /// # Errors
    /// As [`Snapshot::range`]; [`StoreError::Corrupt`] if the stored bytes do not decode.
    pub async fn scan_at<P: Codec>(
        &self,
        snapshot: &Snapshot,
        prefix: &P,
        after: Option<&K>,
        limit: usize,
    ) -> Result<Rows<K, V>, StoreError> {
        let (start, end) = self.scan_range(prefix, after);
        self.rows(snapshot.range(&start, end.as_deref(), limit).await?)
    }

    /// [`scan_from`](Self::scan_from) as of `snapshot`.
    ///
    /// # Errors
    /// As [`scan_at`](Self::scan_at).
    pub async fn scan_from_at<P: Codec>(
        &self,
        snapshot: &Snapshot,
        prefix: &P,
        from: &K,
        limit: usize,
    ) -> Result<Rows<K, V>, StoreError> {
        let (start, end) = self.range_from(prefix, from);
        self.rows(snapshot.range(&start, end.as_deref(), limit).await?)
    }

    fn rows(&self, page: Page) -> Result<Rows<K, V>, StoreError> {
        let rows = page
            .entries
            .into_iter()
            .map(|e| self.row(e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rows {
            rows,
            more: page.more,
        })
    }

    /// Guards `tx` on `key` being absent without reading it
    /// ([`Transaction::assume_absent`]: for a new random key); returns whether `tx` takes it
    /// as absent.
    ///
    /// # Errors
    /// As [`Transaction::assume_absent`].
    pub fn assume_absent_in(&self, tx: &Transaction, key: &K) -> Result<bool, StoreError> {
        tx.assume_absent(&self.store_key(key))
    }

    /// The row at `key` as transaction `tx` sees it ([`Transaction::get`]).
    ///
    /// # Errors
    /// As [`Transaction::get`]; [`StoreError::Corrupt`] if the stored bytes
    /// do not decode as `V`.
    pub async fn get_in(&self, tx: &Transaction, key: &K) -> Result<Option<V>, StoreError> {
        match tx.get(&self.store_key(key)).await? {
            Some(v) => Ok(Some(self.decode_value(&v)?)),
            None => Ok(None),
        }
    }

    /// [`get_in`](Self::get_in), with the row's `mod_revision` as [`Transaction::get_entry`]
    /// gives it (`None`: `tx` wrote the row).
    ///
    /// # Errors
    /// As [`get_in`](Self::get_in).
    pub async fn get_row_in(
        &self,
        tx: &Transaction,
        key: &K,
    ) -> Result<Option<(V, Option<u64>)>, StoreError> {
        match tx.get_entry(&self.store_key(key)).await? {
            Some((v, revision)) => Ok(Some((self.decode_value(&v)?, revision))),
            None => Ok(None),
        }
    }

    /// [`scan`](Self::scan) as transaction `tx` sees the table
    /// ([`Transaction::scan`]: guarded, and with `tx`'s writes applied).
    ///
    /// # Errors
    /// As [`get_in`](Self::get_in).
    pub async fn scan_in<P: Codec>(
        &self,
        tx: &Transaction,
        prefix: &P,
        after: Option<&K>,
        limit: usize,
    ) -> Result<TxnRows<K, V>, StoreError> {
        let (start, end) = self.scan_range(prefix, after);
        let page = tx.scan(&start, end.as_deref(), limit).await?;
        let rows = page
            .entries
            .into_iter()
            .map(|(k, v)| Ok((self.decode_key(&k)?, self.decode_value(&v)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(TxnRows {
            rows,
            more: page.more,
        })
    }

    /// Buffers a put of `value` at `key` in `tx`.
    pub fn put_in(&self, tx: &Transaction, key: &K, value: &V) {
        tx.put(self.store_key(key), to_bytes(value));
    }

    /// Buffers a delete of `key` in `tx`.
    pub fn delete_in(&self, tx: &Transaction, key: &K) {
        tx.delete(self.store_key(key));
    }

    /// The store key and value bytes of row `key` = `value`, for
    /// [`RedbStore::import`](crate::RedbStore::import).
    #[must_use]
    pub fn row_bytes(&self, key: &K, value: &V) -> (Vec<u8>, Vec<u8>) {
        (self.store_key(key), to_bytes(value))
    }

    /// `txn` with a put of `value` at `key`.
    #[must_use]
    pub fn put(&self, txn: Txn, key: &K, value: &V) -> Txn {
        txn.put(self.store_key(key), to_bytes(value))
    }

    /// `txn` with a delete of `key`.
    #[must_use]
    pub fn delete(&self, txn: Txn, key: &K) -> Txn {
        txn.delete(self.store_key(key))
    }

    /// `txn` guarded on `key` being absent.
    #[must_use]
    pub fn when_absent(&self, txn: Txn, key: &K) -> Txn {
        txn.when_absent(self.store_key(key))
    }

    /// `txn` guarded on `key` being as `seen` says: absent for `None`, else
    /// unchanged since that read.
    #[must_use]
    pub fn when_as_read(&self, txn: Txn, key: &K, seen: Option<&Row<K, V>>) -> Txn {
        match seen {
            None => txn.when_absent(self.store_key(key)),
            Some(r) => txn.when_unchanged(self.store_key(key), r.mod_revision),
        }
    }
}
