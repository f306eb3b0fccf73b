//! The offload thread: runs the few blocking calls a worker must not make
//! (a block device's BLKDISCARD) and hands each result back to the worker
//! that asked, through that worker's [`Mailbox`], as io_uring would; and
//! each namespace's [`Lane`] for its blocking work that must run in order.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::base::wake::Mailbox;
use std::thread::JoinHandle;

/// A job of a thread or lane.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

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

/// One namespace's lane: runs what closes its write gate (Compare and
/// Write, Preempt and Abort) and the reservation changes that sync a file
/// or the cluster, one at a time and in order, on a thread of its own.
/// Closing waits for the writes inside the gate, some of which (a block
/// device's discards) run on the offload threads, so it cannot run on one
/// of those; and one namespace's slow work (an RBD image waiting for its
/// ownership, a notify no gateway answers) must not hold another's, so no
/// two namespaces share a lane. The thread starts with the first job and
/// ends after [`LANE_IDLE`] without one: a target with many namespaces
/// holds threads only for those that are busy.
#[derive(Debug, Default)]
pub struct Lane {
    state: Mutex<LaneState>,
    more: Condvar,
}

#[derive(Default)]
struct LaneState {
    jobs: VecDeque<Job>,
    /// Its thread is running.
    running: bool,
}

impl std::fmt::Debug for LaneState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LaneState({} jobs, running {})",
            self.jobs.len(),
            self.running
        )
    }
}

/// How long a lane's thread waits for more work before it ends.
pub const LANE_IDLE: Duration = Duration::from_secs(10);

impl Lane {
    fn state(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` after the lane's earlier jobs and posts its result (0 or
    /// -errno) to `reply` under `ud`.
    pub fn run(
        self: &Arc<Self>,
        reply: &Arc<Mailbox>,
        ud: u64,
        f: impl FnOnce() -> i32 + Send + 'static,
    ) {
        let r = reply.clone();
        if let Err(job) = self.push(Box::new(move || r.post(ud, f()))) {
            drop(job);
            // No thread could start: fail the operation, never lose it.
            reply.post(ud, -(nix::errno::Errno::EAGAIN as i32));
        }
    }

    /// Queues `job`; gives it back when no thread could start for it.
    pub(crate) fn push(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        let mut st = self.state();
        st.jobs.push_back(job);
        if st.running {
            self.more.notify_one();
            return Ok(());
        }
        let lane = self.clone();
        match std::thread::Builder::new()
            .name("nvmf-lane".into())
            .spawn(move || lane.serve())
        {
            Ok(_) => {
                st.running = true;
                Ok(())
            }
            Err(_) => Err(st.jobs.pop_back().expect("just pushed")),
        }
    }

    fn serve(&self) {
        let mut st = self.state();
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                job();
                st = self.state();
                continue;
            }
            let (next, timeout) = self
                .more
                .wait_timeout(st, LANE_IDLE)
                .unwrap_or_else(|p| p.into_inner());
            st = next;
            if timeout.timed_out() && st.jobs.is_empty() {
                st.running = false;
                return;
            }
        }
    }

    /// Jobs waiting (the one running not counted).
    pub fn waiting(&self) -> usize {
        self.state().jobs.len()
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane runs its jobs in order; another lane is not held by it.
    #[test]
    fn a_stuck_lane_holds_only_its_own_jobs() {
        let (a, b) = (Arc::new(Lane::default()), Arc::new(Lane::default()));
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<&str>();
        let (started, running) = std::sync::mpsc::channel::<()>();
        let t = tx.clone();
        assert!(a
            .push(Box::new(move || {
                let _ = started.send(());
                let _ = stuck.recv();
                let _ = t.send("a1");
            }))
            .is_ok());
        let t = tx.clone();
        assert!(a
            .push(Box::new(move || {
                let _ = t.send("a2");
            }))
            .is_ok());
        let t = tx.clone();
        assert!(b
            .push(Box::new(move || {
                let _ = t.send("b1");
            }))
            .is_ok());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("b1"));
        // The lane's thread took a1 (it runs, so is no longer waiting).
        assert_eq!(running.recv_timeout(Duration::from_secs(10)), Ok(()));
        assert_eq!(a.waiting(), 1);
        release.send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("a1"));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("a2"));
    }
}
