//! Refusals a peer causes are logged once a minute per peer address, so a
//! peer that repeats them cannot flood the log; the metrics count each one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A refusal is logged at most once per peer in this long.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Peers whose last logged refusal is remembered, at most (older ones are
/// forgotten first, so a flood from many addresses cannot grow the map).
const MAX_REMEMBERED: usize = 4096;

/// When each peer's last refusal was logged.
#[derive(Debug, Default)]
pub struct PeerLogLimit {
    logged: Mutex<HashMap<IpAddr, Instant>>,
}

impl PeerLogLimit {
    /// Whether a refusal of `peer` at `now` is to be logged: the first one,
    /// then one per [`LOG_EVERY`].
    pub fn should_log(&self, peer: IpAddr, now: Instant) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = logged.get(&peer) {
            if now.saturating_duration_since(*t) < LOG_EVERY {
                return false;
            }
        }
        if logged.len() >= MAX_REMEMBERED {
            logged.retain(|_, t| now.saturating_duration_since(*t) < LOG_EVERY);
            if logged.len() >= MAX_REMEMBERED {
                // Every entry is recent: a flood from many addresses. Log
                // nothing new until some age out.
                return false;
            }
        }
        logged.insert(peer, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn refusals_are_logged_once_a_minute_per_peer() {
        let l = PeerLogLimit::default();
        let t0 = Instant::now();
        let (x, y) = (ip("10.0.0.1"), ip("::1"));
        assert!(l.should_log(x, t0));
        assert!(!l.should_log(x, t0 + Duration::from_secs(59)));
        assert!(l.should_log(y, t0 + Duration::from_secs(1)));
        assert!(l.should_log(x, t0 + LOG_EVERY));
    }

    #[test]
    fn a_flood_of_addresses_does_not_grow_the_log_memory() {
        let l = PeerLogLimit::default();
        let t0 = Instant::now();
        for i in 0..(MAX_REMEMBERED as u32 + 100) {
            l.should_log(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(l.logged.lock().unwrap().len() <= MAX_REMEMBERED);
        // Once they aged out, new peers are logged again.
        assert!(l.should_log(ip("192.168.1.1"), t0 + LOG_EVERY));
        assert!(l.logged.lock().unwrap().len() <= 1);
    }
}
