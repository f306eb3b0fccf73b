//! One host cannot hurt another, over the loopback (issue 38): one
//! namespace's stuck blocking work, a Compare and Write whose write fails,
//! Reservation Persistence off the worker, a host that takes no responses,
//! and in-band authentication on its own lane, capped per peer.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use nvme::fabrics::ConnectData;
use nvme::opcode::{admin, io};
use nvme::{Command, Status};

use super::{assert_status, null_ns, pattern, same, target, Host, TempDir, POOL, SUB};
use crate::model::namespace::Namespace;
use crate::model::target::Target;

/// A file namespace `nsid` of 4 MiB (0xEE) in `dir`, its file opened for
/// reading only when `readonly_file` (writes then fail in the backend).
fn file_ns_n(dir: &TempDir, nsid: u32, readonly_file: bool) -> Namespace {
    let path = dir.path().join(format!("disk{nsid}.img"));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![0xEE; 4 << 20]).unwrap();
    drop(f);
    let (backend, size, bs) = crate::backend::file::open(&path, Some(512), readonly_file).unwrap();
    Namespace::new(SUB, nsid, backend, size, bs, false)
}

fn caw(h: &mut Host, q: usize, nsid: u32, expect: Vec<u8>, data: Vec<u8>) -> (Command, Command) {
    let mut cmp = h.rw(io::COMPARE, 40, 8);
    cmp.set_nsid(nsid);
    cmp.set_fuse(nvme::command::fuse::FIRST);
    h.keyed(&mut cmp, expect, false);
    let mut w = h.rw(io::WRITE, 40, 8);
    w.set_nsid(nsid);
    w.set_fuse(nvme::command::fuse::SECOND);
    h.keyed(&mut w, data, false);
    h.lb.send(q, &cmp, &[]).unwrap();
    h.lb.send(q, &w, &[]).unwrap();
    (cmp, w)
}

/// Issue 38, 3: one namespace's slow blocking work (a Compare and Write
/// waiting for an RBD image's ownership, a notify no gateway answers)
/// leaves another namespace's Compare and Write as fast as ever.
#[test]
fn a_stuck_namespace_leaves_another_namespaces_compare_and_write_fast() {
    let dir = TempDir::new();
    let t = target(vec![file_ns_n(&dir, 1, false), file_ns_n(&dir, 2, false)]);
    let ns1 = t.subsystems()[0].namespace(1).unwrap();
    let mut h = Host::new(t);
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    // A job that does not end holds namespace 1's lane.
    h.lb.executor().hold(&ns1.lane);
    // Namespace 1's pair waits behind its lane; namespace 2's runs.
    let (c1, w1) = caw(&mut h, q, 1, vec![0xEE; 4096], pattern(1, 4096));
    let (c2, w2) = caw(&mut h, q, 2, vec![0xEE; 4096], pattern(2, 4096));
    let cid2 = w2.cid();
    assert!(h.lb.run_until(|lb| lb.has_cqe(q, cid2)));
    assert_status(h.lb.take_cqe(q, c2.cid()), Status::SUCCESS);
    assert_status(h.lb.take_cqe(q, w2.cid()), Status::SUCCESS);
    assert!(h.lb.take_cqe(q, w1.cid()).is_none(), "namespace 1 is held");
    h.lb.executor().release(&ns1.lane);
    h.lb.run_until(|lb| !lb.queue_busy(q));
    assert_status(h.lb.take_cqe(q, c1.cid()), Status::SUCCESS);
    assert_status(h.lb.take_cqe(q, w1.cid()), Status::SUCCESS);
    // Each pair reached the executor as one named job.
    let jobs = |h: &mut Host, kind: &str| {
        h.lb.executor()
            .started
            .iter()
            .filter(|k| **k == kind)
            .count()
    };
    assert_eq!(jobs(&mut h, "compare_and_write"), 2);
    assert_eq!(jobs(&mut h, "compare"), 0);
}

/// Issue 38, 9: a Compare and Write whose compare matched and whose write
/// failed says so: the write's status, not a failed compare.
#[test]
fn a_failed_write_of_compare_and_write_is_the_writes_status() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns_n(&dir, 1, true)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let (c, w) = caw(&mut h, q, 1, vec![0xEE; 4096], pattern(3, 4096));
    h.lb.run_until(|lb| !lb.queue_busy(q));
    let first = h.lb.take_cqe(q, c.cid()).expect("the compare's completion");
    let second = h.lb.take_cqe(q, w.cid()).expect("the write's completion");
    assert!(
        same(first.status, Status::FUSED_FAILED),
        "compare: {}",
        first.status
    );
    let plain = h
        .write(q, 40, pattern(3, 4096))
        .expect("a plain write's completion");
    assert!(!plain.status.is_success());
    assert!(
        same(second.status, plain.status),
        "write: {} (a plain write fails with {})",
        second.status,
        plain.status
    );
}

/// Issue 38, 4: Set Features Reservation Persistence syncs the state file:
/// it runs on the namespace's lane, never on the worker, which answers the
/// keep-alive meanwhile; one host asking again at once is told to retry.
#[test]
fn reservation_persistence_runs_off_the_worker() {
    use crate::reservation::persist::FileStore;
    use crate::reservation::{NsReservations, Store};
    let dir = TempDir::new();
    let mut ns = file_ns_n(&dir, 1, false);
    let store = FileStore::open(dir.path(), &ns.nguid).unwrap();
    ns.resv = NsReservations::new(true, Some(Store::File(store))).unwrap();
    let t = target(vec![ns]);
    let ns = t.subsystems()[0].namespace(1).unwrap();
    let mut h = Host::new(t);
    let (aq, _) = h.admin(5000);
    // A job that does not end holds the namespace's lane.
    h.lb.executor().hold(&ns.lane);
    let ptpl = |h: &mut Host| {
        let mut c = h.cmd(admin::SET_FEATURES);
        c.set_nsid(1);
        c.set_cdw(10, 0x83);
        c.set_cdw(11, 1);
        c
    };
    let set = ptpl(&mut h);
    h.lb.send(aq, &set, &[]).unwrap();
    let ka = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(aq, &ka, &[]), Status::SUCCESS);
    assert!(h.lb.take_cqe(aq, set.cid()).is_none(), "waits on the lane");
    let again = ptpl(&mut h);
    let c = h.lb.exec(aq, &again, &[]).expect("answered at once");
    assert!(same(c.status, Status::COMMAND_INTERRUPTED), "{}", c.status);
    // Issue 57, 8: the host's other controllers share its limit.
    let (aq2, _) = h.admin(5000);
    let other = ptpl(&mut h);
    let c = h.lb.exec(aq2, &other, &[]).expect("answered at once");
    assert!(same(c.status, Status::COMMAND_INTERRUPTED), "{}", c.status);
    h.lb.executor().release(&ns.lane);
    h.lb.run_until(|lb| !lb.queue_busy(aq));
    assert_status(h.lb.take_cqe(aq, set.cid()), Status::SUCCESS);
    assert!(ns.resv.lock().ptpl);
    // One job for the executor: the refused asks never reached it.
    let started = &h.lb.executor().started;
    assert_eq!(
        started.iter().filter(|k| **k == "persistence").count(),
        1,
        "{started:?}"
    );
}

/// Issue 38, 5: a host that keeps its association but takes no responses
/// (posts no receives) pins the data buffers of every response in flight;
/// its queue ends once its responses made no progress for SEND_STALL, and
/// another host's large read, waiting for a buffer, completes.
#[test]
fn a_host_that_takes_no_responses_loses_its_queue_not_the_pool() {
    let mut h = Host::new(target(vec![null_ns()]));
    let (_, c1) = h.admin(0);
    let deaf = h.io_queue(1, 32, c1);
    let (_, c2) = h.admin(0);
    let other = h.io_queue(1, 32, c2);
    h.lb.deafen(deaf);
    let big = |h: &mut Host, slba: u64| {
        let mut c = h.rw(io::READ, slba, 32);
        h.keyed(&mut c, vec![0; 32 * 4096], true);
        c
    };
    for i in 0..POOL.large_count as u64 {
        let c = big(&mut h, i * 32);
        h.lb.send(deaf, &c, &[]).unwrap();
    }
    h.lb.run();
    assert_eq!(
        h.lb.buffers_in_use(),
        POOL.large_count,
        "every large buffer pinned"
    );
    let mine = big(&mut h, 0);
    h.lb.send(other, &mine, &[]).unwrap();
    h.lb.run();
    assert!(
        h.lb.take_cqe(other, mine.cid()).is_none(),
        "waits for a buffer"
    );
    h.lb.advance(crate::queue::liveness::SEND_STALL / 2);
    h.lb.run();
    assert!(!h.lb.closed(deaf), "not yet");
    h.lb.advance(crate::queue::liveness::SEND_STALL / 2 + Duration::from_secs(1));
    h.lb.run_until(|lb| lb.has_cqe(other, mine.cid()));
    assert!(h.lb.closed(deaf), "the deaf queue ended");
    assert_status(h.lb.take_cqe(other, mine.cid()), Status::SUCCESS);
    assert!(!h.lb.closed(other));
}

pub(super) const KEYED: &str = "nqn.2026-11.org.example:keyed";

pub(super) fn dh_key() -> dhchap::Secret {
    dhchap::Secret::new(Some(dhchap::HashId::Sha256), &[5; 32]).unwrap()
}

/// A target whose host KEYED must authenticate with ffdhe2048.
pub(super) fn keyed_target() -> Arc<Target> {
    let t = target(vec![null_ns()]);
    t.credentials.set(&[crate::model::auth::HostConfig {
        nqn: KEYED.into(),
        dhchap_key: Some(dh_key()),
        dhchap_ctrl_key: None,
        dhchap_hash: dhchap::HashId::Sha256,
        dhchap_dhgroup: dhchap::GroupId::Ffdhe2048,
        tls_key: None,
        tls_derivation: tlspsk::Derivation::Compat,
    }]);
    t
}

impl Host {
    /// An admin queue of KEYED (Connect only): the queue and its cntlid.
    pub(super) fn keyed_admin(&mut self) -> (usize, u16) {
        let q = self.lb.accept(0, 32);
        let mut c = self.connect_cmd(0, 32, 0);
        let d = ConnectData {
            hostid: [9; 16],
            cntlid: 0xFFFF,
            subsysnqn: SUB.into(),
            hostnqn: KEYED.into(),
        }
        .encode()
        .to_vec();
        self.keyed(&mut c, d, false);
        let done = assert_status(self.lb.exec(q, &c, &[]), Status::SUCCESS);
        assert_ne!(
            done.result & crate::model::auth::CONNECT_ATR,
            0,
            "must authenticate"
        );
        (q, done.result as u16)
    }

    pub(super) fn auth_send(&mut self, msg: Vec<u8>) -> Command {
        self.cid += 1;
        let mut c = nvme::auth::AuthCommand::dhchap(msg.len() as u32).to_command(self.cid, false);
        self.keyed(&mut c, msg, false);
        c
    }

    /// An Authentication Receive: the command and its window's key.
    pub(super) fn auth_receive(&mut self) -> (Command, u32) {
        self.cid += 1;
        let mut c = nvme::auth::AuthCommand::dhchap(4096).to_command(self.cid, true);
        let key = self.keyed(&mut c, vec![0; 4096], true);
        (c, key)
    }
}

/// In-band authentication end to end over the loopback, its
/// exponentiations on the authentication lane (issue 38, 9): while the lane
/// is held, the worker answers another host; a peer's transactions beyond
/// its rate are answered Command Interrupted.
#[test]
fn authentication_runs_off_the_worker_and_is_rate_limited() {
    let t = keyed_target();
    let mut h = Host::new(t.clone());
    let (aq, _) = h.keyed_admin();
    let mut host = dhchap::host::Transaction::new(dh_key(), None, KEYED, SUB, 1);
    // Commands before authenticating are refused.
    let ka = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(aq, &ka, &[]), Status::AUTH_REQUIRED);
    // The lane held: the Negotiate waits; another host is served meanwhile.
    h.lb.executor().hold(&t.auth_pool);
    let neg = h.auth_send(host.negotiate());
    h.lb.send(aq, &neg, &[]).unwrap();
    let (other, _) = h.admin(0);
    let ka = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(other, &ka, &[]), Status::SUCCESS);
    assert!(h.lb.take_cqe(aq, neg.cid()).is_none(), "waits on the lane");
    h.lb.executor().release(&t.auth_pool);
    h.lb.run_until(|lb| lb.has_cqe(aq, neg.cid()));
    assert_status(h.lb.take_cqe(aq, neg.cid()), Status::SUCCESS);
    // Challenge, Reply, Success1.
    let (c, key) = h.auth_receive();
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let reply = host.challenge(h.lb.window_data(key)).expect("a challenge");
    let c = h.auth_send(reply);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let (c, key) = h.auth_receive();
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    assert_eq!(host.success1(h.lb.window_data(key)), Ok(None));
    let ka = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(aq, &ka, &[]), Status::CMD_SEQ_ERROR); // authenticated; not enabled yet
                                                                   // This address's burst of transactions is spent by re-authenticating.
    let mut refused = 0;
    for _ in 0..crate::command::auth::PEER_BURST + 2 {
        let neg = h.auth_send(host.negotiate());
        let c = h.lb.exec(aq, &neg, &[]).expect("answered");
        if same(c.status, Status::COMMAND_INTERRUPTED) {
            refused += 1;
        }
        let (c, _) = h.auth_receive();
        h.lb.exec(aq, &c, &[]);
    }
    assert!(refused >= 2, "{refused} refused");
}
