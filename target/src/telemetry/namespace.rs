//! Per-namespace I/O metrics, counted in per-worker shards
//! ([`crate::base::shard`]) and summed when scraped: an I/O adds to its
//! worker's own cache lines only. Exported as
//! `requests_total{subsystem,nsid,op}`, `bytes_total`,
//! `request_duration_seconds` (a histogram) and `requests_in_flight`; the
//! rare events (backend errors, reservation conflicts) are plain counters.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::IntCounter;

use super::metrics::{metrics, PREFIX};
use crate::base::shard::{self, Padded};

/// Latency buckets: 8 µs doubling to ~17 s (22 upper bounds), covering
/// RDMA-to-memory and slow disks alike.
const BUCKETS: usize = 22;
const FIRST_BOUND_NS: u64 = 8_000;

/// The upper bound of bucket `i`, in seconds.
fn bound(i: usize) -> f64 {
    (FIRST_BOUND_NS << i) as f64 / 1e9
}

/// The bounds a scrape shows, as a mask of bucket indices (bit `i`:
/// [`bound`]`(i)`; all by default). Counting keeps every bucket; a bound
/// left out merges into the next one shown, exactly.
static SHOWN: AtomicU64 = AtomicU64::new((1 << BUCKETS) - 1);

/// The upper bound at or above `seconds` that a latency histogram can show
/// (8 µs doubling), or `None` past the last (~16.8 s).
pub fn bucket_at_or_above(seconds: f64) -> Option<usize> {
    (0..BUCKETS).find(|&i| bound(i) >= seconds * (1.0 - 1e-9))
}

/// Shows these buckets ([`bucket_at_or_above`]) in
/// `request_duration_seconds` (`[metrics] latency_buckets`); `None`: all 22,
/// an empty list: none (only `+Inf`, `_sum` and `_count`, so a thousand
/// namespaces are 9 series each, not 72).
pub fn show_buckets(buckets: Option<&[usize]>) {
    let mask = match buckets {
        None => (1 << BUCKETS) - 1,
        Some(b) => b
            .iter()
            .filter(|&&i| i < BUCKETS)
            .fold(0, |m, &i| m | 1 << i),
    };
    SHOWN.store(mask, Ordering::Relaxed);
}

/// A histogram of the per-bucket counts `count(b)` (`BUCKETS`: above the
/// last bound) and their sum in nanoseconds, showing the bounds in mask
/// `shown`: a bound left out merges into the next one shown.
fn histogram(count: impl Fn(usize) -> u64, sum_ns: u64, shown: u64) -> proto::Histogram {
    let mut h = proto::Histogram::default();
    let mut cumulative = 0;
    let mut bs = Vec::with_capacity(BUCKETS);
    for b in 0..BUCKETS {
        cumulative += count(b);
        if shown & (1 << b) == 0 {
            continue;
        }
        let mut bucket = proto::Bucket::default();
        bucket.set_cumulative_count(cumulative);
        bucket.set_upper_bound(bound(b));
        bs.push(bucket);
    }
    cumulative += count(BUCKETS);
    h.set_bucket(bs);
    h.set_sample_count(cumulative);
    h.set_sample_sum(sum_ns as f64 / 1e9);
    h
}

/// The bucket of a latency: the first whose bound holds it (BUCKETS: +Inf).
fn bucket_of(ns: u64) -> usize {
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

const OPS: [&str; 5] = ["read", "write", "flush", "write_zeroes", "dsm"];
/// Operations with bytes (read, write) and with a latency (and flush).
const WITH_BYTES: usize = 2;
const TIMED: usize = 3;

/// One worker's share of a namespace's counts.
#[derive(Debug, Default)]
struct Shard {
    ops: [AtomicU64; 5],
    bytes: [AtomicU64; WITH_BYTES],
    in_flight: AtomicI64,
    /// Per timed operation: the count of each bucket (not cumulative) and
    /// +Inf, and the sum of latencies in nanoseconds.
    buckets: [[AtomicU64; BUCKETS + 1]; TIMED],
    sum_ns: [AtomicU64; TIMED],
}

/// What a scrape sees of a namespace.
#[derive(Debug)]
struct Series {
    subsystem: String,
    nsid: String,
    shards: Box<[Padded<Shard>]>,
    removed: std::sync::atomic::AtomicBool,
}

/// A namespace's metrics.
#[derive(Debug)]
pub struct NsMetrics {
    series: Arc<Series>,
    /// Backend failures.
    pub backend_errors: IntCounter,
    /// Reservation conflicts.
    pub reservation_conflicts: IntCounter,
}

impl NsMetrics {
    /// The metrics of namespace `nsid` of `subsystem`, scraped from now on.
    pub fn new(subsystem: &str, nsid: u32) -> NsMetrics {
        let m = metrics();
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
        NsMetrics {
            series,
            backend_errors: m.backend_errors.with_label_values(&[subsystem, &ns]),
            reservation_conflicts: m.reservation_conflicts.with_label_values(&[subsystem, &ns]),
        }
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
        let s = &self.series.shards;
        s.iter()
            .map(|x| x.0.in_flight.load(Ordering::Relaxed))
            .sum()
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
        let m = metrics();
        let (s, n) = (&self.series.subsystem, &self.series.nsid);
        let _ = m.backend_errors.remove_label_values(&[s, n]);
        let _ = m.reservation_conflicts.remove_label_values(&[s, n]);
    }
}

/// The namespaces whose series a scrape shows.
fn live() -> &'static Mutex<Vec<Weak<Series>>> {
    static L: OnceLock<Mutex<Vec<Weak<Series>>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// The collector of every namespace's sharded series.
pub struct NsCollector {
    descs: Vec<Desc>,
}

impl NsCollector {
    /// The collector (registered once, with the process's metrics).
    pub fn new() -> NsCollector {
        let d = |n: &str, help: &str, labels: &[&str]| {
            Desc::new(
                format!("{PREFIX}_{n}"),
                help.into(),
                labels.iter().map(|l| l.to_string()).collect(),
                Default::default(),
            )
            .expect("valid metric")
        };
        let sno = ["subsystem", "nsid", "op"];
        NsCollector {
            descs: vec![
                d(
                    "requests_total",
                    "I/O commands completed, by namespace and operation",
                    &sno,
                ),
                d(
                    "bytes_total",
                    "Bytes transferred by completed I/O commands",
                    &sno,
                ),
                d(
                    "request_duration_seconds",
                    "Time from command arrival to response, by operation",
                    &sno,
                ),
                d(
                    "requests_in_flight",
                    "I/O commands being executed",
                    &["subsystem", "nsid"],
                ),
            ],
        }
    }
}

impl Default for NsCollector {
    fn default() -> Self {
        NsCollector::new()
    }
}

/// A label of a metric a collector makes.
pub(super) fn label(name: &str, value: &str) -> proto::LabelPair {
    let mut l = proto::LabelPair::default();
    l.set_name(name.into());
    l.set_value(value.into());
    l
}

/// A family of `d`'s metrics a collector makes.
pub(super) fn family(d: &Desc, t: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(d.fq_name.clone());
    f.set_help(d.help.clone());
    f.set_field_type(t);
    f.set_metric(metrics);
    f
}

impl Collector for NsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let series: Vec<Arc<Series>> = {
            let mut l = live().lock().unwrap_or_else(|p| p.into_inner());
            l.retain(|w| w.strong_count() > 0);
            l.iter().filter_map(Weak::upgrade).collect()
        };
        let (mut requests, mut bytes, mut duration, mut in_flight) =
            (vec![], vec![], vec![], vec![]);
        for s in series.iter().filter(|s| !s.removed.load(Ordering::Relaxed)) {
            let sum = |f: &dyn Fn(&Shard) -> u64| s.shards.iter().map(|x| f(&x.0)).sum::<u64>();
            let labels = |op: &str| {
                vec![
                    label("nsid", &s.nsid),
                    label("op", op),
                    label("subsystem", &s.subsystem),
                ]
            };
            for (i, op) in OPS.iter().enumerate() {
                let n = sum(&|x| x.ops[i].load(Ordering::Relaxed));
                let mut c = proto::Counter::default();
                c.set_value(n as f64);
                let mut m = proto::Metric::from_label(labels(op));
                m.set_counter(c);
                requests.push(m);
                if i < WITH_BYTES {
                    let mut c = proto::Counter::default();
                    c.set_value(sum(&|x| x.bytes[i].load(Ordering::Relaxed)) as f64);
                    let mut m = proto::Metric::from_label(labels(op));
                    m.set_counter(c);
                    bytes.push(m);
                }
                if i < TIMED {
                    let h = histogram(
                        |b| sum(&|x| x.buckets[i][b].load(Ordering::Relaxed)),
                        sum(&|x| x.sum_ns[i].load(Ordering::Relaxed)),
                        SHOWN.load(Ordering::Relaxed),
                    );
                    let mut m = proto::Metric::from_label(labels(op));
                    m.set_histogram(h);
                    duration.push(m);
                }
            }
            let mut g = proto::Gauge::default();
            let n: i64 = s
                .shards
                .iter()
                .map(|x| x.0.in_flight.load(Ordering::Relaxed))
                .sum();
            g.set_value(n as f64);
            let mut m = proto::Metric::from_label(vec![
                label("nsid", &s.nsid),
                label("subsystem", &s.subsystem),
            ]);
            m.set_gauge(g);
            in_flight.push(m);
        }
        let d = &self.descs;
        vec![
            family(&d[0], MetricType::COUNTER, requests),
            family(&d[1], MetricType::COUNTER, bytes),
            family(&d[2], MetricType::HISTOGRAM, duration),
            family(&d[3], MetricType::GAUGE, in_flight),
        ]
    }
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

    #[test]
    fn buckets_left_out_merge_into_the_next_shown() {
        // One latency in each bucket (and one above the last).
        let all = histogram(|_| 1, 0, (1 << BUCKETS) - 1);
        assert_eq!(all.get_bucket().len(), BUCKETS);
        assert_eq!(all.get_sample_count(), BUCKETS as u64 + 1);
        let at = |s: f64| bucket_at_or_above(s).unwrap();
        assert_eq!(at(0.001), 7, "1 ms: the 1.024 ms bound");
        assert_eq!(at(0.000008), 0);
        assert_eq!(bucket_at_or_above(17.0), None);
        let some = histogram(|_| 1, 2_000_000_000, 1 << at(0.001) | 1 << at(0.1));
        let b: Vec<(f64, u64)> = some
            .get_bucket()
            .iter()
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect();
        assert_eq!(b, vec![(0.001024, 8), (0.131072, 15)]);
        assert_eq!(
            some.get_sample_count(),
            BUCKETS as u64 + 1,
            "+Inf holds all"
        );
        assert_eq!(some.get_sample_sum(), 2.0);
        let none = histogram(|_| 1, 0, 0);
        assert!(none.get_bucket().is_empty());
        assert_eq!(none.get_sample_count(), BUCKETS as u64 + 1);
    }

    #[test]
    fn namespace_series_render_summed_over_workers_and_unregister() {
        let ns = NsMetrics::new("nqn.2026-11.io.test:metrics", 7);
        ns.record(0, IoOp::Read, 4096, Duration::from_micros(30));
        ns.record(1, IoOp::Read, 4096, Duration::from_micros(30));
        ns.record(3, IoOp::Write, 8192, Duration::from_micros(300));
        ns.in_flight(2, 1);
        let text = String::from_utf8(metrics().render()).unwrap();
        let line = |l: &str| text.lines().any(|x| x == l);
        let sub = "subsystem=\"nqn.2026-11.io.test:metrics\"";
        assert!(
            line(&format!(
                "nvmf_target_requests_total{{nsid=\"7\",op=\"read\",{sub}}} 2"
            )),
            "{text}"
        );
        assert!(line(&format!(
            "nvmf_target_bytes_total{{nsid=\"7\",op=\"write\",{sub}}} 8192"
        )));
        assert!(line(&format!(
            "nvmf_target_request_duration_seconds_count{{nsid=\"7\",op=\"write\",{sub}}} 1"
        )));
        assert!(line(&format!(
            "nvmf_target_request_duration_seconds_bucket{{nsid=\"7\",op=\"read\",{sub},le=\"0.000032\"}} 2"
        )), "{text}");
        assert!(line(&format!(
            "nvmf_target_requests_in_flight{{nsid=\"7\",{sub}}} 1"
        )));
        assert!(text.contains("# TYPE nvmf_target_request_duration_seconds histogram"));
        assert_eq!(ns.completed(IoOp::Read), 2);
        ns.unregister();
        let text = String::from_utf8(metrics().render()).unwrap();
        assert!(!text.contains("nqn.2026-11.io.test:metrics"));
    }
}
