//! The RDMA transport: RDMA-CM listeners, and one poll thread per queue pair
//! that drives the sans-IO core (fabrics/admin/io) and the io_uring backend.
//!
//! Data path of a queue: capsules arrive by RECV (the 64-byte command into one
//! SGE, in-capsule data into a page-aligned second SGE). Host writes are fetched
//! by RDMA READ into the request's data slot, or used in place from the
//! in-capsule area; host reads are written by RDMA WRITE chained before the
//! response SEND. Responses to keyed SGLs with subtype 0xF go out as
//! SEND_WITH_INVALIDATE of the host's key. The queue's buffer is one memory
//! region that is also io_uring fixed buffer 0.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::cm::{CmReject, CmReply, RejectStatus};
use nvme::opcode::fctype;
use nvme::{Command, Completion, Status, CQE_SIZE, SQE_SIZE};
use rdma::{
    Access, Buffer, CmEventKind, CmId, CompletionChannel, CompletionQueue, ConnParams,
    EventChannel, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, SendBatch, SendOp,
    SendRequest, Sge, WcOpcode, WorkCompletion,
};
use tracing::{debug, error, info, warn};

use crate::admin::{self, AdminOutcome};
use crate::backend::{Backend, BLKDISCARD};
use crate::controller::{monotonic_ms, Controller, PropertyEffect, QueueLink};
use crate::io::{self, IoPlan};
use crate::metrics::{metrics, IoOp};
use crate::namespace::Namespace;
use crate::stats::Stats;
use crate::subsystem::Target;
use crate::transport::{self, DataPlan, QueueParams};
use crate::{fabrics, INLINE_DATA_SIZE, MAX_IO_SIZE};

/// Errors setting up the transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A verbs / RDMA-CM call failed.
    #[error("{context}: {source}")]
    Rdma {
        /// What was being done.
        context: String,
        /// The failure.
        source: rdma::Error,
    },
    /// An OS call failed.
    #[error("{context}: {source}")]
    Os {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
}

fn rdma_err(context: impl Into<String>) -> impl FnOnce(rdma::Error) -> TransportError {
    let context = context.into();
    move |source| TransportError::Rdma { context, source }
}

/// A running listener thread.
#[derive(Debug)]
pub struct Listener {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the listener thread waits for an event before it checks for stop
/// and records its heartbeat.
const LISTEN_TICK: Duration = Duration::from_millis(500);

impl Listener {
    /// Whether the thread is running and went round its loop within `max_ms`.
    pub fn alive(&self, max_ms: u64) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
            && monotonic_ms().saturating_sub(self.heartbeat.load(Ordering::Relaxed)) <= max_ms
    }

    /// Stops accepting: the listening id is destroyed, so the RDMA-CM refuses
    /// new connection requests. Connected queues are not affected.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a listener thread for `addr`. Returns once the address is bound and listening.
pub fn listen(target: Arc<Target>, addr: SocketAddr) -> Result<Listener, TransportError> {
    let ch = EventChannel::new().map_err(rdma_err("creating an RDMA-CM event channel"))?;
    let id = CmId::new(&ch).map_err(rdma_err("creating an RDMA-CM id"))?;
    id.bind(addr).map_err(rdma_err(format!(
        "binding {addr} (is an RDMA device configured on that address?)"
    )))?;
    id.listen(128)
        .map_err(rdma_err(format!("listening on {addr}")))?;
    info!(%addr, "listening (rdma)");
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat = Arc::new(AtomicU64::new(monotonic_ms()));
    let (st, hb) = (stop.clone(), heartbeat.clone());
    let thread = std::thread::Builder::new()
        .name(format!("nvmf-listen-{}", addr.port()))
        .spawn(move || listener_loop(target, ch, id, addr, st, hb))
        .map_err(|source| TransportError::Os {
            context: "spawning the listener thread".into(),
            source,
        })?;
    Ok(Listener {
        addr,
        stop,
        heartbeat,
        thread: Some(thread),
    })
}

fn listener_loop(
    target: Arc<Target>,
    ch: Arc<EventChannel>,
    listen_id: CmId,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
) {
    loop {
        heartbeat.store(monotonic_ms(), Ordering::Relaxed);
        if stop.load(Ordering::Acquire) {
            drop(listen_id);
            info!(%addr, "stopped listening");
            return;
        }
        let ev = match ch.wait_event(LISTEN_TICK) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(e) => {
                error!(%addr, "RDMA-CM event channel failed: {e}");
                return;
            }
        };
        match (ev.kind, ev.new_id) {
            (CmEventKind::ConnectRequest, Some(id)) => on_connect_request(
                &target,
                id,
                &ev.private_data,
                ev.initiator_depth,
                ev.responder_resources,
            ),
            (kind, _) => debug!(%addr, ?kind, "listener event"),
        }
    }
}

fn reject(target: &Target, id: &CmId, why: RejectStatus) {
    Stats::inc(&target.stats.cm_rejects);
    crate::metrics::reject(match why {
        RejectStatus::NoResources => "cm_no_resources",
        RejectStatus::InvalidHsqsize => "cm_invalid_hsqsize",
        RejectStatus::InvalidHrqsize => "cm_invalid_hrqsize",
        RejectStatus::InvalidQid => "cm_invalid_qid",
        RejectStatus::InvalidRecfmt => "cm_invalid_recfmt",
        _ => "cm_invalid_private_data",
    });
    warn!(peer = ?id.peer_addr(), reason = ?why, "rejecting queue connection");
    if let Err(e) = id.reject(&CmReject::new(why).encode()) {
        warn!("rdma_reject: {e}");
    }
}

fn on_connect_request(
    target: &Arc<Target>,
    mut id: CmId,
    private: &[u8],
    host_ird: u8,
    host_ord: u8,
) {
    let params = match transport::check_cm_request(private) {
        Ok(p) => p,
        Err(why) => return reject(target, &id, why),
    };
    if target.stopping.load(Ordering::Acquire) {
        return reject(target, &id, RejectStatus::NoResources);
    }
    let ch = match EventChannel::new().and_then(|ch| ch.set_nonblocking().map(|_| ch)) {
        Ok(ch) => ch,
        Err(e) => {
            error!("creating a queue event channel: {e}");
            return reject(target, &id, RejectStatus::NoResources);
        }
    };
    if let Err(e) = id.migrate(&ch) {
        error!("rdma_migrate_id: {e}");
        return reject(target, &id, RejectStatus::NoResources);
    }
    let t = target.clone();
    let spawn = std::thread::Builder::new()
        .name(format!("nvmf-q{}", params.qid))
        .spawn(move || {
            let peer = id.peer_addr();
            match Queue::setup(t.clone(), id, params, host_ird, host_ord) {
                Ok(mut q) => {
                    t.live_queues.fetch_add(1, Ordering::AcqRel);
                    q.run();
                    q.teardown();
                    drop(q);
                    t.live_queues.fetch_sub(1, Ordering::AcqRel);
                }
                Err((id, e)) => {
                    error!(?peer, qid = params.qid, "queue setup failed: {e}");
                    reject(&t, &id, RejectStatus::NoResources);
                }
            }
        });
    if let Err(e) = spawn {
        error!("spawning a queue thread: {e}");
    }
}

/// The `type` label of a queue.
fn queue_type(qid: u16) -> &'static str {
    if qid == 0 {
        "admin"
    } else {
        "io"
    }
}

// Work request ids: kind in the upper half, index in the lower.
const WR_RECV: u64 = 1 << 32;
const WR_SEND: u64 = 2 << 32;
const WR_READ: u64 = 3 << 32;
const WR_WRITE: u64 = 4 << 32;
// io_uring user data.
const UD_IO: u64 = 1 << 32;
const UD_POLL_CQ: u64 = 2 << 32;
const UD_POLL_EFD: u64 = 3 << 32;
const UD_POLL_CM: u64 = 4 << 32;

const NO_SLOT: u16 = u16::MAX;
const PAGE: usize = 4096;

/// Where a request's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataLoc {
    /// The request's own data slot.
    Slot,
    /// In place in the in-capsule area of a receive slot.
    Inline { slot: u16, offset: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqState {
    Free,
    /// RDMA READ of host data in flight.
    Reading,
    /// Executing (backend or parked AER).
    Executing,
    /// Response posted, waiting for its SEND completion.
    Sending,
}

struct Request {
    state: ReqState,
    cmd: Command,
    recv_slot: u16,
    plan: DataPlan,
    loc: DataLoc,
    inv: Option<u32>,
    io: Option<IoPlan>,
    ops: u16,
    done: u32,
    errno: i32,
    out_len: u32,
    status: Status,
    result: u64,
    /// When the command arrived.
    start: Instant,
    /// The namespace of an I/O command, held until the request is released so a
    /// namespace removed by a reload outlives its in-flight commands.
    ns: Option<Arc<Namespace>>,
    /// Counted in the namespace's in-flight gauge.
    ns_counted: bool,
    /// Counted in `Target::io_in_flight`.
    io_counted: bool,
}

impl Request {
    fn new() -> Request {
        Request {
            state: ReqState::Free,
            cmd: Command::default(),
            recv_slot: NO_SLOT,
            plan: DataPlan::None,
            loc: DataLoc::Slot,
            inv: None,
            io: None,
            ops: 0,
            done: 0,
            errno: 0,
            out_len: 0,
            status: Status::SUCCESS,
            result: 0,
            start: Instant::now(),
            ns: None,
            ns_counted: false,
            io_counted: false,
        }
    }
}

/// Offsets into the queue buffer.
#[derive(Debug, Clone, Copy)]
struct Layout {
    sq_size: usize,
    nreq: usize,
    cmd_off: usize,
    rsp_off: usize,
    inline_off: usize,
    data_off: usize,
    total: usize,
}

impl Layout {
    fn new(sq_size: usize) -> Layout {
        let nreq = sq_size * 2;
        let cmd_off = 0;
        let rsp_off = (sq_size * SQE_SIZE).next_multiple_of(64);
        let inline_off = (rsp_off + nreq * CQE_SIZE).next_multiple_of(PAGE);
        let data_off = inline_off + sq_size * INLINE_DATA_SIZE as usize;
        let total = data_off + nreq * MAX_IO_SIZE as usize;
        Layout {
            sq_size,
            nreq,
            cmd_off,
            rsp_off,
            inline_off,
            data_off,
            total,
        }
    }
    fn cmd(&self, slot: usize) -> usize {
        self.cmd_off + slot * SQE_SIZE
    }
    fn rsp(&self, r: usize) -> usize {
        self.rsp_off + r * CQE_SIZE
    }
    fn inline(&self, slot: usize) -> usize {
        self.inline_off + slot * INLINE_DATA_SIZE as usize
    }
    fn data(&self, r: usize) -> usize {
        self.data_off + r * MAX_IO_SIZE as usize
    }
}

/// One queue pair and everything it owns. Field order is drop order: the
/// RDMA-CM id (and with it the QP) goes first, then the ring, then the memory.
struct Queue {
    id: CmId,
    ring: crate::backend::uring::Ring,
    mr: MemoryRegion,
    cq: Arc<CompletionQueue>,
    _pd: Arc<ProtectionDomain>,
    qp: QueuePair,
    batch: SendBatch,
    target: Arc<Target>,
    params: QueueParams,
    lay: Layout,
    base: *mut u8,
    reqs: Vec<Request>,
    free: Vec<u16>,
    ctrl: Option<Arc<Controller>>,
    link: Arc<QueueLink>,
    sq_head: u16,
    sq_fc_disabled: bool,
    disconnecting: bool,
    /// Metrics label of the first disconnect reason.
    disconnect_reason: &'static str,
    disconnected: bool,
    disconnect_at: Option<Instant>,
    cq_poll_armed: bool,
    efd_poll_armed: bool,
    cm_poll_armed: bool,
    last_ka_check: Instant,
}

type SetupError = (CmId, String);

impl Queue {
    fn setup(
        target: Arc<Target>,
        mut id: CmId,
        params: QueueParams,
        host_ird: u8,
        host_ord: u8,
    ) -> Result<Queue, SetupError> {
        macro_rules! tri {
            ($e:expr, $what:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Err((id, format!("{}: {}", $what, e))),
                }
            };
        }
        let ctx = match id.context() {
            Some(c) => c,
            None => return Err((id, "the connection has no device".into())),
        };
        let dev = tri!(ctx.query(), "ibv_query_device");
        let lay = Layout::new(params.sq_size as usize);
        let pd = tri!(ProtectionDomain::new(ctx), "ibv_alloc_pd");
        let cch = tri!(CompletionChannel::new(ctx), "ibv_create_comp_channel");
        let send_wr = (lay.nreq as u32 * 2).min(dev.max_qp_wr);
        let recv_wr = (lay.sq_size as u32).min(dev.max_qp_wr);
        let cq = tri!(
            CompletionQueue::new(&cch, (send_wr + recv_wr).min(dev.max_cqe)),
            "ibv_create_cq"
        );
        tri!(
            id.create_qp(
                &pd,
                &cq,
                QpCaps {
                    max_send_wr: send_wr,
                    max_recv_wr: recv_wr,
                    max_send_sge: 2.min(dev.max_sge),
                    max_recv_sge: 2.min(dev.max_sge),
                },
            ),
            "rdma_create_qp"
        );
        let buf = tri!(Buffer::new(lay.total), "allocating queue buffers");
        let mr = tri!(
            MemoryRegion::new(&pd, buf, Access::LOCAL_WRITE),
            "ibv_reg_mr"
        );
        let base = mr.buffer().as_ptr();
        // SAFETY: the buffer is owned by `mr`, which the Queue drops after the ring.
        let ring = tri!(
            unsafe {
                crate::backend::uring::Ring::new(
                    (lay.nreq as u32 * 2 + 8).next_power_of_two(),
                    base,
                    lay.total,
                )
            },
            "io_uring setup"
        );
        let link = tri!(QueueLink::new(params.qid), "eventfd");
        let qp = match id.qp() {
            Some(qp) => qp,
            None => return Err((id, "no queue pair".into())),
        };
        let mut q = Queue {
            id,
            ring,
            mr,
            cq,
            _pd: pd,
            qp,
            batch: SendBatch::new(64),
            target,
            params,
            lay,
            base,
            reqs: (0..lay.nreq).map(|_| Request::new()).collect(),
            free: (0..lay.nreq as u16).rev().collect(),
            ctrl: None,
            link,
            sq_head: 0,
            sq_fc_disabled: false,
            disconnecting: false,
            disconnect_reason: "",
            disconnected: false,
            disconnect_at: None,
            cq_poll_armed: false,
            efd_poll_armed: false,
            cm_poll_armed: false,
            last_ka_check: Instant::now(),
        };
        for s in 0..lay.sq_size as u16 {
            if let Err(e) = q.post_recv(s) {
                return Err((q.into_id(), format!("ibv_post_recv: {e}")));
            }
        }
        if let Err(e) = q.cq.req_notify() {
            return Err((q.into_id(), format!("ibv_req_notify_cq: {e}")));
        }
        let rep = CmReply {
            recfmt: 0,
            crqsize: params.sq_size,
        }
        .encode();
        let p = ConnParams {
            private_data: &rep,
            responder_resources: host_ord.min(dev.max_qp_rd_atom.min(255) as u8),
            initiator_depth: host_ird.min(dev.max_qp_init_rd_atom.min(255) as u8),
            rnr_retry_count: 7,
            retry_count: 7,
        };
        if let Err(e) = q.id.accept(&p) {
            return Err((q.into_id(), format!("rdma_accept: {e}")));
        }
        Stats::inc(&q.target.stats.queues_accepted);
        debug!(qid = params.qid, sq_size = params.sq_size, peer = ?q.id.peer_addr(),
               ird = p.responder_resources, ord = p.initiator_depth, "queue accepted");
        Ok(q)
    }

    /// Gives the id back for a reject (dropping everything else in order).
    fn into_id(self) -> CmId {
        let Queue { id, .. } = self;
        id
    }

    fn qid(&self) -> u16 {
        self.params.qid
    }

    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.base as u64 + off as u64,
            len,
            lkey: self.mr.lkey(),
        }
    }

    fn post_recv(&mut self, slot: u16) -> rdma::Result<()> {
        let s = slot as usize;
        let sges = [
            self.sge(self.lay.cmd(s), SQE_SIZE as u32),
            self.sge(self.lay.inline(s), INLINE_DATA_SIZE),
        ];
        // SAFETY: both SGEs lie in the registered buffer; the slot is not touched
        // until its receive completes.
        unsafe { self.qp.post_recv(WR_RECV | slot as u64, &sges) }
    }

    fn slice(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.lay.total);
        // SAFETY: in bounds of the buffer owned by self.mr; no WR writes this range now.
        unsafe { std::slice::from_raw_parts(self.base.add(off), len) }
    }

    #[allow(clippy::mut_from_ref)]
    fn slice_mut(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.lay.total);
        // SAFETY: as above; each request's ranges are used by one request at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// Offset and length of a request's data.
    fn data_range(&self, r: usize) -> (usize, usize) {
        let q = &self.reqs[r];
        let len = q.plan.len() as usize;
        match q.loc {
            DataLoc::Slot => (self.lay.data(r), len),
            DataLoc::Inline { slot, offset } => {
                (self.lay.inline(slot as usize) + offset as usize, len)
            }
        }
    }

    // ---- main loop -------------------------------------------------------

    fn run(&mut self) {
        let spin = Duration::from_micros(self.target.poll_spin_us.load(Ordering::Relaxed));
        let mut wcs: [WorkCompletion; 32] = std::array::from_fn(|_| WorkCompletion::default());
        let mut cqes = [(0u64, 0i32); 64];
        let mut last = Instant::now();
        loop {
            let mut progress = false;
            match self.cq.poll(&mut wcs) {
                Ok(n) => {
                    for wc in &wcs[..n] {
                        self.on_wc(wc);
                    }
                    progress |= n > 0;
                }
                Err(e) => {
                    error!(qid = self.qid(), "ibv_poll_cq: {e}");
                    self.fail();
                }
            }
            let n = self.ring.reap(&mut cqes);
            for &(ud, res) in &cqes[..n] {
                self.on_ring(ud, res);
            }
            progress |= n > 0;
            self.flush_sends();
            if let Err(e) = self.ring.submit() {
                error!(qid = self.qid(), "io_uring submit: {e}");
                self.fail();
            }
            let now = Instant::now();
            if now.duration_since(self.last_ka_check) > Duration::from_millis(250) {
                self.last_ka_check = now;
                self.periodic(now);
            }
            if self.finished(now) {
                return;
            }
            if progress {
                last = now;
                continue;
            }
            if now.duration_since(last) < spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep: arm the CQ, re-check it, then wait on the ring.
            if let Err(e) = self.cq.req_notify() {
                error!(qid = self.qid(), "ibv_req_notify_cq: {e}");
                self.fail();
            }
            match self.cq.poll(&mut wcs) {
                Ok(n) if n > 0 => {
                    for wc in &wcs[..n] {
                        self.on_wc(wc);
                    }
                    self.flush_sends();
                    last = Instant::now();
                    continue;
                }
                _ => {}
            }
            self.arm_polls();
            if let Err(e) = self.ring.wait(Duration::from_millis(250)) {
                error!(qid = self.qid(), "io_uring wait: {e}");
                self.fail();
                std::thread::sleep(Duration::from_millis(10));
            }
            self.cq.drain_events();
            last = Instant::now();
        }
    }

    fn arm_polls(&mut self) {
        let arm = |ring: &mut crate::backend::uring::Ring, armed: &mut bool, fd: i32, ud: u64| {
            if !*armed && ring.poll_in(fd, ud).is_ok() {
                *armed = true;
            }
        };
        arm(
            &mut self.ring,
            &mut self.cq_poll_armed,
            self.cq.channel().fd(),
            UD_POLL_CQ,
        );
        arm(
            &mut self.ring,
            &mut self.efd_poll_armed,
            self.link.fd(),
            UD_POLL_EFD,
        );
        arm(
            &mut self.ring,
            &mut self.cm_poll_armed,
            self.id.channel().fd(),
            UD_POLL_CM,
        );
    }

    fn finished(&self, now: Instant) -> bool {
        if !self.disconnecting {
            return false;
        }
        // Polls are cancelled by dropping the ring; data operations must finish.
        let data_ops = self.ring.inflight
            - (self.cq_poll_armed as usize
                + self.efd_poll_armed as usize
                + self.cm_poll_armed as usize);
        if data_ops > 0 {
            return false;
        }
        self.disconnected
            || self
                .disconnect_at
                .is_some_and(|t| now.duration_since(t) > Duration::from_secs(3))
    }

    fn periodic(&mut self, now: Instant) {
        self.link.beat();
        self.handle_cm_events();
        if self.link.killed() && !self.disconnecting {
            if self.target.stopping.load(Ordering::Acquire) {
                self.disconnect("target shutting down", "shutdown");
            } else {
                self.disconnect("asked to disconnect", "controller");
            }
        }
        if self.qid() == 0 {
            if let Some(c) = self.ctrl.clone() {
                let expired = {
                    let mut st = c.state();
                    let e = !st.failed && st.keep_alive_expired(now);
                    if e {
                        st.failed = true;
                    }
                    e
                };
                if expired {
                    warn!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn,
                          "keep-alive timeout expired; tearing the controller down");
                    metrics()
                        .keep_alive_expirations
                        .with_label_values(&[&c.subsys.nqn])
                        .inc();
                    c.kill_all();
                    self.disconnect("keep-alive timeout", "keep_alive");
                }
                self.complete_aers(&c);
            }
        }
    }

    fn handle_cm_events(&mut self) {
        loop {
            match self.id.channel().get_event() {
                Ok(Some(ev)) => match ev.kind {
                    CmEventKind::Established => debug!(qid = self.qid(), "established"),
                    CmEventKind::Disconnected
                    | CmEventKind::TimewaitExit
                    | CmEventKind::DeviceRemoval => {
                        self.disconnected = true;
                        if !self.disconnecting {
                            self.disconnect("host disconnected", "host");
                        }
                    }
                    CmEventKind::ConnectError
                    | CmEventKind::Unreachable
                    | CmEventKind::Rejected => {
                        warn!(qid = self.qid(), kind = ?ev.kind, "connection failed");
                        self.disconnected = true;
                        self.disconnect("connection failed", "error");
                    }
                    k => debug!(qid = self.qid(), kind = ?k, "cm event"),
                },
                Ok(None) => return,
                Err(e) => {
                    warn!(qid = self.qid(), "rdma_get_cm_event: {e}");
                    self.disconnected = true;
                    self.disconnect("event channel failed", "error");
                    return;
                }
            }
        }
    }

    /// Starts disconnecting; `label` is the reason as counted in metrics.
    fn disconnect(&mut self, why: &str, label: &'static str) {
        if self.disconnecting {
            return;
        }
        debug!(qid = self.qid(), why, "disconnecting queue");
        self.disconnecting = true;
        self.disconnect_reason = label;
        self.disconnect_at = Some(Instant::now());
        if let Err(e) = self.id.disconnect() {
            debug!(qid = self.qid(), "rdma_disconnect: {e}");
        }
        if self.qid() == 0 {
            if let Some(c) = &self.ctrl {
                c.kill_all();
            }
        }
    }

    /// A fatal transport error on this queue: the controller fails with it.
    /// Logs the device's pending asynchronous events (a QP access error names
    /// the queue pair a host's bad key broke). The first queue to look takes them.
    fn log_device_events(&self) {
        let Some(ctx) = self.id.context() else { return };
        match ctx.take_async_events() {
            Ok(evs) => {
                for e in evs {
                    warn!(qid = self.qid(), event = %e, "RDMA device event");
                }
            }
            Err(e) => debug!(qid = self.qid(), "device events: {e}"),
        }
    }

    fn fail(&mut self) {
        if let Some(c) = &self.ctrl {
            c.state().failed = true;
            c.kill_all();
        }
        self.disconnect("transport error", "error");
    }

    fn teardown(&mut self) {
        // Requests still sending, reading or parked never complete now: give
        // back what they hold (in-flight counts, namespace references).
        for r in 0..self.reqs.len() {
            self.release(r);
        }
        if let Some(c) = self.ctrl.take() {
            c.detach(&self.link);
            let m = metrics();
            m.queues
                .with_label_values(&[&c.subsys.nqn, queue_type(self.qid())])
                .dec();
            if self.qid() == 0 {
                m.controllers.with_label_values(&[&c.subsys.nqn]).dec();
                let reason = match self.disconnect_reason {
                    "" => "host",
                    r => r,
                };
                m.disconnects.with_label_values(&[reason]).inc();
                c.kill_all();
                c.subsys.remove_controller(c.cntlid);
                info!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn, "controller disconnected");
                info!("{}", self.target.stats.line());
            }
        }
    }

    // ---- completions -----------------------------------------------------

    fn on_wc(&mut self, wc: &WorkCompletion) {
        let id = wc.wr_id();
        let (kind, idx) = (id & !0xFFFF_FFFF, (id & 0xFFFF_FFFF) as usize);
        if !wc.is_ok() {
            if !wc.is_flush() {
                Stats::inc(&self.target.stats.wc_errors);
                metrics()
                    .wc_errors
                    .with_label_values(&[wc.status_name()])
                    .inc();
                error!(qid = self.qid(), status = %wc.status_str(), vendor_err = wc.vendor_err(),
                       op = kind >> 32, "work completion error");
                self.log_device_events();
                self.fail();
            } else if !self.disconnecting {
                self.log_device_events();
                self.disconnect("queue pair flushed", "error");
            }
            if matches!(kind, WR_SEND | WR_READ | WR_WRITE) && idx < self.reqs.len() {
                // A failed request never completes: release it unless a backend op still uses its slot.
                if self.reqs[idx].ops == 0 {
                    self.release(idx);
                }
            }
            return;
        }
        match (kind, wc.opcode()) {
            (WR_RECV, WcOpcode::Recv) => self.on_recv(idx as u16, wc.byte_len()),
            (WR_READ, _) => self.on_read_done(idx),
            (WR_SEND, _) => self.release(idx),
            (_, op) => debug!(qid = self.qid(), ?op, "unexpected completion"),
        }
    }

    fn release(&mut self, r: usize) {
        let q = &mut self.reqs[r];
        if q.state != ReqState::Free {
            q.state = ReqState::Free;
            if let Some(ns) = q.ns.take() {
                if std::mem::take(&mut q.ns_counted) {
                    ns.metrics.in_flight.dec();
                }
            }
            if std::mem::take(&mut q.io_counted) {
                self.target.io_in_flight.fetch_sub(1, Ordering::SeqCst);
            }
            self.free.push(r as u16);
        }
    }

    fn on_recv(&mut self, slot: u16, byte_len: u32) {
        if self.disconnecting {
            return;
        }
        if (byte_len as usize) < SQE_SIZE {
            error!(
                qid = self.qid(),
                byte_len, "capsule shorter than a command; disconnecting"
            );
            return self.fail();
        }
        let cmd = match Command::parse(self.slice(self.lay.cmd(slot as usize), SQE_SIZE)) {
            Ok(c) => c,
            Err(_) => return self.fail(),
        };
        self.sq_head = (self.sq_head + 1) % self.lay.sq_size as u16;
        let Some(r) = self.free.pop() else {
            error!(
                qid = self.qid(),
                "more commands than the queue holds; disconnecting"
            );
            return self.fail();
        };
        let r = r as usize;
        {
            let q = &mut self.reqs[r];
            *q = Request::new();
            q.state = ReqState::Executing;
            q.cmd = cmd;
            q.recv_slot = slot;
        }
        if self.qid() != 0 && !cmd.is_fabrics() {
            self.target.io_in_flight.fetch_add(1, Ordering::SeqCst);
            if self.target.stopping.load(Ordering::SeqCst) {
                // Shutting down: hold the command unanswered. The queue is
                // disconnected once in-flight I/O drained; the host then
                // requeues it and resends it after reconnecting (to this
                // target restarted, or another path). A status would not do:
                // without a retry delay the host spends its retries at once.
                self.target.io_in_flight.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            self.reqs[r].io_counted = true;
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
        let (plan, inv) = match planned {
            Ok(x) => x,
            Err(st) => {
                // Keyed subtype 0xF still owes an invalidation.
                if let nvme::Sgl::Keyed {
                    invalidate: true,
                    key,
                    ..
                } = cmd.sgl()
                {
                    self.reqs[r].inv = Some(key);
                }
                return self.complete(r, st, 0);
            }
        };
        self.reqs[r].plan = plan;
        self.reqs[r].inv = inv;
        if let Err(st) = self.precheck(r) {
            return self.complete(r, st, 0);
        }
        match plan {
            DataPlan::InCapsule { offset, .. } => {
                if cmd.opcode() == nvme::opcode::io::WRITE && self.qid() != 0 {
                    Stats::inc(&self.target.stats.in_capsule_writes);
                }
                if (offset as usize).is_multiple_of(PAGE) {
                    self.reqs[r].loc = DataLoc::Inline { slot, offset };
                } else {
                    // Misaligned for O_DIRECT: copy into the data slot.
                    let src = self.lay.inline(slot as usize) + offset as usize;
                    let len = plan.len() as usize;
                    let dst = self.lay.data(r);
                    self.slice_mut(dst, len)
                        .copy_from_slice(self.slice(src, len));
                    self.repost(r);
                }
                self.execute(r);
            }
            DataPlan::Read { addr, len, key } => {
                self.repost(r);
                self.reqs[r].state = ReqState::Reading;
                let sge = [self.sge(self.lay.data(r), len)];
                let wr = SendRequest {
                    wr_id: WR_READ | r as u64,
                    op: SendOp::RdmaRead {
                        remote_addr: addr,
                        rkey: key,
                    },
                    sges: &sge,
                    signaled: true,
                };
                Stats::inc(&self.target.stats.rdma_reads);
                self.queue_sends(&[wr]);
            }
            _ => {
                self.repost(r);
                self.execute(r);
            }
        }
    }

    /// Gives a request's receive slot back to the host.
    fn repost(&mut self, r: usize) {
        let s = std::mem::replace(&mut self.reqs[r].recv_slot, NO_SLOT);
        if s != NO_SLOT && !self.disconnecting {
            if let Err(e) = self.post_recv(s) {
                error!(qid = self.qid(), "reposting a receive: {e}");
                self.fail();
            }
        }
    }

    fn on_read_done(&mut self, r: usize) {
        if self.reqs[r].state == ReqState::Reading {
            self.reqs[r].state = ReqState::Executing;
            self.execute(r);
        }
    }

    /// Checks that must pass before any data moves.
    fn precheck(&mut self, r: usize) -> Result<(), Status> {
        let cmd = self.reqs[r].cmd;
        if cmd.is_fabrics() {
            return match cmd.fctype() {
                fctype::CONNECT if self.ctrl.is_none() => Ok(()),
                fctype::CONNECT => Err(Status::CMD_SEQ_ERROR),
                fctype::PROPERTY_GET | fctype::PROPERTY_SET
                    if self.qid() == 0 && self.ctrl.is_some() =>
                {
                    Ok(())
                }
                fctype::PROPERTY_GET | fctype::PROPERTY_SET if self.qid() == 0 => {
                    Err(Status::CMD_SEQ_ERROR)
                }
                _ => Err(Status::INVALID_OPCODE),
            };
        }
        let Some(ctrl) = &self.ctrl else {
            return Err(Status::CMD_SEQ_ERROR);
        };
        if self.qid() == 0 {
            return Ok(());
        }
        if !ctrl.is_ready() {
            return Err(Status::CMD_SEQ_ERROR);
        }
        let ns = ctrl.subsys.namespace(cmd.nsid());
        let plan = io::prepare(ns.as_deref(), &cmd, self.reqs[r].plan.len(), MAX_IO_SIZE)?;
        self.reqs[r].io = Some(plan);
        self.reqs[r].ns = ns;
        Ok(())
    }

    fn execute(&mut self, r: usize) {
        let cmd = self.reqs[r].cmd;
        if cmd.is_fabrics() {
            self.exec_fabrics(r)
        } else if self.qid() == 0 {
            self.exec_admin(r)
        } else {
            self.exec_io(r)
        }
    }

    fn exec_fabrics(&mut self, r: usize) {
        let cmd = self.reqs[r].cmd;
        if cmd.fctype() == fctype::CONNECT {
            let (off, len) = self.data_range(r);
            let data = self.slice(off, len).to_vec();
            match fabrics::connect(&self.target, self.qid(), &cmd, &data) {
                Ok((ctrl, d)) => {
                    if let Err(st) = ctrl.attach(self.link.clone()) {
                        warn!(
                            qid = self.qid(),
                            cntlid = ctrl.cntlid,
                            "queue already connected"
                        );
                        return self.complete(r, st, 0);
                    }
                    self.sq_fc_disabled = nvme::fabrics::ConnectCommand::from_command(&cmd)
                        .sq_flow_control_disabled();
                    if self.qid() == 0 {
                        info!(cntlid = ctrl.cntlid, host = %d.hostnqn, subsys = %d.subsysnqn,
                              peer = ?self.id.peer_addr(), kato_ms = ctrl.state().kato_ms, "controller connected");
                    } else {
                        debug!(
                            cntlid = ctrl.cntlid,
                            qid = self.qid(),
                            "I/O queue connected"
                        );
                    }
                    let m = metrics();
                    let labels = [ctrl.subsys.nqn.as_str(), queue_type(self.qid())];
                    m.connects.with_label_values(&labels).inc();
                    m.queues.with_label_values(&labels).inc();
                    if self.qid() == 0 {
                        m.controllers.with_label_values(&[&ctrl.subsys.nqn]).inc();
                    }
                    let cntlid = ctrl.cntlid as u64;
                    self.ctrl = Some(ctrl);
                    self.complete(r, Status::SUCCESS, cntlid)
                }
                Err(e) => {
                    let (sub, host) = nvme::fabrics::ConnectData::parse(&data)
                        .map(|d| (d.subsysnqn, d.hostnqn))
                        .unwrap_or_default();
                    warn!(qid = self.qid(), status = %e.status, subsys = %sub, host = %host,
                          peer = ?self.id.peer_addr(), reason = e.reason(), "connect refused");
                    crate::metrics::reject(e.reason());
                    self.complete(r, e.status, e.result)
                }
            }
        } else {
            let Some(ctrl) = self.ctrl.clone() else {
                return self.complete(r, Status::CMD_SEQ_ERROR, 0);
            };
            let (st, result, effect) = fabrics::property(&ctrl, &cmd);
            match effect {
                PropertyEffect::Reset => {
                    debug!(cntlid = ctrl.cntlid, "controller reset");
                    ctrl.kill_io_queues();
                }
                PropertyEffect::Shutdown => {
                    for ns in ctrl.subsys.namespaces().iter() {
                        if let Err(e) = ns.flush() {
                            warn!(nsid = ns.nsid, "flush at shutdown: {e}");
                        }
                    }
                    info!(cntlid = ctrl.cntlid, "controller shut down by the host");
                }
                _ => {}
            }
            self.complete(r, st, result)
        }
    }

    fn exec_admin(&mut self, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(r, Status::CMD_SEQ_ERROR, 0);
        };
        let cmd = self.reqs[r].cmd;
        let (off, len) = self.data_range(r);
        let buf = self.slice_mut(off, len);
        match admin::execute(&self.target, &ctrl, &cmd, buf, Instant::now()) {
            AdminOutcome::Done {
                status,
                result,
                data_len,
            } => {
                if matches!(self.reqs[r].plan, DataPlan::Write { .. }) {
                    self.reqs[r].out_len = data_len.min(len as u32);
                }
                self.complete(r, status, result)
            }
            AdminOutcome::Parked => {
                self.repost(r);
                self.complete_aers(&ctrl);
            }
        }
    }

    fn complete_aers(&mut self, ctrl: &Controller) {
        let ready = ctrl.state().match_events();
        for (cid, result) in ready {
            if let Some(r) = (0..self.reqs.len()).find(|&i| {
                self.reqs[i].state == ReqState::Executing
                    && self.reqs[i].cmd.cid() == cid
                    && self.reqs[i].cmd.opcode() == nvme::opcode::admin::ASYNC_EVENT_REQUEST
            }) {
                self.complete(r, Status::SUCCESS, result as u64);
            }
        }
    }

    fn exec_io(&mut self, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(r, Status::CMD_SEQ_ERROR, 0);
        };
        let Some(plan) = self.reqs[r].io else {
            return self.complete(r, Status::INTERNAL, 0);
        };
        let Some(ns) = self.reqs[r].ns.clone() else {
            return self.complete(r, Status::INVALID_NS, 0);
        };
        ns.metrics.in_flight.inc();
        self.reqs[r].ns_counted = true;
        let (off, _) = self.data_range(r);
        let fd = ns.backend.fd();
        let ud = UD_IO | r as u64;
        if let Backend::Null = ns.backend {
            if let IoPlan::Dsm { nr, .. } = plan {
                let (o, l) = self.data_range(r);
                if let Err(st) = io::dsm_ranges(&ns, self.slice(o, l), nr) {
                    return self.complete(r, st, 0);
                }
            }
            return self.finish_io(r, &ctrl, &ns, plan);
        }
        let ptr = self.base.wrapping_add(off);
        let res = match plan {
            IoPlan::Read { offset, len } => {
                self.reqs[r].ops = 1;
                self.ring.read(fd, ptr, len, offset, ud)
            }
            IoPlan::Write { offset, len, fua } => {
                self.reqs[r].ops = 1;
                self.ring.write(fd, ptr, len, offset, fua, ud)
            }
            IoPlan::Flush => {
                self.reqs[r].ops = 1;
                self.ring.fdatasync(fd, ud)
            }
            IoPlan::WriteZeroes { offset, len } => {
                self.reqs[r].ops = 1;
                self.ring.fallocate(
                    fd,
                    offset,
                    len,
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    ud,
                )
            }
            IoPlan::Dsm { nr, deallocate } => {
                let (o, l) = self.data_range(r);
                let ranges = match io::dsm_ranges(&ns, self.slice(o, l), nr) {
                    Ok(v) => v,
                    Err(st) => return self.complete(r, st, 0),
                };
                if !deallocate || ranges.is_empty() {
                    return self.finish_io(r, &ctrl, &ns, plan);
                }
                if let Backend::File { is_block: true, .. } = ns.backend {
                    for (o, l) in ranges {
                        let range = [o, l];
                        // SAFETY: BLKDISCARD reads two u64s from a valid local array.
                        let rc = unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) };
                        if rc < 0 {
                            let e = std::io::Error::last_os_error()
                                .raw_os_error()
                                .unwrap_or(libc::EIO);
                            // Deallocation is advisory: devices without discard still succeed.
                            if e != libc::EOPNOTSUPP {
                                self.reqs[r].errno = e;
                            }
                        }
                    }
                    return self.finish_io(r, &ctrl, &ns, plan);
                }
                let mut res = Ok(());
                self.reqs[r].ops = ranges.len() as u16;
                for (o, l) in ranges {
                    res = res.and(self.ring.fallocate(
                        fd,
                        o,
                        l,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        ud,
                    ));
                }
                res
            }
        };
        if let Err(e) = res {
            error!(qid = self.qid(), "io_uring: {e}");
            self.reqs[r].ops = 0;
            self.complete(r, Status::INTERNAL, 0);
        }
    }

    fn on_ring(&mut self, ud: u64, res: i32) {
        match ud & !0xFFFF_FFFF {
            UD_POLL_CQ => {
                self.cq_poll_armed = false;
                self.cq.drain_events();
            }
            UD_POLL_EFD => {
                self.efd_poll_armed = false;
                self.link.clear();
                self.last_ka_check = Instant::now() - Duration::from_secs(1);
            }
            UD_POLL_CM => {
                self.cm_poll_armed = false;
                self.handle_cm_events();
            }
            UD_IO => self.on_io_done((ud & 0xFFFF_FFFF) as usize, res),
            _ => {}
        }
    }

    fn on_io_done(&mut self, r: usize, res: i32) {
        let Some(plan) = self.reqs[r].io else { return };
        self.reqs[r].ops = self.reqs[r].ops.saturating_sub(1);
        if res < 0 {
            let e = -res;
            let advisory = matches!(plan, IoPlan::Dsm { .. }) && e == libc::EOPNOTSUPP;
            if !advisory {
                self.reqs[r].errno = e;
            }
        } else if let IoPlan::Read { offset, len } | IoPlan::Write { offset, len, .. } = plan {
            let done = self.reqs[r].done + res as u32;
            self.reqs[r].done = done;
            if res == 0 && done < len {
                self.reqs[r].errno = libc::EIO;
            } else if done < len && !self.disconnecting {
                // Short transfer: continue where it stopped.
                let Some(ns) = self.reqs[r].ns.clone() else {
                    return;
                };
                let (off, _) = self.data_range(r);
                let ptr = self.base.wrapping_add(off + done as usize);
                let fd = ns.backend.fd();
                let ud = UD_IO | r as u64;
                self.reqs[r].ops += 1;
                let rr = match plan {
                    IoPlan::Read { .. } => {
                        self.ring
                            .read(fd, ptr, len - done, offset + done as u64, ud)
                    }
                    _ => self
                        .ring
                        .write(fd, ptr, len - done, offset + done as u64, false, ud),
                };
                if rr.is_ok() {
                    return;
                }
                self.reqs[r].ops -= 1;
                self.reqs[r].errno = libc::EIO;
            }
        }
        if self.reqs[r].ops > 0 {
            return;
        }
        if self.disconnecting {
            return self.release(r);
        }
        let Some(ctrl) = self.ctrl.clone() else {
            return self.release(r);
        };
        let Some(ns) = self.reqs[r].ns.clone() else {
            return self.complete(r, Status::INVALID_NS, 0);
        };
        self.finish_io(r, &ctrl, &ns, plan)
    }

    fn finish_io(
        &mut self,
        r: usize,
        ctrl: &Controller,
        ns: &crate::namespace::Namespace,
        plan: IoPlan,
    ) {
        let errno = self.reqs[r].errno;
        if errno != 0 {
            Stats::inc(&self.target.stats.backend_errors);
            ns.metrics.backend_errors.inc();
            let st = io::errno_status(&plan, errno);
            warn!(nsid = ns.nsid, cid = self.reqs[r].cmd.cid(), ?plan, errno, status = %st, "backend I/O failed");
            return self.complete(r, st, 0);
        }
        let elapsed = self.reqs[r].start.elapsed();
        let (op, bytes) = match plan {
            IoPlan::Read { len, .. } => (IoOp::Read, len as u64),
            IoPlan::Write { len, .. } => (IoOp::Write, len as u64),
            IoPlan::Flush => (IoOp::Flush, 0),
            IoPlan::WriteZeroes { .. } => (IoOp::WriteZeroes, 0),
            IoPlan::Dsm { .. } => (IoOp::Dsm, 0),
        };
        ns.metrics.record(op, bytes, elapsed);
        match plan {
            IoPlan::Read { len, .. } => {
                ctrl.host_reads.fetch_add(1, Ordering::Relaxed);
                ctrl.units_read
                    .fetch_add(len as u64 / 512, Ordering::Relaxed);
                self.reqs[r].out_len = len;
            }
            IoPlan::Write { len, .. } => {
                ctrl.host_writes.fetch_add(1, Ordering::Relaxed);
                ctrl.units_written
                    .fetch_add(len as u64 / 512, Ordering::Relaxed);
            }
            _ => {}
        }
        self.complete(r, Status::SUCCESS, 0)
    }

    /// Sends the response (after the read data, if any) and gives back the receive slot.
    fn complete(&mut self, r: usize, status: Status, result: u64) {
        self.repost(r);
        if self.disconnecting {
            return self.release(r);
        }
        let cmd = self.reqs[r].cmd;
        if !status.is_success() {
            Stats::inc(&self.target.stats.failed_commands);
            metrics()
                .failed_commands
                .with_label_values(&[status.name().unwrap_or("OTHER")])
                .inc();
            if let Some(c) = &self.ctrl {
                c.state()
                    .log_error(self.qid(), cmd.cid(), status, cmd.nsid());
            }
            debug!(qid = self.qid(), cid = cmd.cid(), opcode = cmd.opcode(), status = %status, "command failed");
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
        let rsp = self.lay.rsp(r);
        cqe.encode_into(self.slice_mut(rsp, CQE_SIZE));
        let rsp_sge = [self.sge(rsp, CQE_SIZE as u32)];
        let q = &mut self.reqs[r];
        q.state = ReqState::Sending;
        q.status = status;
        q.result = result;
        let (inv, plan, out_len) = (q.inv, q.plan, q.out_len);
        let send_op = match inv {
            Some(k) => {
                Stats::inc(&self.target.stats.send_with_inv);
                SendOp::SendWithInv(k)
            }
            None => {
                Stats::inc(&self.target.stats.sends);
                SendOp::Send
            }
        };
        let send = SendRequest {
            wr_id: WR_SEND | r as u64,
            op: send_op,
            sges: &rsp_sge,
            signaled: true,
        };
        match (status.is_success(), plan, out_len) {
            (true, DataPlan::Write { addr, key, .. }, n) if n > 0 => {
                let data_sge = [self.sge(self.lay.data(r), n)];
                let write = SendRequest {
                    wr_id: WR_WRITE | r as u64,
                    op: SendOp::RdmaWrite {
                        remote_addr: addr,
                        rkey: key,
                    },
                    sges: &data_sge,
                    signaled: false,
                };
                Stats::inc(&self.target.stats.rdma_writes);
                self.queue_sends(&[write, send])
            }
            _ => self.queue_sends(&[send]),
        }
    }

    /// Queues work requests; they are posted together at the end of the loop pass.
    fn queue_sends(&mut self, wrs: &[SendRequest<'_>]) {
        if self.batch.room() < wrs.len() {
            self.flush_sends();
        }
        for w in wrs {
            self.batch.push(w);
        }
    }

    /// Posts the queued work requests with one doorbell.
    fn flush_sends(&mut self) {
        // SAFETY: every queued WR names a data/response slot reserved for its
        // request until the request's SEND (or READ) completes.
        if let Err(e) = unsafe { self.batch.post(&self.qp) } {
            error!(qid = self.qid(), "ibv_post_send: {e}");
            self.fail();
        }
    }
}
