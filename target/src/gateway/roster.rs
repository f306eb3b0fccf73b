//! The record the gateways of one shared store (an RBD image) keep of each
//! other, and one gateway's side of its exchange, sans-IO: that it is
//! alive, how it serves the store's ANA group (so that a drained or dead
//! gateway's group is taken over, [`super::takeover`], and `ok-to-stop`
//! knows the other paths, [`super::ok_to_stop`]), and what its hosts ask of
//! each QoS cap (its part: [`super::qos_share`]).
//!
//! Each gateway that serves the store writes its entry, every [`EXCHANGE`]
//! while the namespace has caps and every [`IDLE_EXCHANGE`] otherwise, into
//! one object beside the store (for an image, the RADOS object
//! `nvmf_gw.<image id>` of its pool: `rbd::presence` runs the exchange),
//! and reads the others' (a JSON record, replaced whole by compare-and-swap
//! on the object's version). An entry that has not changed for five of its
//! writer's periods (1 s, or 5 s without caps) is stale: its gateway is
//! stopped, dead or cut off from the cluster. Staleness is judged by each
//! reader's own clock, from the entry's sequence number: the gateways'
//! clocks need not agree. Entries unchanged for [`FORGET`] are removed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use nvme::ana::AnaState;
use serde::{Deserialize, Serialize};

use super::qos_share::Part;
use crate::backend::{GatewayState, Peer};

/// How often a gateway with caps writes its entry and takes its parts.
pub const EXCHANGE: Duration = Duration::from_millis(200);
/// How often a gateway without caps writes its entry.
pub const IDLE_EXCHANGE: Duration = Duration::from_secs(1);
/// An entry is stale once it has not changed for this many of its
/// writer's periods.
pub const STALE_PERIODS: u32 = 5;
/// An entry unchanged for this long is removed from the record.
const FORGET: Duration = Duration::from_secs(60);
/// The largest record read; a larger one is replaced.
pub const MAX_RECORD: usize = 256 << 10;

/// A gateway's entry in the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    /// Its name for people (`host:pid`).
    #[serde(default)]
    gateway: String,
    /// Grows with each of its exchanges: how the others see it is alive.
    seq: u64,
    /// How often it writes (ms).
    #[serde(default = "idle_ms")]
    every_ms: u64,
    /// Its best ANA state for the image's group (a state's code).
    #[serde(default)]
    state: u8,
    /// It would serve the group optimized if no other gateway did.
    #[serde(default)]
    candidate: bool,
    /// It serves the group optimized in another's stead.
    #[serde(default)]
    promoted: bool,
    /// What its workers ask of each cap, by the cap's host (`""`: the
    /// namespace's cap, all hosts), in I/Os per worker period.
    #[serde(default)]
    demand: BTreeMap<String, f64>,
}

fn idle_ms() -> u64 {
    IDLE_EXCHANGE.as_millis() as u64
}

/// The record: each gateway's entry, by a key unique to its namespace.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    gateways: BTreeMap<String, Entry>,
}

/// What one exchange gives.
#[derive(Debug)]
pub struct Exchanged {
    /// The record to write back.
    pub record: Vec<u8>,
    /// This gateway's part of each cap.
    pub parts: BTreeMap<String, Part>,
    /// The other gateways.
    pub peers: Vec<Peer>,
    /// The record read could not be (too large, not ours): it is replaced.
    pub replaced: bool,
}

/// One gateway's side of the exchange, sans-IO.
#[derive(Debug)]
pub struct Roster {
    key: String,
    gateway: String,
    seq: u64,
    /// The others' entries: the sequence number last seen, since when,
    /// and whether it moved since first seen (an entry seen once may be a
    /// dead gateway's: it counts once it moves).
    seen: HashMap<String, (u64, Instant, bool)>,
}

impl Roster {
    /// The side of the gateway whose entry is `key` (`gateway`: its name
    /// for people). A key is `<gateway id>#<entry>`: the entries of one
    /// gateway (process) share the id, which orders the gateways.
    pub fn new(key: &str, gateway: &str) -> Roster {
        Roster {
            key: key.into(),
            gateway: gateway.into(),
            seq: 0,
            seen: HashMap::new(),
        }
    }

    /// Reads `record` (the object's content; `None`: there is none yet) at
    /// `now`, with this gateway's `state`, `demand` by cap and period
    /// `every`.
    pub fn exchange(
        &mut self,
        record: Option<&[u8]>,
        state: GatewayState,
        demand: &BTreeMap<String, f64>,
        every: Duration,
        now: Instant,
    ) -> Exchanged {
        let parsed = match record {
            None => Some(Record::default()),
            Some(r) if r.len() > MAX_RECORD => None,
            Some(r) => serde_json::from_slice::<Record>(r).ok(),
        };
        let replaced = parsed.is_none();

        let mut rec = parsed.unwrap_or_default();
        rec.gateways.remove(&self.key);
        // Note when each other entry last changed; forget the long dead.
        self.seen.retain(|k, _| rec.gateways.contains_key(k));
        for (k, e) in &rec.gateways {
            let s = self.seen.entry(k.clone()).or_insert((e.seq, now, false));
            if s.0 != e.seq {
                *s = (e.seq, now, true);
            }
        }
        let age = |k: &str| now.saturating_duration_since(self.seen[k].1);
        rec.gateways.retain(|k, _| age(k) < FORGET);
        // A period is one a gateway writes at: an entry that claims a
        // longer one does not stay alive longer without moving.
        let fresh = |k: &str, e: &Entry| {
            let every = Duration::from_millis(e.every_ms).clamp(EXCHANGE, IDLE_EXCHANGE);
            self.seen[k].2 && age(k) < (every * STALE_PERIODS).max(Duration::from_secs(1))
        };
        let gw = |k: &str| k.split('#').next().unwrap_or_default().to_string();
        let me = gw(&self.key);
        let parts = demand
            .iter()
            .map(|(cap, &own)| {
                let others = rec
                    .gateways
                    .iter()
                    .filter(|(k, e)| fresh(k, e))
                    .filter_map(|(_, e)| e.demand.get(cap).copied());
                (cap.clone(), Part::of(own, others))
            })
            .collect();
        let peers = rec
            .gateways
            .iter()
            // This gateway's other namespaces on the image are no other path.
            .filter(|(k, _)| gw(k) != me)
            .map(|(k, e)| Peer {
                gateway: e.gateway.clone(),
                state: AnaState::from_code(e.state).unwrap_or(AnaState::Inaccessible),
                fresh: fresh(k, e),
                candidate: e.candidate,
                promoted: e.promoted,
                first: gw(k) < me,
            })
            .collect();
        self.seq += 1;
        rec.gateways.insert(
            self.key.clone(),
            Entry {
                gateway: self.gateway.clone(),
                seq: self.seq,
                every_ms: every.as_millis() as u64,
                state: state.state.code(),
                candidate: state.candidate,
                promoted: state.promoted,
                // A host's cap it is not asked for says nothing: left out,
                // the record stays small.
                demand: demand
                    .iter()
                    .filter(|(k, v)| k.is_empty() || **v > 0.0)
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
            },
        );
        Exchanged {
            record: serialize(&rec),
            parts,
            peers,
            replaced,
        }
    }

    /// `record` without this gateway's entry (it stops serving the image).
    pub fn leave(&self, record: &[u8]) -> Option<Vec<u8>> {
        let mut rec: Record = serde_json::from_slice(record).ok()?;
        rec.gateways.remove(&self.key)?;
        Some(serialize(&rec))
    }
}

fn serialize(rec: &Record) -> Vec<u8> {
    serde_json::to_vec(rec).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::gateway::qos_share::{MAX_DEMAND, SAMPLE};

    fn d(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    const OPTIMIZED: GatewayState = GatewayState {
        state: AnaState::Optimized,
        candidate: false,
        promoted: false,
    };

    /// An exchange with caps (every [`EXCHANGE`]), optimized.
    fn ex(
        g: &mut Roster,
        rec: Option<&[u8]>,
        dm: &BTreeMap<String, f64>,
        now: Instant,
    ) -> Exchanged {
        g.exchange(rec, OPTIMIZED, dm, EXCHANGE, now)
    }

    /// When an entry written every [`EXCHANGE`] is stale.
    const STALE: Duration = Duration::from_secs(1);

    /// Runs an exchange of each gateway in turn on one record at `now`;
    /// returns each one's parts.
    fn round(
        gws: &mut [Roster],
        demand: &[BTreeMap<String, f64>],
        rec: &mut Option<Vec<u8>>,
        now: Instant,
    ) -> Vec<BTreeMap<String, Part>> {
        gws.iter_mut()
            .zip(demand)
            .map(|(g, dm)| {
                let x = ex(g, rec.as_deref(), dm, now);
                assert!(!x.replaced);
                *rec = Some(x.record);
                x.parts
            })
            .collect()
    }

    #[test]
    fn a_lone_gateway_has_the_whole_cap() {
        let mut g = [Roster::new("a", "gw-a")];
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
        let mut g = [Roster::new("a", "gw-a"), Roster::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 30.0), ("h1", 5.0)]), d(&[("", 10.0)])];
        // An entry counts once it moved: from the third round on.
        round(&mut g, &dm, &mut rec, t0);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE);
        assert_eq!((p[0][""].gateways, p[1][""].gateways), (0, 2));
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 2);
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
        round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 3);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 4);
        assert!(p[0][""].part > 0.98 && p[1][""].part < 0.01, "{p:?}");
    }

    #[test]
    fn a_gateway_that_stops_exchanging_loses_its_part_once_stale() {
        let mut g = [Roster::new("a", "gw-a"), Roster::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 20.0)]), d(&[("", 20.0)])];
        round(&mut g, &dm, &mut rec, t0);
        round(&mut g, &dm, &mut rec, t0 + EXCHANGE);
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE * 2);
        assert!((p[0][""].part - 0.5).abs() < 1e-9);
        // B stops (killed): A alone goes on.
        let (a, _) = g.split_at_mut(1);
        let mut at = |t: Duration| {
            let x = ex(&mut a[0], rec.as_deref(), &dm[0], t0 + t);
            let text = String::from_utf8_lossy(&x.record).into_owned();
            rec = Some(x.record);
            (x.parts[""], text)
        };
        // A sees B's last entry at its next exchange; from then on B
        // counts for STALE.
        let seen = EXCHANGE * 3;
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

    /// Issue 57, 8: an entry forged into the record (by anyone who may
    /// write the object) with an absurd demand and a period of
    /// minutes neither takes this gateway's part to nothing nor stays
    /// alive once its sequence stops moving.
    #[test]
    fn a_forged_entry_is_clamped_and_goes_stale() {
        let mut a = Roster::new("a", "gw-a");
        let t0 = Instant::now();
        let dm = d(&[("", 10.0)]);
        let forged = |seq: u64, demand: f64| {
            let mut rec = Record::default();
            rec.gateways.insert(
                "z#1".into(),
                Entry {
                    gateway: "forged".into(),
                    seq,
                    every_ms: 3_600_000,
                    state: AnaState::Optimized.code(),
                    candidate: false,
                    promoted: false,
                    demand: d(&[("", demand)]),
                },
            );
            serialize(&rec)
        };
        // (JSON carries no infinity or NaN: a record with one does not
        // parse, and is replaced.)
        ex(&mut a, Some(&forged(1, 1.0)), &dm, t0);
        for (i, demand) in [1e300, f64::MAX, -5.0].into_iter().enumerate() {
            let x = ex(
                &mut a,
                Some(&forged(2 + i as u64, demand)),
                &dm,
                t0 + EXCHANGE,
            );
            let p = x.parts[""];
            assert_eq!(p.gateways, 2, "counted while it moves");
            assert!(
                p.part >= 10.5 / (10.0 + MAX_DEMAND + 1.0),
                "{demand}: {p:?}"
            );
        }
        // It stops moving: stale within a real period's five (1 s periods
        // at most), not the hour's five it claims.
        let x = ex(&mut a, Some(&forged(4, 1.0)), &dm, t0 + IDLE_EXCHANGE * 6);
        assert_eq!(x.parts[""].part, 1.0);
        assert!(
            x.peers.iter().all(|p| !p.fresh),
            "ok-to-stop and takeover see it dead"
        );
    }

    #[test]
    fn a_gateway_seen_once_counts_once_it_moves_and_one_that_leaves_goes() {
        let mut g = [Roster::new("a", "gw-a"), Roster::new("b", "gw-b")];
        let mut rec = None;
        let t0 = Instant::now();
        let dm = [d(&[("", 20.0)]), d(&[("", 20.0)])];
        // Seen once, an entry may be a dead gateway's: not counted yet.
        let p = round(&mut g, &dm, &mut rec, t0);
        assert_eq!(p[0][""].gateways, 0, "A wrote first, B not there yet");
        assert_eq!(p[1][""].gateways, 0, "A seen once");
        let p = round(&mut g, &dm, &mut rec, t0 + EXCHANGE);
        assert_eq!(p[1][""].gateways, 2, "A moved");
        let out = g[1].leave(rec.as_ref().unwrap()).unwrap();
        let x = ex(&mut g[0], Some(&out), &dm[0], t0 + EXCHANGE * 2);
        assert!(x.peers.is_empty());
        assert_eq!(
            x.parts[""],
            Part {
                part: 1.0,
                gateways: 0
            }
        );
    }

    /// Two gateways (a worker and a limit each: two processes) sharing a
    /// cap through one record, in fake time (steps of 100 µs): the
    /// workers' buckets, the sharers' samples and exchanges.
    struct Pair {
        limits: [Arc<crate::model::qos::Limit>; 2],
        ts: [crate::request::qos::Throttle; 2],
        gws: [Roster; 2],
        rec: Option<Vec<u8>>,
        sums: [f64; 2],
        /// I/Os waiting at each gateway, and done there.
        queued: [usize; 2],
        done: [u64; 2],
        ud: u64,
        t0: Instant,
    }

    impl Pair {
        fn new(iops: u64) -> Pair {
            use crate::model::qos::{Limit, QosCaps};
            use crate::request::qos::Throttle;
            let caps = QosCaps {
                rw_iops: iops,
                ..Default::default()
            };
            Pair {
                limits: [Limit::new(caps, "s", 1, ""), Limit::new(caps, "s", 1, "")],
                ts: [Throttle::new(0, 1), Throttle::new(0, 1)],
                gws: [Roster::new("a", "gw-a"), Roster::new("b", "gw-b")],
                rec: None,
                sums: [0.0; 2],
                queued: [0; 2],
                done: [0; 2],
                ud: 0,
                t0: Instant::now(),
            }
        }

        fn at(&self, step: u64) -> Instant {
            self.t0 + Duration::from_micros(100 * step)
        }

        /// The waiting I/Os of gateway `i` that go at `step`.
        fn ready(&mut self, i: usize, step: u64) -> usize {
            let went = self.ts[i].ready(self.at(step)).len();
            self.queued[i] -= went;
            self.done[i] += went as u64;
            went
        }

        /// An I/O to gateway `i` at `step`: it goes, or waits (true).
        fn submit(&mut self, i: usize, step: u64) -> bool {
            let now = self.at(step);
            if self.ts[i].admit(now, &[&self.limits[i]], true, 4096) {
                self.done[i] += 1;
                return false;
            }
            self.ud += 1;
            self.ts[i].wait(crate::request::qos::Waiter {
                ud: self.ud,
                limits: vec![self.limits[i].clone()],
                read: true,
                bytes: 4096,
                since: now,
                blocked_on: Vec::new(),
                host: 0,
                tag: 0,
            });
            self.queued[i] += 1;
            true
        }

        /// The sharers at `step`: a sample every SAMPLE, an exchange every
        /// EXCHANGE.
        fn share(&mut self, step: u64) {
            let now = self.at(step);
            if step.is_multiple_of(SAMPLE.as_micros() as u64 / 100) {
                for i in 0..2 {
                    self.sums[i] += crate::request::qos::demand_at(&self.limits[i], now) as f64;
                }
            }
            if step.is_multiple_of(EXCHANGE.as_micros() as u64 / 100) {
                let n = (EXCHANGE.as_micros() / SAMPLE.as_micros()) as f64;
                let dm: Vec<_> = self.sums.iter().map(|v| d(&[("", v / n)])).collect();
                for (i, p) in round(&mut self.gws, &dm, &mut self.rec, now)
                    .iter()
                    .enumerate()
                {
                    self.limits[i].set_part(p[""].part, p[""].gateways);
                }
                self.sums = [0.0; 2];
            }
        }
    }

    #[test]
    fn a_gateway_whose_host_turns_to_it_gets_its_part_within_a_second() {
        // A cap of 2,000 IOPS; each host keeps 16 I/Os queued at its
        // gateway (closed loop). A's host runs alone for 2 s, then B's
        // starts: within a second B has close to half.
        let mut p = Pair::new(2000);
        for s in 0..40_000u64 {
            if s == 30_000 {
                p.done = [0, 0];
            }
            for i in 0..2 {
                if i == 1 && s < 20_000 {
                    continue;
                }
                p.ready(i, s);
                for _ in 0..(16 - p.queued[i]) {
                    p.submit(i, s);
                }
            }
            p.share(s);
        }
        let done = p.done;
        let total = (done[0] + done[1]) as f64;
        assert!((1_800.0..=2_200.0).contains(&total), "{done:?} in 1 s");
        assert!(done[1] as f64 / total >= 0.4, "{done:?}");
    }

    #[test]
    fn a_host_that_splits_its_io_evenly_gets_the_cap() {
        // A host's multipath round-robin sends every other I/O to each
        // gateway (32 outstanding in all): it gets twice the smaller part,
        // so the parts must stay even. Cap 400 IOPS, as in the lab.
        let mut p = Pair::new(400);
        let (mut next, mut outstanding) = (0usize, 0usize);
        for s in 0..200_000u64 {
            if s == 50_000 {
                p.done = [0, 0];
            }
            for i in 0..2 {
                outstanding -= p.ready(i, s);
            }
            while outstanding < 32 {
                if p.submit(next, s) {
                    outstanding += 1;
                }
                next = 1 - next;
            }
            p.share(s);
        }
        let done = p.done;
        let iops = (done[0] + done[1]) as f64 / 15.0;
        assert!(
            (380.0..=410.0).contains(&iops),
            "{done:?}: {iops} IOPS of 400"
        );
    }

    #[test]
    fn a_record_that_cannot_be_read_is_replaced() {
        let mut b = Roster::new("a", "gw-a");
        let x = ex(&mut b, Some(b"{not json"), &d(&[("", 1.0)]), Instant::now());
        assert!(x.replaced);
        assert_eq!(x.parts[""].part, 1.0);
        let rec: Record = serde_json::from_slice(&x.record).unwrap();
        assert_eq!(rec.gateways["a"].seq, 1);
        assert!(b.leave(b"[]").is_none());
        // Too large (whatever it holds): replaced too.
        let big = format!(
            "{{\"gateways\":{{}},\"pad\":\"{}\"}}",
            "x".repeat(MAX_RECORD)
        );
        let x = ex(
            &mut b,
            Some(big.as_bytes()),
            &d(&[("", 1.0)]),
            Instant::now(),
        );
        assert!(x.replaced);
        assert!(x.record.len() < 1000);
    }

    #[test]
    fn each_gateway_sees_the_others_states_and_who_is_alive() {
        let mut a = Roster::new("a", "gw-a");
        let mut b = Roster::new("b", "gw-b");
        let t0 = Instant::now();
        let none = BTreeMap::new();
        let standby = GatewayState {
            state: AnaState::NonOptimized,
            candidate: true,
            promoted: false,
        };
        let x = a.exchange(None, OPTIMIZED, &none, IDLE_EXCHANGE, t0);
        let y = b.exchange(Some(&x.record), standby, &none, IDLE_EXCHANGE, t0);
        assert_eq!(
            y.peers,
            vec![Peer {
                gateway: "gw-a".into(),
                state: AnaState::Optimized,
                fresh: false,
                candidate: false,
                promoted: false,
                first: true,
            }],
            "seen once: maybe a dead gateway's entry"
        );
        assert!(y.parts.is_empty(), "no caps, no parts");
        let x = a.exchange(Some(&y.record), OPTIMIZED, &none, IDLE_EXCHANGE, t0);
        assert_eq!(x.peers.len(), 1);
        // The same gateway's other entries (another namespace of the image)
        // are no peers.
        let mut a2 = Roster::new("a#2", "gw-a");
        let mut a1 = Roster::new("a#1", "gw-a");
        let z = a1.exchange(Some(&x.record), OPTIMIZED, &none, IDLE_EXCHANGE, t0);
        let z = a2.exchange(Some(&z.record), OPTIMIZED, &none, IDLE_EXCHANGE, t0);
        assert_eq!(z.peers.len(), 1, "b only: a and a#1 are this gateway's");
        assert_eq!(z.peers[0].gateway, "gw-b");
        assert!(x.peers[0].candidate && !x.peers[0].first);
        assert_eq!(x.peers[0].state, AnaState::NonOptimized);
        // A written every second is stale after five (by B's clock, from
        // when B saw it change).
        let t = |s: u64| t0 + Duration::from_secs(s);
        let y = b.exchange(Some(&x.record), standby, &none, IDLE_EXCHANGE, t(1));
        assert!(y.peers[0].fresh);
        let y = b.exchange(
            Some(&y.record),
            standby,
            &none,
            IDLE_EXCHANGE,
            t(5) + Duration::from_millis(999),
        );
        assert!(y.peers[0].fresh);
        let y = b.exchange(Some(&y.record), standby, &none, IDLE_EXCHANGE, t(6));
        assert!(!y.peers[0].fresh);
    }

    #[test]
    fn host_caps_nobody_asks_for_stay_out_of_the_record() {
        let mut a = Roster::new("a", "gw-a");
        let x = ex(
            &mut a,
            None,
            &d(&[("", 0.0), ("nqn.h1", 0.0), ("nqn.h2", 3.0)]),
            Instant::now(),
        );
        let text = String::from_utf8_lossy(&x.record);
        assert!(
            text.contains("nqn.h2") && !text.contains("nqn.h1"),
            "{text}"
        );
        assert_eq!(x.parts.len(), 3);
    }
}
