//! What the core counts, and where the counts go. The counts of every I/O
//! are plain integers only their worker writes ([`tally`]) or per-worker
//! shards ([`namespace`], [`host`]), read when the daemon's metrics are
//! scraped; the rarer events (a queue connected, a host throttled, an
//! asynchronous event raised, a tally's publication) go to a [`Meter`]. The
//! core knows no metrics library: the daemon installs its meter at start
//! ([`install`]); until then, and in tests, events go nowhere and a tally
//! keeps its own totals.

pub mod host;
pub mod namespace;
pub mod tally;

use std::sync::OnceLock;
use std::time::Duration;

pub use tally::{Counts, Failed, RdmaOp, Tally};

/// Where the core's events are counted (the daemon's metrics).
pub trait Meter: Send + Sync {
    /// Worker `worker` started counting: its series exist from now on (at
    /// 0, so that its first counts are an increase).
    fn worker_started(&self, worker: usize) {
        let _ = worker;
    }

    /// Namespace `nsid` of `subsys` opened: its series exist from now on.
    fn namespace_added(&self, subsys: &str, nsid: u32) {
        let _ = (subsys, nsid);
    }

    /// A worker's tally since its last publication: its counts, failed
    /// commands and refusals (see [`Tally::publish`]).
    fn tally(
        &self,
        worker: usize,
        counts: &Counts,
        failed: &[(Failed, u64)],
        rejected: &[(&'static str, u64)],
    ) {
        let _ = (worker, counts, failed, rejected);
    }

    /// Queue `qid` of `subsys` connected over `fabric`.
    fn queue_connected(&self, subsys: &str, qid: u16, fabric: &'static str) {
        let _ = (subsys, qid, fabric);
    }

    /// Connected queue `qid` of `subsys` left; an admin queue's controller
    /// with it, for `reason`.
    fn queue_left(&self, subsys: &str, qid: u16, fabric: &'static str, reason: &str) {
        let _ = (subsys, qid, fabric, reason);
    }

    /// A controller of `subsys` missed its keep-alive.
    fn keep_alive_expired(&self, subsys: &str) {
        let _ = subsys;
    }

    /// Worker `worker` holds `delta` more queues.
    fn worker_queues(&self, worker: usize, delta: i64) {
        let _ = (worker, delta);
    }

    /// An I/O of `host` on namespace `nsid` of `subsys` waited `waited` for
    /// a QoS cap (`host` empty: the namespace's own cap).
    fn qos_throttled(&self, subsys: &str, nsid: u32, host: &str, waited: Duration) {
        let _ = (subsys, nsid, host, waited);
    }

    /// A controller of `subsys` raised an asynchronous event of `kind`.
    fn async_event(&self, subsys: &str, kind: &'static str) {
        let _ = (subsys, kind);
    }

    /// Controllers of keyed hosts not yet authenticated, now.
    fn unauthenticated_controllers(&self, n: usize) {
        let _ = n;
    }

    /// A queue or connection was refused outside a worker's tally.
    fn rejected(&self, reason: &'static str) {
        let _ = reason;
    }

    /// An authentication of a host to `subsys` ended with `outcome`.
    fn authentication(&self, subsys: &str, outcome: &'static str) {
        let _ = (subsys, outcome);
    }

    /// The backend failed an operation of namespace `nsid` of `subsys`.
    fn backend_error(&self, subsys: &str, nsid: u32) {
        let _ = (subsys, nsid);
    }

    /// A command to namespace `nsid` of `subsys` conflicted with a
    /// reservation.
    fn reservation_conflict(&self, subsys: &str, nsid: u32) {
        let _ = (subsys, nsid);
    }

    /// Namespace `nsid` of `subsys` was removed: its series go.
    fn namespace_removed(&self, subsys: &str, nsid: u32) {
        let _ = (subsys, nsid);
    }
}

/// Counts nothing.
struct Nowhere;

impl Meter for Nowhere {}

static METER: OnceLock<&'static dyn Meter> = OnceLock::new();

/// Sends the core's events to `m` from now on (once per process; false if
/// one was installed already).
pub fn install(m: &'static dyn Meter) -> bool {
    METER.set(m).is_ok()
}

/// The installed meter (one that counts nothing until one is installed).
pub fn meter() -> &'static dyn Meter {
    METER.get().copied().unwrap_or(&Nowhere)
}
