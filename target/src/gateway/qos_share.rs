//! QoS caps held across the gateways of one shared store: each gateway's
//! part of a cap is its demand (I/Os per worker period, sampled from its
//! workers' buckets, [`demand_at`]) over the sum of the live gateways' (plus
//! a little, [`FLOOR`], so that an idle gateway whose host turns to it is
//! not at zero): the parts add up to the cap and follow the hosts' I/O
//! within an exchange or two (docs/configuration.md, "QoS across
//! gateways"). The demands travel in the gateways' record
//! ([`super::roster`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::qos::{Limit, NsQos};
use crate::request::qos::demand_at;

/// How often the demand is sampled between exchanges (averaged).
pub const SAMPLE: Duration = Duration::from_millis(50);
/// The demand every live gateway counts as having (I/Os per worker
/// period), so that an idle one keeps a small part.
const FLOOR: f64 = 0.5;
/// The largest demand an entry counts with (I/Os per worker period): an
/// entry is written by whoever may write the object, and one claiming an
/// infinite demand must not take every other gateway's part to nothing.
pub(crate) const MAX_DEMAND: f64 = 1e6;

/// A demand as read from an entry: finite, within [0, MAX_DEMAND].
fn clamp_demand(d: f64) -> f64 {
    if d.is_finite() {
        d.clamp(0.0, MAX_DEMAND)
    } else {
        0.0
    }
}

/// This gateway's part of one cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// Its part of the cap, in (0, 1].
    pub part: f64,
    /// How many live gateways share the cap, this one among them (0: it
    /// is not shared).
    pub gateways: u32,
}

impl Part {
    /// This gateway's part, asking `own`, beside the live gateways that ask
    /// `others` of the same cap.
    pub fn of(own: f64, others: impl Iterator<Item = f64>) -> Part {
        let own = own.max(0.0);
        let (sum, n) = others.fold((0.0, 0u32), |(s, n), d| (s + clamp_demand(d), n + 1));
        let part = match n {
            0 => 1.0,
            _ => (own + FLOOR) / (own + sum + FLOOR * (n + 1) as f64),
        };
        let gateways = if n == 0 { 0 } else { n + 1 };
        Part { part, gateways }
    }
}

/// A namespace's caps, by the cap's host (`""`: the namespace's cap, all
/// hosts).
pub fn limits(qos: Option<&NsQos>) -> Vec<(&str, &Arc<Limit>)> {
    qos.iter()
        .flat_map(|q| {
            q.all
                .iter()
                .map(|l| ("", l))
                .chain(q.hosts.iter().map(|(h, l)| (h.as_str(), l)))
        })
        .collect()
}

/// What this gateway's hosts ask of each cap, sampled between exchanges.
#[derive(Debug, Default)]
pub struct Demand {
    sums: BTreeMap<String, f64>,
    samples: u32,
}

impl Demand {
    /// One sample of `limits` at `now` (caps that went are forgotten).
    pub fn sample(&mut self, limits: &[(&str, &Arc<Limit>)], now: Instant) {
        self.sums.retain(|k, _| limits.iter().any(|(h, _)| h == k));
        if limits.is_empty() {
            return;
        }
        for (h, l) in limits {
            *self.sums.entry(h.to_string()).or_default() += demand_at(l, now) as f64;
        }
        self.samples += 1;
    }

    /// The average demand of each cap since the last, for an exchange.
    pub fn take(&mut self) -> BTreeMap<String, f64> {
        let n = self.samples.max(1) as f64;
        let out = self.sums.iter().map(|(k, v)| (k.clone(), v / n)).collect();
        self.sums.clear();
        self.samples = 0;
        out
    }
}

/// Each cap takes this gateway's part of it.
pub fn apply(limits: &[(&str, &Arc<Limit>)], parts: &BTreeMap<String, Part>) {
    for (h, l) in limits {
        if let Some(p) = parts.get(*h) {
            l.set_part(p.part, p.gateways);
        }
    }
}

/// The record cannot be reached: the others see this gateway stale after
/// a second and take its part, so from then on it takes at most an equal
/// share among the `gateways` it last saw alive, itself included (the
/// store may get that much over its cap while the record cannot be reached
/// and its I/O can).
pub fn at_most_equal(limits: &[(&str, &Arc<Limit>)], gateways: usize) {
    let equal = 1.0 / gateways.max(1) as f64;
    for (_, l) in limits {
        l.set_part(l.part().min(equal), l.gateways());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::qos::QosCaps;

    #[test]
    fn parts_follow_the_demands_and_add_up() {
        assert_eq!(
            Part::of(5.0, std::iter::empty()),
            Part {
                part: 1.0,
                gateways: 0
            }
        );
        let a = Part::of(10.0, [30.0].into_iter());
        let b = Part::of(30.0, [10.0].into_iter());
        assert_eq!((a.gateways, b.gateways), (2, 2));
        assert!((a.part + b.part - 1.0).abs() < 1e-9, "{a:?} {b:?}");
        assert!(a.part < 0.27 && a.part > 0.25, "{a:?}");
        // A forged demand counts as at most MAX_DEMAND; an idle gateway keeps
        // its floor.
        let idle = Part::of(0.0, [f64::INFINITY, f64::NAN, 1e300].into_iter());
        assert_eq!(idle.gateways, 4);
        assert!(
            idle.part >= FLOOR / (2.0 * MAX_DEMAND + 4.0 * FLOOR),
            "{idle:?}"
        );
    }

    #[test]
    fn demand_is_averaged_between_exchanges_and_parts_apply() {
        let caps = QosCaps {
            rw_iops: 1000,
            ..Default::default()
        };
        let l = Limit::new(caps, "s", 1, "");
        let limits = vec![("", &l)];
        let mut d = Demand::default();
        let t = Instant::now();
        d.sample(&limits, t);
        d.sample(&limits, t);
        let taken = d.take();
        assert_eq!(taken.keys().collect::<Vec<_>>(), vec![""]);
        assert!(d.take().is_empty(), "reset after each exchange");
        d.sample(&[], t);
        assert!(d.take().is_empty(), "no caps, no demand");
        let parts = BTreeMap::from([(
            String::new(),
            Part {
                part: 0.25,
                gateways: 4,
            },
        )]);
        apply(&limits, &parts);
        assert_eq!((l.part(), l.gateways()), (0.25, 4));
        at_most_equal(&limits, 2);
        assert_eq!(l.part(), 0.25, "already below an equal share");
        l.set_part(0.9, 2);
        at_most_equal(&limits, 3);
        assert!((l.part() - 1.0 / 3.0).abs() < 1e-9);
    }
}
