//! The command path end to end over the loopback: Connect to disconnect,
//! data both ways, bad input, timers on the loopback's clock, queues deeper
//! than the pool, disconnects with I/O in flight, fused pairs.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use nvme::fabrics::{cc, csts, prop, ConnectCommand, ConnectData, PropertyCommand};
use nvme::opcode::{admin, io};
use nvme::{Command, Completion, Sgl, Status};

use super::{no_data, Loopback, POOL};
use crate::backend::Backend;
use crate::core::pool::PoolShape;
use crate::model::namespace::Namespace;
use crate::model::subsystem::{Subsystem, SubsystemKind, Target};
use crate::telemetry::namespace::IoOp;

const SUB: &str = "nqn.2026-11.org.example:loop";
const HOST: &str = "nqn.2026-11.org.example:host";
const HOSTID: [u8; 16] = [7; 16];

fn target(ns: Vec<Namespace>) -> Arc<Target> {
    let s = Subsystem::new(
        SUB.into(),
        SubsystemKind::Nvm,
        true,
        vec![],
        None,
        "loop".into(),
        ns.into_iter().map(Arc::new).collect(),
    );
    Arc::new(Target::new(
        vec![Arc::new(s)],
        vec!["192.0.2.2:4420".parse().unwrap()],
        0,
    ))
}

/// A 4 MiB file of 512-byte blocks (O_DIRECT), filled with 0xEE.
fn file_ns(dir: &TempDir) -> Namespace {
    let path = dir.path().join("disk.img");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![0xEE; 4 << 20]).unwrap();
    drop(f);
    let (backend, size, bs) = crate::backend::file::open(&path, Some(512), false).unwrap();
    Namespace::new(SUB, 1, backend, size, bs, false)
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("nvmf-loop-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn null_ns() -> Namespace {
    Namespace::new(SUB, 1, Backend::Null, 1 << 30, 4096, false)
}

fn same(a: Status, b: Status) -> bool {
    (a.sct, a.sc) == (b.sct, b.sc)
}

#[track_caller]
fn assert_status(c: Option<Completion>, want: Status) -> Completion {
    let c = c.expect("a completion");
    assert!(same(c.status, want), "got {}, want {}", c.status, want);
    c
}

/// A host on a loopback: command ids, its windows.
struct Host {
    lb: Loopback,
    cid: u16,
}

impl Host {
    fn new(t: Arc<Target>) -> Host {
        Host::with_pool(t, POOL)
    }

    fn with_pool(t: Arc<Target>, shape: PoolShape) -> Host {
        Host {
            lb: Loopback::new(t, shape).expect("a loopback (io_uring)"),
            cid: 0,
        }
    }

    /// A command without data (as Linux sends one: a keyed SGL of length 0).
    fn cmd(&mut self, opc: u8) -> Command {
        self.cid += 1;
        no_data(Command::new(opc, self.cid))
    }

    fn property(&mut self, offset: u32, value: Option<u32>) -> Command {
        self.cid += 1;
        let p = PropertyCommand {
            eight_bytes: false,
            offset,
            value: value.unwrap_or(0) as u64,
        };
        no_data(p.to_command(self.cid, value.is_some()))
    }

    fn keyed(&mut self, cmd: &mut Command, data: Vec<u8>, invalidate: bool) -> u32 {
        let len = data.len() as u32;
        let key = self.lb.window(data);
        cmd.set_sgl(&Sgl::Keyed {
            addr: 0,
            len,
            key,
            invalidate,
        });
        key
    }

    fn connect_cmd(&mut self, qid: u16, sq: u16, kato: u32) -> Command {
        self.cid += 1;
        no_data(
            ConnectCommand {
                recfmt: 0,
                qid,
                sqsize: sq - 1,
                cattr: 0,
                kato,
            }
            .to_command(self.cid),
        )
    }

    fn connect_data(cntlid: u16) -> Vec<u8> {
        ConnectData {
            hostid: HOSTID,
            cntlid,
            subsysnqn: SUB.into(),
            hostnqn: HOST.into(),
        }
        .encode()
        .to_vec()
    }

    /// Admin queue: Connect (data by keyed SGL, as Linux sends it) and
    /// CC.EN. Returns the queue and the controller id.
    fn admin(&mut self, kato: u32) -> (usize, u16) {
        let q = self.lb.accept(0, 32);
        let mut c = self.connect_cmd(0, 32, kato);
        self.keyed(&mut c, Self::connect_data(0xFFFF), false);
        let done = assert_status(self.lb.exec(q, &c, &[]), Status::SUCCESS);
        let cntlid = done.result as u16;
        let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT;
        let c = self.property(prop::CC, Some(v));
        assert_status(self.lb.exec(q, &c, &[]), Status::SUCCESS);
        (q, cntlid)
    }

    /// An I/O queue of `sq` entries (Connect data in the capsule).
    fn io_queue(&mut self, qid: u16, sq: u16, cntlid: u16) -> usize {
        let q = self.lb.accept(qid, sq);
        let mut c = self.connect_cmd(qid, sq, 0);
        c.set_sgl(&Sgl::InCapsule {
            offset: 0,
            len: 1024,
        });
        assert_status(
            self.lb.exec(q, &c, &Self::connect_data(cntlid)),
            Status::SUCCESS,
        );
        q
    }

    fn rw(&mut self, opc: u8, slba: u64, nlb: u32) -> Command {
        let mut c = self.cmd(opc);
        c.set_nsid(1);
        c.set_cdw(10, slba as u32);
        c.set_cdw(11, (slba >> 32) as u32);
        c.set_cdw(12, nlb - 1);
        c
    }

    /// Reads `nlb` 512-byte blocks at `slba` into a fresh window.
    fn read(&mut self, q: usize, slba: u64, nlb: u32) -> (Option<Completion>, Vec<u8>) {
        let mut c = self.rw(io::READ, slba, nlb);
        let key = self.keyed(&mut c, vec![0u8; nlb as usize * 512], true);
        let done = self.lb.exec(q, &c, &[]);
        (done, self.lb.window_data(key).to_vec())
    }

    /// Writes `data` at `slba` by keyed SGL (fetched by the target).
    fn write(&mut self, q: usize, slba: u64, data: Vec<u8>) -> Option<Completion> {
        let mut c = self.rw(io::WRITE, slba, data.len() as u32 / 512);
        self.keyed(&mut c, data, false);
        self.lb.exec(q, &c, &[])
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn connect_identify_and_data_both_ways_on_a_file() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (aq, cntlid) = h.admin(5000);
    let mut c = h.cmd(admin::IDENTIFY);
    c.set_cdw(10, 1);
    let key = h.keyed(&mut c, vec![0xAA; 4096], false);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let id = nvme::identify::IdentifyController::parse(h.lb.window_data(key)).unwrap();
    assert_eq!((id.cntlid, id.subnqn.as_str()), (cntlid, SUB));
    let q = h.io_queue(1, 32, cntlid);
    // A host write fetched by RDMA READ, and one in the capsule.
    let a = pattern(1, 8192);
    assert_status(h.write(q, 16, a.clone()), Status::SUCCESS);
    let b = pattern(2, 4096);
    let mut c = h.rw(io::WRITE, 100, 8);
    c.set_sgl(&Sgl::InCapsule {
        offset: 0,
        len: 4096,
    });
    assert_status(h.lb.exec(q, &c, &b), Status::SUCCESS);
    let (done, got) = h.read(q, 16, 16);
    assert_status(done, Status::SUCCESS);
    assert_eq!(got, a);
    assert!(
        h.lb.invalidated(q).contains(&(h.lb.next_key - 1)),
        "SEND_WITH_INVALIDATE of the read's key"
    );
    let (done, got) = h.read(q, 100, 8);
    assert_status(done, Status::SUCCESS);
    assert_eq!(got, b);
    let disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    assert_eq!(&disk[16 * 512..16 * 512 + 8192], &a[..], "on the file");
    assert_eq!(&disk[100 * 512..100 * 512 + 4096], &b[..]);
    assert_eq!(h.lb.buffers_in_use(), 0);
    assert_eq!(h.lb.receives_in_use(q), 0);
    // Counted in the worker's shards, summed when read.
    let ns = h.lb.target().subsystem(SUB).unwrap().namespace(1).unwrap();
    assert_eq!(ns.metrics.completed(IoOp::Read), 2);
    assert_eq!(ns.metrics.completed(IoOp::Write), 2);
    assert_eq!(ns.metrics.executing(), 0);
    let io = h.lb.core(aq).unwrap().controller().unwrap().io_totals();
    assert_eq!((io.reads, io.writes, io.units_written), (2, 2, 24));
}

#[test]
fn in_capsule_data_at_an_unaligned_offset_is_copied_before_it_is_written() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let data = pattern(9, 1024);
    let mut capsule = vec![0u8; 512];
    capsule.extend_from_slice(&data);
    let mut c = h.rw(io::WRITE, 8, 2);
    c.set_sgl(&Sgl::InCapsule {
        offset: 512,
        len: 1024,
    });
    assert_status(h.lb.exec(q, &c, &capsule), Status::SUCCESS);
    let (done, got) = h.read(q, 8, 2);
    assert_status(done, Status::SUCCESS);
    assert_eq!(got, data);
    assert_eq!(h.lb.buffers_in_use(), 0);
}

#[test]
fn bad_input_gets_the_precise_status() {
    let mut h = Host::new(target(vec![null_ns()]));
    // Before any Connect: nothing but Connect.
    let q = h.lb.accept(0, 32);
    let mut c = h.cmd(admin::IDENTIFY);
    c.set_cdw(10, 1);
    h.keyed(&mut c, vec![0; 4096], false);
    assert_status(h.lb.exec(q, &c, &[]), Status::CMD_SEQ_ERROR);
    // Connect data of the wrong size: no large buffer for a stranger.
    let mut c = h.connect_cmd(0, 32, 5000);
    h.keyed(&mut c, vec![0; 4096], false);
    assert_status(h.lb.exec(q, &c, &[]), Status::SGL_INVALID_DATA);
    // An unknown subsystem.
    let mut c = h.connect_cmd(0, 32, 5000);
    let mut d = ConnectData::parse(&Host::connect_data(0xFFFF)).unwrap();
    d.subsysnqn = "nqn.2026-11.org.example:nobody".into();
    h.keyed(&mut c, d.encode().to_vec(), false);
    let refused = assert_status(h.lb.exec(q, &c, &[]), Status::CONNECT_INVALID_PARAM);
    assert!(refused.status.dnr, "not retried");

    let (aq, cntlid) = h.admin(5000);
    let c = h.connect_cmd(0, 32, 5000);
    assert_status(h.lb.exec(aq, &c, &[]), Status::INVALID_OPCODE);
    let c = h.cmd(0xC1);
    assert_status(h.lb.exec(aq, &c, &[]), Status::INVALID_OPCODE);
    let q = h.io_queue(1, 32, cntlid);
    let (done, _) = h.read(q, (1 << 30) / 4096 - 1, 2 * 8);
    assert_status(done, Status::LBA_RANGE);
    let mut c = h.rw(io::READ, 0, 8);
    c.set_nsid(9);
    h.keyed(&mut c, vec![0; 4096], false);
    assert_status(h.lb.exec(q, &c, &[]), Status::INVALID_NS);
    let mut c = h.rw(io::READ, 0, 1);
    c.set_sgl(&Sgl::Keyed {
        addr: 0,
        len: crate::MAX_IO_SIZE + 4096,
        key: 1,
        invalidate: false,
    });
    assert_status(h.lb.exec(q, &c, &[]), Status::SGL_INVALID_DATA);
    let mut c = h.rw(io::WRITE, 0, 1);
    c.set_sgl(&Sgl::InCapsule {
        offset: 4096,
        len: 4096,
    });
    assert_status(h.lb.exec(q, &c, &[0; 4096]), Status::SGL_INVALID_OFFSET);
    // Keyed subtype 0xF owes the invalidation even when the command fails.
    let mut c = h.rw(io::READ, 0, 8);
    c.set_nsid(9);
    let key = h.keyed(&mut c, vec![0; 4096], true);
    assert_status(h.lb.exec(q, &c, &[]), Status::INVALID_NS);
    assert!(h.lb.invalidated(q).contains(&key));
    // A capsule shorter than a command ends the queue.
    h.lb.send_raw(q, &[0u8; 32], &[]).unwrap();
    h.lb.run();
    assert!(h.lb.closed(q));
    assert_eq!(h.lb.buffers_in_use(), 0);
}

#[test]
fn a_host_ignoring_flow_control_loses_its_queue() {
    // A file: its reads stay in flight until the loopback runs.
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 4, cntlid);
    for i in 0..4 {
        let mut c = h.rw(io::READ, i * 8, 8);
        h.keyed(&mut c, vec![0; 4096], false);
        h.lb.send(q, &c, &[]).unwrap();
    }
    assert!(!h.lb.closed(q), "four outstanding on a queue of four");
    let mut c = h.rw(io::READ, 64, 8);
    h.keyed(&mut c, vec![0; 4096], false);
    h.lb.send(q, &c, &[]).unwrap();
    assert!(h.lb.closed(q), "a fifth");
    h.lb.run();
    assert!(h.lb.cqes(q).is_empty(), "no answers once the queue went");
    assert!(!h.lb.queue_busy(q));
    assert_eq!(h.lb.buffers_in_use(), 0);
}

#[test]
fn a_queue_deeper_than_the_pool_waits_for_buffers() {
    let shape = PoolShape {
        small_size: 8192,
        small_count: 2,
        large_size: crate::MAX_IO_SIZE as usize,
        large_count: 1,
    };
    let dir = TempDir::new();
    let mut h = Host::with_pool(target(vec![file_ns(&dir)]), shape);
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let mut keys = Vec::new();
    for i in 0..24u64 {
        let mut c = h.rw(io::WRITE, i * 8, 8);
        h.keyed(&mut c, pattern(i as u8, 4096), false);
        h.lb.send(q, &c, &[]).unwrap();
    }
    h.lb.run_until(|lb| lb.buffers_in_use() == 0 && !lb.queue_busy(q));
    let done = h.lb.cqes(q);
    assert_eq!(done.len(), 24);
    assert!(done.iter().all(|c| c.status.is_success()));
    for i in 0..24u64 {
        let mut c = h.rw(io::READ, i * 8, 8);
        keys.push((i, h.keyed(&mut c, vec![0; 4096], false)));
        h.lb.send(q, &c, &[]).unwrap();
    }
    h.lb.run_until(|lb| lb.buffers_in_use() == 0 && !lb.queue_busy(q));
    assert_eq!(h.lb.cqes(q).len(), 24);
    for (i, k) in keys {
        assert_eq!(
            h.lb.window_data(k),
            &pattern(i as u8, 4096)[..],
            "block {i}"
        );
    }
}

#[test]
fn a_disconnect_with_io_in_flight_answers_nothing_and_releases_everything() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (aq, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    for i in 0..16u64 {
        let mut c = h.rw(io::WRITE, i * 8, 8);
        h.keyed(&mut c, pattern(3, 4096), false);
        h.lb.send(q, &c, &[]).unwrap();
    }
    h.lb.host_disconnect(q);
    h.lb.run();
    assert!(h.lb.cqes(q).is_empty());
    assert!(!h.lb.queue_busy(q));
    assert_eq!(h.lb.buffers_in_use(), 0);
    assert_eq!(h.lb.receives_in_use(q), 0);
    assert_eq!(h.lb.reap_closed(), 1);
    assert!(!h.lb.closed(aq), "the admin queue stays");
}

#[test]
fn keep_alive_expiry_on_the_loopback_clock_ends_the_association() {
    let mut h = Host::new(target(vec![null_ns()]));
    let (aq, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 8, cntlid);
    h.lb.advance(Duration::from_secs(4));
    let c = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    h.lb.advance(Duration::from_secs(4));
    assert!(!h.lb.closed(aq), "kept alive");
    h.lb.advance(Duration::from_secs(30));
    assert!(h.lb.closed(aq), "expired");
    let subsys = h.lb.target().subsystem(SUB).unwrap();
    h.lb.advance(Duration::from_millis(100));
    assert!(h.lb.closed(q), "its I/O queues go with it");
    h.lb.run();
    assert_eq!(h.lb.reap_closed(), 2);
    assert!(
        subsys.controller(cntlid).is_none(),
        "the controller is gone"
    );
}

#[test]
fn a_queue_without_connect_is_dropped_after_the_connect_timeout() {
    let mut h = Host::new(target(vec![null_ns()]));
    let q = h.lb.accept(0, 32);
    h.lb.advance(crate::queue::CONNECT_TIMEOUT / 2);
    assert!(!h.lb.closed(q));
    h.lb.advance(crate::queue::CONNECT_TIMEOUT);
    assert!(h.lb.closed(q));
}

#[test]
fn a_quiet_host_without_keep_alive_is_probed_and_dropped_when_gone() {
    let mut h = Host::new(target(vec![null_ns()]));
    let (aq, _) = h.admin(0);
    h.lb.advance(crate::core::liveness::IDLE + Duration::from_secs(1));
    h.lb.run();
    h.lb.advance(crate::core::liveness::PROBE_TIMEOUT * 2);
    assert!(!h.lb.closed(aq), "the probe was answered");
    h.lb.run();
    h.lb.answer_probes = false;
    h.lb.advance(crate::core::liveness::IDLE + Duration::from_secs(1));
    h.lb.run();
    assert!(!h.lb.closed(aq), "probing");
    h.lb.advance(crate::core::liveness::PROBE_TIMEOUT + Duration::from_secs(1));
    assert!(h.lb.closed(aq), "gone");
}

#[test]
fn host_shutdown_flushes_then_reports_complete() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (aq, _) = h.admin(5000);
    let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | 1 << cc::SHN_SHIFT;
    let c = h.property(prop::CC, Some(v));
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let c = h.property(prop::CSTS, None);
    let got = assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    assert_eq!(got.result as u32 & csts::SHST_MASK, csts::SHST_COMPLETE);
}

#[test]
fn a_parked_event_request_is_released_at_disconnect() {
    let mut h = Host::new(target(vec![null_ns()]));
    let (aq, _) = h.admin(5000);
    let c = h.cmd(admin::ASYNC_EVENT_REQUEST);
    h.lb.send(aq, &c, &[]).unwrap();
    h.lb.run();
    assert!(h.lb.cqes(aq).is_empty(), "parked");
    assert!(h.lb.queue_busy(aq));
    h.lb.host_disconnect(aq);
    h.lb.run();
    assert!(!h.lb.queue_busy(aq));
    assert_eq!(h.lb.reap_closed(), 1);
}

#[test]
fn compare_and_write_as_a_fused_pair() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    let old = pattern(4, 4096);
    let new = pattern(5, 4096);
    assert_status(h.write(q, 40, old.clone()), Status::SUCCESS);
    for (expect, first_st, second_st) in [
        (
            pattern(6, 4096),
            Status::COMPARE_FAILURE,
            Status::FUSED_FAILED,
        ),
        (old.clone(), Status::SUCCESS, Status::SUCCESS),
    ] {
        let mut cmp = h.rw(io::COMPARE, 40, 8);
        cmp.set_fuse(nvme::command::fuse::FIRST);
        h.keyed(&mut cmp, expect, false);
        let mut w = h.rw(io::WRITE, 40, 8);
        w.set_fuse(nvme::command::fuse::SECOND);
        h.keyed(&mut w, new.clone(), false);
        h.lb.send(q, &cmp, &[]).unwrap();
        h.lb.send(q, &w, &[]).unwrap();
        h.lb.run_until(|lb| !lb.queue_busy(q));
        assert_status(h.lb.take_cqe(q, cmp.cid()), first_st);
        assert_status(h.lb.take_cqe(q, w.cid()), second_st);
        let (_, got) = h.read(q, 40, 8);
        let want = if second_st.is_success() { &new } else { &old };
        assert_eq!(&got, want);
    }
    // A second without its first.
    let mut w = h.rw(io::WRITE, 40, 8);
    w.set_fuse(nvme::command::fuse::SECOND);
    h.keyed(&mut w, new.clone(), false);
    assert_status(h.lb.exec(q, &w, &[]), Status::FUSED_MISSING);
    assert_eq!(h.lb.buffers_in_use(), 0);
}

#[test]
fn zeroes_with_fua_and_deallocation_on_a_file() {
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (_, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    assert_status(h.write(q, 0, pattern(8, 8192)), Status::SUCCESS);
    let mut c = h.rw(io::WRITE_ZEROES, 0, 8);
    c.set_cdw(12, 7 | 1 << 30);
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    let (_, got) = h.read(q, 0, 16);
    assert!(got[..4096].iter().all(|&b| b == 0), "zeroed");
    assert_eq!(&got[4096..], &pattern(8, 8192)[4096..], "the rest kept");
    let mut range = vec![0u8; 16];
    range[4..8].copy_from_slice(&8u32.to_le_bytes());
    range[8..16].copy_from_slice(&8u64.to_le_bytes());
    let mut c = h.cmd(io::DATASET_MANAGEMENT);
    c.set_nsid(1);
    c.set_cdw(10, 0);
    c.set_cdw(11, 1 << 2);
    c.set_sgl(&Sgl::InCapsule { offset: 0, len: 16 });
    assert_status(h.lb.exec(q, &c, &range), Status::SUCCESS);
    let c = h.cmd(io::FLUSH);
    let mut c = c;
    c.set_nsid(1);
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
}

#[test]
fn logs_features_and_reservations_over_the_loopback() {
    use nvme::reservation::{Report, ResvCommand};
    let dir = TempDir::new();
    let mut h = Host::new(target(vec![file_ns(&dir)]));
    let (aq, cntlid) = h.admin(5000);
    let q = h.io_queue(1, 32, cntlid);
    for i in 0..3 {
        let (done, _) = h.read(q, i * 8, 8);
        assert_status(done, Status::SUCCESS);
    }
    // SMART / Health: host read commands counted by the worker's shard.
    let mut c = h.cmd(admin::GET_LOG_PAGE);
    c.set_cdw(10, 2 | (512 / 4 - 1) << 16);
    c.set_nsid(0xFFFF_FFFF);
    let key = h.keyed(&mut c, vec![0xAA; 512], false);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    let smart = h.lb.window_data(key);
    assert_eq!(
        u64::from_le_bytes(smart[64..72].try_into().unwrap()),
        3,
        "host read commands"
    );
    // Features: the keep-alive timer as set at Connect.
    let mut c = h.cmd(admin::GET_FEATURES);
    c.set_cdw(10, 0x0F);
    assert_eq!(
        assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS).result,
        5000
    );
    let mut c = h.cmd(admin::SET_FEATURES);
    c.set_cdw(10, 0x07);
    c.set_cdw(11, 3 | 3 << 16);
    assert_status(h.lb.exec(aq, &c, &[]), Status::SUCCESS);
    // Reservations: register, acquire Write Exclusive, report, release.
    let resv = |h: &mut Host, r: ResvCommand| {
        h.cid += 1;
        let (mut c, data) = r.to_command(h.cid, 1);
        c.set_sgl(&Sgl::InCapsule {
            offset: 0,
            len: data.len() as u32,
        });
        h.lb.exec(q, &c, &data)
    };
    let r = |opcode, action, rtype, crkey, key2| ResvCommand {
        opcode,
        action,
        iekey: false,
        rtype,
        cptpl: 0,
        crkey,
        key2,
    };
    assert_status(
        resv(&mut h, r(io::RESV_REGISTER, 0, 0, 0, 0xABC)),
        Status::SUCCESS,
    );
    assert_status(
        resv(&mut h, r(io::RESV_ACQUIRE, 0, 1, 0xABC, 0)),
        Status::SUCCESS,
    );
    assert_status(
        resv(&mut h, r(io::RESV_ACQUIRE, 0, 1, 0xBAD, 0)),
        Status::RESERVATION_CONFLICT,
    );
    let mut c = h.rw(io::RESV_REPORT, 0, 1);
    c.set_cdw(10, 4096 / 4 - 1);
    c.set_cdw(11, 1);
    c.set_cdw(12, 0);
    let key = h.keyed(&mut c, vec![0; 4096], false);
    assert_status(h.lb.exec(q, &c, &[]), Status::SUCCESS);
    let report = Report::parse(h.lb.window_data(key), true).unwrap();
    assert_eq!((report.rtype, report.regctls.len()), (1, 1));
    assert_eq!(
        (report.regctls[0].rkey, report.regctls[0].holds),
        (0xABC, true)
    );
    assert_eq!(report.regctls[0].hostid, HOSTID);
    assert_status(
        resv(&mut h, r(io::RESV_RELEASE, 0, 1, 0xABC, 0)),
        Status::SUCCESS,
    );
    assert_eq!(h.lb.buffers_in_use(), 0);
}

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

/// Holds `ns`'s lane until the returned sender is dropped or sent to.
fn stuck(ns: &Namespace) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    assert!(ns
        .lane
        .push(Box::new(move || {
            let _ = rx.recv();
        }))
        .is_ok());
    tx
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
    let release = stuck(&ns1);
    // Namespace 1's pair waits behind its lane; namespace 2's runs.
    let (c1, w1) = caw(&mut h, q, 1, vec![0xEE; 4096], pattern(1, 4096));
    let (c2, w2) = caw(&mut h, q, 2, vec![0xEE; 4096], pattern(2, 4096));
    let cid2 = w2.cid();
    assert!(h.lb.run_until(|lb| lb.has_cqe(q, cid2)));
    assert_status(h.lb.take_cqe(q, c2.cid()), Status::SUCCESS);
    assert_status(h.lb.take_cqe(q, w2.cid()), Status::SUCCESS);
    assert!(h.lb.take_cqe(q, w1.cid()).is_none(), "namespace 1 is held");
    release.send(()).unwrap();
    h.lb.run_until(|lb| !lb.queue_busy(q));
    assert_status(h.lb.take_cqe(q, c1.cid()), Status::SUCCESS);
    assert_status(h.lb.take_cqe(q, w1.cid()), Status::SUCCESS);
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
    let release = stuck(&ns);
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
    release.send(()).unwrap();
    h.lb.run_until(|lb| !lb.queue_busy(aq));
    assert_status(h.lb.take_cqe(aq, set.cid()), Status::SUCCESS);
    assert!(ns.resv.lock().ptpl);
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
    h.lb.deaf.push(deaf);
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
    h.lb.advance(crate::core::liveness::SEND_STALL / 2);
    h.lb.run();
    assert!(!h.lb.closed(deaf), "not yet");
    h.lb.advance(crate::core::liveness::SEND_STALL / 2 + Duration::from_secs(1));
    h.lb.run_until(|lb| lb.has_cqe(other, mine.cid()));
    assert!(h.lb.closed(deaf), "the deaf queue ended");
    assert_status(h.lb.take_cqe(other, mine.cid()), Status::SUCCESS);
    assert!(!h.lb.closed(other));
}

const KEYED: &str = "nqn.2026-11.org.example:keyed";

fn dh_key() -> dhchap::Secret {
    dhchap::Secret::new(Some(dhchap::HashId::Sha256), &[5; 32]).unwrap()
}

/// A target whose host KEYED must authenticate with ffdhe2048.
fn keyed_target() -> Arc<Target> {
    let t = target(vec![null_ns()]);
    t.credentials.set(&[crate::config::HostConfig {
        nqn: KEYED.into(),
        dhchap_key: Some(dh_key()),
        dhchap_ctrl_key: None,
        dhchap_hash: dhchap::HashId::Sha256,
        dhchap_dhgroup: dhchap::GroupId::Ffdhe2048,
    }]);
    t
}

impl Host {
    /// An admin queue of KEYED (Connect only): the queue and its cntlid.
    fn keyed_admin(&mut self) -> (usize, u16) {
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

    fn auth_send(&mut self, msg: Vec<u8>) -> Command {
        self.cid += 1;
        let mut c = nvme::auth::AuthCommand::dhchap(msg.len() as u32).to_command(self.cid, false);
        self.keyed(&mut c, msg, false);
        c
    }

    /// An Authentication Receive: the command and its window's key.
    fn auth_receive(&mut self) -> (Command, u32) {
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
    let (release, held) = std::sync::mpsc::channel::<()>();
    assert!(t
        .auth_lane
        .push(Box::new(move || {
            let _ = held.recv();
        }))
        .is_ok());
    let neg = h.auth_send(host.negotiate());
    h.lb.send(aq, &neg, &[]).unwrap();
    let (other, _) = h.admin(0);
    let ka = h.cmd(admin::KEEP_ALIVE);
    assert_status(h.lb.exec(other, &ka, &[]), Status::SUCCESS);
    assert!(h.lb.take_cqe(aq, neg.cid()).is_none(), "waits on the lane");
    release.send(()).unwrap();
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
