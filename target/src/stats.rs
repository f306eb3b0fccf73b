//! Target-wide transport counters, printed as a `STATS` log line.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters updated by the queue threads.
#[derive(Default, Debug)]
pub struct Stats {
    /// Responses sent with SEND_WITH_INVALIDATE.
    pub send_with_inv: AtomicU64,
    /// Write commands whose data arrived in the capsule.
    pub in_capsule_writes: AtomicU64,
    /// RDMA READs posted (host writes, connect data).
    pub rdma_reads: AtomicU64,
    /// RDMA WRITEs posted (host reads, admin data).
    pub rdma_writes: AtomicU64,
    /// Work completions with an error status other than flush.
    pub wc_errors: AtomicU64,
    /// Commands completed with a non-success status.
    pub failed_commands: AtomicU64,
    /// Queues accepted.
    pub queues_accepted: AtomicU64,
    /// Connection requests rejected at the RDMA-CM level.
    pub cm_rejects: AtomicU64,
    /// Backend I/O errors.
    pub backend_errors: AtomicU64,
}

impl Stats {
    /// Adds one to a counter.
    #[inline]
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    /// The `STATS k=v ...` line.
    pub fn line(&self) -> String {
        format!(
            "STATS send_with_inv={} in_capsule_writes={} rdma_reads={} rdma_writes={} wc_errors={} failed_commands={} queues_accepted={} cm_rejects={} backend_errors={}",
            self.send_with_inv.load(Relaxed),
            self.in_capsule_writes.load(Relaxed),
            self.rdma_reads.load(Relaxed),
            self.rdma_writes.load(Relaxed),
            self.wc_errors.load(Relaxed),
            self.failed_commands.load(Relaxed),
            self.queues_accepted.load(Relaxed),
            self.cm_rejects.load(Relaxed),
            self.backend_errors.load(Relaxed),
        )
    }
}
