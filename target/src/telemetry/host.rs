//! The per-host series as Prometheus families (`[metrics] per_host`): what
//! the core's registry ([`crate::counters::host`]) holds, drawn at each
//! scrape.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::metrics::PREFIX;
use super::namespace::{family, label};
use std::collections::HashMap;

use crate::counters::host::registry;

/// Exports the per-host series when scraped (nothing while none exist).
pub struct HostCollector {
    descs: Vec<Desc>,
}

const HSO: &[&str] = &["host", "subsystem", "op"];

const FAMILIES: [(&str, &str, &[&str]); 5] = [
    (
        "host_commands_total",
        "Read and write commands completed, per host (when [metrics] per_host)",
        HSO,
    ),
    ("host_bytes_total", "Bytes read and written, per host", HSO),
    (
        "host_command_seconds_total",
        "Time of reads and writes in the target, summed, per host (divided by host_commands_total: the mean latency)",
        HSO,
    ),
    (
        "host_errors_total",
        "Commands answered with an error, per host",
        &["host", "subsystem"],
    ),
    (
        "host_series_overflow_total",
        "Controllers counted in host=\"_other\": their host came when the per-host series were at their cap",
        &[],
    ),
];

impl HostCollector {
    /// A collector of [`registry`]'s series.
    pub fn new() -> HostCollector {
        let descs = FAMILIES
            .iter()
            .map(|(n, h, labels)| {
                Desc::new(
                    format!("{PREFIX}_{n}"),
                    h.to_string(),
                    labels.iter().map(|l| l.to_string()).collect(),
                    HashMap::new(),
                )
                .expect("a valid metric description")
            })
            .collect();
        HostCollector { descs }
    }
}

impl Default for HostCollector {
    fn default() -> Self {
        HostCollector::new()
    }
}

fn counter(labels: &[(&str, &str)], v: f64) -> proto::Metric {
    let mut m = proto::Metric::default();
    m.set_label(labels.iter().map(|(k, val)| label(k, val)).collect());
    let mut c = proto::Counter::default();
    c.set_value(v);
    m.set_counter(c);
    m
}

impl Collector for HostCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let (series, overflow) = registry().series(std::time::Instant::now());
        if series.is_empty() {
            return Vec::new();
        }
        let mut m: [Vec<proto::Metric>; 5] = Default::default();
        for ((sub, host), t) in &series {
            let l = |op| {
                [
                    ("host", host.as_str()),
                    ("op", op),
                    ("subsystem", sub.as_str()),
                ]
            };
            let ops = [
                ("read", t.reads, t.units_read, t.read_ns),
                ("write", t.writes, t.units_written, t.write_ns),
            ];
            for (op, n, units, ns) in ops {
                m[0].push(counter(&l(op), n as f64));
                m[1].push(counter(&l(op), (units * 512) as f64));
                m[2].push(counter(&l(op), ns as f64 / 1e9));
            }
            let l = [("host", host.as_str()), ("subsystem", sub.as_str())];
            m[3].push(counter(&l, t.errors as f64));
        }
        m[4].push(counter(&[], overflow as f64));
        self.descs
            .iter()
            .zip(m)
            .map(|(d, v)| family(d, MetricType::COUNTER, v))
            .collect()
    }
}
