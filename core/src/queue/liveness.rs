//! Liveness of a host that turned keep-alive off (Connect KATO 0). Such a host
//! sends nothing while idle, so a host that vanished without a word (power
//! loss, a cable pulled) would hold its controller, queues and memory
//! forever. The transport probes it instead: after [`IDLE`] without a
//! capsule, one zero-length RDMA WRITE (which needs no memory key). A live
//! host's transport acknowledges it; a gone one does not, the write fails
//! after the transport's retries, and the queue fails with it. Where the
//! transport retries forever, the probe times out instead ([`PROBE_TIMEOUT`]):
//! the passive side's retry count is the one the host asked for in its CM
//! request (Linux asks 7), and soft-RoCE reads 7 as "retry forever".
//!
//! A host that keeps sending keep-alives but stops taking responses (it
//! posts no receives; with infinite RNR retry its sends never complete)
//! holds the data buffers of every response in flight for ever: a queue
//! whose responses made no progress for [`SEND_STALL`] is ended, whatever
//! its keep-alive does.
//!
//! A host that asks the target to fetch its data and never gives it (an
//! NVMe/TCP host that sends no H2CData for its R2Ts) holds the data buffer
//! of each such command: a queue whose fetches made no progress for
//! [`FETCH_STALL`] is ended too.
//!
//! Sans-IO: this decides when; the transport sends.

use std::time::{Duration, Instant};

/// Quiet time after which a host without keep-alive is probed.
pub const IDLE: Duration = Duration::from_secs(10);

/// How long a probe may go unanswered, with nothing else heard from the
/// host, before the host counts as gone.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a queue's responses may make no progress (none delivered while
/// one is out) before the queue is ended.
pub const SEND_STALL: Duration = Duration::from_secs(30);

/// How long a queue's fetches of host data may make no progress (none
/// completed while one is out) before the queue is ended. Data a host
/// sends in order on its connection completes one fetch at least every
/// 128 KiB; a live host is far quicker than this.
pub const FETCH_STALL: Duration = Duration::from_secs(10);

/// When a queue last heard from its host, its probe in flight, and the
/// progress of its responses and fetches.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    accepted: Instant,
    last_heard: Instant,
    probe: Option<Instant>,
    /// Responses posted and not delivered yet.
    sending: u32,
    /// When a response was last delivered, or the first one posted since.
    sends_moved: Instant,
    /// Fetches of host data posted and not completed yet.
    fetching: u32,
    /// When a fetch last completed, or the first one posted since.
    fetches_moved: Instant,
}

impl Liveness {
    /// A queue accepted at `now`.
    pub fn new(now: Instant) -> Liveness {
        Liveness {
            accepted: now,
            last_heard: now,
            probe: None,
            sending: 0,
            sends_moved: now,
            fetching: 0,
            fetches_moved: now,
        }
    }

    /// A response was posted.
    pub fn response_posted(&mut self, now: Instant) {
        if self.sending == 0 {
            self.sends_moved = now;
        }
        self.sending += 1;
    }

    /// A response was delivered (or failed: it left the queue either way).
    pub fn response_done(&mut self, now: Instant) {
        self.sending = self.sending.saturating_sub(1);
        self.sends_moved = now;
    }

    /// Whether responses are out and none moved for [`SEND_STALL`].
    pub fn sends_stalled(&self, now: Instant) -> bool {
        self.sending > 0 && now.saturating_duration_since(self.sends_moved) >= SEND_STALL
    }

    /// A fetch of host data was posted.
    pub fn fetch_posted(&mut self, now: Instant) {
        if self.fetching == 0 {
            self.fetches_moved = now;
        }
        self.fetching += 1;
    }

    /// A fetch completed (or failed: it is not out any more either way).
    pub fn fetch_done(&mut self, now: Instant) {
        self.fetching = self.fetching.saturating_sub(1);
        self.fetches_moved = now;
    }

    /// Whether fetches are out and none completed for [`FETCH_STALL`].
    pub fn fetches_stalled(&self, now: Instant) -> bool {
        self.fetching > 0 && now.saturating_duration_since(self.fetches_moved) >= FETCH_STALL
    }

    /// When the queue was accepted.
    pub fn accepted(&self) -> Instant {
        self.accepted
    }

    /// A capsule arrived.
    pub fn heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// Whether to probe now: the controller runs without keep-alive
    /// (`kato_ms` 0) or with one longer than the target waits out
    /// (`max_kato_ms`: a host that asks for 49 days and vanishes must not
    /// hold its queues that long), nothing was heard for [`IDLE`], and no
    /// probe is out.
    pub fn probe_due(&self, now: Instant, kato_ms: u32, max_kato_ms: u32) -> bool {
        (kato_ms == 0 || kato_ms > max_kato_ms)
            && self.probe.is_none()
            && now.saturating_duration_since(self.last_heard) >= IDLE
    }

    /// A probe was sent.
    pub fn probe_sent(&mut self, now: Instant) {
        self.probe = Some(now);
    }

    /// The probe was acknowledged: the host's transport is alive; the next
    /// probe follows after another quiet [`IDLE`].
    pub fn probe_answered(&mut self, now: Instant) {
        self.probe = None;
        self.last_heard = now;
    }

    /// Whether a probe is out.
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// Whether a probe is out and nothing (neither its acknowledgement nor a
    /// capsule) was heard from the host for [`PROBE_TIMEOUT`] since the later
    /// of the probe and the last capsule: the host is gone.
    pub fn probe_overdue(&self, now: Instant) -> bool {
        self.probe.is_some_and(|sent| {
            now.saturating_duration_since(sent.max(self.last_heard)) >= PROBE_TIMEOUT
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 120_000;

    #[test]
    fn a_keep_alive_beyond_the_bound_is_probed_like_none() {
        let t0 = Instant::now();
        let l = Liveness::new(t0);
        assert!(l.probe_due(t0 + IDLE, u32::MAX, MAX));
        assert!(l.probe_due(t0 + IDLE, MAX + 1, MAX));
        assert!(
            !l.probe_due(t0 + IDLE, MAX, MAX),
            "within the bound: keep-alive covers it"
        );
        assert!(
            !l.probe_due(t0 + IDLE / 2, u32::MAX, MAX),
            "not quiet long enough"
        );
    }

    #[test]
    fn probes_only_a_quiet_host_without_keep_alive() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        assert!(!l.probe_due(t0 + IDLE / 2, 0, MAX), "not quiet long enough");
        assert!(l.probe_due(t0 + IDLE, 0, MAX));
        assert!(
            !l.probe_due(t0 + IDLE * 10, 5000, MAX),
            "keep-alive covers it"
        );
        l.heard(t0 + IDLE);
        assert!(!l.probe_due(t0 + IDLE + IDLE / 2, 0, MAX), "heard from");
        let t1 = t0 + IDLE * 2;
        assert!(l.probe_due(t1, 0, MAX));
        l.probe_sent(t1);
        assert!(l.probing());
        assert!(!l.probe_due(t1 + IDLE * 3, 0, MAX), "one probe at a time");
        l.probe_answered(t1 + Duration::from_millis(1));
        assert!(!l.probing());
        assert!(!l.probe_due(t1 + IDLE / 2, 0, MAX));
        assert!(l.probe_due(t1 + IDLE * 2, 0, MAX));
        assert_eq!(l.accepted(), t0);
    }

    #[test]
    fn responses_that_do_not_move_stall_the_queue() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        assert!(!l.sends_stalled(t0 + SEND_STALL * 2), "nothing out");
        l.response_posted(t0 + SEND_STALL);
        let t1 = t0 + SEND_STALL;
        assert!(!l.sends_stalled(t1 + SEND_STALL / 2));
        l.response_posted(t1 + SEND_STALL / 2);
        assert!(l.sends_stalled(t1 + SEND_STALL), "the first one never left");
        l.response_done(t1 + SEND_STALL / 2);
        assert!(!l.sends_stalled(t1 + SEND_STALL), "one moved");
        l.response_done(t1 + SEND_STALL);
        assert!(!l.sends_stalled(t1 + SEND_STALL * 5), "none out");
    }

    #[test]
    fn fetches_that_do_not_move_stall_the_queue() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        assert!(!l.fetches_stalled(t0 + FETCH_STALL * 2), "nothing out");
        let t1 = t0 + FETCH_STALL;
        l.fetch_posted(t1);
        assert!(!l.fetches_stalled(t1 + FETCH_STALL / 2));
        l.fetch_posted(t1 + FETCH_STALL / 2);
        assert!(
            l.fetches_stalled(t1 + FETCH_STALL),
            "the first one never came"
        );
        l.fetch_done(t1 + FETCH_STALL / 2);
        assert!(!l.fetches_stalled(t1 + FETCH_STALL), "one came");
        assert!(
            l.fetches_stalled(t1 + FETCH_STALL / 2 + FETCH_STALL),
            "then none"
        );
        l.fetch_done(t1 + FETCH_STALL);
        assert!(!l.fetches_stalled(t1 + FETCH_STALL * 5), "none out");
        assert!(
            !l.sends_stalled(t1 + FETCH_STALL * 5),
            "apart from responses"
        );
    }

    #[test]
    fn an_unanswered_probe_times_out_unless_the_host_speaks() {
        let t0 = Instant::now();
        let mut l = Liveness::new(t0);
        assert!(!l.probe_overdue(t0 + PROBE_TIMEOUT * 2), "no probe out");
        let t1 = t0 + IDLE;
        l.probe_sent(t1);
        assert!(!l.probe_overdue(t1 + PROBE_TIMEOUT / 2));
        assert!(l.probe_overdue(t1 + PROBE_TIMEOUT));
        // A capsule after the probe: the host lived then; the clock restarts
        // from it (a host that then falls silent, its probe still out, is gone).
        let t2 = t1 + Duration::from_secs(5);
        l.heard(t2);
        assert!(!l.probe_overdue(t1 + PROBE_TIMEOUT));
        assert!(!l.probe_overdue(t2 + PROBE_TIMEOUT / 2));
        assert!(l.probe_overdue(t2 + PROBE_TIMEOUT));
        l.probe_answered(t2 + Duration::from_secs(1));
        assert!(!l.probe_overdue(t2 + PROBE_TIMEOUT * 3), "answered");
    }
}
