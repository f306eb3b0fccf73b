//! Issue 57, 9: a host's DH-HMAC-CHAP key rotated keeps its association:
//! its queues authenticate again with the new key within the grace and
//! serve on without a pause; a queue that does not is ended when the grace
//! runs out, and a TLS or added/removed key still ends it at once.

use super::isolation::{dh_key, keyed_target, KEYED};
use super::*;

fn host_config(key: dhchap::Secret) -> crate::model::auth::HostConfig {
    crate::model::auth::HostConfig {
        nqn: KEYED.into(),
        dhchap_key: Some(key),
        dhchap_ctrl_key: None,
        dhchap_hash: dhchap::HashId::Sha256,
        dhchap_dhgroup: dhchap::GroupId::Ffdhe2048,
        tls_key: None,
        tls_derivation: tlspsk::Derivation::Compat,
    }
}

fn new_key(b: u8) -> dhchap::Secret {
    dhchap::Secret::new(Some(dhchap::HashId::Sha256), &[b; 32]).unwrap()
}

/// A whole DH-HMAC-CHAP transaction on queue `q` with `key`.
fn authenticate(h: &mut Host, q: usize, key: dhchap::Secret, t_id: u16) {
    let mut host = dhchap::host::Transaction::new(key, None, KEYED, SUB, t_id);
    let neg = h.auth_send(host.negotiate());
    assert_status(h.lb.exec(q, &neg, &[]), Status::SUCCESS);
    let (c, w) = h.auth_receive();
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    let reply = host.challenge(h.lb.window_data(w)).expect("a challenge");
    let c = h.auth_send(reply);
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    let (c, w) = h.auth_receive();
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    assert_eq!(host.success1(h.lb.window_data(w)), Ok(None));
}

fn keep_alive(h: &mut Host, q: usize) -> Status {
    let ka = h.cmd(admin::KEEP_ALIVE);
    h.lb.exec(q, &ka, &[]).expect("answered").status
}

#[test]
fn a_rotated_key_keeps_a_host_that_authenticates_again_and_ends_one_that_does_not() {
    let t = keyed_target();
    let grace = Duration::from_millis(
        t.key_rotation_grace_ms
            .load(std::sync::atomic::Ordering::Relaxed)
            .into(),
    );
    let mut h = Host::new(t.clone());
    let (aq, _) = h.keyed_admin();
    authenticate(&mut h, aq, dh_key(), 1);
    let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT;
    let c = h.property(prop::CC, Some(v));
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    // Rotated: the controller serves on, no pause.
    let k = t.set_credentials(&[host_config(new_key(6))], h.lb.now());
    assert_eq!((k.gone.len(), k.rekeying.len()), (0, 1));
    assert!(keep_alive(&mut h, aq).is_success());
    // The host authenticates again in place, with the new key, in the grace.
    h.lb.advance(grace / 2);
    authenticate(&mut h, aq, new_key(6), 2);
    assert!(keep_alive(&mut h, aq).is_success());
    h.lb.advance(grace);
    assert!(!h.lb.closed(aq), "authenticated again: kept");
    assert!(keep_alive(&mut h, aq).is_success());
    // Rotated again; this time the host does not follow.
    let k = t.set_credentials(&[host_config(new_key(7))], h.lb.now());
    assert_eq!(k.rekeying.len(), 1);
    h.lb.advance(grace / 2);
    assert!(!h.lb.closed(aq), "within the grace");
    assert!(keep_alive(&mut h, aq).is_success());
    h.lb.advance(grace / 2 + Duration::from_millis(500));
    assert!(h.lb.closed(aq), "the grace ran out: ended");
    assert!(k.rekeying[0].is_revoked());
}

#[test]
fn the_old_key_does_not_pass_for_the_new_and_no_grace_ends_at_once() {
    let t = keyed_target();
    let mut h = Host::new(t.clone());
    let (aq, _) = h.keyed_admin();
    authenticate(&mut h, aq, dh_key(), 1);
    let k = t.set_credentials(&[host_config(new_key(6))], h.lb.now());
    assert_eq!(k.rekeying.len(), 1);
    // Authenticating again with the old key fails the association.
    let mut host = dhchap::host::Transaction::new(dh_key(), None, KEYED, SUB, 2);
    let neg = h.auth_send(host.negotiate());
    assert_status(h.lb.exec(aq, &neg, &[]), Status::SUCCESS);
    let (c, w) = h.auth_receive();
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let reply = host.challenge(h.lb.window_data(w)).expect("a challenge");
    let c = h.auth_send(reply);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let (c, _) = h.auth_receive();
    h.lb.exec(aq, &c, &[]);
    h.lb.advance(Duration::from_millis(100));
    assert!(h.lb.closed(aq), "the old key's response fails: ended");
    // With no grace configured, a rotation ends the association at once.
    t.key_rotation_grace_ms
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let (aq, cntlid) = h.keyed_admin();
    authenticate(&mut h, aq, new_key(6), 3);
    let k = t.set_credentials(&[host_config(new_key(7))], h.lb.now());
    assert!(k.rekeying.is_empty());
    assert!(k.gone.iter().any(|c| c.cntlid == cntlid));
    h.lb.advance(Duration::from_millis(100));
    assert!(h.lb.closed(aq));
}
