//! Draining a gateway before maintenance (`nvmf-target drain`), sans-IO:
//! its listeners' ANA groups go non-optimized (a host with an optimized
//! path elsewhere moves its I/O there), then inaccessible (every host's
//! multipath moves to the other paths; what still comes here is refused
//! with ANA Inaccessible, which a host retries on another path); then the
//! drain waits until no I/O arrives and none is in flight, and hands the
//! RBD images this gateway owns over to the next writer without fencing.
//! `nvmf-target undrain` restores the configured states.
//!
//! [`Drain::poll`] says what to do next from what the daemon sees; the
//! daemon ([`super::maintenance`]) does it.

use std::time::{Duration, Instant};

/// How long the groups stay non-optimized before they go inaccessible.
pub const HOLD_NON_OPTIMIZED: Duration = Duration::from_secs(2);
/// How long no I/O may complete at the drained listeners before the I/O
/// counts as stopped.
pub const QUIET: Duration = Duration::from_secs(1);
/// How long a drain may take unless the caller says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The groups are non-optimized, until then.
    NonOptimized(Instant),
    /// The groups are inaccessible; waiting for the I/O to stop.
    Quiesce,
    /// Handing the images over.
    HandOver,
    /// Done.
    Done,
}

impl Phase {
    fn doing(&self) -> &'static str {
        match self {
            Phase::NonOptimized(_) => "holding the groups non-optimized",
            Phase::Quiesce => "waiting for the I/O to stop",
            Phase::HandOver => "handing the RBD images over",
            Phase::Done => "done",
        }
    }
}

/// What the daemon sees now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Commands completed by the controllers at the drained listeners
    /// (any outcome): it moves while I/O arrives.
    pub completed: u64,
    /// I/O commands accepted and not yet completed, where the daemon can
    /// tell (every listener drained); `None`: not known.
    pub in_flight: Option<u64>,
    /// RBD images of the drained groups this gateway still owns.
    pub owned: usize,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet.
    Wait,
    /// Make the groups inaccessible (and tell the hosts).
    Inaccessible,
    /// Hand the owned images over.
    HandOver,
    /// Drained: how long it took.
    Done(Duration),
    /// Not drained within the time given: what it still waited for. The
    /// groups stay as they are (inaccessible, once past the first phase).
    TimedOut(String),
}

/// A drain of some listeners.
#[derive(Debug)]
pub struct Drain {
    /// The listeners drained (port id - 1).
    pub ports: Vec<usize>,
    started: Instant,
    deadline: Instant,
    phase: Phase,
    /// The completions last seen, and since when they have not moved.
    quiet: Option<(u64, Instant)>,
}

impl Drain {
    /// A drain of `ports` started at `now` (the groups made non-optimized
    /// by the caller), to be done within `timeout`.
    pub fn new(ports: Vec<usize>, now: Instant, timeout: Duration) -> Drain {
        Drain {
            ports,
            started: now,
            deadline: now + timeout,
            phase: Phase::NonOptimized(now + HOLD_NON_OPTIMIZED),
            quiet: None,
        }
    }

    /// Where it stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The next step at `now`, given what the daemon sees.
    pub fn poll(&mut self, now: Instant, seen: Seen) -> Step {
        let step = match self.phase {
            Phase::NonOptimized(until) if now >= until => {
                self.phase = Phase::Quiesce;
                return Step::Inaccessible;
            }
            Phase::NonOptimized(_) => Step::Wait,
            Phase::Quiesce => {
                let since = match self.quiet {
                    Some((c, since)) if c == seen.completed => since,
                    _ => {
                        self.quiet = Some((seen.completed, now));
                        now
                    }
                };
                if now.saturating_duration_since(since) >= QUIET && seen.in_flight.unwrap_or(0) == 0
                {
                    self.phase = Phase::HandOver;
                    if seen.owned > 0 {
                        return Step::HandOver;
                    }
                    return self.poll(now, seen);
                }
                Step::Wait
            }
            Phase::HandOver if seen.owned == 0 => {
                self.phase = Phase::Done;
                return Step::Done(now.saturating_duration_since(self.started));
            }
            Phase::HandOver => Step::Wait,
            Phase::Done => return Step::Done(now.saturating_duration_since(self.started)),
        };
        if now >= self.deadline {
            let mut what = self.phase.doing().to_string();
            if self.phase == Phase::Quiesce {
                if let Some(n) = seen.in_flight.filter(|n| *n > 0) {
                    what += &format!(" ({n} I/O in flight)");
                } else {
                    what += " (I/O still arrives)";
                }
            } else if self.phase == Phase::HandOver {
                what += &format!(" ({} still owned)", seen.owned);
            }
            self.phase = Phase::Done;
            return Step::TimedOut(what);
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(completed: u64, in_flight: Option<u64>, owned: usize) -> Seen {
        Seen {
            completed,
            in_flight,
            owned,
        }
    }

    #[test]
    fn non_optimized_then_inaccessible_then_quiet_then_handed_over() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Drain::new(vec![0], t0, DEFAULT_TIMEOUT);
        assert_eq!(d.poll(at(1000), seen(5, Some(3), 1)), Step::Wait);
        assert_eq!(d.poll(at(2000), seen(9, Some(3), 1)), Step::Inaccessible);
        // I/O still completes: not quiet.
        assert_eq!(d.poll(at(2100), seen(12, Some(2), 1)), Step::Wait);
        assert_eq!(d.poll(at(3000), seen(14, Some(0), 1)), Step::Wait);
        assert_eq!(d.poll(at(3900), seen(14, Some(0), 1)), Step::Wait);
        // A second without completions, nothing in flight: hand over.
        assert_eq!(d.poll(at(4000), seen(14, Some(0), 1)), Step::HandOver);
        assert_eq!(d.phase(), Phase::HandOver);
        assert_eq!(d.poll(at(4100), seen(14, Some(0), 1)), Step::Wait);
        assert_eq!(
            d.poll(at(4500), seen(14, Some(0), 0)),
            Step::Done(Duration::from_millis(4500))
        );
    }

    #[test]
    fn in_flight_io_holds_it_and_nothing_owned_skips_the_hand_over() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Drain::new(vec![0, 1], t0, DEFAULT_TIMEOUT);
        assert_eq!(d.poll(at(2000), seen(0, Some(1), 0)), Step::Inaccessible);
        // No completion for long, but a write is still in flight.
        assert_eq!(d.poll(at(2000), seen(0, Some(1), 0)), Step::Wait);
        assert_eq!(d.poll(at(5000), seen(0, Some(1), 0)), Step::Wait);
        assert_eq!(
            d.poll(at(5100), seen(0, Some(0), 0)),
            Step::Done(Duration::from_millis(5100))
        );
        // Unknown in-flight (one listener of several): completions decide.
        let mut d = Drain::new(vec![0], t0, DEFAULT_TIMEOUT);
        d.poll(at(2000), seen(0, None, 0));
        d.poll(at(2000), seen(0, None, 0));
        assert!(matches!(d.poll(at(3000), seen(0, None, 0)), Step::Done(_)));
    }

    #[test]
    fn a_drain_that_does_not_finish_in_time_says_what_it_waited_for() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut d = Drain::new(vec![0], t0, Duration::from_secs(10));
        d.poll(at(2), seen(0, Some(4), 0));
        let mut n = 0;
        let step = loop {
            n += 1;
            match d.poll(at(2 + n), seen(n, Some(4), 0)) {
                Step::Wait => continue,
                s => break s,
            }
        };
        assert_eq!(
            step,
            Step::TimedOut("waiting for the I/O to stop (4 I/O in flight)".into())
        );
        assert_eq!(n, 8);
        let mut d = Drain::new(vec![0], t0, Duration::from_secs(10));
        d.poll(at(2), seen(0, Some(0), 2));
        assert_eq!(d.poll(at(3), seen(0, Some(0), 2)), Step::Wait);
        assert_eq!(d.poll(at(4), seen(0, Some(0), 2)), Step::HandOver);
        assert_eq!(
            d.poll(at(10), seen(0, Some(0), 1)),
            Step::TimedOut("handing the RBD images over (1 still owned)".into())
        );
    }
}
