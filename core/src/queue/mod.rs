//! The queue core, without I/O: one NVMe queue of a controller, whatever
//! carries it. It owns the request slots and everything a queue means to
//! NVMe: command dispatch (fabrics, admin, I/O), the checks before a command
//! runs (command sequence, ANA, reservations, authentication, fused pairs),
//! host shutdown, parked Asynchronous Event Requests, the Connect,
//! authentication and keep-alive timers, and the answer of each command.
//!
//! A transport drives it as quinn-proto's `Connection` is driven: it reports
//! what happened ([`QueueCore::capsule`], [`QueueCore::buffer_granted`],
//! [`QueueCore::fetched`], [`QueueCore::backend_done`], [`QueueCore::sent`],
//! [`QueueCore::disconnect`], [`QueueCore::timer`]) and then carries out the
//! [`Action`]s the core queued, in order ([`QueueCore::next_action`]): give a
//! receive back, find a data buffer, fetch the host's data, send a response,
//! give a buffer back, probe the host, close the connection. The data lives
//! in the transport's memory, which the core reaches through [`Memory`];
//! backend operations go through [`crate::backend::op`] under user data the
//! transport chose ([`Memory::backend_ud`]). Each request slot goes through
//! [`crate::request::lifecycle::Lifecycle`].

mod arrive;
mod execute;
mod fused;
mod io;
pub mod liveness;
mod qos;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use nvme::{Command, Completion, Status};
use tracing::debug;

use crate::backend::op::Op;
use crate::backend::{DataRef, Executor};
use crate::base::admission::Pending;
use crate::counters::Tally;
use crate::model::controller::{Controller, QueueLink};
use crate::model::ns_cache::NsRef;
use crate::model::target::Target;
use crate::queue::liveness::Liveness;
use crate::request::data::DataPlan;
use crate::request::lifecycle::{Lifecycle, Stage, Step};
use crate::request::plan::IoPlan;
use crate::request::pool::Buf;

pub use timers::CONNECT_TIMEOUT;

/// Parameters of a queue as its transport accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueParams {
    /// Queue id (0 = admin).
    pub qid: u16,
    /// Submission queue entries (hsqsize + 1): receive buffers to post.
    pub sq_size: u16,
    /// How the transport carries data outside the capsule.
    pub sgl: crate::request::data::SglKind,
}

/// One use of a request slot: its index and generation. Completions carry
/// it back; one whose generation is not the slot's current one is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Token {
    /// The request slot.
    pub slot: u16,
    /// The use of that slot.
    pub gen: u16,
}

/// The transport's memory and naming, as the core sees them while it
/// handles an event.
pub trait Memory {
    /// Where pool buffer `b` is.
    fn buffer(&self, b: &Buf) -> DataRef;
    /// Where the in-capsule data of receive slot `slot` starts.
    fn capsule(&self, slot: u32) -> DataRef;
    /// The user data naming backend operations of request `t`: the
    /// transport hands their completions back with [`QueueCore::backend_done`].
    fn backend_ud(&self, t: Token) -> u64;
}

/// What the core works with while it handles one event.
pub struct Env<'a, 'io> {
    /// The target.
    pub target: &'a Arc<Target>,
    /// The time of the event (one clock read per pass of the transport).
    pub now: Instant,
    /// Where request data is.
    pub mem: &'a dyn Memory,
    /// Where backend work runs.
    pub exec: &'a mut (dyn Executor + 'io),
    /// `[target] max_keep_alive_ms`.
    pub max_keep_alive_ms: u32,
    /// The worker's index: its shard of the sharded counters.
    pub worker: usize,
    /// The worker's tally.
    pub tally: &'a mut Tally,
    /// The worker's QoS buckets and the I/Os waiting for them.
    pub qos: &'a mut crate::request::qos::Throttle,
}

/// Data sent to the host before a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToHost {
    /// The buffer holding it.
    pub buf: Buf,
    /// Bytes.
    pub len: u32,
    /// The host's address.
    pub addr: u64,
    /// The host's key.
    pub key: u32,
}

/// What the transport must do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Give receive slot back to the receive queue it came from.
    Repost(u32),
    /// Find request `req` a data buffer of `len` bytes (now, or when one is
    /// given back) and report it with [`QueueCore::buffer_granted`].
    NeedBuffer {
        /// The request.
        req: Token,
        /// Bytes.
        len: u32,
        /// Its queue's peer has proven nothing that earns it I/O: the
        /// buffer comes under the pool's cap of limited queues.
        limited: bool,
    },
    /// Fetch `len` bytes of host data at `addr`/`key` into `buf`; report the
    /// completion with [`QueueCore::fetched`].
    Fetch {
        /// The request.
        req: Token,
        /// Its command's identifier (NVMe/TCP's R2T names it).
        cid: u16,
        /// Its buffer.
        buf: Buf,
        /// The host's address.
        addr: u64,
        /// Bytes.
        len: u32,
        /// The host's key.
        key: u32,
    },
    /// Send `data` (if any), then the completion `cqe` (invalidating the
    /// host's key `invalidate`); report the completion's delivery with
    /// [`QueueCore::sent`].
    Respond {
        /// The request.
        req: Token,
        /// The completion queue entry.
        cqe: Completion,
        /// Data for the host, before it.
        data: Option<ToHost>,
        /// The host's key to invalidate with it.
        invalidate: Option<u32>,
    },
    /// Give a data buffer back to the pool.
    GiveBuffer(Buf),
    /// Probe a quiet host; report an answer with [`QueueCore::probe_answered`].
    Probe,
    /// Close the connection: the queue is disconnecting.
    Close,
}

/// One request slot.
struct Req {
    life: Lifecycle,
    cmd: Command,
    /// The receive slot the capsule arrived in, while its data is used in place.
    recv: Option<u32>,
    /// Offset of the data in the in-capsule area (data used in place).
    capsule_off: u32,
    plan: DataPlan,
    inv: Option<u32>,
    io: Option<IoPlan>,
    op: Op,
    buf: Option<Buf>,
    out_len: u32,
    status: Status,
    result: u64,
    start: Instant,
    /// Namespaces the request uses, held until it is released (a namespace
    /// removed by a reload outlives its in-flight commands).
    ns: Vec<NsRef>,
    /// Counted in its namespace's in-flight gauge.
    in_ns_gauge: bool,
    /// Counted in `Target::io_in_flight` (what shutdown drains).
    in_target_count: bool,
    /// Inside its namespace's write gate (leaves it at release).
    gated: bool,
    /// The other command of its fused pair (Compare and Write).
    partner: Option<u16>,
    /// A fused command whose outcome was decided before it executed (its
    /// partner missing or failed).
    fused_status: Option<Status>,
    /// A fused command that executed and waits for its partner.
    waiting_partner: bool,
    /// Where it is with its QoS caps.
    qos: qos::QosWait,
}

impl Req {
    /// A request slot whose command arrived (or whose queue was set up) at `start`.
    fn new(start: Instant) -> Req {
        Req {
            life: Lifecycle::new(),
            cmd: Command::default(),
            recv: None,
            capsule_off: 0,
            plan: DataPlan::None,
            inv: None,
            io: None,
            op: Op::new(IoPlan::Flush),
            buf: None,
            out_len: 0,
            status: Status::SUCCESS,
            result: 0,
            start,
            ns: Vec::new(),
            in_ns_gauge: false,
            in_target_count: false,
            gated: false,
            partner: None,
            fused_status: None,
            waiting_partner: false,
            qos: Default::default(),
        }
    }
}

/// Where the host's connection is, as far as the core knows.
#[derive(Debug, Clone)]
pub struct Addrs {
    /// The host's address.
    pub peer: Option<SocketAddr>,
    /// Ours.
    pub local: Option<SocketAddr>,
    /// The TLS PSK identity the host proved, on a secure channel, and the
    /// keys' generation its handshake began at.
    pub tls: Option<Arc<crate::model::tls_keys::Proven>>,
}

/// One queue and its requests.
pub struct QueueCore {
    params: QueueParams,
    addrs: Addrs,
    reqs: Vec<Req>,
    free: Vec<u16>,
    ctrl: Option<Arc<Controller>>,
    link: Arc<QueueLink>,
    sq_head: u16,
    sq_fc_disabled: bool,
    /// A Connect is in flight (its data being fetched or executing).
    connecting: bool,
    /// Commands received and not answered yet.
    unanswered: u16,
    live: bool,
    /// Its place among the queues not yet connected, until its Connect succeeds.
    pending: Option<Pending>,
    /// Why it disconnected (the metrics label).
    reason: &'static str,
    liveness: Liveness,
    /// In-band authentication of this queue.
    auth: crate::command::auth::QueueAuth,
    /// The request whose response ends the association once it was sent
    /// (an authentication failure: the host gets the Failure1 first).
    end_after_send: Option<usize>,
    /// The first command of a fused pair, waiting for the second.
    fused: fused::Pending,
    actions: VecDeque<Action>,
    /// The namespace its last I/O command named.
    ns_cache: crate::model::ns_cache::NsCache,
}

impl QueueCore {
    /// A queue accepted at `now` with `params`, linked to its controller by
    /// `link`, holding `pending` (its place among unconnected queues). It
    /// has twice its size of request slots: a slot stays in use until its
    /// response was delivered, while the host may already send the next
    /// command.
    pub fn new(
        params: QueueParams,
        addrs: Addrs,
        link: Arc<QueueLink>,
        pending: Option<Pending>,
        now: Instant,
    ) -> QueueCore {
        let nreq = Self::slots_for(params.sq_size);
        QueueCore {
            params,
            addrs,
            reqs: (0..nreq)
                .map(|_| Req {
                    ns: Vec::with_capacity(1),
                    ..Req::new(now)
                })
                .collect(),
            free: (0..nreq as u16).rev().collect(),
            ctrl: None,
            link,
            sq_head: 0,
            sq_fc_disabled: false,
            connecting: false,
            unanswered: 0,
            live: true,
            pending,
            reason: "",
            liveness: Liveness::new(now),
            auth: Default::default(),
            end_after_send: None,
            fused: Default::default(),
            actions: VecDeque::with_capacity(16),
            ns_cache: Default::default(),
        }
    }

    /// Request slots of a queue of `sq_size` entries.
    pub fn slots_for(sq_size: u16) -> u32 {
        sq_size as u32 * 2
    }

    /// The queue id.
    pub fn qid(&self) -> u16 {
        self.params.qid
    }

    /// The queue's parameters.
    pub fn params(&self) -> QueueParams {
        self.params
    }

    /// The queue's link (its controller stops it through it).
    pub fn link(&self) -> &Arc<QueueLink> {
        &self.link
    }

    /// The controller, once connected.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.ctrl.as_ref()
    }

    /// Whether the queue serves (it is not disconnecting).
    pub fn live(&self) -> bool {
        self.live
    }

    /// Whether a request still holds something (a buffer, a work request or
    /// backend operation in flight).
    pub fn busy(&self) -> bool {
        self.reqs.iter().any(|q| q.life.in_use())
    }

    /// Backend operations in flight, over all requests.
    pub fn backend_in_flight(&self) -> usize {
        self.reqs
            .iter()
            .map(|q| q.life.backend_in_flight() as usize)
            .sum()
    }

    /// Whether the queue's peer has proven nothing that earns it I/O: no
    /// controller yet, a discovery controller, or one that has still to
    /// authenticate. Its buffers come under the pool's limited cap.
    pub fn limited(&self) -> bool {
        match &self.ctrl {
            None => true,
            Some(c) => {
                c.subsys.kind == crate::model::subsystem::SubsystemKind::Discovery
                    || !self.auth.cleared(c)
            }
        }
    }

    /// The next thing the transport must do.
    pub fn next_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn token(&self, r: usize) -> Token {
        Token {
            slot: r as u16,
            gen: self.reqs[r].life.generation(),
        }
    }

    /// Where request `r`'s data is.
    fn data_ref(&self, env: &Env<'_, '_>, r: usize) -> DataRef {
        let q = &self.reqs[r];
        if let Some(b) = &q.buf {
            env.mem.buffer(b)
        } else if let Some(slot) = q.recv {
            let d = env.mem.capsule(slot);
            DataRef {
                ptr: d.ptr.wrapping_add(q.capsule_off as usize),
                fixed: d.fixed,
            }
        } else {
            DataRef {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                fixed: None,
            }
        }
    }

    /// Request `r`'s data, mutably (empty when it has none).
    ///
    /// # Safety
    /// Request `r` must be executing (its data fetched, nothing posted or
    /// submitted on it yet), and the caller must hold no other reference to
    /// that data while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn data_mut<'m>(&self, env: &Env<'m, '_>, r: usize) -> &'m mut [u8] {
        let len = self.reqs[r].plan.len() as usize;
        let d = self.data_ref(env, r);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: the range is the request's own buffer (pool buffer of at
        // least `len` bytes, or its capsule's data area, whose length the SGL
        // check bounded); no work request or backend operation uses it while
        // the request executes, and only this request touches it.
        unsafe { std::slice::from_raw_parts_mut(d.ptr, len) }
    }

    // ---- the lifecycle driver -----------------------------------------

    fn step(&mut self, env: &mut Env<'_, '_>, r: usize, step: Step) {
        match step {
            Step::NeedBuffer => {
                if self.qos_holds(env, r, qos::QosWait::Buffer) {
                    return;
                }
                let len = self.reqs[r].plan.len();
                self.actions.push_back(Action::NeedBuffer {
                    req: self.token(r),
                    len,
                    limited: self.limited(),
                });
            }
            Step::Fetch => self.fetch(env.now, r),
            Step::Execute => self.execute(env, r),
            Step::Respond => {
                self.liveness.response_posted(env.now);
                self.respond(env, r)
            }
            Step::Release => self.release(env, r),
            Step::Wait => {}
        }
    }

    /// Request `t` got the data buffer it waited for. Returns the buffer if
    /// that wait is stale (the request went away).
    pub fn buffer_granted(&mut self, env: &mut Env<'_, '_>, t: Token, buf: Buf) -> Option<Buf> {
        let r = t.slot as usize;
        let q = self.reqs.get_mut(r)?;
        if q.life.stage() != Stage::WaitBuffer || q.life.generation() != t.gen {
            return Some(buf);
        }
        q.buf = Some(buf);
        let s = q.life.buffer_granted();
        self.step(env, r, s);
        None
    }

    fn fetch(&mut self, now: Instant, r: usize) {
        let (DataPlan::FromHost { addr, len, key }, Some(buf)) =
            (self.reqs[r].plan, self.reqs[r].buf)
        else {
            return;
        };
        self.actions.push_back(Action::Fetch {
            req: self.token(r),
            cid: self.reqs[r].cmd.cid(),
            buf,
            addr,
            len,
            key,
        });
        self.reqs[r].life.fetch_posted();
        self.liveness.fetch_posted(now);
    }

    /// The fetch of request `t`'s data completed (`ok`), or failed.
    pub fn fetched(&mut self, env: &mut Env<'_, '_>, t: Token, ok: bool) {
        let r = t.slot as usize;
        let Some(q) = self.reqs.get_mut(r) else {
            return;
        };
        if !q.life.owns_work_completion(t.gen) {
            return;
        }
        if q.life.stage() == Stage::Fetching {
            self.liveness.fetch_done(env.now);
        }
        let s = q.life.fetched(ok);
        self.step(env, r, s)
    }

    /// Request `t`'s data came damaged (an NVMe/TCP data digest error): it
    /// answers Transient Transport Error without executing (the host may
    /// retry it), and a fused partner fails with it.
    pub fn fetch_corrupt(&mut self, env: &mut Env<'_, '_>, t: Token) {
        let r = t.slot as usize;
        let Some(q) = self.reqs.get_mut(r) else {
            return;
        };
        if !q.life.owns_work_completion(t.gen) {
            return;
        }
        if q.life.stage() == Stage::Fetching {
            self.liveness.fetch_done(env.now);
        }
        match q.life.fetch_corrupt() {
            Step::Respond => {
                self.unpair(env, r);
                self.complete(env, r, Status::TRANSIENT_TRANSPORT_ERROR, 0)
            }
            s => self.step(env, r, s),
        }
    }

    /// Execution is over: answer with `status`.
    fn complete(&mut self, env: &mut Env<'_, '_>, r: usize, status: Status, result: u64) {
        self.reqs[r].status = status;
        self.reqs[r].result = result;
        let s = self.reqs[r].life.executed();
        self.step(env, r, s)
    }

    // ---- responses out -------------------------------------------------

    fn respond(&mut self, env: &mut Env<'_, '_>, r: usize) {
        self.unanswered = self.unanswered.saturating_sub(1);
        // In-capsule data is used up once a request responds (no backend
        // operation is in flight then): its receive goes back before the
        // response, as nvmet does. The host sends its next capsule once it
        // has the response; a receive given back only when the response was
        // delivered would miss it.
        if let Some(slot) = self.reqs[r].recv.take() {
            self.reqs[r].life.recv_returned();
            self.actions.push_back(Action::Repost(slot));
        }
        let q = &self.reqs[r];
        let (cmd, status, result) = (q.cmd, q.status, q.result);
        if !status.is_success() {
            // The nsid as a label only where the subsystem has it: a
            // host chooses any number.
            let sub = self.ctrl.as_ref().map(|c| &c.subsys);
            let nsid = match cmd.nsid() {
                n if sub.is_some_and(|s| s.namespace(n).is_some()) => n,
                _ => 0,
            };
            env.tally
                .failed_command(sub.map(|s| s.nqn.as_str()), nsid, status);
            if let Some(c) = &self.ctrl {
                c.io().count_error(env.worker);
                c.state()
                    .log_error(self.qid(), cmd.cid(), status, cmd.nsid());
            }
            debug!(qid = self.qid(), cid = cmd.cid(), opcode = cmd.opcode(), cdw10 = format_args!("{:#x}", cmd.cdw(10)), nsid = cmd.nsid(), status = %status, "command failed");
        }
        let cqe = Completion {
            result,
            sq_head: if self.sq_fc_disabled {
                0xFFFF
            } else {
                self.sq_head
            },
            sq_id: self.qid(),
            cid: cmd.cid(),
            status,
            phase: false,
        };
        let data = match (status.is_success(), q.plan, q.buf) {
            (true, DataPlan::ToHost { addr, key, .. }, Some(buf)) if q.out_len > 0 => {
                Some(ToHost {
                    buf,
                    len: q.out_len,
                    addr,
                    key,
                })
            }
            _ => None,
        };
        let invalidate = q.inv;
        self.actions.push_back(Action::Respond {
            req: self.token(r),
            cqe,
            data,
            invalidate,
        });
        self.reqs[r].life.response_posted();
    }

    /// The response of request `t` was delivered (`ok`), or failed.
    pub fn sent(&mut self, env: &mut Env<'_, '_>, t: Token, ok: bool) {
        let r = t.slot as usize;
        let Some(q) = self.reqs.get(r) else { return };
        if !q.life.owns_work_completion(t.gen) {
            return;
        }
        if self.end_after_send == Some(r) {
            self.end_after_send = None;
            if let Some(c) = &self.ctrl {
                c.kill_all();
            }
        }
        self.liveness.response_done(env.now);
        let s = self.reqs[r].life.response_done(ok);
        self.step(env, r, s)
    }

    /// The host answered a probe.
    pub fn probe_answered(&mut self, now: Instant) {
        self.liveness.probe_answered(now);
    }

    fn release(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let Some(held) = self.reqs[r].life.release() else {
            return;
        };
        let q = &mut self.reqs[r];
        if held.buffer {
            if let Some(b) = q.buf.take() {
                self.actions.push_back(Action::GiveBuffer(b));
            }
        }
        let recv = q.recv.take();
        if std::mem::take(&mut q.in_ns_gauge) {
            if let Some(ns) = q.ns.first() {
                ns.metrics.in_flight(env.worker, -1);
            }
        }
        // A request released with its write still in the gate (its queue
        // went away): it leaves now.
        if std::mem::take(&mut q.gated) {
            if let Some(ns) = q.ns.first() {
                ns.gate.leave();
            }
        }
        q.ns.clear();
        if std::mem::take(&mut q.in_target_count) {
            env.target
                .io_in_flight
                .add(env.worker, -1, Ordering::SeqCst);
        }
        self.free.push(r as u16);
        if let Some(slot) = recv.filter(|_| held.recv) {
            self.actions.push_back(Action::Repost(slot));
        }
    }
}
