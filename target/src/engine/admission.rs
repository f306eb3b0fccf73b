//! Admission of queues that have not connected yet. Every RDMA-CM request
//! costs a queue pair, receive buffers and completion-queue entries before
//! its peer has sent a Fabrics Connect, let alone proven who it is, so such
//! "pending" queues are capped per peer address and in total. A queue stops
//! being pending when its Connect succeeds or when it goes.
//!
//! The same caps bound the metrics endpoint's connections.
//!
//! Sans-IO: the caller passes the time; [`Pending`] gives its place back when
//! dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::log_limit::PeerLogLimit;

/// Why a queue was not admitted.
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
}

#[derive(Debug, Default)]
struct State {
    by_peer: HashMap<IpAddr, u32>,
    total: u32,
}

/// The pending-queue counts and caps.
#[derive(Debug)]
pub struct Admission {
    per_peer: u32,
    total: u32,
    state: Mutex<State>,
    log: PeerLogLimit,
}

/// A pending queue's place; given back when dropped.
#[derive(Debug)]
pub struct Pending {
    adm: Arc<Admission>,
    peer: IpAddr,
}

impl Admission {
    /// Caps of `per_peer` pending queues per address and `total` in all.
    pub fn new(per_peer: u32, total: u32) -> Arc<Admission> {
        Arc::new(Admission {
            per_peer,
            total,
            state: Mutex::new(State::default()),
            log: PeerLogLimit::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a queue from `peer`, or says which cap it meets.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Pending, Refusal> {
        let mut st = self.state();
        let n = st.by_peer.get(&peer).copied().unwrap_or(0);
        if n >= self.per_peer {
            return Err(Refusal::PerPeer);
        }
        if st.total >= self.total {
            return Err(Refusal::Total);
        }
        st.by_peer.insert(peer, n + 1);
        st.total += 1;
        Ok(Pending {
            adm: self.clone(),
            peer,
        })
    }

    /// Whether a refusal of `peer` at `now` is to be logged (see
    /// [`PeerLogLimit`]).
    pub fn should_log(&self, peer: IpAddr, now: Instant) -> bool {
        self.log.should_log(peer, now)
    }

    /// Pending queues of `peer`, and in all.
    pub fn counts(&self, peer: IpAddr) -> (u32, u32) {
        let st = self.state();
        (st.by_peer.get(&peer).copied().unwrap_or(0), st.total)
    }
}

impl Pending {
    /// The peer address it was admitted for.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = self.adm.state();
        st.total = st.total.saturating_sub(1);
        if let Some(n) = st.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                st.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn caps_per_peer_and_in_total() {
        let a = Admission::new(2, 3);
        let (x, y) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let p1 = a.admit(x).unwrap();
        let p2 = a.admit(x).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Refusal::PerPeer);
        let p3 = a.admit(y).unwrap();
        assert_eq!(a.admit(y).unwrap_err(), Refusal::Total);
        assert_eq!(a.admit(ip("10.0.0.3")).unwrap_err(), Refusal::Total);
        assert_eq!(a.counts(x), (2, 3));
        drop(p1);
        assert_eq!(a.counts(x), (1, 2));
        let p4 = a.admit(y).unwrap();
        assert_eq!(a.admit(y).unwrap_err(), Refusal::PerPeer);
        drop((p2, p3, p4));
        assert_eq!(a.counts(x), (0, 0));
        assert!(a.state().by_peer.is_empty(), "no entry left for gone peers");
        assert_eq!(Refusal::PerPeer.reason(), "pending_per_peer");
    }
}
