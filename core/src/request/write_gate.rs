//! A namespace's write gate: what makes a Compare and Write atomic against
//! every other write of this target to a local store (a file or block
//! device, written through io_uring by any worker).
//!
//! A write enters the gate before it is submitted and leaves it once no
//! operation of it is in flight. A Compare and Write closes the gate (writes
//! that arrive then are parked, to be resubmitted when it reopens), waits
//! until the writes already inside have left, compares and writes, and
//! reopens it. Closing is rare and short (one read and one write), so the
//! gate closes for the whole namespace rather than a range; an open gate
//! costs a write two atomic operations, on its worker's own line (the count
//! of writes inside is sharded; a closer sums it).
//!
//! The gate of an RBD image served by several gateways is also its
//! ownership (see the daemon's `rbd::owner`): only the gateway that owns the
//! image writes it. Without ownership, writes park and ask for it
//! ([`WriteGate::owned_by`]); handing it over ([`WriteGate::revoke`]) waits
//! until every write operation inside completed in the cluster.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::base::shard::Sharded;
use crate::base::wake::Mailbox;

/// The result a parked write is woken with (through its worker's mailbox,
/// under its operation's user data): submit it again. No errno is this large.
pub const REOPENED: i32 = i32::MAX;

/// What a gate calls when a write parks for want of ownership.
type Want = Box<dyn Fn() + Send + Sync>;

/// The gate.
#[derive(Default)]
pub struct WriteGate {
    /// Writes inside (submitted, not all their operations done), counted
    /// in the shard of the thread that entered or left (only the sum means
    /// anything). Every update and every read is SeqCst: a write that saw
    /// the gate open is seen inside by the closer that shut it.
    inside: Sharded,
    /// A Compare and Write holds it closed (or waits to).
    closed: AtomicBool,
    /// Writes need ownership ([`WriteGate::owned_by`]) and this gateway
    /// does not have it: they park.
    unowned: AtomicBool,
    /// A write left without a known outcome (a librados timeout): it may
    /// still land, so ownership must not be handed over cooperatively.
    uncertain: AtomicBool,
    /// Asks for ownership (set once, by [`WriteGate::owned_by`]).
    want: OnceLock<Want>,
    parked: Mutex<Vec<(Arc<Mailbox>, u64)>>,
    /// Signalled when the last write inside leaves a closed gate.
    drained: Condvar,
    /// One closer at a time.
    closer: Mutex<()>,
}

impl std::fmt::Debug for WriteGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteGate")
            .field("inside", &self.inside)
            .field("closed", &self.closed)
            .field("unowned", &self.unowned)
            .finish()
    }
}

/// How an attempt to enter went.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Inside: submit the write, and [`WriteGate::leave`] when it is done.
    Inside,
    /// Parked: the write is woken with [`REOPENED`] through its mailbox.
    Parked,
}

/// The gate held closed by a Compare and Write; reopens when dropped.
pub struct Closed<'a> {
    gate: &'a WriteGate,
    _one: MutexGuard<'a, ()>,
}

impl WriteGate {
    fn parked(&self) -> MutexGuard<'_, Vec<(Arc<Mailbox>, u64)>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write asks to enter; parked (to be woken with `ud` through
    /// `mailbox`) while the gate is closed.
    pub fn enter(&self, mailbox: &Arc<Mailbox>, ud: u64) -> Entry {
        self.inside.add_mine(1, SeqCst);
        if !self.shut() {
            return Entry::Inside;
        }
        let mut parked = self.parked();
        // Checked again under the lock the reopening takes: a gate that
        // reopened meanwhile lets the write in rather than park it forever.
        if !self.shut() {
            return Entry::Inside;
        }
        parked.push((mailbox.clone(), ud));
        drop(parked);
        self.leave();
        self.ask();
        Entry::Parked
    }

    /// Enters, blocking (the gate thread's Compare and Write) until the gate
    /// is open, for at most `timeout`: false if it did not open.
    pub fn enter_wait(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            self.inside.add_mine(1, SeqCst);
            if !self.shut() {
                return true;
            }
            self.leave();
            self.ask();
            let g = self.parked();
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.shut() {
                let _ = self
                    .drained
                    .wait_timeout(g, left.min(Duration::from_millis(50)));
            }
        }
    }

    /// Counts one more operation of a write that is inside (a write of
    /// several operations, each of which leaves on its own completion).
    pub fn hold(&self) {
        self.inside.add_mine(1, SeqCst);
    }

    /// A write that entered is done. While the gate is shut, whoever waits
    /// for it to drain looks again (the shards do not tell the last one).
    pub fn leave(&self) {
        self.inside.add_mine(-1, SeqCst);
        if self.shut() {
            let _g = self.parked();
            self.drained.notify_all();
        }
    }

    /// Whether no write is inside.
    fn empty(&self) -> bool {
        self.inside.sum(SeqCst) == 0
    }

    /// A write operation ended without a known outcome: it may still land.
    pub fn mark_uncertain(&self) {
        self.uncertain.store(true, SeqCst);
    }

    /// Whether a write ever ended without a known outcome here: such a
    /// gate is never handed over (its gateway is fenced, and reconnects).
    pub fn uncertain(&self) -> bool {
        self.uncertain.load(SeqCst)
    }

    /// Writes need ownership from now on, which this gateway does not have
    /// yet: a write that parks calls `want`.
    pub fn owned_by(&self, want: impl Fn() + Send + Sync + 'static) {
        if self.want.set(Box::new(want)).is_ok() {
            self.unowned.store(true, SeqCst);
        }
    }

    /// Whether this gateway may write now (always, for a gate that needs no
    /// ownership).
    pub fn owned(&self) -> bool {
        !self.unowned.load(SeqCst)
    }

    /// Ownership arrived: parked writes go on (unless a Compare and Write
    /// holds the gate closed; it wakes them when it reopens).
    pub fn grant(&self) {
        let woken = {
            let mut p = self.parked();
            self.unowned.store(false, SeqCst);
            if self.closed.load(SeqCst) {
                Vec::new()
            } else {
                std::mem::take(&mut *p)
            }
        };
        for (mailbox, ud) in woken {
            mailbox.post(ud, REOPENED);
        }
        self.drained.notify_all();
    }

    /// Gives ownership up: writes park from now on; waits until every write
    /// inside left, for at most `timeout`. True when none is left inside.
    pub fn revoke(&self, timeout: Duration) -> bool {
        if self.want.get().is_none() {
            return false;
        }
        let until = Instant::now() + timeout;
        let mut g = self.parked();
        self.unowned.store(true, SeqCst);
        while !self.empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self
                .drained
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Writes wait: a Compare and Write holds the gate, or ownership is
    /// missing.
    fn shut(&self) -> bool {
        self.closed.load(SeqCst) || self.unowned.load(SeqCst)
    }

    fn ask(&self) {
        if self.unowned.load(SeqCst) {
            if let Some(w) = self.want.get() {
                w();
            }
        }
    }

    /// Closes the gate and waits, at most `timeout`, until every write
    /// inside left: the gate held closed, or `None` (reopened) when writes
    /// are still inside (an RBD write the cluster has not answered).
    pub fn close_within(&self, timeout: Duration) -> Option<Closed<'_>> {
        let one = self.closer.lock().unwrap_or_else(|p| p.into_inner());
        self.closed.store(true, SeqCst);
        let until = Instant::now() + timeout;
        let mut g = self.parked();
        while !self.empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(g);
                drop(Closed {
                    gate: self,
                    _one: one,
                });
                return None;
            }
            g = self
                .drained
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(g);
        Some(Closed {
            gate: self,
            _one: one,
        })
    }

    /// Closes the gate and waits until every write inside left (blocking:
    /// a namespace lane's). Writes arriving meanwhile are parked.
    pub fn close(&self) -> Closed<'_> {
        let one = self.closer.lock().unwrap_or_else(|p| p.into_inner());
        self.closed.store(true, SeqCst);
        let mut g = self.parked();
        while !self.empty() {
            g = self.drained.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        drop(g);
        Closed {
            gate: self,
            _one: one,
        }
    }
}

impl Drop for Closed<'_> {
    /// Reopens the gate and wakes the writes parked at it.
    fn drop(&mut self) {
        let woken = {
            let mut p = self.gate.parked();
            self.gate.closed.store(false, SeqCst);
            if self.gate.unowned.load(SeqCst) {
                Vec::new()
            } else {
                std::mem::take(&mut *p)
            }
        };
        for (mailbox, ud) in woken {
            mailbox.post(ud, REOPENED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::wake::Waker;
    use std::time::Duration;

    #[test]
    fn a_write_may_leave_on_another_thread_than_it_entered() {
        let gate = Arc::new(WriteGate::default());
        let mb = Mailbox::new(Waker::new().unwrap());
        assert_eq!(gate.enter(&mb, 1), Entry::Inside);
        gate.hold();
        let g = gate.clone();
        std::thread::spawn(move || {
            g.leave();
            g.leave();
        })
        .join()
        .unwrap();
        assert!(gate.close_within(Duration::ZERO).is_some(), "none inside");
    }

    #[test]
    fn no_write_is_inside_while_a_closer_holds_the_gate() {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        let gate = Arc::new(WriteGate::default());
        let (inside, held) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|_| {
                let (g, inside, held, stop) =
                    (gate.clone(), inside.clone(), held.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mb = Mailbox::new(Waker::new().unwrap());
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        if g.enter(&mb, n) == Entry::Inside {
                            inside.fetch_add(1, SeqCst);
                            assert!(!held.load(SeqCst), "a write inside a closed gate");
                            inside.fetch_sub(1, SeqCst);
                            g.leave();
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        for _ in 0..300 {
            let c = gate.close();
            held.store(true, SeqCst);
            assert_eq!(inside.load(SeqCst), 0, "closed with a write inside");
            held.store(false, SeqCst);
            drop(c);
        }
        stop.store(true, SeqCst);
        for w in writers {
            w.join().unwrap();
        }
        assert!(gate.empty());
    }

    #[test]
    fn a_closed_gate_waits_for_writes_inside_and_parks_new_ones() {
        let gate = Arc::new(WriteGate::default());
        let mb = Mailbox::new(Waker::new().unwrap());
        assert_eq!(gate.enter(&mb, 1), Entry::Inside);
        let g = gate.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let closer = std::thread::spawn(move || {
            let c = g.close();
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(c);
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "closed while a write is inside"
        );
        assert_eq!(gate.enter(&mb, 2), Entry::Parked);
        gate.leave(); // write 1 done
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        closer.join().unwrap();
        let mut got = Vec::new();
        mb.take(&mut got);
        assert_eq!(got, vec![(2, REOPENED)]);
        assert_eq!(gate.enter(&mb, 3), Entry::Inside);
        gate.leave();
    }

    #[test]
    fn without_ownership_writes_park_ask_and_go_on_when_granted() {
        let gate = Arc::new(WriteGate::default());
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = asked.clone();
        gate.owned_by(move || {
            a.fetch_add(1, SeqCst);
        });
        assert!(!gate.owned());
        let mb = Mailbox::new(Waker::new().unwrap());
        assert_eq!(gate.enter(&mb, 7), Entry::Parked);
        assert_eq!(asked.load(SeqCst), 1, "a parked write asks for ownership");
        gate.grant();
        let mut got = Vec::new();
        mb.take(&mut got);
        assert_eq!(got, vec![(7, REOPENED)]);
        assert_eq!(gate.enter(&mb, 8), Entry::Inside);
        // Handing over waits for the write inside, and its operations.
        gate.hold();
        gate.leave();
        assert!(
            !gate.revoke(Duration::from_millis(20)),
            "an operation is still in flight"
        );
        assert_eq!(
            gate.enter(&mb, 9),
            Entry::Parked,
            "no new write once revoked"
        );
        gate.leave();
        assert!(gate.revoke(Duration::from_millis(20)));
        assert!(!gate.uncertain());
        gate.mark_uncertain();
        assert!(gate.uncertain());
        gate.grant();
        assert!(gate.uncertain(), "it stays uncertain: only fencing ends it");
        let mut got = Vec::new();
        mb.take(&mut got);
        assert_eq!(got, vec![(9, REOPENED)]);
    }

    #[test]
    fn a_blocking_enter_waits_for_ownership_or_times_out() {
        let gate = Arc::new(WriteGate::default());
        gate.owned_by(|| {});
        assert!(!gate.enter_wait(Duration::from_millis(30)));
        let g = gate.clone();
        let t = std::thread::spawn(move || g.enter_wait(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(30));
        gate.grant();
        assert!(t.join().unwrap());
        gate.leave();
        assert!(gate.revoke(Duration::from_millis(10)));
    }

    #[test]
    fn a_gate_without_ownership_cannot_be_revoked() {
        let gate = WriteGate::default();
        assert!(gate.owned());
        assert!(!gate.revoke(Duration::ZERO));
        assert!(gate.owned());
    }

    /// Closing within a time: the gate held once the writes inside left;
    /// reopened, and `None`, when one stays inside too long.
    #[test]
    fn closing_within_a_time() {
        let g = Arc::new(WriteGate::default());
        g.hold();
        let g2 = g.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            g2.leave();
        });
        let closed = g.close_within(Duration::from_secs(10));
        assert!(closed.is_some());
        drop(closed);
        t.join().unwrap();
        g.hold();
        assert!(g.close_within(Duration::from_millis(30)).is_none());
        assert!(!g.shut(), "reopened");
        g.leave();
    }
}
