//! Authentication Send / Receive: in-band authentication (DH-HMAC-CHAP) of
//! every queue of a host that has a key (`[[host]] dhchap_key`). The
//! protocol is the `dhchap` crate's; this is the command set's side: which
//! commands a queue takes before it authenticated, the command fields, the
//! hosts' keys as the configuration has them now, and what a queue's
//! authentication tells the controller.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dhchap::controller::{Event, Names, Transaction};
use nvme::auth::{auth_id, auth_type, reason, AuthCommand};
use nvme::opcode::fctype;
use nvme::{Command, Status};
use tracing::{debug, info, warn};

use crate::backend::exec::{Job, JobKind};
use crate::counters::meter;
use crate::model::controller::Controller;
use crate::model::target::Target;

/// A queue whose host must authenticate and has not done so this long after
/// the queue was accepted is disconnected (it holds a controller otherwise).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The most data one Authentication Send or Receive moves: the largest
/// message (a Reply with SHA-512 and ffdhe8192) is 1168 bytes, and Linux
/// hosts receive into 4 KiB.
pub const MAX_DATA: u32 = 4096;
/// Transactions a queue may start before it authenticated: each costs the
/// worker a Diffie-Hellman exponentiation or two, and a peer that only
/// knows a host NQN must not get them without end.
pub const MAX_ATTEMPTS: u8 = 3;

pub use crate::model::auth::{PEER_BURST, PEER_PER_SECOND, PEER_QUEUED, QUEUED};

/// A queue's transaction, where the authentication lane runs it.
#[derive(Default)]
pub struct AuthState {
    tx: Transaction,
    /// The key epoch its transaction started in.
    tx_epoch: u64,
    /// The key epoch of its last successful transaction.
    authed_epoch: u64,
    /// Transactions started while not authenticated.
    attempts: u8,
    /// The message of the last Authentication Receive, until the worker
    /// copies it to the host's buffer.
    reply: Vec<u8>,
}

/// An authentication command as the executor's named job, run on the
/// target's authentication pool: an Authentication Send of `data`, or
/// (`send` false) a Receive into `data` (the allocation length's room),
/// whose message is kept as the reply. Its result is [`Done::to_result`].
pub struct Step {
    state: Arc<Mutex<AuthState>>,
    target: Arc<Target>,
    ctrl: Arc<Controller>,
    qid: u16,
    send: bool,
    data: Vec<u8>,
}

impl Step {
    /// Queue `qid`'s command (of `ctrl`) on its transaction `state`.
    pub fn new(
        state: Arc<Mutex<AuthState>>,
        target: &Arc<Target>,
        ctrl: &Arc<Controller>,
        qid: u16,
        send: bool,
        data: Vec<u8>,
    ) -> Step {
        Step {
            state,
            target: target.clone(),
            ctrl: ctrl.clone(),
            qid,
            send,
            data,
        }
    }

    fn done(mut self) -> Done {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.send {
            return Done::Sent(send(
                &mut st,
                &self.target,
                &self.ctrl,
                self.qid,
                &self.data,
            ));
        }
        match receive(&mut st, &self.target, &self.ctrl, self.qid, &mut self.data) {
            Ok((n, o)) => {
                self.data.truncate(n as usize);
                st.reply = std::mem::take(&mut self.data);
                Done::Received(n, o)
            }
            Err(status) => Done::Refused(status),
        }
    }
}

impl Job for Step {
    fn kind(&self) -> JobKind {
        JobKind::Authentication
    }

    fn run(self: Box<Self>) -> i32 {
        (*self).done().to_result()
    }
}

/// One queue's authentication: its transaction runs off the worker, on the
/// target's authentication lane (the exponentiations of a transaction
/// must not stall the other queues a worker serves).
#[derive(Default)]
pub struct QueueAuth {
    state: Arc<Mutex<AuthState>>,
    /// It authenticated, as of its last authentication command.
    authenticated: bool,
    /// The key epoch it last authenticated in.
    epoch: u64,
}

/// What an authentication command run on the lane did: the result it posts
/// to the worker's mailbox ([`Done::to_result`], [`Done::from_result`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// An Authentication Send.
    Sent(Outcome),
    /// An Authentication Receive that wrote this many bytes (in the
    /// queue's reply, [`QueueAuth::take_reply`]).
    Received(u32, Outcome),
    /// Refused with this status.
    Refused(Status),
}

const FAILED_BIT: i32 = 1 << 20;

impl Done {
    /// As an operation's result.
    pub fn to_result(self) -> i32 {
        let failed = |o| if o == Outcome::Failed { FAILED_BIT } else { 0 };
        match self {
            Done::Sent(o) => failed(o),
            Done::Received(n, o) => n as i32 | failed(o),
            Done::Refused(st) => -(st.to_field() as i32) - 1,
        }
    }

    /// Back from an operation's result (`send`: of an Authentication Send).
    pub fn from_result(res: i32, send: bool) -> Done {
        if res < 0 {
            return match u16::try_from(-(res + 1)) {
                Ok(f) => Done::Refused(Status::from_field(f)),
                Err(_) => Done::Refused(Status::INTERNAL),
            };
        }
        let o = if res & FAILED_BIT != 0 {
            Outcome::Failed
        } else {
            Outcome::Continue
        };
        if send {
            Done::Sent(o)
        } else {
            Done::Received((res & (FAILED_BIT - 1)) as u32, o)
        }
    }
}

/// What an authentication command means for the association.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing changes yet.
    Continue,
    /// Authentication failed: once this command's response is out, the
    /// association ends (every queue of the controller, as nvmet).
    Failed,
}

impl QueueAuth {
    /// Whether the queue may run commands other than authentication on
    /// `ctrl`: it authenticated, or the controller does not require it.
    pub fn cleared(&self, ctrl: &Controller) -> bool {
        !ctrl.auth.required() || self.authenticated
    }

    /// The transaction, for the lane.
    pub fn shared(&self) -> Arc<Mutex<AuthState>> {
        self.state.clone()
    }

    /// The message the last Authentication Receive produced.
    pub fn take_reply(&self) -> Vec<u8> {
        std::mem::take(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()).reply)
    }

    /// An authentication command finished: takes the transaction's state.
    pub fn refresh(&mut self) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.authenticated = st.tx.authenticated().is_some();
        self.epoch = st.authed_epoch;
    }

    /// Its host's key was rotated and the grace to authenticate again with
    /// the new one ran out at `now` without this queue doing so.
    pub fn rekey_missed(&self, ctrl: &Controller, now: Instant) -> bool {
        ctrl.auth
            .rekey_due()
            .is_some_and(|(epoch, deadline)| self.epoch < epoch && now >= deadline)
    }

    /// The queue was accepted at `accepted` and must have authenticated by
    /// now, and has not.
    pub fn overdue(&self, ctrl: &Controller, accepted: Instant, now: Instant) -> bool {
        !self.cleared(ctrl) && now.saturating_duration_since(accepted) > AUTH_TIMEOUT
    }
}

/// Checks of an Authentication Send / Receive before its data moves:
/// DH-HMAC-CHAP's fields, and a transfer of exactly the length the command
/// names (as nvmet), at most [`MAX_DATA`].
pub fn precheck(cmd: &Command, data_len: u32) -> Result<(), Status> {
    let a = AuthCommand::from_command(cmd);
    if a.invalid_field().is_some() {
        return Err(Status::INVALID_FIELD);
    }
    if data_len != a.len || a.len > MAX_DATA {
        return Err(Status::SGL_INVALID_DATA);
    }
    Ok(())
}

/// Whether the data of an Authentication Send starts a transaction (a
/// Negotiate).
pub fn starts_transaction(data: &[u8]) -> bool {
    data.len() >= 2 && data[..2] == [auth_type::COMMON, auth_id::NEGOTIATE]
}

/// Whether a fabrics command type is one of authentication's.
pub fn is_auth(cmd: &Command) -> bool {
    cmd.is_fabrics() && matches!(cmd.fctype(), fctype::AUTH_SEND | fctype::AUTH_RECEIVE)
}

fn names(ctrl: &Controller) -> Names<'_> {
    Names {
        hostnqn: &ctrl.hostnqn,
        subnqn: &ctrl.subsys.nqn,
    }
}

fn outcome(q: &AuthState, target: &Target, ctrl: &Controller, qid: u16, ev: Event) -> Outcome {
    let m = meter();
    match ev {
        Event::None => Outcome::Continue,
        Event::Authenticated => {
            let a = q.tx.authenticated();
            if let (0, Some(a)) = (qid, a) {
                // Proven, the controller takes one of its host's places.
                let max = target.max_controllers_per_host.load(Ordering::Relaxed);
                if let Err(st) = ctrl.subsys.prove(ctrl, max) {
                    warn!(cntlid = ctrl.cntlid, host = %ctrl.hostnqn, subsys = %ctrl.subsys.nqn,
                          status = %st, max_controllers_per_host = max,
                          "host authenticated, but has all its controllers already (or this one was displaced); ending the association");
                    m.authentication(&ctrl.subsys.nqn, "no_place");
                    return Outcome::Failed;
                }
                for c in crate::model::hostid::take_from_unproven(target, ctrl) {
                    warn!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn,
                          owner = %ctrl.hostnqn,
                          "a controller used the host identifier of a host that authenticated, under another host NQN; disconnected");
                    meter().rejected("hostid_taken_by_authenticated_host");
                }
                ctrl.auth.record(a);
                info!(cntlid = ctrl.cntlid, host = %ctrl.hostnqn, subsys = %ctrl.subsys.nqn,
                      hash = %a.hash, dhgroup = %a.group, bidirectional = a.bidirectional,
                      "host authenticated");
            } else {
                debug!(cntlid = ctrl.cntlid, qid, "queue authenticated");
            }
            m.authentication(&ctrl.subsys.nqn, "success");
            Outcome::Continue
        }
        Event::Failed(why) => {
            warn!(message_id = %crate::base::message_ids::AUTH_FAILED,
                  cntlid = ctrl.cntlid, qid, host = %ctrl.hostnqn, subsys = %ctrl.subsys.nqn,
                  reason = reason::name(why), "authentication failed; ending the association");
            m.authentication(&ctrl.subsys.nqn, reason::name(why));
            Outcome::Failed
        }
    }
}

/// Authentication Send with its data.
pub fn send(
    q: &mut AuthState,
    target: &Target,
    ctrl: &Controller,
    qid: u16,
    data: &[u8],
) -> Outcome {
    if starts_transaction(data) && q.tx.authenticated().is_none() {
        q.attempts = q.attempts.saturating_add(1);
        if q.attempts > MAX_ATTEMPTS {
            warn!(message_id = %crate::base::message_ids::AUTH_FAILED,
                  cntlid = ctrl.cntlid, qid, host = %ctrl.hostnqn, subsys = %ctrl.subsys.nqn,
                  "{MAX_ATTEMPTS} authentication transactions did not authenticate the queue; ending the association");
            meter().authentication(&ctrl.subsys.nqn, "too_many_attempts");
            return Outcome::Failed;
        }
    }
    let creds = &target.credentials;
    if starts_transaction(data) {
        // Before the keys are read: a key changed after this is a change
        // this transaction did not see.
        q.tx_epoch = creds.epoch();
    }
    let ev = q.tx.send(data, names(ctrl), || creds.policy(&ctrl.hostnqn));
    if matches!(ev, Event::Authenticated) {
        q.authed_epoch = q.tx_epoch;
    }
    outcome(q, target, ctrl, qid, ev)
}

/// Authentication Receive into `buf` (the allocation length's bytes): the
/// bytes of the message written, or the status when `buf` cannot hold it.
pub fn receive(
    q: &mut AuthState,
    target: &Target,
    ctrl: &Controller,
    qid: u16,
    buf: &mut [u8],
) -> Result<(u32, Outcome), Status> {
    match q.tx.receive(buf.len(), names(ctrl)) {
        Ok((msg, ev)) => {
            if matches!(ev, Event::Authenticated) {
                q.authed_epoch = q.tx_epoch;
            }
            buf[..msg.len()].copy_from_slice(&msg);
            Ok((msg.len() as u32, outcome(q, target, ctrl, qid, ev)))
        }
        Err(t) => {
            debug!(
                cntlid = ctrl.cntlid,
                qid,
                al = buf.len(),
                need = t.need,
                "authentication receive too small for its message"
            );
            Err(Status::INVALID_FIELD)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::fabrics;
    use crate::model::auth::HostConfig;
    use crate::model::auth::CONNECT_ATR;
    use crate::model::subsystem::{Subsystem, SubsystemKind};
    use dhchap::{host, GroupId, HashId, Secret};
    use nvme::fabrics::{ConnectCommand, ConnectData};
    use std::sync::Arc;

    const SUB: &str = "nqn.2026-11.io.test:auth";
    const HOST: &str = "nqn.2026-11.io.test:keyed";
    const PLAIN: &str = "nqn.2026-11.io.test:plain";

    fn key() -> Secret {
        Secret::new(Some(HashId::Sha256), &[5; 32]).unwrap()
    }

    fn target() -> Target {
        let s = Arc::new(Subsystem::new(
            SUB.into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "m".into(),
            vec![],
        ));
        let t = Target::new(vec![s], vec![], 0);
        t.credentials.set(&[
            HostConfig {
                nqn: HOST.into(),
                dhchap_key: Some(key()),
                dhchap_ctrl_key: None,
                dhchap_hash: HashId::Sha384,
                dhchap_dhgroup: GroupId::Null,
                tls_key: None,
                tls_derivation: tlspsk::Derivation::Compat,
            },
            HostConfig {
                nqn: PLAIN.into(),
                dhchap_key: None,
                dhchap_ctrl_key: None,
                dhchap_hash: HashId::Sha256,
                dhchap_dhgroup: GroupId::Null,
                tls_key: None,
                tls_derivation: tlspsk::Derivation::Compat,
            },
        ]);
        t
    }

    fn admin(t: &Target, host: &str, subnqn: &str) -> Arc<Controller> {
        connect_admin(t, host, subnqn, None).unwrap()
    }

    fn admin_from(
        t: &Target,
        host: &str,
        peer: &str,
    ) -> Result<Arc<Controller>, fabrics::ConnectError> {
        connect_admin(t, host, SUB, Some(peer.parse().unwrap()))
    }

    /// An admin Connect of `host` (its host ID derived from its NQN) from `peer`.
    fn connect_admin(
        t: &Target,
        host: &str,
        subnqn: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Arc<Controller>, fabrics::ConnectError> {
        let c = ConnectCommand {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .to_command(1);
        let d = ConnectData {
            hostid: crate::reservation::state::nqn_tag(host),
            cntlid: 0xFFFF,
            subsysnqn: subnqn.into(),
            hostnqn: host.into(),
        }
        .encode();
        fabrics::connect(t, &fabrics::Arrival::plain(0, 31, peer), &c, &d).map(|x| x.0)
    }

    /// Runs a whole transaction with the right key on `ctrl`'s admin queue.
    fn authenticate(t: &Target, ctrl: &Controller) -> Outcome {
        let mut q = AuthState::default();
        let mut h = host::Transaction::new(key(), None, HOST, SUB, 7);
        let mut buf = vec![0u8; 4096];
        let mut o = vec![send(&mut q, t, ctrl, 0, &h.negotiate())];
        let (n, x) = receive(&mut q, t, ctrl, 0, &mut buf).unwrap();
        o.push(x);
        let reply = h.challenge(&buf[..n as usize]).unwrap();
        o.push(send(&mut q, t, ctrl, 0, &reply));
        let (n, x) = receive(&mut q, t, ctrl, 0, &mut buf).unwrap();
        o.push(x);
        assert_eq!(h.success1(&buf[..n as usize]), Ok(None));
        if o.contains(&Outcome::Failed) {
            Outcome::Failed
        } else {
            Outcome::Continue
        }
    }

    /// Issue 38, 1: a peer that only knows a keyed host's NQN opens the
    /// host's 16 controllers' worth of admin queues, and never
    /// authenticates them; the host's own Connect must still succeed.
    #[test]
    fn unauthenticated_controllers_take_none_of_the_hosts_places() {
        let t = target();
        let mut held = Vec::new();
        for i in 0..16 {
            let peer = format!("10.0.0.{}", 100 + i / 8);
            held.push(admin_from(&t, HOST, &peer).expect("within the unproven caps"));
        }
        // The ninth from one address is over its share.
        let e = admin_from(&t, HOST, "10.0.0.100").unwrap_err();
        assert_eq!(e.status, Status::CONNECT_CTRL_BUSY);
        assert_eq!(e.reason(), "unauthenticated_per_peer");
        assert_eq!(t.unproven.counts("10.0.0.100".parse().unwrap()), (8, 16));
        // The real host connects and authenticates.
        let real = admin_from(&t, HOST, "10.0.0.1").expect("not locked out");
        assert!(!real.auth.proven());
        assert_eq!(authenticate(&t, &real), Outcome::Continue);
        assert!(real.auth.proven());
        assert_eq!(t.unproven.counts("10.0.0.1".parse().unwrap()), (0, 16));
        // A host without a key is capped as before.
        for _ in 0..16 {
            admin_from(&t, PLAIN, "10.0.0.2").unwrap();
        }
        assert_eq!(
            admin_from(&t, PLAIN, "10.0.0.2").unwrap_err().reason(),
            "controller_busy"
        );
        drop(held);
    }

    /// At the total cap, a newcomer displaces the oldest unproven controller
    /// of the peer holding the most; a proven host's places stay capped.
    #[test]
    fn the_unproven_total_gives_way_and_proven_places_stay_capped() {
        let t = target();
        t.unproven.set_caps(3, 4);
        t.max_controllers_per_host.store(2, Ordering::Relaxed);
        let a: Vec<_> = (0..3)
            .map(|_| admin_from(&t, HOST, "10.0.0.100").unwrap())
            .collect();
        let b = admin_from(&t, HOST, "10.0.0.101").unwrap();
        let real = admin_from(&t, HOST, "10.0.0.1").expect("displaces one of 10.0.0.100's");
        assert!(a[0].is_revoked() && !a[1].is_revoked() && !b.is_revoked());
        // The displaced controller can no longer prove itself.
        assert_eq!(authenticate(&t, &a[0]), Outcome::Failed);
        assert_eq!(authenticate(&t, &real), Outcome::Continue);
        assert_eq!(authenticate(&t, &b), Outcome::Continue);
        // Two proven: a third that authenticates finds no place.
        assert_eq!(authenticate(&t, &a[1]), Outcome::Failed);
        assert!(!a[1].auth.proven());
        // The place freed, a controller proves itself again.
        real.subsys.remove_controller(real.cntlid);
        assert_eq!(authenticate(&t, &a[2]), Outcome::Continue);
    }

    fn hosts(keyed: Option<Secret>, plain: Option<Secret>) -> Vec<HostConfig> {
        vec![
            HostConfig {
                nqn: HOST.into(),
                dhchap_key: keyed,
                dhchap_ctrl_key: None,
                dhchap_hash: HashId::Sha384,
                dhchap_dhgroup: GroupId::Null,
                tls_key: None,
                tls_derivation: tlspsk::Derivation::Compat,
            },
            HostConfig {
                nqn: PLAIN.into(),
                dhchap_key: plain,
                dhchap_ctrl_key: None,
                dhchap_hash: HashId::Sha256,
                dhchap_dhgroup: GroupId::Null,
                tls_key: None,
                tls_derivation: tlspsk::Derivation::Compat,
            },
        ]
    }

    /// Issue 38, 7: a key added or removed applies at once: the
    /// controllers that authenticated with another key, or none, go; a key
    /// rotated (issue 57, 9) leaves its authenticated controllers the grace
    /// to authenticate again.
    #[test]
    fn a_key_change_disconnects_the_hosts_controllers() {
        let t = target();
        let now = std::time::Instant::now();
        let keyed = admin(&t, HOST, SUB);
        assert_eq!(authenticate(&t, &keyed), Outcome::Continue);
        let plain = admin(&t, PLAIN, SUB);
        let disc = admin(&t, PLAIN, nvme::DISCOVERY_NQN);
        // The same keys again: nothing changes.
        let k = t.set_credentials(&hosts(Some(key()), None), now);
        assert!(k.hosts.is_empty() && k.gone.is_empty());
        // A key for the host that had none: its controller was exempt.
        let k2 = Secret::new(Some(HashId::Sha256), &[9; 32]).unwrap();
        let k = t.set_credentials(&hosts(Some(key()), Some(k2.clone())), now);
        assert_eq!(k.hosts, vec![PLAIN.to_string()]);
        assert_eq!((k.gone.len(), k.rekeying.len()), (1, 0));
        assert!(plain.is_revoked() && !keyed.is_revoked());
        assert!(!disc.is_revoked(), "discovery never authenticates");
        assert!(admin(&t, PLAIN, SUB).auth.required());
        // The keyed host's key rotated: the association authenticated with
        // the old one has its grace; one still to authenticate goes.
        let unproven = admin(&t, HOST, SUB);
        let k = t.set_credentials(&hosts(Some(k2.clone()), Some(k2.clone())), now);
        assert_eq!(k.hosts, vec![HOST.to_string()]);
        assert_eq!(k.rekeying.len(), 1);
        assert!(Arc::ptr_eq(&k.rekeying[0], &keyed) && !keyed.is_revoked());
        assert!(keyed.auth.rekey_due().is_some());
        assert!(unproven.is_revoked());
        // A key removed: the host's controllers go (they reconnect
        // without authenticating).
        let k = t.set_credentials(&hosts(None, Some(k2)), now);
        assert_eq!(k.hosts, vec![HOST.to_string()]);
        assert!(keyed.is_revoked());
        assert!(!admin(&t, HOST, SUB).auth.required());
    }

    #[test]
    fn who_must_authenticate() {
        let t = target();
        let keyed = admin(&t, HOST, SUB);
        assert!(keyed.auth.required());
        assert_eq!(keyed.auth.connect_result(), CONNECT_ATR);
        assert!(!admin(&t, PLAIN, SUB).auth.required());
        assert!(!admin(&t, "nqn.2026-11.io.test:other", SUB).auth.required());
        // Discovery never authenticates (as nvmet).
        assert!(!admin(&t, HOST, nvme::DISCOVERY_NQN).auth.required());
        // Keys only: a host entry without a key has no policy.
        assert!(t.credentials.policy(PLAIN).is_none());
        assert_eq!(t.credentials.policy(HOST).unwrap().hash, HashId::Sha384);
        assert!(!format!("{:?}", t.credentials).contains("Secret"));
    }

    #[test]
    fn fields_and_lengths() {
        let good = AuthCommand::dhchap(72).to_command(1, false);
        assert_eq!(precheck(&good, 72), Ok(()));
        assert_eq!(precheck(&good, 64), Err(Status::SGL_INVALID_DATA));
        let big = AuthCommand::dhchap(MAX_DATA + 1).to_command(1, true);
        assert_eq!(precheck(&big, MAX_DATA + 1), Err(Status::SGL_INVALID_DATA));
        let mut bad = good;
        bad.raw[41] = 2;
        assert_eq!(precheck(&bad, 72), Err(Status::INVALID_FIELD));
        let zero = AuthCommand::dhchap(0).to_command(1, true);
        assert_eq!(precheck(&zero, 0), Err(Status::INVALID_FIELD));
        assert!(is_auth(&good) && !is_auth(&nvme::Command::new(0x02, 1)));
    }

    #[test]
    fn a_queue_authenticates_then_is_cleared() {
        let t = target();
        let ctrl = admin(&t, HOST, SUB);
        let mut qa = QueueAuth::default();
        let shared = qa.shared();
        let start = Instant::now();
        assert!(!qa.cleared(&ctrl));
        assert!(qa.overdue(&ctrl, start, start + AUTH_TIMEOUT + Duration::from_secs(1)));
        assert!(!qa.overdue(&ctrl, start, start + Duration::from_secs(1)));
        let mut q = shared.lock().unwrap();
        let mut h = host::Transaction::new(key(), None, HOST, SUB, 7);
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            send(&mut q, &t, &ctrl, 0, &h.negotiate()),
            Outcome::Continue
        );
        let (n, o) = receive(&mut q, &t, &ctrl, 0, &mut buf).unwrap();
        assert_eq!(o, Outcome::Continue);
        let reply = h.challenge(&buf[..n as usize]).unwrap();
        assert_eq!(send(&mut q, &t, &ctrl, 0, &reply), Outcome::Continue);
        let (n, _) = receive(&mut q, &t, &ctrl, 0, &mut buf).unwrap();
        assert_eq!(h.success1(&buf[..n as usize]), Ok(None));
        drop(q);
        qa.refresh();
        assert!(qa.cleared(&ctrl));
        assert!(!qa.overdue(&ctrl, start, start + AUTH_TIMEOUT * 2));
        let mut q = shared.lock().unwrap();
        let last = ctrl.auth.last().unwrap();
        assert_eq!((last.hash, last.group), (HashId::Sha384, GroupId::Null));
        // Too small a Receive: a status, the transaction goes on.
        send(&mut q, &t, &ctrl, 0, &h.negotiate());
        assert_eq!(
            receive(&mut q, &t, &ctrl, 0, &mut buf[..20]).unwrap_err(),
            Status::INVALID_FIELD
        );
        assert!(receive(&mut q, &t, &ctrl, 0, &mut buf).is_ok());
    }

    #[test]
    fn restarts_before_authenticating_are_capped() {
        let t = target();
        let ctrl = admin(&t, HOST, SUB);
        let mut q = AuthState::default();
        let h = host::Transaction::new(key(), None, HOST, SUB, 7);
        let mut buf = vec![0u8; 4096];
        for _ in 0..MAX_ATTEMPTS {
            assert_eq!(
                send(&mut q, &t, &ctrl, 0, &h.negotiate()),
                Outcome::Continue
            );
            receive(&mut q, &t, &ctrl, 0, &mut buf).unwrap();
        }
        assert_eq!(send(&mut q, &t, &ctrl, 0, &h.negotiate()), Outcome::Failed);
    }

    #[test]
    fn a_failure_ends_the_association() {
        let t = target();
        let ctrl = admin(&t, HOST, SUB);
        let mut q = AuthState::default();
        let wrong = Secret::new(Some(HashId::Sha256), &[6; 32]).unwrap();
        let mut h = host::Transaction::new(wrong, None, HOST, SUB, 7);
        let mut buf = vec![0u8; 4096];
        send(&mut q, &t, &ctrl, 0, &h.negotiate());
        let (n, _) = receive(&mut q, &t, &ctrl, 0, &mut buf).unwrap();
        let reply = h.challenge(&buf[..n as usize]).unwrap();
        assert_eq!(send(&mut q, &t, &ctrl, 0, &reply), Outcome::Continue);
        let (_, o) = receive(&mut q, &t, &ctrl, 0, &mut buf).unwrap();
        assert_eq!(o, Outcome::Failed);
        assert!(q.tx.authenticated().is_none());
    }

    #[test]
    fn what_the_lane_did_survives_the_mailbox() {
        for (d, send) in [
            (Done::Sent(Outcome::Continue), true),
            (Done::Sent(Outcome::Failed), true),
            (Done::Received(0, Outcome::Continue), false),
            (Done::Received(1168, Outcome::Failed), false),
            (Done::Refused(Status::INVALID_FIELD), false),
            (Done::Refused(Status::COMMAND_INTERRUPTED.with_crd(1)), true),
        ] {
            assert_eq!(Done::from_result(d.to_result(), send), d);
        }
    }
}
