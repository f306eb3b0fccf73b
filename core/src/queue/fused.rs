//! Fused Compare and Write on a queue: the Compare (FUSE first) waits for
//! the next command, which must be its Write (FUSE second) over the same
//! blocks; the pair runs as one operation on the offload thread
//! (`command::compare`), and both answer together.

use nvme::command::fuse;
use nvme::Status;

use super::{Env, QueueCore};
use crate::backend::compare::{self, MISCOMPARE};
use crate::command::compare::CompareAndWriteJob;
use crate::command::io;
use crate::request::lifecycle::Step;
use crate::request::plan::IoPlan;

/// Where a queue is in a fused pair.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pending {
    /// No pair open.
    #[default]
    None,
    /// A first command (request slot) waits for its second.
    First(u16),
    /// The first command failed: its second is aborted.
    FirstFailed,
}

impl QueueCore {
    /// Pairs an arriving command with the fused state of the queue: a
    /// second takes the waiting first (or is aborted: missing or failed
    /// first); anything else leaves a waiting first without its second.
    /// Returns the arriving command's check result, as changed.
    pub(super) fn pair_fused(
        &mut self,
        env: &mut Env<'_, '_>,
        r: usize,
        checked: Result<(), Status>,
    ) -> Result<(), Status> {
        let cmd = self.reqs[r].cmd;
        let mut checked = checked;
        match (std::mem::take(&mut self.fused), cmd.fuse()) {
            (Pending::First(f), fuse::SECOND) => {
                let first = self.reqs[f as usize].cmd;
                let same = first.nsid() == cmd.nsid()
                    && first.slba() == cmd.slba()
                    && first.nlb() == cmd.nlb();
                if checked.is_ok() && !same {
                    checked = Err(Status::INVALID_FIELD);
                }
                match checked {
                    Ok(()) => {
                        self.reqs[r].partner = Some(f);
                        self.reqs[f as usize].partner = Some(r as u16);
                    }
                    Err(_) => self.fused_outcome(env, f as usize, Status::FUSED_FAILED),
                }
            }
            (Pending::FirstFailed, fuse::SECOND) => checked = Err(Status::FUSED_FAILED),
            (_, fuse::SECOND) => checked = Err(Status::FUSED_MISSING),
            (Pending::First(f), _) => self.fused_outcome(env, f as usize, Status::FUSED_MISSING),
            _ => {}
        }
        if cmd.fuse() == fuse::FIRST {
            self.fused = if checked.is_ok() {
                Pending::First(r as u16)
            } else {
                Pending::FirstFailed
            };
        }
        checked
    }

    /// Request `r` will not execute: its fused partner fails, and a second
    /// still to come is aborted.
    pub(super) fn unpair(&mut self, env: &mut Env<'_, '_>, r: usize) {
        if let Some(p) = self.reqs[r].partner.take() {
            self.fused_outcome(env, p as usize, Status::FUSED_FAILED);
        }
        if self.fused == Pending::First(r as u16) {
            self.fused = Pending::FirstFailed;
        }
    }

    /// Decides the outcome of fused command `f` before its pair ran: it
    /// answers now if it waits, or when it executes.
    fn fused_outcome(&mut self, env: &mut Env<'_, '_>, f: usize, st: Status) {
        let q = &mut self.reqs[f];
        q.partner = None;
        if std::mem::take(&mut q.waiting_partner) {
            self.complete(env, f, st, 0);
        } else {
            q.fused_status = Some(st);
        }
    }

    /// A first command whose second has not come within
    /// [`super::timers::FUSED_WAIT`] is answered Command Aborted due to
    /// Missing Fused Command; a second arriving later is aborted the same
    /// way (no first waits for it).
    pub(super) fn expire_fused(&mut self, env: &mut Env<'_, '_>) {
        let Pending::First(f) = self.fused else {
            return;
        };
        let started = self.reqs[f as usize].start;
        if env.now.saturating_duration_since(started) < super::timers::FUSED_WAIT {
            return;
        }
        self.fused = Pending::None;
        self.fused_outcome(env, f as usize, Status::FUSED_MISSING);
    }

    /// A fused command executes (its data is here): the pair runs once both
    /// are; until then it waits.
    pub(super) fn exec_fused(&mut self, env: &mut Env<'_, '_>, r: usize) {
        if let Some(st) = self.reqs[r].fused_status.take() {
            return self.complete(env, r, st, 0);
        }
        let Some(p) = self.reqs[r].partner.map(usize::from) else {
            // A first whose second has not arrived yet.
            self.reqs[r].waiting_partner = true;
            return;
        };
        if !self.reqs[p].waiting_partner {
            self.reqs[r].waiting_partner = true;
            return;
        }
        self.reqs[p].waiting_partner = false;
        let (first, second) = if self.reqs[r].cmd.fuse() == fuse::FIRST {
            (r, p)
        } else {
            (p, r)
        };
        let (Some(IoPlan::Write { offset, len, fua }), Some(ns)) =
            (self.reqs[second].io, self.reqs[second].ns.first().cloned())
        else {
            self.complete(env, first, Status::INTERNAL, 0);
            return self.complete(env, second, Status::INTERNAL, 0);
        };
        let (cmp, data) = (
            self.data_ref(env, first).ptr,
            self.data_ref(env, second).ptr,
        );
        self.reqs[first].life.backend_started(1);
        self.reqs[second].life.backend_started(1);
        let ud = env.mem.backend_ud(self.token(second));
        let lane = ns.lane.clone();
        // SAFETY: both buffers hold `len` bytes (the pair's checked data) and
        // stay their requests', unwritten, until the job completed (both
        // count it as a backend operation).
        let job = unsafe {
            CompareAndWriteJob::new(ns, self.ctrl.clone(), offset, fua, (cmp, data), len)
        };
        env.exec.blocking(Some(&lane), ud, Box::new(job));
    }

    /// The pair of second command `s` ran with `res`: both answer. A
    /// miscompare fails the Compare and aborts the Write (nothing written).
    pub(super) fn fused_done(&mut self, env: &mut Env<'_, '_>, s: usize, res: i32) {
        let Some(f) = self.reqs[s].partner.map(usize::from) else {
            return;
        };
        let plan = self.reqs[s].io;
        let (st_first, st_second) = match (res, compare::refusal(res)) {
            // The host's access refused (counted, with its retry delay).
            (_, Some(st)) => (Status::FUSED_FAILED, st),
            (0, _) => (Status::SUCCESS, Status::SUCCESS),
            (MISCOMPARE, _) => (Status::COMPARE_FAILURE, Status::FUSED_FAILED),
            (e, None) => {
                let write = |e: i32| plan.map_or(Status::INTERNAL, |p| io::errno_status(&p, -e));
                match compare::write_failure(e) {
                    // The compare matched; the write failed: it says why.
                    Some(w) => (Status::FUSED_FAILED, write(w)),
                    None => {
                        let cmp = IoPlan::Compare { offset: 0, len: 0 };
                        (io::errno_status(&cmp, -e), write(e))
                    }
                }
            }
        };
        if st_second.is_success() {
            if let (Some(IoPlan::Write { len, .. }), Some(ns)) = (plan, self.reqs[s].ns.first()) {
                ns.metrics.record(
                    env.worker,
                    crate::counters::namespace::IoOp::Write,
                    len as u64,
                    env.now.saturating_duration_since(self.reqs[s].start),
                );
            }
        }
        for (r, st) in [(f, st_first), (s, st_second)] {
            match self.reqs[r].life.backend_done() {
                Step::Respond => self.complete(env, r, st, 0),
                step => self.step(env, r, step),
            }
        }
    }
}
