//! QoS in the core: an I/O under a namespace's caps (or its host's) waits
//! for its worker's tokens ([`crate::request::qos`]) before it takes a data
//! buffer, or, when it needs none (in-capsule data, no data), before it
//! executes. A waiting I/O holds no buffer and counts as in flight; it is
//! never refused: the host sees it take longer.

use std::sync::Arc;

use super::{Env, QueueCore, Token};
use crate::model::qos::Limit;
use crate::request::lifecycle::{Stage, Step};
use crate::request::plan::IoPlan;
use crate::request::qos::Waiter;

/// Where a request is with its caps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum QosWait {
    /// Not looked at yet.
    #[default]
    Unchecked,
    /// Passed (or not capped).
    Passed,
    /// Waits, then takes its data buffer.
    Buffer,
    /// Waits, then executes (counted as a backend operation meanwhile).
    Exec,
}

impl QueueCore {
    /// Whether request `r` must wait for tokens (it is then registered to
    /// wait, as `how`); otherwise it passes, its tokens taken.
    pub(super) fn qos_holds(&mut self, env: &mut Env<'_, '_>, r: usize, how: QosWait) -> bool {
        if self.reqs[r].qos != QosWait::Unchecked {
            return false;
        }
        self.reqs[r].qos = QosWait::Passed;
        let q = &self.reqs[r];
        let (Some(plan), Some(ns), Some(ctrl)) = (q.io, q.ns.first(), &self.ctrl) else {
            return false;
        };
        if q.cmd.fuse() != nvme::command::fuse::NONE {
            return false;
        }
        let Some(caps) = ns.qos() else {
            return false;
        };
        let (read, bytes) = match plan {
            IoPlan::Read { len, .. } | IoPlan::Compare { len, .. } => (true, len as u64),
            IoPlan::Write { len, .. } => (false, len as u64),
            IoPlan::WriteZeroes { .. } => (false, 0),
            _ => return false,
        };
        // At most two (the namespace's, the host's): on the stack, copied
        // only for an I/O that waits.
        let mut it = caps.limits_for(&ctrl.hostnqn);
        let Some(first) = it.next() else {
            return false;
        };
        let mut held = [first; 2];
        let n = match it.next() {
            Some(second) => {
                held[1] = second;
                2
            }
            None => 1,
        };
        if env.qos.admit(env.now, &held[..n], read, bytes) {
            return false;
        }
        let limits: Vec<Arc<Limit>> = held[..n].iter().map(|l| Arc::clone(l)).collect();
        let mut host = [0u8; 8];
        host.copy_from_slice(&ctrl.nqn_tag[..8]);
        env.qos.wait(Waiter {
            ud: env.mem.backend_ud(self.token(r)),
            limits,
            read,
            bytes,
            since: env.now,
            blocked_on: Vec::new(),
            host: u64::from_le_bytes(host),
            tag: 0,
        });
        self.reqs[r].qos = how;
        true
    }

    /// Request `t` has its tokens: it takes its data buffer, or executes.
    pub fn qos_resume(&mut self, env: &mut Env<'_, '_>, t: Token) {
        let r = t.slot as usize;
        let Some(q) = self.reqs.get_mut(r) else {
            return;
        };
        if q.life.generation() != t.gen {
            return;
        }
        let how = std::mem::replace(&mut q.qos, QosWait::Passed);
        match how {
            QosWait::Buffer if q.life.stage() == Stage::WaitBuffer && !q.life.is_dead() => {
                self.step(env, r, Step::NeedBuffer)
            }
            QosWait::Exec => self.qos_executes(env, r),
            _ => {}
        }
    }

    /// An I/O that waited to execute does (or, its queue gone, is
    /// released).
    fn qos_executes(&mut self, env: &mut Env<'_, '_>, r: usize) {
        match self.reqs[r].life.backend_done() {
            Step::Respond if !self.live => self.complete(env, r, nvme::Status::ABORT_QUEUE, 0),
            Step::Respond => self.exec_io(env, r),
            s => self.step(env, r, s),
        }
    }

    /// The queue goes away: its waiting I/Os stop waiting (those waiting to
    /// execute are released; those waiting for a buffer hold nothing).
    pub(super) fn qos_cancel(&mut self, env: &mut Env<'_, '_>) {
        for r in 0..self.reqs.len() {
            let how = self.reqs[r].qos;
            if !matches!(how, QosWait::Buffer | QosWait::Exec) {
                continue;
            }
            env.qos.cancel(env.mem.backend_ud(self.token(r)));
            self.reqs[r].qos = QosWait::Passed;
            if how == QosWait::Exec {
                self.qos_executes(env, r);
            }
        }
    }
}
