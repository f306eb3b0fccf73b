//! A worker's part of the QoS caps, sans-IO: a token bucket per
//! [`Limit`] at the worker's share of its rates, the I/Os that wait for
//! tokens (in their order), and the sharing.
//!
//! Each worker spends only its own bucket: no lock and no write another
//! worker makes on the data path. Every [`PERIOD`] a worker publishes how
//! many I/Os it asked of each limit and takes as its share its part of
//! what all the workers asked (plus a little, [`FLOOR`], so that a worker
//! whose host just started is not at zero): the shares add up to the whole
//! cap whichever workers the host's queues land on, and follow the load
//! within a few periods. A bucket holds at most [`BURST`] of its rate, and
//! an I/O passes while its buckets are not empty (a large one may take a
//! bucket below zero: the next ones wait longer), so a cap holds whatever
//! the I/O size.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::qos::Limit;

/// How often a worker publishes its demand and takes its share.
pub const PERIOD: Duration = Duration::from_millis(20);
/// What a bucket holds at most, as time at its rate.
pub const BURST: Duration = Duration::from_millis(10);
/// The least a worker waits for tokens before it looks again.
const MIN_WAIT: Duration = Duration::from_micros(100);
/// The fewest I/Os a bucket holds.
const MIN_BURST_IOS: f64 = 4.0;
/// The demand every worker counts as having (I/Os per period), so that an
/// idle worker keeps a small share.
const FLOOR: f64 = 0.1;

/// What this gateway's workers ask of `limit` at `now`, in I/Os per
/// [`PERIOD`] (what came in during their last period and what waits).
pub fn demand_at(limit: &Limit, now: Instant) -> u64 {
    limit.demand(period_of(now)).0
}

/// The number of [`PERIOD`]s from the process's first to `now`: the
/// workers' common clock for their demand.
fn period_of(now: Instant) -> u32 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| now.checked_sub(PERIOD * 4).unwrap_or(now));
    (now.saturating_duration_since(start).as_millis() / PERIOD.as_millis()) as u32
}

/// One limit's bucket in one worker.
#[derive(Debug)]
struct Bucket {
    limit: Arc<Limit>,
    /// I/Os, bytes, bytes read, bytes written.
    tokens: [f64; 4],
    last: Instant,
    share: f64,
    /// I/Os asked of it in this period.
    asked: u64,
}

impl Bucket {
    fn new(limit: Arc<Limit>, now: Instant, workers: usize) -> Bucket {
        let share = 1.0 / workers.max(1) as f64;
        let rates = limit.rates();
        let mut b = Bucket {
            limit,
            tokens: [0.0; 4],
            last: now,
            share,
            asked: 0,
        };
        // Starts full: the first I/Os of a host do not wait.
        b.tokens = std::array::from_fn(|i| b.depth(rates[i], i));
        b
    }

    /// This worker's part of the limit's rates: its share of this
    /// gateway's, and this gateway's part of the cap (several gateways may
    /// share it, [`Limit::part`]).
    fn part(&self) -> f64 {
        self.share * self.limit.part()
    }

    /// The most the bucket holds of rate `rate` (dimension `i`): BURST of
    /// it at this worker's part, at least [`MIN_BURST_IOS`] I/Os (a worker
    /// that wakes a little late for a low cap loses no I/O) or one byte.
    fn depth(&self, rate: u64, i: usize) -> f64 {
        let least = if i == 0 { MIN_BURST_IOS } else { 1.0 };
        (rate as f64 * self.part() * BURST.as_secs_f64()).max(least)
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        let rates = self.limit.rates();
        let part = self.part();
        for (i, &rate) in rates.iter().enumerate() {
            if rate == 0 {
                continue;
            }
            let depth = self.depth(rate, i);
            self.tokens[i] = (self.tokens[i] + rate as f64 * part * dt).min(depth);
        }
    }

    /// The dimensions an I/O takes from: I/Os and bytes always, then bytes
    /// read or bytes written.
    fn dims(read: bool) -> [usize; 3] {
        [0, 1, if read { 2 } else { 3 }]
    }

    fn may(&self, read: bool) -> bool {
        let rates = self.limit.rates();
        Self::dims(read)
            .iter()
            .all(|&i| rates[i] == 0 || self.tokens[i] > 0.0)
    }

    fn take(&mut self, read: bool, bytes: u64) {
        let rates = self.limit.rates();
        for i in Self::dims(read) {
            if rates[i] != 0 {
                self.tokens[i] -= if i == 0 { 1.0 } else { bytes as f64 };
            }
        }
    }

    /// How long until the bucket lets an I/O of this kind pass.
    fn due(&self, read: bool) -> Duration {
        let rates = self.limit.rates();
        let mut wait: f64 = 0.0;
        for i in Self::dims(read) {
            if rates[i] != 0 && self.tokens[i] <= 0.0 {
                let rate = (rates[i] as f64 * self.part()).max(f64::MIN_POSITIVE);
                wait = wait.max((-self.tokens[i] + 1e-9) / rate);
            }
        }
        // At most a period: the share (and a gateway's part) may grow
        // meanwhile, and the waiters must not sleep through it.
        Duration::from_secs_f64(wait.min(PERIOD.as_secs_f64()))
    }
}

/// An I/O waiting for tokens.
#[derive(Debug, Clone)]
pub struct Waiter {
    /// Who it is (the worker resumes it by this: its queue and request).
    pub ud: u64,
    /// The limits it takes from.
    pub limits: Vec<Arc<Limit>>,
    /// A read (else a write).
    pub read: bool,
    /// Its bytes.
    pub bytes: u64,
    /// Since when it waits.
    pub since: Instant,
    /// The ids of the limits it waits for (those that refused it, or whose
    /// earlier waiters it must not pass); set by [`Throttle::wait`].
    pub blocked_on: Vec<u64>,
    /// Its host (any number that tells hosts apart): the waiters of
    /// several hosts go in turn, not in their order of arrival.
    pub host: u64,
    /// Its place in the turns; set by [`Throttle::wait`].
    pub tag: u64,
}

/// A worker's buckets and waiting I/Os.
#[derive(Debug)]
pub struct Throttle {
    worker: usize,
    workers: usize,
    buckets: HashMap<u64, Bucket>,
    waiting: VecDeque<Waiter>,
    /// How many waiters wait for each limit (by id).
    waiting_on: HashMap<u64, usize>,
    /// The limits the last refused [`Throttle::admit`] waits for.
    refused: Vec<u64>,
    /// When a waiter may go next (`None`: look at the next pass).
    next_check: Option<Instant>,
    period_start: Option<Instant>,
    /// The turn of the last waiter that went.
    turn: u64,
    /// Each host's next turn (hosts with waiters, or lately).
    next_turn: HashMap<u64, u64>,
}

impl Throttle {
    /// Worker `worker`'s part, of `workers` sharing each limit.
    pub fn new(worker: usize, workers: usize) -> Throttle {
        Throttle {
            worker,
            workers: workers.max(1),
            buckets: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_on: HashMap::new(),
            refused: Vec::new(),
            next_check: None,
            period_start: None,
            turn: 0,
            next_turn: HashMap::new(),
        }
    }

    fn bucket(&mut self, l: &Arc<Limit>, now: Instant) -> &mut Bucket {
        let workers = self.workers;
        let b = self
            .buckets
            .entry(l.id)
            .or_insert_with(|| Bucket::new(l.clone(), now, workers));
        b.refill(now);
        b
    }

    /// Whether an I/O (`read`, of `bytes`) under `limits` may go at `now`:
    /// if so its tokens are taken. Nothing waiting on these limits is
    /// passed by it.
    pub fn admit(&mut self, now: Instant, limits: &[&Arc<Limit>], read: bool, bytes: u64) -> bool {
        self.rebalance(now);
        // It waits for each limit that has waiters (they go first) or that
        // has no tokens; none of these: it goes.
        self.refused.clear();
        for l in limits {
            let queued = self.waiting_on.contains_key(&l.id);
            let b = self.bucket(l, now);
            b.asked += 1;
            if queued || !b.may(read) {
                self.refused.push(l.id);
            }
        }
        if !self.refused.is_empty() {
            return false;
        }
        for l in limits {
            self.bucket(l, now).take(read, bytes);
        }
        true
    }

    /// Makes `w`, which [`Throttle::admit`] just refused, wait for its
    /// tokens. Hosts take turns (start-time fair queueing, one I/O a
    /// turn): a host's waiter goes behind its own earlier ones and those
    /// of other hosts with earlier turns, so a host with a deep queue does
    /// not take a shared cap from one with a shallow queue.
    pub fn wait(&mut self, mut w: Waiter) {
        w.blocked_on = std::mem::take(&mut self.refused);
        if w.blocked_on.is_empty() {
            w.blocked_on = w.limits.iter().map(|l| l.id).collect();
        }
        self.count(&w.blocked_on, true);
        self.next_check = None;
        let next = self.next_turn.entry(w.host).or_insert(0);
        w.tag = (*next).max(self.turn);
        *next = w.tag + 1;
        // After every waiter of the same or an earlier turn (in order).
        let at = self.waiting.partition_point(|x| x.tag <= w.tag);
        self.waiting.insert(at, w);
    }

    fn count(&mut self, ids: &[u64], add: bool) {
        for id in ids {
            let n = self.waiting_on.entry(*id).or_default();
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.waiting_on.remove(id);
                }
            }
        }
    }

    /// Whether I/Os wait.
    pub fn is_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The I/Os that may go now, in their order, their tokens taken (a
    /// waiter behind one of its limits' blocked waiters stays).
    pub fn ready(&mut self, now: Instant) -> Vec<Waiter> {
        if self.waiting.is_empty() || self.next_check.is_some_and(|t| now < t) {
            return Vec::new();
        }
        self.rebalance(now);
        let mut go = Vec::new();
        let mut blocked: Vec<u64> = Vec::new();
        // When the first blocked waiter of each limit may go.
        let mut due: Option<Duration> = None;
        let mut stay = VecDeque::with_capacity(self.waiting.len());
        while let Some(mut w) = self.waiting.pop_front() {
            // What holds it now: a limit an earlier waiter waits for, or one
            // without tokens. Only these hold back the waiters behind it.
            let mut holds: Vec<u64> = Vec::new();
            let mut d = Duration::ZERO;
            for l in &w.limits {
                if blocked.contains(&l.id) {
                    holds.push(l.id);
                    continue;
                }
                let b = self.bucket(l, now);
                if !b.may(w.read) {
                    holds.push(l.id);
                    d = d.max(b.due(w.read));
                }
            }
            let old = std::mem::take(&mut w.blocked_on);
            self.count(&old, false);
            if holds.is_empty() {
                for l in &w.limits {
                    self.bucket(l, now).take(w.read, w.bytes);
                }
                self.turn = self.turn.max(w.tag);
                go.push(w);
                continue;
            }
            if d > Duration::ZERO {
                due = Some(due.map_or(d, |x| x.min(d)));
            }
            blocked.extend(holds.iter().copied());
            self.count(&holds, true);
            w.blocked_on = holds;
            stay.push_back(w);
        }
        self.waiting = stay;
        if due.is_none() && !self.waiting.is_empty() {
            // Held only behind others: look again soon.
            due = Some(MIN_WAIT);
        }
        self.next_check = due.map(|d| now + d.max(MIN_WAIT));
        go
    }

    /// Takes `ud`'s waiter out (its queue went away).
    pub fn cancel(&mut self, ud: u64) -> bool {
        let Some(i) = self.waiting.iter().position(|w| w.ud == ud) else {
            return false;
        };
        if let Some(w) = self.waiting.remove(i) {
            self.count(&w.blocked_on, false);
        }
        self.next_check = None;
        true
    }

    /// How long until a waiting I/O may go (`None`: none waits).
    pub fn next_due(&mut self, now: Instant) -> Option<Duration> {
        if self.waiting.is_empty() {
            return None;
        }
        Some(match self.next_check {
            Some(t) => t.saturating_duration_since(now),
            None => Duration::ZERO,
        })
    }

    /// Every [`PERIOD`]: publishes what this worker asked of each limit and
    /// takes its share of it; forgets the buckets of limits no longer used.
    fn rebalance(&mut self, now: Instant) {
        let start = *self.period_start.get_or_insert(now);
        if now.saturating_duration_since(start) < PERIOD {
            return;
        }
        self.period_start = Some(now);
        let w = self.worker;
        let period = period_of(now);
        // What a worker asks is what came in this period and what still
        // waits: under a cap, what comes in follows what goes out, so the
        // I/Os that came alone would keep any split as it is; those that
        // wait tell which worker holds back the most.
        let mut waiting: HashMap<u64, u64> = HashMap::new();
        for l in self.waiting.iter().flat_map(|x| x.limits.iter()) {
            *waiting.entry(l.id).or_default() += 1;
        }
        for (id, b) in self.buckets.iter_mut() {
            b.asked += waiting.get(id).copied().unwrap_or(0);
            b.limit.publish_demand(w, period, b.asked);
        }
        for b in self.buckets.values_mut() {
            // The floor counts for the workers that asked lately (this one
            // among them), not for every worker there is.
            let (sum, active) = b.limit.demand(period);
            let n = active.clamp(1, self.workers) as f64;
            b.share = (b.asked as f64 + FLOOR) / (sum as f64 + FLOOR * n);
            b.asked = 0;
        }
        // Hosts whose next turn has come are as hosts never seen.
        let turn = self.turn;
        self.next_turn.retain(|_, t| *t > turn);
        // A limit no namespace holds any more (its cap removed) goes.
        self.buckets
            .retain(|id, b| !b.limit.retired() || waiting.contains_key(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qos::{QosCaps, MB};

    fn iops(n: u64) -> Arc<Limit> {
        Limit::new(
            QosCaps {
                rw_iops: n,
                ..Default::default()
            },
            "s",
            1,
            "",
        )
    }

    /// Runs one worker for `secs` of fake time: a host keeps `depth` I/Os
    /// queued; returns how many went.
    /// A 4 KiB read of `host` under `l`, waiting.
    fn read_4k(ud: u64, l: &Arc<Limit>, host: u64, now: Instant) -> Waiter {
        Waiter {
            ud,
            limits: vec![l.clone()],
            read: true,
            bytes: 4096,
            since: now,
            blocked_on: Vec::new(),
            host,
            tag: 0,
        }
    }

    fn drive(
        t: &mut Throttle,
        l: &Arc<Limit>,
        t0: Instant,
        secs: f64,
        read: bool,
        bytes: u64,
        depth: usize,
    ) -> u64 {
        let mut done = 0;
        let mut ud = 0;
        let steps = (secs * 10_000.0) as u64;
        let mut queued = 0;
        for s in 0..steps {
            let now = t0 + Duration::from_micros(100 * s);
            for w in t.ready(now) {
                let _ = w;
                done += 1;
                queued -= 1;
            }
            let room = depth - queued;
            for _ in 0..room {
                if t.admit(now, &[l], read, bytes) {
                    done += 1;
                } else {
                    ud += 1;
                    t.wait(Waiter {
                        ud,
                        limits: vec![l.clone()],
                        read,
                        bytes,
                        since: now,
                        blocked_on: Vec::new(),
                        host: 0,
                        tag: 0,
                    });
                    queued += 1;
                }
            }
        }
        done
    }

    #[test]
    fn a_cap_of_iops_holds_on_one_worker() {
        let l = iops(2000);
        let mut t = Throttle::new(0, 1);
        let t0 = Instant::now();
        let n = drive(&mut t, &l, t0, 10.0, true, 4096, 32);
        // 2000/s for 10 s, plus the first burst.
        assert!((19_900..=20_100).contains(&n), "{n}");
    }

    #[test]
    fn a_cap_of_bytes_holds_whatever_the_io_size() {
        for bytes in [4096u64, 128 << 10, 4 << 20] {
            let l = Limit::new(
                QosCaps {
                    r_mbps: 10,
                    ..Default::default()
                },
                "s",
                1,
                "",
            );
            let mut t = Throttle::new(0, 1);
            let n = drive(&mut t, &l, Instant::now(), 10.0, true, bytes, 8);
            let mb = (n * bytes) as f64 / MB as f64;
            assert!((95.0..=106.0).contains(&mb), "{bytes}: {mb} MB in 10 s");
            // A write is not capped by r_mbps.
            let mut t = Throttle::new(0, 1);
            assert!(drive(&mut t, &l, Instant::now(), 0.1, false, bytes, 8) > 1000);
        }
    }

    #[test]
    fn two_workers_share_one_cap_as_their_load_is() {
        let l = iops(2000);
        let (mut a, mut b) = (Throttle::new(0, 2), Throttle::new(1, 2));
        let t0 = Instant::now();
        // Both loaded: together the cap, whatever the split.
        let mut done = [0u64; 2];
        for s in 0..100_000u64 {
            let now = t0 + Duration::from_micros(100 * s);
            for (i, t) in [&mut a, &mut b].into_iter().enumerate() {
                done[i] += t.ready(now).len() as u64;
                // Worker 0's host asks three times as often.
                let asks = if i == 0 { 3 } else { 1 };
                for _ in 0..asks {
                    if !t.is_waiting() {
                        if t.admit(now, &[&l], true, 4096) {
                            done[i] += 1;
                        } else {
                            t.wait(Waiter {
                                ud: s,
                                limits: vec![l.clone()],
                                read: true,
                                bytes: 4096,
                                since: now,
                                blocked_on: Vec::new(),
                                host: 0,
                                tag: 0,
                            });
                        }
                    }
                }
            }
        }
        let total = done[0] + done[1];
        assert!((19_000..=20_500).contains(&total), "{done:?}");
        // Only worker 1 loaded: it gets (almost) the whole cap.
        let mut c = Throttle::new(1, 2);
        let n = drive(
            &mut c,
            &l,
            t0 + Duration::from_secs(20),
            10.0,
            true,
            4096,
            32,
        );
        assert!(n >= 18_000, "{n}");
    }

    #[test]
    fn one_hosts_own_cap_does_not_hold_back_another_host() {
        let all = iops(100_000);
        let a = iops(100);
        let mut t = Throttle::new(0, 1);
        let t0 = Instant::now();
        let both = [all.clone(), a.clone()];
        while t.admit(t0, &[&all, &a], true, 512) {}
        t.wait(Waiter {
            ud: 1,
            limits: both.to_vec(),
            read: true,
            bytes: 512,
            since: t0,
            blocked_on: Vec::new(),
            host: 0,
            tag: 0,
        });
        // Host A waits for its own cap; host B, under the namespace's
        // alone, goes.
        assert!(t.admit(t0, &[&all], true, 512));
        assert!(t.ready(t0).is_empty());
        assert!(t.admit(t0, &[&all], true, 512));
    }

    #[test]
    fn a_gateways_part_scales_its_buckets() {
        let l = iops(2000);
        l.set_part(0.25, 4);
        let mut t = Throttle::new(0, 1);
        let n = drive(&mut t, &l, Instant::now(), 10.0, true, 4096, 32);
        assert!((4_900..=5_100).contains(&n), "{n} of a quarter of 20,000");
    }

    #[test]
    fn hosts_that_keep_their_queues_full_end_up_sharing_evenly() {
        // Closed loop (an I/O comes in only as one goes, as a host at a
        // fixed queue depth does): worker 0's host alone first takes the
        // whole cap; once worker 1's host starts, the waiting I/Os move the
        // shares to even, not the arrivals alone (which follow the shares).
        let l = iops(2000);
        let mut ts = [Throttle::new(0, 2), Throttle::new(1, 2)];
        let mut queued = [0usize; 2];
        let mut done = [0u64; 2];
        let t0 = Instant::now();
        let mut ud = 0;
        for s in 0..60_000u64 {
            let now = t0 + Duration::from_micros(100 * s);
            if s == 40_000 {
                done = [0, 0];
            }
            for (i, t) in ts.iter_mut().enumerate() {
                if i == 1 && s < 10_000 {
                    continue;
                }
                let went = t.ready(now).len();
                queued[i] -= went;
                done[i] += went as u64;
                for _ in 0..(16 - queued[i]) {
                    if t.admit(now, &[&l], true, 4096) {
                        done[i] += 1;
                    } else {
                        ud += 1;
                        t.wait(read_4k(ud, &l, 0, now));
                        queued[i] += 1;
                    }
                }
            }
        }
        let total = (done[0] + done[1]) as f64;
        assert!((3_800.0..=4_200.0).contains(&total), "{done:?} in 2 s");
        let a = done[0] as f64 / total;
        assert!((0.4..=0.6).contains(&a), "{done:?}");
    }

    /// Issue 57, 8: a namespace-wide cap is shared among the hosts that
    /// want more than their part, not taken by the one with the deepest
    /// queue. Two hosts on one worker, closed loop: queue depth 64 and 4.
    #[test]
    fn hosts_of_a_shared_cap_take_turns_whatever_their_queue_depth() {
        let l = iops(2000);
        let mut t = Throttle::new(0, 1);
        let depth = [64usize, 4];
        let mut queued = [0usize; 2];
        let mut done = [0u64; 2];
        let t0 = Instant::now();
        let mut ud = 0;
        for s in 0..30_000u64 {
            let now = t0 + Duration::from_micros(100 * s);
            if s == 10_000 {
                done = [0, 0];
            }
            for w in t.ready(now) {
                queued[w.host as usize] -= 1;
                done[w.host as usize] += 1;
            }
            for h in 0..2 {
                for _ in 0..(depth[h] - queued[h]) {
                    if t.admit(now, &[&l], true, 4096) {
                        done[h] += 1;
                    } else {
                        ud += 1;
                        t.wait(read_4k(ud, &l, h as u64, now));
                        queued[h] += 1;
                    }
                }
            }
        }
        let total = (done[0] + done[1]) as f64;
        assert!((3_800.0..=4_200.0).contains(&total), "{done:?} in 2 s");
        let deep = done[0] as f64 / total;
        assert!(
            (0.45..=0.55).contains(&deep),
            "{done:?}: the deep queue's part {deep:.2}"
        );
    }

    #[test]
    fn a_lone_busy_worker_of_many_gets_the_whole_cap() {
        // 32 workers, one loaded: its share is not cut by the idle ones.
        let l = Limit::new(
            QosCaps {
                rw_mbps: 100,
                ..Default::default()
            },
            "s",
            1,
            "",
        );
        let mut t = Throttle::new(5, 32);
        let n = drive(&mut t, &l, Instant::now(), 5.0, false, 1 << 20, 8);
        let mb_s = n as f64 / 5.0;
        assert!((90.0..=106.0).contains(&mb_s), "{mb_s} MB/s of 100");
    }

    #[test]
    fn waiters_keep_their_order_and_go_when_due() {
        let l = iops(1000);
        let mut t = Throttle::new(0, 1);
        let t0 = Instant::now();
        let mut passed = 0;
        while t.admit(t0, &[&l], true, 512) {
            passed += 1;
        }
        assert_eq!(
            passed, 10,
            "the burst: 10 ms at 1000/s (more than the least, 4 I/Os)"
        );
        // At 100/s, 10 ms is 1 I/O: the least burst holds.
        let slow = iops(100);
        let mut s = Throttle::new(0, 1);
        let mut least = 0;
        while s.admit(t0, &[&slow], true, 512) {
            least += 1;
        }
        assert_eq!(least, 4, "the least burst at 100/s");
        for ud in 1..=3 {
            t.wait(Waiter {
                ud,
                limits: vec![l.clone()],
                read: true,
                bytes: 512,
                since: t0,
                blocked_on: Vec::new(),
                host: 0,
                tag: 0,
            });
        }
        // Nothing yet; the worker is to look again shortly, not before.
        assert!(t.ready(t0).is_empty());
        assert_eq!(t.next_due(t0), Some(MIN_WAIT));
        assert!(t.ready(t0 + Duration::from_micros(50)).is_empty());
        // A newcomer does not pass those that wait.
        let later = t0 + Duration::from_micros(500);
        assert!(!t.admit(later, &[&l], true, 512));
        // 1.5 I/Os' worth of tokens by then: two go (the second takes the
        // bucket below zero), the third waits half a millisecond more.
        let at = t0 + Duration::from_micros(1500);
        let go: Vec<u64> = t.ready(at).iter().map(|w| w.ud).collect();
        assert_eq!(go, vec![1, 2]);
        let due = t.next_due(at).unwrap();
        assert!(
            due >= Duration::from_micros(400) && due <= Duration::from_micros(600),
            "{due:?}"
        );
        assert!(t.cancel(3));
        assert!(!t.is_waiting());
        assert_eq!(t.next_due(t0), None);
    }
}
