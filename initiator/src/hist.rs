//! A log-linear latency histogram: 16 sub-buckets per power of two (about 6%
//! relative precision), fixed size, no allocation when recording.

/// Number of buckets (covers the whole u64 range).
const BUCKETS: usize = 16 + 60 * 16;

/// A histogram of nanosecond values.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn index(v: u64) -> usize {
    if v < 16 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as usize;
    let shift = msb - 4;
    let sub = ((v >> shift) & 0xF) as usize;
    16 + shift * 16 + sub
}

fn low(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let shift = (i - 16) / 16;
    let sub = ((i - 16) % 16) as u64;
    (16 + sub) << shift
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
    /// Records one value.
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
    /// Adds another histogram's values.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }
    /// Mean (0 when empty).
    pub fn mean(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            (self.sum / self.total as u128) as u64
        }
    }
    /// Largest value (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }
    /// Smallest value (0 when empty).
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }
    /// The value at percentile `p` (0..=100): the middle of the bucket that
    /// holds the `ceil(p% * n)`-th value, clamped to the recorded min and max.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let lo = low(i);
                let hi = if i + 1 < BUCKETS {
                    low(i + 1)
                } else {
                    u64::MAX
                };
                let mid = lo + (hi - lo) / 2;
                return mid.clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_monotonic_and_cover() {
        for i in 1..BUCKETS {
            assert!(low(i) > low(i - 1), "bucket {i}");
            assert_eq!(index(low(i)), i);
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn uniform_percentiles() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (p, want) in [(50.0, 50_000.0), (99.0, 99_000.0), (99.9, 99_900.0)] {
            let got = h.percentile(p) as f64;
            assert!((got - want).abs() / want < 0.07, "p{p}: {got} vs {want}");
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.mean(), 50_000);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 100_000);
        assert_eq!(Histogram::new().percentile(50.0), 0);
    }

    proptest! {
        #[test]
        fn value_falls_in_its_bucket(v in any::<u64>()) {
            let i = index(v);
            prop_assert!(low(i) <= v);
            if i + 1 < BUCKETS { prop_assert!(v < low(i + 1)); }
        }

        #[test]
        fn merge_equals_recording_all(a in proptest::collection::vec(0u64..1_000_000, 0..50),
                                      b in proptest::collection::vec(0u64..1_000_000, 0..50)) {
            let (mut h1, mut h2, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
            for &v in &a { h1.record(v); all.record(v); }
            for &v in &b { h2.record(v); all.record(v); }
            h1.merge(&h2);
            prop_assert_eq!(h1.count(), all.count());
            prop_assert_eq!(h1.percentile(99.0), all.percentile(99.0));
            prop_assert_eq!(h1.mean(), all.mean());
        }
    }
}
