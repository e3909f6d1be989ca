//! The integration tests of this crate, in one binary: each module is one
//! area (its own doc comment says what it covers). One binary instead of one
//! per file links the cluster, the transport and TLS once rather than dozens
//! of times, which is most of a fresh `cargo test`'s time and disk.

mod common;

mod async_write;
mod block_reports;
mod block_tokens;
mod blocking;
mod cancellation;
mod conditional_commit;
mod datanode_oms;
mod datanode_rules;
mod durability;
mod failover;
mod fault_proptest;
mod large_chunks;
mod om_failover;
mod om_model;
mod om_races;
mod preads;
mod read_ahead;
mod reclamation;
mod recovery;
mod rename;
mod repair;
mod replication_manager;
mod roundtrip;
mod stored_layout;
mod tls;
mod vectored;
mod writes;
