//! Per-controller I/O counts, and per-host series where the operator asks
//! for them (`[metrics] per_host`).
//!
//! A controller counts its host's reads, writes, bytes, latency and failed
//! commands in per-worker shards ([`crate::base::shard`]): an I/O adds to
//! its worker's own cache line only. `status` shows them per controller.
//! With per-host series on, each controller connected since belongs to its
//! (subsystem, host NQN) series, and a scrape sums the live controllers of
//! each with what its gone ones counted (the series only grow). A host NQN
//! is the peer's to choose: at most [`Registry`]'s cap of host series
//! exist, and controllers of further hosts count in their subsystem's
//! `host="_other"` series (one per subsystem, beyond the cap;
//! `host_series_overflow_total` counts each such controller). A series
//! none of whose controllers has been connected for the configured idle
//! time (`[metrics] per_host_idle_secs`) goes, and its place with it: a
//! host that came once, or a peer that named itself anew at each Connect,
//! does not keep a series for ever, nor the cap full.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::base::shard::Counts;

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
/// How long a series stays with none of its controllers connected, unless
/// configured.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);

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
    /// How long a series without controllers stays (`None`: for ever).
    idle: Option<Duration>,
    /// (subsystem, host) of each series by its place (`None`: a free
    /// place, that of a series gone).
    keys: Vec<Option<Key>>,
    index: HashMap<Key, usize>,
    /// Free places.
    free: Vec<usize>,
    /// What each series' gone controllers counted.
    gone: Vec<IoTotals>,
    /// Each series' live controllers, and since when it has none.
    users: Vec<(usize, Option<Instant>)>,
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
    /// for controllers that connect from now on; a series without
    /// controllers for `idle` goes (`None`: series made stay).
    pub fn configure(&self, enabled: bool, max: usize, idle: Option<Duration>) {
        let mut g = self.lock();
        g.enabled = enabled;
        g.max = max.max(1);
        g.idle = idle;
    }

    /// The counts of a new controller of `host` in `subsystem`, connected
    /// at `now`.
    pub fn controller(&self, subsystem: &str, host: &str, now: Instant) -> Arc<CtrlIo> {
        let mut g = self.lock();
        if !g.enabled {
            return Arc::new(CtrlIo::default());
        }
        g.prune(now);
        let key = (subsystem.to_string(), host.to_string());
        let series = match g.index.get(&key) {
            Some(&i) => i,
            None if g.index.len() + 1 < g.max => g.add(key),
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
        g.users[series] = (g.users[series].0 + 1, None);
        g.live.push(c.clone());
        c
    }

    /// Each series and its counts at `now`, and the controllers counted
    /// in [`OTHER`]'s.
    pub fn series(&self, now: Instant) -> (Vec<(Key, IoTotals)>, u64) {
        let mut g = self.lock();
        g.prune(now);
        let mut sums = g.gone.clone();
        for c in &g.live {
            if let Some(s) = c.series {
                sums[s].add(&c.totals());
            }
        }
        let series = g
            .keys
            .iter()
            .zip(sums)
            .filter_map(|(k, t)| Some((k.clone()?, t)))
            .collect();
        (series, g.overflow)
    }
}

impl Inner {
    /// Moves the counts of gone controllers (held by the registry alone)
    /// to their series; series idle for long go.
    fn prune(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.live.len() {
            if Arc::strong_count(&self.live[i]) == 1 {
                let c = self.live.swap_remove(i);
                if let Some(s) = c.series {
                    let t = c.totals();
                    self.gone[s].add(&t);
                    let u = &mut self.users[s];
                    u.0 = u.0.saturating_sub(1);
                    if u.0 == 0 {
                        u.1 = Some(now);
                    }
                }
            } else {
                i += 1;
            }
        }
        let Some(idle) = self.idle else {
            return;
        };
        for s in 0..self.keys.len() {
            let expired =
                matches!(self.users[s], (0, Some(t)) if now.saturating_duration_since(t) >= idle);
            if expired {
                if let Some(k) = self.keys[s].take() {
                    self.index.remove(&k);
                }
                self.gone[s] = IoTotals::default();
                self.users[s] = (0, None);
                self.free.push(s);
            }
        }
    }

    fn add(&mut self, key: Key) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.keys.push(None);
                self.gone.push(IoTotals::default());
                self.users.push((0, None));
                self.keys.len() - 1
            }
        };
        self.index.insert(key.clone(), i);
        self.keys[i] = Some(key);
        i
    }
}

/// The process's per-host series.
pub fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let r = Registry::default();
        r.configure(false, DEFAULT_MAX_SERIES, Some(DEFAULT_IDLE));
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_counts_and_leaves_its_counts_to_its_host() {
        let now = Instant::now();
        let r = Registry::default();
        r.configure(true, 3, None);
        let a1 = r.controller("s", "a", now);
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
        let a2 = r.controller("s", "a", now);
        a2.count_io(0, true, 1024, Duration::ZERO);
        let (s, over) = r.series(now);
        assert_eq!(s.len(), 1, "one series for both controllers of a host");
        assert_eq!((s[0].1.reads, s[0].1.writes, over), (2, 2, 0));
        // A gone controller leaves its counts.
        drop(a1);
        let (s, _) = r.series(now);
        assert_eq!(
            (s[0].1.reads, s[0].1.writes),
            (2, 2),
            "the series does not shrink"
        );
        // The cap: "b" takes the last place but one; "c" and "d" go to _other.
        let _b = r.controller("s", "b", now);
        let c = r.controller("s", "c", now);
        c.count_io(0, false, 512, Duration::ZERO);
        let _d = r.controller("s", "d", now);
        let (s, over) = r.series(now);
        let keys: Vec<&str> = s.iter().map(|((_, h), _)| h.as_str()).collect();
        assert_eq!(keys, vec!["a", "b", OTHER]);
        assert_eq!((s[2].1.reads, over), (1, 2));
    }

    #[test]
    fn off_makes_no_series() {
        let now = Instant::now();
        let r = Registry::default();
        r.configure(false, 8, None);
        let c = r.controller("s", "a", now);
        c.count_io(0, false, 512, Duration::ZERO);
        assert_eq!(c.totals().reads, 1, "status still counts");
        assert!(r.series(now).0.is_empty());
        assert!(c.series.is_none());
    }

    /// Issue 57, 8: a series whose controllers are all gone leaves after
    /// the idle time, and its place is taken by the next host (not
    /// `_other`); one with a controller connected stays.
    #[test]
    fn an_idle_series_leaves_and_its_place_is_taken() {
        let r = Registry::default();
        r.configure(true, 3, Some(Duration::from_secs(10)));
        let t0 = Instant::now();
        let a = r.controller("s", "a", t0);
        a.count_io(0, false, 4096, Duration::ZERO);
        let _b = r.controller("s", "b", t0);
        drop(a);
        let hosts = |t| {
            let (s, over) = r.series(t);
            let h: Vec<String> = s.iter().map(|((_, h), _)| h.clone()).collect();
            (h, over)
        };
        // Seen gone at the scrape of 1 s: idle from then.
        assert_eq!(hosts(t0 + Duration::from_secs(1)).0, vec!["a", "b"]);
        assert_eq!(
            hosts(t0 + Duration::from_secs(10)).0,
            vec!["a", "b"],
            "idle 9 s of 10"
        );
        assert_eq!(hosts(t0 + Duration::from_secs(11)).0, vec!["b"]);
        let c = r.controller("s", "c", t0 + Duration::from_secs(12));
        let (h, over) = hosts(t0 + Duration::from_secs(12));
        assert_eq!((h, over), (vec!["c".to_string(), "b".to_string()], 0));
        assert_eq!(c.series, Some(0), "a's place");
        // A host that comes back within the idle time keeps its counts.
        drop(c);
        let c2 = r.controller("s", "c", t0 + Duration::from_secs(20));
        c2.count_io(0, false, 512, Duration::ZERO);
        assert_eq!(
            r.series(t0 + Duration::from_secs(60)).0.len(),
            2,
            "both have a controller"
        );
    }
}
