//! A loopback transport, as nvmet's `nvme-loop`: a host and the target in
//! one process, with no RDMA. Capsule bytes go in, completions and data come
//! out; the host's memory is a set of windows its keyed SGLs name (the key
//! picks the window, the address is an offset in it). Backend operations
//! run for real (the null backend, files) on the test's thread, in order,
//! through the Inline executor (no ring, no thread), and timers run on a
//! clock the caller advances. The whole
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
use crate::base::wake::{Mailbox, Waker};
use crate::model::controller::QueueLink;
use crate::model::target::Target;
use crate::queue::{Action, Addrs, QueueCore, QueueParams, Token};
use crate::request::pool::PoolShape;
use crate::worker::buffers::{self, Asked};
use crate::worker::config::EngineConfig;
use crate::worker::slots::{QueueKey, Slots};
use crate::worker::ud::Ud;
use crate::worker::{CoreEvent, Group, Lend, PlainMemory, Transport};
use crate::{INLINE_DATA_SIZE, PAGE};

use crate::base::aligned::Aligned;

/// Work on the "wire", delivered in order.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Fetched {
        q: QueueKey,
        req: Token,
        ok: bool,
    },
    /// The response was delivered (`Some`), or its data could not be.
    Sent {
        q: QueueKey,
        req: Token,
        cqe: Option<Completion>,
    },
    ProbeAnswered {
        q: QueueKey,
    },
}

/// One queue: its core, its receive buffers, what its host received.
pub struct LoopQueue {
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

/// Who a host is, for [`Loopback::connect`].
#[derive(Debug, Clone)]
pub struct HostSide {
    /// The subsystem it connects to.
    pub subnqn: String,
    /// Its NQN.
    pub hostnqn: String,
    /// Its host identifier.
    pub hostid: [u8; 16],
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

/// The loopback transport: its queues, and the host's memory and the wire.
pub struct Loop {
    queues: Slots<LoopQueue>,
    wires: Wires,
}

/// The host's memory and the wire.
pub struct Wires {
    /// Its pool's number in the worker's.
    pool: usize,
    pool_mem: Aligned,
    windows: HashMap<u32, Vec<u8>>,
    wire: VecDeque<Wire>,
    /// Whether a probe is answered (a host that is gone answers none).
    answer_probes: bool,
    /// Queues whose host takes no response (posts no receives): their
    /// responses are held, never delivered.
    deaf: Vec<QueueKey>,
    /// Responses held for the deaf queues.
    held: Vec<Wire>,
    /// Windows whose data the host never gives: fetches from them never
    /// complete (an NVMe/TCP host that sends no H2CData for its R2T).
    withheld: Vec<u32>,
    /// Fetches from withheld windows, until their queue closes.
    stalled: Vec<(QueueKey, Token)>,
}

impl Wires {
    /// Hands `event` to queue `key`'s core, then carries out its actions.
    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, q: &mut LoopQueue, event: CoreEvent<'_>) {
        let mem = PlainMemory {
            pool: self.pool_mem.ptr(),
            capsules: q.data.ptr(),
            key,
        };
        w.env(&mut q.core, &mem, |c, env| event(c, env));
        while let Some(a) = q.core.next_action() {
            self.act(w, key, q, a);
        }
    }

    /// Carries out one of queue `key`'s actions.
    fn act(&mut self, w: &mut Lend<'_>, key: QueueKey, q: &mut LoopQueue, a: Action) {
        let pool = self.pool_mem.ptr();
        match a {
            Action::Repost(slot) => q.free_slots.push(slot),
            Action::NeedBuffer { req, len, limited } => {
                match buffers::ask(w, self.pool, key, req, len, limited) {
                    Asked::Now(b) => {
                        let mut back = None;
                        self.call(w, key, q, &mut |c, env| {
                            back = c.buffer_granted(env, req, b)
                        });
                        if let Some(b) = back {
                            buffers::give_back(w, self.pool, b);
                        }
                    }
                    Asked::Waits => {}
                    Asked::TooLarge => self.call(w, key, q, &mut |c, env| c.fail(env)),
                }
            }
            Action::Fetch {
                req,
                cid: _,
                buf,
                addr,
                len,
                key: wkey,
            } => {
                if self.withheld.contains(&wkey) {
                    return self.stalled.push((key, req));
                }
                let src = self
                    .windows
                    .get(&wkey)
                    .and_then(|v| v.get(addr as usize..addr as usize + len as usize));
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
                    self.call(w, key, q, &mut |c, env| c.fail(env));
                }
                self.wire.push_back(Wire::Fetched { q: key, req, ok });
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
                        .and_then(|v| v.get_mut(d.addr as usize..d.addr as usize + d.len as usize));
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
                            self.call(w, key, q, &mut |c, env| c.fail(env));
                            self.wire.push_back(Wire::Sent {
                                q: key,
                                req,
                                cqe: None,
                            });
                            return;
                        }
                    }
                }
                q.invalidated.extend(invalidate);
                let sent = Wire::Sent {
                    q: key,
                    req,
                    cqe: Some(cqe),
                };
                if self.deaf.contains(&key) {
                    self.held.push(sent);
                } else {
                    self.wire.push_back(sent);
                }
            }
            Action::GiveBuffer(b) => buffers::give_back(w, self.pool, b),
            Action::Probe => {
                if self.answer_probes {
                    self.wire.push_back(Wire::ProbeAnswered { q: key });
                }
            }
            Action::Close => {
                q.closed = true;
                // The connection's sends are flushed: held responses fail.
                let (mine, others) = std::mem::take(&mut self.held)
                    .into_iter()
                    .partition(|h| matches!(h, Wire::Sent { q: x, .. } if *x == key));
                self.held = others;
                for h in mine {
                    if let Wire::Sent { q, req, .. } = h {
                        self.wire.push_back(Wire::Sent { q, req, cqe: None });
                    }
                }
                // So are its fetches whose data never came.
                let (mine, others) = std::mem::take(&mut self.stalled)
                    .into_iter()
                    .partition(|(q, _)| *q == key);
                self.stalled = others;
                for (q, req) in mine {
                    self.wire.push_back(Wire::Fetched { q, req, ok: false });
                }
            }
        }
    }
}

impl Transport for Loop {
    fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The host accepts its queues itself ([`Loopback::accept`]).
    fn accept(&mut self, _w: &mut Lend<'_>) -> usize {
        0
    }

    /// Delivers the work on the wire, in order.
    fn poll(&mut self, w: &mut Lend<'_>) -> usize {
        let (queues, wires) = (&mut self.queues, &mut self.wires);
        let mut n = 0;
        while let Some(ev) = wires.wire.pop_front() {
            n += 1;
            match ev {
                Wire::Fetched { q, req, ok } => {
                    if let Some(lq) = queues.get_mut(q) {
                        wires.call(w, q, lq, &mut |c, env| c.fetched(env, req, ok));
                    }
                }
                Wire::Sent { q, req, cqe } => {
                    if let Some(lq) = queues.get_mut(q) {
                        if let (Some(cqe), false) = (cqe, lq.closed) {
                            lq.cqes.push_back(cqe);
                        }
                        wires.call(w, q, lq, &mut |c, env| c.sent(env, req, cqe.is_some()));
                    }
                }
                Wire::ProbeAnswered { q } => {
                    if let Some(lq) = queues.get_mut(q) {
                        lq.core.probe_answered(w.now);
                    }
                }
            }
        }
        n
    }

    fn complete(&mut self, _w: &mut Lend<'_>, _ud: Ud, _res: i32) {}

    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, event: CoreEvent<'_>) {
        if let Some(q) = self.queues.get_mut(key) {
            self.wires.call(w, key, q, event);
        }
    }

    fn flush(&mut self, _w: &mut Lend<'_>) {}

    fn arm(&mut self, _w: &mut Lend<'_>) -> usize {
        0
    }

    /// Each queue's timers; a closed queue leaves only when the host reaps
    /// it ([`Loopback::reap_closed`]).
    fn tick(&mut self, w: &mut Lend<'_>, _stop: bool, _gone: &mut Vec<QueueKey>) {
        for key in self.queues.keys() {
            self.call(w, key, &mut |c, env| c.timer(env));
        }
    }

    fn remove(&mut self, w: &mut Lend<'_>, key: QueueKey) -> bool {
        let Some(mut q) = self.queues.remove(key) else {
            return false;
        };
        q.core.teardown(w.tally);
        true
    }
}

/// A host and the target, in process.
pub struct Loopback {
    group: Group<Loop>,
    exec: Inline,
    /// The queues, by the number [`Loopback::accept`] gave them.
    keys: Vec<QueueKey>,
    waker: Arc<Waker>,
    next_key: u32,
    target: Arc<Target>,
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
        let pool_mem = Aligned::new(shape.bytes().max(PAGE));
        let wires = Wires {
            pool: 0,
            pool_mem,
            windows: HashMap::new(),
            wire: VecDeque::new(),
            answer_probes: true,
            deaf: Vec::new(),
            held: Vec::new(),
            withheld: Vec::new(),
            stalled: Vec::new(),
        };
        let cfg = EngineConfig {
            workers: 1,
            ..EngineConfig::default()
        };
        let transport = Loop {
            queues: Slots::default(),
            wires,
        };
        let mut group = Group::new(0, waker.clone(), transport, target.clone(), cfg);
        group.transport.wires.pool = group.pools().add(shape);
        Ok(Loopback {
            group,
            exec: Inline::new(Mailbox::detached()),
            keys: Vec::new(),
            waker,
            next_key: 1,
            target,
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
        self.group.now
    }

    /// Moves the clock forward by `d` and runs every queue's timers.
    pub fn advance(&mut self, d: Duration) {
        self.group.now += d;
        self.group.tick(&mut self.exec);
    }

    /// Whether a probe is answered (a host that is gone answers none).
    pub fn answer_probes(&mut self, yes: bool) {
        self.group.transport.wires.answer_probes = yes;
    }

    /// Queue `q`'s host takes no response (posts no receives): its
    /// responses are held, never delivered.
    pub fn deafen(&mut self, q: usize) {
        if let Some(&k) = self.keys.get(q) {
            self.group.transport.wires.deaf.push(k);
        }
    }

    /// The host never gives the data of window `key`: the target's
    /// fetches from it never complete (on NVMe/TCP, a host that sends no
    /// H2CData for its R2Ts).
    pub fn withhold(&mut self, key: u32) {
        self.group.transport.wires.withheld.push(key);
    }

    /// A new queue `qid` of `sq_size` entries, accepted (as a transport
    /// accepts a connection); returns its index.
    pub fn accept(&mut self, qid: u16, sq_size: u16) -> usize {
        self.accept_pending(qid, sq_size, None)
    }

    /// As [`Loopback::accept`], the queue holding `pending`, its place
    /// among the queues not yet connected.
    pub fn accept_pending(
        &mut self,
        qid: u16,
        sq_size: u16,
        pending: Option<crate::base::admission::Pending>,
    ) -> usize {
        let params = QueueParams {
            qid,
            sq_size,
            sgl: Default::default(),
        };
        let addrs = Addrs {
            peer: Some("192.0.2.1:4420".parse().expect("an address")),
            local: Some("192.0.2.2:4420".parse().expect("an address")),
            tls: None,
        };
        let link = QueueLink::new(qid, self.waker.clone());
        let core = QueueCore::new(params, addrs, link, pending, self.group.now);
        let slots = sq_size as u32;
        let key = self.group.transport.queues.vacant().expect("a free slot");
        self.group.transport.queues.insert(
            key,
            LoopQueue {
                core,
                data: Aligned::new(slots as usize * INLINE_DATA_SIZE as usize),
                free_slots: (0..slots).rev().collect(),
                cqes: VecDeque::new(),
                invalidated: Vec::new(),
                closed: false,
            },
        );
        self.keys.push(key);
        self.keys.len() - 1
    }

    fn queue(&self, q: usize) -> Option<&LoopQueue> {
        self.group.transport.queues.get(*self.keys.get(q)?)
    }

    fn queue_mut(&mut self, q: usize) -> Option<&mut LoopQueue> {
        self.group.transport.queues.get_mut(*self.keys.get(q)?)
    }

    /// Registers host memory holding `bytes`; returns its key (the address
    /// of a keyed SGL is an offset in it).
    pub fn window(&mut self, bytes: Vec<u8>) -> u32 {
        let k = self.next_key;
        self.next_key += 1;
        self.group.transport.wires.windows.insert(k, bytes);
        k
    }

    /// The key the last [`Loopback::window`] returned.
    pub fn last_window(&self) -> u32 {
        self.next_key - 1
    }

    /// The host memory of window `key`.
    pub fn window_data(&self, key: u32) -> &[u8] {
        self.group
            .transport
            .wires
            .windows
            .get(&key)
            .map_or(&[], |v| v)
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
        let lq = self.queue_mut(q).ok_or(LoopError::NoQueue(q))?;
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
        let key = self.keys[q];
        self.group.deliver(&mut self.exec, key, &mut |c, env| {
            c.capsule(env, slot, sqe, byte_len)
        });
        Ok(())
    }

    /// The host's side goes away (a disconnect of the connection).
    pub fn host_disconnect(&mut self, q: usize) {
        if let Some(&key) = self.keys.get(q) {
            self.group.deliver(&mut self.exec, key, &mut |c, env| {
                c.disconnect(env, "host disconnected", "host")
            });
        }
    }

    /// The transport's connection of queue `q` is gone for good (as when a
    /// queue pair that did not drain is destroyed): what it had on the wire
    /// never completes; backend operations still do.
    pub fn transport_gone(&mut self, q: usize) {
        if let Some(&key) = self.keys.get(q) {
            self.group
                .deliver(&mut self.exec, key, &mut |c, env| c.transport_gone(env));
        }
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

    /// One pass: the wire, then (when it is quiet) one backend operation.
    /// Returns events handled.
    fn pump(&mut self) -> usize {
        let n = self.group.with(&mut self.exec, |t, w| t.poll(w));
        if n > 0 {
            return n;
        }
        // I/Os whose QoS tokens came (on the loopback's clock).
        let n = self.group.qos_ready(&mut self.exec);
        if n > 0 {
            return n;
        }
        // One backend operation at a time, each completion handed to its
        // queue before the next runs (a write leaves its gate before a job
        // that closes the gate runs).
        match self.exec.run_next() {
            Some((ud, res)) => {
                self.group.complete(&mut self.exec, ud, res);
                1
            }
            None => 0,
        }
    }

    /// Completions queue `q`'s host received and has not taken, oldest first.
    pub fn cqes(&mut self, q: usize) -> Vec<Completion> {
        self.queue_mut(q)
            .map(|lq| lq.cqes.drain(..).collect())
            .unwrap_or_default()
    }

    /// Takes the completion of command `cid` on queue `q`, if it came.
    pub fn take_cqe(&mut self, q: usize, cid: u16) -> Option<Completion> {
        let lq = self.queue_mut(q)?;
        let i = lq.cqes.iter().position(|c| c.cid == cid)?;
        lq.cqes.remove(i)
    }

    /// Connects a controller as a well-behaved host does (Connect data in
    /// the capsule, CC.EN, then `io_queues` I/O queues of `sq_size`
    /// entries). Returns the admin queue and the I/O queues, or the status
    /// that refused a step.
    pub fn connect(
        &mut self,
        host: &HostSide,
        io_queues: u16,
        sq_size: u16,
    ) -> Result<(usize, Vec<usize>), nvme::Status> {
        use nvme::fabrics::{cc, prop, ConnectCommand, ConnectData, PropertyCommand};
        let step =
            |lb: &mut Loopback, q: usize, cmd: Command, data: &[u8]| match lb.exec(q, &cmd, data) {
                Some(c) if c.status.is_success() => Ok(c),
                Some(c) => Err(c.status),
                None => Err(nvme::Status::INTERNAL),
            };
        let connect = |qid: u16, sq: u16, cntlid: u16| {
            let mut c = ConnectCommand {
                recfmt: 0,
                qid,
                sqsize: sq - 1,
                cattr: 0,
                kato: 0,
            }
            .to_command(0xC000 | qid);
            c.set_sgl(&nvme::Sgl::InCapsule {
                offset: 0,
                len: nvme::fabrics::CONNECT_DATA_SIZE as u32,
            });
            let data = ConnectData {
                hostid: host.hostid,
                cntlid,
                subsysnqn: host.subnqn.clone(),
                hostnqn: host.hostnqn.clone(),
            }
            .encode();
            (c, data)
        };
        let aq = self.accept(0, 32);
        let (c, d) = connect(0, 32, 0xFFFF);
        let cntlid = step(self, aq, c, &d)?.result as u16;
        let en = PropertyCommand {
            eight_bytes: false,
            offset: prop::CC,
            value: (cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT) as u64,
        }
        .to_command(0xC100, true);
        step(self, aq, no_data(en), &[])?;
        let mut qs = Vec::new();
        for qid in 1..=io_queues {
            let q = self.accept(qid, sq_size);
            let (c, d) = connect(qid, sq_size, cntlid);
            step(self, q, c, &d)?;
            qs.push(q);
        }
        Ok((aq, qs))
    }

    /// A loopback in front of one open subsystem `subnqn` with one null
    /// namespace (nsid 1, 1 GiB of 4 KiB blocks), a data pool of `shape`
    /// and a controller connected with one I/O queue of `sq_size` entries
    /// (for benchmarks and steady-state tests). Returns it and the I/O queue.
    pub fn null_io_queue(subnqn: &str, shape: PoolShape, sq_size: u16) -> (Loopback, usize) {
        use crate::model::namespace::Namespace;
        use crate::model::subsystem::{Subsystem, SubsystemKind};
        let ns = Namespace::new(
            subnqn,
            1,
            Box::new(crate::backend::null::Null::default()),
            1 << 30,
            4096,
            false,
        );
        let sub = Subsystem::new(
            subnqn.into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "loopback".into(),
            vec![Arc::new(ns)],
        );
        let local = "192.0.2.2:4420".parse().expect("an address");
        let t = Target::new(vec![Arc::new(sub)], vec![local], 0);
        let mut lb = Loopback::new(Arc::new(t), shape).expect("a loopback (io_uring)");
        let host = HostSide {
            subnqn: subnqn.into(),
            hostnqn: format!("{subnqn}:host"),
            hostid: [3; 16],
        };
        let (_, qs) = lb
            .connect(&host, 1, sq_size)
            .expect("a connected controller");
        (lb, qs[0])
    }

    /// Takes every completion queue `q`'s host received; returns how many
    /// and how many did not succeed (nothing is allocated).
    pub fn drain_cqes(&mut self, q: usize) -> (usize, usize) {
        self.queue_mut(q).map_or((0, 0), |lq| {
            let failed = lq.cqes.iter().filter(|c| !c.status.is_success()).count();
            let n = lq.cqes.len();
            lq.cqes.clear();
            (n, failed)
        })
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
        self.queue(q)
            .is_some_and(|lq| lq.cqes.iter().any(|c| c.cid == cid))
    }

    /// Keys the target invalidated on queue `q`.
    pub fn invalidated(&self, q: usize) -> &[u32] {
        self.queue(q).map_or(&[], |lq| &lq.invalidated)
    }

    /// Whether queue `q` closed its connection.
    pub fn closed(&self, q: usize) -> bool {
        self.queue(q).is_none_or(|lq| lq.closed)
    }

    /// Whether a request of queue `q` still holds something.
    pub fn queue_busy(&self, q: usize) -> bool {
        self.queue(q).is_some_and(|lq| lq.core.busy())
    }

    /// Queue `q`'s core (its controller, parameters).
    pub fn core(&self, q: usize) -> Option<&QueueCore> {
        self.queue(q).map(|lq| &lq.core)
    }

    /// What the worker counted so far.
    pub fn tally(&mut self) -> &mut crate::counters::Tally {
        self.group.tally()
    }

    /// Pool buffers in use.
    pub fn buffers_in_use(&self) -> usize {
        self.group.buffers_in_use()
    }

    /// Receives of queue `q` that hold a capsule.
    pub fn receives_in_use(&self, q: usize) -> usize {
        self.queue(q).map_or(0, |lq| {
            lq.core.params().sq_size as usize - lq.free_slots.len()
        })
    }

    /// Drops closed queues whose requests are all released (tearing them
    /// down: the controller of an admin queue goes with it). Returns how many.
    pub fn reap_closed(&mut self) -> usize {
        let mut n = 0;
        for &key in &self.keys {
            if self
                .group
                .transport
                .queues
                .get(key)
                .is_some_and(|lq| lq.closed && !lq.core.busy())
            {
                if let Some(mut lq) = self.group.transport.queues.remove(key) {
                    lq.core.teardown(self.group.tally());
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
        for q in 0..self.keys.len() {
            self.host_disconnect(q);
        }
        self.run();
        for &key in &self.keys {
            if let Some(mut lq) = self.group.transport.queues.remove(key) {
                lq.core.teardown(self.group.tally());
            }
        }
    }
}
