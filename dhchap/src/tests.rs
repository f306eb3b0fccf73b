//! Host and controller transactions against each other, and the controller
//! against what a host may send wrongly.

use nvme::auth::{reason, Message};

use crate::controller::{self, Agreed, Event, Names, Policy};
use crate::host::{self, HostError};
use crate::{GroupId, HashId, Secret};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host-a";
const SUB: &str = "nqn.2024-01.io.test:sub";
const NAMES: Names<'static> = Names {
    hostnqn: HOST,
    subnqn: SUB,
};
const AL: usize = 4096;

fn key(t: Option<HashId>) -> Secret {
    Secret::generate(t, t.map_or(32, |h| h.len())).unwrap()
}

fn policy(hash: HashId, group: GroupId, host_key: &Secret, ctrl_key: Option<&Secret>) -> Policy {
    Policy {
        hash,
        group,
        host_key: host_key.clone(),
        ctrl_key: ctrl_key.cloned(),
    }
}

/// Runs one whole transaction; the host's error, or what was agreed.
fn run(
    c: &mut controller::Transaction,
    h: &mut host::Transaction,
    p: Option<Policy>,
) -> Result<Agreed, HostError> {
    assert_eq!(c.send(&h.negotiate(), NAMES, || p), Event::None);
    let (chal, ev) = c.receive(AL, NAMES).unwrap();
    let reply = match h.challenge(&chal) {
        Ok(r) => r,
        Err(e) => {
            assert!(matches!(ev, Event::Failed(_)) == matches!(e, HostError::Refused(_)));
            return Err(e);
        }
    };
    let ev = c.send(&reply, NAMES, || unreachable!());
    let (s1, ev1) = c.receive(AL, NAMES).unwrap();
    match h.success1(&s1) {
        Ok(None) => {
            assert_eq!(ev, Event::Authenticated);
            assert_eq!(ev1, Event::None);
        }
        Ok(Some(s2)) => {
            assert_eq!(ev, Event::None);
            assert_eq!(c.send(&s2, NAMES, || unreachable!()), Event::Authenticated);
        }
        Err(e) => {
            if let Some(r) = e.failure2_reason() {
                assert_eq!(
                    c.send(&h.failure2(r), NAMES, || unreachable!()),
                    Event::Failed(r)
                );
            } else {
                assert!(matches!(ev1, Event::Failed(_)));
            }
            assert_eq!(c.authenticated(), None);
            return Err(e);
        }
    }
    assert!(!c.in_progress());
    Ok(c.authenticated().expect("authenticated"))
}

#[test]
fn every_hash_and_group_uni_and_bidirectional() {
    for hash in HashId::ALL {
        for group in GroupId::ALL {
            // The larger groups once (they are slow in debug builds).
            if hash != HashId::Sha256 && group as u8 > 1 {
                continue;
            }
            for t in [None, Some(hash)] {
                let hk = key(t);
                let ck = key(Some(HashId::Sha512));
                let mut c = controller::Transaction::new();
                let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 3);
                let a = run(&mut c, &mut h, Some(policy(hash, group, &hk, Some(&ck)))).unwrap();
                assert_eq!(
                    a,
                    Agreed {
                        hash,
                        group,
                        bidirectional: false
                    }
                );
                let mut c = controller::Transaction::new();
                let mut h = host::Transaction::new(hk.clone(), Some(ck.clone()), HOST, SUB, 4);
                let a = run(&mut c, &mut h, Some(policy(hash, group, &hk, Some(&ck)))).unwrap();
                assert_eq!(
                    a,
                    Agreed {
                        hash,
                        group,
                        bidirectional: true
                    },
                    "{hash} {group}"
                );
            }
        }
    }
}

#[test]
fn wrong_keys() {
    let hk = key(Some(HashId::Sha256));
    let ck = key(None);
    // The wrong host key: Failure1 "failed".
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(key(Some(HashId::Sha256)), None, HOST, SUB, 1);
    let e = run(
        &mut c,
        &mut h,
        Some(policy(HashId::Sha256, GroupId::Ffdhe2048, &hk, None)),
    );
    assert_eq!(e, Err(HostError::Refused(reason::FAILED)));
    // The host key transformed with another NQN does not do either.
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), None, "nqn.other", SUB, 1);
    let e = run(
        &mut c,
        &mut h,
        Some(policy(HashId::Sha256, GroupId::Null, &hk, None)),
    );
    assert_eq!(e, Err(HostError::Refused(reason::FAILED)));
    // The controller proves a key other than the host's: the host refuses it.
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), Some(key(None)), HOST, SUB, 1);
    let e = run(
        &mut c,
        &mut h,
        Some(policy(HashId::Sha384, GroupId::Null, &hk, Some(&ck))),
    );
    assert_eq!(e, Err(HostError::ControllerNotAuthenticated));
    // Asked to prove a key it was not given: Failure1 "failed".
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), Some(ck.clone()), HOST, SUB, 1);
    let e = run(
        &mut c,
        &mut h,
        Some(policy(HashId::Sha384, GroupId::Null, &hk, None)),
    );
    assert_eq!(e, Err(HostError::Refused(reason::FAILED)));
    // No key configured for the host.
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 1);
    assert_eq!(
        run(&mut c, &mut h, None),
        Err(HostError::Refused(reason::FAILED))
    );
}

#[test]
fn negotiation_choices() {
    let hk = key(None);
    let p = |hash, group| Some(policy(hash, group, &hk, None));
    // The configured hash, wherever the host lists it.
    let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 1);
    h.hashes = vec![HashId::Sha512, HashId::Sha384];
    let a = run(
        &mut controller::Transaction::new(),
        &mut h,
        p(HashId::Sha384, GroupId::Null),
    )
    .unwrap();
    assert_eq!(a.hash, HashId::Sha384);
    // Required, as the group is (issue 38, 9): a host that offers only
    // another hash, stronger or weaker, is refused.
    for offered in [HashId::Sha512, HashId::Sha256] {
        let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 1);
        h.hashes = vec![offered];
        let e = run(
            &mut controller::Transaction::new(),
            &mut h,
            p(HashId::Sha384, GroupId::Null),
        );
        assert_eq!(
            e,
            Err(HostError::Refused(reason::HASH_UNUSABLE)),
            "{offered}"
        );
    }
    // The configured group is required.
    let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 1);
    h.groups = vec![GroupId::Null];
    let e = run(
        &mut controller::Transaction::new(),
        &mut h,
        p(HashId::Sha256, GroupId::Ffdhe2048),
    );
    assert_eq!(e, Err(HostError::Refused(reason::DHGROUP_UNUSABLE)));
}

/// What the controller answers to `msgs` sent in turn (the failure reason
/// of the Receive that follows them).
fn after(msgs: &[Vec<u8>]) -> Message {
    let hk = key(None);
    let mut c = controller::Transaction::new();
    for m in msgs {
        c.send(m, NAMES, || {
            Some(policy(HashId::Sha256, GroupId::Null, &hk, None))
        });
    }
    Message::parse(&c.receive(AL, NAMES).unwrap().0).unwrap()
}

fn failure(why: u8) -> impl Fn(&Message) -> bool {
    move |m| matches!(m, Message::Failure { from_host: false, explanation, .. } if *explanation == why)
}

fn negotiate(t_id: u16, hashes: Vec<u8>, groups: Vec<u8>) -> Message {
    Message::negotiate(t_id, &hashes, &groups)
}

#[test]
fn raw_refusals_carry_the_reason() {
    let good = negotiate(5, vec![1], vec![0]).encode();
    assert!(matches!(
        after(std::slice::from_ref(&good)),
        Message::Challenge { t_id: 5, .. }
    ));
    // Unknown hash and group identifiers.
    let m = negotiate(5, vec![0x10, 0x20], vec![0]).encode();
    assert!(failure(reason::HASH_UNUSABLE)(&after(&[m])));
    let m = negotiate(5, vec![1], vec![9]).encode();
    assert!(failure(reason::DHGROUP_UNUSABLE)(&after(&[m])));
    // Wrong lengths: a Negotiate cut short, an id list longer than its field.
    assert!(failure(reason::INCORRECT_PAYLOAD)(&after(&[
        good[..40].to_vec()
    ])));
    let mut long = good.clone();
    long[10] = 31;
    assert!(failure(reason::INCORRECT_PAYLOAD)(&after(&[long])));
    // Secure channel concatenation, an unknown protocol.
    let mut sc = good.clone();
    sc[6] = 1;
    assert!(failure(reason::CONCAT_MISMATCH)(&after(&[sc])));
    let mut other = good.clone();
    other[8] = 2;
    assert!(failure(reason::INCORRECT_PAYLOAD)(&after(&[other])));
    // Out of order: a Reply or Success2 first, an unknown message.
    let reply = Message::Reply {
        t_id: 5,
        cvalid: false,
        seqnum: 0,
        response: vec![0; 32],
        challenge: vec![0; 32],
        dhv: vec![],
    };
    assert!(failure(reason::INCORRECT_MESSAGE)(&after(
        &[reply.encode()]
    )));
    assert!(failure(reason::INCORRECT_MESSAGE)(&after(&[
        Message::Success2 { t_id: 5 }.encode()
    ])));
    assert!(failure(reason::INCORRECT_MESSAGE)(&after(&[vec![
        7, 7, 0, 0, 5, 0, 0, 0
    ]])));
    // A Receive with no transaction: failed.
    assert!(failure(reason::FAILED)(&after(&[])));
}

#[test]
fn reply_checks() {
    let hk = key(None);
    let start = |group| {
        let mut c = controller::Transaction::new();
        let n = negotiate(9, vec![1], vec![group as u8]).encode();
        c.send(&n, NAMES, || Some(policy(HashId::Sha256, group, &hk, None)));
        let (chal, _) = c.receive(AL, NAMES).unwrap();
        let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 9);
        let reply = h.challenge(&chal).unwrap();
        (c, Message::parse(&reply).unwrap())
    };
    let check = |c: &mut controller::Transaction, m: Message, why: u8| {
        assert_eq!(c.send(&m.encode(), NAMES, || unreachable!()), Event::None);
        let (f, ev) = c.receive(AL, NAMES).unwrap();
        assert!(failure(why)(&Message::parse(&f).unwrap()), "{why}");
        assert_eq!(ev, Event::Failed(why));
    };
    // Another transaction ID.
    let (mut c, m) = start(GroupId::Null);
    let Message::Reply {
        cvalid,
        seqnum,
        response,
        challenge,
        dhv,
        ..
    } = m
    else {
        panic!()
    };
    check(
        &mut c,
        Message::Reply {
            t_id: 10,
            cvalid,
            seqnum,
            response: response.clone(),
            challenge: challenge.clone(),
            dhv: dhv.clone(),
        },
        reason::INCORRECT_PAYLOAD,
    );
    // A hash length that is not the hash's.
    let (mut c, _) = start(GroupId::Null);
    check(
        &mut c,
        Message::Reply {
            t_id: 9,
            cvalid,
            seqnum,
            response: vec![0; 48],
            challenge: vec![0; 48],
            dhv: vec![],
        },
        reason::INCORRECT_PAYLOAD,
    );
    // A DH value with the null group; none, or an unusable one, with a group.
    let (mut c, _) = start(GroupId::Null);
    check(
        &mut c,
        Message::Reply {
            t_id: 9,
            cvalid,
            seqnum,
            response: response.clone(),
            challenge: challenge.clone(),
            dhv: vec![1; 256],
        },
        reason::INCORRECT_PAYLOAD,
    );
    let (mut c, m) = start(GroupId::Ffdhe2048);
    let Message::Reply {
        response,
        challenge,
        ..
    } = m
    else {
        panic!()
    };
    check(
        &mut c,
        Message::Reply {
            t_id: 9,
            cvalid,
            seqnum,
            response: response.clone(),
            challenge: challenge.clone(),
            dhv: vec![],
        },
        reason::DHGROUP_UNUSABLE,
    );
    let (mut c, _) = start(GroupId::Ffdhe2048);
    let mut one = vec![0u8; 256];
    one[255] = 1;
    check(
        &mut c,
        Message::Reply {
            t_id: 9,
            cvalid,
            seqnum,
            response,
            challenge,
            dhv: one,
        },
        reason::DHGROUP_UNUSABLE,
    );
}

#[test]
fn reauthentication_and_receive_sizes() {
    let hk = key(Some(HashId::Sha256));
    let p = || Some(policy(HashId::Sha256, GroupId::Ffdhe2048, &hk, None));
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), None, HOST, SUB, 1);
    run(&mut c, &mut h, p()).unwrap();
    // A new transaction on an authenticated queue: it stays authenticated
    // while it runs; a failed one ends that.
    c.send(&negotiate(2, vec![1], vec![1]).encode(), NAMES, p);
    assert!(c.authenticated().is_some() && c.in_progress());
    // Too small for the challenge: refused, and the transaction goes on.
    assert_eq!(
        c.receive(16 + 32 + 255, NAMES).unwrap_err().need,
        16 + 32 + 256
    );
    let mut h = host::Transaction::new(key(None), None, HOST, SUB, 2);
    assert_eq!(
        run_from_challenge(&mut c, &mut h),
        Err(HostError::Refused(reason::FAILED))
    );
    assert_eq!(c.authenticated(), None);
}

fn run_from_challenge(
    c: &mut controller::Transaction,
    h: &mut host::Transaction,
) -> Result<(), HostError> {
    let (chal, _) = c.receive(AL, NAMES).unwrap();
    let reply = h.challenge(&chal)?;
    c.send(&reply, NAMES, || unreachable!());
    let (s1, _) = c.receive(AL, NAMES).unwrap();
    h.success1(&s1).map(|_| ())
}

#[test]
fn a_host_failure2_ends_it() {
    let hk = key(None);
    let ck = key(None);
    let mut c = controller::Transaction::new();
    let mut h = host::Transaction::new(hk.clone(), Some(ck.clone()), HOST, SUB, 1);
    c.send(&h.negotiate(), NAMES, || {
        Some(policy(HashId::Sha256, GroupId::Null, &hk, Some(&ck)))
    });
    let (chal, _) = c.receive(AL, NAMES).unwrap();
    let r = h.challenge(&chal).unwrap();
    c.send(&r, NAMES, || unreachable!());
    c.receive(AL, NAMES).unwrap();
    assert_eq!(
        c.send(&h.failure2(reason::FAILED), NAMES, || unreachable!()),
        Event::Failed(reason::FAILED)
    );
    assert_eq!(c.authenticated(), None);
}
