//! I/O commands: the write gate and the reservation at execution, the
//! backend work ([`crate::backend::op`]), its completions, and the answer.

use nvme::Status;
use tracing::{debug, error, warn};

use super::{Env, QueueCore, Token};
use crate::backend::op::{After, Op};
use crate::command::compare::CompareJob;
use crate::command::io;
use crate::command::reservation::admit;
use crate::counters::namespace::IoOp;
use crate::request::lifecycle::Step;
use crate::request::plan::IoPlan;
use crate::request::write_gate::{Entry, REOPENED};
use crate::reservation::Access;

impl QueueCore {
    pub(super) fn exec_io(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let (Some(plan), Some(ns)) = (self.reqs[r].io, self.reqs[r].ns.first().cloned()) else {
            return self.complete(env, r, Status::INTERNAL, 0);
        };
        if let IoPlan::Resv { .. } = plan {
            return self.exec_resv(env, r);
        }
        if self.reqs[r].cmd.fuse() != nvme::command::fuse::NONE {
            return self.exec_fused(env, r);
        }
        // Over its caps: it waits for tokens (as a backend operation in
        // flight), then comes back here.
        if self.qos_holds(env, r, super::qos::QosWait::Exec) {
            return self.reqs[r].life.backend_started(1);
        }
        let ud = env.mem.backend_ud(self.token(r));
        if let IoPlan::Compare { offset, len } = plan {
            // A read and a comparison, blocking: on the offload thread.
            let cmp = self.data_ref(env, r).ptr;
            self.reqs[r].op = Op::new(plan);
            // SAFETY: `len` bytes of the request's buffer, unwritten until
            // the job completed (it counts as a backend operation).
            let job = unsafe { CompareJob::new(ns, offset, cmp, len) };
            env.exec.blocking(None, ud, Box::new(job));
            return self.reqs[r].life.backend_started(1);
        }
        if !self.reqs[r].in_ns_gauge {
            ns.metrics.in_flight(env.worker, 1);
            self.reqs[r].in_ns_gauge = true;
        }
        let ranges = match plan {
            IoPlan::Dsm { nr, deallocate } => {
                // SAFETY: the request executes and nothing was submitted for it yet;
                // the ranges are parsed before the data is used again.
                match io::dsm_ranges(&ns, unsafe { self.data_mut(env, r) }, nr) {
                    Ok(v) if deallocate => v,
                    Ok(_) => Vec::new(),
                    Err(st) => return self.complete(env, r, st, 0),
                }
            }
            _ => Vec::new(),
        };
        // A write passes its namespace's write gate (shut while a Compare
        // and Write runs on a local store, or while another gateway owns an
        // RBD image): parked, it comes back with REOPENED and executes
        // again.
        let writes = plan.writes();
        if writes && !self.reqs[r].gated && ns.backend.gated() {
            match ns.gate.enter(env.exec.mailbox(), ud) {
                Entry::Inside => self.reqs[r].gated = true,
                Entry::Parked => return self.reqs[r].life.backend_started(1),
            }
        }
        // The reservation again, now that the write is inside the gate: a
        // Preempt and Abort that closed the gate meanwhile either waits for
        // it (it was inside first) or has changed the state it sees here.
        if writes {
            if let Some(c) = &self.ctrl {
                if let Err(st) = admit(&ns, c, Access::Write) {
                    self.ungate(r);
                    return self.complete(env, r, st, 0);
                }
            }
        }
        let data = self.data_ref(env, r);
        self.reqs[r].op = Op::new(plan);
        // SAFETY: the data buffer is the request's until it is released, which
        // the lifecycle allows only after every submitted operation completed;
        // the request holds `ns` as long.
        let n = unsafe {
            self.reqs[r]
                .op
                .start(&*ns.backend, &ns.gate, data, &ranges, env.exec, ud)
        };
        if ns.backend.shared().is_some() {
            // The gate is the store's ownership: its operations hold it
            // until the store completed them.
            self.ungate(r);
        }
        let failed = self.reqs[r].op.failed();
        if failed != 0 {
            error!(
                qid = self.qid(),
                errno = failed,
                "backend submission failed"
            );
        }
        self.reqs[r].life.backend_started(n);
        if n == 0 {
            self.finish_io(env, r);
        }
    }

    /// A reservation command: run here, or, when it must wait (a change
    /// synced to the state file, or waiting for the namespace's writes), on
    /// the namespace's lane, while the worker serves other queues (and
    /// completes those writes).
    /// The status comes back as the operation's result.
    fn exec_resv(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let (Some(ctrl), Some(ns)) = (self.ctrl.clone(), self.reqs[r].ns.first().cloned()) else {
            return self.complete(env, r, Status::INTERNAL, 0);
        };
        let cmd = self.reqs[r].cmd;
        if crate::command::reservation::blocks(&ns, &cmd) {
            // SAFETY: the request executes; its data is copied out at once.
            let keys = unsafe { self.data_mut(env, r) }.to_vec();
            let ud = env.mem.backend_ud(self.token(r));
            let lane = ns.lane.clone();
            let job = crate::command::reservation::Change::new(ns, ctrl, cmd, keys);
            env.exec.blocking(Some(&lane), ud, Box::new(job));
            return self.reqs[r].life.backend_started(1);
        }
        // SAFETY: the request executes; nothing else uses its data until
        // the call returns.
        let data = unsafe { self.data_mut(env, r) };
        let (st, out) = crate::command::reservation::execute(&ns, &ctrl, &cmd, data);
        self.reqs[r].out_len = out;
        self.complete(env, r, st, 0)
    }

    /// A backend operation of request `t` completed with `res`.
    pub fn backend_done(&mut self, env: &mut Env<'_, '_>, t: Token, res: i32) {
        let r = t.slot as usize;
        let live = self.live;
        let Some(q) = self.reqs.get(r) else {
            return;
        };
        if !q.life.owns_backend_completion(t.gen) {
            debug!(qid = self.qid(), "stale backend completion ignored");
            return;
        }
        let Some(plan) = q.io else { return };
        if res == REOPENED {
            return self.reopened(env, r);
        }
        if q.partner.is_some() && q.cmd.fuse() == nvme::command::fuse::SECOND {
            return self.fused_done(env, r, res);
        }
        match plan {
            IoPlan::Auth { send } => self.auth_done(env, r, send, res),
            IoPlan::Resv { .. } => {
                self.reqs[r].status = match u16::try_from(res) {
                    Ok(field) => Status::from_field(field),
                    Err(_) => Status::INTERNAL,
                };
            }
            IoPlan::Compare { .. } => match res {
                0 => self.reqs[r].status = Status::SUCCESS,
                crate::backend::compare::MISCOMPARE => {
                    self.reqs[r].status = Status::COMPARE_FAILURE
                }
                e => self.reqs[r].op.fail(-e),
            },
            _ => {
                let data = self.data_ref(env, r);
                let ud = env.mem.backend_ud(t);
                let q = &mut self.reqs[r];
                // The namespace the operation runs on (a host shutdown's
                // flushes need none to continue).
                let after = match q.ns.first() {
                    // SAFETY: `data` is the request's, which it holds until
                    // every submitted operation completed; it holds `ns`.
                    Some(ns) => unsafe {
                        q.op.completed(res, live, &*ns.backend, &ns.gate, data, env.exec, ud)
                    },
                    None => After::Over,
                };
                if after == After::Continued {
                    return;
                }
            }
        }
        match self.reqs[r].life.backend_done() {
            Step::Respond => self.finish_io(env, r),
            s => self.step(env, r, s),
        }
    }

    /// A write parked at its namespace's gate executes now (where the
    /// reservation is checked again, inside the gate: what closed it may
    /// have been a Preempt and Abort that took its host's access).
    fn reopened(&mut self, env: &mut Env<'_, '_>, r: usize) {
        match self.reqs[r].life.backend_done() {
            // Its queue ended while it waited (its host gave up on the
            // association): a write the host may have retried elsewhere
            // is not executed now.
            Step::Respond if !self.live => self.complete(env, r, Status::ABORT_QUEUE, 0),
            Step::Respond => self.exec_io(env, r),
            s => self.step(env, r, s),
        }
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

    pub(super) fn finish_io(&mut self, env: &mut Env<'_, '_>, r: usize) {
        self.ungate(r);
        let q = &self.reqs[r];
        if let Some(IoPlan::Auth { .. }) = q.io {
            let st = q.status;
            return self.complete(env, r, st, 0);
        }
        if q.cmd.is_fabrics() {
            // The flushes of a host shutdown: complete, or fatal if one failed.
            let errno = q.op.errno();
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
            return self.complete(env, r, st, res);
        }
        let (Some(plan), Some(ns)) = (q.io, q.ns.first()) else {
            return self.complete(env, r, Status::INTERNAL, 0);
        };
        if let IoPlan::Resv { .. } = plan {
            let st = q.status;
            return self.complete(env, r, st, 0);
        }
        let op = q.op;
        if op.short() {
            // A read answers with data only when the backend produced every
            // byte of it: the buffer's other bytes are whatever its last
            // user left.
            error!(
                qid = self.qid(),
                nsid = ns.nsid,
                ?plan,
                done = op.done(),
                "backend moved fewer bytes than asked"
            );
        }
        let errno = op.errno();
        if errno != 0 {
            ns.metrics.backend_error();
            let mut st = io::errno_status(&plan, errno);
            if op.durability() && ns.flush_failure_is_sticky() {
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
            if let Some(left_out) = ns.error_log.admit(env.now) {
                warn!(nsid = ns.nsid, cid = q.cmd.cid(), ?plan, errno, status = %st, left_out,
                      "backend I/O failed (logged at most every {} s; left_out: failures since the last line, counted in backend_errors_total)",
                      crate::model::namespace::ERROR_LOG_EVERY.as_secs());
            }
            return self.complete(env, r, st, 0);
        }
        let (op, bytes) = match plan {
            IoPlan::Read { len, .. } => (IoOp::Read, len as u64),
            IoPlan::Write { len, .. } => (IoOp::Write, len as u64),
            IoPlan::Flush => (IoOp::Flush, 0),
            IoPlan::WriteZeroes { .. } => (IoOp::WriteZeroes, 0),
            IoPlan::Dsm { .. } => (IoOp::Dsm, 0),
            IoPlan::Resv { .. } | IoPlan::Compare { .. } | IoPlan::Auth { .. } => {
                let st = q.status;
                return self.complete(env, r, st, 0);
            }
        };
        // The worker's clock is read once per pass (a clock read can cost a
        // system call and a device register in a VM): a request done in the
        // pass it arrived in (a RAM disk, null) counts as taking no time.
        let elapsed = env.now.saturating_duration_since(q.start);
        ns.metrics.record(env.worker, op, bytes, elapsed);
        if let (Some(ctrl), IoPlan::Read { .. } | IoPlan::Write { .. }) = (&self.ctrl, plan) {
            ctrl.io()
                .count_io(env.worker, plan.writes(), bytes, elapsed);
        }
        if let IoPlan::Read { len, .. } = plan {
            self.reqs[r].out_len = len;
        }
        self.complete(env, r, Status::SUCCESS, 0)
    }
}
