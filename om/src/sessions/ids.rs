//! Block and container ids from ranges each om reserves: one counter write per batch, so
//! that oms sharing a store do not all contend for the counter rows.

use meta_store::Transaction;

use crate::tables::COUNTERS;
use crate::{OmError, OzoneManager};

type Result<T, E = OmError> = std::result::Result<T, E>;

/// Local ids one reservation takes (Ozone's SCM hands out block ids from batches of its
/// sequence id generator the same way, `ozone.scm.sequence.id.batch.size`, 1000).
pub const LOCAL_ID_BATCH: u64 = 1000;
/// Container ids one reservation takes.
pub(crate) const CONTAINER_ID_BATCH: u64 = 16;

/// An id the om hands out from reserved ranges.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdKind {
    /// Block local ids (`counters/next_local_id`).
    Local,
    /// Container ids (`counters/next_container_id`).
    Container,
}

impl IdKind {
    fn counter(self) -> &'static str {
        match self {
            Self::Local => "next_local_id",
            Self::Container => "next_container_id",
        }
    }

    fn batch(self) -> u64 {
        match self {
            Self::Local => LOCAL_ID_BATCH,
            Self::Container => CONTAINER_ID_BATCH,
        }
    }
}

/// Ids this om has reserved and not yet handed out: `next..end` of each kind. The stored
/// counter is past every reserved id, so ids never repeat across oms or restarts; those a
/// restart leaves unused are skipped. One counter write per batch, not per group: with
/// several oms on one store, allocations do not all contend for the counter rows.
#[derive(Debug, Default)]
pub(crate) struct IdRanges {
    local: std::ops::Range<u64>,
    container: std::ops::Range<u64>,
}

impl IdRanges {
    fn of(&mut self, kind: IdKind) -> &mut std::ops::Range<u64> {
        match kind {
            IdKind::Local => &mut self.local,
            IdKind::Container => &mut self.container,
        }
    }
}

impl OzoneManager {
    /// The next id of `kind`: from this om's reserved range, or (when it is used up) the
    /// first of a new range reserved by advancing the stored counter in `tx`; the rest of
    /// that range goes into `reserved`, for [`install_ids`](Self::install_ids) once `tx`
    /// has committed (a range whose reservation did not commit is never used: another om,
    /// or this one restarted, may reserve it again). An id taken from memory by a body that
    /// then runs again is skipped (a gap, never a repeat).
    pub(super) async fn take_id(
        &self,
        tx: &Transaction,
        kind: IdKind,
        reserved: &mut Vec<(IdKind, std::ops::Range<u64>)>,
    ) -> Result<u64> {
        if let Some(id) = self.id_ranges().of(kind).next() {
            return Ok(id);
        }
        let name = kind.counter().to_string();
        let start = COUNTERS.get_in(tx, &name).await?.unwrap_or(1);
        let end = start
            .checked_add(kind.batch())
            .ok_or_else(|| OmError::Internal(format!("{} overflows", kind.counter())))?;
        COUNTERS.put_in(tx, &name, &end);
        reserved.push((kind, start + 1..end));
        Ok(start)
    }

    /// Makes ranges reserved by a committed transaction this om's. Two allocations that
    /// found a range used up at once each reserved one; the later replaces the other's rest
    /// (a gap, never a repeat).
    pub(super) fn install_ids(&self, reserved: Vec<(IdKind, std::ops::Range<u64>)>) {
        let mut ranges = self.id_ranges();
        for (kind, range) in reserved {
            *ranges.of(kind) = range;
        }
    }

    fn id_ranges(&self) -> std::sync::MutexGuard<'_, IdRanges> {
        self.id_ranges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
