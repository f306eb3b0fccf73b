//! The reservation state machine against the specification's rules (and
//! nvmet's choices where the specification leaves room), and its
//! invariants under any sequence of commands.

use nvme::opcode::io as op;
use nvme::reservation::{notice, racqa, rrega, rrela, ResvCommand, ResvType};
use nvme::Status;
use proptest::prelude::*;

use super::state::{Access, HostId, Reservations, MAX_REGISTRANTS};

const A: HostId = [0xA; 16];
const B: HostId = [0xB; 16];
const C: HostId = [0xC; 16];
/// No host NQN tag (registrations made before tags, and these tests').
const U: super::state::NqnTag = [0; 16];

fn req(opcode: u8, action: u8, rtype: u8, crkey: u64, key2: u64) -> ResvCommand {
    ResvCommand {
        opcode,
        action,
        iekey: false,
        rtype,
        cptpl: 0,
        crkey,
        key2,
    }
}

fn register(s: &mut Reservations, h: &HostId, key: u64) -> Result<(), Status> {
    s.apply(
        h,
        &req(op::RESV_REGISTER, rrega::REGISTER, 0, 0, key),
        false,
    )
    .map(|_| ())
}

fn acquire(s: &mut Reservations, h: &HostId, key: u64, t: ResvType) -> Result<(), Status> {
    s.apply(
        h,
        &req(op::RESV_ACQUIRE, racqa::ACQUIRE, t as u8, key, 0),
        false,
    )
    .map(|_| ())
}

fn preempt(
    s: &mut Reservations,
    h: &HostId,
    key: u64,
    prkey: u64,
    t: ResvType,
) -> Result<super::Effects, Status> {
    s.apply(
        h,
        &req(op::RESV_ACQUIRE, racqa::PREEMPT, t as u8, key, prkey),
        false,
    )
}

fn release(s: &mut Reservations, h: &HostId, key: u64, t: u8) -> Result<super::Effects, Status> {
    s.apply(h, &req(op::RESV_RELEASE, rrela::RELEASE, t, key, 0), false)
}

/// Three hosts registered with keys 1, 2, 3.
fn three() -> Reservations {
    let mut s = Reservations::default();
    register(&mut s, &A, 1).unwrap();
    register(&mut s, &B, 2).unwrap();
    register(&mut s, &C, 3).unwrap();
    s
}

#[test]
fn register_unregister_replace() {
    let mut s = Reservations::default();
    register(&mut s, &A, 1).unwrap();
    assert_eq!(s.generation, 1);
    // Again with the same key: success, and it counts.
    register(&mut s, &A, 1).unwrap();
    assert_eq!(s.generation, 2);
    assert_eq!(register(&mut s, &A, 9), Err(Status::RESERVATION_CONFLICT));
    let replace = |crkey, nrkey, iekey| ResvCommand {
        iekey,
        ..req(op::RESV_REGISTER, rrega::REPLACE, 0, crkey, nrkey)
    };
    assert_eq!(
        s.apply(&A, &replace(7, 5, false), false),
        Err(Status::RESERVATION_CONFLICT)
    );
    s.apply(&A, &replace(7, 5, true), false).unwrap();
    assert_eq!(s.registrants[0].key, 5);
    // Replace ignoring the key registers a host that is not registered...
    s.apply(&B, &replace(0, 6, true), false).unwrap();
    assert!(s.is_registered(&B));
    // ...but not with key 0, and not without IEKEY.
    assert_eq!(
        s.apply(&C, &replace(0, 0, true), false),
        Err(Status::INVALID_FIELD)
    );
    assert_eq!(
        s.apply(&C, &replace(0, 4, false), false),
        Err(Status::RESERVATION_CONFLICT)
    );
    let unreg = |crkey| req(op::RESV_REGISTER, rrega::UNREGISTER, 0, crkey, 0);
    assert_eq!(
        s.apply(&B, &unreg(1), false),
        Err(Status::RESERVATION_CONFLICT)
    );
    s.apply(&B, &unreg(6), false).unwrap();
    assert!(!s.is_registered(&B));
    assert_eq!(
        s.apply(&A, &req(op::RESV_REGISTER, 3, 0, 0, 0), false),
        Err(Status::INVALID_FIELD)
    );
}

#[test]
fn cptpl_is_honoured_only_where_the_state_can_persist() {
    let mut s = Reservations::default();
    let set = ResvCommand {
        cptpl: 3,
        ..req(op::RESV_REGISTER, rrega::REGISTER, 0, 0, 1)
    };
    s.apply(&A, &set, false).unwrap();
    assert!(!s.ptpl, "ignored: RESCAP says PTPL is not supported");
    s.apply(&A, &set, true).unwrap();
    assert!(s.ptpl);
    let reserved = ResvCommand { cptpl: 1, ..set };
    assert_eq!(s.apply(&A, &reserved, true), Err(Status::INVALID_FIELD));
    let clear = ResvCommand { cptpl: 2, ..set };
    s.apply(&A, &clear, true).unwrap();
    assert!(!s.ptpl);
}

#[test]
fn registrants_are_capped() {
    let mut s = Reservations::default();
    for i in 0..MAX_REGISTRANTS {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&(i as u64).to_le_bytes());
        register(&mut s, &h, 1).unwrap();
    }
    assert_eq!(
        register(&mut s, &[0xFF; 16], 1),
        Err(Status::CAPACITY_EXCEEDED)
    );
    assert!(s.valid());
}

#[test]
fn acquire_rules() {
    let mut s = three();
    let gen = s.generation;
    assert_eq!(
        acquire(&mut s, &A, 9, ResvType::WriteExclusive),
        Err(Status::RESERVATION_CONFLICT),
        "wrong key"
    );
    assert_eq!(
        acquire(&mut s, &[0xD; 16], 0, ResvType::WriteExclusive),
        Err(Status::RESERVATION_CONFLICT),
        "not registered"
    );
    assert_eq!(
        s.apply(&A, &req(op::RESV_ACQUIRE, 0, 7, 1, 0), false),
        Err(Status::INVALID_FIELD)
    );
    let iekey = ResvCommand {
        iekey: true,
        ..req(op::RESV_ACQUIRE, 0, 1, 1, 0)
    };
    assert_eq!(s.apply(&A, &iekey, false), Err(Status::INVALID_FIELD));
    acquire(&mut s, &A, 1, ResvType::WriteExclusive).unwrap();
    acquire(&mut s, &A, 1, ResvType::WriteExclusive).unwrap();
    assert_eq!(
        acquire(&mut s, &A, 1, ResvType::ExclusiveAccess),
        Err(Status::RESERVATION_CONFLICT),
        "another type by the holder"
    );
    assert_eq!(
        acquire(&mut s, &B, 2, ResvType::WriteExclusive),
        Err(Status::RESERVATION_CONFLICT)
    );
    assert_eq!(s.generation, gen, "acquire does not count");
    // All Registrants: every registrant holds it, and may acquire it again.
    let mut s = three();
    acquire(&mut s, &A, 1, ResvType::ExclusiveAccessAllRegs).unwrap();
    acquire(&mut s, &B, 2, ResvType::ExclusiveAccessAllRegs).unwrap();
    assert!(s.holds(&C));
}

#[test]
fn the_conflict_table() {
    // (type, holder, registrant, non-registrant) × (read, write)
    let d: HostId = [0xD; 16];
    for t in ResvType::ALL {
        let mut s = three();
        acquire(&mut s, &A, 1, t).unwrap();
        for access in [Access::Read, Access::Write] {
            assert!(s.allows(&A, &U, access), "the holder, {t:?}");
            let reg = s.allows(&B, &U, access);
            let non = s.allows(&d, &U, access);
            let (want_reg, want_non) = match (t, access) {
                (ResvType::WriteExclusive, Access::Read) => (true, true),
                (ResvType::WriteExclusive, Access::Write) => (false, false),
                (ResvType::ExclusiveAccess, _) => (false, false),
                (
                    ResvType::WriteExclusiveRegOnly | ResvType::WriteExclusiveAllRegs,
                    Access::Read,
                ) => (true, true),
                (
                    ResvType::WriteExclusiveRegOnly | ResvType::WriteExclusiveAllRegs,
                    Access::Write,
                ) => (true, false),
                (_, _) => (true, false),
            };
            assert_eq!((reg, non), (want_reg, want_non), "{t:?} {access:?}");
        }
    }
    assert!(Reservations::default().allows(&A, &U, Access::Write));
}

#[test]
fn release_and_clear() {
    let mut s = three();
    assert!(
        release(&mut s, &A, 1, 1).unwrap().notices.is_empty(),
        "none held"
    );
    acquire(&mut s, &A, 1, ResvType::WriteExclusiveRegOnly).unwrap();
    assert_eq!(
        release(&mut s, &B, 2, 3),
        Ok(Default::default()),
        "not the holder"
    );
    assert!(s.holder.is_some());
    assert_eq!(
        release(&mut s, &A, 1, 1),
        Err(Status::INVALID_FIELD),
        "type"
    );
    assert_eq!(
        release(&mut s, &A, 2, 3),
        Err(Status::RESERVATION_CONFLICT),
        "key"
    );
    let gen = s.generation;
    let fx = release(&mut s, &A, 1, 3).unwrap();
    assert!(s.holder.is_none());
    assert_eq!(s.generation, gen, "release does not count");
    assert_eq!(
        fx.notices,
        vec![
            (B, notice::RESERVATION_RELEASED),
            (C, notice::RESERVATION_RELEASED)
        ]
    );
    // Write Exclusive: nobody hears of its release.
    acquire(&mut s, &A, 1, ResvType::WriteExclusive).unwrap();
    assert!(release(&mut s, &A, 1, 1).unwrap().notices.is_empty());
    // Clear: everything goes; the others hear their reservation was preempted.
    acquire(&mut s, &B, 2, ResvType::ExclusiveAccess).unwrap();
    let fx = s
        .apply(&C, &req(op::RESV_RELEASE, rrela::CLEAR, 0, 3, 0), false)
        .unwrap();
    assert!(s.registrants.is_empty() && s.holder.is_none());
    assert_eq!(
        fx.notices,
        vec![
            (A, notice::RESERVATION_PREEMPTED),
            (B, notice::RESERVATION_PREEMPTED)
        ]
    );
    assert_eq!(s.generation, gen + 1);
    let iekey = ResvCommand {
        iekey: true,
        ..req(op::RESV_RELEASE, rrela::RELEASE, 1, 0, 0)
    };
    assert_eq!(s.apply(&A, &iekey, false), Err(Status::INVALID_FIELD));
}

#[test]
fn unregistering_the_holder() {
    let mut s = three();
    acquire(&mut s, &A, 1, ResvType::ExclusiveAccessRegOnly).unwrap();
    let fx = s
        .apply(
            &A,
            &req(op::RESV_REGISTER, rrega::UNREGISTER, 0, 1, 0),
            false,
        )
        .unwrap();
    assert!(s.holder.is_none());
    assert_eq!(fx.notices.len(), 2);
    // All Registrants: held while anyone is registered.
    let mut s = three();
    acquire(&mut s, &A, 1, ResvType::WriteExclusiveAllRegs).unwrap();
    for (h, k) in [(A, 1), (B, 2)] {
        s.apply(
            &h,
            &req(op::RESV_REGISTER, rrega::UNREGISTER, 0, k, 0),
            false,
        )
        .unwrap();
        assert!(s.holds(&C));
    }
    s.apply(
        &C,
        &req(op::RESV_REGISTER, rrega::UNREGISTER, 0, 3, 0),
        false,
    )
    .unwrap();
    assert!(s.holder.is_none());
}

#[test]
fn preempt_the_holder() {
    let mut s = three();
    register(&mut s, &[0xD; 16], 1).unwrap(); // shares A's key
    acquire(&mut s, &A, 1, ResvType::WriteExclusive).unwrap();
    let gen = s.generation;
    let fx = preempt(&mut s, &B, 2, 1, ResvType::ExclusiveAccess).unwrap();
    assert!(s.holds(&B));
    assert!(!s.is_registered(&A) && !s.is_registered(&[0xD; 16]));
    assert_eq!(s.generation, gen + 1);
    assert!(fx.notices.contains(&(A, notice::REGISTRATION_PREEMPTED)));
    assert!(fx
        .notices
        .contains(&([0xD; 16], notice::REGISTRATION_PREEMPTED)));
    assert!(
        fx.notices.contains(&(C, notice::RESERVATION_RELEASED)),
        "the type changed"
    );
    // PRKEY 0 while another host holds it: invalid.
    assert_eq!(
        preempt(&mut s, &C, 3, 0, ResvType::WriteExclusive).map(|_| ()),
        Err(Status::INVALID_FIELD)
    );
    // A key nobody has.
    assert_eq!(
        preempt(&mut s, &C, 3, 77, ResvType::WriteExclusive).map(|_| ()),
        Err(Status::RESERVATION_CONFLICT)
    );
    // Another registrant's key: only the registration goes.
    register(&mut s, &A, 5).unwrap();
    preempt(&mut s, &C, 3, 5, ResvType::WriteExclusive).unwrap();
    assert!(!s.is_registered(&A) && s.holds(&B));
    // The holder changes the type: it names its own key.
    assert_eq!(
        preempt(&mut s, &B, 2, 99, ResvType::WriteExclusiveRegOnly).map(|_| ()),
        Err(Status::RESERVATION_CONFLICT)
    );
    let fx = preempt(&mut s, &B, 2, 2, ResvType::WriteExclusiveRegOnly).unwrap();
    assert_eq!(s.rtype(), Some(ResvType::WriteExclusiveRegOnly));
    assert!(s.holds(&B));
    assert_eq!(fx.notices, vec![(C, notice::RESERVATION_RELEASED)]);
}

#[test]
fn preempt_all_registrants_and_abort() {
    let mut s = three();
    acquire(&mut s, &A, 1, ResvType::ExclusiveAccessAllRegs).unwrap();
    let fx = s
        .apply(
            &B,
            &req(op::RESV_ACQUIRE, racqa::PREEMPT_ABORT, 1, 2, 0),
            false,
        )
        .unwrap();
    assert_eq!(s.registrants.len(), 1);
    assert_eq!(s.rtype(), Some(ResvType::WriteExclusive));
    assert!(s.holds(&B));
    assert_eq!(fx.aborted, vec![A, C]);
    // No reservation: preempt only unregisters, and makes none.
    let mut s = three();
    preempt(&mut s, &A, 1, 2, ResvType::WriteExclusive).unwrap();
    assert!(s.holder.is_none() && !s.is_registered(&B));
}

fn any_command() -> impl Strategy<Value = (usize, ResvCommand)> {
    (
        0usize..4,
        prop::sample::select(vec![op::RESV_REGISTER, op::RESV_ACQUIRE, op::RESV_RELEASE]),
        0u8..4,
        any::<bool>(),
        0u8..8,
        0u8..4,
        0u64..4,
        0u64..4,
    )
        .prop_map(|(h, opcode, action, iekey, rtype, cptpl, crkey, key2)| {
            (
                h,
                ResvCommand {
                    opcode,
                    action,
                    iekey,
                    rtype,
                    cptpl,
                    crkey,
                    key2,
                },
            )
        })
}

proptest! {
    /// Whatever hosts send: the state stays valid, a failed command changes
    /// nothing, the holder can always do anything, and nobody unregistered
    /// is named in notices as a holder would be.
    #[test]
    fn invariants(cmds in prop::collection::vec(any_command(), 1..60), ptpl: bool) {
        let hosts: [HostId; 4] = [A, B, C, [0xD; 16]];
        let mut s = Reservations::default();
        for (h, c) in cmds {
            let before = s.clone();
            match s.apply(&hosts[h], &c, ptpl) {
                Ok(fx) => {
                    prop_assert!(s.valid());
                    if !fx.changed {
                        prop_assert_eq!(&s.holder, &before.holder);
                        prop_assert_eq!(&s.registrants, &before.registrants);
                    }
                    for (n, _) in &fx.notices {
                        prop_assert!(n != &hosts[h], "no notice to the issuer");
                    }
                    for g in &fx.aborted {
                        prop_assert!(!s.is_registered(g));
                    }
                }
                Err(_) => prop_assert_eq!(&s, &before),
            }
            for host in &hosts {
                if s.holds(host) {
                    prop_assert!(s.allows(host, &U, Access::Write));
                    prop_assert!(s.is_registered(host) || s.rtype().is_some_and(|t| !t.all_registrants()));
                }
            }
            if s.registrants.is_empty() {
                prop_assert!(s.holder.is_none());
            }
        }
    }
}

/// A shared state installs only what is newer than its copy (notifications
/// of one change may arrive after those of the next, or twice), and a
/// namespace without a shared state is always current.
#[test]
fn shared_copy_only_moves_forward() {
    use super::shared::Sink;
    let ns = super::NsReservations::in_memory(true);
    assert!(ns.sure());
    let mut s = Reservations::default();
    register(&mut s, &A, 1).unwrap();
    acquire(&mut s, &A, 1, ResvType::WriteExclusive).unwrap();
    ns.install(s.clone(), 5);
    assert_eq!(ns.version(), 5);
    assert_eq!(
        ns.check(&B, &U, Access::Write),
        Err(Status::RESERVATION_CONFLICT)
    );
    ns.install(Reservations::default(), 4);
    ns.install(Reservations::default(), 5);
    assert_eq!(*ns.lock(), s);
    ns.install(Reservations::default(), 6);
    assert_eq!(ns.version(), 6);
    assert_eq!(ns.check(&B, &U, Access::Write), Ok(()));
}

/// A state written before registrations kept their host NQN loads (the
/// NQN unknown, bound by the next command of the registrant), and one
/// written now keeps it.
#[test]
fn registrations_keep_their_host_nqn() {
    let old = r#"{"registrants":[{"host":[10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10],"key":7}],"holder":null,"generation":1,"ptpl":false}"#;
    let mut s: Reservations = serde_json::from_str(old).unwrap();
    let tag = super::state::nqn_tag("nqn.h:a");
    assert!(!s.bound_elsewhere(&A, &tag));
    s.bind(&A, &tag);
    assert!(s.bound_elsewhere(&A, &super::state::nqn_tag("nqn.h:b")));
    assert!(!s.bound_elsewhere(&A, &tag));
    let back: Reservations = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

/// Issue 57, 3: a registration bound to one host NQN is not another's
/// that uses the same identifier (on another gateway), and the notices a
/// change raises carry the tag each preempted host registered under.
#[test]
fn a_bound_registration_is_only_its_host_nqns() {
    let (v, i) = (
        super::state::nqn_tag("nqn.h:v"),
        super::state::nqn_tag("nqn.h:i"),
    );
    let mut s = three();
    s.bind(&A, &v);
    acquire(&mut s, &A, 1, ResvType::ExclusiveAccess).unwrap();
    for access in [Access::Read, Access::Write] {
        assert!(s.allows(&A, &v, access));
        assert!(!s.allows(&A, &i, access), "{access:?} under another NQN");
    }
    let fx = s
        .apply(
            &B,
            &req(
                op::RESV_ACQUIRE,
                racqa::PREEMPT,
                ResvType::WriteExclusive as u8,
                2,
                1,
            ),
            false,
        )
        .unwrap();
    assert!(fx.notices.iter().any(|(h, _)| *h == A));
    assert_eq!(fx.binding(&A), Some(&v));
    assert_eq!(fx.binding(&C), None, "C's registration is bound to none");
}

/// Issue 38, 6: a Preempt and Abort made through another gateway is
/// installed here only once the writes in flight here completed (its
/// preempted host's among them); writes arriving meanwhile wait at the gate
/// and see the new state.
#[test]
fn another_gateways_preempt_and_abort_drains_writes_here_first() {
    use super::shared::Sink;
    use std::sync::Arc;
    let r = Arc::new(super::NsReservations::in_memory(true));
    let gate = Arc::new(crate::request::write_gate::WriteGate::default());
    r.attach(super::Notify(Arc::new(|_, _| {})), gate.clone());
    gate.hold(); // a write of the preempted host, in flight here
    let next = Reservations {
        generation: 5,
        ..Default::default()
    };
    let (r2, done) = (
        r.clone(),
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let d2 = done.clone();
    let t = std::thread::spawn(move || {
        let ok = r2.install_draining(next, 3);
        d2.store(true, std::sync::atomic::Ordering::SeqCst);
        ok
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        !done.load(std::sync::atomic::Ordering::SeqCst),
        "waits for the write"
    );
    assert_eq!(
        r.lock().generation,
        0,
        "not installed before the write completed"
    );
    gate.leave();
    assert!(t.join().unwrap(), "acknowledged");
    assert_eq!(r.lock().generation, 5);
}
