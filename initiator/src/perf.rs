//! Load generator: one thread per I/O queue, each keeping `qd` commands in
//! flight, with per-thread latency histograms merged at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::commands;
use crate::controller::IoQueue;
use crate::error::{Error, Result};
use crate::hist::Histogram;
use crate::transport::{Done, HostQueue, QueueStats, Xfer};

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random mix of reads and writes (`read_pct` reads).
    RandRw,
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Pattern, String> {
        Ok(match s {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "randrw" => Pattern::RandRw,
            o => {
                return Err(format!(
                    "unknown pattern {o:?} (randread, randwrite, read, write, randrw)"
                ))
            }
        })
    }
}

/// The namespace under test.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Namespace id.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Blocks the test may touch (from LBA 0).
    pub blocks: u64,
}

/// Perf parameters.
#[derive(Debug, Clone)]
pub struct PerfOptions {
    /// Pattern.
    pub pattern: Pattern,
    /// Bytes per I/O (a multiple of the block size).
    pub bs: usize,
    /// Commands in flight per queue.
    pub qd: u16,
    /// Duration.
    pub time: Duration,
    /// Reads in a `RandRw` mix, in percent.
    pub read_pct: u8,
}

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct PerfReport {
    /// Pattern.
    pub pattern: Pattern,
    /// Bytes per I/O.
    pub bs: usize,
    /// Queue depth per queue.
    pub qd: u16,
    /// Queues.
    pub queues: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// Completed I/Os.
    pub ios: u64,
    /// Completed reads.
    pub reads: u64,
    /// Completed writes.
    pub writes: u64,
    /// I/Os with an error status.
    pub errors: u64,
    /// The first error status seen, named.
    pub first_error: Option<String>,
    /// I/Os per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_s: f64,
    /// Mean latency, microseconds.
    pub lat_mean_us: f64,
    /// Median latency, microseconds.
    pub lat_p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub lat_p99_us: f64,
    /// 99.9th percentile latency, microseconds.
    pub lat_p999_us: f64,
    /// Largest latency, microseconds.
    pub lat_max_us: f64,
    /// Window mode.
    pub windows: String,
    /// Memory windows bound.
    pub binds: u64,
    /// Windows closed by the target (SEND_WITH_INVALIDATE).
    pub remote_invalidations: u64,
    /// Windows closed locally (LOCAL_INV).
    pub local_invalidations: u64,
    /// Writes sent in-capsule.
    pub in_capsule: u64,
}

/// Live counters for a progress line.
#[derive(Default)]
pub struct Progress {
    /// Completed I/Os.
    pub ios: AtomicU64,
    /// Completed bytes.
    pub bytes: AtomicU64,
    /// Set when all workers finished.
    pub finished: AtomicBool,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

struct WorkerResult {
    hist: Histogram,
    reads: u64,
    writes: u64,
    errors: u64,
    first_error: Option<String>,
    stats: QueueStats,
}

fn worker(
    mut q: IoQueue,
    index: usize,
    nqueues: usize,
    t: Target,
    o: &PerfOptions,
    progress: &Progress,
    lost: &OnceLock<String>,
) -> Result<WorkerResult> {
    let bpi = (o.bs / t.block_size as usize) as u64;
    let slots_in_range = (t.blocks / bpi).max(1);
    let mut rng =
        Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut cursor = slots_in_range * index as u64 / nqueues as u64;
    let qd = (o.qd as usize).min(q.depth() as usize);
    let mut started = vec![Instant::now(); q.depth() as usize];
    let mut is_read = vec![false; q.depth() as usize];
    let mut done: Vec<Done> = Vec::with_capacity(qd);
    let mut r = WorkerResult {
        hist: Histogram::new(),
        reads: 0,
        writes: 0,
        errors: 0,
        first_error: None,
        stats: QueueStats::default(),
    };
    let start = Instant::now();
    let end = start + o.time;
    let mut stopping = false;
    loop {
        if !stopping && Instant::now() >= end {
            stopping = true;
        }
        if !stopping {
            while q.in_flight() < qd {
                let Some(tag) = q.alloc() else { break };
                let slot = match o.pattern {
                    Pattern::Read | Pattern::Write => {
                        let s = cursor;
                        cursor = (cursor + 1) % slots_in_range;
                        s
                    }
                    _ => rng.next() % slots_in_range,
                };
                let read = match o.pattern {
                    Pattern::RandRead | Pattern::Read => true,
                    Pattern::RandWrite | Pattern::Write => false,
                    Pattern::RandRw => rng.next() % 100 < o.read_pct as u64,
                };
                let slba = slot * bpi;
                let (cmd, x) = if read {
                    (
                        commands::read(t.nsid, slba, bpi as u32),
                        Xfer::FromTarget(o.bs as u32),
                    )
                } else {
                    (
                        commands::write(t.nsid, slba, bpi as u32, false),
                        Xfer::ToTarget(o.bs as u32),
                    )
                };
                is_read[tag as usize] = read;
                started[tag as usize] = Instant::now();
                q.submit(tag, cmd, x)?;
            }
        } else if q.in_flight() == 0 {
            break;
        }
        q.poll(&mut done, Duration::from_millis(100))?;
        if let Some(why) = lost.get() {
            return Err(Error::ControllerLost(why.clone()));
        }
        if stopping && Instant::now() > end + Duration::from_secs(30) {
            return Err(Error::Timeout {
                what: format!("draining queue {}", q.qid()),
                after: Duration::from_secs(30),
            });
        }
        let now = Instant::now();
        for d in done.drain(..) {
            let i = d.tag as usize;
            r.hist
                .record(now.duration_since(started[i]).as_nanos() as u64);
            if is_read[i] {
                r.reads += 1;
            } else {
                r.writes += 1;
            }
            if !d.cqe.status.is_success() {
                r.errors += 1;
                if r.first_error.is_none() {
                    r.first_error = Some(d.cqe.status.to_string());
                }
            }
            q.release(d.tag);
            progress.ios.fetch_add(1, Ordering::Relaxed);
            progress.bytes.fetch_add(o.bs as u64, Ordering::Relaxed);
        }
    }
    r.stats = q.stats();
    Ok(r)
}

/// Runs the load on `queues` (one thread each) and reports. `on_tick` is
/// called about once a second from the calling thread with the elapsed time
/// and the live counters. The run fails as soon as `lost` is set (the
/// controller's keep-alive failed: see [`Controller::lost`](crate::Controller::lost)).
pub fn run(
    queues: Vec<IoQueue>,
    t: Target,
    o: &PerfOptions,
    lost: &Arc<OnceLock<String>>,
    mut on_tick: impl FnMut(Duration, &Progress),
) -> Result<PerfReport> {
    if o.bs == 0 || !o.bs.is_multiple_of(t.block_size as usize) {
        return Err(Error::Invalid(format!(
            "block size {} is not a multiple of the namespace's {} B blocks",
            o.bs, t.block_size
        )));
    }
    if let Some(q) = queues.first() {
        if o.bs > q.slot_size() {
            return Err(Error::Invalid(format!(
                "block size {} exceeds the largest transfer {}",
                o.bs,
                q.slot_size()
            )));
        }
    }
    if t.blocks < (o.bs / t.block_size as usize) as u64 {
        return Err(Error::Invalid("namespace smaller than one I/O".into()));
    }
    let windows = queues
        .first()
        .map(|q| q.data_mode().to_string())
        .unwrap_or_default();
    let n = queues.len();
    let progress = Arc::new(Progress::default());
    let start = Instant::now();
    let handles: Vec<_> = queues
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let o = o.clone();
            let p = progress.clone();
            let l = lost.clone();
            std::thread::Builder::new()
                .name(format!("perf-q{}", i + 1))
                .spawn(move || worker(q, i, n, t, &o, &p, &l))
                .expect("spawn perf worker")
        })
        .collect();
    let mut next_tick = Duration::from_secs(1);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
        let e = start.elapsed();
        if e >= next_tick {
            on_tick(e, &progress);
            next_tick += Duration::from_secs(1);
        }
    }
    let seconds = start
        .elapsed()
        .as_secs_f64()
        .min(o.time.as_secs_f64().max(0.001) + 0.5);
    progress.finished.store(true, Ordering::Relaxed);
    let mut hist = Histogram::new();
    let mut rep = PerfReport {
        pattern: o.pattern,
        bs: o.bs,
        qd: o.qd,
        queues: n,
        seconds,
        ios: 0,
        reads: 0,
        writes: 0,
        errors: 0,
        first_error: None,
        iops: 0.0,
        mib_s: 0.0,
        lat_mean_us: 0.0,
        lat_p50_us: 0.0,
        lat_p99_us: 0.0,
        lat_p999_us: 0.0,
        lat_max_us: 0.0,
        windows,
        binds: 0,
        remote_invalidations: 0,
        local_invalidations: 0,
        in_capsule: 0,
    };
    for h in handles {
        let r = h
            .join()
            .map_err(|_| Error::Protocol("perf worker panicked".into()))??;
        hist.merge(&r.hist);
        rep.reads += r.reads;
        rep.writes += r.writes;
        rep.errors += r.errors;
        if rep.first_error.is_none() {
            rep.first_error = r.first_error;
        }
        rep.binds += r.stats.binds;
        rep.remote_invalidations += r.stats.remote_invalidations;
        rep.local_invalidations += r.stats.local_invalidations;
        rep.in_capsule += r.stats.in_capsule;
    }
    rep.ios = rep.reads + rep.writes;
    let us = |ns: u64| ns as f64 / 1000.0;
    rep.iops = rep.ios as f64 / seconds;
    rep.mib_s = rep.ios as f64 * o.bs as f64 / seconds / (1024.0 * 1024.0);
    rep.lat_mean_us = us(hist.mean());
    rep.lat_p50_us = us(hist.percentile(50.0));
    rep.lat_p99_us = us(hist.percentile(99.0));
    rep.lat_p999_us = us(hist.percentile(99.9));
    rep.lat_max_us = us(hist.max());
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse() {
        assert_eq!("randrw".parse::<Pattern>(), Ok(Pattern::RandRw));
        assert!("random".parse::<Pattern>().is_err());
    }

    #[test]
    fn rng_spreads() {
        let mut r = Rng(1);
        let mut seen = [0u32; 16];
        for _ in 0..16_000 {
            seen[(r.next() % 16) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
    }
}
