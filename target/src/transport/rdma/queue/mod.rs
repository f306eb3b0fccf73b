//! One queue pair served by a worker: its capsules in, its requests through
//! the [`Lifecycle`], its responses out.
//!
//! Data path: capsules arrive by RECV (the 64-byte command into one SGE,
//! in-capsule data into a page-aligned second SGE), from the worker's shared
//! receive queue or the queue's own receives. Host writes are fetched by RDMA
//! READ into a pool buffer, or used in place from the in-capsule area; host
//! reads are written from a pool buffer by RDMA WRITE chained before the
//! response SEND. Responses to keyed SGLs with subtype 0xF go out as
//! SEND_WITH_INVALIDATE of the host's key; the 16-byte response is sent
//! inline where the device allows it. Work requests of a loop pass are posted
//! together (one doorbell per queue pair per pass).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::opcode::fctype;
use nvme::{Command, Completion, Status, CQE_SIZE, SQE_SIZE};
use rdma::{CmId, SendBatch, SendOp, SendRequest, Sge};
use tracing::{debug, error};

use super::device::WorkerDevice;
use super::memory::{Pinned, RecvArea};
use super::poster::{route, Poster, Route};
use super::wr::{self, QueueKey};
use crate::backend;
use crate::backend::DataRef;
use crate::command::admin;
use crate::command::io;
use crate::core::admission::Pending;
use crate::core::liveness::Liveness;
use crate::core::plan::IoPlan;
use crate::core::pool::Buf;
use crate::core::request::{Lifecycle, Stage, Step};
use crate::model::controller::{Controller, QueueLink};
use crate::model::namespace::Namespace;
use crate::model::subsystem::Target;
use crate::telemetry::metrics::metrics;
use crate::telemetry::stats::Stats;
use crate::transport::{self, DataPlan, QueueParams};
use crate::{MAX_IO_SIZE, PAGE};

mod conn;
mod exec;
mod fused;

/// The RNR timer our queue pairs give the host (InfiniBand code 10: 0.32 ms,
/// the value RDS uses): how long a capsule that found no receive posted
/// waits before the host's adapter resends it.
pub const MIN_RNR_TIMER: u8 = 10;
/// A queue that has not sent a valid Fabrics Connect within this long after
/// it was accepted is disconnected (it holds resources for nothing).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a disconnecting queue waits for the host's side and its work
/// requests to flush before the queue pair is destroyed regardless.
const DISCONNECT_GRACE: Duration = Duration::from_secs(3);
/// Bytes of a response sent inline.
const INLINE_RSP: u32 = CQE_SIZE as u32;

/// What the worker lends a queue while it handles an event.
pub struct Cx<'a> {
    /// The target.
    pub target: &'a Arc<Target>,
    /// The queue's device resources.
    pub dev: &'a mut WorkerDevice,
    /// How the worker runs backend operations.
    pub io: backend::Io<'a>,
    /// Buffers given back that a waiting request (maybe of another queue) gets.
    pub grants: &'a mut Vec<(rdma::WrId, Buf)>,
    /// When the worker's current pass began: the time of every capsule and
    /// completion it handles (one clock read per pass, not per request; a
    /// clock read is a system call where the clock source has no vDSO path).
    pub now: Instant,
    /// The worker's poster thread, if sends may be offloaded.
    pub poster: Option<&'a Poster>,
    /// `[target] max_keep_alive_ms`.
    pub max_keep_alive_ms: u32,
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
    buf: Option<Buf>,
    done: u32,
    errno: i32,
    out_len: u32,
    status: Status,
    result: u64,
    start: Instant,
    /// Namespaces the request uses, held until it is released (a namespace
    /// removed by a reload outlives its in-flight commands).
    ns: Vec<Arc<Namespace>>,
    /// Counted in its namespace's in-flight gauge.
    in_ns_gauge: bool,
    /// Counted in `Target::io_in_flight` (what shutdown drains).
    in_target_count: bool,
    /// The flush that makes a Write Zeroes with FUA durable was issued.
    flush_issued: bool,
    /// Inside its namespace's write gate (leaves it at release).
    gated: bool,
    /// The other command of its fused pair (Compare and Write).
    partner: Option<u16>,
    /// A fused command whose outcome was decided before it executed (its
    /// partner missing or failed).
    fused_status: Option<Status>,
    /// A fused command that executed and waits for its partner.
    waiting_partner: bool,
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
            buf: None,
            done: 0,
            errno: 0,
            out_len: 0,
            status: Status::SUCCESS,
            result: 0,
            start,
            ns: Vec::new(),
            in_ns_gauge: false,
            in_target_count: false,
            flush_issued: false,
            gated: false,
            partner: None,
            fused_status: None,
            waiting_partner: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Disconnecting { since: Instant },
}

/// A queue pair and its requests. Field order is drop order: the RDMA-CM id
/// (and with it the QP) goes before the memory its receives name.
pub struct Queue {
    id: Option<CmId>,
    recv: Option<RecvArea>,
    rsp_mem: Option<Pinned>,
    /// Its place in the worker's table.
    pub key: QueueKey,
    /// Index of its device in the worker.
    pub dev: usize,
    /// The QP number (how shared-receive completions name the queue).
    pub qp_num: u32,
    /// The RDMA-CM id's key (how CM events name the queue).
    pub cm_key: usize,
    /// Completion queue entries it may use.
    pub cq_share: u32,
    params: QueueParams,
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
    batch: SendBatch,
    state: State,
    /// Its place among the queues not yet connected, until its Connect succeeds.
    pending: Option<Pending>,
    cm_gone: bool,
    reason: &'static str,
    liveness: Liveness,
    /// In-band authentication of this queue.
    auth: crate::command::auth::QueueAuth,
    /// The request whose response ends the association once it was sent
    /// (an authentication failure: the host gets the Failure1 first).
    end_after_send: Option<usize>,
    /// The first command of a fused pair, waiting for the second.
    fused: fused::Pending,
}

/// Parameters of an accepted connection, from the listener.
pub struct NewConn {
    /// The id (already on the worker's event channel).
    pub id: CmId,
    /// Checked CM private data.
    pub params: QueueParams,
    /// RDMA READ depth the host offers / asks.
    pub host_ird: u8,
    /// As above.
    pub host_ord: u8,
    /// Its place among the queues not yet connected.
    pub pending: Option<Pending>,
}

/// The `type` label of a queue.
fn queue_type(qid: u16) -> &'static str {
    if qid == 0 {
        "admin"
    } else {
        "io"
    }
}

impl Queue {
    fn qid(&self) -> u16 {
        self.params.qid
    }

    /// The queue's link (its controller stops it through it).
    pub fn link(&self) -> &Arc<QueueLink> {
        &self.link
    }

    fn live(&self) -> bool {
        self.state == State::Live
    }

    fn wr_id(&self, kind: u8, r: usize) -> u64 {
        wr::req(kind, self.key, r as u16, self.reqs[r].life.generation())
    }

    /// The id naming request `r`'s current use (a pool waiter).
    fn waiter(&self, r: usize) -> rdma::WrId {
        rdma::WrId::unpack(self.wr_id(0, r))
    }

    fn area<'a>(&'a self, dev: &'a WorkerDevice) -> Option<&'a RecvArea> {
        self.recv.as_ref().or(dev.srq.as_ref())
    }

    /// Gives a receive slot back: to the shared receive queue (always), or to
    /// this queue pair (while it lives).
    fn repost(&mut self, cx: &mut Cx<'_>, slot: u32) {
        let res = match (&self.recv, &cx.dev.srq) {
            (Some(own), _) => {
                if !self.live() {
                    return;
                }
                let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) else {
                    return;
                };
                // SAFETY: the slot's capsule was consumed; the QP is live.
                unsafe { own.post(slot, wr::recv_qp(self.key, slot), Some(&qp)) }
            }
            // SAFETY: the slot's capsule was consumed.
            (None, Some(srq)) => unsafe { srq.post(slot, wr::recv_srq(slot), None) },
            (None, None) => return,
        };
        if let Err(e) = res {
            error!(qid = self.qid(), "reposting a receive: {e}");
            self.fail(cx);
        }
    }

    /// Where request `r`'s data is.
    fn data_ref(&self, dev: &WorkerDevice, r: usize) -> DataRef {
        let q = &self.reqs[r];
        if let Some(b) = &q.buf {
            DataRef {
                ptr: dev.buf_ptr(b),
                fixed: Some(dev.fixed),
            }
        } else if let (Some(slot), Some(area)) = (q.recv, self.area(dev)) {
            DataRef {
                ptr: area.data_ptr(slot).wrapping_add(q.capsule_off as usize),
                fixed: area.fixed(),
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
    unsafe fn data_mut<'a>(&self, dev: &'a WorkerDevice, r: usize) -> &'a mut [u8] {
        let len = self.reqs[r].plan.len() as usize;
        let d = self.data_ref(dev, r);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: the range is the request's own buffer (pool buffer of at
        // least `len` bytes, or its capsule's data area, whose length the SGL
        // check bounded); no work request or backend operation uses it while
        // the request executes, and only this request touches it.
        unsafe { std::slice::from_raw_parts_mut(d.ptr, len) }
    }

    // ---- capsules in ---------------------------------------------------

    /// A capsule arrived in receive slot `slot`.
    pub fn on_recv(&mut self, cx: &mut Cx<'_>, slot: u32, byte_len: u32) {
        if !self.live() {
            return self.repost(cx, slot);
        }
        let now = cx.now;
        self.liveness.heard(now);
        let Some(area) = self.area(cx.dev) else {
            return;
        };
        if (byte_len as usize) < SQE_SIZE {
            error!(
                qid = self.qid(),
                byte_len, "capsule shorter than a command; disconnecting"
            );
            self.repost(cx, slot);
            return self.fail(cx);
        }
        // SAFETY: the receive of `slot` just completed; it is reposted only
        // after the command was copied out (Command::parse copies).
        let cmd = match Command::parse(unsafe { area.command(slot) }) {
            Ok(c) => c,
            Err(_) => {
                self.repost(cx, slot);
                return self.fail(cx);
            }
        };
        self.sq_head = (self.sq_head + 1) % self.params.sq_size;
        // A host has at most its queue's size of commands outstanding (the
        // shared receive queue is sized for that much per queue). A request
        // slot is held a little longer, until its response's SEND completes,
        // so slots alone would let a host that ignores flow control take
        // twice its share of the shared receives.
        if self.unanswered >= self.params.sq_size {
            error!(
                qid = self.qid(),
                sq_size = self.params.sq_size,
                "more commands outstanding than the queue holds; disconnecting"
            );
            self.repost(cx, slot);
            return self.fail(cx);
        }
        let Some(r) = self.free.pop() else {
            error!(
                qid = self.qid(),
                "more commands than the queue holds; disconnecting"
            );
            self.repost(cx, slot);
            return self.fail(cx);
        };
        let r = r as usize;
        self.unanswered += 1;
        // The lifecycle (its generation) and the namespace list (its
        // allocation, emptied at release) carry over to the slot's next use.
        let life = std::mem::take(&mut self.reqs[r].life);
        let ns = std::mem::take(&mut self.reqs[r].ns);
        debug_assert!(ns.is_empty());
        self.reqs[r] = Req {
            life,
            ns,
            cmd,
            ..Req::new(now)
        };
        if self.qid() != 0 && !cmd.is_fabrics() {
            cx.target.io_in_flight.fetch_add(1, Ordering::SeqCst);
            cx.target.io_started.fetch_add(1, Ordering::Relaxed);
            if cx.target.stopping.load(Ordering::SeqCst) {
                // Shutting down: hold the command unanswered (parked). The
                // queue is disconnected once in-flight I/O drained; the host
                // then requeues it and resends it after reconnecting. A status
                // would not do: without a retry delay the host spends its
                // retries at once.
                cx.target.io_in_flight.fetch_sub(1, Ordering::SeqCst);
                self.reqs[r].life.arrive(false, false, false);
                return self.repost(cx, slot);
            }
            self.reqs[r].in_target_count = true;
        }
        let known = cmd.is_fabrics()
            || if self.qid() == 0 {
                admin::supported(cmd.opcode())
            } else {
                io::supported(cmd.opcode())
            };
        let planned = if known {
            transport::data_plan(&cmd, byte_len - SQE_SIZE as u32, MAX_IO_SIZE)
        } else {
            Err(Status::INVALID_OPCODE)
        };
        let target = cx.target;
        let checked = planned.and_then(|(plan, inv)| {
            self.reqs[r].plan = plan;
            self.reqs[r].inv = inv;
            self.precheck(target, r)
        });
        let checked = self.pair_fused(cx, r, checked);
        if let Err(st) = checked {
            // Keyed subtype 0xF still owes an invalidation.
            if let nvme::Sgl::Keyed {
                invalidate: true,
                key,
                ..
            } = cmd.sgl()
            {
                self.reqs[r].inv = Some(key);
            }
            self.reqs[r].plan = DataPlan::None;
            self.repost(cx, slot);
            self.reqs[r].life.arrive(false, false, false);
            return self.complete(cx, r, st, 0);
        }
        let plan = self.reqs[r].plan;
        let step = match plan {
            DataPlan::InCapsule { offset, .. } => {
                if cmd.opcode() == nvme::opcode::io::WRITE && self.qid() != 0 {
                    Stats::inc(&cx.target.stats.in_capsule_writes);
                }
                self.reqs[r].recv = Some(slot);
                self.reqs[r].capsule_off = offset;
                // Misaligned for O_DIRECT: copied into a pool buffer first.
                let aligned = (offset as usize).is_multiple_of(PAGE);
                self.reqs[r].life.arrive(!aligned, false, true)
            }
            DataPlan::FromHost { .. } => {
                self.repost(cx, slot);
                self.reqs[r].life.arrive(true, true, false)
            }
            DataPlan::ToHost { .. } => {
                self.repost(cx, slot);
                self.reqs[r].life.arrive(true, false, false)
            }
            DataPlan::None => {
                self.repost(cx, slot);
                self.reqs[r].life.arrive(false, false, false)
            }
        };
        self.step(cx, r, step)
    }

    /// Checks that must pass before any data moves.
    fn precheck(&mut self, target: &Target, r: usize) -> Result<(), Status> {
        let cmd = self.reqs[r].cmd;
        // Only the NVM command set fuses (Compare and Write).
        if cmd.fuse() != 0 && (cmd.is_fabrics() || self.qid() == 0) {
            return Err(Status::INVALID_FIELD);
        }
        if cmd.is_fabrics() {
            return match cmd.fctype() {
                // One Connect at a time: the check that the queue has no
                // controller yet holds only until a Connect executes, and a
                // second one fetching its data meanwhile would create a
                // second controller that nothing ever detaches.
                fctype::CONNECT if self.ctrl.is_none() && self.connecting => {
                    Err(Status::CMD_SEQ_ERROR)
                }
                fctype::CONNECT if self.ctrl.is_none() => {
                    // Exactly the Connect data, as nvmet: no peer that has not
                    // proven anything gets a large buffer for its capsule.
                    if self.reqs[r].plan.len() as usize != nvme::fabrics::CONNECT_DATA_SIZE {
                        return Err(Status::SGL_INVALID_DATA);
                    }
                    self.connecting = true;
                    Ok(())
                }
                // A Connect on a connected queue: like any fabrics command an
                // established queue does not take, Invalid Opcode (nvmet, SPDK).
                fctype::CONNECT => Err(Status::INVALID_OPCODE),
                fctype::PROPERTY_GET | fctype::PROPERTY_SET
                    if self.qid() == 0 && self.ctrl.is_some() =>
                {
                    self.cleared()
                }
                // Authentication runs on a connected queue, admin or I/O.
                fctype::AUTH_SEND | fctype::AUTH_RECEIVE if self.ctrl.is_some() => {
                    crate::command::auth::precheck(&cmd, self.reqs[r].plan.len())
                }
                fctype::AUTH_SEND | fctype::AUTH_RECEIVE => Err(Status::CMD_SEQ_ERROR),
                fctype::PROPERTY_GET | fctype::PROPERTY_SET if self.qid() == 0 => {
                    Err(Status::CMD_SEQ_ERROR)
                }
                _ => Err(Status::INVALID_OPCODE),
            };
        }
        let Some(ctrl) = &self.ctrl else {
            return Err(Status::CMD_SEQ_ERROR);
        };
        self.cleared()?;
        if self.qid() == 0 {
            return Ok(());
        }
        if !ctrl.is_ready() {
            return Err(Status::CMD_SEQ_ERROR);
        }
        let ns = ctrl.subsys.namespace(cmd.nsid());
        if let Some(n) = &ns {
            // The namespace's ANA group at the listener this host came
            // through: inaccessible there, the host is to take another path.
            if let Some(st) = target.ana.state(ctrl.port(), n.ana_group).refusal() {
                return Err(st);
            }
        }
        let plan = io::prepare(ns.as_deref(), &cmd, self.reqs[r].plan.len(), MAX_IO_SIZE)?;
        if let (Some(n), Some(access)) = (&ns, crate::reservation::access_of(&plan)) {
            n.resv.check(&ctrl.hostid, access).map_err(|st| {
                if st == Status::RESERVATION_CONFLICT {
                    n.metrics.reservation_conflicts.inc();
                }
                ctrl.retry_delay(st)
            })?;
        }
        self.reqs[r].io = Some(plan);
        self.reqs[r].ns.extend(ns);
        Ok(())
    }

    /// A queue of a controller that requires authentication runs nothing
    /// but authentication until it authenticated (NVMe Base: Authentication
    /// Required; nvmet lets Property Get/Set through, the specification
    /// does not).
    fn cleared(&self) -> Result<(), Status> {
        match &self.ctrl {
            Some(c) if !self.auth.cleared(c) => Err(Status::AUTH_REQUIRED),
            _ => Ok(()),
        }
    }

    // ---- the lifecycle driver -----------------------------------------

    fn step(&mut self, cx: &mut Cx<'_>, r: usize, mut step: Step) {
        loop {
            step = match step {
                Step::NeedBuffer => {
                    let class = cx.dev.class_for(self.reqs[r].plan.len() as usize);
                    match cx.dev.pool.take(class, self.waiter(r)) {
                        Some(b) => {
                            cx.dev.gauges[class as usize].0.inc();
                            self.reqs[r].buf = Some(b);
                            self.reqs[r].life.buffer_granted()
                        }
                        None => {
                            cx.dev.gauges[class as usize].1.inc();
                            return;
                        }
                    }
                }
                Step::Fetch => return self.fetch(cx, r),
                Step::Execute => return self.execute(cx, r),
                Step::Respond => return self.respond(cx, r),
                Step::Release => return self.release(cx, r),
                Step::Wait => return,
            }
        }
    }

    /// A buffer given back by some request goes to request `r` of this queue,
    /// which waited for it. Returns the buffer if that wait is stale.
    pub fn grant(&mut self, cx: &mut Cx<'_>, id: &rdma::WrId, buf: Buf) -> Option<Buf> {
        let r = id.slot as usize;
        let q = self.reqs.get(r)?;
        if q.life.stage() != Stage::WaitBuffer || q.life.generation() != id.slot_gen {
            return Some(buf);
        }
        cx.dev.gauges[buf.class as usize].0.inc();
        self.reqs[r].buf = Some(buf);
        let s = self.reqs[r].life.buffer_granted();
        self.step(cx, r, s);
        None
    }

    fn fetch(&mut self, cx: &mut Cx<'_>, r: usize) {
        let DataPlan::FromHost { addr, len, key } = self.reqs[r].plan else {
            return;
        };
        let d = self.data_ref(cx.dev, r);
        let sge = [Sge {
            addr: d.ptr as u64,
            len,
            lkey: cx.dev.data.mr.lkey(),
        }];
        let wr = SendRequest {
            wr_id: self.wr_id(wr::READ, r),
            op: SendOp::RdmaRead {
                remote_addr: addr,
                rkey: key,
            },
            sges: &sge,
            signaled: true,
        };
        Stats::inc(&cx.target.stats.rdma_reads);
        self.queue_sends(cx, &[wr], None);
        self.reqs[r].life.fetch_posted();
    }

    /// Execution is over: answer with `status`.
    fn complete(&mut self, cx: &mut Cx<'_>, r: usize, status: Status, result: u64) {
        self.reqs[r].status = status;
        self.reqs[r].result = result;
        let s = self.reqs[r].life.executed();
        self.step(cx, r, s)
    }

    // ---- responses out -------------------------------------------------

    fn respond(&mut self, cx: &mut Cx<'_>, r: usize) {
        self.unanswered = self.unanswered.saturating_sub(1);
        // In-capsule data is used up once a request responds (no backend
        // operation is in flight then): its receive goes back before the
        // response is posted, as nvmet does. The host sends its next capsule
        // once it has the response; a receive given back only when the
        // response's SEND completes would miss it, and the capsule would meet
        // an RNR NAK on a queue pair whose receives are all in use.
        if let Some(slot) = self.reqs[r].recv.take() {
            self.reqs[r].life.recv_returned();
            self.repost(cx, slot);
        }
        let (cmd, status, result) = {
            let q = &self.reqs[r];
            (q.cmd, q.status, q.result)
        };
        if !status.is_success() {
            Stats::inc(&cx.target.stats.failed_commands);
            metrics()
                .failed_commands
                .with_label_values(&[status.name().unwrap_or("OTHER")])
                .inc();
            if let Some(c) = &self.ctrl {
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
        // Inline (the queue pair took INLINE_RSP bytes of inline data): the
        // batch keeps a copy of the response. Else from the response area.
        let mut inline_rsp = [0u8; CQE_SIZE];
        let rsp_sge = if let Some(mem) = &self.rsp_mem {
            let off = r * CQE_SIZE;
            // SAFETY: slot `r` of the response area is this request's; its
            // previous SEND completed before the request was released.
            let slot = unsafe { std::slice::from_raw_parts_mut(mem.base().add(off), CQE_SIZE) };
            cqe.encode_into(slot);
            mem.mr.sge(off, CQE_SIZE as u32)
        } else {
            cqe.encode_into(&mut inline_rsp);
            Sge::default()
        };
        let rsp_sge = [rsp_sge];
        let (inv, plan, out_len) = (self.reqs[r].inv, self.reqs[r].plan, self.reqs[r].out_len);
        let send_op = match inv {
            Some(k) => {
                Stats::inc(&cx.target.stats.send_with_inv);
                SendOp::SendWithInv(k)
            }
            None => {
                Stats::inc(&cx.target.stats.sends);
                SendOp::Send
            }
        };
        let send = SendRequest {
            wr_id: self.wr_id(wr::SEND, r),
            op: send_op,
            sges: &rsp_sge,
            signaled: true,
        };
        match (status.is_success(), plan, self.reqs[r].buf) {
            (true, DataPlan::ToHost { addr, key, .. }, Some(b)) if out_len > 0 => {
                let data_sge = [Sge {
                    addr: cx.dev.buf_ptr(&b) as u64,
                    len: out_len,
                    lkey: cx.dev.data.mr.lkey(),
                }];
                let write = SendRequest {
                    wr_id: self.wr_id(wr::WRITE, r),
                    op: SendOp::RdmaWrite {
                        remote_addr: addr,
                        rkey: key,
                    },
                    sges: &data_sge,
                    signaled: false,
                };
                Stats::inc(&cx.target.stats.rdma_writes);
                self.queue_sends(cx, &[write], None);
            }
            _ => {}
        }
        let inline = self.rsp_mem.is_none().then_some(&inline_rsp[..]);
        self.queue_sends(cx, &[send], inline);
        self.reqs[r].life.response_posted();
    }

    /// Probes the host with a zero-length RDMA WRITE (no memory, no key): its
    /// transport acknowledges it if it is still there.
    pub(super) fn send_probe(&mut self, cx: &mut Cx<'_>, now: Instant) {
        let probe = SendRequest {
            wr_id: wr::req(wr::PROBE, self.key, 0, 0),
            op: SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            sges: &[],
            signaled: true,
        };
        self.queue_sends(cx, &[probe], None);
        self.liveness.probe_sent(now);
    }

    /// Queues work requests; they are posted together at the end of the loop
    /// pass ([`Queue::flush_sends`]). `inline`: the data of each, sent inline
    /// (the batch keeps a copy).
    fn queue_sends(&mut self, cx: &mut Cx<'_>, wrs: &[SendRequest<'_>], inline: Option<&[u8]>) {
        if self.batch.room() < wrs.len() {
            self.flush_sends(cx);
        }
        for w in wrs {
            let queued = match inline {
                Some(data) => self.batch.push_inline(w, data),
                None => self.batch.push(w),
            };
            if !queued {
                // Only when the flush above could not empty the batch (its
                // queue pair is gone): a response that is not sent would
                // leave the host waiting, so the queue fails instead.
                error!(
                    qid = self.qid(),
                    "a work request did not fit its batch; disconnecting"
                );
                return self.fail(cx);
            }
        }
    }

    /// The capsules this queue may have outstanding on its device's shared
    /// receive queue (0 when it has receives of its own).
    pub fn srq_share(&self) -> u32 {
        if self.recv.is_some() {
            0
        } else {
            self.params.sq_size as u32
        }
    }

    /// Whether work requests wait to be posted.
    pub fn has_sends(&self) -> bool {
        !self.batch.is_empty()
    }

    /// Posts the queued work requests with one doorbell.
    pub fn flush_sends(&mut self, cx: &mut Cx<'_>) {
        if self.batch.is_empty() {
            return;
        }
        let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) else {
            return;
        };
        if qp.lent_post_error().is_some() {
            return self.lent_failed(cx);
        }
        let to = route(
            cx.dev.offload_sends,
            self.batch.largest_write(),
            qp.tickets_out(),
        );
        if let (Route::Poster, Some(poster)) = (to, cx.poster) {
            let batch = std::mem::replace(&mut self.batch, SendBatch::new(0));
            // SAFETY: as below; the requests hold their memory until their
            // completions whichever thread posts, and the ticket holds the QP
            // (`finished` waits for it).
            self.batch = unsafe { poster.hand(qp.ticket(), batch) };
            return;
        }
        // SAFETY: every queued WR names a pool buffer or response slot of a
        // request that holds it until its SEND (or READ) completes (inline
        // responses are copies in the batch); the QP is live (owned by `id`).
        if let Err(e) = unsafe { self.batch.post(&qp) } {
            error!(qid = self.qid(), "ibv_post_send: {e}");
            self.fail(cx);
        }
    }

    /// A batch the poster was given could not be posted: the queue fails
    /// (as when a post on the worker fails), and nothing queued after the
    /// lost batch goes out.
    pub(super) fn lent_failed(&mut self, cx: &mut Cx<'_>) {
        self.batch.clear();
        let code = self.id.as_ref().and_then(|i| i.qp()?.lent_post_error());
        if let (Some(code), true) = (code, self.live()) {
            error!(
                qid = self.qid(),
                "ibv_post_send (poster thread): {}",
                std::io::Error::from_raw_os_error(code.max(0))
            );
            self.fail(cx);
        }
    }

    // ---- completions ---------------------------------------------------

    /// A work completion for request `id` (READ, WRITE or SEND), or of a
    /// liveness probe.
    pub fn on_wc(&mut self, cx: &mut Cx<'_>, id: &rdma::WrId, ok: bool) {
        if id.kind == wr::PROBE {
            // A failed probe failed the queue already (`on_wc_error`).
            if ok {
                self.liveness.probe_answered(cx.now);
            }
            return;
        }
        let r = id.slot as usize;
        let Some(q) = self.reqs.get(r) else { return };
        if !q.life.owns_work_completion(id.slot_gen) {
            return;
        }
        if id.kind == wr::SEND && self.end_after_send == Some(r) {
            self.end_after_send = None;
            if let Some(c) = &self.ctrl {
                c.kill_all();
            }
        }
        let step = match id.kind {
            wr::READ => self.reqs[r].life.fetched(ok),
            wr::SEND => self.reqs[r].life.response_done(ok),
            _ => Step::Wait,
        };
        self.step(cx, r, step)
    }

    /// A work completion failed (`flush`: because the queue pair went to the
    /// error state, which happens on every disconnect).
    pub fn on_wc_error(&mut self, cx: &mut Cx<'_>, flush: bool, what: &str) {
        if !flush {
            error!(qid = self.qid(), "{what}");
            self.log_device_events();
            self.fail(cx);
        } else if self.live() {
            self.log_device_events();
            self.disconnect(cx, "queue pair flushed", "error");
        }
    }

    fn release(&mut self, cx: &mut Cx<'_>, r: usize) {
        let Some(held) = self.reqs[r].life.release() else {
            return;
        };
        let q = &mut self.reqs[r];
        if held.buffer {
            if let Some(b) = q.buf.take() {
                cx.dev.gauges[b.class as usize].0.dec();
                if let Some(g) = cx.dev.pool.give(b) {
                    cx.grants.push(g);
                }
            }
        }
        let recv = q.recv.take();
        if std::mem::take(&mut q.in_ns_gauge) {
            if let Some(ns) = q.ns.first() {
                ns.metrics.in_flight.dec();
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
            cx.target.io_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        self.free.push(r as u16);
        if let Some(slot) = recv.filter(|_| held.recv) {
            self.repost(cx, slot);
        }
    }
}
