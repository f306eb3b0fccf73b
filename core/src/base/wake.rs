//! How other threads reach a worker: its [`Waker`] (an eventfd it sleeps
//! on, and its heartbeat) and its [`Mailbox`] of completions that do not come
//! from its own io_uring (librbd callbacks, the offload thread, a write gate
//! reopening).

use super::clock::monotonic_ms;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Wakes a worker thread from its sleep, and records when it last went round
/// its loop (the liveness check behind the watchdog). One per worker; every
/// queue the worker serves links to it.
#[derive(Debug)]
pub struct Waker {
    efd: nix::sys::eventfd::EventFd,
    /// [`monotonic_ms`](super::clock::monotonic_ms) when the worker last went round its loop.
    heartbeat: AtomicU64,
}

impl Waker {
    /// A waker with its own non-blocking eventfd.
    pub fn new() -> std::io::Result<Arc<Waker>> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        Ok(Arc::new(Waker {
            efd,
            heartbeat: AtomicU64::new(monotonic_ms()),
        }))
    }
    /// Wakes the worker.
    pub fn wake(&self) {
        // A full counter (EAGAIN) already wakes the worker.
        let _ = self.efd.write(1);
    }
    /// Records that the worker is alive.
    pub fn beat(&self) {
        self.heartbeat.store(monotonic_ms(), Ordering::Relaxed);
    }
    /// Milliseconds since the worker last went round its loop.
    pub fn silent_ms(&self) -> u64 {
        monotonic_ms().saturating_sub(self.heartbeat.load(Ordering::Relaxed))
    }
    /// The eventfd to wait on.
    pub fn fd(&self) -> i32 {
        self.efd.as_fd().as_raw_fd()
    }
    /// Drains the eventfd counter.
    pub fn clear(&self) {
        let _ = self.efd.read();
    }
}

/// Where a worker receives completions from outside its ring.
#[derive(Debug)]
pub struct Mailbox {
    done: Mutex<Vec<(u64, i32)>>,
    pending: std::sync::atomic::AtomicBool,
    /// None: whoever takes from it polls (a test's executor).
    waker: Option<Arc<Waker>>,
}

impl Mailbox {
    /// A mailbox that wakes `waker` when something arrives.
    pub fn new(waker: Arc<Waker>) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            done: Mutex::new(Vec::new()),
            pending: false.into(),
            waker: Some(waker),
        })
    }

    /// A mailbox that wakes nobody: its taker polls it.
    pub fn detached() -> Arc<Mailbox> {
        Arc::new(Mailbox {
            done: Mutex::new(Vec::new()),
            pending: false.into(),
            waker: None,
        })
    }

    /// Delivers a completion and wakes the worker.
    pub fn post(&self, ud: u64, res: i32) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((ud, res));
        self.pending
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// Moves the delivered completions into `out` (cheap when there are none).
    pub fn take(&self, out: &mut Vec<(u64, i32)>) {
        if !self
            .pending
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        out.append(&mut self.done.lock().unwrap_or_else(|p| p.into_inner()));
    }
}
