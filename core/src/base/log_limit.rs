//! Refusals a peer causes are logged once a minute per peer address, so a
//! peer that repeats them cannot flood the log; the metrics count each one.
//! An event that repeats (a failing store fails every I/O) is logged once
//! per period, with the count of the ones left out ([`Repeats`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A refusal is logged at most once per peer in this long.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Peers whose last logged refusal is remembered, at most (older ones are
/// forgotten first, so a flood from many addresses cannot grow the map).
const MAX_REMEMBERED: usize = 4096;

/// One kind of repeated event, logged at most once per period; the ones
/// left out are counted and reported with the next one logged.
#[derive(Debug)]
pub struct Repeats {
    every: Duration,
    /// When the last one was logged, and how many were left out since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Repeats {
    /// At most one per `every`.
    pub const fn new(every: Duration) -> Repeats {
        Repeats {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Whether the event at `now` is to be logged: `Some(n)`, with the `n`
    /// left out since the last one logged.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.0 {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                s.1 += 1;
                None
            }
            _ => {
                let left_out = s.1;
                *s = (Some(now), 0);
                Some(left_out)
            }
        }
    }
}

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

    #[test]
    fn repeats_are_logged_once_per_period_with_the_count_left_out() {
        let r = Repeats::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.admit(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(r.admit(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(r.admit(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(r.admit(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.admit(t0 + Duration::from_secs(30)), Some(1));
    }
}
