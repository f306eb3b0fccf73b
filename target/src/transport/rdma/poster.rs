//! Large sends posted off the workers, for software RDMA devices.
//!
//! On soft-RoCE (rxe) and soft-iWARP (siw), `ibv_post_send` on a user-space
//! queue pair runs the protocol in the caller: an RDMA WRITE of 64 KiB is 64
//! packets built, checksummed and sent (over loopback, received too) before
//! the call returns, serially with everything else the worker does. On a
//! hardware device the call writes a doorbell and returns. So for software
//! devices ([`crate::config::SendOffload::Auto`]) a few poster threads make
//! the posts of batches that carry a large RDMA WRITE, and the worker goes on
//! polling; batches of small sends stay on the worker (handing them over costs
//! more than posting them).
//!
//! Order per queue pair is kept by [`route`]: once a queue has a batch with a
//! poster, its later batches go there too until the poster has posted them
//! all, and every queue is served by one poster, first in, first out. The
//! queue pair outlives the posts through [`rdma::SendTicket`]s.
//!
//! One poster serves four workers ([`poster_count`]): under the lab's load
//! (2 workers) one poster is enough, and threads stay few at scale.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rdma::{SendBatch, SendTicket};
use tracing::error;

use crate::telemetry::metrics::metrics;

/// A batch whose longest RDMA WRITE has at least this many bytes is posted by
/// a poster (on a device where posting is offloaded).
pub const OFFLOAD_MIN_WRITE: u32 = 32 * 1024;

/// Work requests per batch (as a queue's own batch).
pub const BATCH_WRS: usize = 64;

/// Who posts a queue's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The worker, now.
    Worker,
    /// The queue's poster.
    Poster,
}

/// Where a batch goes: to the poster when the device offloads and the batch
/// has a large RDMA WRITE, or when earlier batches of the queue are still
/// with the poster (they must be posted first).
pub fn route(offload: bool, largest_write: u32, tickets_out: usize) -> Route {
    if tickets_out > 0 || (offload && largest_write >= OFFLOAD_MIN_WRITE) {
        Route::Poster
    } else {
        Route::Worker
    }
}

/// Poster threads for a target with `workers` workers: one per four workers.
pub fn poster_count(workers: usize) -> usize {
    workers.div_ceil(4).max(1)
}

const NEW: u8 = 0;
const RUNNING: u8 = 1;
const FAILED: u8 = 2;

/// Empty batches kept for reuse (each about 10 KiB); beyond this they are freed.
const MAX_SPARE: usize = 256;

struct Jobs {
    queue: Vec<(SendTicket, SendBatch)>,
    spare: Vec<SendBatch>,
    /// The thread waits on the condition variable (a hand-over wakes it).
    sleeping: bool,
    stop: bool,
}

struct Shared {
    jobs: Mutex<Jobs>,
    cv: Condvar,
    /// `NEW`, `RUNNING`, or `FAILED` (the thread could not start, or died).
    state: AtomicU8,
}

/// One poster thread (started with the first device that offloads, or at
/// its first batch).
pub struct Poster {
    index: usize,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Poster {
    fn new(index: usize) -> Poster {
        Poster {
            index,
            shared: Arc::new(Shared {
                jobs: Mutex::new(Jobs {
                    queue: Vec::new(),
                    spare: Vec::new(),
                    sleeping: false,
                    stop: false,
                }),
                cv: Condvar::new(),
                state: AtomicU8::new(NEW),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Hands `batch` to the poster, to be posted through `ticket`; returns an
    /// empty batch to go on with. If the thread cannot be started (or died),
    /// the batch is posted here.
    ///
    /// # Safety
    /// As [`SendTicket::post`]: every queued work request names memory that
    /// stays valid until its completion (the memory's owner keeps it until
    /// then, whichever thread posts).
    pub unsafe fn hand(&self, ticket: SendTicket, mut batch: SendBatch) -> SendBatch {
        let running = match self.shared.state.load(Ordering::Acquire) {
            NEW => self.start(),
            s => s == RUNNING,
        };
        if running {
            let mut jobs = self.shared.jobs.lock().unwrap_or_else(|p| p.into_inner());
            // Checked again under the lock: a thread that died has emptied
            // the queue for the last time (`Guard`).
            if self.shared.state.load(Ordering::Acquire) == RUNNING {
                jobs.queue.push((ticket, batch));
                let fresh = jobs.spare.pop();
                let wake = std::mem::take(&mut jobs.sleeping);
                drop(jobs);
                if wake {
                    self.shared.cv.notify_one();
                }
                metrics().engine.offloaded_send_batches.inc();
                return fresh.unwrap_or_else(|| SendBatch::new(BATCH_WRS));
            }
        }
        // SAFETY: the caller's guarantee; no batch of this queue pair is
        // left at the poster (it posts or fails every batch it holds before
        // it is marked FAILED).
        if let Err(e) = unsafe { ticket.post(&mut batch) } {
            error!(error = %e, "ibv_post_send");
        }
        batch
    }

    /// Starts the thread if it is not running (workers sharing the poster
    /// race here; one wins). A thread that cannot start leaves the posts to
    /// the workers.
    pub fn start(&self) -> bool {
        let mut t = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        let state = self.shared.state.load(Ordering::Acquire);
        if state != NEW {
            return state == RUNNING;
        }
        let shared = self.shared.clone();
        let state = match std::thread::Builder::new()
            .name(format!("nvmf-post-{}", self.index))
            .spawn(move || run(&shared))
        {
            Ok(h) => {
                *t = Some(h);
                RUNNING
            }
            Err(e) => {
                error!("spawning a send poster thread: {e}; the workers post their sends");
                FAILED
            }
        };
        self.shared.state.store(state, Ordering::Release);
        state == RUNNING
    }
}

/// What the poster thread holds; if the thread unwinds, the batches it
/// holds or that wait for it are given up (their tickets record a failure,
/// so their queues fail, and their queue pairs are released), and later
/// hand-overs are posted by the workers.
struct Guard<'a> {
    shared: &'a Shared,
    work: Vec<(SendTicket, SendBatch)>,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|p| p.into_inner());
        self.shared.state.store(FAILED, Ordering::Release);
        let left: Vec<_> = jobs.queue.drain(..).chain(self.work.drain(..)).collect();
        drop(jobs);
        error!(
            "a send poster thread died; {} batch(es) not posted (their queues fail)",
            left.len()
        );
        for (ticket, _) in left {
            ticket.abandon();
        }
    }
}

fn run(shared: &Shared) {
    let mut g = Guard {
        shared,
        work: Vec::new(),
    };
    let mut done = Vec::new();
    loop {
        {
            let mut jobs = shared.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let room = MAX_SPARE.saturating_sub(jobs.spare.len());
            done.truncate(room);
            jobs.spare.append(&mut done);
            while jobs.queue.is_empty() && !jobs.stop {
                jobs.sleeping = true;
                jobs = shared.cv.wait(jobs).unwrap_or_else(|p| p.into_inner());
            }
            jobs.sleeping = false;
            if jobs.queue.is_empty() {
                return;
            }
            std::mem::swap(&mut jobs.queue, &mut g.work);
        }
        // Oldest first; what is not yet posted stays in the guard.
        g.work.reverse();
        while let Some((ticket, mut batch)) = g.work.pop() {
            // SAFETY: the worker that handed the batch over guaranteed its
            // memory (`Poster::hand`); the ticket keeps the queue pair.
            if let Err(e) = unsafe { ticket.post(&mut batch) } {
                error!(error = %e, "ibv_post_send (poster)");
            }
            done.push(batch);
        }
    }
}

impl Drop for Poster {
    fn drop(&mut self) {
        self.shared
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self
            .thread
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = t.join();
        }
    }
}

/// The target's posters; worker `i` uses poster `i mod n`.
pub struct Posters(Vec<Poster>);

impl Posters {
    /// `n` posters (threads start at their first batch).
    pub fn new(n: usize) -> Posters {
        Posters((0..n.max(1)).map(Poster::new).collect())
    }

    /// The poster of worker `worker`.
    pub fn for_worker(&self, worker: usize) -> &Poster {
        &self.0[worker % self.0.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_write_goes_to_the_poster_only_where_posting_is_offloaded() {
        assert_eq!(route(true, OFFLOAD_MIN_WRITE, 0), Route::Poster);
        assert_eq!(route(true, 128 * 1024, 0), Route::Poster);
        assert_eq!(route(false, 128 * 1024, 0), Route::Worker);
        assert_eq!(route(true, OFFLOAD_MIN_WRITE - 1, 0), Route::Worker);
        assert_eq!(route(true, 0, 0), Route::Worker);
    }

    #[test]
    fn once_a_batch_is_with_the_poster_every_later_batch_follows_it() {
        // Small batches, and even a device that stopped offloading: while a
        // ticket is out, posting on the worker would overtake it.
        for offload in [true, false] {
            for largest in [0, 4096, OFFLOAD_MIN_WRITE] {
                assert_eq!(route(offload, largest, 1), Route::Poster);
                assert_eq!(route(offload, largest, 7), Route::Poster);
            }
        }
    }

    /// A queue's batches, in the order the worker flushes them, keep that
    /// order whoever posts them: simulate the worker and a poster that posts
    /// its FIFO at arbitrary moments, and check the posted order.
    #[test]
    fn batches_are_posted_in_the_order_flushed() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut fifo = std::collections::VecDeque::new();
            let mut posted = Vec::new();
            for b in 0..100u32 {
                while !fifo.is_empty() && next() % 3 == 0 {
                    posted.push(fifo.pop_front().unwrap());
                }
                let largest = if next() % 4 == 0 { 65536 } else { 4096 };
                match route(next() % 2 == 0, largest, fifo.len()) {
                    Route::Worker => posted.push(b),
                    Route::Poster => fifo.push_back(b),
                }
            }
            posted.extend(fifo);
            assert!(posted.windows(2).all(|w| w[0] < w[1]), "{posted:?}");
        }
    }

    #[test]
    fn one_poster_per_four_workers() {
        assert_eq!(poster_count(1), 1);
        assert_eq!(poster_count(2), 1);
        assert_eq!(poster_count(4), 1);
        assert_eq!(poster_count(8), 2);
        assert_eq!(poster_count(64), 16);
    }
}
