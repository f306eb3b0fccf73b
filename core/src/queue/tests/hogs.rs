//! Issue 57, 1: peers that hold data buffers and never let go. A peer that
//! proved nothing (a discovery controller) holds at most the pool's limited
//! cap; an admin command takes no more than it moves; a host that never
//! gives the data the target asks for is ended within the fetch bound; a
//! fused first whose second never comes is answered within its bound.

use super::*;
use crate::queue::liveness::FETCH_STALL;
use crate::queue::timers::FUSED_WAIT;
use crate::request::pool::Class;
use nvme::opcode::{fid, lid};

/// A discovery controller of any host NQN, enabled: its admin queue.
fn discovery(h: &mut Host) -> usize {
    let q = h.lb.accept(0, 32);
    let mut c = h.connect_cmd(0, 32, 0);
    let d = ConnectData {
        hostid: [0x51; 16],
        cntlid: 0xFFFF,
        subsysnqn: nvme::DISCOVERY_NQN.into(),
        hostnqn: "nqn.2026-11.org.example:stranger".into(),
    }
    .encode()
    .to_vec();
    h.keyed(&mut c, d, false);
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT;
    let c = h.property(prop::CC, Some(v));
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    q
}

/// A Get Log Page of the discovery log, `len` bytes (a multiple of 4), into
/// a fresh window.
fn discovery_log(h: &mut Host, len: u32) -> Command {
    let mut c = h.cmd(admin::GET_LOG_PAGE);
    c.set_cdw(10, (lid::DISCOVERY as u32) | ((len / 4 - 1) & 0xFFFF) << 16);
    c.set_cdw(11, (len / 4 - 1) >> 16);
    h.keyed(&mut c, vec![0; len as usize], false);
    c
}

#[test]
fn an_admin_command_takes_no_more_data_than_it_moves() {
    let mut h = Host::new(target(vec![null_ns()]));
    let (aq, _) = h.admin(5000);
    // A Set Features with a 128 KiB transfer whose data never comes: it
    // held a large buffer for ever.
    let mut sf = h.cmd(admin::SET_FEATURES);
    sf.set_cdw(10, fid::KEEP_ALIVE_TIMER as u32);
    sf.set_cdw(11, 5000);
    let key = h.keyed(&mut sf, vec![0; 128 << 10], false);
    h.lb.withhold(key);
    assert_status(h.lb.exec(aq, &sf, &[]), Status::SGL_INVALID_DATA);
    assert_eq!(h.lb.buffers_in_use(), 0, "refused before any buffer");
    // Get Features and Identify: no more than a page, exactly a page.
    let mut gf = h.cmd(admin::GET_FEATURES);
    gf.set_cdw(10, fid::KEEP_ALIVE_TIMER as u32);
    h.keyed(&mut gf, vec![0; 8192], false);
    assert_status(h.lb.exec(aq, &gf, &[]), Status::SGL_INVALID_DATA);
    let mut id = h.cmd(admin::IDENTIFY);
    id.set_cdw(10, 1);
    h.keyed(&mut id, vec![0; 8192], false);
    assert_status(h.lb.exec(aq, &id, &[]), Status::SGL_INVALID_DATA);
    // A Get Log Page whose SGL is longer than its NUMD asks.
    let mut glp = h.cmd(admin::GET_LOG_PAGE);
    glp.set_cdw(10, lid::ERROR as u32 | (1024 - 1) << 16);
    h.keyed(&mut glp, vec![0; 8192], false);
    assert_status(h.lb.exec(aq, &glp, &[]), Status::SGL_INVALID_DATA);
    // What a host sends still works.
    let mut gf = h.cmd(admin::GET_FEATURES);
    gf.set_cdw(10, fid::KEEP_ALIVE_TIMER as u32);
    assert_status(h.lb.exec(aq, &gf, &[]), Status::SUCCESS);
    let mut id = h.cmd(admin::IDENTIFY);
    id.set_cdw(10, 1);
    h.keyed(&mut id, vec![0; 4096], false);
    assert_status(h.lb.exec(aq, &id, &[]), Status::SUCCESS);
    assert_eq!(h.lb.buffers_in_use(), 0);
}

/// Discovery controllers that take no responses hold their log pages'
/// buffers; together they hold no more than the pool's limited cap, and a
/// host's 64 KiB reads find buffers.
#[test]
fn discovery_controllers_hold_no_more_than_the_limited_cap() {
    let mut h = Host::new(target(vec![null_ns_at(1)]));
    let cap = crate::request::pool::Pool::<()>::new(POOL).limited_cap(Class::Large) as usize;
    assert!(cap < POOL.large_count);
    let mut hogs = Vec::new();
    for _ in 0..2 {
        let dq = discovery(&mut h);
        h.lb.deafen(dq);
        for _ in 0..POOL.large_count {
            let c = discovery_log(&mut h, 64 << 10);
            h.lb.send(dq, &c, &[]).unwrap();
        }
        hogs.push(dq);
    }
    h.lb.run();
    assert_eq!(h.lb.buffers_in_use(), cap, "the hogs hold the cap, no more");
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    for i in 0..POOL.large_count as u64 {
        let (done, _) = h.read(q, i * 128, 128);
        assert_status(done, Status::SUCCESS);
    }
    // Several reads at once: every large buffer but the hogs' serves them.
    let mut cids = Vec::new();
    for i in 0..(POOL.large_count - cap) as u64 {
        let mut c = h.rw(io::READ, i * 128, 128);
        h.keyed(&mut c, vec![0; 64 << 10], true);
        h.lb.send(q, &c, &[]).unwrap();
        cids.push(c.cid());
    }
    h.lb.run();
    for cid in cids {
        assert_status(h.lb.take_cqe(q, cid), Status::SUCCESS);
    }
    assert!(hogs.iter().all(|&dq| !h.lb.closed(dq)));
}

/// A host (proven, with I/O) that asks to write and never gives the data
/// holds every large buffer; its queue is ended once none of that data came
/// for the fetch bound, and another host's read waiting meanwhile is served.
#[test]
fn a_host_that_withholds_its_data_is_ended_and_others_are_served() {
    let mut h = Host::new(target(vec![null_ns_at(1)]));
    // Keep-alive off: the clock moves past a keep-alive timeout below.
    let (_, hog) = h.admin(0);
    let hq = h.io_queue(1, 32, hog);
    for _ in 0..POOL.large_count + 2 {
        let mut c = h.rw(io::WRITE, 0, 256);
        let key = h.keyed(&mut c, vec![0; 128 << 10], false);
        h.lb.withhold(key);
        h.lb.send(hq, &c, &[]).unwrap();
    }
    h.lb.run();
    assert_eq!(
        h.lb.buffers_in_use(),
        POOL.large_count,
        "alone, it took all"
    );
    let (_, victim) = h.admin(0);
    let vq = h.io_queue(1, 32, victim);
    let mut rd = h.rw(io::READ, 0, 128);
    h.keyed(&mut rd, vec![0; 64 << 10], true);
    h.lb.send(vq, &rd, &[]).unwrap();
    h.lb.run();
    assert!(!h.lb.has_cqe(vq, rd.cid()), "waits for a buffer");
    h.lb.advance(FETCH_STALL / 2);
    h.lb.run();
    assert!(!h.lb.closed(hq), "within the bound");
    assert!(!h.lb.has_cqe(vq, rd.cid()));
    h.lb.advance(FETCH_STALL / 2 + Duration::from_millis(500));
    h.lb.run();
    assert!(h.lb.closed(hq), "no data for the fetch bound: ended");
    assert_status(h.lb.take_cqe(vq, rd.cid()), Status::SUCCESS);
    assert!(!h.lb.closed(vq));
    h.lb.run();
    assert!(!h.lb.queue_busy(hq), "its requests let go of their buffers");
}

/// Data that keeps coming is progress: a queue whose fetches complete is
/// not ended, however long it is busy.
#[test]
fn fetches_that_complete_keep_the_queue() {
    let mut h = Host::new(target(vec![null_ns_at(1)]));
    let (_, cntlid) = h.admin(0);
    let q = h.io_queue(1, 32, cntlid);
    for _ in 0..4 {
        h.lb.advance(FETCH_STALL / 2);
        assert_status(h.write(q, 0, vec![7; 64 << 10]), Status::SUCCESS);
    }
    assert!(!h.lb.closed(q));
}

#[test]
fn a_fused_first_without_its_second_is_answered_within_its_bound() {
    let mut h = Host::new(target(vec![null_ns_at(1)]));
    let (_, cntlid) = h.admin(0);
    let q = h.io_queue(1, 32, cntlid);
    let mut cmp = h.rw(io::COMPARE, 0, 8);
    cmp.set_fuse(nvme::command::fuse::FIRST);
    h.keyed(&mut cmp, vec![0; 4096], false);
    h.lb.send(q, &cmp, &[]).unwrap();
    h.lb.run();
    assert!(!h.lb.has_cqe(q, cmp.cid()), "waits for its second");
    h.lb.advance(FUSED_WAIT / 2);
    h.lb.run();
    assert!(!h.lb.has_cqe(q, cmp.cid()));
    h.lb.advance(FUSED_WAIT / 2 + Duration::from_millis(100));
    h.lb.run();
    assert_status(h.lb.take_cqe(q, cmp.cid()), Status::FUSED_MISSING);
    assert_eq!(h.lb.buffers_in_use(), 0);
    // Its second, late: no first waits for it.
    let mut w = h.rw(io::WRITE, 0, 8);
    w.set_fuse(nvme::command::fuse::SECOND);
    h.keyed(&mut w, vec![1; 4096], false);
    assert_status(h.lb.exec(q, &w, &[]), Status::FUSED_MISSING);
    assert!(!h.lb.closed(q));
}

/// Issue 57, 2, on a queue without a socket to shut down (RDMA): a queue
/// not yet connected that lost its place to a newer one is ended at its
/// next timer, before its Connect deadline; one that connected keeps going.
#[test]
fn a_queue_evicted_before_its_connect_ends_at_its_next_timer() {
    use crate::base::admission::Admission;
    let mut h = Host::new(target(vec![null_ns()]));
    let adm = Admission::evicting(2, 8);
    let peer: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    let stalled =
        h.lb.accept_pending(0, 32, Some(adm.admit(peer).unwrap().pending));
    let connected =
        h.lb.accept_pending(0, 32, Some(adm.admit(peer).unwrap().pending));
    let mut c = h.connect_cmd(0, 32, 5000);
    h.keyed(&mut c, Host::connect_data(0xFFFF), false);
    assert_status(h.lb.exec(connected, &c, &[]), Status::SUCCESS);
    assert_eq!(adm.counts(peer).0, 1, "a connected queue is not pending");
    h.lb.advance(Duration::from_millis(100));
    assert!(!h.lb.closed(stalled));
    // Two newer ones from the same address: the stalled one is the oldest.
    let newer = adm.admit(peer).unwrap();
    assert!(newer.evicted.is_none());
    let newest = adm.admit(peer).unwrap();
    assert!(newest.evicted.is_some());
    h.lb.advance(Duration::from_millis(100));
    assert!(
        h.lb.closed(stalled),
        "evicted: ended well before the Connect deadline"
    );
    assert!(!h.lb.closed(connected));
}
