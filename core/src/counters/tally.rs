//! What a worker counts, through one handle the queue core and the
//! transports are given ([`crate::queue::Env::tally`]): on every I/O in plain
//! integers only it writes, published to the [`Meter`](super::Meter) on its
//! timer pass (and before it sleeps), so that no shared cache line is written
//! per I/O for them; failures and refusals the same way; queues connecting
//! and leaving at once (their gauges are what status and dashboards show).
//! A tally also keeps its totals since it began, for tests to read exactly.

use std::time::Duration;

use super::meter;

/// RDMA operations, as labelled in `rdma_operations_total{op}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaOp {
    /// RDMA READ (host data fetched).
    Read = 0,
    /// RDMA WRITE (data to the host).
    Write = 1,
    /// A response SEND.
    Send = 2,
    /// A response SEND_WITH_INVALIDATE.
    SendWithInvalidate = 3,
}

/// Each [`RdmaOp`]'s label.
pub const RDMA_OPS: [&str; 4] = ["read", "write", "send", "send_with_invalidate"];
/// Each buffer size class's label.
pub const CLASSES: [&str; 2] = ["small", "large"];

/// A worker's counts (since its last publication, or since it began).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// RDMA operations posted, by [`RdmaOp`].
    pub rdma: [u64; 4],
    /// Write commands whose data came in their capsule.
    pub in_capsule_writes: u64,
    /// Data buffers taken less those given back, by size class.
    pub pool_in_use: [i64; 2],
    /// Requests that waited for a data buffer, by size class.
    pub pool_waits: [u64; 2],
    /// NVMe/TCP capsules that waited for a capsule buffer.
    pub capsule_waits: u64,
    /// Times the worker woke from a sleep.
    pub wakeups: u64,
    /// Time the worker spent on passes that found work (ns).
    pub busy_ns: u64,
    /// Waits for a QoS cap (an I/O held by two caps, its namespace's and
    /// its host's, counts twice).
    pub throttled: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        for (a, b) in self.rdma.iter_mut().zip(o.rdma) {
            *a += b;
        }
        self.in_capsule_writes += o.in_capsule_writes;
        for (a, b) in self.pool_in_use.iter_mut().zip(o.pool_in_use) {
            *a += b;
        }
        for (a, b) in self.pool_waits.iter_mut().zip(o.pool_waits) {
            *a += b;
        }
        self.capsule_waits += o.capsule_waits;
        self.wakeups += o.wakeups;
        self.busy_ns += o.busy_ns;
        self.throttled += o.throttled;
    }
}

/// One worker's counts.
#[derive(Debug)]
pub struct Tally {
    /// The worker's index.
    worker: usize,
    now: Counts,
    /// What was published before.
    before: Counts,
    /// Failed commands since the last publication, by status name.
    failed: Vec<(Failed, u64)>,
    /// Refusals since the last publication, by reason.
    rejected: Vec<(&'static str, u64)>,
    /// Failed commands and refusals published before.
    failed_before: u64,
    rejected_before: u64,
}

/// Adds one to `key`'s count in `v` (a handful of keys: a short list).
/// A failed command's labels: subsystem ("" before a controller), nsid
/// (0: none, or not a namespace of the subsystem: a host picks any nsid, the
/// label may not), status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The subsystem's NQN ("" before a controller).
    pub subsystem: std::sync::Arc<str>,
    /// The nsid (0: none, or not the subsystem's).
    pub nsid: u32,
    /// The status's name.
    pub status: &'static str,
}

fn bump(v: &mut Vec<(&'static str, u64)>, key: &'static str) {
    match v.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => v.push((key, 1)),
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new(0)
    }
}

impl Tally {
    /// An empty tally of worker `worker`.
    pub fn new(worker: usize) -> Tally {
        meter().worker_started(worker);
        Tally {
            worker,
            now: Counts::default(),
            before: Counts::default(),
            failed: Vec::new(),
            rejected: Vec::new(),
            failed_before: 0,
            rejected_before: 0,
        }
    }

    /// What it counted since it began (published or not).
    pub fn totals(&self) -> Counts {
        let mut t = self.before;
        t.add(&self.now);
        t
    }

    /// Failed commands and refusals since it began.
    pub fn failed_and_rejected(&self) -> (u64, u64) {
        (
            self.failed_before + self.failed.iter().map(|(_, n)| n).sum::<u64>(),
            self.rejected_before + self.rejected.iter().map(|(_, n)| n).sum::<u64>(),
        )
    }

    /// A command of subsystem `subsystem` (`None`: before its controller)
    /// and namespace `nsid` (0: none, or not one of the subsystem's) failed
    /// with `status` (`failed_commands_total{subsystem,nsid,status}`).
    pub fn failed_command(&mut self, subsystem: Option<&str>, nsid: u32, status: nvme::Status) {
        let status = status.name().unwrap_or("OTHER");
        let sub = subsystem.unwrap_or("");
        match self
            .failed
            .iter_mut()
            .find(|(f, _)| f.status == status && f.nsid == nsid && &*f.subsystem == sub)
        {
            Some((_, n)) => *n += 1,
            None => self.failed.push((
                Failed {
                    subsystem: sub.into(),
                    nsid,
                    status,
                },
                1,
            )),
        }
    }

    /// A queue or connection was refused or ended before it served
    /// (`connect_rejections_total{reason}`).
    pub fn reject(&mut self, reason: &'static str) {
        bump(&mut self.rejected, reason);
    }

    /// Queue `qid` of subsystem `subsys` connected over `fabric`: it is
    /// counted (`connects_total`) and served (`queues`, and `controllers`
    /// for an admin queue) from now on.
    pub fn queue_connected(&mut self, subsys: &str, qid: u16, fabric: &'static str) {
        meter().queue_connected(subsys, qid, fabric);
    }

    /// Connected queue `qid` of `subsys` left; an admin queue takes its
    /// controller along, disconnected for `reason`
    /// (`disconnects_total{reason}`).
    pub fn queue_left(&mut self, subsys: &str, qid: u16, fabric: &'static str, reason: &str) {
        meter().queue_left(subsys, qid, fabric, reason);
    }

    /// A controller of `subsys` missed its keep-alive
    /// (`keep_alive_expirations_total{subsystem}`).
    pub fn keep_alive_expired(&mut self, subsys: &str) {
        meter().keep_alive_expired(subsys);
    }

    /// An I/O of `host` waited `waited` for a QoS cap of namespace `nsid`
    /// of `subsys` (`qos_throttled_total`).
    pub fn qos_throttled(&mut self, subsys: &str, nsid: u32, host: &str, waited: Duration) {
        self.now.throttled += 1;
        meter().qos_throttled(subsys, nsid, host, waited);
    }

    /// The worker woke from a sleep.
    #[inline]
    pub fn woke(&mut self) {
        self.now.wakeups += 1;
    }

    /// The worker spent `d` on passes that found work.
    #[inline]
    pub fn busy(&mut self, d: Duration) {
        self.now.busy_ns += d.as_nanos() as u64;
    }

    /// An RDMA operation was posted.
    #[inline]
    pub fn rdma(&mut self, op: RdmaOp) {
        self.now.rdma[op as usize] += 1;
    }

    /// A write command's data arrived in its capsule.
    #[inline]
    pub fn in_capsule_write(&mut self) {
        self.now.in_capsule_writes += 1;
    }

    /// A data buffer of size class `class` (0 small, 1 large) was taken
    /// (`+1`) or given back (`-1`).
    #[inline]
    pub fn buffer(&mut self, class: usize, n: i64) {
        self.now.pool_in_use[class & 1] += n;
    }

    /// A request waited for a buffer of size class `class`.
    #[inline]
    pub fn buffer_wait(&mut self, class: usize) {
        self.now.pool_waits[class & 1] += 1;
    }

    /// An NVMe/TCP capsule waited for a capsule buffer (none free, or its
    /// connection holds its share).
    #[inline]
    pub fn capsule_wait(&mut self) {
        self.now.capsule_waits += 1;
    }

    /// Hands what was counted since the last call to the meter.
    pub fn publish(&mut self) {
        if self.now == Counts::default() && self.failed.is_empty() && self.rejected.is_empty() {
            return;
        }
        let c = std::mem::take(&mut self.now);
        meter().tally(self.worker, &c, &self.failed, &self.rejected);
        self.before.add(&c);
        self.failed_before += self.failed.drain(..).map(|(_, n)| n).sum::<u64>();
        self.rejected_before += self.rejected.drain(..).map(|(_, n)| n).sum::<u64>();
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_hold_what_was_counted_published_or_not() {
        let mut t = Tally::new(3);
        t.rdma(RdmaOp::Send);
        t.rdma(RdmaOp::Send);
        t.buffer_wait(1);
        t.failed_command(Some("nqn.t"), 3, nvme::Status::LBA_RANGE);
        t.reject("a_reason");
        t.publish();
        t.rdma(RdmaOp::Send);
        t.reject("a_reason");
        let c = t.totals();
        assert_eq!(c.rdma[RdmaOp::Send as usize], 3);
        assert_eq!(c.pool_waits, [0, 1]);
        assert_eq!(t.failed_and_rejected(), (1, 2));
    }
}
