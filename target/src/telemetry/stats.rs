//! Target-wide transport counters, resolved once from the process metrics
//! (see [`crate::telemetry::metrics`]) and also printed as a `STATS` log line.

use prometheus::IntCounter;

use crate::telemetry::metrics::metrics;

/// Counters updated by the workers.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Responses sent with SEND_WITH_INVALIDATE.
    pub send_with_inv: IntCounter,
    /// Responses sent with a plain SEND.
    pub sends: IntCounter,
    /// Write commands whose data arrived in the capsule.
    pub in_capsule_writes: IntCounter,
    /// RDMA READs posted (host writes, connect data).
    pub rdma_reads: IntCounter,
    /// RDMA WRITEs posted (host reads, admin data).
    pub rdma_writes: IntCounter,
    /// Work completions with an error status other than flush (all statuses).
    pub wc_errors: IntCounter,
    /// Commands completed with a non-success status (all statuses).
    pub failed_commands: IntCounter,
    /// Queues accepted at the RDMA-CM level.
    pub queues_accepted: IntCounter,
    /// Connection requests rejected at the RDMA-CM level.
    pub cm_rejects: IntCounter,
    /// Backend I/O errors.
    pub backend_errors: IntCounter,
    /// Batches of sends handed to a poster thread.
    pub offloaded_batches: IntCounter,
}

impl Default for Stats {
    fn default() -> Stats {
        let m = metrics();
        let op = |o: &str| m.rdma_ops.with_label_values(&[o]);
        // Totals for the log line only; the labelled series are in `metrics()`.
        let plain = || IntCounter::new("unregistered", "log line total").expect("valid name");
        Stats {
            send_with_inv: op("send_with_invalidate"),
            sends: op("send"),
            in_capsule_writes: m.in_capsule_writes.clone(),
            rdma_reads: op("read"),
            rdma_writes: op("write"),
            wc_errors: plain(),
            failed_commands: plain(),
            queues_accepted: plain(),
            cm_rejects: plain(),
            backend_errors: plain(),
            offloaded_batches: m.engine.offloaded_send_batches.clone(),
        }
    }
}

impl Stats {
    /// Adds one to a counter.
    #[inline]
    pub fn inc(c: &IntCounter) {
        c.inc();
    }

    /// The `STATS k=v ...` line.
    pub fn line(&self) -> String {
        format!(
            "STATS send_with_inv={} in_capsule_writes={} rdma_reads={} rdma_writes={} wc_errors={} failed_commands={} queues_accepted={} cm_rejects={} backend_errors={} offloaded_batches={}",
            self.send_with_inv.get(),
            self.in_capsule_writes.get(),
            self.rdma_reads.get(),
            self.rdma_writes.get(),
            self.wc_errors.get(),
            self.failed_commands.get(),
            self.queues_accepted.get(),
            self.cm_rejects.get(),
            self.backend_errors.get(),
            self.offloaded_batches.get(),
        )
    }
}
