//! EC read-path counters: readers created by kind, failovers, spare-replica
//! switches, stripes reconstructed. Exact atomics, asserted by tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one [`Client`](crate::Client)'s EC readers.
#[derive(Debug, Default)]
pub struct EcReadMetrics {
    pub(crate) ec_readers_created: AtomicU64,
    pub(crate) reconstruction_readers_created: AtomicU64,
    pub(crate) failovers: AtomicU64,
    pub(crate) spare_switches: AtomicU64,
    pub(crate) stripes_reconstructed: AtomicU64,
    pub(crate) location_refreshes: AtomicU64,
    pub(crate) degraded_probes: AtomicU64,
}

/// A copy of the client's EC read counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EcReadSnapshot {
    /// `EcBlockInputStream`s built (`ec_readers_created_total`).
    pub ec_readers_created: u64,
    /// `EcBlockReconstructedStripeInputStream`s built.
    pub reconstruction_readers_created: u64,
    /// Times a proxy gave up on a location and retried with it excluded.
    pub failovers: u64,
    /// Failovers served by a spare replica of the failed index.
    pub spare_switches: u64,
    /// Stripes decoded from parity.
    pub stripes_reconstructed: u64,
    /// Times a read that found too few locations looked the key up again
    /// and retried every location.
    pub location_refreshes: u64,
    /// Times a reader degraded for longer than the probe interval looked
    /// the key up again and went back to the striped fast path.
    pub degraded_probes: u64,
}

impl EcReadMetrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Current values.
    #[must_use]
    pub fn snapshot(&self) -> EcReadSnapshot {
        EcReadSnapshot {
            ec_readers_created: self.ec_readers_created.load(Ordering::Relaxed),
            reconstruction_readers_created: self
                .reconstruction_readers_created
                .load(Ordering::Relaxed),
            failovers: self.failovers.load(Ordering::Relaxed),
            spare_switches: self.spare_switches.load(Ordering::Relaxed),
            stripes_reconstructed: self.stripes_reconstructed.load(Ordering::Relaxed),
            location_refreshes: self.location_refreshes.load(Ordering::Relaxed),
            degraded_probes: self.degraded_probes.load(Ordering::Relaxed),
        }
    }
}

impl EcReadSnapshot {
    /// What happened between `earlier` and `self`.
    #[must_use]
    pub fn since(&self, earlier: &EcReadSnapshot) -> EcReadSnapshot {
        EcReadSnapshot {
            ec_readers_created: self.ec_readers_created - earlier.ec_readers_created,
            reconstruction_readers_created: self.reconstruction_readers_created
                - earlier.reconstruction_readers_created,
            failovers: self.failovers - earlier.failovers,
            spare_switches: self.spare_switches - earlier.spare_switches,
            stripes_reconstructed: self.stripes_reconstructed - earlier.stripes_reconstructed,
            location_refreshes: self.location_refreshes - earlier.location_refreshes,
            degraded_probes: self.degraded_probes - earlier.degraded_probes,
        }
    }
}
