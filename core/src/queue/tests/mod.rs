//! The queue core's tests, driven through the loopback transport (the
//! fake transport: the Inline executor, the loopback's clock): Connect to
//! disconnect, data both ways, bad input, timers on the loopback's clock,
//! queues deeper than the pool, disconnects with I/O in flight, fused pairs.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use nvme::fabrics::{cc, csts, prop, ConnectCommand, ConnectData, PropertyCommand};
use nvme::opcode::{admin, io};
use nvme::{Command, Completion, Sgl, Status};

use crate::counters::namespace::IoOp;
use crate::loopback::{no_data, Loopback, POOL};
use crate::model::namespace::Namespace;
use crate::model::subsystem::{Subsystem, SubsystemKind};
use crate::model::target::Target;
use crate::request::pool::PoolShape;

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
    Namespace::new(
        SUB,
        1,
        Box::new(crate::backend::null::Null::default()),
        1 << 30,
        4096,
        false,
    )
}

/// A null namespace `nsid` of 1 MiB in 512-byte blocks.
fn null_ns_at(nsid: u32) -> Namespace {
    Namespace::new(
        SUB,
        nsid,
        Box::new(crate::backend::null::Null::default()),
        1 << 20,
        512,
        false,
    )
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
        h.lb.invalidated(q).contains(&h.lb.last_window()),
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
    h.lb.advance(crate::queue::liveness::IDLE + Duration::from_secs(1));
    h.lb.run();
    h.lb.advance(crate::queue::liveness::PROBE_TIMEOUT * 2);
    assert!(!h.lb.closed(aq), "the probe was answered");
    h.lb.run();
    h.lb.answer_probes(false);
    h.lb.advance(crate::queue::liveness::IDLE + Duration::from_secs(1));
    h.lb.run();
    assert!(!h.lb.closed(aq), "probing");
    h.lb.advance(crate::queue::liveness::PROBE_TIMEOUT + Duration::from_secs(1));
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

mod core;
mod hogs;
mod isolation;
mod masking;
mod qos;
mod rekey;
