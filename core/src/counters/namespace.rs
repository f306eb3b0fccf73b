//! Per-namespace I/O counts, in per-worker shards ([`crate::base::shard`])
//! summed when read: an I/O adds to its worker's own cache lines only.
//! The daemon's metrics draw them at each scrape ([`series`]); the rare
//! events (backend errors, reservation conflicts) go to the installed
//! [`crate::counters::Meter`].

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::base::shard::{self, Padded};
use crate::counters::meter;

/// Latency buckets: 8 µs doubling to ~17 s (22 upper bounds), covering
/// RDMA-to-memory and slow disks alike.
pub const BUCKETS: usize = 22;
const FIRST_BOUND_NS: u64 = 8_000;

/// The upper bound of bucket `i`, in seconds.
pub fn bound(i: usize) -> f64 {
    (FIRST_BOUND_NS << i) as f64 / 1e9
}

/// The upper bound at or above `seconds` that a latency histogram can show
/// (8 µs doubling), or `None` past the last (~16.8 s).
pub fn bucket_at_or_above(seconds: f64) -> Option<usize> {
    (0..BUCKETS).find(|&i| bound(i) >= seconds * (1.0 - 1e-9))
}

/// The bucket of a latency: the first whose bound holds it (BUCKETS: +Inf).
pub fn bucket_of(ns: u64) -> usize {
    if ns <= FIRST_BOUND_NS {
        return 0;
    }
    // ceil(log2(ns / FIRST)) without floating point.
    let q = ns.div_ceil(FIRST_BOUND_NS);
    let i = (u64::BITS - (q - 1).leading_zeros()) as usize;
    i.min(BUCKETS)
}

/// An I/O operation, as labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Read.
    Read = 0,
    /// Write.
    Write = 1,
    /// Flush.
    Flush = 2,
    /// Write Zeroes.
    WriteZeroes = 3,
    /// Dataset Management.
    Dsm = 4,
}

/// Each operation's label.
pub const OPS: [&str; 5] = ["read", "write", "flush", "write_zeroes", "dsm"];
/// Operations with bytes (read, write) and with a latency (and flush).
pub const WITH_BYTES: usize = 2;
/// Operations with a latency (read, write, flush).
pub const TIMED: usize = 3;

/// One worker's share of a namespace's counts.
#[derive(Debug, Default)]
pub struct Shard {
    /// Completed commands, by operation.
    pub ops: [AtomicU64; 5],
    /// Bytes, by operation with bytes.
    pub bytes: [AtomicU64; WITH_BYTES],
    /// Commands executing.
    pub in_flight: AtomicI64,
    /// Per timed operation: the count of each bucket (not cumulative) and
    /// +Inf, and the sum of latencies in nanoseconds.
    pub buckets: [[AtomicU64; BUCKETS + 1]; TIMED],
    /// The latencies' sum (ns), by timed operation.
    pub sum_ns: [AtomicU64; TIMED],
}

/// What a scrape sees of a namespace.
#[derive(Debug)]
pub struct Series {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The nsid, as labelled.
    pub nsid: String,
    /// One per worker shard.
    pub shards: Box<[Padded<Shard>]>,
    removed: AtomicBool,
}

impl Series {
    /// `f` summed over the shards.
    pub fn sum(&self, f: impl Fn(&Shard) -> u64) -> u64 {
        self.shards.iter().map(|x| f(&x.0)).sum()
    }

    /// Commands executing now.
    pub fn executing(&self) -> i64 {
        self.shards
            .iter()
            .map(|x| x.0.in_flight.load(Ordering::Relaxed))
            .sum()
    }
}

/// A namespace's metrics.
#[derive(Debug)]
pub struct NsMetrics {
    series: Arc<Series>,
    nsid: u32,
}

impl NsMetrics {
    /// The metrics of namespace `nsid` of `subsystem`, scraped from now on.
    pub fn new(subsystem: &str, nsid: u32) -> NsMetrics {
        let ns = nsid.to_string();
        let series = Arc::new(Series {
            subsystem: subsystem.to_string(),
            nsid: ns.clone(),
            shards: (0..shard::count())
                .map(|_| Padded(Shard::default()))
                .collect(),
            removed: false.into(),
        });
        live()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&series));
        meter().namespace_added(subsystem, nsid);
        NsMetrics { series, nsid }
    }

    /// The backend failed an operation (`backend_errors_total`).
    pub fn backend_error(&self) {
        // Not for a namespace removed meanwhile: its series went.
        if self.series.removed.load(Ordering::Relaxed) {
            return;
        }
        meter().backend_error(&self.series.subsystem, self.nsid);
    }

    /// A command conflicted with a reservation
    /// (`reservation_conflicts_total`).
    pub fn reservation_conflict(&self) {
        if self.series.removed.load(Ordering::Relaxed) {
            return;
        }
        meter().reservation_conflict(&self.series.subsystem, self.nsid);
    }

    /// Worker `w`'s shard, and how many there are (see `shard::bump`).
    fn shard(&self, w: usize) -> (&Shard, usize) {
        let s = &self.series.shards;
        (&s[w % s.len()].0, s.len())
    }

    /// Worker `w` completed a command of `bytes` in `elapsed`.
    #[inline]
    pub fn record(&self, w: usize, op: IoOp, bytes: u64, elapsed: Duration) {
        let (s, len) = self.shard(w);
        let i = op as usize;
        shard::bump(&s.ops[i], 1, len);
        if i < WITH_BYTES {
            shard::bump(&s.bytes[i], bytes, len);
        }
        if i < TIMED {
            let ns = elapsed.as_nanos().min(u64::MAX as u128) as u64;
            shard::bump(&s.buckets[i][bucket_of(ns)], 1, len);
            shard::bump(&s.sum_ns[i], ns, len);
        }
    }

    /// Worker `w` started (`+1`) or ended (`-1`) executing a command.
    #[inline]
    pub fn in_flight(&self, w: usize, n: i64) {
        let (s, len) = self.shard(w);
        shard::bump_signed(&s.in_flight, n, len);
    }

    /// Commands executing now.
    pub fn executing(&self) -> i64 {
        self.series.executing()
    }

    /// Commands of `op` completed.
    pub fn completed(&self, op: IoOp) -> u64 {
        let s = &self.series.shards;
        s.iter()
            .map(|x| x.0.ops[op as usize].load(Ordering::Relaxed))
            .sum()
    }

    /// Drops this namespace's series (it was removed from the configuration).
    pub fn unregister(&self) {
        self.series.removed.store(true, Ordering::Relaxed);
        meter().namespace_removed(&self.series.subsystem, self.nsid);
    }
}

/// The namespaces whose series a scrape shows.
fn live() -> &'static Mutex<Vec<Weak<Series>>> {
    static L: OnceLock<Mutex<Vec<Weak<Series>>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// Every namespace's series not removed, for a scrape.
pub fn series() -> Vec<Arc<Series>> {
    let mut l = live().lock().unwrap_or_else(|p| p.into_inner());
    l.retain(|w| w.strong_count() > 0);
    l.iter()
        .filter_map(Weak::upgrade)
        .filter(|s| !s.removed.load(Ordering::Relaxed))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_the_bucket_whose_bound_holds_them() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(8_000), 0);
        assert_eq!(bucket_of(8_001), 1);
        assert_eq!(bucket_of(16_000), 1);
        assert_eq!(bucket_of(16_001), 2);
        assert_eq!(bucket_of(FIRST_BOUND_NS << 21), 21);
        assert_eq!(bucket_of((FIRST_BOUND_NS << 21) + 1), BUCKETS, "+Inf");
        assert_eq!(bucket_of(u64::MAX), BUCKETS);
        for i in 0..BUCKETS {
            let b = (bound(i) * 1e9).round() as u64;
            assert_eq!(bucket_of(b), i);
        }
    }
}
