//! Blocking work of many peers on a few threads, fairly: authentication
//! transactions (their Diffie-Hellman exponentiations take tens of
//! milliseconds each at ffdhe8192) must stay off the workers, and no peer,
//! from however few addresses, may keep another's from its turn. Each key
//! (a peer address) has its own queue, bounded; the threads take the keys
//! in turn, one job each; the total queued is bounded too. Work beyond a
//! bound is given back: the caller answers "try again later".
//!
//! Threads start as work arrives (up to the pool's size) and end after
//! [`super::offload::LANE_IDLE`] without work.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::offload::{Job, LANE_IDLE};
use crate::base::wake::Mailbox;

/// Why work was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Its key has its bound of queued work.
    PerKey,
    /// The pool has its bound of queued work in all.
    Total,
}

impl Full {
    /// The reason as counted in the rejections metric.
    pub fn reason(self) -> &'static str {
        match self {
            Full::PerKey => "auth_busy_per_peer",
            Full::Total => "auth_busy_total",
        }
    }
}

#[derive(Default)]
struct State {
    queues: HashMap<IpAddr, VecDeque<Job>>,
    /// Keys with queued work, in the order of their turns.
    turns: VecDeque<IpAddr>,
    queued: usize,
    threads: usize,
    idle: usize,
}

/// The pool.
pub struct FairPool {
    size: usize,
    per_key: usize,
    total: usize,
    state: Mutex<State>,
    more: Condvar,
}

impl std::fmt::Debug for FairPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairPool")
            .field("size", &self.size)
            .field("per_key", &self.per_key)
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl FairPool {
    /// At most `size` threads; `per_key` jobs queued per key and `total`
    /// in all (the running ones not counted).
    pub fn new(size: usize, per_key: usize, total: usize) -> Arc<FairPool> {
        Arc::new(FairPool {
            size: size.max(1),
            per_key: per_key.max(1),
            total: total.max(1),
            state: Mutex::new(State::default()),
            more: Condvar::new(),
        })
    }

    /// A pool sized to the machine: half its CPUs (the workers keep the
    /// rest), at least one, at most eight.
    pub fn for_machine(per_key: usize, total: usize) -> Arc<FairPool> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self::new((cpus / 2).clamp(1, 8), per_key, total)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in `key`'s turn and posts its result to `reply` under
    /// `ud`; gives `f` back, and why, when a bound is reached.
    pub fn run<F>(
        self: &Arc<Self>,
        reply: &Arc<Mailbox>,
        key: IpAddr,
        ud: u64,
        f: F,
    ) -> Result<(), (F, Full)>
    where
        F: FnOnce() -> i32 + Send + 'static,
    {
        let mut st = self.state();
        if let Some(full) = self.full(&st, key) {
            return Err((f, full));
        }
        let r = reply.clone();
        self.queue(&mut st, key, Box::new(move || r.post(ud, f())));
        if st.idle > 0 {
            self.more.notify_one();
        } else if st.threads < self.size {
            let pool = self.clone();
            if std::thread::Builder::new()
                .name("nvmf-auth".into())
                .spawn(move || pool.serve())
                .is_ok()
            {
                st.threads += 1;
            } else if st.threads == 0 {
                // No thread at all: the job could wait for ever.
                let job = Self::take(&mut st);
                drop(st);
                if let Some((_, job)) = job {
                    reply.post(ud, -(nix::errno::Errno::EAGAIN as i32));
                    drop(job);
                }
            }
        }
        Ok(())
    }

    fn full(&self, st: &State, key: IpAddr) -> Option<Full> {
        if st.queues.get(&key).map_or(0, |q| q.len()) >= self.per_key {
            Some(Full::PerKey)
        } else if st.queued >= self.total {
            Some(Full::Total)
        } else {
            None
        }
    }

    fn queue(&self, st: &mut State, key: IpAddr, job: Job) {
        let q = st.queues.entry(key).or_default();
        if q.is_empty() {
            st.turns.push_back(key);
        }
        q.push_back(job);
        st.queued += 1;
    }

    /// The next job: the first key in turn gives one and goes to the back.
    fn take(st: &mut State) -> Option<(IpAddr, Job)> {
        let key = st.turns.pop_front()?;
        let q = st.queues.get_mut(&key)?;
        let job = q.pop_front()?;
        if q.is_empty() {
            st.queues.remove(&key);
        } else {
            st.turns.push_back(key);
        }
        st.queued -= 1;
        Some((key, job))
    }

    fn serve(&self) {
        let mut st = self.state();
        loop {
            if let Some((_, job)) = Self::take(&mut st) {
                drop(st);
                job();
                st = self.state();
                continue;
            }
            st.idle += 1;
            let (next, timeout) = self
                .more
                .wait_timeout(st, LANE_IDLE)
                .unwrap_or_else(|p| p.into_inner());
            st = next;
            st.idle -= 1;
            if timeout.timed_out() && st.queued == 0 {
                st.threads -= 1;
                return;
            }
        }
    }

    /// Jobs queued (the running ones not counted).
    pub fn queued(&self) -> usize {
        self.state().queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Issue 57, 5: three addresses flood the pool; a fourth's job runs in
    /// its first turn, not after theirs; each address's queue and the total
    /// are bounded.
    #[test]
    fn a_flood_from_three_addresses_keeps_no_fourth_from_its_turn() {
        let pool = FairPool::new(1, 4, 14);
        let mb = Mailbox::detached();
        let (release, gate) = channel::<()>();
        let (started, running) = channel::<()>();
        // The one thread, held by a job that waits.
        pool.run(&mb, ip(9), 0, move || {
            let _ = started.send(());
            let _ = gate.recv();
            0
        })
        .map_err(|_| ())
        .unwrap();
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        let (tx, order) = channel::<u8>();
        for attacker in [1, 2, 3] {
            for _ in 0..4 {
                let t = tx.clone();
                let r = pool.run(&mb, ip(attacker), 0, move || {
                    let _ = t.send(attacker);
                    0
                });
                assert!(r.is_ok());
            }
            let r = pool.run(&mb, ip(attacker), 0, || 0);
            assert_eq!(r.err().map(|e| e.1), Some(Full::PerKey), "its bound");
        }
        let t = tx.clone();
        assert!(pool
            .run(&mb, ip(4), 0, move || {
                let _ = t.send(4);
                0
            })
            .is_ok());
        assert_eq!(pool.queued(), 13);
        let t = tx.clone();
        assert!(pool
            .run(&mb, ip(5), 0, move || {
                let _ = t.send(5);
                0
            })
            .is_ok());
        let r = pool.run(&mb, ip(6), 0, || 0);
        assert_eq!(r.err().map(|e| e.1), Some(Full::Total), "the total");
        release.send(()).unwrap();
        let got: Vec<u8> = (0..14)
            .map(|_| order.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(&got[..5], &[1, 2, 3, 4, 5], "one turn each: {got:?}");
        assert_eq!(got.iter().filter(|&&k| k == 1).count(), 4);
        let mut posted = Vec::new();
        for _ in 0..100 {
            mb.take(&mut posted);
            if posted.len() == 15 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(posted.len(), 15, "every job's result posted");
        assert_eq!(pool.queued(), 0);
    }

    #[test]
    fn threads_grow_to_the_size_and_serve_at_once() {
        let pool = FairPool::new(2, 8, 64);
        let mb = Mailbox::detached();
        let (release, gate) = channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let (started, running) = channel::<()>();
        for _ in 0..2 {
            let (g, s) = (gate.clone(), started.clone());
            assert!(pool
                .run(&mb, ip(1), 0, move || {
                    let _ = s.send(());
                    let _ = g.lock().unwrap().recv();
                    0
                })
                .is_ok());
        }
        // Both run at once: two threads.
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        release.send(()).unwrap();
        release.send(()).unwrap();
    }
}
