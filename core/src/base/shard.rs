//! Counters with one shard per worker: a worker adds to its own shard, on a
//! cache line no other worker writes, and readers (a scrape, `status`, the
//! shutdown drain) sum the shards. A count that every worker updated on one
//! shared line would move that line between CPUs on every I/O.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A value alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// The most workers a target runs (`[target] workers` is bounded by it).
pub const MAX_WORKERS: usize = 256;

/// The workers that add to shards: at most this many, indices below it.
static WORKERS: AtomicUsize = AtomicUsize::new(1);

/// Tells the counters how many workers there are (before they start, and
/// best before the namespaces open: counters made earlier have as many
/// shards as there were CPUs).
pub fn set_workers(n: usize) {
    WORKERS.fetch_max(n, Ordering::Relaxed);
}

/// How many shards a sharded counter has: one per worker and at least one
/// per CPU the process may use (workers beyond a counter's shards share
/// them, still correctly: see [`bump`]).
pub fn count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.clamp(1, 64).max(WORKERS.load(Ordering::Relaxed))
    })
}

/// Whether a worker is the only writer of its shard among `len`: every
/// worker has a shard of its own, and only workers add to them (counts a
/// worker keeps for its commands). Then a load and a store add, where a
/// read-modify-write would cost a locked instruction per count per I/O.
#[inline]
fn owned(len: usize) -> bool {
    WORKERS.load(Ordering::Relaxed) <= len
}

/// Adds `v` to `a`, a count of worker `w`'s shard among `len` shards that
/// only workers write.
#[inline]
pub fn bump(a: &AtomicU64, v: u64, len: usize) {
    if owned(len) {
        a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    } else {
        a.fetch_add(v, Ordering::Relaxed);
    }
}

/// As [`bump`], for a signed count.
#[inline]
pub fn bump_signed(a: &AtomicI64, v: i64, len: usize) {
    if owned(len) {
        a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    } else {
        a.fetch_add(v, Ordering::Relaxed);
    }
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

    /// Adds `n` in the shard of worker `w`, a count only workers add to
    /// and read in no particular order with anything else (see [`bump`]).
    #[inline]
    pub fn bump(&self, w: usize, n: i64) {
        let len = self.shards.len();
        bump_signed(&self.shards[w % len].0, n, len);
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

    /// Adds `n` to count `i` in the shard of worker `w` (workers only:
    /// see [`bump`]).
    #[inline]
    pub fn add(&self, w: usize, i: usize, n: u64) {
        let len = self.shards.len();
        bump(&self.shards[w % len].0[i], n, len);
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
    use std::sync::Arc;

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

    #[test]
    fn more_workers_than_shards_share_them_without_losing_a_count() {
        let len = count();
        let c = Arc::new(Counts::<1>::new());
        // Counters made before the engine said how many workers it runs.
        set_workers(len + 1);
        let threads: Vec<_> = [0, len]
            .into_iter()
            .map(|w| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        c.add(w, 0, 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.sum(0), 200_000, "two workers on one shard");
    }
}
