//! The core's events ([`crate::counters::Meter`]) as the process's
//! Prometheus metrics.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{Counter, IntCounter, IntGauge};

use crate::base::shard::MAX_WORKERS;
use crate::counters::tally::{CLASSES, RDMA_OPS};
use crate::counters::{Counts, Failed, Meter};

use super::metrics::metrics;

/// Counts the core's events in [`metrics`].
pub struct Prometheus {
    /// Each worker's series, resolved once (a publication adds to them
    /// without a label lookup).
    workers: [OnceLock<WorkerSeries>; MAX_WORKERS],
}

/// The series a worker's tally adds to.
struct WorkerSeries {
    rdma: [IntCounter; 4],
    in_capsule_writes: IntCounter,
    pool_in_use: [IntGauge; 2],
    pool_waits: [IntCounter; 2],
    capsule_waits: IntCounter,
    busy: Counter,
    wakeups: IntCounter,
}

impl Prometheus {
    /// Worker `worker`'s series, made (at 0) the first time.
    fn worker(&self, worker: usize) -> &WorkerSeries {
        self.workers[worker % MAX_WORKERS].get_or_init(|| {
            let m = metrics();
            let w = worker.to_string();
            WorkerSeries {
                rdma: RDMA_OPS.map(|o| m.rdma_ops.with_label_values(&[o])),
                in_capsule_writes: m.in_capsule_writes.clone(),
                pool_in_use: CLASSES.map(|c| m.engine.pool_in_use.with_label_values(&[c])),
                pool_waits: CLASSES.map(|c| m.engine.pool_waits.with_label_values(&[c])),
                capsule_waits: m.engine.pool_waits.with_label_values(&["tcp_capsule"]),
                busy: m.engine.worker_busy.with_label_values(&[&w]),
                wakeups: m.engine.worker_wakeups.with_label_values(&[&w]),
            }
        })
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

impl Meter for Prometheus {
    fn worker_started(&self, worker: usize) {
        self.worker(worker);
    }

    fn tally(
        &self,
        worker: usize,
        c: &Counts,
        failed: &[(Failed, u64)],
        rejected: &[(&'static str, u64)],
    ) {
        let m = metrics();
        for (f, n) in failed {
            let nsid = match f.nsid {
                0 => String::new(),
                n => n.to_string(),
            };
            m.failed_commands
                .with_label_values(&[&*f.subsystem, &nsid, f.status])
                .inc_by(*n);
        }
        for (reason, n) in rejected {
            m.rejections.with_label_values(&[reason]).inc_by(*n);
        }
        let h = self.worker(worker);
        for (s, n) in h.rdma.iter().zip(c.rdma) {
            if n > 0 {
                s.inc_by(n);
            }
        }
        if c.in_capsule_writes > 0 {
            h.in_capsule_writes.inc_by(c.in_capsule_writes);
        }
        for (s, n) in h.pool_in_use.iter().zip(c.pool_in_use) {
            if n != 0 {
                s.add(n);
            }
        }
        for (s, n) in h.pool_waits.iter().zip(c.pool_waits) {
            if n > 0 {
                s.inc_by(n);
            }
        }
        if c.capsule_waits > 0 {
            h.capsule_waits.inc_by(c.capsule_waits);
        }
        if c.wakeups > 0 {
            h.wakeups.inc_by(c.wakeups);
        }
        if c.busy_ns > 0 {
            h.busy.inc_by(c.busy_ns as f64 / 1e9);
        }
    }

    fn queue_connected(&self, subsys: &str, qid: u16, fabric: &'static str) {
        let m = metrics();
        let labels = [subsys, queue_type(qid), fabric];
        m.connects.with_label_values(&labels).inc();
        m.queues.with_label_values(&labels).inc();
        if qid == 0 {
            m.controllers.with_label_values(&[subsys, fabric]).inc();
        }
    }

    fn queue_left(&self, subsys: &str, qid: u16, fabric: &'static str, reason: &str) {
        let m = metrics();
        m.queues
            .with_label_values(&[subsys, queue_type(qid), fabric])
            .dec();
        if qid == 0 {
            m.controllers.with_label_values(&[subsys, fabric]).dec();
            m.disconnects.with_label_values(&[reason, fabric]).inc();
        }
    }

    fn keep_alive_expired(&self, subsys: &str) {
        metrics()
            .keep_alive_expirations
            .with_label_values(&[subsys])
            .inc();
    }

    fn worker_queues(&self, worker: usize, delta: i64) {
        metrics()
            .engine
            .worker_queues
            .with_label_values(&[&worker.to_string()])
            .add(delta);
    }

    fn qos_throttled(&self, subsys: &str, nsid: u32, host: &str, waited: Duration) {
        let m = metrics();
        let nsid = nsid.to_string();
        let labels = [subsys, nsid.as_str(), host];
        m.qos_throttled.with_label_values(&labels).inc();
        m.qos_throttled_seconds
            .with_label_values(&labels)
            .inc_by(waited.as_secs_f64());
    }

    fn async_event(&self, subsys: &str, kind: &'static str) {
        metrics()
            .async_events
            .with_label_values(&[subsys, kind])
            .inc();
    }

    fn unauthenticated_controllers(&self, n: usize) {
        metrics().unauthenticated_controllers.set(n as i64);
    }

    fn rejected(&self, reason: &'static str) {
        super::metrics::reject(reason);
    }

    fn authentication(&self, subsys: &str, outcome: &'static str) {
        metrics()
            .authentications
            .with_label_values(&[subsys, outcome])
            .inc();
    }

    fn namespace_added(&self, subsys: &str, nsid: u32) {
        // Both series from 0, so that the first error is an increase.
        let m = metrics();
        let n = nsid.to_string();
        m.backend_errors.with_label_values(&[subsys, &n]);
        m.reservation_conflicts.with_label_values(&[subsys, &n]);
    }

    fn backend_error(&self, subsys: &str, nsid: u32) {
        metrics()
            .backend_errors
            .with_label_values(&[subsys, &nsid.to_string()])
            .inc();
    }

    fn reservation_conflict(&self, subsys: &str, nsid: u32) {
        metrics()
            .reservation_conflicts
            .with_label_values(&[subsys, &nsid.to_string()])
            .inc();
    }

    fn namespace_removed(&self, subsys: &str, nsid: u32) {
        let m = metrics();
        let n = nsid.to_string();
        let _ = m.backend_errors.remove_label_values(&[subsys, &n]);
        let _ = m.reservation_conflicts.remove_label_values(&[subsys, &n]);
    }
}

/// Sends the core's events to the process's metrics (idempotent).
pub fn install() {
    static P: OnceLock<Prometheus> = OnceLock::new();
    crate::counters::install(P.get_or_init(|| Prometheus {
        workers: [const { OnceLock::new() }; MAX_WORKERS],
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{RdmaOp, Tally};

    #[test]
    fn counts_reach_the_metrics_when_published() {
        install();
        let m = metrics();
        let sends = m.rdma_ops.with_label_values(&["send"]);
        let waits = m.engine.pool_waits.with_label_values(&["large"]);
        let (s0, w0) = (sends.get(), waits.get());
        let mut t = Tally::new(0);
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
        install();
        let m = metrics();
        let lba = m
            .failed_commands
            .with_label_values(&["nqn.tally-test", "3", "LBA_RANGE"]);
        let none = m.failed_commands.with_label_values(&["", "", "LBA_RANGE"]);
        let n0 = none.get();
        let rate = m.rejections.with_label_values(&["tally_test_reason"]);
        let (l0, r0) = (lba.get(), rate.get());
        let mut t = Tally::new(0);
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

    /// A namespace's and a worker's series exist at 0 from their start, so
    /// that an alert's increase() sees their first event.
    #[test]
    fn series_start_at_zero() {
        install();
        let m = metrics();
        let ns = crate::counters::namespace::NsMetrics::new("nqn.2026-11.io.test:zero", 5);
        let _t = Tally::new(7);
        let text = String::from_utf8(m.render()).unwrap();
        let line = |l: &str| text.lines().any(|x| x == l);
        let sub = "subsystem=\"nqn.2026-11.io.test:zero\"";
        assert!(
            line(&format!(
                "nvmf_target_backend_errors_total{{nsid=\"5\",{sub}}} 0"
            )),
            "{text}"
        );
        assert!(line(&format!(
            "nvmf_target_reservation_conflicts_total{{nsid=\"5\",{sub}}} 0"
        )));
        assert!(
            line("nvmf_target_worker_wakeups_total{worker=\"7\"} 0"),
            "{text}"
        );
        ns.unregister();
        ns.backend_error();
        let text = String::from_utf8(m.render()).unwrap();
        assert!(
            !text.contains("nqn.2026-11.io.test:zero"),
            "a removed namespace's error"
        );
    }
}
