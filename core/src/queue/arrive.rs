//! A capsule arrives: flow control, the command's data plan, and the checks
//! that must pass before any data moves.

use std::sync::atomic::Ordering;

use nvme::opcode::fctype;
use nvme::{Command, Status, SQE_SIZE};
use tracing::error;

use super::{Action, Env, QueueCore, Req};
use crate::command::admin;
use crate::command::io;
use crate::model::target::Target;
use crate::request::data::{self, DataPlan};
use crate::{MAX_IO_SIZE, PAGE};

impl QueueCore {
    /// A capsule of `byte_len` bytes arrived in receive slot `slot`; `sqe`
    /// is its command (at least [`SQE_SIZE`] bytes when the capsule is that
    /// long). The receive is the core's until it says [`Action::Repost`].
    pub fn capsule(&mut self, env: &mut Env<'_, '_>, slot: u32, sqe: &[u8], byte_len: u32) {
        if !self.live {
            return self.actions.push_back(Action::Repost(slot));
        }
        let now = env.now;
        self.liveness.heard(now);
        if (byte_len as usize) < SQE_SIZE || sqe.len() < SQE_SIZE {
            error!(
                qid = self.qid(),
                byte_len, "capsule shorter than a command; disconnecting"
            );
            self.actions.push_back(Action::Repost(slot));
            return self.fail(env);
        }
        let cmd = match Command::parse(&sqe[..SQE_SIZE]) {
            Ok(c) => c,
            Err(_) => {
                self.actions.push_back(Action::Repost(slot));
                return self.fail(env);
            }
        };
        self.sq_head = (self.sq_head + 1) % self.params.sq_size;
        // A host has at most its queue's size of commands outstanding (the
        // shared receive queue is sized for that much per queue). A request
        // slot is held a little longer, until its response was delivered,
        // so slots alone would let a host that ignores flow control take
        // twice its share of the shared receives.
        if self.unanswered >= self.params.sq_size {
            error!(
                qid = self.qid(),
                sq_size = self.params.sq_size,
                "more commands outstanding than the queue holds; disconnecting"
            );
            self.actions.push_back(Action::Repost(slot));
            return self.fail(env);
        }
        let Some(r) = self.free.pop() else {
            error!(
                qid = self.qid(),
                "more commands than the queue holds; disconnecting"
            );
            self.actions.push_back(Action::Repost(slot));
            return self.fail(env);
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
        let target = env.target;
        if self.qid() != 0 && !cmd.is_fabrics() {
            target.io_in_flight.add(env.worker, 1, Ordering::SeqCst);
            target.io_started.bump(env.worker, 1);
            if target.stopping.load(Ordering::SeqCst) {
                // Shutting down: hold the command unanswered (parked). The
                // queue is disconnected once in-flight I/O drained; the host
                // then requeues it and resends it after reconnecting. A status
                // would not do: without a retry delay the host spends its
                // retries at once.
                target.io_in_flight.add(env.worker, -1, Ordering::SeqCst);
                self.reqs[r].life.arrive(false, false, false);
                return self.actions.push_back(Action::Repost(slot));
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
            data::data_plan(
                &cmd,
                byte_len - SQE_SIZE as u32,
                MAX_IO_SIZE,
                self.params.sgl,
            )
        } else {
            Err(Status::INVALID_OPCODE)
        };
        let checked = planned.and_then(|(plan, inv)| {
            self.reqs[r].plan = plan;
            self.reqs[r].inv = inv;
            self.precheck(target, r)
        });
        let checked = self.pair_fused(env, r, checked);
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
            self.actions.push_back(Action::Repost(slot));
            self.reqs[r].life.arrive(false, false, false);
            return self.complete(env, r, st, 0);
        }
        let step = match self.reqs[r].plan {
            DataPlan::InCapsule { offset, .. } => {
                if cmd.opcode() == nvme::opcode::io::WRITE && self.qid() != 0 {
                    env.tally.in_capsule_write();
                }
                self.reqs[r].recv = Some(slot);
                self.reqs[r].capsule_off = offset;
                // Misaligned for O_DIRECT: copied into a pool buffer first.
                let aligned = (offset as usize).is_multiple_of(PAGE);
                self.reqs[r].life.arrive(!aligned, false, true)
            }
            DataPlan::FromHost { .. } => {
                self.actions.push_back(Action::Repost(slot));
                self.reqs[r].life.arrive(true, true, false)
            }
            DataPlan::ToHost { .. } => {
                self.actions.push_back(Action::Repost(slot));
                self.reqs[r].life.arrive(true, false, false)
            }
            DataPlan::None => {
                self.actions.push_back(Action::Repost(slot));
                self.reqs[r].life.arrive(false, false, false)
            }
        };
        self.step(env, r, step)
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
            return admin::check_transfer(&cmd, self.reqs[r].plan.len());
        }
        if !ctrl.is_ready() {
            return Err(Status::CMD_SEQ_ERROR);
        }
        let ns = ctrl.namespace_cached(cmd.nsid(), &mut self.ns_cache);
        if let Some(n) = &ns {
            // The namespace's ANA group at the listener this host came
            // through: inaccessible there, the host is to take another path.
            if let Some(st) = target.ana.state(ctrl.port(), n.ana_group).refusal() {
                return Err(st);
            }
        }
        let plan = io::prepare(
            ns.as_deref().map(|n| &**n),
            &cmd,
            self.reqs[r].plan.len(),
            MAX_IO_SIZE,
        )?;
        if let (Some(n), Some(access)) = (&ns, crate::reservation::access_of(&plan)) {
            crate::command::reservation::admit(n, ctrl, access)?;
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
}
