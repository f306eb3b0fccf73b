//! How long a worker keeps polling after its last work before it sleeps.
//!
//! A sleeping worker is woken through the completion channel: the device's
//! completion handler, an event on the channel, the ring's poll, a wake-up
//! of the thread, often on another CPU. In the lab (soft-RoCE, 2 vCPUs
//! under TCG) a kernel trace put that at ~100 µs between a capsule's
//! completion and our response, against ~50 µs for nvmet, whose handler
//! runs on the CPU that took the packet. A host at queue depth 1 waits for
//! each answer before it sends the next command, so every I/O paid it. While
//! I/O flows and the target has at most one I/O in flight, a worker
//! therefore polls for the next capsule; under load it does not (the CPUs
//! are busy with the I/O itself, and polling takes from them), nor after a
//! keep-alive or a timer.
//!
//! A host that keeps several commands outstanding gets no such window, even
//! at the moments the target holds one or none of them ([`Depth`]: seen
//! with more than two at once lately): over a
//! slow fabric most of a deep queue's commands are on the wire, and the
//! worker found idle between them would poll on a CPU the fabric's own work
//! needs (in the lab, soft-RoCE's kernel threads: 4k writes at queue depth
//! 32 spent a third of our process's CPU polling, and lost IOPS to it).
//!
//! How long it polls follows the host ([`Pace`]): the time from the
//! target's last answer to the next command is the host's turn-around
//! (its completion path, the application, the wire): 200-1000 µs in the
//! lab depending on the boot, far less between machines. A fixed window either
//! misses the next command on a slow host (and every I/O pays the wake-up)
//! or polls long after the last command on a fast one.

use std::time::{Duration, Instant};

/// A gap the worker learns is cut at this many times the longest window:
/// one long pause (the application stopped for a while) moves the estimate
/// only so far.
const GAP_CLIP: u64 = 4;

/// The worker stops polling for the next command only when the usual gap
/// is more than this many times the longest window. A gap seen after the
/// worker slept includes its own wake-up (in the lab an interrupt to an
/// idle vCPU: hundreds of µs), so a host whose turn-around is close to the
/// longest window seems slower once the worker sleeps, and would keep it
/// sleeping: every command then pays the wake-up, the gaps grow, and the
/// host's CPU goes into waking the worker.
const GIVE_UP: u64 = 2;

/// The shortest window (µs) once something was learned: a worker that saw
/// only the short gaps of a busy queue still polls a little when it turns
/// light, and learns the host's real turn-around from there.
const MIN_WINDOW_US: u64 = 50;

/// What a worker learned of its hosts' pace under light load: how long the
/// next command took to come after the target had answered everything (a
/// moving average, each new gap weighing 1/8).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    gap_us: u64,
}

impl Pace {
    /// A command came `gap_us` after the target had nothing in flight; gaps
    /// are cut at [`GAP_CLIP`] × `max_us`.
    pub fn learn(&mut self, gap_us: u64, max_us: u64) {
        let g = gap_us.min(GAP_CLIP * max_us);
        self.gap_us = if self.gap_us == 0 {
            g.max(1)
        } else {
            (self.gap_us * 7 + g).div_ceil(8)
        };
    }

    /// The usual gap in microseconds (0: none seen yet).
    pub fn gap_us(&self) -> u64 {
        self.gap_us
    }

    /// How long to poll for the next command, at most `max_us`: half as long
    /// again as the usual gap (at least [`MIN_WINDOW_US`]), so that most
    /// commands come within it; the whole `max_us` before anything was
    /// learned; none when the usual gap is longer than [`GIVE_UP`] × `max_us`
    /// (polling would rarely catch the command, and a wake-up costs little
    /// against such a pause).
    pub fn window_us(&self, max_us: u64) -> u64 {
        match self.gap_us {
            0 => max_us,
            g if g > GIVE_UP * max_us => 0,
            g => (g + g / 2).max(MIN_WINDOW_US).min(max_us),
        }
    }
}

/// How long after the target last held more than [`DEEP_ABOVE`] I/Os it
/// still counts as serving a deep queue ([`Depth`]).
pub const DEEP_FOR: Duration = Duration::from_millis(10);

/// More I/Os than this in flight at once make a deep queue. Two is still
/// a host at queue depth 1: its next command can arrive before the worker
/// has seen its answer to the last one sent (the request is in flight until
/// then).
pub const DEEP_ABOVE: usize = 2;

/// Whether the target served a deep queue lately: more than [`DEEP_ABOVE`]
/// I/Os in flight at once, seen within [`DEEP_FOR`]. The count is the
/// target's: one host at queue depth 1 never reaches it; one at depth 32
/// does, at the moments its commands arrive together, even if the target is
/// often found with one or none; several hosts at depth 1 at once may (they
/// then share the CPUs, and lose the window as a deep queue does). Counted
/// per queue (a command arriving with another of its queue unanswered) it
/// caught a QD32 write stream over soft-RoCE too rarely: the requests that
/// make the target's count are mostly answered, their response still being
/// sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    many_at: Option<Instant>,
}

impl Depth {
    /// The target had `in_flight` I/Os at `now`.
    pub fn see(&mut self, in_flight: usize, now: Instant) {
        if in_flight > DEEP_ABOVE {
            self.many_at = Some(now);
        }
    }

    /// Whether more than [`DEEP_ABOVE`] were in flight within [`DEEP_FOR`]
    /// of `now`.
    pub fn deep(&self, now: Instant) -> bool {
        self.many_at
            .is_some_and(|t| now.saturating_duration_since(t) < DEEP_FOR)
    }
}

/// The polling window after a worker's last work, in microseconds:
/// `poll_spin_us` always, and at least `light_window_us` (see [`Pace`])
/// while no more than one I/O is in flight in the target, nor more than two
/// at once lately (`deep`: see [`Depth`]), and I/O is flowing (`io_recent`: the worker's
/// last work came shortly after the target started an I/O; a keep-alive or
/// a timer is no reason to poll, and an idle target must stay idle).
pub fn spin_window_us(
    poll_spin_us: u64,
    light_window_us: u64,
    io_in_flight: usize,
    deep: bool,
    io_recent: bool,
) -> u64 {
    if io_recent && io_in_flight <= 1 && !deep {
        poll_spin_us.max(light_window_us)
    } else {
        poll_spin_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_at_queue_depth_one_gets_the_light_load_window() {
        assert_eq!(spin_window_us(0, 300, 0, false, true), 300);
        assert_eq!(spin_window_us(0, 300, 1, false, true), 300);
        assert_eq!(spin_window_us(500, 300, 1, false, true), 500);
    }

    #[test]
    fn without_recent_io_a_keep_alive_or_timer_gets_no_window() {
        assert_eq!(spin_window_us(0, 300, 0, false, false), 0);
        assert_eq!(spin_window_us(50, 300, 0, false, false), 50);
    }

    #[test]
    fn under_load_only_the_configured_window() {
        assert_eq!(spin_window_us(0, 300, 2, false, true), 0);
        assert_eq!(spin_window_us(50, 300, 32, false, true), 50);
    }

    #[test]
    fn a_deep_queue_found_nearly_empty_gets_only_the_configured_window() {
        assert_eq!(spin_window_us(0, 300, 0, true, true), 0);
        assert_eq!(spin_window_us(0, 300, 1, true, true), 0);
        assert_eq!(spin_window_us(50, 300, 1, true, true), 50);
    }

    #[test]
    fn depth_is_more_than_two_in_flight_within_deep_for() {
        let t0 = Instant::now();
        let mut d = Depth::default();
        assert!(!d.deep(t0), "nothing seen");
        // A host at queue depth 1: its next command may come before the
        // worker saw its last answer sent, never more.
        for i in 0..100 {
            d.see(i % 3, t0 + Duration::from_micros(i as u64 * 300));
        }
        assert!(!d.deep(t0 + Duration::from_millis(30)));
        // Three at once: deep for DEEP_FOR, light again after it.
        let t1 = t0 + Duration::from_millis(40);
        d.see(3, t1);
        assert!(d.deep(t1));
        d.see(0, t1 + DEEP_FOR / 2);
        d.see(2, t1 + DEEP_FOR / 2);
        assert!(d.deep(t1 + DEEP_FOR - Duration::from_micros(1)));
        assert!(!d.deep(t1 + DEEP_FOR));
        // A clock read earlier than the sighting (defensive) counts as deep.
        assert!(d.deep(t1 - Duration::from_millis(1)));
    }

    #[test]
    fn the_window_follows_the_hosts_turn_around() {
        let mut p = Pace::default();
        assert_eq!(p.window_us(2000), 2000, "nothing learned: the whole window");
        p.learn(100, 2000);
        assert_eq!(p.gap_us(), 100);
        assert_eq!(p.window_us(2000), 150);
        p.learn(2, 2000);
        assert_eq!(p.window_us(2000), 132);
        let mut q = Pace::default();
        q.learn(3, 2000);
        assert_eq!(q.window_us(2000), MIN_WINDOW_US);
        assert_eq!(q.window_us(20), 20);
        for _ in 0..64 {
            p.learn(900, 2000);
        }
        assert!((880..=900).contains(&p.gap_us()), "{}", p.gap_us());
        assert!((1320..=1350).contains(&p.window_us(2000)));
        assert_eq!(p.window_us(1000), 1000, "capped");
    }

    #[test]
    fn a_host_a_little_slower_than_the_longest_window_still_gets_it() {
        let mut p = Pace::default();
        for _ in 0..64 {
            p.learn(2600, 2000);
        }
        assert_eq!(p.window_us(2000), 2000);
        for _ in 0..64 {
            p.learn(3900, 2000);
        }
        assert_eq!(p.window_us(2000), 2000);
    }

    #[test]
    fn a_host_much_slower_than_the_longest_window_gets_none() {
        let mut p = Pace::default();
        for _ in 0..64 {
            p.learn(10_000, 2000);
        }
        assert_eq!(p.gap_us(), 8000, "clipped at four times the window");
        assert_eq!(p.window_us(2000), 0);
        // It speeds up again: the window comes back within a few commands.
        let mut n = 0;
        while p.window_us(2000) == 0 {
            p.learn(200, 2000);
            n += 1;
        }
        assert!(n <= 12, "{n}");
    }

    #[test]
    fn one_long_pause_moves_the_estimate_only_so_far() {
        let mut p = Pace::default();
        for _ in 0..16 {
            p.learn(200, 2000);
        }
        p.learn(10_000_000, 2000);
        assert!(
            p.window_us(2000) > 0 && p.gap_us() <= 1200,
            "{}",
            p.gap_us()
        );
        p.learn(0, 2000);
        assert!(p.gap_us() > 0);
    }

    #[test]
    fn zero_turns_light_load_polling_off() {
        assert_eq!(spin_window_us(0, 0, 0, false, true), 0);
        assert_eq!(spin_window_us(50, 0, 1, false, true), 50);
    }
}
