//! The integration tests of this crate, in one binary: each module is one
//! area (its own doc comment says what it covers). One binary instead of one
//! per file links the cluster, the transport and TLS once rather than dozens
//! of times, which is most of a fresh `cargo test`'s time and disk.

mod conformance;
mod election;
mod secure;
mod snapshot;
mod space;
mod table;
mod transaction;
