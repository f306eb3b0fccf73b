//! A loopback transport, as nvmet's `nvme-loop`: a host and the target in
//! one process, with no RDMA. Capsule bytes go in, completions and data come
//! out; the host's memory is a set of windows its keyed SGLs name (the key
//! picks the window, the address is an offset in it). Backend operations
//! run for real (the null backend, files through an io_uring ring, the
//! offload threads), timers run on a clock the caller advances. The whole
//! command path from Connect to disconnect runs in `cargo test` and under
//! the fuzzer through it.
//!
//! Work the transport would do on the wire (a fetch of host data, a response)
//! is queued and delivered in order by [`Loopback::run`], so commands of a
//! queue overlap as they do on a real connection.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::{Command, Completion, SQE_SIZE};

use crate::backend::exec::Inline;
use crate::backend::DataRef;
use crate::engine::pool::{Buf, Pool, PoolShape};
use crate::model::controller::QueueLink;
use crate::model::subsystem::Target;
use crate::queue::{Action, Addrs, Env, Memory, QueueCore, QueueParams, Token};
use crate::telemetry::tally::Tally;
use crate::worker::wake::{Mailbox, Waker};
use crate::{INLINE_DATA_SIZE, PAGE};

mod aligned;

use aligned::Aligned;

/// Work on the "wire", delivered in order.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Fetched {
        q: usize,
        req: Token,
        ok: bool,
    },
    /// The response was delivered (`Some`), or its data could not be.
    Sent {
        q: usize,
        req: Token,
        cqe: Option<Completion>,
    },
    ProbeAnswered {
        q: usize,
    },
}

/// One queue: its core, its receive buffers, what its host received.
struct LoopQueue {
    core: QueueCore,
    /// The in-capsule data of each receive slot (page-aligned slots).
    data: Aligned,
    free_slots: Vec<u32>,
    /// Completions the host received, oldest first.
    cqes: VecDeque<Completion>,
    /// Keys the target invalidated with a response.
    invalidated: Vec<u32>,
    closed: bool,
}

/// The target's memory as the core sees it.
struct LoopMemory {
    pool: *mut u8,
    capsules: *mut u8,
    q: usize,
}

impl Memory for LoopMemory {
    fn buffer(&self, b: &Buf) -> DataRef {
        DataRef {
            ptr: self.pool.wrapping_add(b.offset),
            fixed: None,
        }
    }
    fn capsule(&self, slot: u32) -> DataRef {
        DataRef {
            ptr: self
                .capsules
                .wrapping_add(slot as usize * INLINE_DATA_SIZE as usize),
            fixed: None,
        }
    }
    fn backend_ud(&self, t: Token) -> u64 {
        (self.q as u64) << 32 | (t.slot as u64) << 16 | t.gen as u64
    }
}

/// `cmd` without data, as Linux sends one: a keyed SGL of length 0 (a
/// zeroed descriptor is a data block, which the target refuses).
pub fn no_data(mut cmd: Command) -> Command {
    cmd.set_sgl(&nvme::Sgl::Keyed {
        addr: 0,
        len: 0,
        key: 0,
        invalidate: false,
    });
    cmd
}

/// Errors the host side meets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoopError {
    /// No such queue, or it was removed.
    #[error("no queue {0}")]
    NoQueue(usize),
    /// The queue closed its connection.
    #[error("queue {0} is closed")]
    Closed(usize),
    /// Every receive of the queue holds a capsule (the host ignored flow
    /// control); on RDMA the capsule would meet a receiver-not-ready.
    #[error("queue {0} has no receive posted")]
    NoReceive(usize),
    /// More in-capsule data than a receive holds.
    #[error("{0} bytes of in-capsule data")]
    TooMuchData(usize),
}

/// A host and the target, in process.
pub struct Loopback {
    target: Arc<Target>,
    now: Instant,
    exec: Inline,
    waker: Arc<Waker>,
    pool: Pool<(usize, Token)>,
    pool_mem: Aligned,
    queues: Vec<Option<LoopQueue>>,
    windows: HashMap<u32, Vec<u8>>,
    next_key: u32,
    wire: VecDeque<Wire>,
    /// Buffers given back that waiting requests get.
    grants: Vec<((usize, Token), Buf)>,
    /// Whether a probe is answered (a host that is gone answers none).
    pub answer_probes: bool,
    /// Queues whose host takes no response (posts no receives): their
    /// responses are held, never delivered.
    pub deaf: Vec<usize>,
    /// Responses held for the deaf queues.
    held: Vec<Wire>,
    /// `[target] max_keep_alive_ms`.
    pub max_keep_alive_ms: u32,
    tally: Tally,
}

/// The default pool: 64 small buffers of 8 KiB and 8 large ones of the
/// largest transfer.
pub const POOL: PoolShape = PoolShape {
    small_size: 8192,
    small_count: 64,
    large_size: crate::MAX_IO_SIZE as usize,
    large_count: 8,
};

impl Loopback {
    /// A loopback in front of `target` with a data pool of `shape`.
    pub fn new(target: Arc<Target>, shape: PoolShape) -> std::io::Result<Loopback> {
        let waker = Waker::new()?;
        let pool = Pool::new(shape);
        let pool_mem = Aligned::new(pool.shape().bytes().max(PAGE));
        Ok(Loopback {
            target,
            now: Instant::now(),
            exec: Inline::new(Mailbox::detached()),
            waker,
            pool,
            pool_mem,
            queues: Vec::new(),
            windows: HashMap::new(),
            next_key: 1,
            wire: VecDeque::new(),
            grants: Vec::new(),
            answer_probes: true,
            deaf: Vec::new(),
            held: Vec::new(),
            max_keep_alive_ms: 120_000,
            tally: Tally::new(),
        })
    }

    /// The target.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// Where backend work runs (a test holds a lane there).
    pub fn executor(&mut self) -> &mut Inline {
        &mut self.exec
    }

    /// The loopback's clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Moves the clock forward by `d` and runs every queue's timers.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        for q in 0..self.queues.len() {
            self.with_core(q, |c, env| c.timer(env));
        }
    }

    /// A new queue `qid` of `sq_size` entries, accepted (as a transport
    /// accepts a connection); returns its index.
    pub fn accept(&mut self, qid: u16, sq_size: u16) -> usize {
        let params = QueueParams { qid, sq_size };
        let waker = self.waker.clone();
        let addrs = Addrs {
            peer: Some("192.0.2.1:4420".parse().expect("an address")),
            local: Some("192.0.2.2:4420".parse().expect("an address")),
        };
        let core = QueueCore::new(params, addrs, QueueLink::new(qid, waker), None, self.now);
        let slots = sq_size as u32;
        self.queues.push(Some(LoopQueue {
            core,
            data: Aligned::new(slots as usize * INLINE_DATA_SIZE as usize),
            free_slots: (0..slots).rev().collect(),
            cqes: VecDeque::new(),
            invalidated: Vec::new(),
            closed: false,
        }));
        self.queues.len() - 1
    }

    /// Registers host memory holding `bytes`; returns its key (the address
    /// of a keyed SGL is an offset in it).
    pub fn window(&mut self, bytes: Vec<u8>) -> u32 {
        let k = self.next_key;
        self.next_key += 1;
        self.windows.insert(k, bytes);
        k
    }

    /// The host memory of window `key`.
    pub fn window_data(&self, key: u32) -> &[u8] {
        self.windows.get(&key).map_or(&[], |v| v)
    }

    /// The host sends a capsule on queue `q`: command `cmd` with
    /// `in_capsule` data after it.
    pub fn send(&mut self, q: usize, cmd: &Command, in_capsule: &[u8]) -> Result<(), LoopError> {
        self.send_raw(q, &cmd.raw, in_capsule)
    }

    /// As [`Loopback::send`], with the command as raw bytes (a capsule
    /// shorter than a command included).
    pub fn send_raw(&mut self, q: usize, sqe: &[u8], in_capsule: &[u8]) -> Result<(), LoopError> {
        if in_capsule.len() > INLINE_DATA_SIZE as usize {
            return Err(LoopError::TooMuchData(in_capsule.len()));
        }
        let lq = self
            .queues
            .get_mut(q)
            .and_then(|x| x.as_mut())
            .ok_or(LoopError::NoQueue(q))?;
        if lq.closed {
            return Err(LoopError::Closed(q));
        }
        let slot = lq.free_slots.pop().ok_or(LoopError::NoReceive(q))?;
        let at = lq
            .data
            .ptr()
            .wrapping_add(slot as usize * INLINE_DATA_SIZE as usize);
        // SAFETY: the slot is free (its receive is posted): nothing else
        // uses its INLINE_DATA_SIZE bytes, which `in_capsule` fits.
        unsafe { std::ptr::copy_nonoverlapping(in_capsule.as_ptr(), at, in_capsule.len()) };
        // A capsule shorter than a command carries no data.
        let byte_len = if sqe.len() < SQE_SIZE {
            sqe.len()
        } else {
            SQE_SIZE + in_capsule.len()
        } as u32;
        self.with_core(q, |c, env| c.capsule(env, slot, sqe, byte_len));
        Ok(())
    }

    /// The host's side goes away (a disconnect of the connection).
    pub fn host_disconnect(&mut self, q: usize) {
        self.with_core(q, |c, env| c.disconnect(env, "host disconnected", "host"));
    }

    /// Runs until nothing is left to do: work on the wire delivered,
    /// backend operations completed (a parked command stays parked).
    pub fn run(&mut self) {
        self.run_until(|_| false);
    }

    /// Runs until `done` holds or nothing is left to do. Returns whether
    /// `done` held.
    pub fn run_until(&mut self, done: impl Fn(&Loopback) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.pump() == 0 {
                return done(self);
            }
        }
    }

    /// One pass: the wire, the ring, the mailbox. Returns events handled.
    fn pump(&mut self) -> usize {
        let mut n = 0;
        while let Some(w) = self.wire.pop_front() {
            n += 1;
            match w {
                Wire::Fetched { q, req, ok } => {
                    self.with_core(q, |c, env| c.fetched(env, req, ok));
                }
                Wire::Sent { q, req, cqe } => {
                    if let (Some(lq), Some(cqe)) =
                        (self.queues.get_mut(q).and_then(|x| x.as_mut()), cqe)
                    {
                        if !lq.closed {
                            lq.cqes.push_back(cqe);
                        }
                    }
                    self.with_core(q, |c, env| c.sent(env, req, cqe.is_some()));
                }
                Wire::ProbeAnswered { q } => {
                    let now = self.now;
                    if let Some(lq) = self.queues.get_mut(q).and_then(|x| x.as_mut()) {
                        lq.core.probe_answered(now);
                    }
                }
            }
        }
        // One backend operation at a time, each completion handed to its
        // queue before the next runs (a write leaves its gate before a
        // job that closes the gate runs).
        if n == 0 {
            if let Some((ud, res)) = self.exec.run_next() {
                n += 1;
                self.backend_done(ud, res);
            }
        }
        n
    }

    fn backend_done(&mut self, ud: u64, res: i32) {
        let q = (ud >> 32) as usize;
        let t = Token {
            slot: (ud >> 16) as u16,
            gen: ud as u16,
        };
        self.with_core(q, |c, env| c.backend_done(env, t, res));
    }

    /// Hands an event to queue `q`'s core, then carries out its actions.
    fn with_core<R>(
        &mut self,
        q: usize,
        f: impl FnOnce(&mut QueueCore, &mut Env<'_, '_>) -> R,
    ) -> Option<R> {
        let r = self.call(q, f)?;
        self.drain(q);
        Some(r)
    }

    fn call<R>(
        &mut self,
        q: usize,
        f: impl FnOnce(&mut QueueCore, &mut Env<'_, '_>) -> R,
    ) -> Option<R> {
        let lq = self.queues.get_mut(q)?.as_mut()?;
        let mem = LoopMemory {
            pool: self.pool_mem.ptr(),
            capsules: lq.data.ptr(),
            q,
        };
        let mut env = Env {
            target: &self.target,
            now: self.now,
            mem: &mem,
            exec: &mut self.exec,
            max_keep_alive_ms: self.max_keep_alive_ms,
            worker: 0,
            tally: &mut self.tally,
        };
        Some(f(&mut lq.core, &mut env))
    }

    /// Carries out queue `q`'s actions, then hands given-back buffers to
    /// the requests that waited for them.
    fn drain(&mut self, q: usize) {
        while let Some(a) = self
            .queues
            .get_mut(q)
            .and_then(|x| x.as_mut())
            .and_then(|lq| lq.core.next_action())
        {
            self.act(q, a);
        }
        while let Some(((wq, t), buf)) = self.grants.pop() {
            match self.call(wq, |c, env| c.buffer_granted(env, t, buf)) {
                Some(None) => self.drain(wq),
                Some(Some(b)) => self.give(b),
                None => self.give(buf),
            }
        }
    }

    fn give(&mut self, b: Buf) {
        if let Some(g) = self.pool.give(b) {
            self.grants.push(g);
        }
    }

    fn act(&mut self, q: usize, a: Action) {
        let pool = self.pool_mem.ptr();
        match a {
            Action::Repost(slot) => {
                if let Some(lq) = self.queues.get_mut(q).and_then(|x| x.as_mut()) {
                    lq.free_slots.push(slot);
                }
            }
            Action::NeedBuffer { req, len } => {
                let Some(class) = self.pool.shape().class_for(len as usize) else {
                    // No buffer is that large: the transport gives up on the queue.
                    self.with_core(q, |c, env| c.fail(env));
                    return;
                };
                if let Some(b) = self.pool.take(class, q as u32, (q, req)) {
                    if let Some(Some(back)) = self.call(q, |c, env| c.buffer_granted(env, req, b)) {
                        self.give(back);
                    }
                }
            }
            Action::Fetch {
                req,
                buf,
                addr,
                len,
                key,
            } => {
                let src = self
                    .windows
                    .get(&key)
                    .and_then(|w| w.get(addr as usize..addr as usize + len as usize));
                let ok = match src {
                    Some(src) => {
                        // SAFETY: `buf` is the request's pool buffer, of at
                        // least `len` bytes, used by nothing else while
                        // its data is fetched.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src.as_ptr(),
                                pool.wrapping_add(buf.offset),
                                len as usize,
                            )
                        };
                        true
                    }
                    // A remote access error: the connection breaks.
                    None => false,
                };
                if !ok {
                    self.with_core(q, |c, env| c.fail(env));
                }
                self.wire.push_back(Wire::Fetched { q, req, ok });
            }
            Action::Respond {
                req,
                cqe,
                data,
                invalidate,
            } => {
                if let Some(d) = data {
                    let dst = self
                        .windows
                        .get_mut(&d.key)
                        .and_then(|w| w.get_mut(d.addr as usize..d.addr as usize + d.len as usize));
                    match dst {
                        // SAFETY: `d.buf` is the request's pool buffer of at
                        // least `d.len` bytes; nothing writes it while the
                        // request responds.
                        Some(dst) => unsafe {
                            std::ptr::copy_nonoverlapping(
                                pool.wrapping_add(d.buf.offset),
                                dst.as_mut_ptr(),
                                d.len as usize,
                            )
                        },
                        None => {
                            // A remote access error: the connection breaks
                            // and the response is flushed.
                            self.with_core(q, |c, env| c.fail(env));
                            self.wire.push_back(Wire::Sent { q, req, cqe: None });
                            return;
                        }
                    }
                }
                if let Some(lq) = self.queues.get_mut(q).and_then(|x| x.as_mut()) {
                    lq.invalidated.extend(invalidate);
                }
                let sent = Wire::Sent {
                    q,
                    req,
                    cqe: Some(cqe),
                };
                if self.deaf.contains(&q) {
                    self.held.push(sent);
                } else {
                    self.wire.push_back(sent);
                }
            }
            Action::GiveBuffer(b) => self.give(b),
            Action::Probe => {
                if self.answer_probes {
                    self.wire.push_back(Wire::ProbeAnswered { q });
                }
            }
            Action::Close => {
                if let Some(lq) = self.queues.get_mut(q).and_then(|x| x.as_mut()) {
                    lq.closed = true;
                }
                // The connection's sends are flushed: held responses fail.
                let (mine, others) = std::mem::take(&mut self.held)
                    .into_iter()
                    .partition(|w| matches!(w, Wire::Sent { q: x, .. } if *x == q));
                self.held = others;
                for w in mine {
                    if let Wire::Sent { q, req, .. } = w {
                        self.wire.push_back(Wire::Sent { q, req, cqe: None });
                    }
                }
            }
        }
    }

    /// Completions queue `q`'s host received and has not taken, oldest first.
    pub fn cqes(&mut self, q: usize) -> Vec<Completion> {
        self.queues
            .get_mut(q)
            .and_then(|x| x.as_mut())
            .map(|lq| lq.cqes.drain(..).collect())
            .unwrap_or_default()
    }

    /// Takes the completion of command `cid` on queue `q`, if it came.
    pub fn take_cqe(&mut self, q: usize, cid: u16) -> Option<Completion> {
        let lq = self.queues.get_mut(q)?.as_mut()?;
        let i = lq.cqes.iter().position(|c| c.cid == cid)?;
        lq.cqes.remove(i)
    }

    /// Sends `cmd` and runs until its completion came (or the target is idle).
    pub fn exec(&mut self, q: usize, cmd: &Command, in_capsule: &[u8]) -> Option<Completion> {
        self.send(q, cmd, in_capsule).ok()?;
        let cid = cmd.cid();
        self.run_until(|lb| lb.has_cqe(q, cid));
        self.take_cqe(q, cid)
    }

    /// Whether the completion of command `cid` on queue `q` came (and is
    /// not taken yet).
    pub fn has_cqe(&self, q: usize, cid: u16) -> bool {
        self.queues
            .get(q)
            .and_then(|x| x.as_ref())
            .is_some_and(|lq| lq.cqes.iter().any(|c| c.cid == cid))
    }

    /// Keys the target invalidated on queue `q`.
    pub fn invalidated(&self, q: usize) -> &[u32] {
        self.queues
            .get(q)
            .and_then(|x| x.as_ref())
            .map_or(&[], |lq| &lq.invalidated)
    }

    /// Whether queue `q` closed its connection.
    pub fn closed(&self, q: usize) -> bool {
        self.queues
            .get(q)
            .and_then(|x| x.as_ref())
            .is_none_or(|lq| lq.closed)
    }

    /// Whether a request of queue `q` still holds something.
    pub fn queue_busy(&self, q: usize) -> bool {
        self.queues
            .get(q)
            .and_then(|x| x.as_ref())
            .is_some_and(|lq| lq.core.busy())
    }

    /// Queue `q`'s core (its controller, parameters).
    pub fn core(&self, q: usize) -> Option<&QueueCore> {
        self.queues.get(q)?.as_ref().map(|lq| &lq.core)
    }

    /// Pool buffers in use.
    pub fn buffers_in_use(&self) -> usize {
        self.pool.in_use()
    }

    /// Receives of queue `q` that hold a capsule.
    pub fn receives_in_use(&self, q: usize) -> usize {
        self.queues.get(q).and_then(|x| x.as_ref()).map_or(0, |lq| {
            lq.core.params().sq_size as usize - lq.free_slots.len()
        })
    }

    /// Drops closed queues whose requests are all released (tearing them
    /// down: the controller of an admin queue goes with it). Returns how many.
    pub fn reap_closed(&mut self) -> usize {
        let mut n = 0;
        for slot in &mut self.queues {
            if slot.as_ref().is_some_and(|lq| lq.closed && !lq.core.busy()) {
                if let Some(mut lq) = slot.take() {
                    lq.core.teardown(&self.target);
                    n += 1;
                }
            }
        }
        n
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        // Backend operations in flight name memory this owns: let them end.
        for q in 0..self.queues.len() {
            self.host_disconnect(q);
        }
        self.run();
        for slot in &mut self.queues {
            if let Some(mut lq) = slot.take() {
                lq.core.teardown(&self.target);
            }
        }
    }
}

#[cfg(test)]
mod tests;
