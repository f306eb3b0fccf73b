//! A command executes: dispatch by command set; fabrics (Connect, Property
//! Get/Set, host shutdown), authentication and admin commands, parked
//! Asynchronous Event Requests.

use nvme::opcode::fctype;
use nvme::Status;
use tracing::{debug, info, warn};

use super::{Env, QueueCore};
use crate::backend::op::Op;
use crate::backend::DataRef;
use crate::command::admin::{self, AdminOutcome};
use crate::command::auth::{self, Done, Outcome};
use crate::command::fabrics;
use crate::model::controller::{Controller, PropertyEffect};
use crate::model::ns_cache::NsRef;
use crate::request::data::DataPlan;
use crate::request::lifecycle::Stage;
use crate::request::plan::IoPlan;

impl QueueCore {
    pub(super) fn execute(&mut self, env: &mut Env<'_, '_>, r: usize) {
        // In-capsule data at an offset O_DIRECT cannot use: copy it into the
        // pool buffer and give the receive back.
        if let (Some(slot), Some(b)) = (self.reqs[r].recv, self.reqs[r].buf) {
            let len = self.reqs[r].plan.len() as usize;
            let src = env
                .mem
                .capsule(slot)
                .ptr
                .wrapping_add(self.reqs[r].capsule_off as usize);
            // SAFETY: both ranges are `len` bytes inside the transport's
            // memory owned by this request (its capsule, its pool buffer).
            unsafe { std::ptr::copy_nonoverlapping(src, env.mem.buffer(&b).ptr, len) };
            self.reqs[r].recv = None;
            self.reqs[r].life.recv_returned();
            self.actions.push_back(super::Action::Repost(slot));
        }
        let cmd = self.reqs[r].cmd;
        if cmd.is_fabrics() {
            self.exec_fabrics(env, r)
        } else if self.qid() == 0 {
            self.exec_admin(env, r)
        } else {
            self.exec_io(env, r)
        }
    }

    fn exec_fabrics(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let cmd = self.reqs[r].cmd;
        if auth::is_auth(&cmd) {
            return self.exec_auth(env, r);
        }
        if cmd.fctype() == fctype::CONNECT {
            return self.exec_connect(env, r);
        }
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(env, r, Status::CMD_SEQ_ERROR, 0);
        };
        let (st, result, effect) = fabrics::property(&ctrl, &cmd);
        match effect {
            PropertyEffect::Reset => {
                debug!(cntlid = ctrl.cntlid, "controller reset");
                ctrl.kill_io_queues();
            }
            PropertyEffect::Shutdown => {
                // Flush every namespace; the answer goes once the flushes
                // completed.
                info!(cntlid = ctrl.cntlid, "controller shut down by the host");
                self.reqs[r].status = st;
                self.reqs[r].result = result;
                self.reqs[r].io = Some(IoPlan::Flush);
                self.reqs[r].op = Op::new(IoPlan::Flush);
                let ud = env.mem.backend_ud(self.token(r));
                let mut n = 0;
                for ns in ctrl.namespaces().iter() {
                    // SAFETY: a flush uses no data buffer; the request holds
                    // the namespace until the flush completed.
                    let s = unsafe {
                        self.reqs[r].op.start(
                            &*ns.backend,
                            &ns.gate,
                            DataRef::NONE,
                            &[],
                            env.exec,
                            ud,
                        )
                    };
                    if s > 0 {
                        n += s;
                        self.reqs[r].ns.push(NsRef::new(ns.clone()));
                    }
                }
                self.reqs[r].life.backend_started(n);
                if n > 0 {
                    return;
                }
                // Nothing to flush (or every flush failed to submit).
                return self.finish_io(env, r);
            }
            _ => {}
        }
        self.complete(env, r, st, result)
    }

    fn exec_connect(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let cmd = self.reqs[r].cmd;
        self.connecting = false;
        // SAFETY: the request executes; the data is copied out at once.
        let data = unsafe { self.data_mut(env, r) }.to_vec();
        let peer = self.addrs.peer;
        let (qid, sq) = (self.qid(), self.params.sq_size - 1);
        let secured = self.addrs.tls.as_deref();
        let tcp = self.params.sgl.fabric() == "tcp";
        let via = (self.addrs.local).and_then(|l| env.target.listeners.listener_at(l, tcp));
        let at = fabrics::Arrival {
            qid,
            sqsize: sq,
            peer: peer.map(|p| p.ip()),
            via,
            secured,
            now: env.now,
        };
        match fabrics::connect(env.target, &at, &cmd, &data) {
            Ok((ctrl, d)) => {
                if let Err(st) = ctrl.attach(self.link.clone()) {
                    warn!(
                        qid,
                        cntlid = ctrl.cntlid,
                        status = %st,
                        "queue not attached to its controller"
                    );
                    if qid == 0 {
                        // The controller was made for this queue: nothing
                        // else will ever detach it.
                        ctrl.subsys.remove_controller(ctrl.cntlid);
                    }
                    return self.complete(env, r, st, 0);
                }
                self.sq_fc_disabled =
                    nvme::fabrics::ConnectCommand::from_command(&cmd).sq_flow_control_disabled();
                if qid == 0 {
                    if let (Some(h), Some(l)) = (peer, self.addrs.local) {
                        ctrl.set_addrs(h, l);
                        if !env.target.listeners.assign(l, tcp, |p| ctrl.set_port(p)) {
                            // Its listener was removed since the queue
                            // came: the controller goes with it.
                            ctrl.revoke();
                        }
                    }
                    info!(message_id = %crate::base::message_ids::CONNECTED,
                          cntlid = ctrl.cntlid, host = %d.hostnqn, subsys = %d.subsysnqn,
                          peer = peer.map(tracing::field::display), kato_ms = ctrl.state().kato_ms,
                          "controller connected");
                } else {
                    debug!(cntlid = ctrl.cntlid, qid, "I/O queue connected");
                }
                env.tally
                    .queue_connected(&ctrl.subsys.nqn, qid, self.params.sgl.fabric());
                let result = ctrl.cntlid as u64 | ctrl.auth.connect_result();
                self.ctrl = Some(ctrl);
                self.pending = None;
                self.complete(env, r, Status::SUCCESS, result)
            }
            Err(e) => {
                let (sub, host) = nvme::fabrics::ConnectData::parse(&data)
                    .map(|d| (d.subsysnqn, d.hostnqn))
                    .unwrap_or_default();
                // Once a minute per peer at warn: a peer that repeats a
                // refused Connect cannot flood the log (the metric counts each).
                let loud = peer.is_none_or(|p| env.target.refusal_log.should_log(p.ip(), env.now));
                if loud {
                    warn!(qid, status = %e.status, subsys = %sub, host = %host,
                          ?peer, reason = e.reason(), "connect refused (said once a minute per peer)");
                } else {
                    debug!(qid, status = %e.status, subsys = %sub, host = %host,
                           ?peer, reason = e.reason(), "connect refused");
                }
                env.tally.reject(e.reason());
                self.complete(env, r, e.status, e.result)
            }
        }
    }

    /// Authentication Send / Receive (checked by `precheck`: a connected
    /// queue, DH-HMAC-CHAP's fields, the data the command names), on the
    /// target's authentication threads, in the peer address's turn: a
    /// transaction's exponentiations must not stall the worker, nor one
    /// peer's another's. A peer starts at most so many transactions
    /// (`command::auth::PEER_BURST`, then `PEER_PER_SECOND`) and has at most
    /// `command::auth::PEER_QUEUED` steps waiting.
    fn exec_auth(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(env, r, Status::CMD_SEQ_ERROR, 0);
        };
        let qid = self.qid();
        let send = self.reqs[r].cmd.fctype() == fctype::AUTH_SEND;
        // SAFETY: the request executes; its data is copied out at once.
        let data = unsafe { self.data_mut(env, r) }.to_vec();
        let ip = self
            .addrs
            .peer
            .map_or(crate::model::unproven::NO_ADDRESS, |p| p.ip());
        if send && auth::starts_transaction(&data) && !env.target.auth_rate.admit(ip, env.now) {
            if env.target.refusal_log.should_log(ip, env.now) {
                warn!(cntlid = ctrl.cntlid, qid, peer = %ip, "authentication transactions from this address beyond its rate: answered Command Interrupted (said once a minute per peer)");
            }
            env.tally.reject("auth_rate");
            let st = ctrl.retry_delay(Status::COMMAND_INTERRUPTED.with_crd(1));
            return self.complete(env, r, st, 0);
        }
        let plan = IoPlan::Auth { send };
        self.reqs[r].io = Some(plan);
        self.reqs[r].op = Op::new(plan);
        let ud = env.mem.backend_ud(self.token(r));
        let job = auth::Step::new(self.auth.shared(), env.target, &ctrl, qid, send, data);
        let pool = env.target.auth_pool.clone();
        if let Err(full) = env.exec.fair(&pool, ip, ud, Box::new(job)) {
            // The authentication threads have their bound of this address's
            // (or everyone's) steps waiting: the host tries again later.
            if env.target.refusal_log.should_log(ip, env.now) {
                warn!(cntlid = ctrl.cntlid, qid, peer = %ip, "authentication steps waiting beyond their bound ({}): answered Command Interrupted (said once a minute per peer)", full.reason());
            }
            env.tally.reject(full.reason());
            let st = ctrl.retry_delay(Status::COMMAND_INTERRUPTED.with_crd(1));
            return self.complete(env, r, st, 0);
        }
        self.reqs[r].life.backend_started(1);
    }

    /// An authentication command came back from the lane with `res`.
    pub(super) fn auth_done(&mut self, env: &mut Env<'_, '_>, r: usize, send: bool, res: i32) {
        self.auth.refresh();
        let (status, outcome) = match Done::from_result(res, send) {
            Done::Sent(o) => (Status::SUCCESS, o),
            Done::Received(n, o) => {
                let reply = self.auth.take_reply();
                // SAFETY: the request's operation completed; nothing else
                // uses its data.
                let buf = unsafe { self.data_mut(env, r) };
                let n = (n as usize).min(reply.len()).min(buf.len());
                buf[..n].copy_from_slice(&reply[..n]);
                self.reqs[r].out_len = n as u32;
                (Status::SUCCESS, o)
            }
            Done::Refused(st) => (st, Outcome::Continue),
        };
        if outcome == Outcome::Failed {
            // The association ends once this response (with a Failure1's
            // data) was delivered: ended at once, the host would get nothing.
            self.end_after_send = Some(r);
        }
        self.reqs[r].status = status;
    }

    fn exec_admin(&mut self, env: &mut Env<'_, '_>, r: usize) {
        let Some(ctrl) = self.ctrl.clone() else {
            return self.complete(env, r, Status::CMD_SEQ_ERROR, 0);
        };
        let cmd = self.reqs[r].cmd;
        // SAFETY: the request executes; admin::execute is the only user of
        // its data until it returns.
        let buf = unsafe { self.data_mut(env, r) };
        let len = buf.len() as u32;
        let to_host = matches!(self.reqs[r].plan, DataPlan::ToHost { .. });
        if to_host {
            // Data to the host starts as zeroes, whatever a command leaves
            // unwritten: the pool buffer last held another request's data.
            buf.fill(0);
        }
        match admin::execute(env.target, &ctrl, &cmd, buf, env.now) {
            AdminOutcome::Done {
                status,
                result,
                data_len,
            } => {
                if to_host {
                    self.reqs[r].out_len = data_len.min(len);
                }
                self.complete(env, r, status, result)
            }
            AdminOutcome::Parked => self.complete_aers(env, &ctrl),
            AdminOutcome::Blocking { ns, job } => {
                // On the namespace's lane; the status comes back as the
                // operation's result, as a blocking reservation command's.
                let plan = IoPlan::Resv {
                    opcode: cmd.opcode(),
                    len: 0,
                };
                self.reqs[r].io = Some(plan);
                self.reqs[r].op = Op::new(plan);
                self.reqs[r].ns.push(NsRef::new(ns.clone()));
                let ud = env.mem.backend_ud(self.token(r));
                env.exec.blocking(Some(&ns.lane), ud, job);
                self.reqs[r].life.backend_started(1);
            }
        }
    }

    /// Answers parked Asynchronous Event Requests that have an event now.
    pub(super) fn complete_aers(&mut self, env: &mut Env<'_, '_>, ctrl: &Controller) {
        let ready = ctrl.state().match_events();
        for (cid, result) in ready {
            if let Some(r) = (0..self.reqs.len()).find(|&i| {
                let q = &self.reqs[i];
                q.life.stage() == Stage::Executing
                    && q.life.backend_in_flight() == 0
                    && q.cmd.cid() == cid
                    && q.cmd.opcode() == nvme::opcode::admin::ASYNC_EVENT_REQUEST
            }) {
                self.complete(env, r, Status::SUCCESS, result as u64);
            }
        }
    }
}
