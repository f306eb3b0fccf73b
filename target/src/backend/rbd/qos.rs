//! QoS caps that hold for an RBD image as a whole, whichever gateways its
//! hosts go through (docs/configuration.md, "QoS across gateways").
//!
//! Each gateway that serves a capped image writes, every [`EXCHANGE`], what
//! its workers ask of each cap (I/Os per worker period, [`demand_now`]) into
//! a RADOS object of the image's pool, `nvmf_qos.<image id>`, and reads what
//! the others ask. Its part of a cap is its demand over the sum of the
//! live gateways' (plus a little, [`FLOOR`], so that an idle gateway whose
//! host turns to it is not at zero): the parts add up to the cap and follow
//! the hosts' I/O within an exchange or two. A gateway whose entry has not
//! changed for [`STALE`] (stopped, dead, cut off from the cluster) is left
//! out, so the others take its part within that time; entries unchanged
//! for [`FORGET`] are removed. Staleness is judged by each reader's own
//! clock, from the entry's sequence number: the gateways' clocks need not
//! agree.
//!
//! [`Budget`] is the exchange's logic (no I/O, tested below); [`Sharer`]
//! runs it on a thread of its own, never on a worker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::qos::demand_now;
use crate::model::qos::NsQos;

/// How often a gateway writes its demand and takes its part.
pub const EXCHANGE: Duration = Duration::from_millis(200);
/// How often the demand is sampled between exchanges (averaged).
const SAMPLE: Duration = Duration::from_millis(50);
/// A gateway whose entry has not changed for this long is left out.
pub const STALE: Duration = Duration::from_secs(1);
/// An entry unchanged for this long is removed from the record.
const FORGET: Duration = Duration::from_secs(60);
/// The demand every live gateway counts as having (I/Os per worker
/// period), so that an idle one keeps a small part.
const FLOOR: f64 = 0.5;
/// The largest record read (a few hundred bytes per gateway).
const MAX_RECORD: usize = 256 << 10;
/// Conditional writes tried per exchange before the next.
const TRIES: usize = 4;

/// A gateway's entry in the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    /// Its name for people (`host:pid`).
    #[serde(default)]
    gateway: String,
    /// Grows with each of its exchanges: how the others see it is alive.
    seq: u64,
    /// What its workers ask of each cap, by the cap's host (`""`: the
    /// namespace's cap, all hosts), in I/Os per worker period.
    demand: BTreeMap<String, f64>,
}

/// The record: each gateway's entry, by a key unique to its namespace.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    gateways: BTreeMap<String, Entry>,
}

/// This gateway's part of one cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// Its part of the cap, in (0, 1].
    pub part: f64,
    /// How many live gateways share the cap, this one among them.
    pub gateways: u32,
}

/// One gateway's side of the exchange, sans-IO.
#[derive(Debug)]
pub struct Budget {
    key: String,
    gateway: String,
    seq: u64,
    /// The others' entries: the sequence number last seen and since when.
    seen: HashMap<String, (u64, Instant)>,
}

impl Budget {
    /// The side of the gateway whose entry is `key` (`gateway`: its name
    /// for people).
    pub fn new(key: &str, gateway: &str) -> Budget {
        Budget {
            key: key.into(),
            gateway: gateway.into(),
            seq: 0,
            seen: HashMap::new(),
        }
    }

    /// Reads `record` (the object's content; `None`: there is none yet) at
    /// `now` with this gateway's `demand` by cap: the record to write back
    /// and this gateway's part of each cap. A record that cannot be read
    /// is replaced (and said so: the `bool`).
    pub fn exchange(
        &mut self,
        record: Option<&[u8]>,
        demand: &BTreeMap<String, f64>,
        now: Instant,
    ) -> (Vec<u8>, BTreeMap<String, Part>, bool) {
        let (mut rec, bad) = match record.map(serde_json::from_slice::<Record>) {
            None => (Record::default(), false),
            Some(Ok(r)) => (r, false),
            Some(Err(_)) => (Record::default(), true),
        };
        rec.gateways.remove(&self.key);
        // Note when each other entry last changed; forget the long dead.
        self.seen.retain(|k, _| rec.gateways.contains_key(k));
        for (k, e) in &rec.gateways {
            let s = self.seen.entry(k.clone()).or_insert((e.seq, now));
            if s.0 != e.seq {
                *s = (e.seq, now);
            }
        }
        let age = |k: &str| now.saturating_duration_since(self.seen[k].1);
        rec.gateways.retain(|k, _| age(k) < FORGET);
        let parts = demand
            .iter()
            .map(|(cap, &own)| {
                let own = own.max(0.0);
                let (sum, n) = rec
                    .gateways
                    .iter()
                    .filter(|(k, _)| age(k) < STALE)
                    .filter_map(|(_, e)| e.demand.get(cap))
                    .fold((0.0, 0u32), |(s, n), d| (s + d.max(0.0), n + 1));
                let part = match n {
                    0 => 1.0,
                    _ => (own + FLOOR) / (own + sum + FLOOR * (n + 1) as f64),
                };
                (
                    cap.clone(),
                    Part {
                        part,
                        gateways: if n == 0 { 0 } else { n + 1 },
                    },
                )
            })
            .collect();
        self.seq += 1;
        rec.gateways.insert(
            self.key.clone(),
            Entry {
                gateway: self.gateway.clone(),
                seq: self.seq,
                demand: demand.clone(),
            },
        );
        (serialize(&rec), parts, bad)
    }

    /// `record` without this gateway's entry (it stops sharing).
    pub fn leave(&self, record: &[u8]) -> Option<Vec<u8>> {
        let mut rec: Record = serde_json::from_slice(record).ok()?;
        rec.gateways.remove(&self.key)?;
        Some(serialize(&rec))
    }
}

fn serialize(rec: &Record) -> Vec<u8> {
    serde_json::to_vec(rec).unwrap_or_default()
}

/// What the thread and the namespace share.
#[derive(Debug)]
struct Shared {
    /// The namespace's caps now (`None`: stop).
    qos: Mutex<Option<Arc<NsQos>>>,
    wake: Condvar,
}

/// Shares an image's caps with the other gateways that serve it: a thread
/// that runs the exchange while the namespace has caps. Dropping it stops
/// the thread, which takes this gateway's entry out of the record.
#[derive(Debug)]
pub struct Sharer {
    shared: Arc<Shared>,
}

impl Sharer {
    /// Starts sharing `qos` through `object` as `key` (`gateway`: the
    /// gateway's name for people; `image`: for logs).
    pub fn start(
        object: Arc<ceph::Object>,
        key: String,
        gateway: String,
        image: String,
        qos: Arc<NsQos>,
    ) -> std::io::Result<Sharer> {
        let shared = Arc::new(Shared {
            qos: Mutex::new(Some(qos)),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("rbd-qos".into())
            .spawn(move || run(&s, &object, Budget::new(&key, &gateway), &image))?;
        Ok(Sharer { shared })
    }

    /// The caps changed (limits that stay keep their parts).
    pub fn update(&self, qos: Arc<NsQos>) {
        *lock(&self.shared.qos) = Some(qos);
    }
}

impl Drop for Sharer {
    fn drop(&mut self) {
        *lock(&self.shared.qos) = None;
        self.shared.wake.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn run(shared: &Shared, object: &ceph::Object, mut budget: Budget, image: &str) {
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut samples = 0u32;
    let mut next = Instant::now();
    let mut failing: Option<Instant> = None;
    loop {
        let qos = {
            let g = lock(&shared.qos);
            let (g, _) = shared
                .wake
                .wait_timeout_while(g, SAMPLE, |q| q.is_some())
                .unwrap_or_else(|p| p.into_inner());
            match &*g {
                Some(q) => q.clone(),
                None => break,
            }
        };
        let limits: Vec<(&str, &Arc<crate::model::qos::Limit>)> = qos
            .all
            .iter()
            .map(|l| ("", l))
            .chain(qos.hosts.iter().map(|(h, l)| (h.as_str(), l)))
            .collect();
        sums.retain(|k, _| limits.iter().any(|(h, _)| h == k));
        for (h, l) in &limits {
            *sums.entry(h.to_string()).or_default() += demand_now(l) as f64;
        }
        samples += 1;
        let now = Instant::now();
        if now < next {
            continue;
        }
        next = now + EXCHANGE;
        let demand: BTreeMap<String, f64> = sums
            .iter()
            .map(|(k, v)| (k.clone(), v / samples.max(1) as f64))
            .collect();
        sums.clear();
        samples = 0;
        match exchange(object, &mut budget, &demand) {
            Ok(parts) => {
                if let Some(t) = failing.take() {
                    tracing::info!(
                        image,
                        "QoS exchange with the other gateways works again after {:.1} s",
                        t.elapsed().as_secs_f64()
                    );
                }
                for (h, l) in &limits {
                    if let Some(p) = parts.get(*h) {
                        l.set_part(p.part, p.gateways);
                    }
                }
            }
            Err(e) => {
                // The parts stay as they were: the others, who cannot see
                // this gateway either, take its part once it is stale.
                if failing.is_none() {
                    failing = Some(Instant::now());
                    tracing::warn!(image, "QoS exchange with the other gateways (nvmf_qos object): {e}; this gateway keeps its last part of the caps");
                }
            }
        }
    }
    for _ in 0..TRIES {
        let Ok(Some((data, version))) = object.read(MAX_RECORD) else {
            break;
        };
        let Some(out) = budget.leave(&data) else {
            break;
        };
        match object.write(&out, Some(version)) {
            Err(ceph::WriteError::Changed) => continue,
            _ => break,
        }
    }
}

/// One exchange through the object: this gateway's parts.
fn exchange(
    object: &ceph::Object,
    budget: &mut Budget,
    demand: &BTreeMap<String, f64>,
) -> Result<BTreeMap<String, Part>, ceph::Error> {
    for _ in 0..TRIES {
        let cur = object.read(MAX_RECORD)?;
        let (out, parts, bad) =
            budget.exchange(cur.as_ref().map(|(d, _)| &d[..]), demand, Instant::now());
        if bad {
            tracing::warn!(object = %object.spec(), "the QoS record could not be read; replacing it");
        }
        match object.write(&out, cur.map(|(_, v)| v)) {
            Ok(_) => return Ok(parts),
            Err(ceph::WriteError::Changed) => continue,
            Err(ceph::WriteError::Failed(e)) => return Err(e),
        }
    }
    Err(ceph::Error::Library(
        "the QoS record kept changing under this gateway's writes".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// Runs an exchange of each gateway in turn on one record at `now`;
    /// returns each one's parts.
    fn round(
        gws: &mut [Budget],
        demand: &[BTreeMap<String, f64>],
        rec: &mut Option<Vec<u8>>,
        now: Instant,
    ) -> Vec<BTreeMap<String, Part>> {
        gws.iter_mut()
            .zip(demand)
            .map(|(g, dm)| {
                let (out, parts, bad) = g.exchange(rec.as_deref(), dm, now);
                assert!(!bad);
                *rec = Some(out);
                parts
            })
            .collect()
    }

    #[test]
    fn a_lone_gateway_has_the_whole_cap() {
        let mut g = [Budget::new("a", "gw-a")];
        let mut rec = None;
        let p = round(&mut g, &[d(&[("", 10.0)])], &mut rec, Instant::now());
        assert_eq!(
            p[0][""],
            Part {
                part: 1.0,
                gateways: 0
            }
        );
    }

    #[test]
    fn gateways_share_a_cap_as_their_hosts_ask() {
        let mut g = [Budget::new("a", "gw-a"), Budget::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 30.0), ("h1", 5.0)]), d(&[("", 10.0)])];
        round(&mut g, &dm, &mut rec, t0);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE);
        let (a, b) = (p[0][""], p[1][""]);
        assert_eq!((a.gateways, b.gateways), (2, 2));
        assert!((a.part + b.part - 1.0).abs() < 1e-9, "{a:?} {b:?}");
        assert!((a.part - 30.5 / 41.0).abs() < 1e-9, "{a:?}");
        // A host's cap that only A has is A's alone.
        assert_eq!(
            p[0]["h1"],
            Part {
                part: 1.0,
                gateways: 0
            }
        );
        // An idle gateway keeps a little, the busy one nearly all (each
        // sees the other's change at its next exchange).
        let dm = [d(&[("", 60.0)]), d(&[("", 0.0)])];
        round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 2);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 3);
        assert!(p[0][""].part > 0.98 && p[1][""].part < 0.01, "{p:?}");
    }

    #[test]
    fn a_gateway_that_stops_exchanging_loses_its_part_once_stale() {
        let mut g = [Budget::new("a", "gw-a"), Budget::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 20.0)]), d(&[("", 20.0)])];
        round(&mut g, &dm, &mut rec, t0);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE);
        assert!((p[0][""].part - 0.5).abs() < 1e-9);
        // B stops (killed): A alone goes on.
        let (a, _) = g.split_at_mut(1);
        let mut at = |t: Duration| {
            let (out, parts, _) = a[0].exchange(rec.as_deref(), &dm[0], t0 + t);
            let text = String::from_utf8_lossy(&out).into_owned();
            rec = Some(out);
            (parts[""], text)
        };
        // A sees B's last entry at its next exchange; from then on B
        // counts for STALE.
        let seen = EXCHANGE * 2;
        assert!((at(seen).0.part - 0.5).abs() < 1e-9);
        let later = seen + STALE - Duration::from_millis(1);
        assert!((at(later).0.part - 0.5).abs() < 1e-9, "B still counts");
        let (p, text) = at(seen + STALE);
        assert_eq!(
            p,
            Part {
                part: 1.0,
                gateways: 0
            }
        );
        // Long dead, its entry goes from the record.
        assert!(text.contains("gw-b"));
        assert!(!at(seen + FORGET).1.contains("gw-b"));
    }

    #[test]
    fn a_gateway_seen_anew_counts_at_once_and_one_that_leaves_goes() {
        let mut g = [Budget::new("a", "gw-a"), Budget::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 20.0)]), d(&[("", 20.0)])];
        // B wrote first; A's first look counts it.
        let p = round(&mut g, &dm, &mut rec, t0);
        assert_eq!(p[0][""].gateways, 0, "A wrote first, B not there yet");
        assert_eq!(p[1][""].gateways, 2);
        let out = g[1].leave(rec.as_ref().unwrap()).unwrap();
        let (_, p, _) = g[0].exchange(Some(&out), &dm[0], t0 + EXCHANGE);
        assert_eq!(
            p[""],
            Part {
                part: 1.0,
                gateways: 0
            }
        );
    }

    #[test]
    fn a_gateway_whose_host_turns_to_it_gets_its_part_within_a_second() {
        // Two gateways (a worker each, a limit each: two processes) share a
        // cap of 2,000 IOPS through the record; each host keeps 16 I/Os
        // queued (closed loop). A's host runs alone for 2 s, then B's
        // starts: within a second B has close to half.
        use crate::engine::qos::{demand_at, Throttle, Waiter};
        use crate::model::qos::{Limit, QosCaps};
        let caps = QosCaps {
            rw_iops: 2000,
            ..Default::default()
        };
        let limits = [Limit::new(caps, "s", 1, ""), Limit::new(caps, "s", 1, "")];
        let mut ts = [Throttle::new(0, 1), Throttle::new(0, 1)];
        let mut gws = [Budget::new("a", "gw-a"), Budget::new("b", "gw-b")];
        let (mut rec, mut queued, mut done) = (None, [0usize; 2], [0u64; 2]);
        let mut sums = [0.0f64; 2];
        let t0 = Instant::now();
        let mut ud = 0;
        for s in 0..40_000u64 {
            let now = t0 + Duration::from_micros(100 * s);
            if s == 30_000 {
                done = [0, 0];
            }
            for i in 0..2 {
                if i == 1 && s < 20_000 {
                    continue;
                }
                let t = &mut ts[i];
                let went = t.ready(now).len();
                queued[i] -= went;
                done[i] += went as u64;
                for _ in 0..(16 - queued[i]) {
                    if t.admit(now, &[&limits[i]], true, 4096) {
                        done[i] += 1;
                    } else {
                        ud += 1;
                        t.wait(Waiter {
                            ud,
                            limits: vec![limits[i].clone()],
                            read: true,
                            bytes: 4096,
                            since: now,
                            blocked_on: Vec::new(),
                        });
                        queued[i] += 1;
                    }
                }
            }
            // The sharers: a sample every SAMPLE, an exchange every EXCHANGE.
            if s % (SAMPLE.as_micros() as u64 / 100) == 0 {
                for i in 0..2 {
                    sums[i] += demand_at(&limits[i], now) as f64;
                }
            }
            if s % (EXCHANGE.as_micros() as u64 / 100) == 0 {
                let n = (EXCHANGE.as_micros() / SAMPLE.as_micros()) as f64;
                let dm: Vec<_> = sums.iter().map(|v| d(&[("", v / n)])).collect();
                for (i, p) in round(&mut gws, &dm, &mut rec, now).iter().enumerate() {
                    limits[i].set_part(p[""].part, p[""].gateways);
                }
                sums = [0.0; 2];
            }
        }
        let total = (done[0] + done[1]) as f64;
        assert!((1_800.0..=2_200.0).contains(&total), "{done:?} in 1 s");
        assert!(done[1] as f64 / total >= 0.4, "{done:?}");
    }

    #[test]
    fn a_record_that_cannot_be_read_is_replaced() {
        let mut b = Budget::new("a", "gw-a");
        let (out, p, bad) = b.exchange(Some(b"{not json"), &d(&[("", 1.0)]), Instant::now());
        assert!(bad);
        assert_eq!(p[""].part, 1.0);
        let rec: Record = serde_json::from_slice(&out).unwrap();
        assert_eq!(rec.gateways["a"].seq, 1);
        assert!(b.leave(b"[]").is_none());
    }
}
