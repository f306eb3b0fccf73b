//! Command execution: fabrics (Connect, Property Get/Set), admin and I/O
//! commands, backend completions.

use std::sync::atomic::Ordering;
use std::time::Instant;

use nvme::opcode::fctype;
use nvme::Status;
use tracing::{debug, error, info, warn};

use super::{queue_type, Cx, Queue};
use crate::backend::{self, DataRef};
use crate::command::admin::{self, AdminOutcome};
use crate::command::fabrics;
use crate::command::io;
use crate::core::plan::IoPlan;
use crate::core::request::{Stage, Step};
use crate::model::controller::{Controller, PropertyEffect};
use crate::telemetry::metrics::{metrics, IoOp};
use crate::telemetry::stats::Stats;
use crate::transport::DataPlan;

use super::super::wr;

impl Queue {
    pub(super) fn execute(&mut self, cx: &mut Cx<'_>, r: usize) {
        // In-capsule data at an offset O_DIRECT cannot use: copy it into the
        // pool buffer and give the receive back.
        if let (Some(slot), Some(b)) = (self.reqs[r].recv, self.reqs[r].buf) {
            if let Some(area) = self.area(cx.dev) {
                let len = self.reqs[r].plan.len() as usize;
                let src = area
                    .data_ptr(slot)
                    .wrapping_add(self.reqs[r].capsule_off as usize);
                // SAFETY: both ranges are `len` bytes inside registered memory
                // owned by this request (its capsule, its pool buffer).
                unsafe { std::ptr::copy_nonoverlapping(src, cx.dev.buf_ptr(&b), len) };
            }
            self.reqs[r].recv = None;
            self.reqs[r].life.recv_returned();
            self.repost(cx, slot);
        }
        let cmd = self.reqs[r].cmd;
        if cmd.is_fabrics() {
            self.exec_fabrics(cx, r)
        } else if self.qid() == 0 {
            self.exec_admin(cx, r)
        } else {
            self.exec_io(cx, r)
        }
    }

    fn exec_fabrics(&mut self, cx: &mut Cx<'_>, r: usize) {
        let cmd = self.reqs[r].cmd;
        if crate::command::auth::is_auth(&cmd) {
            return self.exec_auth(cx, r);
        }
        if cmd.fctype() == fctype::CONNECT {
            self.connecting = false;
            // SAFETY: the request executes; the data is copied out at once.
            let data = unsafe { self.data_mut(cx.dev, r) }.to_vec();
            let peer = self.id.as_ref().and_then(|i| i.peer_addr());
            let (qid, sq) = (self.qid(), self.params.sq_size - 1);
            match fabrics::connect(cx.target, qid, sq, peer.map(|p| p.ip()), &cmd, &data) {
                Ok((ctrl, d)) => {
                    if let Err(st) = ctrl.attach(self.link.clone()) {
                        warn!(
                            qid = self.qid(),
                            cntlid = ctrl.cntlid,
                            status = %st,
                            "queue not attached to its controller"
                        );
                        if self.qid() == 0 {
                            // The controller was made for this queue: nothing
                            // else will ever detach it.
                            ctrl.subsys.remove_controller(ctrl.cntlid);
                        }
                        return self.complete(cx, r, st, 0);
                    }
                    self.sq_fc_disabled = nvme::fabrics::ConnectCommand::from_command(&cmd)
                        .sq_flow_control_disabled();
                    if self.qid() == 0 {
                        let local = self.id.as_ref().and_then(|i| i.local_addr());
                        if let (Some(h), Some(l)) = (peer, local) {
                            ctrl.set_addrs(h, l);
                            ctrl.set_port(cx.target.port_of(l));
                        }
                        info!(cntlid = ctrl.cntlid, host = %d.hostnqn, subsys = %d.subsysnqn,
                              ?peer, kato_ms = ctrl.state().kato_ms, "controller connected");
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
                    let result = ctrl.cntlid as u64 | ctrl.auth.connect_result();
                    self.ctrl = Some(ctrl);
                    self.pending = None;
                    self.complete(cx, r, Status::SUCCESS, result)
                }
                Err(e) => {
                    let (sub, host) = nvme::fabrics::ConnectData::parse(&data)
                        .map(|d| (d.subsysnqn, d.hostnqn))
                        .unwrap_or_default();
                    // Once a minute per peer at warn: a peer that repeats a
                    // refused Connect cannot flood the log (the metric counts each).
                    let loud =
                        peer.is_none_or(|p| cx.target.refusal_log.should_log(p.ip(), cx.now));
                    if loud {
                        warn!(qid = self.qid(), status = %e.status, subsys = %sub, host = %host,
                              ?peer, reason = e.reason(), "connect refused (said once a minute per peer)");
                    } else {
                        debug!(qid = self.qid(), status = %e.status, subsys = %sub, host = %host,
                               ?peer, reason = e.reason(), "connect refused");
                    }
                    crate::telemetry::metrics::reject(e.reason());
                    self.complete(cx, r, e.status, e.result)
                }
            }
        } else {
            let Some(ctrl) = self.ctrl.clone() else {
                return self.complete(cx, r, Status::CMD_SEQ_ERROR, 0);
            };
            let (st, result, effect) = fabrics::property(&ctrl, &cmd);
            match effect {
                PropertyEffect::Reset => {
                    debug!(cntlid = ctrl.cntlid, "controller reset");
                    ctrl.kill_io_queues();
                }
                PropertyEffect::Shutdown => {
                    // Flush every namespace through the ring; the answer goes
                    // once the flushes completed.
                    info!(cntlid = ctrl.cntlid, "controller shut down by the host");
                    self.reqs[r].status = st;
                    self.reqs[r].result = result;
                    self.reqs[r].io = Some(IoPlan::Flush);
                    let ud = self.wr_id(wr::IO, r);
                    let mut n = 0;
                    for ns in ctrl.subsys.namespaces().iter() {
                        // SAFETY: a flush uses no data buffer; the request
                        // holds the namespace until the flush completed.
                        let s = unsafe {
                            backend::submit(
                                &ns.backend,
                                &ns.gate,
                                &IoPlan::Flush,
                                DataRef::NONE,
                                &[],
                                &mut cx.io,
                                ud,
                            )
                        };
                        if s.in_flight > 0 {
                            n += s.in_flight;
                            self.reqs[r].ns.push(ns.clone());
                        }
                        if s.errno != 0 {
                            self.reqs[r].errno = s.errno;
                        }
                    }
                    self.reqs[r].life.backend_started(n);
                    if n > 0 {
                        return;
                    }
                    // Nothing to flush (or every flush failed to submit).
                    return self.finish_io(cx, r);
                }
                _ => {}
            }
            self.complete(cx, r, st, result)
        }
    }

    /// Authentication Send / Receive (checked by `precheck`: a connected
    /// queue, DH-HMAC-CHAP's fields, the data the command names).
    fn exec_auth(&mut self, cx: &mut Cx<'_>, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(cx, r, Status::CMD_SEQ_ERROR, 0);
        };
        let qid = self.qid();
        // SAFETY: the request executes; the calls below are the only users
        // of its data until they return.
        let buf = unsafe { self.data_mut(cx.dev, r) };
        let (status, outcome) = if self.reqs[r].cmd.fctype() == fctype::AUTH_SEND {
            let o =
                crate::command::auth::send(&mut self.auth, &cx.target.credentials, &ctrl, qid, buf);
            (Status::SUCCESS, o)
        } else {
            match crate::command::auth::receive(&mut self.auth, &ctrl, qid, buf) {
                Ok((n, o)) => {
                    self.reqs[r].out_len = n;
                    (Status::SUCCESS, o)
                }
                Err(st) => (st, crate::command::auth::Outcome::Continue),
            }
        };
        if outcome == crate::command::auth::Outcome::Failed {
            // The association ends once this response (with a Failure1's
            // data) was sent: ended at once, the host would get nothing.
            self.end_after_send = Some(r);
        }
        self.complete(cx, r, status, 0);
    }

    fn exec_admin(&mut self, cx: &mut Cx<'_>, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(cx, r, Status::CMD_SEQ_ERROR, 0);
        };
        let cmd = self.reqs[r].cmd;
        // SAFETY: the request executes; admin::execute is the only user of
        // its data until it returns.
        let buf = unsafe { self.data_mut(cx.dev, r) };
        let len = buf.len() as u32;
        if matches!(self.reqs[r].plan, DataPlan::ToHost { .. }) {
            // Data to the host starts as zeroes, whatever a command leaves
            // unwritten: the pool buffer last held another request's data.
            buf.fill(0);
        }
        match admin::execute(cx.target, &ctrl, &cmd, buf, Instant::now()) {
            AdminOutcome::Done {
                status,
                result,
                data_len,
            } => {
                if matches!(self.reqs[r].plan, DataPlan::ToHost { .. }) {
                    self.reqs[r].out_len = data_len.min(len);
                }
                self.complete(cx, r, status, result)
            }
            AdminOutcome::Parked => self.complete_aers(cx, &ctrl),
        }
    }

    /// Answers parked Asynchronous Event Requests that have an event now.
    pub(super) fn complete_aers(&mut self, cx: &mut Cx<'_>, ctrl: &Controller) {
        let ready = ctrl.state().match_events();
        for (cid, result) in ready {
            if let Some(r) = (0..self.reqs.len()).find(|&i| {
                let q = &self.reqs[i];
                q.life.stage() == Stage::Executing
                    && q.life.backend_in_flight() == 0
                    && q.cmd.cid() == cid
                    && q.cmd.opcode() == nvme::opcode::admin::ASYNC_EVENT_REQUEST
            }) {
                self.complete(cx, r, Status::SUCCESS, result as u64);
            }
        }
    }

    fn exec_io(&mut self, cx: &mut Cx<'_>, r: usize) {
        let (Some(plan), Some(ns)) = (self.reqs[r].io, self.reqs[r].ns.first().cloned()) else {
            return self.complete(cx, r, Status::INTERNAL, 0);
        };
        if let IoPlan::Resv { .. } = plan {
            let Some(ctrl) = self.ctrl.clone() else {
                return self.complete(cx, r, Status::INTERNAL, 0);
            };
            let cmd = self.reqs[r].cmd;
            if crate::command::reservation::blocks(&ns, &cmd) {
                // The change is synced to the state file, or waits for the
                // namespace's writes, before the command completes: off the
                // worker, which serves other queues (and completes those
                // writes). The status comes back as the operation's result.
                // SAFETY: the request executes; its data is copied out at once.
                let mut keys = unsafe { self.data_mut(cx.dev, r) }.to_vec();
                let ud = self.wr_id(wr::IO, r);
                let Some(thread) = crate::backend::offload::gate_thread() else {
                    return self.complete(cx, r, Status::INTERNAL, 0);
                };
                thread.run(cx.io.mailbox, ud, move || {
                    let (st, _) = crate::command::reservation::execute(&ns, &ctrl, &cmd, &mut keys);
                    st.to_field() as i32
                });
                return self.reqs[r].life.backend_started(1);
            }
            // SAFETY: the request executes; nothing else uses its data
            // until the call returns.
            let data = unsafe { self.data_mut(cx.dev, r) };
            let (st, out) = crate::command::reservation::execute(&ns, &ctrl, &cmd, data);
            self.reqs[r].out_len = out;
            return self.complete(cx, r, st, 0);
        }
        if self.reqs[r].cmd.fuse() != nvme::command::fuse::NONE {
            return self.exec_fused(cx, r);
        }
        if let IoPlan::Compare { offset, len } = plan {
            // A read and a comparison, blocking: on the offload thread. The
            // buffer stays the request's until the operation completed.
            let cmp = self.data_ref(cx.dev, r).ptr as usize;
            let ud = self.wr_id(wr::IO, r);
            cx.io.offload.run(cx.io.mailbox, ud, move || {
                // SAFETY: `len` bytes of the request's buffer, unwritten
                // until this operation completes (it counts as in flight).
                let c = unsafe { std::slice::from_raw_parts(cmp as *const u8, len as usize) };
                crate::backend::compare::compare(&ns.backend, offset, c)
            });
            return self.reqs[r].life.backend_started(1);
        }
        if !self.reqs[r].in_ns_gauge {
            ns.metrics.in_flight.inc();
            self.reqs[r].in_ns_gauge = true;
        }
        let ranges = match plan {
            IoPlan::Dsm { nr, deallocate } => {
                // SAFETY: the request executes and nothing was submitted for it yet;
                // the ranges are parsed before the data is used again.
                match io::dsm_ranges(&ns, unsafe { self.data_mut(cx.dev, r) }, nr) {
                    Ok(v) if deallocate => v,
                    Ok(_) => Vec::new(),
                    Err(st) => return self.complete(cx, r, st, 0),
                }
            }
            _ => Vec::new(),
        };
        let data = self.data_ref(cx.dev, r);
        let ud = self.wr_id(wr::IO, r);
        // A write passes its namespace's write gate (shut while a Compare
        // and Write runs on a local store, or while another gateway owns an
        // RBD image): parked, it comes back with REOPENED and executes
        // again.
        let writes = plan.writes();
        if writes && !self.reqs[r].gated && ns.backend.gated() {
            match ns.gate.enter(cx.io.mailbox, ud) {
                crate::core::write_gate::Entry::Inside => self.reqs[r].gated = true,
                crate::core::write_gate::Entry::Parked => {
                    return self.reqs[r].life.backend_started(1);
                }
            }
        }
        // The reservation again, now that the write is inside the gate: a
        // Preempt and Abort that closed the gate meanwhile either waits for
        // it (it was inside first) or has changed the state it sees here.
        if writes {
            if let Some(c) = &self.ctrl {
                if ns
                    .resv
                    .check(&c.hostid, crate::reservation::Access::Write)
                    .is_err()
                {
                    ns.metrics.reservation_conflicts.inc();
                    self.ungate(r);
                    return self.complete(cx, r, Status::RESERVATION_CONFLICT, 0);
                }
            }
        }
        // SAFETY: the data buffer is the request's until it is released, which
        // the lifecycle allows only after every submitted operation completed;
        // the request holds `ns` as long.
        let s =
            unsafe { backend::submit(&ns.backend, &ns.gate, &plan, data, &ranges, &mut cx.io, ud) };
        if let crate::backend::Backend::Rbd(_) = ns.backend {
            // Its operations hold the gate until librbd completes them.
            self.ungate(r);
        }
        self.reqs[r].errno = s.errno;
        self.reqs[r].done += s.done;
        if s.errno != 0 {
            error!(
                qid = self.qid(),
                errno = s.errno,
                "backend submission failed"
            );
        }
        self.reqs[r].life.backend_started(s.in_flight);
        if s.in_flight == 0 {
            self.finish_io(cx, r);
        }
    }

    /// A backend operation of request `id` completed with `res`.
    pub fn on_backend(&mut self, cx: &mut Cx<'_>, id: &rdma::WrId, res: i32) {
        let r = id.slot as usize;
        let live = self.live();
        let Some(q) = self.reqs.get_mut(r) else {
            return;
        };
        if !q.life.owns_backend_completion(id.slot_gen) {
            debug!(qid = self.params.qid, "stale backend completion ignored");
            return;
        }
        let Some(plan) = q.io else { return };
        if res == crate::core::write_gate::REOPENED {
            // A write parked at its namespace's gate executes now, unless
            // what closed the gate (a Preempt and Abort) took its host's
            // access.
            let conflict = match (self.ctrl.as_ref(), q.ns.first()) {
                (Some(c), Some(ns)) => crate::reservation::access_of(&plan)
                    .is_some_and(|a| ns.resv.check(&c.hostid, a).is_err()),
                _ => false,
            };
            return match q.life.backend_done() {
                // Its queue ended while it waited (its host gave up on the
                // association): a write the host may have retried elsewhere
                // is not executed now.
                Step::Respond if !live => self.complete(cx, r, Status::ABORT_QUEUE, 0),
                Step::Respond if conflict => {
                    if let Some(ns) = self.reqs[r].ns.first() {
                        ns.metrics.reservation_conflicts.inc();
                    }
                    self.complete(cx, r, Status::RESERVATION_CONFLICT, 0)
                }
                Step::Respond => self.exec_io(cx, r),
                s => self.step(cx, r, s),
            };
        }
        if q.partner.is_some() && q.cmd.fuse() == nvme::command::fuse::SECOND {
            return self.fused_done(cx, r, res);
        }
        if let (IoPlan::Resv { .. }, Ok(field)) = (plan, u16::try_from(res)) {
            q.status = Status::from_field(field);
        } else if let (IoPlan::Compare { .. }, 0 | crate::backend::compare::MISCOMPARE) =
            (plan, res)
        {
            q.status = if res == 0 {
                Status::SUCCESS
            } else {
                Status::COMPARE_FAILURE
            };
        } else if res < 0 {
            let e = -res;
            let advisory =
                matches!(plan, IoPlan::Dsm { .. }) && e == nix::errno::Errno::EOPNOTSUPP as i32;
            if !advisory {
                q.errno = e;
            }
        } else if let IoPlan::Read { len, .. } | IoPlan::Write { len, .. } = plan {
            q.done += res as u32;
            let done = q.done;
            if res == 0 && done < len {
                q.errno = nix::errno::Errno::EIO as i32;
            } else if let Some(next) = io::rest_of(&plan, done).filter(|_| self.live()) {
                // Short transfer: continue where it stopped (FUA kept).
                let d = self.data_ref(cx.dev, r);
                let rest = DataRef {
                    ptr: d.ptr.wrapping_add(done as usize),
                    fixed: d.fixed,
                };
                if self.resubmit(cx, r, next, rest) {
                    return;
                }
            }
        } else if let IoPlan::WriteZeroes { fua: true, .. } = plan {
            // Forced unit access: the zeroes are made durable before the
            // command completes.
            if !q.flush_issued && self.live() {
                self.reqs[r].flush_issued = true;
                if self.resubmit(cx, r, IoPlan::Flush, DataRef::NONE) {
                    return;
                }
            }
        }
        match self.reqs[r].life.backend_done() {
            Step::Respond => self.finish_io(cx, r),
            s => self.step(cx, r, s),
        }
    }

    /// Starts the next backend operation of request `r` in place of the one
    /// that just completed (the rest of a short transfer, the flush after a
    /// zeroing with FUA): true when it is in flight; otherwise the request
    /// records the error and goes on to complete.
    fn resubmit(&mut self, cx: &mut Cx<'_>, r: usize, plan: IoPlan, data: DataRef) -> bool {
        let Some(ns) = self.reqs[r].ns.first().cloned() else {
            return false;
        };
        let ud = self.wr_id(wr::IO, r);
        // SAFETY: `data` lies in the request's buffer, which stays its own
        // until every submitted operation completed; the request holds `ns`.
        let s = unsafe { backend::submit(&ns.backend, &ns.gate, &plan, data, &[], &mut cx.io, ud) };
        if s.in_flight == 1 {
            return true;
        }
        if s.errno != 0 {
            self.reqs[r].errno = s.errno;
        }
        false
    }

    /// Request `r`'s write is done with the store: it leaves its namespace's
    /// gate (a Compare and Write waiting there goes on, whatever the host
    /// does with the response).
    pub(super) fn ungate(&mut self, r: usize) {
        if std::mem::take(&mut self.reqs[r].gated) {
            if let Some(ns) = self.reqs[r].ns.first() {
                ns.gate.leave();
            }
        }
    }

    fn finish_io(&mut self, cx: &mut Cx<'_>, r: usize) {
        self.ungate(r);
        let q = &self.reqs[r];
        let (errno, plan) = (q.errno, q.io);
        if q.cmd.is_fabrics() {
            // The flushes of a host shutdown: complete, or fatal if one failed.
            if errno != 0 {
                warn!(
                    qid = self.qid(),
                    errno, "flush at host shutdown failed: reporting CSTS.CFS"
                );
            }
            if let Some(c) = &self.ctrl {
                c.state().shutdown_done(errno == 0);
            }
            let (st, res) = (q.status, q.result);
            return self.complete(cx, r, st, res);
        }
        let (Some(plan), Some(ns)) = (plan, q.ns.first()) else {
            return self.complete(cx, r, Status::INTERNAL, 0);
        };
        // A read answers with data only when the backend produced every byte
        // of it: the buffer's other bytes are whatever its last user left.
        let errno = match plan {
            IoPlan::Read { len, .. } | IoPlan::Write { len, .. } if errno == 0 && q.done != len => {
                error!(
                    qid = self.qid(),
                    nsid = ns.nsid,
                    ?plan,
                    done = q.done,
                    "backend moved fewer bytes than asked"
                );
                nix::errno::Errno::EIO as i32
            }
            _ => errno,
        };
        if errno != 0 {
            Stats::inc(&cx.target.stats.backend_errors);
            ns.metrics.backend_errors.inc();
            let mut st = io::errno_status(&plan, errno);
            let durability = matches!(
                plan,
                IoPlan::Flush
                    | IoPlan::Write { fua: true, .. }
                    | IoPlan::WriteZeroes { fua: true, .. }
            );
            if durability && ns.flush_failure_is_sticky() {
                // The page cache lost data the kernel reports once: later
                // flushes fail too (io::prepare), and this one is final.
                if !ns.writeback_lost() {
                    error!(nsid = ns.nsid, errno, "a flush of the page cache failed: data may be lost; every later flush of this namespace fails");
                }
                ns.lose_writeback();
                st = st.no_retry();
            }
            st = match &self.ctrl {
                Some(c) => c.retry_delay(st),
                None => st.with_crd(0),
            };
            warn!(nsid = ns.nsid, cid = q.cmd.cid(), ?plan, errno, status = %st, "backend I/O failed");
            return self.complete(cx, r, st, 0);
        }
        let (op, bytes) = match plan {
            IoPlan::Read { len, .. } => (IoOp::Read, len as u64),
            IoPlan::Write { len, .. } => (IoOp::Write, len as u64),
            IoPlan::Flush => (IoOp::Flush, 0),
            IoPlan::WriteZeroes { .. } => (IoOp::WriteZeroes, 0),
            IoPlan::Dsm { .. } => (IoOp::Dsm, 0),
            IoPlan::Resv { .. } | IoPlan::Compare { .. } => {
                let st = self.reqs[r].status;
                return self.complete(cx, r, st, 0);
            }
        };
        ns.metrics
            .record(op, bytes, cx.now.saturating_duration_since(q.start));
        if let Some(ctrl) = &self.ctrl {
            match plan {
                IoPlan::Read { len, .. } => {
                    ctrl.host_reads.fetch_add(1, Ordering::Relaxed);
                    ctrl.units_read
                        .fetch_add(len as u64 / 512, Ordering::Relaxed);
                }
                IoPlan::Write { len, .. } => {
                    ctrl.host_writes.fetch_add(1, Ordering::Relaxed);
                    ctrl.units_written
                        .fetch_add(len as u64 / 512, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        if let IoPlan::Read { len, .. } = plan {
            self.reqs[r].out_len = len;
        }
        self.complete(cx, r, Status::SUCCESS, 0)
    }
}
