//! The operations this target keeps in flight on one cluster connection,
//! held under librados's own throttle so that a worker that calls librbd
//! never blocks in it.
//!
//! The connection runs librbd with `rbd_non_blocking_aio = false`: an I/O
//! call dispatches on the caller's thread (a worker) instead of handing the
//! request to librbd's work queue thread, one wake-up and context switch
//! fewer per I/O. The one long wait that could then fall on a worker is the
//! Objecter's throttle (`objecter_inflight_ops`, `objecter_inflight_op_bytes`
//! per connection), which blocks the caller while the connection's
//! operations in flight exceed it, until the OSDs answer. So every call
//! first takes its operations (objects touched) and bytes from a [`Budget`]
//! of half that throttle (the other half is room for what librbd and this
//! target add: object map updates, lock and record objects, watches).
//! A call that finds the budget spent, or others waiting, goes to the
//! connection's dispatcher thread, which starts calls in order as
//! completions give the budget back; a long discard or write zeroes is cut
//! into pieces there, one piece per turn, so that it neither takes the
//! whole budget nor holds up the calls queued behind it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What one call needs from the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Operations (objects it touches).
    pub ops: u64,
    /// Bytes of data it moves.
    pub bytes: u64,
}

/// A call that waits for the budget: `run` starts it once its need is
/// taken, and may hand back the rest of its work, which queues again at the
/// back.
pub struct Deferred {
    /// What it takes before `run`.
    pub need: Need,
    /// Starts it; the budget taken is given back by its completion (or by
    /// `run` itself if the start failed).
    pub run: Box<dyn FnOnce() -> Option<Deferred> + Send>,
}

struct Queue {
    jobs: VecDeque<Deferred>,
    closed: bool,
}

/// One connection's budget and its dispatcher.
pub struct Budget {
    cap: Need,
    ops: AtomicU64,
    bytes: AtomicU64,
    /// Calls queued or being started by the dispatcher: while any are, new
    /// calls queue behind them (first come, first started).
    queued: AtomicUsize,
    queue: Mutex<Queue>,
    freed: Condvar,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("cap", &self.cap)
            .field("ops", &self.ops.load(Ordering::Relaxed))
            .field("bytes", &self.bytes.load(Ordering::Relaxed))
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish()
    }
}

/// How long the dispatcher sleeps at most between looks at the budget (a
/// safety net: a completion that gives budget back wakes it).
const RECHECK: Duration = Duration::from_millis(100);

impl Budget {
    /// A budget of `cap` with no dispatcher thread (tests run
    /// [`Budget::dispatch_one`] themselves).
    pub fn new(cap: Need) -> Arc<Budget> {
        Arc::new(Budget {
            cap: Need {
                ops: cap.ops.max(1),
                bytes: cap.bytes.max(1),
            },
            ops: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            freed: Condvar::new(),
        })
    }

    /// A budget of `cap` whose dispatcher thread (named `name`) runs until
    /// [`Budget::close`].
    pub fn start(cap: Need, name: &str) -> std::io::Result<Arc<Budget>> {
        let b = Budget::new(cap);
        let run = b.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || while run.dispatch_one(true) {})?;
        Ok(b)
    }

    /// Its cap.
    pub fn cap(&self) -> Need {
        self.cap
    }

    /// What is taken now.
    pub fn in_flight(&self) -> Need {
        Need {
            ops: self.ops.load(Ordering::Acquire),
            bytes: self.bytes.load(Ordering::Acquire),
        }
    }

    /// Calls waiting for the dispatcher.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Takes `need` if nothing waits and it fits (a need larger than the
    /// cap fits when nothing is in flight): the caller starts the call now.
    pub fn take_now(&self, need: Need) -> bool {
        self.queued.load(Ordering::Acquire) == 0 && self.take(need)
    }

    // `take` after `defer`'s count and `give_back`'s look at the count after
    // its subtraction are SeqCst: each side sees the other's write (a store
    // buffer must not hide both), so a give-back never misses a waiter.
    fn take(&self, need: Need) -> bool {
        let ops = self.ops.fetch_add(need.ops, Ordering::SeqCst);
        let bytes = self.bytes.fetch_add(need.bytes, Ordering::SeqCst);
        let fits = |now: u64, add: u64, cap: u64| now == 0 || now + add <= cap;
        if fits(ops, need.ops, self.cap.ops) && fits(bytes, need.bytes, self.cap.bytes) {
            return true;
        }
        // Undone without a wake-up: nothing was freed (and the dispatcher
        // may be the one asking, with the queue locked).
        self.ops.fetch_sub(need.ops, Ordering::AcqRel);
        self.bytes.fetch_sub(need.bytes, Ordering::AcqRel);
        false
    }

    /// Gives back what a call took (its completion, or its failed start).
    pub fn give_back(&self, need: Need) {
        self.ops.fetch_sub(need.ops, Ordering::SeqCst);
        self.bytes.fetch_sub(need.bytes, Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) > 0 {
            // Under the lock: the dispatcher is either before its look at
            // the budget (and sees this) or waiting (and is woken).
            drop(self.lock());
            self.freed.notify_one();
        }
    }

    /// Queues `d` for the dispatcher.
    pub fn defer(&self, d: Deferred) {
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.lock().jobs.push_back(d);
        self.freed.notify_one();
    }

    /// Ends the dispatcher once the calls queued have started.
    pub fn close(&self) {
        self.lock().closed = true;
        self.freed.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the first queued call once its need fits (waiting for that
    /// with `wait`, else giving up at once); its rest queues at the back.
    /// False when the budget is closed and nothing is queued (or, without
    /// `wait`, when nothing could start).
    pub fn dispatch_one(&self, wait: bool) -> bool {
        let mut q = self.lock();
        let job = loop {
            match q.jobs.front().map(|d| d.need) {
                Some(need) if self.take(need) => break q.jobs.pop_front(),
                None if q.closed => return false,
                _ if !wait => return false,
                _ => {}
            }
            q = self
                .freed
                .wait_timeout(q, RECHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        drop(q);
        let Some(job) = job else { return true };
        let rest = (job.run)();
        match rest {
            // The rest keeps its place in the count, at the back.
            Some(r) => self.lock().jobs.push_back(r),
            None => {
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
        true
    }
}

/// The objects a range of `len` bytes at `off` touches, in units of
/// `unit` bytes (the image's stripe unit: each unit lies in one object).
pub fn units(off: u64, len: u64, unit: u64) -> u64 {
    let unit = unit.max(1);
    if len == 0 {
        return 0;
    }
    let end = off.saturating_add(len - 1);
    end / unit - off / unit + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(ops: u64, bytes: u64) -> Need {
        Need { ops, bytes }
    }

    #[test]
    fn objects_touched() {
        let m = 4 << 20;
        assert_eq!(units(0, 4096, m), 1);
        assert_eq!(units(m - 4096, 8192, m), 2, "across a boundary");
        assert_eq!(units(0, m, m), 1);
        assert_eq!(units(0, m + 1, m), 2);
        assert_eq!(units(5, 0, m), 0);
        assert_eq!(units(u64::MAX - 10, 100, m), 1, "saturates");
        assert_eq!(units(0, 10, 0), 10, "a zero unit counts bytes");
    }

    #[test]
    fn takes_within_the_cap_and_gives_back() {
        let b = Budget::new(need(4, 1000));
        assert!(b.take_now(need(3, 600)));
        assert!(!b.take_now(need(2, 100)), "ops over the cap");
        assert!(!b.take_now(need(1, 500)), "bytes over the cap");
        assert!(b.take_now(need(1, 400)));
        assert_eq!(b.in_flight(), need(4, 1000));
        b.give_back(need(3, 600));
        b.give_back(need(1, 400));
        assert_eq!(b.in_flight(), need(0, 0));
        // Larger than the cap: only alone.
        assert!(b.take_now(need(9, 5000)));
        assert!(!b.take_now(need(1, 1)));
        b.give_back(need(9, 5000));
        assert_eq!(b.in_flight(), need(0, 0), "a refused take leaves nothing");
    }

    /// Queued calls start in order as the budget comes back, new calls queue
    /// behind them, and a call's rest goes to the back of the queue.
    #[test]
    fn the_dispatcher_starts_in_order_and_interleaves_the_rest() {
        let b = Budget::new(need(2, 1 << 20));
        let log = Arc::new(Mutex::new(Vec::new()));
        let job = |name: &'static str, ops: u64, rest: Option<Deferred>| {
            let log = log.clone();
            Deferred {
                need: need(ops, 0),
                run: Box::new(move || {
                    log.lock().unwrap().push(name);
                    rest
                }),
            }
        };
        assert!(
            b.take_now(need(2, 0)),
            "the budget spent by calls in flight"
        );
        let tail = job("big-2", 1, None);
        b.defer(job("big-1", 1, Some(tail)));
        b.defer(job("small", 1, None));
        assert!(!b.take_now(need(1, 0)), "calls wait: a new one queues too");
        assert!(!b.dispatch_one(false), "nothing fits yet");
        b.give_back(need(1, 0));
        assert!(b.dispatch_one(false));
        assert!(!b.dispatch_one(false), "big-1 took the budget back");
        b.give_back(need(2, 0));
        assert!(b.dispatch_one(false) && b.dispatch_one(false));
        assert_eq!(*log.lock().unwrap(), ["big-1", "small", "big-2"]);
        assert_eq!(b.queued(), 0);
        assert_eq!(b.in_flight(), need(2, 0));
    }

    /// The dispatcher thread starts a queued call when a completion gives
    /// budget back, and ends once closed.
    #[test]
    fn the_thread_starts_calls_when_budget_comes_back() {
        let b = Budget::start(need(1, 1 << 20), "budget-test").unwrap();
        assert!(b.take_now(need(1, 0)));
        let (tx, rx) = std::sync::mpsc::channel();
        b.defer(Deferred {
            need: need(1, 0),
            run: Box::new(move || {
                tx.send(()).unwrap();
                None
            }),
        });
        // The budget is spent: whatever the thread does, it cannot start it.
        assert!(rx.try_recv().is_err());
        b.give_back(need(1, 0));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("started once the budget came back");
        b.close();
    }
}
