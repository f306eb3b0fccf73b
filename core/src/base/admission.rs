//! Admission of queues that have not connected yet. Every connection costs
//! memory before its peer has sent a Fabrics Connect, let alone proven who
//! it is (an RDMA queue pair with its receive buffers, a TCP socket, a TLS
//! handshake's thread), so such "pending" queues are capped per peer
//! address and in total. A queue stops being pending when its Connect
//! succeeds or when it goes.
//!
//! A cap reached does not keep a newcomer out: an [`Admission::evicting`]
//! table makes room by evicting the oldest pending queue of the address that
//! holds the most (the newcomer's own oldest when its address is at its
//! cap, or holds the most itself). Peers that hold their places with
//! stalled connections, from however many addresses, cannot keep a host
//! from a new address from connecting: they lose their oldest places
//! instead. An evicted queue's holder is told at once (the kick it set, as
//! a socket shut down under a blocked handshake) and sees
//! [`Pending::evicted`].
//!
//! A [`Admission::refusing`] table refuses at its caps instead (the metrics
//! endpoint's connections, which nothing can evict).
//!
//! Sans-IO: the caller passes the time; [`Pending`] gives its place back when
//! dropped.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::log_limit::PeerLogLimit;
use crate::base::peer_table::PeerTable;

/// Why a queue was not admitted, or why one lost its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer has its share of pending queues.
    PerPeer,
    /// The target has its total of pending queues.
    Total,
}

impl Refusal {
    /// The reason as counted in the rejections metric.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::PerPeer => "pending_per_peer",
            Refusal::Total => "pending_total",
        }
    }

    /// The reason an evicted queue is counted under.
    pub fn evicted_reason(self) -> &'static str {
        match self {
            Refusal::PerPeer => "pending_evicted_per_peer",
            Refusal::Total => "pending_evicted_total",
        }
    }
}

/// What tells a pending queue's holder that it lost its place.
type Kick = Box<dyn Fn() + Send>;

/// What a pending queue's place keeps.
struct Entry {
    evicted: Arc<AtomicBool>,
    kick: Option<Kick>,
}

type State = PeerTable<Entry>;

/// The pending-queue counts and caps.
pub struct Admission {
    per_peer: u32,
    total: u32,
    evict: bool,
    state: Mutex<State>,
    log: PeerLogLimit,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("per_peer", &self.per_peer)
            .field("total", &self.total)
            .field("evict", &self.evict)
            .finish_non_exhaustive()
    }
}

/// A pending queue's place; given back when dropped.
pub struct Pending {
    adm: Arc<Admission>,
    peer: IpAddr,
    id: u64,
    evicted: Arc<AtomicBool>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("peer", &self.peer)
            .field("id", &self.id)
            .field("evicted", &self.evicted())
            .finish()
    }
}

/// A queue admitted, and the place that was taken for it, if any.
#[derive(Debug)]
pub struct Admitted {
    /// Its place.
    pub pending: Pending,
    /// The address whose oldest pending queue lost its place to this one,
    /// and which cap was reached.
    pub evicted: Option<(IpAddr, Refusal)>,
}

impl Admission {
    /// Caps of `per_peer` pending queues per address and `total` in all; at
    /// a cap, the oldest queue of the address holding the most makes room.
    pub fn evicting(per_peer: u32, total: u32) -> Arc<Admission> {
        Self::with(per_peer, total, true)
    }

    /// Caps of `per_peer` pending queues per address and `total` in all; at
    /// a cap, a newcomer is refused.
    pub fn refusing(per_peer: u32, total: u32) -> Arc<Admission> {
        Self::with(per_peer, total, false)
    }

    fn with(per_peer: u32, total: u32, evict: bool) -> Arc<Admission> {
        Arc::new(Admission {
            per_peer,
            total,
            evict,
            state: Mutex::new(State::default()),
            log: PeerLogLimit::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a queue from `peer`, evicting another if a cap is reached
    /// (an evicting table), or says which cap it meets.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        let mut st = self.state();
        let mine = st.count(peer);
        let cap = if mine >= self.per_peer {
            Some(Refusal::PerPeer)
        } else if st.len() >= self.total as usize {
            Some(Refusal::Total)
        } else {
            None
        };
        let mut evicted = None;
        if let Some(why) = cap {
            if !self.evict || self.per_peer == 0 || self.total == 0 {
                return Err(why);
            }
            let from = match why {
                Refusal::PerPeer => peer,
                Refusal::Total => st.fullest().map_or(peer, |(p, _)| p),
            };
            if let Some(e) = st.evict_oldest_of(from) {
                e.evicted.store(true, Ordering::Release);
                if let Some(k) = &e.kick {
                    k();
                }
                evicted = Some((from, why));
            }
        }
        let flag = Arc::new(AtomicBool::new(false));
        let id = st.push(
            peer,
            Entry {
                evicted: flag.clone(),
                kick: None,
            },
        );
        Ok(Admitted {
            pending: Pending {
                adm: self.clone(),
                peer,
                id,
                evicted: flag,
            },
            evicted,
        })
    }

    /// Whether a refusal or eviction at `peer` at `now` is to be logged
    /// (see [`PeerLogLimit`]).
    pub fn should_log(&self, peer: IpAddr, now: Instant) -> bool {
        self.log.should_log(peer, now)
    }

    /// Pending queues of `peer`, and in all.
    pub fn counts(&self, peer: IpAddr) -> (u32, u32) {
        let st = self.state();
        (st.count(peer), st.len() as u32)
    }
}

impl Pending {
    /// The peer address it was admitted for.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// Whether it lost its place to a newer queue: its holder is to end it.
    pub fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Sets what tells its holder at once that it lost its place (shuts a
    /// socket down, say); run now if it already did.
    pub fn on_evict(&self, kick: impl Fn() + Send + 'static) {
        let mut st = self.adm.state();
        match st.get_mut(self.id) {
            Some(e) => e.kick = Some(Box::new(kick)),
            None => kick(),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = self.adm.state();
        // Not there once evicted: its place went to another.
        st.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_refusing_table_caps_per_peer_and_in_total() {
        let a = Admission::refusing(2, 3);
        let (x, y) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let p1 = a.admit(x).unwrap().pending;
        let p2 = a.admit(x).unwrap().pending;
        assert_eq!(a.admit(x).unwrap_err(), Refusal::PerPeer);
        let p3 = a.admit(y).unwrap().pending;
        assert_eq!(a.admit(y).unwrap_err(), Refusal::Total);
        assert_eq!(a.admit(ip("10.0.0.3")).unwrap_err(), Refusal::Total);
        assert_eq!(a.counts(x), (2, 3));
        drop(p1);
        assert_eq!(a.counts(x), (1, 2));
        let p4 = a.admit(y).unwrap().pending;
        assert_eq!(a.admit(y).unwrap_err(), Refusal::PerPeer);
        drop((p2, p3, p4));
        assert_eq!(a.counts(x), (0, 0));
        assert_eq!(a.state().peers(), 0, "no entry left for gone peers");
        assert!(a.state().is_empty());
        assert_eq!(Refusal::PerPeer.reason(), "pending_per_peer");
    }

    /// Issue 57, 2: peers at their caps lose their oldest places to a
    /// newcomer; the newcomer's address is never refused.
    #[test]
    fn at_a_cap_the_fullest_address_loses_its_oldest_place() {
        let a = Admission::evicting(3, 6);
        let kicked = Arc::new(AtomicU32::new(0));
        let hog = ip("10.0.0.1");
        let other = ip("10.0.0.2");
        let mut held = Vec::new();
        for _ in 0..3 {
            let p = a.admit(hog).unwrap();
            assert!(p.evicted.is_none());
            let k = kicked.clone();
            p.pending.on_evict(move || {
                k.fetch_add(1, Ordering::Relaxed);
            });
            held.push(p.pending);
        }
        // The per-address cap: the hog's own oldest goes.
        let p = a.admit(hog).unwrap();
        assert_eq!(p.evicted, Some((hog, Refusal::PerPeer)));
        assert!(held[0].evicted() && !held[1].evicted());
        assert_eq!(kicked.load(Ordering::Relaxed), 1, "told at once");
        held.push(p.pending);
        assert_eq!(a.counts(hog), (3, 3));
        for _ in 0..2 {
            held.push(a.admit(other).unwrap().pending);
        }
        held.push(a.admit(ip("10.0.0.3")).unwrap().pending);
        assert_eq!(a.counts(hog), (3, 6));
        // The total: the address holding the most (the hog, 3) loses its
        // oldest still there (held[1]).
        let new = ip("10.0.0.9");
        let p = a.admit(new).unwrap();
        assert_eq!(p.evicted, Some((hog, Refusal::Total)));
        assert!(held[1].evicted() && !held[2].evicted());
        assert_eq!(kicked.load(Ordering::Relaxed), 2);
        assert_eq!((a.counts(hog).0, a.counts(new)), (2, (1, 6)));
        // Among equals (hog 2, other 2), the one whose oldest is oldest.
        let p2 = a.admit(ip("10.0.0.10")).unwrap();
        assert_eq!(p2.evicted, Some((hog, Refusal::Total)));
        assert!(held[2].evicted());
        assert_eq!(kicked.load(Ordering::Relaxed), 3);
        // An evicted place dropped later gives nothing back twice.
        let before = a.counts(hog);
        held.remove(0);
        held.remove(0);
        assert_eq!(a.counts(hog), before);
        drop((held, p, p2));
        assert_eq!(a.counts(hog), (0, 0));
        assert_eq!(a.state().peers(), 0);
        // A kick set after the eviction runs at once.
        let a = Admission::evicting(1, 4);
        let first = a.admit(hog).unwrap().pending;
        let _second = a.admit(hog).unwrap();
        let k = kicked.clone();
        first.on_evict(move || {
            k.fetch_add(10, Ordering::Relaxed);
        });
        assert_eq!(kicked.load(Ordering::Relaxed), 13);
    }

    /// 16 addresses each at its cap: every newcomer from a new address is
    /// admitted, and the flooders never hold more than the total.
    #[test]
    fn a_flood_from_many_addresses_never_keeps_a_new_address_out() {
        let a = Admission::evicting(16, 64);
        let mut held = Vec::new();
        for round in 0..10 {
            for i in 0..16u8 {
                for _ in 0..16 {
                    let p = a.admit(IpAddr::from([10, 1, 0, i])).unwrap();
                    held.push(p.pending);
                }
            }
            held.retain(|p| !p.evicted());
            assert_eq!(held.len(), 64);
            let host = a.admit(IpAddr::from([10, 2, 0, round])).unwrap();
            assert!(host.evicted.is_some());
            assert!(!host.pending.evicted());
            assert_eq!(a.counts(IpAddr::from([10, 2, 0, round])), (1, 64));
        }
    }
}
