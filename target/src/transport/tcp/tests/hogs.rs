//! Issue 57, 1 over NVMe/TCP: peers that ask the target for R2Ts and never
//! send the data. A discovery controller (any host NQN, no key) gets no
//! large buffer for an admin command; a host that withholds the data of its
//! writes holds the pool's large buffers only until the fetch bound ends its
//! queue, and another host's 64 KiB read is served then.

use super::*;
use crate::queue::liveness::FETCH_STALL;

/// A discovery controller of a stranger's NQN: its admin queue.
fn discovery(r: &mut Rig) -> usize {
    let h = r.open();
    r.icreq(h, 0);
    let c = r.connect_as(
        h,
        0,
        0xFFFF,
        0,
        nvme::DISCOVERY_NQN,
        "nqn.2026-11.org.example:stranger",
    );
    assert!(c.status.is_success());
    r.enable(h);
    h
}

#[test]
fn an_admin_command_of_a_stranger_gets_no_r2t_for_more_than_it_moves() {
    let mut r = Rig::new();
    let d = discovery(&mut r);
    for opc in [admin::SET_FEATURES, admin::GET_FEATURES] {
        let mut c = r.cmd(opc);
        c.set_cdw(10, nvme::opcode::fid::KEEP_ALIVE_TIMER as u32);
        c.set_sgl(&Sgl::Transport { len: 128 << 10 });
        r.capsule(d, &c, &[]);
        // The answer, not an R2T: no buffer was taken for it.
        let st = r.cqe(d).status;
        assert_eq!((st.sct, st.sc), (0, Status::SGL_INVALID_DATA.sc), "{st}");
    }
    assert_eq!(r.group.buffers_in_use(), 0);
}

#[test]
fn a_host_withholding_r2t_data_is_ended_and_another_hosts_read_is_served() {
    let mut r = Rig::new();
    // Keep-alive off: the clock moves past a keep-alive timeout below.
    r.kato = 0;
    let (_, hog) = r.admin(0);
    let hq = r.io(0, hog);
    // More 128 KiB writes than the pool has large buffers; the data of
    // their R2Ts never comes.
    let mut asked = 0;
    for _ in 0..SHAPE.large_count + 1 {
        let w = r.rw(io::WRITE, 0, 128 << 10);
        r.capsule(hq, &w, &[]);
    }
    for _ in 0..SHAPE.large_count {
        let b = r.next(hq);
        assert!(matches!(r.parse(hq, &b), Pdu::R2t(_)));
        asked += 1;
    }
    assert_eq!(asked, SHAPE.large_count);
    assert_eq!(r.group.buffers_in_use(), SHAPE.large_count);
    let (_, victim) = r.admin(0);
    let vq = r.io(0, victim);
    let rd = r.rw(io::READ, 0, 64 << 10);
    r.capsule(vq, &rd, &[]);
    r.pump();
    r.fill(vq);
    assert!(r.hosts[vq].rx.is_empty(), "the read waits for a buffer");
    r.group.now += FETCH_STALL / 2;
    r.group.tick(&mut r.exec);
    r.pump();
    r.fill(vq);
    assert!(r.hosts[vq].rx.is_empty(), "within the bound");
    r.group.now += FETCH_STALL / 2 + Duration::from_millis(500);
    r.group.tick(&mut r.exec);
    assert!(r.closed(hq), "no data for the fetch bound: ended");
    let b = r.next(vq);
    let Pdu::Data { hdr, data_ok, .. } = r.parse(vq, &b) else {
        panic!("not C2HData")
    };
    assert!(data_ok);
    assert_eq!((hdr.cccid, hdr.datal), (rd.cid(), 64 << 10));
    assert!(r.cqe(vq).status.is_success());
}
