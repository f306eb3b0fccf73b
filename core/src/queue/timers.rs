//! A queue's timers (a stop asked by its controller, the Connect and
//! authentication timeouts, keep-alive, probing a quiet host, parked AERs),
//! its end (disconnect, a fatal transport error, the transport gone) and
//! its teardown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::{Action, Env, QueueCore};
use crate::counters::Tally;
use crate::queue::liveness::{FETCH_STALL, PROBE_TIMEOUT, SEND_STALL};

/// A queue that has not sent a valid Fabrics Connect within this long after
/// it was accepted is disconnected (it holds resources for nothing).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the first command of a fused pair waits for its second (a host
/// sends the two back to back) before it is answered Command Aborted due
/// to Missing Fused Command: until then it holds its slot and its data.
pub const FUSED_WAIT: Duration = Duration::from_secs(2);

impl QueueCore {
    /// Runs the queue's timers at `env.now` (the transport calls it every
    /// few hundred milliseconds, and when the queue's link was woken).
    pub fn timer(&mut self, env: &mut Env<'_, '_>) {
        if !self.live {
            return;
        }
        let now = env.now;
        if self.link.killed() {
            if env.target.stopping.load(Ordering::Acquire) {
                return self.disconnect(env, "target shutting down", "shutdown");
            }
            return self.disconnect(env, "asked to disconnect", "controller");
        }
        let Some(c) = self.ctrl.clone() else {
            if self.pending.as_ref().is_some_and(|p| p.evicted()) {
                debug!(qid = self.qid(), peer = ?self.addrs.peer,
                       "lost its place among the queues not yet connected to a newer one; disconnecting");
                return self.disconnect(env, "evicted before its Connect", "pending_evicted");
            }
            if now.saturating_duration_since(self.liveness.accepted()) > CONNECT_TIMEOUT {
                warn!(
                    qid = self.qid(),
                    peer = ?self.addrs.peer,
                    "no Fabrics Connect within {CONNECT_TIMEOUT:?}; disconnecting"
                );
                env.tally.reject("connect_timeout");
                self.disconnect(env, "no connect", "connect_timeout");
            }
            return;
        };
        // A namespace removed or hidden since the queue found it closes
        // once its commands ended, though the queue sends nothing more.
        c.subsys.expire(&mut self.ns_cache);
        // A queue whose responses or fetches do not move holds data
        // buffers other hosts need.
        let stalled = if self.liveness.sends_stalled(now) {
            Some((
                format!(
                    "no response delivered for {} s: the host takes none",
                    SEND_STALL.as_secs()
                ),
                "responses stalled",
                "send_stalled",
            ))
        } else if self.liveness.fetches_stalled(now) {
            Some((
                format!(
                    "none of the data asked of the host came for {} s",
                    FETCH_STALL.as_secs()
                ),
                "host data stalled",
                "fetch_stalled",
            ))
        } else {
            None
        };
        if let Some((what, why, label)) = stalled {
            let loud = self
                .addrs
                .peer
                .is_none_or(|p| env.target.refusal_log.should_log(p.ip(), now));
            if loud {
                warn!(cntlid = c.cntlid, qid = self.qid(), host = %c.hostnqn, subsys = %c.subsys.nqn,
                      peer = ?self.addrs.peer, "{what}; ending the association (said once a minute per peer)");
            }
            c.kill_all();
            return self.disconnect(env, why, label);
        }
        self.expire_fused(env);
        if self.auth.rekey_missed(&c, now) {
            warn!(cntlid = c.cntlid, qid = self.qid(), host = %c.hostnqn, subsys = %c.subsys.nqn,
                  "the host's key was rotated and this queue did not authenticate again with the new one \
                   within [target] key_rotation_grace_ms; ending the association");
            env.tally.reject("key_rotation_missed");
            c.revoke();
            return self.disconnect(env, "key rotated, not authenticated again", "key_rotated");
        }
        if self.auth.overdue(&c, self.liveness.accepted(), now) {
            warn!(cntlid = c.cntlid, qid = self.qid(), host = %c.hostnqn, subsys = %c.subsys.nqn,
                  "not authenticated within {:?}; ending the association", crate::command::auth::AUTH_TIMEOUT);
            env.tally.reject("auth_timeout");
            c.kill_all();
            return self.disconnect(env, "authentication timeout", "auth_timeout");
        }
        if self.qid() != 0 {
            return;
        }
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
            env.tally.keep_alive_expired(&c.subsys.nqn);
            c.kill_all();
            return self.disconnect(env, "keep-alive timeout", "keep_alive");
        }
        // Without keep-alive, or with one longer than the target waits out,
        // a quiet host is probed by the transport; a probe that fails fails
        // the queue (and the controller with it).
        let kato = c.state().kato_ms;
        if self.liveness.probe_overdue(now) {
            warn!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn,
                  "host unreachable: the liveness probe went unanswered for {} s \
                   (keep-alive off); tearing the controller down",
                  PROBE_TIMEOUT.as_secs());
            c.kill_all();
            return self.disconnect(env, "liveness probe unanswered", "probe_timeout");
        }
        if self.liveness.probe_due(now, kato, env.max_keep_alive_ms) {
            debug!(cntlid = c.cntlid, host = %c.hostnqn, kato_ms = kato,
                   "no keep-alive (or one beyond [target] max_keep_alive_ms) and quiet: probing the host");
            self.actions.push_back(Action::Probe);
            self.liveness.probe_sent(now);
        }
        self.complete_aers(env, &c);
    }

    /// Starts disconnecting (the transport closes the connection:
    /// [`Action::Close`]); `label` is the reason as counted in metrics.
    /// Requests with nothing in flight are released at once, the others
    /// when what they wait for completed; none responds any more.
    pub fn disconnect(&mut self, env: &mut Env<'_, '_>, why: &str, label: &'static str) {
        if !self.live {
            return;
        }
        debug!(qid = self.qid(), why, "disconnecting queue");
        self.live = false;
        self.reason = label;
        self.actions.push_back(Action::Close);
        if self.qid() == 0 {
            if let Some(c) = &self.ctrl {
                c.kill_all();
            }
        }
        for r in 0..self.reqs.len() {
            let s = self.reqs[r].life.disconnect();
            self.step(env, r, s);
        }
        self.qos_cancel(env);
    }

    /// A fatal transport error: the controller fails with it.
    pub fn fail(&mut self, env: &mut Env<'_, '_>) {
        if let Some(c) = &self.ctrl {
            c.state().failed = true;
            c.kill_all();
        }
        self.disconnect(env, "transport error", "error");
    }

    /// The transport's connection is gone for good: what it had in flight
    /// will not complete any more (and no longer touches memory). Backend
    /// operations still must.
    pub fn transport_gone(&mut self, env: &mut Env<'_, '_>) {
        self.disconnect(env, "transport gone", "error");
        for r in 0..self.reqs.len() {
            let s = self.reqs[r].life.qp_destroyed();
            self.step(env, r, s);
        }
    }

    /// Detaches from the controller and updates the gauges (the queue is
    /// about to be dropped).
    pub fn teardown(&mut self, tally: &mut Tally) {
        let Some(c) = self.ctrl.take() else { return };
        c.detach(&self.link);
        let reason = match self.reason {
            "" => "host",
            r => r,
        };
        tally.queue_left(&c.subsys.nqn, self.qid(), self.params.sgl.fabric(), reason);
        if self.qid() == 0 {
            c.kill_all();
            c.auth.release_place();
            c.subsys.remove_controller(c.cntlid);
            info!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn, reason, "controller disconnected");
        }
    }
}
