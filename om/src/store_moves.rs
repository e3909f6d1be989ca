//! Moving an `om.redb` from before the metadata store: the tables of the
//! modules that moved onto the store are copied into it when the om opens
//! (ARCHITECTURE.md, "Moving the om onto the store").

use meta_store::RedbStore;
use redb::{
    Database, Key, ReadableDatabase, ReadableTable, TableDefinition, TableError, TableHandle, Value,
};

use crate::OmError;

/// Store rows (key, value bytes) made from an old table's rows.
pub(crate) type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// The error of an om whose `om.redb` still holds `table` from before the
/// metadata store while its modules keep their rows in another store: the
/// copy at open goes into the om's own file only.
pub(crate) fn old_table_elsewhere(table: &str) -> OmError {
    OmError::Internal(format!(
        "om.redb holds the table `{table}` from before the metadata store; open the om once \
         on its own file to move it there"
    ))
}

/// Copies the rows of the redb table `old` into `own`, the store over the
/// same file, then drops the table; nothing to do when the table does not
/// exist. `rows_of` turns each old row into store rows (and checks it: an
/// error leaves the old table in place). Only rows the store lacks are
/// written, so what was written since is never overwritten, and a crash
/// before the drop repeats the copy harmlessly. Returns the rows copied,
/// `None` when there was no table.
///
/// Not a rollback path: rows an older binary changed after an earlier move
/// (it sees only its own tables) are copied only where the store has none.
///
/// # Errors
/// Database and store errors; `rows_of`'s; [`OmError::Internal`] when
/// there are rows to copy and `own` is `None` (the om's store is
/// elsewhere).
pub(crate) fn move_old_table<K: Key + 'static, V: Value + 'static>(
    db: &Database,
    own: Option<&RedbStore>,
    old: TableDefinition<'_, K, V>,
    rows_of: impl for<'a> FnMut(K::SelfType<'a>, V::SelfType<'a>, &mut Rows) -> Result<(), OmError>,
) -> Result<Option<usize>, OmError> {
    move_old_table_then(db, own, old, rows_of, |_| Ok(()))
}

/// [`move_old_table`], running `before_drop` on the store after the copy
/// and before the old table is dropped (a crash before it ends repeats the
/// copy and it).
///
/// # Errors
/// As [`move_old_table`]; `before_drop`'s.
pub(crate) fn move_old_table_then<K: Key + 'static, V: Value + 'static>(
    db: &Database,
    own: Option<&RedbStore>,
    old: TableDefinition<'_, K, V>,
    mut rows_of: impl for<'a> FnMut(K::SelfType<'a>, V::SelfType<'a>, &mut Rows) -> Result<(), OmError>,
    before_drop: impl FnOnce(&RedbStore) -> Result<(), OmError>,
) -> Result<Option<usize>, OmError> {
    let mut rows = Vec::new();
    {
        let read = db.begin_read()?;
        match read.open_table(old) {
            Ok(t) => {
                for entry in t.iter()? {
                    let (k, v) = entry?;
                    rows_of(k.value(), v.value(), &mut rows)?;
                }
            }
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    let copied = match own {
        Some(redb) => {
            let copied = redb.import(&rows)?;
            before_drop(redb)?;
            copied
        }
        // An empty table (an older binary makes them all at open) goes.
        None if rows.is_empty() => 0,
        None => return Err(old_table_elsewhere(old.name())),
    };
    let write = db.begin_write()?;
    write.delete_table(old)?;
    write.commit()?;
    tracing::info!(
        table = old.name(),
        rows = copied,
        "old table moved onto the metadata store"
    );
    Ok(Some(copied))
}
