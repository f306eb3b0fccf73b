//! Counters with one shard per worker: a worker adds to its own shard, on a
//! cache line no other worker writes, and readers (a scrape, `status`, the
//! shutdown drain) sum the shards. A count that every worker updated on one
//! shared line would move that line between CPUs on every I/O.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A value alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// How many shards a sharded counter has: the CPUs the process may use
/// (workers beyond that share shards, still correctly: updates are atomic).
pub fn count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 64)
    })
}

thread_local! {
    /// The shard this thread adds to (see [`mine`]).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Makes the calling thread worker `w`'s: its [`Sharded::add_mine`]
/// updates go to shard `w`.
pub fn set_mine(w: usize) {
    MINE.with(|m| m.set(w));
}

/// The shard the calling thread adds to: its worker's, or, for a thread
/// that is no worker's (a callback thread of a library, the gate thread),
/// one given out in turn at its first use.
pub fn mine() -> usize {
    MINE.with(|m| {
        if m.get() == usize::MAX {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            m.set(NEXT.fetch_add(1, Ordering::Relaxed) as usize);
        }
        m.get()
    })
}

/// A signed count kept in per-worker shards.
#[derive(Debug)]
pub struct Sharded {
    shards: Box<[Padded<AtomicI64>]>,
}

impl Default for Sharded {
    fn default() -> Self {
        Sharded::new()
    }
}

impl Sharded {
    /// A count of zero with [`count`] shards.
    pub fn new() -> Sharded {
        Sharded {
            shards: (0..count()).map(|_| Padded(AtomicI64::new(0))).collect(),
        }
    }

    /// Adds `n` in the shard of worker `w`, with `order`.
    #[inline]
    pub fn add(&self, w: usize, n: i64, order: Ordering) {
        self.shards[w % self.shards.len()].0.fetch_add(n, order);
    }

    /// Adds `n` in the calling thread's shard ([`mine`]), with `order`.
    #[inline]
    pub fn add_mine(&self, n: i64, order: Ordering) {
        self.add(mine(), n, order);
    }

    /// The sum of the shards, each read with `order`.
    pub fn sum(&self, order: Ordering) -> i64 {
        self.shards.iter().map(|s| s.0.load(order)).sum()
    }
}

/// `N` counts kept in per-worker shards (one line per worker for all `N`).
#[derive(Debug)]
pub struct Counts<const N: usize> {
    shards: Box<[Padded<[AtomicU64; N]>]>,
}

impl<const N: usize> Default for Counts<N> {
    fn default() -> Self {
        Counts::new()
    }
}

impl<const N: usize> Counts<N> {
    /// Counts of zero with [`count`] shards.
    pub fn new() -> Counts<N> {
        Counts {
            shards: (0..count())
                .map(|_| Padded(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Adds `n` to count `i` in the shard of worker `w`.
    #[inline]
    pub fn add(&self, w: usize, i: usize, n: u64) {
        self.shards[w % self.shards.len()].0[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Count `i`, summed over the shards.
    pub fn sum(&self, i: usize) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0[i].load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_and_workers_beyond_the_count_share() {
        let s = Sharded::new();
        for w in 0..3 * count() {
            s.add(w, 2, Ordering::Relaxed);
        }
        s.add(5, -1, Ordering::SeqCst);
        assert_eq!(s.sum(Ordering::SeqCst), 6 * count() as i64 - 1);
        assert_eq!(std::mem::align_of::<Padded<AtomicI64>>(), 128);
        let c = Counts::<2>::new();
        c.add(0, 1, 5);
        c.add(count() + 1, 1, 2);
        c.add(1, 0, 1);
        assert_eq!((c.sum(0), c.sum(1)), (1, 7));
    }
}
