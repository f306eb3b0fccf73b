//! The offload thread: runs the few blocking calls a worker must not make
//! (a block device's BLKDISCARD) and hands each result back to the worker
//! that asked, through that worker's [`Mailbox`], as io_uring would.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use crate::core::wake::Mailbox;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// The offload thread.
pub struct Offload {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Offload {
    /// Starts the thread.
    pub fn start() -> std::io::Result<Offload> {
        Self::named("nvmf-offload")
    }

    /// Starts a thread of that name.
    pub fn named(name: &str) -> std::io::Result<Offload> {
        let (tx, rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })?;
        Ok(Offload {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Runs `f` on the thread and posts its result (0 or -errno) to `reply`
    /// under `ud`.
    pub fn run(&self, reply: &Arc<Mailbox>, ud: u64, f: impl FnOnce() -> i32 + Send + 'static) {
        let r = reply.clone();
        let job: Job = Box::new(move || r.post(ud, f()));
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if !sent {
            // The thread is gone (only at exit): fail the operation, never lose it.
            reply.post(ud, -(nix::errno::Errno::EIO as i32));
        }
    }
}

/// The thread that runs what closes a namespace's write gate (Compare and
/// Write, Preempt and Abort) and the reservation changes that sync a file,
/// one at a time for the whole target: closing waits for the writes inside
/// the gate, some of which (a block device's discards) run on the offload
/// threads, so it cannot run on one of those. `None` if it cannot start.
pub fn gate_thread() -> Option<&'static Offload> {
    static T: std::sync::OnceLock<Option<Offload>> = std::sync::OnceLock::new();
    T.get_or_init(|| Offload::named("nvmf-gate").ok()).as_ref()
}

impl Drop for Offload {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
