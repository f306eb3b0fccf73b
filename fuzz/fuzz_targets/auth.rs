//! DH-HMAC-CHAP as the controller runs it (dhchap::controller), fed what a
//! host may send. The first byte picks the policy (bit 0: ffdhe2048 rather
//! than null; bit 1: a controller key; bit 2: the honest host asks for
//! bidirectional authentication) and the mode (bit 3): raw frames
//! `[op][len lo][len hi][data]` (op even: an Authentication Send of `data`;
//! odd: a Receive of `len` bytes), or an honest host's transaction whose
//! messages are XORed with the rest of the input (all zeroes: unchanged, and
//! it must succeed). Checks: no panic, a Receive never answers more than it
//! was given room for, a failure leaves the queue unauthenticated.
#![no_main]
use dhchap::controller::{Event, Names, Policy, Transaction};
use dhchap::{host, GroupId, HashId, Secret};
use libfuzzer_sys::fuzz_target;

const HOST: &str = "nqn.2026-11.io.fuzz:host";
const SUB: &str = "nqn.2026-11.io.fuzz:open";
const NAMES: Names<'static> = Names { hostnqn: HOST, subnqn: SUB };

fn keys() -> (Secret, Secret) {
    (
        Secret::new(Some(HashId::Sha256), &[7; 32]).unwrap(),
        Secret::new(None, &[9; 48]).unwrap(),
    )
}

fn check(c: &Transaction, ev: Event) {
    if let Event::Failed(_) = ev {
        assert!(c.authenticated().is_none());
    }
}

fn receive(c: &mut Transaction, al: usize) -> Option<Vec<u8>> {
    let (m, ev) = c.receive(al, NAMES).ok()?;
    assert!(m.len() <= al);
    check(c, ev);
    Some(m)
}

fn send(c: &mut Transaction, data: &[u8], p: &Policy) {
    let ev = c.send(data, NAMES, || Some(p.clone()));
    check(c, ev);
}

fuzz_target!(|b: &[u8]| {
    let Some((&mode, rest)) = b.split_first() else { return };
    let (hk, ck) = keys();
    let group = if mode & 1 != 0 { GroupId::Ffdhe2048 } else { GroupId::Null };
    let p = Policy {
        hash: HashId::Sha256,
        group,
        host_key: hk.clone(),
        ctrl_key: (mode & 2 != 0).then(|| ck.clone()),
    };
    let mut c = Transaction::new();
    if mode & 8 == 0 {
        let mut r = rest;
        while r.len() >= 3 {
            let (op, len) = (r[0], u16::from_le_bytes([r[1], r[2]]) as usize);
            r = &r[3..];
            if op & 1 == 0 {
                let n = len.min(r.len());
                send(&mut c, &r[..n], &p);
                r = &r[n..];
            } else {
                receive(&mut c, len);
            }
        }
        return;
    }
    // An honest host, its messages changed by the input.
    let bidi = mode & 4 != 0;
    let mut h = host::Transaction::new(hk, bidi.then_some(ck), HOST, SUB, 3);
    let mut noise = rest.iter().copied();
    let mut pristine = true;
    let mut mutate = |m: &mut Vec<u8>| {
        for x in m.iter_mut() {
            let n = noise.next().unwrap_or(0);
            pristine &= n == 0;
            *x ^= n;
        }
    };
    let mut neg = h.negotiate();
    mutate(&mut neg);
    send(&mut c, &neg, &p);
    let Some(chal) = receive(&mut c, 4096) else { return };
    let Ok(mut reply) = h.challenge(&chal) else { return };
    mutate(&mut reply);
    send(&mut c, &reply, &p);
    let Some(s1) = receive(&mut c, 4096) else { return };
    match h.success1(&s1) {
        Ok(Some(mut s2)) => {
            mutate(&mut s2);
            send(&mut c, &s2, &p);
        }
        Ok(None) => {}
        Err(_) => {
            // The controller was asked to prove a key it has not.
            assert!(!pristine || (bidi && p.ctrl_key.is_none()));
            return;
        }
    }
    if pristine {
        let a = c.authenticated().expect("an honest host authenticates");
        assert_eq!(a.bidirectional, bidi);
    }
});
