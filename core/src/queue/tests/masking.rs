//! Namespace masking over the loopback (issue 40, 1): a namespace shown to
//! other hosts does not exist for this one (Identify, I/O, logs), and
//! showing it, or hiding it, takes effect at once with a notice.

use std::sync::Arc;
use std::time::Duration;

use nvme::opcode::{admin, io};
use nvme::opcode::{cns, lid};
use nvme::Status;

use super::{assert_status, null_ns_at, same, target, Host, HOST};

const OTHER: &str = "nqn.2026-11.org.example:other";

/// Identify (CNS `cns`, NSID `nsid`): its status and data.
fn identify(h: &mut Host, aq: usize, cns: u32, nsid: u32) -> (Status, Vec<u8>) {
    let mut c = h.cmd(admin::IDENTIFY);
    c.set_nsid(nsid);
    c.set_cdw(10, cns);
    let key = h.keyed(&mut c, vec![0xAA; 4096], false);
    let done = h.lb.exec(aq, &c, &[]).expect("a completion");
    (done.status, h.lb.window_data(key).to_vec())
}

fn active(h: &mut Host, aq: usize) -> Vec<u32> {
    let (st, data) = identify(h, aq, cns::ACTIVE_NS_LIST as u32, 0);
    assert!(st.is_success());
    data.chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect()
}

fn changed_ns(h: &mut Host, aq: usize) -> Vec<u32> {
    let mut c = h.cmd(admin::GET_LOG_PAGE);
    c.set_cdw(10, lid::CHANGED_NS as u32 | (4096 / 4 - 1) << 16);
    c.set_nsid(0xFFFF_FFFF);
    let key = h.keyed(&mut c, vec![0xAA; 4096], false);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    h.lb.window_data(key)
        .chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect()
}

fn read_ns(h: &mut Host, q: usize, nsid: u32) -> Status {
    let mut c = h.rw(io::READ, 0, 8);
    c.set_nsid(nsid);
    h.keyed(&mut c, vec![0; 4096], true);
    h.lb.exec(q, &c, &[]).expect("a completion").status
}

#[test]
fn a_namespace_shown_to_another_host_does_not_exist_for_this_one() {
    let t = target(vec![null_ns_at(1), null_ns_at(2), null_ns_at(3)]);
    let sub = t.subsystems()[0].clone();
    let ns2 = sub.namespace(2).unwrap();
    ns2.set_hosts(Some(vec![OTHER.into()]));
    sub.namespace(3)
        .unwrap()
        .set_hosts(Some(vec![HOST.into(), OTHER.into()]));
    let mut h = Host::new(t);
    let (aq, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    assert_eq!(active(&mut h, aq), vec![1, 3]);
    // As for a namespace that does not exist (nsid 9): zeroed Identify
    // Namespace data, Invalid Namespace for the descriptors and for I/O.
    for nsid in [2, 9] {
        let (st, data) = identify(&mut h, aq, cns::NAMESPACE as u32, nsid);
        assert!(
            st.is_success() && data.iter().all(|&b| b == 0),
            "nsid {nsid}"
        );
        let (st, _) = identify(&mut h, aq, cns::NS_DESC_LIST as u32, nsid);
        assert!(same(st, Status::INVALID_NS), "nsid {nsid}: {st}");
        assert!(
            same(read_ns(&mut h, q, nsid), Status::INVALID_NS),
            "nsid {nsid}"
        );
    }
    assert!(read_ns(&mut h, q, 3).is_success());
    let (_, data) = identify(&mut h, aq, cns::NAMESPACE as u32, 3);
    assert_eq!(
        u64::from_le_bytes(data[..8].try_into().unwrap()),
        2048,
        "NSZE"
    );
    // Shown to this host too: at once, with a notice naming it.
    assert_eq!(
        sub.show_namespace(2, Some(vec![OTHER.into(), HOST.into()])),
        Some(vec![cntlid])
    );
    assert_eq!(changed_ns(&mut h, aq), vec![2]);
    assert_eq!(active(&mut h, aq), vec![1, 2, 3]);
    assert!(read_ns(&mut h, q, 2).is_success());
    // A change that leaves this host's view alone tells it nothing.
    assert_eq!(sub.show_namespace(2, None), Some(vec![]));
    // Hidden again: gone at once, with a notice.
    assert_eq!(sub.show_namespace(2, Some(vec![])), Some(vec![cntlid]));
    assert_eq!(changed_ns(&mut h, aq), vec![2]);
    assert_eq!(active(&mut h, aq), vec![1, 3]);
    assert!(same(read_ns(&mut h, q, 2), Status::INVALID_NS));
    assert_eq!(sub.show_namespace(7, None), None, "no such namespace");
    // Its ANA log leaves the hidden namespace out.
    let mut c = h.cmd(admin::GET_LOG_PAGE);
    c.set_cdw(10, lid::ANA as u32 | (4096 / 4 - 1) << 16);
    let key = h.keyed(&mut c, vec![0; 4096], false);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let log = h.lb.window_data(key).to_vec();
    // Header (16 bytes), one group descriptor (32 bytes) and its nsids.
    let nnsids = u32::from_le_bytes(log[20..24].try_into().unwrap());
    let ids: Vec<u32> = log[48..48 + 4 * nnsids as usize]
        .chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(ids, vec![1, 3]);
    let _ = Arc::clone(&ns2);
}

#[test]
fn a_removed_namespace_closes_once_the_queue_that_used_it_lets_it_go() {
    let t = target(vec![null_ns_at(1), null_ns_at(2)]);
    let sub = t.subsystems()[0].clone();
    let (one, two) = (sub.namespace(1).unwrap(), sub.namespace(2).unwrap());
    let gone = Arc::downgrade(&two);
    drop(two);
    let mut h = Host::new(t);
    let (_aq, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    // Both on one queue, in turn (as Linux sends them): each found once.
    for _ in 0..3 {
        assert!(read_ns(&mut h, q, 1).is_success());
        assert!(read_ns(&mut h, q, 2).is_success());
    }
    assert_eq!(Arc::strong_count(&one), 3, "the table, this test, one hold");
    // Removed by a reload: gone for the host at once; its backend closes
    // at the queue's next timer though the host sends nothing more.
    sub.set_namespaces(vec![one.clone()]);
    assert!(gone.upgrade().is_some(), "the queue still holds it");
    h.lb.advance(Duration::from_millis(500));
    assert!(gone.upgrade().is_none(), "a removed namespace stays open");
    assert!(same(read_ns(&mut h, q, 2), Status::INVALID_NS));
    assert!(read_ns(&mut h, q, 1).is_success());
}
