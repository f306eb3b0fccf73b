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
//! costs a write two atomic operations.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::backend::offload::Mailbox;

/// The result a parked write is woken with (through its worker's mailbox,
/// under its operation's user data): submit it again. No errno is this large.
pub const REOPENED: i32 = i32::MAX;

/// The gate.
#[derive(Debug, Default)]
pub struct WriteGate {
    /// Writes inside (submitted, not all their operations done).
    inside: AtomicU64,
    /// A Compare and Write holds it closed (or waits to).
    closed: AtomicBool,
    parked: Mutex<Vec<(Arc<Mailbox>, u64)>>,
    /// Signalled when the last write inside leaves a closed gate.
    drained: Condvar,
    /// One closer at a time.
    closer: Mutex<()>,
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
        self.inside.fetch_add(1, SeqCst);
        if !self.closed.load(SeqCst) {
            return Entry::Inside;
        }
        let mut parked = self.parked();
        // Checked again under the lock the reopening takes: a gate that
        // reopened meanwhile lets the write in rather than park it forever.
        if !self.closed.load(SeqCst) {
            return Entry::Inside;
        }
        parked.push((mailbox.clone(), ud));
        drop(parked);
        self.leave();
        Entry::Parked
    }

    /// A write that entered is done.
    pub fn leave(&self) {
        if self.inside.fetch_sub(1, SeqCst) == 1 && self.closed.load(SeqCst) {
            let _g = self.parked();
            self.drained.notify_all();
        }
    }

    /// Closes the gate and waits until every write inside left (blocking:
    /// the offload thread's). Writes arriving meanwhile are parked.
    pub fn close(&self) -> Closed<'_> {
        let one = self.closer.lock().unwrap_or_else(|p| p.into_inner());
        self.closed.store(true, SeqCst);
        let mut g = self.parked();
        while self.inside.load(SeqCst) != 0 {
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
            std::mem::take(&mut *p)
        };
        for (mailbox, ud) in woken {
            mailbox.post(ud, REOPENED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Waker;
    use std::time::Duration;

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
}
