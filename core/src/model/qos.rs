//! Quality of service: the caps of a namespace, and of each host on it, as
//! SPDK's bdev QoS and ceph-nvmeof's `set_qos` name them (`rw_iops`,
//! `rw_mbps`, `r_mbps`, `w_mbps`; 0: no cap; a MB is 2^20 bytes, as
//! SPDK's). Each cap is a [`Limit`] the workers share: every worker keeps
//! its own token bucket at its share of the rate (no lock, no shared write
//! on the data path) and the shares follow where the I/O is
//! ([`crate::request::qos`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::base::shard::Padded;

/// Bytes in a MB of a cap.
pub const MB: u64 = 1 << 20;
/// A slot of demand per worker, for as many workers as `[target] workers`
/// allows (two workers on one slot would undercount, and over-share).
const DEMAND_SLOTS: usize = crate::base::shard::MAX_WORKERS;

/// The caps of a namespace, or of a host on it (0: no cap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QosCaps {
    /// Reads and writes per second.
    pub rw_iops: u64,
    /// MB read and written per second.
    pub rw_mbps: u64,
    /// MB read per second.
    pub r_mbps: u64,
    /// MB written per second.
    pub w_mbps: u64,
}

impl QosCaps {
    /// Whether nothing is capped.
    pub fn is_none(&self) -> bool {
        *self == QosCaps::default()
    }

    /// The caps as rates: I/Os, bytes, bytes read, bytes written per second.
    pub fn rates(&self) -> [u64; 4] {
        [
            self.rw_iops,
            self.rw_mbps.saturating_mul(MB),
            self.r_mbps.saturating_mul(MB),
            self.w_mbps.saturating_mul(MB),
        ]
    }
}

impl std::fmt::Display for QosCaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("rw_iops", self.rw_iops),
            ("rw_mbps", self.rw_mbps),
            ("r_mbps", self.r_mbps),
            ("w_mbps", self.w_mbps),
        ]
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
        match parts.is_empty() {
            true => write!(f, "none"),
            false => write!(f, "{}", parts.join(", ")),
        }
    }
}

/// A host's caps on a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCaps {
    /// The host's NQN.
    pub host: String,
    /// Its caps.
    pub caps: QosCaps,
}

/// One cap the workers share: its rates (changed live), and what each
/// worker asked of it lately (each worker writes its own slot, a few times
/// a second).
#[derive(Debug)]
pub struct Limit {
    /// Unique in the process: the workers' buckets are keyed by it.
    pub id: u64,
    /// I/Os, bytes, bytes read, bytes written per second (0: none).
    rates: [AtomicU64; 4],
    demand: Box<[Padded<AtomicU64>]>,
    /// No namespace holds it any more (the workers drop their buckets).
    retired: std::sync::atomic::AtomicBool,
    /// This gateway's part of the rates (f64 bits; 1.0 unless gateways
    /// serving the same RBD image share the cap).
    part: AtomicU64,
    /// How many gateways share the cap now, this one among them (0: not
    /// shared).
    gateways: std::sync::atomic::AtomicU32,
    /// For metrics and logs: the subsystem, the nsid and the host ("" for
    /// the namespace's own cap).
    pub subsystem: String,
    /// See `subsystem`.
    pub nsid: u32,
    /// See `subsystem`.
    pub host: String,
}

impl Limit {
    /// A limit of `caps`.
    pub fn new(caps: QosCaps, subsystem: &str, nsid: u32, host: &str) -> Arc<Limit> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let l = Limit {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            rates: Default::default(),
            demand: (0..DEMAND_SLOTS)
                .map(|_| Padded(AtomicU64::new(0)))
                .collect(),
            retired: Default::default(),
            part: AtomicU64::new(1f64.to_bits()),
            gateways: Default::default(),
            subsystem: subsystem.into(),
            nsid,
            host: host.into(),
        };
        l.set(caps);
        Arc::new(l)
    }

    /// Takes new caps (the workers' buckets follow within a period).
    pub fn set(&self, caps: QosCaps) {
        for (r, v) in self.rates.iter().zip(caps.rates()) {
            r.store(v, Ordering::Relaxed);
        }
    }

    /// The rates now.
    pub fn rates(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.rates[i].load(Ordering::Relaxed))
    }

    /// The caps now.
    pub fn caps(&self) -> QosCaps {
        let r = self.rates();
        QosCaps {
            rw_iops: r[0],
            rw_mbps: r[1] / MB,
            r_mbps: r[2] / MB,
            w_mbps: r[3] / MB,
        }
    }

    /// Worker `w` asked for `n` I/Os in period `period` (a count of
    /// periods since a common start).
    pub fn publish_demand(&self, w: usize, period: u32, n: u64) {
        let v = (period as u64) << 32 | n.min(u32::MAX as u64);
        self.demand[w % self.demand.len()]
            .0
            .store(v, Ordering::Relaxed);
    }

    /// What the workers asked in the periods just before `period`, summed,
    /// and how many asked (a worker that published nothing lately, its
    /// host gone or idle, asks nothing and is not counted).
    pub fn demand(&self, period: u32) -> (u64, usize) {
        self.demand
            .iter()
            .map(|d| d.0.load(Ordering::Relaxed))
            .filter(|v| v >> 32 != 0 && (v >> 32) as u32 + 2 >= period)
            .fold((0, 0), |(sum, n), v| (sum + (v & u32::MAX as u64), n + 1))
    }

    /// This gateway's part of the cap (1.0 unless shared with other
    /// gateways): its workers' buckets fill at the rates times this.
    pub fn part(&self) -> f64 {
        f64::from_bits(self.part.load(Ordering::Relaxed))
    }

    /// How many gateways share the cap now, this one among them (0: it is
    /// not shared).
    pub fn gateways(&self) -> u32 {
        self.gateways.load(Ordering::Relaxed)
    }

    /// Takes `part` of the cap (in (0, 1]), shared by `gateways` gateways.
    pub fn set_part(&self, part: f64, gateways: u32) {
        let part = if part.is_finite() {
            part.clamp(1e-6, 1.0)
        } else {
            1.0
        };
        self.part.store(part.to_bits(), Ordering::Relaxed);
        self.gateways.store(gateways, Ordering::Relaxed);
    }

    /// No namespace holds it any more.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Whether it was retired.
    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }
}

/// A namespace's caps: its own, and its hosts'.
#[derive(Debug, Default)]
pub struct NsQos {
    /// The namespace's cap (all hosts together).
    pub all: Option<Arc<Limit>>,
    /// Each capped host's.
    pub hosts: Vec<(String, Arc<Limit>)>,
}

impl NsQos {
    /// Retires every limit (its namespace goes).
    pub fn retire_all(&self) {
        for l in self.all.iter().chain(self.hosts.iter().map(|(_, l)| l)) {
            l.retire();
        }
    }

    /// Whether anything is capped.
    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.hosts.is_empty()
    }

    /// The limits an I/O of `host` takes tokens from (at most two).
    pub fn limits_for<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Arc<Limit>> + 'a {
        self.all.iter().chain(
            self.hosts
                .iter()
                .filter(move |(h, _)| h == host)
                .map(|(_, l)| l),
        )
    }

    /// These caps, keeping the limits (and so the workers' buckets) of
    /// caps that stay.
    pub fn with(&self, subsystem: &str, nsid: u32, all: QosCaps, hosts: &[HostCaps]) -> NsQos {
        // Limits not carried over are retired.
        for l in self.all.iter().chain(self.hosts.iter().map(|(_, l)| l)) {
            let stays = match &l.host[..] {
                "" => !all.is_none(),
                h => hosts.iter().any(|x| x.host == h && !x.caps.is_none()),
            };
            if !stays {
                l.retire();
            }
        }
        let keep = |old: Option<&Arc<Limit>>, caps: QosCaps, host: &str| {
            if caps.is_none() {
                return None;
            }
            Some(match old {
                Some(l) => {
                    l.set(caps);
                    l.clone()
                }
                None => Limit::new(caps, subsystem, nsid, host),
            })
        };
        NsQos {
            all: keep(self.all.as_ref(), all, ""),
            hosts: hosts
                .iter()
                .filter_map(|h| {
                    let old = self
                        .hosts
                        .iter()
                        .find(|(x, _)| *x == h.host)
                        .map(|(_, l)| l);
                    keep(old, h.caps, &h.host).map(|l| (h.host.clone(), l))
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_keep_their_limits_across_changes() {
        let caps = QosCaps {
            rw_iops: 2000,
            ..Default::default()
        };
        let h = |host: &str, iops| HostCaps {
            host: host.into(),
            caps: QosCaps {
                rw_iops: iops,
                ..Default::default()
            },
        };
        let q = NsQos::default().with("s", 1, caps, &[h("a", 100)]);
        let (all, a) = (q.all.clone().unwrap(), q.hosts[0].1.clone());
        assert_eq!(q.limits_for("a").count(), 2);
        assert_eq!(q.limits_for("b").count(), 1);
        let q2 = q.with(
            "s",
            1,
            QosCaps {
                rw_mbps: 10,
                ..caps
            },
            &[h("a", 50), h("b", 7)],
        );
        assert_eq!(
            q2.all.as_ref().unwrap().id,
            all.id,
            "the same limit, new rates"
        );
        assert_eq!(all.rates(), [2000, 10 << 20, 0, 0]);
        assert_eq!(q2.hosts[0].1.id, a.id);
        assert_eq!(a.caps().rw_iops, 50);
        assert_eq!(q2.hosts[1].1.caps().rw_iops, 7);
        let q3 = q2.with("s", 1, QosCaps::default(), &[]);
        assert!(q3.is_empty());
        assert_eq!(format!("{}", all.caps()), "rw_iops 2000, rw_mbps 10");
    }
}
