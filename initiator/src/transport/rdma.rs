//! One NVMe/RDMA queue pair on the host side: the RDMA-CM connection, the
//! registered memory, the per-command memory windows, posting capsules and
//! processing completions.
//!
//! Memory, per queue of depth `d`:
//! - `cmd`: `d` capsules of 64 bytes (local access only);
//! - `rsp`: `d` receive buffers of 16 bytes (local access only);
//! - data: `d` slots of `slot_size` bytes, each its own region, registered
//!   once. In [`WindowMode::Mw`] the regions allow local access and MW_BIND
//!   only, and every data transfer opens a type-2 window over exactly the
//!   bytes of that command, with exactly the access the target needs. (One
//!   region per slot also bounds a window by its slot on devices that check a
//!   window's access against its region's bounds only, as soft-RoCE on 6.1
//!   does.) In [`WindowMode::Mr`] the regions allow remote read and write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::cm::{CmReject, CmRequest, RejectStatus};
use nvme::command::Command;
use nvme::completion::Completion;
use nvme::sgl::Sgl;
use nvme::{CQE_SIZE, SQE_SIZE};
use rdma::{
    Access, Buffer, CmEventKind, CmId, CompletionQueue, ConnParams, EventChannel, MemoryRegion,
    MemoryWindow, ProtectionDomain, QpCaps, SendBatch, SendOp, SendRequest, Sge, WorkCompletion,
};

use super::{
    raw_outcome, Common, Done, HostQueue, QueueConfig, RawOutcome, RawRequest, WindowMode, Xfer,
};
use crate::error::{Error, Result};
use crate::slots::Next;

const WR_SEND: u64 = 0;
const WR_RECV: u64 = 1;
const WR_LOCAL_INV: u64 = 2;
const WR_BIND: u64 = 3;

fn wr_id(kind: u64, idx: u16) -> u64 {
    kind << 32 | idx as u64
}

/// The data slots: one region each, and in window mode one window each.
/// Field order matters: windows are deallocated before the regions they view.
struct DataMem {
    mws: Vec<MemoryWindow>,
    mrs: Vec<MemoryRegion>,
}

/// One connected NVMe/RDMA queue pair.
pub struct RdmaQueue {
    // Drop order: the id (with its QP) first, then memory, CQ, PD.
    id: CmId,
    cmd: MemoryRegion,
    rsp: MemoryRegion,
    data: DataMem,
    cq: Arc<CompletionQueue>,
    _pd: Arc<ProtectionDomain>,
    batch: SendBatch,
    key_updates: Vec<(u16, u32)>,
    wcs: Vec<WorkCompletion>,
    crqsize: u16,
    c: Common,
}

/// The NVMe/RDMA reject status in a reject's private data, if any, and the
/// reason in words. RDMA-CM status 28 is a consumer reject (the target's).
fn reject_reason(private: &[u8], cm_status: i32) -> (Option<u16>, String) {
    match CmReject::parse(private) {
        Ok(r) if cm_status == 28 => {
            let name = RejectStatus::from_code(r.status)
                .map_or("unknown NVMe/RDMA reject status", RejectStatus::describe);
            (
                Some(r.status),
                format!("{name} (NVMe/RDMA status {})", r.status),
            )
        }
        _ if cm_status == 28 => (None, "rejected without NVMe/RDMA status".into()),
        _ => (
            None,
            format!("no listener or refused (CM status {cm_status})"),
        ),
    }
}

impl RdmaQueue {
    /// Connects queue `cfg.qid` to the target at `dst` (RDMA-CM with NVMe/RDMA
    /// private data). The NVMe-level Connect command is the caller's.
    pub fn connect(dst: SocketAddr, cfg: QueueConfig) -> Result<RdmaQueue> {
        if cfg.depth < 2 || cfg.slot_size == 0 {
            return Err(Error::Invalid(format!(
                "queue depth {} / slot size {}",
                cfg.depth, cfg.slot_size
            )));
        }
        let qid = cfg.qid;
        let ch = EventChannel::new()?;
        let mut id = CmId::new(&ch)?;
        id.resolve(cfg.src, dst, cfg.timeout).map_err(|e| match e {
            rdma::ResolveError::Call(e) => Error::from(e),
            rdma::ResolveError::Step { step, source } => Error::Resolve {
                addr: dst,
                what: step,
                detail: source.to_string(),
            },
        })?;
        let ctx = id.context().ok_or_else(|| Error::Resolve {
            addr: dst,
            what: "device lookup",
            detail: "no RDMA device for this address".into(),
        })?;
        let attr = ctx.query()?;
        if cfg.windows == WindowMode::Mw && (!attr.mem_mgt_extensions || attr.max_mw == 0) {
            return Err(Error::NoWindows);
        }
        let depth = cfg.depth as usize;
        let send_wr = depth * 3 + 4;
        let rdma::OwnQueue { pd, cq } = id.create_own_qp(
            (send_wr + depth + 4) as u32,
            QpCaps {
                max_send_wr: send_wr as u32,
                max_recv_wr: depth as u32,
                max_send_sge: 2,
                max_recv_sge: 1,
            },
        )?;
        let local = Access::LOCAL_WRITE;
        let cmd = MemoryRegion::new(&pd, Buffer::new(depth * SQE_SIZE)?, local)?;
        let rsp = MemoryRegion::new(&pd, Buffer::new(depth * CQE_SIZE)?, local)?;
        let region_access = match cfg.windows {
            WindowMode::Mw => local | Access::MW_BIND,
            WindowMode::Mr => local | Access::REMOTE_READ | Access::REMOTE_WRITE,
        };
        let mrs = (0..depth)
            .map(|_| MemoryRegion::new(&pd, Buffer::new(cfg.slot_size)?, region_access))
            .collect::<rdma::Result<Vec<_>>>()?;
        let mws = match cfg.windows {
            WindowMode::Mw => (0..depth)
                .map(|_| MemoryWindow::new_type2(&pd))
                .collect::<rdma::Result<Vec<_>>>()?,
            WindowMode::Mr => Vec::new(),
        };
        let data = DataMem { mws, mrs };
        let mut q = RdmaQueue {
            id,
            cmd,
            rsp,
            data,
            cq,
            _pd: pd,
            batch: SendBatch::new(send_wr),
            key_updates: Vec::with_capacity(depth),
            wcs: (0..32).map(|_| WorkCompletion::default()).collect(),
            crqsize: 0,
            c: Common::new(dst, cfg),
        };
        for i in 0..depth as u16 {
            q.post_recv(i)?;
        }
        let req = match &q.c.cfg.cm_private {
            Some(p) => p.clone(),
            None => CmRequest {
                recfmt: 0,
                qid,
                hrqsize: q.c.cfg.depth,
                hsqsize: q.c.cfg.depth - 1,
            }
            .encode()
            .to_vec(),
        };
        q.id.connect(&ConnParams {
            private_data: &req,
            responder_resources: attr.max_qp_rd_atom.min(255) as u8,
            initiator_depth: 0,
            rnr_retry_count: 7,
            retry_count: 7,
        })?;
        let deadline = Instant::now() + q.c.cfg.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match ch.wait_event(left)? {
                Some(ev) => ev,
                None if left.is_zero() => {
                    return Err(Error::Timeout {
                        what: format!("connecting queue {qid} to {dst}"),
                        after: q.c.cfg.timeout,
                    })
                }
                None => continue,
            };
            match ev.kind {
                CmEventKind::Established => {
                    q.crqsize = nvme::cm::CmReply::parse(&ev.private_data)
                        .map(|r| r.crqsize)
                        .unwrap_or(0);
                    break;
                }
                CmEventKind::Rejected => {
                    let (status, reason) = reject_reason(&ev.private_data, ev.status);
                    return Err(Error::Rejected {
                        addr: dst,
                        qid,
                        status,
                        reason,
                    });
                }
                k => {
                    return Err(Error::Connect {
                        addr: dst,
                        qid,
                        what: format!("{k:?} (status {})", ev.status),
                    })
                }
            }
        }
        q.cq.req_notify()?;
        Ok(q)
    }

    /// The target's receive queue size from the accept private data (0 if absent).
    pub fn crqsize(&self) -> u16 {
        self.crqsize
    }

    /// Window mode.
    pub fn window_mode(&self) -> WindowMode {
        self.c.cfg.windows
    }

    /// What else the verbs layer knows when the queue pair broke: the
    /// connection event that came with it (a target disconnect arrives as
    /// DISCONNECTED shortly after the flush) and the device's asynchronous
    /// events (a QP access error means the target touched a window or region
    /// it had no right to). Empty when nothing is pending.
    fn why_broken(&self) -> String {
        let mut notes = Vec::new();
        if let Ok(Some(ev)) = self.id.channel().wait_event(Duration::from_millis(100)) {
            notes.push(format!("rdma_cm {:?} (status {})", ev.kind, ev.status));
        }
        if let Some(ctx) = self.id.context() {
            match ctx.take_async_events() {
                Ok(evs) => notes.extend(evs.into_iter().map(|e| format!("device event: {e}"))),
                Err(e) => notes.push(format!("device events unreadable: {e}")),
            }
        }
        if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        }
    }

    fn post_recv(&mut self, i: u16) -> Result<()> {
        let sge = self.rsp.sge(i as usize * CQE_SIZE, CQE_SIZE as u32);
        let qp = self.id.qp().expect("queue pair exists");
        // SAFETY: the receive buffer lies in `rsp`, which outlives the QP (drop
        // order), and the CPU reads it only after the receive completes.
        unsafe { qp.post_recv(wr_id(WR_RECV, i), &[sge]) }?;
        Ok(())
    }

    fn push(&mut self, r: SendRequest<'_>) -> Result<()> {
        if !self.batch.push(&r) {
            self.flush()?;
            if !self.batch.push(&r) {
                return Err(self.c.fail("send batch overflow".into()));
            }
        }
        Ok(())
    }

    /// Builds the SGL (binding a window if needed) and the data SGE for `xfer`
    /// on slot `tag`. Returns the SGL, the in-capsule SGE and the window key.
    fn prepare_data(
        &mut self,
        tag: u16,
        xfer: Xfer,
        allow_inline: bool,
    ) -> Result<(Sgl, Option<Sge>, Option<u32>)> {
        let (len, to_target) = match xfer {
            Xfer::None => {
                return Ok((
                    Sgl::Keyed {
                        addr: 0,
                        len: 0,
                        key: 0,
                        invalidate: false,
                    },
                    None,
                    None,
                ))
            }
            Xfer::ToTarget(n) => (n, true),
            Xfer::FromTarget(n) => (n, false),
        };
        if len == 0 || len as usize > self.c.cfg.slot_size {
            return Err(Error::Invalid(format!(
                "transfer of {len} bytes (slot size {})",
                self.c.cfg.slot_size
            )));
        }
        if to_target && allow_inline && len as usize <= self.c.cfg.inline_max {
            let sge = self.data.mrs[tag as usize].sge(0, len);
            self.c.stats.in_capsule += 1;
            return Ok((Sgl::InCapsule { offset: 0, len }, Some(sge), None));
        }
        let mr = &self.data.mrs[tag as usize];
        match self.data.mws.get(tag as usize) {
            Some(mw) => {
                // A slot's previous bind is always posted (and its key
                // recorded) before the slot completes, so the next key
                // follows the window's current one.
                let key = mw.next_rkey();
                let addr = mr.addr();
                let op = SendOp::BindMw {
                    mw: mw.handle(),
                    mr: mr.handle(),
                    addr,
                    len: len as u64,
                    access: if to_target {
                        Access::REMOTE_READ
                    } else {
                        Access::REMOTE_WRITE
                    },
                    rkey: key,
                };
                self.push(SendRequest {
                    wr_id: wr_id(WR_BIND, tag),
                    op,
                    sges: &[],
                    signaled: false,
                })?;
                // Recorded once queued: a push that had to flush the batch
                // first must not advance this window's key before its bind
                // is posted (the flush applies the updates it posted).
                self.key_updates.push((tag, key));
                self.c.stats.binds += 1;
                Ok((
                    Sgl::Keyed {
                        addr,
                        len,
                        key,
                        invalidate: true,
                    },
                    None,
                    Some(key),
                ))
            }
            None => Ok((
                Sgl::Keyed {
                    addr: mr.addr(),
                    len,
                    key: mr.rkey(),
                    invalidate: false,
                },
                None,
                None,
            )),
        }
    }

    fn send_capsule(
        &mut self,
        tag: u16,
        sqe: &[u8; SQE_SIZE],
        data: Option<Sge>,
        window: Option<u32>,
    ) -> Result<()> {
        let off = tag as usize * SQE_SIZE;
        // Only a reserved slot starts: its previous capsule's SEND completed.
        self.c
            .slots
            .start(tag, window)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        // SAFETY: the slot's previous SEND completed (it was reserved) and
        // this one is posted below: the device does not read these bytes now.
        unsafe { self.cmd.bytes_mut(off..off + SQE_SIZE) }.copy_from_slice(sqe);
        let cmd_sge = self.cmd.sge(off, SQE_SIZE as u32);
        let sges = [cmd_sge, data.unwrap_or(cmd_sge)];
        let n = if data.is_some() { 2 } else { 1 };
        self.c.stats.commands += 1;
        self.push(SendRequest {
            wr_id: wr_id(WR_SEND, tag),
            op: SendOp::Send,
            sges: &sges[..n],
            signaled: true,
        })
    }

    fn on_wc(&mut self, i: usize, out: &mut Vec<Done>) -> Result<()> {
        let wc = &self.wcs[i];
        let kind = wc.wr_id() >> 32;
        let idx = wc.wr_id() as u16;
        if !wc.is_ok() {
            let reason = format!("{}{}", wc_failure(wc), self.why_broken());
            return Err(self.c.fail(reason));
        }
        let (next, tag) = match kind {
            WR_RECV => {
                let invalidated = wc.invalidated_rkey();
                let off = idx as usize * CQE_SIZE;
                // SAFETY: the receive into this slot completed; it is reposted
                // only after the parse (which copies).
                let parsed = Completion::parse(unsafe { self.rsp.bytes(off..off + CQE_SIZE) });
                self.post_recv(idx)?;
                let mut cqe = match parsed {
                    Ok(c) => c,
                    Err(e) => return Err(self.c.fail(format!("bad response: {e}"))),
                };
                if invalidated.is_some() {
                    self.c.stats.remote_invalidations += 1;
                }
                if let Some((user_cid, tag)) = self.c.raw {
                    if cqe.cid == user_cid {
                        self.c.raw_cqe = Some(cqe);
                        cqe.cid = tag;
                    }
                }
                (self.c.slots.on_response(cqe, invalidated), cqe.cid)
            }
            WR_SEND => (self.c.slots.on_send_done(idx), idx),
            WR_LOCAL_INV => (self.c.slots.on_local_inv_done(idx), idx),
            _ => return Ok(()),
        };
        match next {
            Ok(Next::Wait) => {}
            Ok(Next::Complete(cqe)) => out.push(Done { tag, cqe }),
            Ok(Next::LocalInv(key)) => {
                self.c.stats.local_invalidations += 1;
                self.push(SendRequest {
                    wr_id: wr_id(WR_LOCAL_INV, tag),
                    op: SendOp::LocalInv(key),
                    sges: &[],
                    signaled: true,
                })?;
            }
            Err(e) => return Err(self.c.fail(format!("target protocol error: {e}"))),
        }
        Ok(())
    }

    /// The first completion with an error other than a flush among
    /// `wcs[from..n]` and what else the completion queue holds: what broke
    /// the queue pair when the first error seen is a flush.
    fn flush_cause(&mut self, from: usize, n: usize) -> Option<String> {
        let real_error = |wc: &WorkCompletion| !wc.is_ok() && !wc.is_flush();
        if let Some(wc) = self.wcs[from..n].iter().find(|w| real_error(w)) {
            return Some(format!("{} (after flushed requests)", wc_failure(wc)));
        }
        let mut more: Vec<WorkCompletion> = (0..32).map(|_| WorkCompletion::default()).collect();
        // A broken queue pair completes everything it holds at once; a few
        // rounds see all of it.
        for _ in 0..8 {
            let m = self.cq.poll(&mut more).ok()?;
            if let Some(wc) = more[..m].iter().find(|w| real_error(w)) {
                return Some(format!("{} (after flushed requests)", wc_failure(wc)));
            }
            if m == 0 {
                break;
            }
        }
        None
    }

    fn drain_cq(&mut self, out: &mut Vec<Done>) -> Result<usize> {
        let mut seen = 0;
        loop {
            let n = match self.cq.poll(&mut self.wcs) {
                Ok(n) => n,
                Err(e) => return Err(self.c.fail(e.to_string())),
            };
            for i in 0..n {
                if self.wcs[i].is_flush() {
                    // The queue pair broke; the work request that broke it
                    // may complete after requests flushed ahead of it.
                    if let Some(cause) = self.flush_cause(i + 1, n) {
                        let reason = format!("{cause}{}", self.why_broken());
                        return Err(self.c.fail(reason));
                    }
                }
                self.on_wc(i, out)?;
            }
            seen += n;
            if n < self.wcs.len() {
                break;
            }
        }
        self.flush()?;
        Ok(seen)
    }

    /// Falls silent without telling the target: the queue pair goes to the
    /// error state, so the target's requests (a liveness probe) are never
    /// acknowledged, as from a host that lost power. Dropping the queue
    /// afterwards still disconnects. For fault tests.
    pub fn go_silent(&mut self) -> Result<()> {
        let qp = self
            .id
            .qp()
            .ok_or_else(|| Error::Invalid("the queue has no queue pair".into()))?;
        qp.set_error()?;
        self.c
            .broken
            .get_or_insert_with(|| "fell silent (go_silent)".into());
        Ok(())
    }
}

impl HostQueue for RdmaQueue {
    fn common(&self) -> &Common {
        &self.c
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.c
    }

    fn buffer(&self, tag: u16) -> &[u8] {
        assert!(self.c.slots.is_reserved(tag), "slot {tag} is not reserved");
        // SAFETY: a reserved slot has no command in flight. With windows the
        // device enforces it: the slot's window is closed. In region mode the
        // target keeps the region's key, and the initiator trusts it to write
        // only for a command in flight (as every region-mode host does).
        unsafe { self.data.mrs[tag as usize].bytes(0..self.c.cfg.slot_size) }
    }

    fn buffer_mut(&mut self, tag: u16) -> &mut [u8] {
        assert!(self.c.slots.is_reserved(tag), "slot {tag} is not reserved");
        let s = self.c.cfg.slot_size;
        // SAFETY: as in `buffer`; no work request names a reserved slot.
        unsafe { self.data.mrs[tag as usize].bytes_mut(0..s) }
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let qp = self.id.qp().expect("queue pair exists");
        // SAFETY: every queued WR names memory in `cmd` or the data slots, owned
        // by self and registered until the QP is destroyed; a slot's memory is
        // handed to the CPU again only after its command completed.
        let r = unsafe { self.batch.post(&qp) };
        if let Err(e) = r {
            self.key_updates.clear();
            return Err(self.c.fail(format!("posting work requests: {e}")));
        }
        // The provider checks a bind's current key against the device's, so
        // a window's key advances only once its bind is posted.
        for (tag, key) in self.key_updates.drain(..) {
            self.data.mws[tag as usize].set_rkey(key);
        }
        Ok(())
    }

    fn submit(&mut self, tag: u16, mut cmd: Command, xfer: Xfer) -> Result<()> {
        self.c.check()?;
        if !self.c.slots.is_reserved(tag) {
            return Err(Error::Invalid(format!("slot {tag} is not reserved")));
        }
        cmd.set_cid(tag);
        let (sgl, data, window) = self.prepare_data(tag, xfer, true)?;
        cmd.set_sgl(&sgl);
        self.send_capsule(tag, &cmd.raw, data, window)
    }

    fn poll(&mut self, out: &mut Vec<Done>, wait: Duration) -> Result<usize> {
        self.c.check()?;
        self.flush()?;
        let before = out.len();
        let start = Instant::now();
        loop {
            self.drain_cq(out)?;
            if out.len() > before || wait.is_zero() {
                return Ok(out.len() - before);
            }
            let spent = start.elapsed();
            if spent < self.c.cfg.spin {
                std::hint::spin_loop();
                continue;
            }
            if let Err(e) = self.cq.req_notify() {
                return Err(self.c.fail(e.to_string()));
            }
            self.drain_cq(out)?;
            if out.len() > before {
                return Ok(out.len() - before);
            }
            let left = wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(0);
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            match self.cq.channel().wait(ms) {
                Ok(_) => {
                    self.cq.drain_events();
                }
                Err(e) => return Err(self.c.fail(e.to_string())),
            }
        }
    }

    fn raw(&mut self, req: &RawRequest<'_>, timeout: Duration) -> Result<RawOutcome> {
        self.c.check()?;
        if self.c.slots.in_flight() != 0 {
            return Err(Error::Invalid("raw mode needs an idle queue".into()));
        }
        let tag = self
            .alloc()
            .ok_or_else(|| Error::Invalid("no free command slot".into()))?;
        let mut sqe = req.sqe;
        let user_cid = u16::from_le_bytes([sqe[2], sqe[3]]);
        let mut window = None;
        let mut data_sge = None;
        if let Some(x) = req.window {
            if let Xfer::ToTarget(n) = x {
                let n = (n as usize)
                    .min(req.write_data.len())
                    .min(self.c.cfg.slot_size);
                self.buffer_mut(tag)[..n].copy_from_slice(&req.write_data[..n]);
            }
            let (sgl, _, key) = match self.prepare_data(tag, x, false) {
                Ok(p) => p,
                Err(e) => {
                    self.release(tag);
                    return Err(e);
                }
            };
            sqe[24..40].copy_from_slice(&sgl.encode());
            window = key;
        } else if !req.in_capsule.is_empty() {
            let n = req.in_capsule.len().min(self.c.cfg.slot_size);
            self.buffer_mut(tag)[..n].copy_from_slice(&req.in_capsule[..n]);
            data_sge = Some(self.data.mrs[tag as usize].sge(0, n as u32));
        }
        self.c.raw = Some((user_cid, tag));
        self.c.raw_cqe = None;
        self.send_capsule(tag, &sqe, data_sge, window)?;
        let r = self.wait_for(tag, timeout, &mut |_, _| {}, "raw command");
        self.c.raw = None;
        let cqe = self.c.raw_cqe.take();
        Ok(raw_outcome(self, tag, req, r, cqe, |q| {
            q.c.fail("raw command timed out; queue state unknown".into());
        }))
    }

    fn peer_disconnected(&mut self, wait: Duration) -> bool {
        self.id
            .channel()
            .wait_for(CmEventKind::Disconnected, wait)
            .is_ok()
    }

    fn disconnect(&self) {
        let _ = self.id.disconnect();
    }
}

impl Drop for RdmaQueue {
    fn drop(&mut self) {
        let _ = self.id.disconnect();
        // A bound type-2 window holds a reference on its QP: deallocate the
        // windows first, or destroying the QP waits for them (rxe hangs).
        self.data.mws.clear();
    }
}

/// What a failed work completion says, for a queue's failure reason.
fn wc_failure(wc: &WorkCompletion) -> String {
    let what = match wc.wr_id() >> 32 {
        WR_SEND => "capsule send",
        WR_RECV => "response receive",
        WR_LOCAL_INV => "local invalidate",
        _ => "memory window bind",
    };
    if wc.is_flush() {
        format!("disconnected ({what} flushed)")
    } else {
        format!(
            "{what} failed: {} (vendor error {:#x})",
            wc.status_str(),
            wc.vendor_err()
        )
    }
}
