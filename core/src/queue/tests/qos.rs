//! QoS caps over the loopback (issue 40, 2): I/Os over a namespace's cap
//! wait for tokens on the loopback's clock (never an error), a host's own
//! cap applies to it alone, and a queue that goes away while its I/Os wait
//! releases them at once.

use std::time::Duration;

use nvme::opcode::io;
use nvme::Status;

use super::{assert_status, null_ns_at, target, Host, HOST};
use crate::model::qos::{HostCaps, QosCaps};

fn iops(n: u64) -> QosCaps {
    QosCaps {
        rw_iops: n,
        ..Default::default()
    }
}

/// Sends `n` 4 KiB reads (by keyed SGL) to `nsid` on queue `q`; their cids.
fn reads(h: &mut Host, q: usize, nsid: u32, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let mut c = h.rw(io::READ, 0, 8);
            c.set_nsid(nsid);
            h.keyed(&mut c, vec![0; 4096], true);
            h.lb.send(q, &c, &[]).unwrap();
            c.cid()
        })
        .collect()
}

/// In-capsule 512-byte writes (executed without a data buffer).
fn writes(h: &mut Host, q: usize, nsid: u32, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let mut c = h.rw(io::WRITE, 0, 1);
            c.set_nsid(nsid);
            c.set_sgl(&nvme::Sgl::InCapsule {
                offset: 0,
                len: 512,
            });
            h.lb.send(q, &c, &[0x5A; 512]).unwrap();
            c.cid()
        })
        .collect()
}

fn answered(h: &mut Host, q: usize, cids: &[u16]) -> usize {
    h.lb.run_until(|_| false);
    cids.iter().filter(|&&c| h.lb.has_cqe(q, c)).count()
}

#[test]
fn io_over_a_cap_waits_for_its_tokens_and_is_never_refused() {
    let t = target(vec![null_ns_at(1), null_ns_at(2)]);
    let sub = t.subsystems()[0].clone();
    // 100 I/Os per second: a bucket of four (the least burst), refilled
    // by the clock.
    sub.namespace(1).unwrap().set_qos(&sub.nqn, iops(100), &[]);
    let mut h = Host::new(t);
    let (_, cntlid) = h.admin(0);
    let q = h.io_queue(1, 64, cntlid);
    let r = reads(&mut h, q, 1, 20);
    let w = writes(&mut h, q, 1, 20);
    assert_eq!(
        answered(&mut h, q, &r) + answered(&mut h, q, &w),
        4,
        "the burst only"
    );
    // The uncapped namespace goes at once.
    let free = reads(&mut h, q, 2, 10);
    assert_eq!(answered(&mut h, q, &free), 10);
    // 100 ms of a worker that wakes as its tokens come: ten more, in their
    // order (the reads first: they came first).
    for _ in 0..10 {
        h.lb.advance(Duration::from_millis(10));
        h.lb.run();
    }
    assert_eq!(answered(&mut h, q, &r), 14);
    assert_eq!(answered(&mut h, q, &w), 0);
    for _ in 0..30 {
        h.lb.advance(Duration::from_millis(10));
        h.lb.run();
    }
    assert_eq!(
        answered(&mut h, q, &r) + answered(&mut h, q, &w),
        40,
        "all by 400 ms"
    );
    for c in r.iter().chain(&w) {
        assert_status(h.lb.take_cqe(q, *c), Status::SUCCESS);
    }
    assert_eq!(h.lb.buffers_in_use(), 0);
    // Every I/O but the 4 the bucket held at first waited for tokens.
    assert_eq!(h.lb.tally().totals().throttled, 36);
}

#[test]
fn a_hosts_cap_is_its_own_and_a_queue_gone_releases_its_waiting_io() {
    let t = target(vec![null_ns_at(1)]);
    let sub = t.subsystems()[0].clone();
    let other = HostCaps {
        host: "nqn.2026-11.org.example:someone-else".into(),
        caps: iops(1),
    };
    let mine = HostCaps {
        host: HOST.into(),
        caps: iops(50),
    };
    let ns = sub.namespace(1).unwrap();
    ns.set_qos(&sub.nqn, QosCaps::default(), std::slice::from_ref(&other));
    let mut h = Host::new(t);
    let (_, cntlid) = h.admin(0);
    let q = h.io_queue(1, 64, cntlid);
    let r = reads(&mut h, q, 1, 30);
    assert_eq!(
        answered(&mut h, q, &r),
        30,
        "another host's cap is not this host's"
    );
    // Live: this host gets a cap of its own.
    ns.set_qos(&sub.nqn, QosCaps::default(), &[other, mine]);
    let r = reads(&mut h, q, 1, 20);
    let w = writes(&mut h, q, 1, 20);
    assert_eq!(answered(&mut h, q, &r), 4);
    // The queue goes with 36 I/Os waiting (16 for a buffer, 20 to execute):
    // all released now, not when their tokens would have come.
    h.lb.host_disconnect(q);
    h.lb.run();
    assert!(!h.lb.queue_busy(q), "nothing left in flight");
    assert_eq!(h.lb.buffers_in_use(), 0);
    assert_eq!(
        h.lb.receives_in_use(q),
        0,
        "the in-capsule writes' capsules came back"
    );
    assert_eq!(answered(&mut h, q, &w), 0, "a gone queue answers nothing");
}
