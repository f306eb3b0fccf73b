//! What a worker counts, through one handle the queue core and the
//! transports are given ([`crate::queue::Env::tally`]): on every I/O in plain
//! integers only it writes, published into the process's metrics on its
//! timer pass (and before it sleeps), so that no shared cache line is written
//! per I/O for them; failures and refusals the same way; queues connecting
//! and leaving at once (their gauges are what status and dashboards show).

use prometheus::{IntCounter, IntGauge};

use super::metrics::metrics;

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

const RDMA_OPS: [&str; 4] = ["read", "write", "send", "send_with_invalidate"];
const CLASSES: [&str; 2] = ["small", "large"];

/// Counts since the last publication.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    rdma: [u64; 4],
    in_capsule_writes: u64,
    pool_in_use: [i64; 2],
    pool_waits: [u64; 2],
    capsule_waits: u64,
}

/// The metrics a tally publishes into, resolved once.
#[derive(Debug)]
struct Handles {
    rdma: [IntCounter; 4],
    in_capsule_writes: IntCounter,
    pool_in_use: [IntGauge; 2],
    pool_waits: [IntCounter; 2],
    capsule_waits: IntCounter,
}

/// One worker's counts.
#[derive(Debug)]
pub struct Tally {
    now: Counts,
    to: Handles,
    /// Failed commands since the last publication, by status name.
    failed: Vec<(Failed, u64)>,
    /// Refusals since the last publication, by reason.
    rejected: Vec<(&'static str, u64)>,
}

/// Adds one to `key`'s count in `v` (a handful of keys: a short list).
/// A failed command's labels: subsystem ("" before a controller), nsid
/// (0: none, or not a namespace of the subsystem: a host picks any nsid, the
/// label may not), status.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failed {
    subsystem: std::sync::Arc<str>,
    nsid: u32,
    status: &'static str,
}

fn bump(v: &mut Vec<(&'static str, u64)>, key: &'static str) {
    match v.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => v.push((key, 1)),
    }
}

/// The `type` label of queue `qid`.
fn queue_type(qid: u16) -> &'static str {
    if qid == 0 {
        "admin"
    } else {
        "io"
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        let m = metrics();
        Tally {
            now: Counts::default(),
            to: Handles {
                rdma: RDMA_OPS.map(|o| m.rdma_ops.with_label_values(&[o])),
                in_capsule_writes: m.in_capsule_writes.clone(),
                pool_in_use: CLASSES.map(|c| m.engine.pool_in_use.with_label_values(&[c])),
                pool_waits: CLASSES.map(|c| m.engine.pool_waits.with_label_values(&[c])),
                capsule_waits: m.engine.pool_waits.with_label_values(&["tcp_capsule"]),
            },
            failed: Vec::new(),
            rejected: Vec::new(),
        }
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
        let m = metrics();
        let labels = [subsys, queue_type(qid), fabric];
        m.connects.with_label_values(&labels).inc();
        m.queues.with_label_values(&labels).inc();
        if qid == 0 {
            m.controllers.with_label_values(&[subsys, fabric]).inc();
        }
    }

    /// Connected queue `qid` of `subsys` left; an admin queue takes its
    /// controller along, disconnected for `reason`
    /// (`disconnects_total{reason}`).
    pub fn queue_left(&mut self, subsys: &str, qid: u16, fabric: &'static str, reason: &str) {
        let m = metrics();
        m.queues
            .with_label_values(&[subsys, queue_type(qid), fabric])
            .dec();
        if qid == 0 {
            m.controllers.with_label_values(&[subsys, fabric]).dec();
            m.disconnects.with_label_values(&[reason, fabric]).inc();
        }
    }

    /// A controller of `subsys` missed its keep-alive
    /// (`keep_alive_expirations_total{subsystem}`).
    pub fn keep_alive_expired(&mut self, subsys: &str) {
        metrics()
            .keep_alive_expirations
            .with_label_values(&[subsys])
            .inc();
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

    /// Adds what was counted since the last call to the process's metrics.
    pub fn publish(&mut self) {
        let m = metrics();
        for (f, n) in self.failed.drain(..) {
            let nsid = match f.nsid {
                0 => String::new(),
                n => n.to_string(),
            };
            m.failed_commands
                .with_label_values(&[&*f.subsystem, &nsid, f.status])
                .inc_by(n);
        }
        for (reason, n) in self.rejected.drain(..) {
            m.rejections.with_label_values(&[reason]).inc_by(n);
        }
        let c = std::mem::take(&mut self.now);
        if c == Counts::default() {
            return;
        }
        for (h, n) in self.to.rdma.iter().zip(c.rdma) {
            if n > 0 {
                h.inc_by(n);
            }
        }
        if c.in_capsule_writes > 0 {
            self.to.in_capsule_writes.inc_by(c.in_capsule_writes);
        }
        for (h, n) in self.to.pool_in_use.iter().zip(c.pool_in_use) {
            if n != 0 {
                h.add(n);
            }
        }
        for (h, n) in self.to.pool_waits.iter().zip(c.pool_waits) {
            if n > 0 {
                h.inc_by(n);
            }
        }
        if c.capsule_waits > 0 {
            self.to.capsule_waits.inc_by(c.capsule_waits);
        }
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
    fn counts_reach_the_metrics_when_published() {
        let m = metrics();
        let sends = m.rdma_ops.with_label_values(&["send"]);
        let waits = m.engine.pool_waits.with_label_values(&["large"]);
        let (s0, w0) = (sends.get(), waits.get());
        let mut t = Tally::new();
        t.rdma(RdmaOp::Send);
        t.rdma(RdmaOp::Send);
        t.buffer_wait(1);
        assert_eq!(sends.get(), s0, "not before publishing");
        t.publish();
        assert!(sends.get() >= s0 + 2);
        assert!(waits.get() > w0);
    }

    #[test]
    fn failures_and_refusals_are_counted_by_name_when_published() {
        let m = metrics();
        let lba = m
            .failed_commands
            .with_label_values(&["nqn.tally-test", "3", "LBA_RANGE"]);
        let none = m.failed_commands.with_label_values(&["", "", "LBA_RANGE"]);
        let n0 = none.get();
        let rate = m.rejections.with_label_values(&["tally_test_reason"]);
        let (l0, r0) = (lba.get(), rate.get());
        let mut t = Tally::new();
        t.failed_command(Some("nqn.tally-test"), 3, nvme::Status::LBA_RANGE);
        t.failed_command(Some("nqn.tally-test"), 3, nvme::Status::LBA_RANGE);
        t.failed_command(None, 0, nvme::Status::LBA_RANGE);
        t.reject("tally_test_reason");
        assert_eq!((lba.get(), rate.get()), (l0, r0), "not before publishing");
        t.publish();
        assert_eq!(lba.get(), l0 + 2);
        assert!(none.get() > n0);
        assert_eq!(rate.get(), r0 + 1);
    }
}
