//! Per-controller I/O counts, and per-host series where the operator asks
//! for them (`[metrics] per_host`).
//!
//! A controller counts its host's reads, writes, bytes, latency and failed
//! commands in per-worker shards ([`crate::engine::shard`]): an I/O adds to
//! its worker's own cache line only. `status` shows them per controller.
//! With per-host series on, each controller connected since belongs to its
//! (subsystem, host NQN) series, and a scrape sums the live controllers of
//! each with what its gone ones counted (the series only grow). A host NQN
//! is the peer's to choose: at most [`Registry`]'s cap of host series
//! exist, and controllers of further hosts count in their subsystem's
//! `host="_other"` series (one per subsystem, beyond the cap;
//! `host_series_overflow_total` counts each such controller).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};

use super::metrics::PREFIX;
use super::namespace::{family, label};
use crate::engine::shard::Counts;

/// The counts of one controller, by index.
const READS: usize = 0;
const WRITES: usize = 1;
const UNITS_READ: usize = 2;
const UNITS_WRITTEN: usize = 3;
const READ_NS: usize = 4;
const WRITE_NS: usize = 5;
const ERRORS: usize = 6;
const N: usize = 7;

/// The label of the series of hosts beyond the cap.
pub const OTHER: &str = "_other";
/// Per-host series at most, unless configured.
pub const DEFAULT_MAX_SERIES: usize = 256;

/// A series: (subsystem NQN, host NQN or [`OTHER`]).
pub type Key = (String, String);

/// What a controller (or a host's series) counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoTotals {
    /// Read commands completed.
    pub reads: u64,
    /// Write commands completed.
    pub writes: u64,
    /// 512-byte units read.
    pub units_read: u64,
    /// 512-byte units written.
    pub units_written: u64,
    /// The reads' time in the target, summed (nanoseconds).
    pub read_ns: u64,
    /// The writes' time in the target, summed (nanoseconds).
    pub write_ns: u64,
    /// Commands that failed (any queue).
    pub errors: u64,
}

impl IoTotals {
    fn add(&mut self, o: &IoTotals) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.units_read += o.units_read;
        self.units_written += o.units_written;
        self.read_ns += o.read_ns;
        self.write_ns += o.write_ns;
        self.errors += o.errors;
    }

    /// The mean time of a read in the target (zero without reads).
    pub fn read_latency(&self) -> Duration {
        Duration::from_nanos(self.read_ns.checked_div(self.reads).unwrap_or(0))
    }

    /// The mean time of a write in the target (zero without writes).
    pub fn write_latency(&self) -> Duration {
        Duration::from_nanos(self.write_ns.checked_div(self.writes).unwrap_or(0))
    }
}

/// One controller's counts.
#[derive(Debug, Default)]
pub struct CtrlIo {
    counts: Counts<N>,
    /// Its host's series (an index into its registry's), `None`: none
    /// (per-host series off when it connected).
    series: Option<usize>,
}

impl CtrlIo {
    /// Worker `w` completed a read (`write` false) or write of `bytes`
    /// that took `elapsed` in the target.
    #[inline]
    pub fn count_io(&self, w: usize, write: bool, bytes: u64, elapsed: Duration) {
        let i = write as usize;
        self.counts.add(w, READS + i, 1);
        self.counts.add(w, UNITS_READ + i, bytes / 512);
        self.counts.add(w, READ_NS + i, elapsed.as_nanos() as u64);
    }

    /// Worker `w` answered a command with an error.
    #[inline]
    pub fn count_error(&self, w: usize) {
        self.counts.add(w, ERRORS, 1);
    }

    /// What it counted so far.
    pub fn totals(&self) -> IoTotals {
        IoTotals {
            reads: self.counts.sum(READS),
            writes: self.counts.sum(WRITES),
            units_read: self.counts.sum(UNITS_READ),
            units_written: self.counts.sum(UNITS_WRITTEN),
            read_ns: self.counts.sum(READ_NS),
            write_ns: self.counts.sum(WRITE_NS),
            errors: self.counts.sum(ERRORS),
        }
    }
}

/// The per-host series: their keys, what gone controllers counted, the
/// live controllers.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    enabled: bool,
    max: usize,
    /// (subsystem, host) of each series; the last is [`OTHER`]'s once made.
    keys: Vec<Key>,
    index: HashMap<Key, usize>,
    /// What each series' gone controllers counted.
    gone: Vec<IoTotals>,
    /// The controllers with a series (a controller the registry alone
    /// holds is gone: its counts move to `gone`, under the lock, so a
    /// scrape never misses them).
    live: Vec<Arc<CtrlIo>>,
    /// Controllers counted in [`OTHER`]'s series.
    overflow: u64,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns per-host series on (at most `max`, [`OTHER`] included) or off,
    /// for controllers that connect from now on. Series made stay.
    pub fn configure(&self, enabled: bool, max: usize) {
        let mut g = self.lock();
        g.enabled = enabled;
        g.max = max.max(1);
    }

    /// The counts of a new controller of `host` in `subsystem`.
    pub fn controller(&self, subsystem: &str, host: &str) -> Arc<CtrlIo> {
        let mut g = self.lock();
        if !g.enabled {
            return Arc::new(CtrlIo::default());
        }
        let key = (subsystem.to_string(), host.to_string());
        let series = match g.index.get(&key) {
            Some(&i) => i,
            None if g.keys.len() + 1 < g.max => g.add(key),
            None => {
                g.overflow += 1;
                let other = (subsystem.to_string(), OTHER.to_string());
                match g.index.get(&other) {
                    Some(&i) => i,
                    None => g.add(other),
                }
            }
        };
        let c = Arc::new(CtrlIo {
            counts: Counts::new(),
            series: Some(series),
        });
        g.prune();
        g.live.push(c.clone());
        c
    }

    /// Each series and its counts, and the controllers counted in
    /// [`OTHER`]'s.
    pub fn series(&self) -> (Vec<(Key, IoTotals)>, u64) {
        let mut g = self.lock();
        g.prune();
        let mut sums = g.gone.clone();
        for c in &g.live {
            if let Some(s) = c.series {
                sums[s].add(&c.totals());
            }
        }
        (g.keys.iter().cloned().zip(sums).collect(), g.overflow)
    }
}

impl Inner {
    /// Moves the counts of gone controllers (held by the registry alone)
    /// to their series.
    fn prune(&mut self) {
        let mut i = 0;
        while i < self.live.len() {
            if Arc::strong_count(&self.live[i]) == 1 {
                let c = self.live.swap_remove(i);
                if let Some(s) = c.series {
                    let t = c.totals();
                    self.gone[s].add(&t);
                }
            } else {
                i += 1;
            }
        }
    }

    fn add(&mut self, key: Key) -> usize {
        let i = self.keys.len();
        self.index.insert(key.clone(), i);
        self.keys.push(key);
        self.gone.push(IoTotals::default());
        i
    }
}

/// The process's per-host series.
pub fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let r = Registry::default();
        r.configure(false, DEFAULT_MAX_SERIES);
        r
    })
}

/// Exports the per-host series when scraped (nothing while none exist).
pub struct HostCollector {
    descs: Vec<Desc>,
}

const FAMILIES: [(&str, &str); 5] = [
    (
        "host_commands_total",
        "Read and write commands completed, per host (when [metrics] per_host)"
    ),
    (
        "host_bytes_total",
        "Bytes read and written, per host"
    ),
    (
        "host_command_seconds_total",
        "Time of reads and writes in the target, summed, per host (divided by host_commands_total: the mean latency)"
    ),
    (
        "host_errors_total",
        "Commands answered with an error, per host"
    ),
    (
        "host_series_overflow_total",
        "Controllers counted in host=\"_other\": their host came when the per-host series were at their cap"
    ),
];

impl HostCollector {
    /// A collector of [`registry`]'s series.
    pub fn new() -> HostCollector {
        let descs = FAMILIES
            .iter()
            .map(|(n, h)| {
                Desc::new(
                    format!("{PREFIX}_{n}"),
                    h.to_string(),
                    vec![],
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
        let (series, overflow) = registry().series();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_counts_and_leaves_its_counts_to_its_host() {
        let r = Registry::default();
        r.configure(true, 3);
        let a1 = r.controller("s", "a");
        a1.count_io(0, false, 4096, Duration::from_micros(10));
        a1.count_io(1, false, 4096, Duration::from_micros(30));
        a1.count_io(1, true, 512, Duration::from_micros(5));
        a1.count_error(0);
        let t = a1.totals();
        assert_eq!(
            (t.reads, t.writes, t.units_read, t.units_written),
            (2, 1, 16, 1)
        );
        assert_eq!((t.read_latency(), t.errors), (Duration::from_micros(20), 1));
        let a2 = r.controller("s", "a");
        a2.count_io(0, true, 1024, Duration::ZERO);
        let (s, over) = r.series();
        assert_eq!(s.len(), 1, "one series for both controllers of a host");
        assert_eq!((s[0].1.reads, s[0].1.writes, over), (2, 2, 0));
        // A gone controller leaves its counts.
        drop(a1);
        let (s, _) = r.series();
        assert_eq!(
            (s[0].1.reads, s[0].1.writes),
            (2, 2),
            "the series does not shrink"
        );
        // The cap: "b" takes the last place but one; "c" and "d" go to _other.
        let _b = r.controller("s", "b");
        let c = r.controller("s", "c");
        c.count_io(0, false, 512, Duration::ZERO);
        let _d = r.controller("s", "d");
        let (s, over) = r.series();
        let keys: Vec<&str> = s.iter().map(|((_, h), _)| h.as_str()).collect();
        assert_eq!(keys, vec!["a", "b", OTHER]);
        assert_eq!((s[2].1.reads, over), (1, 2));
    }

    #[test]
    fn off_makes_no_series() {
        let r = Registry::default();
        r.configure(false, 8);
        let c = r.controller("s", "a");
        c.count_io(0, false, 512, Duration::ZERO);
        assert_eq!(c.totals().reads, 1, "status still counts");
        assert!(r.series().0.is_empty());
        assert!(c.series.is_none());
    }
}
