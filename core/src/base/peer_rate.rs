//! How often each peer address may do something costly before it proved
//! anything (start an authentication transaction): a token bucket per
//! address, with a bounded number of addresses remembered.
//!
//! Sans-IO: the caller passes the time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Addresses remembered at most; past it, those whose bucket is full again
/// are forgotten first (they would be admitted anyway), then the longest
/// quiet.
const MAX_PEERS: usize = 4096;

/// The buckets.
#[derive(Debug)]
pub struct PeerRate {
    burst: u32,
    per_second: u32,
    /// Tokens (in thousandths) and when they were last counted.
    peers: Mutex<HashMap<IpAddr, (u64, Instant)>>,
}

impl PeerRate {
    /// `burst` at once, `per_second` after that, per address.
    pub fn new(burst: u32, per_second: u32) -> PeerRate {
        PeerRate {
            burst,
            per_second,
            peers: Mutex::new(HashMap::new()),
        }
    }

    fn full(&self) -> u64 {
        self.burst as u64 * 1000
    }

    fn refill(&self, (tokens, at): (u64, Instant), now: Instant) -> u64 {
        let ms = now.saturating_duration_since(at).as_millis() as u64;
        (tokens + ms * self.per_second as u64).min(self.full())
    }

    /// Whether `peer` may do it once more at `now` (and takes a token).
    pub fn admit(&self, peer: IpAddr, now: Instant) -> bool {
        let mut m = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_PEERS && !m.contains_key(&peer) {
            let full = self.full();
            m.retain(|_, b| self.refill(*b, now) < full);
            if m.len() >= MAX_PEERS {
                if let Some(oldest) = m.iter().min_by_key(|(_, b)| b.1).map(|(p, _)| *p) {
                    m.remove(&oldest);
                }
            }
        }
        let b = m.entry(peer).or_insert((self.full(), now));
        let tokens = self.refill(*b, now);
        if tokens < 1000 {
            *b = (tokens, now);
            return false;
        }
        *b = (tokens - 1000, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_rate_per_address() {
        let r = PeerRate::new(3, 2);
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert!((0..3).all(|_| r.admit(a, t0)));
        assert!(!r.admit(a, t0));
        assert!(r.admit(b, t0), "another address has its own");
        assert!(!r.admit(a, t0 + Duration::from_millis(400)));
        assert!(r.admit(a, t0 + Duration::from_millis(500)), "2 per second");
        assert!(!r.admit(a, t0 + Duration::from_millis(600)));
        // Quiet long enough: the burst again, not more.
        let t1 = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| r.admit(a, t1)));
        assert!(!r.admit(a, t1));
    }

    #[test]
    fn many_addresses_stay_bounded() {
        let r = PeerRate::new(1, 1);
        let t0 = Instant::now();
        for i in 0..(MAX_PEERS as u32 + 100) {
            let ip = IpAddr::from(i.to_be_bytes());
            assert!(r.admit(ip, t0));
        }
        assert!(r.peers.lock().unwrap().len() <= MAX_PEERS);
    }
}
