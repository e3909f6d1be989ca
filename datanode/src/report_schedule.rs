//! When a datanode sends block reports, and to which of its oms: the
//! decisions of `heartbeat::run_block_reports`, kept apart from the I/O so
//! that they are tested without clocks or sockets.
//!
//! Rounds run on one schedule shared by every om: each round scans the
//! store once and sends that scan to every om that is not still busy with
//! an earlier send, so oms that answer stay on one scan per interval (a
//! scan per om would apply the scan's two-scan rule for dropping records to
//! scans milliseconds apart). An om whose send failed is retried on its own
//! after `retry`, doubling with each failure in a row up to the interval; a
//! retry scans again (as a single om's retry always did) and sends only to
//! the oms retrying. The next round takes every om that is not busy, so a
//! retried om is back on the common schedule after one round.

use std::time::Duration;

use tokio::time::Instant;

/// Longest interval the schedule works with (longer ones are cut to it, so
/// that no instant overflows): about 30 years.
const MAX_WAIT: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

#[derive(Debug, Clone)]
struct OmSlot {
    /// A send to this om has not finished.
    busy: bool,
    /// When this om is retried on its own (after a failure).
    retry_at: Option<Instant>,
    /// The wait after its next failure.
    backoff: Duration,
}

/// The block-report schedule of one datanode's oms, by the oms' places in
/// its om list.
#[derive(Debug, Clone)]
pub(crate) struct ReportSchedule {
    interval: Duration,
    retry: Duration,
    next_round: Instant,
    oms: Vec<OmSlot>,
}

impl ReportSchedule {
    /// A schedule for `oms` oms whose first round is due at `now`, then one
    /// every `interval`; failed sends retried after `retry` (at most
    /// `interval`), doubling.
    pub(crate) fn new(oms: usize, now: Instant, interval: Duration, retry: Duration) -> Self {
        let interval = interval.min(MAX_WAIT);
        let retry = retry.min(interval);
        Self {
            interval,
            retry,
            next_round: now,
            oms: vec![
                OmSlot {
                    busy: false,
                    retry_at: None,
                    backoff: retry,
                };
                oms
            ],
        }
    }

    /// When something is next due: the next round, or an earlier retry.
    pub(crate) fn next_wake(&self) -> Instant {
        self.oms
            .iter()
            .filter(|s| !s.busy)
            .filter_map(|s| s.retry_at)
            .fold(self.next_round, Instant::min)
    }

    /// The oms that get a scan made at `now` (each then busy until
    /// [`sent`](Self::sent) or [`failed`](Self::failed)): at a round, every
    /// om not busy (and the next round is set one interval on); else the
    /// oms whose retry is due. Empty when nothing is due.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<usize> {
        let round = now >= self.next_round;
        if round {
            self.next_round = now + self.interval;
        }
        let mut due = Vec::new();
        for (i, s) in self.oms.iter_mut().enumerate() {
            if s.busy {
                continue;
            }
            if round || s.retry_at.is_some_and(|at| at <= now) {
                s.busy = true;
                s.retry_at = None;
                due.push(i);
            }
        }
        due
    }

    /// Om `i` took the report: it waits for the next round.
    pub(crate) fn sent(&mut self, i: usize) {
        if let Some(s) = self.oms.get_mut(i) {
            s.busy = false;
            s.retry_at = None;
            s.backoff = self.retry;
        }
    }

    /// Om `i` did not take the report (or the scan failed) at `now`: it is
    /// retried after its backoff, which then doubles up to the interval.
    pub(crate) fn failed(&mut self, i: usize, now: Instant) {
        if let Some(s) = self.oms.get_mut(i) {
            s.busy = false;
            s.retry_at = Some(now + s.backoff);
            s.backoff = (s.backoff.saturating_mul(2)).min(self.interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_secs(300);
    const R: Duration = Duration::from_secs(3);

    #[test]
    fn oms_that_answer_share_one_scan_per_round() {
        let t0 = Instant::now();
        let mut s = ReportSchedule::new(3, t0, I, R);
        assert_eq!(s.take_due(t0), [0, 1, 2]);
        // Answers arrive at different times: still one round for all.
        s.sent(0);
        s.sent(2);
        s.sent(1);
        assert_eq!(s.next_wake(), t0 + I);
        assert!(s.take_due(t0 + I / 2).is_empty());
        assert_eq!(s.take_due(t0 + I), [0, 1, 2]);
    }

    #[test]
    fn a_failed_om_is_retried_alone_with_backoff_then_rejoins_the_round() {
        let t0 = Instant::now();
        let mut s = ReportSchedule::new(2, t0, I, R);
        assert_eq!(s.take_due(t0), [0, 1]);
        s.sent(0);
        s.failed(1, t0);
        assert_eq!(s.next_wake(), t0 + R);
        assert_eq!(s.take_due(t0 + R), [1], "the retry goes to om 1 alone");
        s.failed(1, t0 + R);
        assert_eq!(s.next_wake(), t0 + 3 * R, "backoff doubled");
        assert_eq!(s.take_due(t0 + 3 * R), [1]);
        s.sent(1);
        assert_eq!(s.next_wake(), t0 + I, "back on the common round");
        assert_eq!(s.take_due(t0 + I), [0, 1]);
    }

    #[test]
    fn a_busy_om_skips_rounds_without_holding_up_the_others() {
        let t0 = Instant::now();
        let mut s = ReportSchedule::new(2, t0, I, R);
        assert_eq!(s.take_due(t0), [0, 1]);
        s.sent(0);
        // Om 1 never answers: om 0 gets its rounds, and the round moves on
        // even when nobody is free (no busy loop).
        assert_eq!(s.take_due(t0 + I), [0]);
        assert_eq!(s.next_wake(), t0 + 2 * I);
        assert!(s.take_due(t0 + 2 * I).is_empty());
        assert_eq!(s.next_wake(), t0 + 3 * I);
    }

    #[test]
    fn backoff_stops_at_the_interval_and_huge_intervals_do_not_overflow() {
        let t0 = Instant::now();
        let mut s = ReportSchedule::new(1, t0, I, Duration::from_secs(100));
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..4 {
            assert_eq!(s.take_due(now), [0]);
            s.failed(0, now);
            let next = s.next_wake();
            waits.push(next - now);
            now = next;
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [100, 200, 300, 300]);

        let mut huge = ReportSchedule::new(1, t0, Duration::MAX, Duration::MAX);
        assert_eq!(huge.take_due(t0), [0]);
        huge.failed(0, t0);
        assert!(huge.next_wake() > t0);
    }
}
