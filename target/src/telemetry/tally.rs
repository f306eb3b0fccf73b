//! What a worker counts on every I/O, in plain integers only it writes,
//! published into the process's metrics on its timer pass (and before it
//! sleeps): no shared cache line is written per I/O for them.

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
        }
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
}
