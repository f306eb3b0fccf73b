//! Per-namespace I/O metrics, counted in per-worker shards
//! ([`crate::base::shard`]) and summed when scraped: an I/O adds to its
//! worker's own cache lines only. Exported as
//! `requests_total{subsystem,nsid,op}`, `bytes_total`,
//! `request_duration_seconds` (a histogram) and `requests_in_flight`; the
//! rare events (backend errors, reservation conflicts) are plain counters.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::metrics::PREFIX;
pub use crate::counters::namespace::bucket_at_or_above;
use crate::counters::namespace::{bound, series, BUCKETS, OPS, TIMED, WITH_BYTES};

/// The bounds a scrape shows, as a mask of bucket indices (bit `i`:
/// [`bound`]`(i)`; all by default). Counting keeps every bucket; a bound
/// left out merges into the next one shown, exactly.
static SHOWN: AtomicU64 = AtomicU64::new((1 << BUCKETS) - 1);

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
        let series = series();
        let (mut requests, mut bytes, mut duration, mut in_flight) =
            (vec![], vec![], vec![], vec![]);
        for s in &series {
            let sum = |f: &dyn Fn(&crate::counters::namespace::Shard) -> u64| s.sum(f);
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
            g.set_value(s.executing() as f64);
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
    use crate::counters::namespace::{IoOp, NsMetrics};
    use crate::telemetry::metrics::metrics;
    use std::time::Duration;

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
