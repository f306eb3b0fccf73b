//! Controllers whose host has not proven who it is yet: made by an admin
//! Connect that named a host with a key, and not yet authenticated. A host
//! NQN travels in clear, so anyone can make such a controller in a keyed
//! host's name; until it authenticates it takes none of that host's places
//! (`max_controllers_per_host` counts proven controllers only) but one of
//! these, capped per peer address and in total.
//!
//! When the total is reached, a newcomer takes the place of the oldest
//! unproven controller of the peer that holds the most, as long as that
//! peer holds more than the newcomer's peer: a peer flooding from many
//! addresses cannot keep a host from starting to authenticate, only from
//! its own addresses.
//!
//! Sans-IO: the caller revokes the controller that lost its place.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::base::peer_table::PeerTable;
use crate::model::controller::Controller;

/// Default cap per peer address.
pub const DEFAULT_PER_PEER: u32 = 8;
/// Default cap in all.
pub const DEFAULT_TOTAL: u32 = 64;

/// The address counted for a controller whose transport gave none (the
/// in-process loopback).
pub const NO_ADDRESS: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// Why an unproven controller was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer holds its share.
    PerPeer,
    /// The total is reached and no peer holds more than this one.
    Total,
}

impl Refusal {
    /// The reason as counted in the rejections metric.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::PerPeer => "unauthenticated_per_peer",
            Refusal::Total => "unauthenticated_total",
        }
    }
}

/// The controllers holding places, in the order they were admitted.
type State = PeerTable<Weak<Controller>>;

/// The unproven controllers of a target.
#[derive(Debug)]
pub struct Unproven {
    per_peer: AtomicU32,
    total: AtomicU32,
    state: Mutex<State>,
}

/// An unproven controller's place: given back when dropped (the controller
/// authenticated or went).
#[derive(Debug)]
pub struct Place {
    table: Arc<Unproven>,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut st = self.table.state();
        st.remove(self.id);
        publish(st.len());
    }
}

fn publish(n: usize) {
    crate::counters::meter().unauthenticated_controllers(n);
}

impl Default for Unproven {
    fn default() -> Self {
        Unproven {
            per_peer: AtomicU32::new(DEFAULT_PER_PEER),
            total: AtomicU32::new(DEFAULT_TOTAL),
            state: Mutex::new(State::default()),
        }
    }
}

impl Unproven {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the caps (a reload may change them; places held stay).
    pub fn set_caps(&self, per_peer: u32, total: u32) {
        self.per_peer.store(per_peer.max(1), Ordering::Relaxed);
        self.total.store(total.max(1), Ordering::Relaxed);
    }

    /// Admits `ctrl`, made for a host at `peer`. On success, returns its
    /// place and the controller that lost its place to it, if any (the
    /// caller revokes it).
    pub fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        ctrl: &Arc<Controller>,
    ) -> Result<(Place, Option<Arc<Controller>>), Refusal> {
        let mut st = self.state();
        // Entries whose controller is gone without dropping its place (never
        // expected; kept bounded all the same).
        st.retain(|c| c.strong_count() > 0);
        let mine = st.count(peer);
        if mine >= self.per_peer.load(Ordering::Relaxed) {
            return Err(Refusal::PerPeer);
        }
        let mut evicted = None;
        if st.len() >= self.total.load(Ordering::Relaxed) as usize {
            // The oldest place of the peer holding the most (the first
            // admitted among equals), if it holds more than this one.
            match st.fullest() {
                Some((p, n)) if n > mine => {
                    evicted = st.evict_oldest_of(p).and_then(|c| c.upgrade());
                }
                _ => return Err(Refusal::Total),
            }
        }
        let id = st.push(peer, Arc::downgrade(ctrl));
        publish(st.len());
        Ok((
            Place {
                table: self.clone(),
                id,
            },
            evicted,
        ))
    }

    /// Unproven controllers of `peer`, and in all.
    pub fn counts(&self, peer: IpAddr) -> (usize, usize) {
        let st = self.state();
        (st.count(peer) as usize, st.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::subsystem::{Subsystem, SubsystemKind};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ctrl(id: u16) -> Arc<Controller> {
        let s = Arc::new(Subsystem::new(
            "nqn.t:s".into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "m".into(),
            vec![],
        ));
        Arc::new(Controller::new(
            id,
            s,
            &crate::model::subsystem::NewController::of("nqn.h", [1; 16], 0),
        ))
    }

    #[test]
    fn caps_per_peer_then_the_biggest_peer_gives_way() {
        let t = Arc::new(Unproven::default());
        t.set_caps(2, 3);
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        let cs: Vec<_> = (1..=8).map(ctrl).collect();
        let p1 = t.admit(a, &cs[0]).unwrap();
        let p2 = t.admit(a, &cs[1]).unwrap();
        assert!(p1.1.is_none() && p2.1.is_none());
        assert_eq!(t.admit(a, &cs[2]).unwrap_err(), Refusal::PerPeer);
        let p3 = t.admit(b, &cs[2]).unwrap();
        assert_eq!(t.counts(a), (2, 3));
        // Full: c (none held) takes the place of a's oldest.
        let (p4, gone) = t.admit(c, &cs[3]).unwrap();
        assert!(Arc::ptr_eq(&gone.unwrap(), &cs[0]));
        assert_eq!(t.counts(a), (1, 3));
        // Now every peer holds one: b's second is refused, a's too.
        assert_eq!(t.admit(b, &cs[4]).unwrap_err(), Refusal::Total);
        assert_eq!(t.admit(a, &cs[4]).unwrap_err(), Refusal::Total);
        // The evicted place's drop does not free another's.
        drop(p1);
        assert_eq!(t.counts(a), (1, 3));
        drop(p3);
        assert_eq!(t.counts(b), (0, 2));
        let p5 = t.admit(b, &cs[5]).unwrap();
        assert!(p5.1.is_none());
        assert_eq!(Refusal::Total.reason(), "unauthenticated_total");
        drop((p2, p4, p5));
        assert_eq!(t.counts(a), (0, 0));
    }
}
