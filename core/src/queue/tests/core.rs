//! The queue core's paths no other test reaches, each deterministic (the
//! Inline executor, the loopback's clock): a namespace whose ANA group is
//! inaccessible, a write parked at its namespace's write gate and woken
//! when it opens, the same write when its queue ended meanwhile, and a
//! transport that goes away with backend work in flight.

use nvme::Status;

use super::{assert_status, file_ns, pattern, same, target, Host, TempDir};

/// A namespace of an inaccessible ANA group (this gateway fenced for it, or unsure of its
/// reservation state)
/// answers its I/O with ANA Inaccessible, and serves again once the group
/// is accessible.
#[test]
fn an_inaccessible_ana_group_refuses_io_with_the_path_status() {
    let dir = TempDir::new();
    let mut ns = file_ns(&dir);
    ns.ana_group = 2;
    let t = target(vec![ns]);
    let mut h = Host::new(t.clone());
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    assert!(t.ana.set_withheld(&[2].into()));
    let (done, _) = h.read(q, 0, 8);
    let c = done.expect("an answer");
    assert!(same(c.status, Status::ANA_INACCESSIBLE), "{}", c.status);
    assert_eq!(h.lb.buffers_in_use(), 0, "refused before any buffer");
    assert!(t.ana.set_withheld(&Default::default()));
    assert_status(h.write(q, 0, pattern(4, 4096)), Status::SUCCESS);
}

/// A write that meets its namespace's gate closed (a Compare and Write or
/// a Preempt and Abort holds it) waits, parked, without a thread; when the
/// gate opens it is woken, checked again, and executes.
#[test]
fn a_write_parked_at_the_gate_runs_when_the_gate_opens() {
    let dir = TempDir::new();
    let t = target(vec![file_ns(&dir)]);
    let ns = t.subsystems()[0].namespace(1).unwrap();
    let mut h = Host::new(t);
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let data = pattern(5, 4096);
    let closed = ns.gate.close();
    let mut w = h.rw(nvme::opcode::io::WRITE, 8, 8);
    h.keyed(&mut w, data.clone(), false);
    h.lb.send(q, &w, &[]).unwrap();
    h.lb.run();
    assert!(!h.lb.has_cqe(q, w.cid()), "parked at the gate");
    assert!(h.lb.queue_busy(q));
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    assert!(disk[8 * 512..8 * 512 + 4096].iter().all(|&b| b == 0xEE));
    drop(closed);
    assert!(h.lb.run_until(|lb| lb.has_cqe(q, w.cid())));
    assert_status(h.lb.take_cqe(q, w.cid()), Status::SUCCESS);
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    assert_eq!(&disk[8 * 512..8 * 512 + 4096], &data[..]);
    assert_eq!(h.lb.buffers_in_use(), 0);
}

/// A write parked at the gate whose queue ended meanwhile (its host gave
/// up on the association and may have retried the write elsewhere) is not
/// executed when the gate opens; everything it held is released.
#[test]
fn a_parked_write_of_a_queue_that_ended_is_not_executed() {
    let dir = TempDir::new();
    let t = target(vec![file_ns(&dir)]);
    let ns = t.subsystems()[0].namespace(1).unwrap();
    let mut h = Host::new(t);
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let closed = ns.gate.close();
    let mut w = h.rw(nvme::opcode::io::WRITE, 8, 8);
    h.keyed(&mut w, pattern(6, 4096), false);
    h.lb.send(q, &w, &[]).unwrap();
    h.lb.run();
    h.lb.host_disconnect(q);
    h.lb.run();
    assert!(h.lb.queue_busy(q), "the parked write holds its request");
    drop(closed);
    h.lb.run();
    assert!(!h.lb.queue_busy(q));
    assert!(!h.lb.has_cqe(q, w.cid()), "a closed queue answers nothing");
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    assert!(
        disk[8 * 512..8 * 512 + 4096].iter().all(|&b| b == 0xEE),
        "the write was not executed"
    );
    assert_eq!(h.lb.buffers_in_use(), 0);
    assert_eq!(h.lb.reap_closed(), 1);
}

/// The transport's connection goes away for good (a queue pair destroyed
/// before it drained) while a backend operation is in flight: nothing is
/// answered, and the request is released once the backend completed (its
/// buffer stays the request's until then).
#[test]
fn a_transport_that_goes_away_leaves_backend_work_to_complete() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let mut r = h.rw(nvme::opcode::io::READ, 0, 8);
    h.keyed(&mut r, vec![0u8; 4096], false);
    h.lb.send(q, &r, &[]).unwrap();
    // Deliver the wire, but not the backend's read.
    while !h.lb.executor().idle() && h.lb.buffers_in_use() == 0 {
        h.lb.run_until(|lb| lb.buffers_in_use() > 0);
    }
    assert_eq!(h.lb.buffers_in_use(), 1, "the read holds its buffer");
    h.lb.transport_gone(q);
    assert!(h.lb.closed(q));
    assert_eq!(h.lb.buffers_in_use(), 1, "the backend still writes into it");
    h.lb.run();
    assert!(!h.lb.has_cqe(q, r.cid()), "no answer on a gone transport");
    assert!(!h.lb.queue_busy(q));
    assert_eq!(h.lb.buffers_in_use(), 0);
    assert_eq!(h.lb.reap_closed(), 1);
}
