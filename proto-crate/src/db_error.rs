//! [`redb_error_conversions!`]: one definition of the `From` conversions
//! from redb's error types into a crate's error, for the crates that keep
//! metadata in redb (om, datanode). The error keeps redb's typed error as
//! its source (`redb::Error` unifies them), so callers can match on it —
//! e.g. `redb::Error::DatabaseAlreadyOpen` — instead of on message text.

/// Implements `From<redb::X> for $error` for every redb error type `X`,
/// wrapping it as `$error::$variant(redb::Error)`. The calling crate must
/// depend on `redb`; `$variant` must hold a `redb::Error` (and may derive
/// `From<redb::Error>` itself with `#[from]`).
#[macro_export]
macro_rules! redb_error_conversions {
    ($error:ty, $variant:ident) => {
        $crate::redb_error_conversions!(@each $error, $variant,
            DatabaseError, TransactionError, TableError, StorageError, CommitError);
    };
    (@each $error:ty, $variant:ident, $($kind:ident),*) => {$(
        impl From<redb::$kind> for $error {
            fn from(e: redb::$kind) -> Self {
                Self::$variant(redb::Error::from(e))
            }
        }
    )*};
}
