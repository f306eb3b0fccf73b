//! A worker (poll group): one thread serving many queues of whatever
//! transport carries them. It owns what every transport needs and writes it
//! once: the table of queues ([`slots`]), the io_uring every backend
//! operation goes through, the mailbox other threads post completions to,
//! the pool waiters' grants, the timers (heartbeat, each queue's Connect,
//! authentication and keep-alive deadlines, stop requests, removal of
//! queues that ended) and the polling policy ([`polling`]). A transport
//! ([`Transport`]) brings its connections, its completions and how a queue's
//! actions go on its wire; what a command means is the queue core's
//! ([`crate::queue`]).
//!
//! The loop busy-polls while there is work and for a while after the last
//! of it ([`polling::spin_window_us`]), then lets each transport arm its
//! wake-ups and sleeps in one `io_uring_enter` that wakes on any of them, a
//! backend completion, or the worker's eventfd (a new connection, a queue
//! to stop, a completion in the mailbox). It goes round at least every
//! [`IDLE_WAIT`], so its heartbeat tells a sleeping worker from a stuck one.

pub mod buffers;
pub mod config;
pub mod cpus;
pub mod polling;
pub mod slots;
pub mod ud;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::error;

use crate::backend::exec::{Executor, Uring};
use crate::backend::offload::Offload;
use crate::backend::uring::{Ring, Wake};
use crate::base::wake::{Mailbox, Waker};
use crate::counters::Tally;
use crate::model::target::Target;
use crate::queue::{Env, QueueCore, Token};
use crate::request::pool::Buf;
use crate::worker::config::EngineConfig;
use polling::{spin_window_us, Depth, Pace};
pub use slots::{QueueKey, Slots};
use ud::Ud;

/// A pass this long after the last run of the timers follows a stall.
const STALLED: Duration = Duration::from_millis(1000);
/// How often an awake worker runs its timers.
pub const TICK: Duration = Duration::from_millis(100);
/// The longest a worker sleeps: timers (connect and keep-alive timeouts, the
/// heartbeat) need no finer grain, and everything else wakes it.
pub const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Work done within this long of an I/O's start counts as part of a stream
/// of I/O for the polling rule ([`spin_window_us`]): a host at queue depth 1
/// starts one every round trip; keep-alives and the workers' timers start
/// none.
const IO_RECENT: Duration = Duration::from_millis(1);
/// io_uring entries per worker.
const RING_ENTRIES: u32 = 4096;

/// What other threads share with a worker.
pub struct WorkerShared {
    /// Its index.
    pub index: usize,
    /// Wakes it; its heartbeat.
    pub waker: Arc<Waker>,
    /// Completions from outside its ring (lanes, the offload thread,
    /// librbd, a write gate that opened).
    pub mailbox: Arc<Mailbox>,
    /// Asks it to disconnect everything and stop.
    pub stop: AtomicBool,
}

impl WorkerShared {
    /// A worker's shared half.
    pub fn new(index: usize) -> std::io::Result<Arc<WorkerShared>> {
        let waker = Waker::new()?;
        Ok(Arc::new(WorkerShared {
            index,
            mailbox: Mailbox::new(waker.clone()),
            waker,
            stop: AtomicBool::new(false),
        }))
    }
}

/// Request data as the core sees it in memory that needs no registration
/// (NVMe/TCP, the loopback): pool buffers at their offset from `pool`,
/// capsule buffers of [`crate::INLINE_DATA_SIZE`] bytes from `capsules`;
/// backend operations named by the queue `key` and the request.
pub struct PlainMemory {
    /// Start of the data pool.
    pub pool: *mut u8,
    /// Start of the capsule buffers.
    pub capsules: *mut u8,
    /// The queue.
    pub key: QueueKey,
}

impl crate::queue::Memory for PlainMemory {
    fn buffer(&self, b: &Buf) -> crate::backend::DataRef {
        crate::backend::DataRef {
            ptr: self.pool.wrapping_add(b.offset),
            fixed: None,
        }
    }

    fn capsule(&self, slot: u32) -> crate::backend::DataRef {
        crate::backend::DataRef {
            ptr: self
                .capsules
                .wrapping_add(slot as usize * crate::INLINE_DATA_SIZE as usize),
            fixed: None,
        }
    }

    fn backend_ud(&self, t: Token) -> u64 {
        Ud::of(ud::IO, self.key, t).pack()
    }
}

/// Where a transport's listener leaves connections (`T`) for one worker.
pub struct Inbox<T> {
    conns: std::sync::Mutex<Vec<T>>,
    pending: AtomicBool,
    waker: Arc<Waker>,
}

impl<T> Inbox<T> {
    /// The inbox of the worker `waker` wakes.
    pub fn new(waker: Arc<Waker>) -> Arc<Inbox<T>> {
        Arc::new(Inbox {
            conns: std::sync::Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            waker,
        })
    }

    /// Hands a connection to the worker.
    pub fn give(&self, c: T) {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        self.pending.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Wakes its worker.
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// The connections handed over since the last call (cheap when there
    /// are none).
    pub fn take(&self) -> Vec<T> {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.conns.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A data buffer given back to a pool, for the request that waited for it.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// The pool (the transport's number for it).
    pub pool: usize,
    /// The waiting request's queue.
    pub queue: QueueKey,
    /// The request.
    pub req: Token,
    /// The buffer.
    pub buf: Buf,
}

/// What a worker lends a transport while it handles an event.
pub struct Lend<'a> {
    /// The target.
    pub target: &'a Arc<Target>,
    /// Engine settings.
    pub cfg: &'a EngineConfig,
    /// Where backend work runs.
    pub exec: &'a mut dyn Executor,
    /// Buffers given back to a pool that a waiting request gets (the
    /// worker hands them out after the event).
    pub grants: &'a mut Vec<Grant>,
    /// The worker's data pools ([`buffers`]).
    pub pools: &'a mut buffers::Pools,
    /// When the worker's current pass began: the time of every event it
    /// handles (one clock read per pass, not per request; a clock read is a
    /// system call where the clock source has no vDSO path).
    pub now: Instant,
    /// The worker's tally.
    pub tally: &'a mut Tally,
    /// The worker's index.
    pub worker: usize,
    /// The worker's waker (a queue's controller stops it through it).
    pub waker: &'a Arc<Waker>,
    /// The worker is stopping (it takes no new connection).
    pub stopping: bool,
    /// Its QoS buckets and the I/Os waiting for them.
    pub qos: &'a mut crate::request::qos::Throttle,
}

impl Lend<'_> {
    /// Hands an event to `core`, whose request data `mem` says where to
    /// find: the environment every transport's call builds.
    pub fn env<R>(
        &mut self,
        core: &mut QueueCore,
        mem: &dyn crate::queue::Memory,
        f: impl FnOnce(&mut QueueCore, &mut Env<'_, '_>) -> R,
    ) -> R {
        let mut env = Env {
            target: self.target,
            now: self.now,
            mem,
            exec: &mut *self.exec,
            max_keep_alive_ms: self.cfg.max_keep_alive_ms,
            worker: self.worker,
            tally: &mut *self.tally,
            qos: &mut *self.qos,
        };
        f(core, &mut env)
    }

    /// The worker's io_uring, for a transport that polls descriptors or
    /// registers memory there (a worker thread's executor has one).
    pub fn ring(&mut self) -> Option<&mut Ring> {
        self.exec.ring()
    }
}

/// An event for one queue's core.
pub type CoreEvent<'e> = &'e mut dyn FnMut(&mut QueueCore, &mut Env<'_, '_>);

/// A transport's part of a worker: its connections and completions, its
/// queues (each holding its [`QueueCore`], in a [`Slots`] table of its own),
/// and how their actions go on its wire. The worker calls it; it never
/// calls the worker.
pub trait Transport {
    /// Its queues.
    fn queues(&self) -> usize;

    /// Takes the connections handed to this worker and sets each up as a
    /// queue. Returns how many it handled.
    fn accept(&mut self, w: &mut Lend<'_>) -> usize;

    /// Handles what completed outside the worker's ring (an RDMA completion
    /// queue, a socket). Returns how many events.
    fn poll(&mut self, w: &mut Lend<'_>) -> usize;

    /// One of its own operations on the worker's ring completed (a poll of
    /// a descriptor of its own; its kind made by [`ud::transport_kind`]).
    fn complete(&mut self, w: &mut Lend<'_>, ud: Ud, res: i32);

    /// Hands `event` to queue `key`'s core (if it is still there), then
    /// carries out the actions the core queued.
    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, event: CoreEvent<'_>);

    /// Posts what its queues batched in this pass.
    fn flush(&mut self, w: &mut Lend<'_>);

    /// Before the worker sleeps: arms its wake-ups on the ring and looks
    /// once more. Returns the events found meanwhile (which cancel the sleep).
    fn arm(&mut self, w: &mut Lend<'_>) -> usize;

    /// The timers (every [`TICK`]): its own, then each queue's (`stop`: the
    /// worker stops, every queue disconnects); the keys of queues that
    /// ended and may be removed go to `gone`.
    fn tick(&mut self, w: &mut Lend<'_>, stop: bool, gone: &mut Vec<QueueKey>);

    /// Queue `key`, which ended, leaves the worker. Returns whether it was
    /// there.
    fn remove(&mut self, w: &mut Lend<'_>, key: QueueKey) -> bool;

    /// After the timers removed queues: what may go with them (a removed
    /// device nobody uses any more).
    fn tidy(&mut self, _w: &mut Lend<'_>) {}
}

/// The transports of a worker, each at its index in the list: its queues'
/// keys carry the index ([`QueueKey::transport`]), and so do the kinds of
/// its own ring operations ([`Ud::transport`]), so the worker routes each
/// to its transport; another transport is one more entry.
pub struct Transports(Vec<Box<dyn Transport + Send>>);

impl Transports {
    /// `list`, each at its index (at most [`slots::MAX_TRANSPORTS`]; each
    /// built for its index: [`Slots::for_transport`], [`ud::transport_kind`]).
    pub fn new(list: Vec<Box<dyn Transport + Send>>) -> Transports {
        assert!(list.len() <= slots::MAX_TRANSPORTS, "too many transports");
        Transports(list)
    }
}

impl Transport for Transports {
    fn queues(&self) -> usize {
        self.0.iter().map(|t| t.queues()).sum()
    }

    fn accept(&mut self, w: &mut Lend<'_>) -> usize {
        self.0.iter_mut().map(|t| t.accept(w)).sum()
    }

    fn poll(&mut self, w: &mut Lend<'_>) -> usize {
        self.0.iter_mut().map(|t| t.poll(w)).sum()
    }

    fn complete(&mut self, w: &mut Lend<'_>, ud: Ud, res: i32) {
        if let Some(t) = ud.transport().and_then(|i| self.0.get_mut(i)) {
            t.complete(w, ud, res)
        }
    }

    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, event: CoreEvent<'_>) {
        if let Some(t) = self.0.get_mut(key.transport()) {
            t.call(w, key, event)
        }
    }

    fn flush(&mut self, w: &mut Lend<'_>) {
        self.0.iter_mut().for_each(|t| t.flush(w));
    }

    fn arm(&mut self, w: &mut Lend<'_>) -> usize {
        self.0.iter_mut().map(|t| t.arm(w)).sum()
    }

    fn tick(&mut self, w: &mut Lend<'_>, stop: bool, gone: &mut Vec<QueueKey>) {
        self.0.iter_mut().for_each(|t| t.tick(w, stop, gone));
    }

    fn remove(&mut self, w: &mut Lend<'_>, key: QueueKey) -> bool {
        self.0
            .get_mut(key.transport())
            .is_some_and(|t| t.remove(w, key))
    }

    fn tidy(&mut self, w: &mut Lend<'_>) {
        self.0.iter_mut().for_each(|t| t.tidy(w));
    }
}

/// A worker's transport and what it lends it, without the thread: what
/// drives it (the worker's loop, or a test) supplies the executor and the
/// time.
pub struct Group<T: Transport> {
    /// The transport (and its queues).
    pub transport: T,
    grants: Vec<Grant>,
    pools: buffers::Pools,
    tally: Tally,
    index: usize,
    waker: Arc<Waker>,
    target: Arc<Target>,
    cfg: EngineConfig,
    /// The time of the events being handled.
    pub now: Instant,
    /// The worker is stopping: every queue disconnects, none is accepted.
    pub stopping: bool,
    qos: crate::request::qos::Throttle,
}

/// Borrows the group's parts as a [`Lend`] over `exec`.
macro_rules! lend {
    ($g:expr, $exec:expr) => {
        Lend {
            target: &$g.target,
            cfg: &$g.cfg,
            exec: $exec,
            grants: &mut $g.grants,
            pools: &mut $g.pools,
            now: $g.now,
            tally: &mut $g.tally,
            worker: $g.index,
            waker: &$g.waker,
            stopping: $g.stopping,
            qos: &mut $g.qos,
        }
    };
}

impl<T: Transport> Group<T> {
    /// Worker `index`'s group over `transport`; `waker` wakes whatever
    /// drives it.
    pub fn new(
        index: usize,
        waker: Arc<Waker>,
        transport: T,
        target: Arc<Target>,
        cfg: EngineConfig,
    ) -> Group<T> {
        let qos = crate::request::qos::Throttle::new(index, cfg.workers);
        Group {
            transport,
            grants: Vec::new(),
            pools: Default::default(),
            tally: Tally::new(index),
            index,
            waker,
            target,
            cfg,
            now: Instant::now(),
            stopping: false,
            qos,
        }
    }

    /// Runs `f` with the transport and a [`Lend`] over `exec`; then gives
    /// out the buffers that came back meanwhile.
    pub fn with<R>(
        &mut self,
        exec: &mut dyn Executor,
        f: impl FnOnce(&mut T, &mut Lend<'_>) -> R,
    ) -> R {
        let r = {
            let mut w = lend!(self, &mut *exec);
            f(&mut self.transport, &mut w)
        };
        self.hand_out(exec);
        r
    }

    /// Its data pools (a transport adds its own).
    pub fn pools(&mut self) -> &mut buffers::Pools {
        &mut self.pools
    }

    /// Data buffers out of its pools.
    pub fn buffers_in_use(&self) -> usize {
        self.pools.in_use()
    }

    /// The worker's tally (a test's harness tears queues down with it).
    pub fn tally(&mut self) -> &mut Tally {
        &mut self.tally
    }

    /// Hands `event` to queue `key`, if it is still there; then gives out
    /// the buffers that came back meanwhile.
    pub fn deliver(&mut self, exec: &mut dyn Executor, key: QueueKey, event: CoreEvent<'_>) {
        self.with(exec, |t, w| t.call(w, key, event));
    }

    /// Gives buffers that came back to the requests waiting for them.
    fn hand_out(&mut self, exec: &mut dyn Executor) {
        while let Some(g) = self.grants.pop() {
            let mut w = lend!(self, &mut *exec);
            let mut back = Some(g.buf);
            self.transport.call(&mut w, g.queue, &mut |c, env| {
                back = c.buffer_granted(env, g.req, g.buf);
                if back.is_none() {
                    env.tally.buffer(g.buf.class as usize, 1);
                }
            });
            if let Some(b) = back {
                buffers::unused(&mut w, g.pool, b);
            }
        }
    }

    /// A completion of a backend operation (its request's queue gets it)
    /// or of the transport's own.
    pub fn complete(&mut self, exec: &mut dyn Executor, raw: u64, res: i32) {
        let ud = Ud::unpack(raw);
        match ud.kind {
            ud::IO => self.deliver(exec, ud.queue, &mut |c, env| {
                c.backend_done(env, ud.req, res)
            }),
            _ if ud.transport().is_some() => self.with(exec, |t, w| t.complete(w, ud, res)),
            _ => {}
        }
    }

    /// The I/Os whose QoS tokens came go on. Returns how many.
    pub fn qos_ready(&mut self, exec: &mut dyn Executor) -> usize {
        if !self.qos.is_waiting() {
            return 0;
        }
        let go = self.qos.ready(self.now);
        for w in &go {
            let ud = Ud::unpack(w.ud);
            let waited = self.now.saturating_duration_since(w.since);
            for l in &w.limits {
                self.tally
                    .qos_throttled(&l.subsystem, l.nsid, &l.host, waited);
            }
            self.deliver(exec, ud.queue, &mut |c, env| c.qos_resume(env, ud.req));
        }
        go.len()
    }

    /// How long until a waiting I/O's tokens come (`None`: none waits).
    pub fn qos_due(&mut self) -> Option<Duration> {
        self.qos.next_due(self.now)
    }

    /// Posts what the transport's queues batched.
    pub fn flush(&mut self, exec: &mut dyn Executor) {
        self.with(exec, |t, w| t.flush(w));
    }

    /// Timers: the transport's and each queue's, stop requests, and removal
    /// of queues that ended.
    pub fn tick(&mut self, exec: &mut dyn Executor) {
        self.tally.publish();
        let stop = self.stopping;
        let mut gone = Vec::new();
        self.with(exec, |t, w| t.tick(w, stop, &mut gone));
        for key in gone {
            let mut w = lend!(self, &mut *exec);
            if !self.transport.remove(&mut w, key) {
                continue;
            }
            self.target.live_queues.fetch_sub(1, Ordering::AcqRel);
            crate::counters::meter().worker_queues(self.index, -1);
        }
        // What the timers queued (AER answers, liveness probes) goes now, not
        // after the next wake-up.
        self.flush(exec);
        self.with(exec, |t, w| t.tidy(w));
    }
}

/// A worker thread: its group, its ring and what wakes it. Field order is
/// drop order: the ring (with its fixed-buffer registrations of a
/// transport's memory) goes before the group.
pub struct Worker<T: Transport> {
    ring: Ring,
    group: Group<T>,
    wake_armed: bool,
    /// The eventfd fired (a queue to stop, the worker to stop): run the
    /// timers in this pass rather than after the next sleep.
    tick_now: bool,
    shared: Arc<WorkerShared>,
    offload: Arc<Offload>,
}

/// The worker's executor: its ring, offload thread and mailbox.
macro_rules! uring {
    ($w:expr) => {
        &mut Uring {
            ring: &mut $w.ring,
            offload: &$w.offload,
            mailbox: &$w.shared.mailbox,
        }
    };
}

impl<T: Transport> Worker<T> {
    /// A worker serving `transport`, ready to run.
    pub fn new(
        shared: Arc<WorkerShared>,
        transport: T,
        target: Arc<Target>,
        cfg: EngineConfig,
        offload: Arc<Offload>,
    ) -> Result<Worker<T>, String> {
        let ring = Ring::new(RING_ENTRIES).map_err(|e| format!("io_uring setup: {e}"))?;
        Ok(Worker {
            ring,
            group: Group::new(shared.index, shared.waker.clone(), transport, target, cfg),
            wake_armed: false,
            tick_now: false,
            shared,
            offload,
        })
    }

    /// A completion on the ring or through the mailbox: the worker's own
    /// wake-up, or its group's.
    fn complete(&mut self, raw: u64, res: i32) {
        if Ud::unpack(raw).kind == ud::POLL_WAKE {
            self.wake_armed = false;
            self.tick_now = true;
            self.shared.waker.clear();
            return;
        }
        self.group.complete(uring!(self), raw, res);
    }

    fn tick(&mut self) {
        self.shared.waker.beat();
        self.group.stopping = self.shared.stop.load(Ordering::Acquire);
        self.group.tick(uring!(self));
    }

    /// The loop. Returns when asked to stop and every queue is gone.
    pub fn run(mut self) {
        // A local, so dropped before `self` (the transport's memory) if this
        // unwinds.
        let _abort = crate::base::abort::AbortOnUnwind("worker");
        crate::base::shard::set_mine(self.shared.index);
        let mut cqes = [(0u64, 0i32); 64];
        let mut mail = Vec::new();
        let mut last_work = Instant::now();
        let mut last_tick = last_work;
        // The start of the last pass that found work: the busy time runs from
        // there to the start of the next pass (one clock read per pass).
        let mut busy_since: Option<Instant> = None;
        let mut woke = false;
        // When the target last started an I/O (seen by this worker).
        let (mut io_seen, mut last_io) = (0i64, last_work);
        // The hosts' turn-around under light load, and since when the target
        // has had nothing in flight (while I/O flowed).
        let mut pace = Pace::default();
        let mut depth = Depth::default();
        let mut answered_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            self.group.now = now;
            let target = self.group.target.clone();
            let io_started = target.io_started.sum(Ordering::Relaxed);
            if io_started != io_seen {
                (io_seen, last_io) = (io_started, now);
                if let Some(at) = answered_at.take() {
                    let max = self.group.cfg.light_load_spin_us;
                    pace.learn(now.duration_since(at).as_micros() as u64, max);
                }
            }
            if let Some(b) = busy_since.take() {
                self.group.tally.busy(now.duration_since(b));
            }
            if std::mem::take(&mut woke) {
                last_work = now;
            }
            // A worker that did not run for a while (its process stopped,
            // its threads frozen) runs its timers first: an association
            // whose keep-alive expired meanwhile, which its host has given
            // up on and retried elsewhere, ends before its commands that
            // waited in the receive queue could execute.
            if now.duration_since(last_tick) >= STALLED {
                last_tick = now;
                self.tick();
            }
            let mut work = self.group.with(uring!(self), |t, w| t.poll(w));
            let n = self.ring.reap(&mut cqes);
            for &(ud, res) in &cqes[..n] {
                self.complete(ud, res);
            }
            work += n;
            self.shared.mailbox.take(&mut mail);
            work += mail.len();
            for (ud, res) in mail.drain(..) {
                self.complete(ud, res);
            }
            work += self.group.qos_ready(uring!(self));
            self.group.stopping = self.shared.stop.load(Ordering::Acquire);
            work += self.group.with(uring!(self), |t, w| t.accept(w));
            self.group.flush(uring!(self));
            if let Err(e) = self.ring.submit() {
                error!(worker = self.shared.index, error = %e, "io_uring submit");
            }
            if std::mem::take(&mut self.tick_now) || now.duration_since(last_tick) >= TICK {
                last_tick = now;
                self.tick();
                if self.shared.stop.load(Ordering::Acquire) && self.group.transport.queues() == 0 {
                    return;
                }
            }
            let in_flight = target.io_in_flight.sum(Ordering::Relaxed).max(0) as usize;
            depth.see(in_flight, now);
            if work > 0 {
                busy_since = Some(now);
                last_work = now;
                continue;
            }
            let io_recent = last_work.duration_since(last_io) < IO_RECENT;
            if in_flight == 0 && io_recent && answered_at.is_none() {
                answered_at = Some(now);
            }
            let spin = Duration::from_micros(spin_window_us(
                target.poll_spin_us.load(Ordering::Relaxed),
                pace.window_us(self.group.cfg.light_load_spin_us),
                in_flight,
                depth.deep(now),
                io_recent,
            ));
            if now.duration_since(last_work) < spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep: what was counted goes out first; the transport arms its
            // wake-ups and looks once more, then the worker waits on the ring.
            self.group.tally.publish();
            let late = self.group.with(uring!(self), |t, w| t.arm(w));
            if late > 0 {
                self.group.flush(uring!(self));
                busy_since = Some(now);
                last_work = now;
                continue;
            }
            if !self.wake_armed {
                self.wake_armed = self
                    .ring
                    .poll_in(self.shared.waker.fd(), Ud::worker(ud::POLL_WAKE).pack())
                    .is_ok();
            }
            // I/Os waiting for QoS tokens: awake when the first may go.
            let wait = self.group.qos_due().map_or(IDLE_WAIT, |d| d.min(IDLE_WAIT));
            // A wait that only timed out is no sign of work: it does not open
            // the polling window again (with `poll_spin_us` at its ceiling an
            // idle worker would otherwise poll one second in two).
            match self.ring.wait(wait) {
                Ok(w) => woke = w == Wake::Event,
                Err(e) => {
                    error!(worker = self.shared.index, error = %e, "io_uring wait");
                    std::thread::sleep(Duration::from_millis(10));
                    woke = true;
                }
            }
            self.group.tally.woke();
        }
    }
}

/// Counts a queue a transport added to its worker's table.
pub fn queue_added(w: &Lend<'_>) {
    w.target.live_queues.fetch_add(1, Ordering::AcqRel);
    crate::counters::meter().worker_queues(w.worker, 1);
}
