//! `ec-codec`: the pure, synchronous erasure-coding core of the workspace's model of Apache
//! Ozone's EC data path.
//!
//! It owns three things, each in its own private module and re-exported here:
//!
//! - **Schemes** — [`EcReplicationConfig`] (codec, data/parity unit counts, cell size), parsed
//!   from and printed as Ozone's `rs-3-2-1024k` strings; [`EcCodec`].
//! - **Layout math** — [`BlockGroupLayout`] maps group-relative bytes to cells and internal
//!   blocks ([`CellLocation`], [`CellSpan`] via [`CellSpans`]), and computes internal block and
//!   cell lengths of partial stripes, following ARCHITECTURE.md's "Terms and layout math".
//!   Replica indexes there are [`ReplicaIndex`]es: 1-based (`1..=d` data, then parity), as in
//!   Ozone and on the wire.
//! - **Codecs** — [`RsCodec`], systematic Cauchy Reed-Solomon over GF(2^8) (polynomial 0x11d)
//!   byte-compatible with ISA-L's `gf_gen_cauchy1_matrix` and hence Hadoop/Ozone parity, and
//!   [`XorCodec`]; [`ErasureCoder`] wraps either, built by [`EcReplicationConfig::coder`].
//!   Codecs address units by 0-based unit index (replica index - 1).
//!
//! Errors: one `#[non_exhaustive]` enum, [`EcError`], whose variants carry the numbers
//! involved (indexes, offsets, lengths). Nothing here panics on caller input.
//!
//! This crate does no I/O, spawns no tasks and must not depend on any other workspace crate
//! (`proto-crate`, `block-stream`, `ec-client`, ...): they depend on it. Field arithmetic and
//! the bulk GF(2^8) slice kernels come from `reed-solomon-erasure`'s `galois_8` module; its
//! `ReedSolomon` type is deliberately not used, since its matrix differs from ISA-L's. The bulk
//! kernel is ours where the CPU allows: a vectorised split-table multiply ([`Kernel`]).
//! That one module (`simd.rs`) is the crate's only `unsafe`.

mod coder;
mod config;
mod error;
mod kernel;
mod layout;
mod matrix;
mod replica_index;
mod rs;
mod simd;
mod xor;

pub use coder::ErasureCoder;
pub use config::{EcCodec, EcReplicationConfig, MAX_CELL_SIZE, MAX_UNITS};
pub use error::EcError;
pub use kernel::Kernel;
pub use layout::{BlockGroupLayout, CellLocation, CellSpan, CellSpans};
pub use replica_index::ReplicaIndex;
pub use rs::RsCodec;
pub use xor::XorCodec;
