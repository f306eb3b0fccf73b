//! The NVMe/TCP transport on a worker's group, over a real TCP connection
//! on the loopback interface, on the Inline executor and the group's clock:
//! a host written here from `nvme::tcp` connects, reads and writes, and
//! sends what a host must not.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nvme::fabrics::{cc, prop, ConnectCommand, ConnectData, PropertyCommand};
use nvme::opcode::{admin, io};
use nvme::tcp::{self, digest, fes, DataHeader, IcReq, Layout, Pdu, Rules};
use nvme::{Command, Completion, Sgl, Status};

use super::group::TcpGroup;
use super::{Inbox, NewSocket};
use crate::backend::exec::Inline;
use crate::base::admission::Admission;
use crate::base::wake::{Mailbox, Waker};
use crate::config::EngineConfig;
use crate::model::namespace::Namespace;
use crate::model::subsystem::{Subsystem, SubsystemKind};
use crate::model::target::Target;
use crate::request::pool::PoolShape;
use crate::worker::{Group, Transport};

const SUB: &str = "nqn.2026-11.org.example:tcp";
const HOST: &str = "nqn.2026-11.org.example:tcp-host";

const SHAPE: PoolShape = PoolShape {
    small_size: 8192,
    small_count: 16,
    large_size: crate::MAX_IO_SIZE as usize,
    large_count: 4,
};

fn target() -> Arc<Target> {
    let path = std::env::temp_dir().join(format!(
        "nvmf-tcp-{}-{:?}.img",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, vec![0xEEu8; 1 << 20]).unwrap();
    let (backend, size, bs) = crate::backend::file::open(&path, Some(512), false).unwrap();
    let _ = std::fs::remove_file(&path);
    let ns = Namespace::new(SUB, 1, backend, size, bs, false);
    let s = Subsystem::new(
        SUB.into(),
        SubsystemKind::Nvm,
        true,
        vec![],
        None,
        "tcp".into(),
        vec![Arc::new(ns)],
    );
    Arc::new(Target::new(
        vec![Arc::new(s)],
        vec!["127.0.0.1:4420".parse().unwrap()],
        0,
    ))
}

/// A host's connection.
struct Host {
    stream: TcpStream,
    rx: Vec<u8>,
    rules: Rules,
    layout: Layout,
}

/// The target's side (a worker's group) and the hosts' sockets.
struct Rig {
    group: Group<TcpGroup>,
    exec: Inline,
    listener: TcpListener,
    inbox: Arc<Inbox>,
    admission: Arc<Admission>,
    hosts: Vec<Host>,
    cid: u16,
    /// The keep-alive timeout admin queues connect with.
    kato: u32,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_capsules(64)
    }

    /// A rig whose worker has `capsules` capsule buffers.
    fn with_capsules(capsules: u32) -> Rig {
        let waker = Waker::new().unwrap();
        let inbox = Inbox::new(waker.clone());
        let cfg = EngineConfig {
            workers: 1,
            ..EngineConfig::default()
        };
        let group = Group::new(
            0,
            waker,
            TcpGroup::new(inbox.clone(), SHAPE, capsules, 0),
            target(),
            cfg,
        );
        Rig {
            group,
            exec: Inline::new(Mailbox::detached()),
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
            inbox,
            admission: Admission::evicting(8, 64),
            hosts: Vec::new(),
            cid: 0,
            kato: 5000,
        }
    }

    /// A new connection, accepted by the worker. Returns its host's index.
    fn open(&mut self) -> usize {
        let stream = TcpStream::connect(self.listener.local_addr().unwrap()).unwrap();
        stream.set_nonblocking(true).unwrap();
        stream.set_nodelay(true).unwrap();
        let (s, peer) = self.listener.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        self.inbox.give(NewSocket {
            local: s.local_addr().unwrap(),
            stream: s,
            peer,
            pending: self.admission.admit(peer.ip()).unwrap().pending,
            tls: None,
        });
        self.group.with(&mut self.exec, |t, w| t.accept(w));
        self.hosts.push(Host {
            stream,
            rx: Vec::new(),
            rules: Rules::host(1 << 20),
            layout: Layout::default(),
        });
        self.hosts.len() - 1
    }

    /// Runs the target's transport, but none of its backend's operations.
    fn pump_transport(&mut self) {
        for _ in 0..50 {
            if self.group.with(&mut self.exec, |t, w| t.poll(w)) == 0 {
                std::thread::sleep(Duration::from_millis(2));
                if self.group.with(&mut self.exec, |t, w| t.poll(w)) == 0 {
                    break;
                }
            }
        }
        self.group.flush(&mut self.exec);
    }

    /// Runs the target until nothing is left to do.
    fn pump(&mut self) {
        loop {
            let n = self.group.with(&mut self.exec, |t, w| t.poll(w));
            self.group.flush(&mut self.exec);
            if n > 0 {
                continue;
            }
            match self.exec.run_next() {
                Some((ud, res)) => self.group.complete(&mut self.exec, ud, res),
                None => break,
            }
        }
    }

    fn send(&mut self, h: usize, b: &[u8]) {
        self.hosts[h].stream.write_all(b).unwrap();
    }

    /// Reads what host `h`'s socket has; false once it is closed.
    fn fill(&mut self, h: usize) -> bool {
        let mut buf = [0u8; 65536];
        match self.hosts[h].stream.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.hosts[h].rx.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Err(_) => false,
        }
    }

    /// The next PDU to host `h`, running the target as needed.
    fn next(&mut self, h: usize) -> Vec<u8> {
        for _ in 0..200 {
            self.pump();
            self.fill(h);
            let host = &mut self.hosts[h];
            if let Ok(Some((_, n))) = tcp::parse(&host.rx, &host.rules) {
                return host.rx.drain(..n).collect();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no PDU came")
    }

    fn parse<'a>(&self, h: usize, b: &'a [u8]) -> Pdu<'a> {
        tcp::parse(b, &self.hosts[h].rules).unwrap().unwrap().0
    }

    /// Runs the target until every pool buffer came back, or a while (a
    /// zero-copy send's buffer comes back once the kernel says so).
    fn buffers_back(&mut self) {
        for _ in 0..100 {
            self.pump();
            if self.group.buffers_in_use() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether the target closed host `h`'s connection.
    fn closed(&mut self, h: usize) -> bool {
        for _ in 0..100 {
            self.pump();
            if !self.fill(h) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    fn icreq(&mut self, h: usize, dg: u8) {
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            digest: dg,
            maxr2t: 0,
        }
        .encode();
        self.send(h, &req);
        let b = self.next(h);
        let Pdu::IcResp(r) = self.parse(h, &b) else {
            panic!("not an ICResp")
        };
        assert_eq!(r.digest, dg);
        assert!(r.maxh2cdata >= tcp::MIN_MAXH2CDATA);
        let host = &mut self.hosts[h];
        host.layout = host.rules.agree(dg, 0);
    }

    fn with_digest(l: &Layout, mut b: Vec<u8>, data: &[u8]) -> Vec<u8> {
        b.extend_from_slice(data);
        if l.ddgst && !data.is_empty() {
            b.extend_from_slice(&tcp::crc(data).to_le_bytes());
        }
        b
    }

    fn capsule(&mut self, h: usize, c: &Command, data: &[u8]) {
        let l = self.hosts[h].layout;
        let b = Self::with_digest(&l, l.cmd(&c.raw, data.len() as u32), data);
        self.send(h, &b);
    }

    fn h2c(&mut self, h: usize, d: &DataHeader, data: &[u8], last: bool) {
        let l = self.hosts[h].layout;
        let f = if last { tcp::flags::DATA_LAST } else { 0 };
        let b = Self::with_digest(&l, l.data(true, d, f), data);
        self.send(h, &b);
    }

    fn cqe(&mut self, h: usize) -> Completion {
        let b = self.next(h);
        match self.parse(h, &b) {
            Pdu::Rsp(c) => c,
            other => panic!("expected a response, got {other:?}"),
        }
    }

    fn cmd(&mut self, opc: u8) -> Command {
        self.cid += 1;
        let mut c = Command::new(opc, self.cid);
        c.set_sgl(&Sgl::Transport { len: 0 });
        c
    }

    /// Connect on host `h`'s connection (data in the capsule).
    fn connect(&mut self, h: usize, qid: u16, cntlid: u16) -> Completion {
        self.connect_with(h, qid, cntlid, 0)
    }

    /// Connect with Connect attributes `cattr`.
    fn connect_with(&mut self, h: usize, qid: u16, cntlid: u16, cattr: u8) -> Completion {
        self.connect_as(h, qid, cntlid, cattr, SUB, HOST)
    }

    /// Connect to `subnqn` as `hostnqn`.
    fn connect_as(
        &mut self,
        h: usize,
        qid: u16,
        cntlid: u16,
        cattr: u8,
        subnqn: &str,
        hostnqn: &str,
    ) -> Completion {
        self.cid += 1;
        let mut c = ConnectCommand {
            recfmt: 0,
            qid,
            sqsize: 31,
            cattr,
            kato: if qid == 0 { self.kato } else { 0 },
        }
        .to_command(self.cid);
        c.set_sgl(&Sgl::InCapsule {
            offset: 0,
            len: 1024,
        });
        let d = ConnectData {
            hostid: [9; 16],
            cntlid,
            subsysnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
        }
        .encode();
        self.capsule(h, &c, &d);
        self.cqe(h)
    }

    /// An admin queue, connected and enabled. Returns its host and the
    /// controller id.
    fn admin(&mut self, dg: u8) -> (usize, u16) {
        let h = self.open();
        self.icreq(h, dg);
        let r = self.connect(h, 0, 0xFFFF);
        assert!(r.status.is_success(), "connect: {}", r.status);
        self.enable(h);
        (h, r.result as u16)
    }

    /// Enables the controller of admin queue `h` (CC.EN).
    fn enable(&mut self, h: usize) {
        self.cid += 1;
        let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT;
        let mut p = PropertyCommand {
            eight_bytes: false,
            offset: prop::CC,
            value: v as u64,
        }
        .to_command(self.cid, true);
        p.set_sgl(&Sgl::Transport { len: 0 });
        self.capsule(h, &p, &[]);
        assert!(self.cqe(h).status.is_success());
    }

    /// I/O queue 1 of controller `cntlid`.
    fn io(&mut self, dg: u8, cntlid: u16) -> usize {
        let h = self.open();
        self.icreq(h, dg);
        let r = self.connect(h, 1, cntlid);
        assert!(r.status.is_success(), "I/O connect: {}", r.status);
        h
    }

    fn rw(&mut self, opc: u8, slba: u32, len: u32) -> Command {
        let mut c = self.cmd(opc);
        c.set_nsid(1);
        c.set_cdw(10, slba);
        c.set_cdw(12, len / 512 - 1);
        c.set_sgl(&Sgl::Transport { len });
        c
    }

    /// A write of `len` bytes at `slba` whose data the target asks for:
    /// the command and its R2T.
    fn write_asked(&mut self, h: usize, slba: u32, len: u32) -> (Command, tcp::R2t) {
        let w = self.rw(io::WRITE, slba, len);
        self.capsule(h, &w, &[]);
        let b = self.next(h);
        let Pdu::R2t(t) = self.parse(h, &b) else {
            panic!("not an R2T")
        };
        (w, t)
    }

    /// Reads `len` bytes at `slba` on host `h`: the C2HData's data.
    fn read(&mut self, h: usize, slba: u32, len: u32) -> Vec<u8> {
        let c = self.rw(io::READ, slba, len);
        self.capsule(h, &c, &[]);
        let b = self.next(h);
        let Pdu::Data {
            h2c: false,
            hdr,
            data,
            data_ok: true,
            ..
        } = self.parse(h, &b)
        else {
            panic!("not C2HData")
        };
        assert_eq!((hdr.cccid, hdr.datao, hdr.datal), (c.cid(), 0, len));
        let data = data.to_vec();
        assert!(self.cqe(h).status.is_success());
        data
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
        .collect()
}

#[test]
fn a_host_connects_identifies_writes_by_r2t_and_in_capsule_and_reads_back() {
    for dg in [0, digest::HEADER | digest::DATA] {
        let mut r = Rig::new();
        let (a, cntlid) = r.admin(dg);
        // Identify Controller: C2HData, then the response.
        let mut id = r.cmd(admin::IDENTIFY);
        id.set_cdw(10, 1);
        id.set_sgl(&Sgl::Transport { len: 4096 });
        r.capsule(a, &id, &[]);
        let b = r.next(a);
        let Pdu::Data { hdr, data, .. } = r.parse(a, &b) else {
            panic!("not C2HData")
        };
        assert_eq!((hdr.cccid, hdr.datal), (id.cid(), 4096));
        let ctrl = nvme::identify::IdentifyController::parse(data).unwrap();
        assert_eq!((ctrl.cntlid, ctrl.subnqn.as_str()), (cntlid, SUB));
        assert!(r.cqe(a).status.is_success());
        let q = r.io(dg, cntlid);
        // A write of 8 KiB by R2T, the data in two H2CData PDUs.
        let data = pattern(dg, 8192);
        let (w, t) = r.write_asked(q, 16, 8192);
        assert_eq!((t.cccid, t.r2to, t.r2tl), (w.cid(), 0, 8192));
        for (off, last) in [(0u32, false), (4096, true)] {
            let d = DataHeader {
                cccid: w.cid(),
                ttag: t.ttag,
                datao: off,
                datal: 4096,
            };
            r.h2c(q, &d, &data[off as usize..off as usize + 4096], last);
        }
        let c = r.cqe(q);
        assert!(c.status.is_success(), "{}", c.status);
        assert_eq!(r.read(q, 16, 8192), data);
        // A write in the capsule.
        let small = pattern(dg ^ 0x55, 4096);
        let mut w = r.rw(io::WRITE, 100, 4096);
        w.set_sgl(&Sgl::InCapsule {
            offset: 0,
            len: 4096,
        });
        r.capsule(q, &w, &small);
        assert!(r.cqe(q).status.is_success());
        assert_eq!(r.read(q, 100, 4096), small);
        assert_eq!(r.group.transport.queues(), 2);
    }
}

/// A large read's data goes zero-copy from its pool buffer, which goes
/// back to the pool once the kernel is done with it. On the loopback the
/// kernel copies after all and says so: the connection then sends by copy.
#[test]
fn a_large_read_goes_zero_copy_and_its_buffer_comes_back() {
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(0);
    let q = r.io(0, cntlid);
    assert_eq!(
        r.group.transport.zero_copy(),
        [true, true],
        "SO_ZEROCOPY set"
    );
    let len = 64 * 1024;
    let data = pattern(7, len as usize);
    let w = r.rw(io::WRITE, 0, len);
    r.capsule(q, &w, &[]);
    let mut off = 0;
    while off < len {
        let b = r.next(q);
        let Pdu::R2t(t) = r.parse(q, &b) else {
            panic!("not an R2T")
        };
        let end = t.r2to + t.r2tl;
        while off < end {
            let n = (end - off).min(super::MAX_H2C_DATA);
            let d = DataHeader {
                cccid: w.cid(),
                ttag: t.ttag,
                datao: off,
                datal: n,
            };
            r.h2c(
                q,
                &d,
                &data[off as usize..(off + n) as usize],
                off + n == end,
            );
            off += n;
        }
    }
    assert!(r.cqe(q).status.is_success());
    // Until the kernel's notification is read, the read's buffer stays out
    // of the pool, though its request is over; another read takes another.
    r.group.transport.hold_notifications(true);
    assert_eq!(r.read(q, 0, len), data);
    r.pump();
    assert_eq!(r.group.buffers_in_use(), 1, "held for the kernel");
    assert_eq!(r.read(q, 0, len), data);
    r.pump();
    assert_eq!(r.group.buffers_in_use(), 2);
    // The notifications come (it copied: the peer is local).
    r.group.transport.hold_notifications(false);
    r.buffers_back();
    assert_eq!(r.group.transport.zero_copy(), [true, false]);
    assert_eq!(r.group.buffers_in_use(), 0, "both came back");
    // By copy now, the same data, nothing held.
    assert_eq!(r.read(q, 0, len), data);
    r.pump();
    assert_eq!(r.group.buffers_in_use(), 0);
}

/// Write data whose data digest is wrong is answered Transient Transport
/// Error (the host may retry), nothing written; the connection goes on.
#[test]
fn write_data_failing_its_digest_is_a_transient_transport_error() {
    let dg = digest::HEADER | digest::DATA;
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(dg);
    let q = r.io(dg, cntlid);
    let data = pattern(3, 4096);
    let (w, t) = r.write_asked(q, 8, 4096);
    let d = DataHeader {
        cccid: w.cid(),
        ttag: t.ttag,
        datao: 0,
        datal: 4096,
    };
    let l = r.hosts[q].layout;
    let mut pdu = l.data(true, &d, tcp::flags::DATA_LAST);
    pdu.extend_from_slice(&data);
    pdu.extend_from_slice(&(tcp::crc(&data) ^ 1).to_le_bytes());
    r.send(q, &pdu);
    let c = r.cqe(q);
    assert_eq!(c.cid, w.cid());
    assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "{}", c.status);
    assert!(!c.status.dnr, "the host may retry it");
    assert_eq!(r.read(q, 8, 4096), vec![0xEE; 4096], "nothing written");
    assert_eq!(r.group.buffers_in_use(), 0);
}

#[test]
fn a_keyed_sgl_on_tcp_is_an_invalid_sgl_type() {
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(0);
    let q = r.io(0, cntlid);
    let mut c = r.rw(io::READ, 0, 4096);
    c.set_sgl(&Sgl::Keyed {
        addr: 0x1000,
        len: 4096,
        key: 7,
        invalidate: false,
    });
    r.capsule(q, &c, &[]);
    let st = r.cqe(q).status;
    assert_eq!(
        (st.sct, st.sc),
        (Status::SGL_INVALID_TYPE.sct, Status::SGL_INVALID_TYPE.sc)
    );
}

/// A write's data goes straight to its pool buffer once its PDU's header
/// is in, however the bytes arrive: a whole transfer in one H2CData PDU
/// (MAXH2CDATA), far larger than the connection's receive buffer, in odd
/// pieces, with and without digests; a digest that does not match fails
/// the write alone; a header for no transfer ends the connection before
/// its data comes.
#[test]
fn a_writes_data_goes_straight_to_its_buffer_however_it_arrives() {
    for dg in [0, digest::HEADER | digest::DATA] {
        let mut r = Rig::new();
        let (_, cntlid) = r.admin(dg);
        let q = r.io(dg, cntlid);
        let len = super::MAX_H2C_DATA;
        assert_eq!(len, crate::MAX_IO_SIZE);
        let data = pattern(dg ^ 0x3C, len as usize);
        let (w, t) = r.write_asked(q, 64, len);
        assert_eq!(t.r2tl, len, "one R2T for the whole transfer");
        let d = DataHeader {
            cccid: w.cid(),
            ttag: t.ttag,
            datao: 0,
            datal: len,
        };
        let l = r.hosts[q].layout;
        let pdu = Rig::with_digest(&l, l.data(true, &d, tcp::flags::DATA_LAST), &data);
        // The header alone, then a few bytes, then pieces of odd sizes
        // (the digest split across two).
        let head = pdu[3] as usize;
        let mut cuts = vec![head, head + 5];
        cuts.extend((head + 5..pdu.len()).step_by(9973).skip(1));
        if dg != 0 {
            cuts.push(pdu.len() - 2);
        }
        cuts.push(pdu.len());
        let mut from = 0;
        for to in cuts {
            r.send(q, &pdu[from..to]);
            r.pump_transport();
            from = to;
        }
        let c = r.cqe(q);
        assert!(c.status.is_success(), "{}", c.status);
        assert_eq!(r.read(q, 64, len), data);
        // Its digest broken, sent after the header went in alone.
        if dg != 0 {
            let (w, t) = r.write_asked(q, 512, 8192);
            let d = DataHeader {
                cccid: w.cid(),
                ttag: t.ttag,
                datao: 0,
                datal: 8192,
            };
            let mut pdu = l.data(true, &d, tcp::flags::DATA_LAST);
            let head = pdu.len();
            pdu.extend_from_slice(&data[..8192]);
            pdu.extend_from_slice(&(tcp::crc(&data[..8192]) ^ 1).to_le_bytes());
            r.send(q, &pdu[..head]);
            r.pump_transport();
            r.send(q, &pdu[head..]);
            let c = r.cqe(q);
            assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "{}", c.status);
            assert_eq!(r.read(q, 512, 8192), vec![0xEE; 8192], "nothing written");
        }
        r.buffers_back();
        assert_eq!(r.group.buffers_in_use(), 0);
        // A header for a transfer that is not open, alone: terminated.
        let d = DataHeader {
            cccid: 7,
            ttag: 99,
            datao: 0,
            datal: 4096,
        };
        let pdu = l.data(true, &d, tcp::flags::DATA_LAST);
        r.send(q, &pdu);
        let b = r.next(q);
        assert!(
            matches!(
                r.parse(q, &b),
                Pdu::Term {
                    h2c: false,
                    fes: fes::INVALID_HEADER_FIELD,
                    fei: 10,
                }
            ),
            "{:?}",
            r.parse(q, &b)
        );
        assert!(r.closed(q));
    }
}

#[test]
fn data_outside_its_r2t_ends_the_connection_with_a_termination_request() {
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(0);
    let q = r.io(0, cntlid);
    let (w, t) = r.write_asked(q, 0, 8192);
    // The second half first.
    let d = DataHeader {
        cccid: w.cid(),
        ttag: t.ttag,
        datao: 4096,
        datal: 4096,
    };
    r.h2c(q, &d, &[0u8; 4096], true);
    let b = r.next(q);
    assert!(matches!(
        r.parse(q, &b),
        Pdu::Term {
            h2c: false,
            fes: fes::DATA_OUT_OF_RANGE,
            ..
        }
    ));
    assert!(r.closed(q));
}

#[test]
fn a_pdu_before_the_icreq_is_terminated() {
    let mut r = Rig::new();
    let h = r.open();
    let c = r.cmd(admin::KEEP_ALIVE);
    r.hosts[h].rules.initialized = true;
    r.capsule(h, &c, &[]);
    let b = r.next(h);
    assert_eq!(
        r.parse(h, &b),
        Pdu::Term {
            h2c: false,
            fes: fes::PDU_SEQUENCE_ERROR,
            fei: 0
        }
    );
    assert!(r.closed(h));
}

#[test]
fn a_connection_without_icreq_is_closed_at_the_connect_deadline() {
    let mut r = Rig::new();
    let h = r.open();
    r.pump();
    assert!(!r.closed(h));
    r.group.now += crate::queue::CONNECT_TIMEOUT + Duration::from_secs(1);
    r.group.tick(&mut r.exec);
    assert!(r.closed(h));
    r.group.tick(&mut r.exec);
    assert_eq!(r.group.transport.queues(), 0, "removed");
}

#[test]
fn a_header_digest_error_is_terminated_and_data_is_aligned_as_the_host_asks() {
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(digest::HEADER);
    // Host PDU data alignment of 32 bytes on the I/O queue.
    let q = r.open();
    let req = IcReq {
        pfv: 0,
        hpda: 7,
        digest: 0,
        maxr2t: 0,
    }
    .encode();
    r.send(q, &req);
    let b = r.next(q);
    assert!(matches!(r.parse(q, &b), Pdu::IcResp(_)));
    r.hosts[q].rules.initialized = true;
    r.hosts[q].rules.pda = 7;
    assert!(r.connect(q, 1, cntlid).status.is_success());
    let c = r.rw(io::READ, 0, 4096);
    r.capsule(q, &c, &[]);
    let b = r.next(q);
    assert_eq!(b[3] as usize % 32, 0, "C2HData's data offset aligned to 32");
    let Pdu::Data { data, .. } = r.parse(q, &b) else {
        panic!("not C2HData")
    };
    assert!(data.iter().all(|&x| x == 0xEE));
    assert!(r.cqe(q).status.is_success());
    // On the admin queue (header digests): a command under a bad digest.
    let a = 0;
    let k = r.cmd(admin::KEEP_ALIVE);
    let l = r.hosts[a].layout;
    let mut pdu = l.cmd(&k.raw, 0);
    pdu[20] ^= 0x40;
    r.send(a, &pdu);
    let b = r.next(a);
    assert!(matches!(
        r.parse(a, &b),
        Pdu::Term {
            fes: fes::HEADER_DIGEST_ERROR,
            ..
        }
    ));
    assert!(r.closed(a));
}

#[test]
fn a_read_of_a_host_without_sq_flow_control_is_answered_by_its_data_alone() {
    let mut r = Rig::new();
    let (_, cntlid) = r.admin(0);
    let q = r.open();
    r.icreq(q, 0);
    // CATTR bit 2: SQ flow control disabled.
    assert!(r.connect_with(q, 1, cntlid, 1 << 2).status.is_success());
    let c = r.rw(io::READ, 0, 4096);
    r.capsule(q, &c, &[]);
    let b = r.next(q);
    let Pdu::Data { flags: f, hdr, .. } = r.parse(q, &b) else {
        panic!("not C2HData")
    };
    assert_eq!(hdr.cccid, c.cid());
    assert_eq!(
        f & (tcp::flags::DATA_SUCCESS | tcp::flags::DATA_LAST),
        tcp::flags::DATA_SUCCESS | tcp::flags::DATA_LAST
    );
    // No response capsule: the next PDU answers the next command.
    let k = r.rw(io::READ, 8, 4096);
    r.capsule(q, &k, &[]);
    let b = r.next(q);
    assert!(matches!(r.parse(q, &b), Pdu::Data { hdr, .. } if hdr.cccid == k.cid()));
}

#[test]
fn accepted_connections_are_probed_when_quiet_and_given_up_without_acks() {
    use nix::sys::socket::{getsockopt, sockopt};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    super::tune(&s).unwrap();
    assert!(getsockopt(&s, sockopt::KeepAlive).unwrap());
    assert!(getsockopt(&s, sockopt::TcpNoDelay).unwrap());
    assert_eq!(getsockopt(&s, sockopt::TcpKeepIdle).unwrap(), 10);
    assert_eq!(getsockopt(&s, sockopt::TcpKeepInterval).unwrap(), 5);
    assert_eq!(getsockopt(&s, sockopt::TcpUserTimeout).unwrap(), 30_000);
}

#[test]
fn one_connection_holds_no_more_than_its_share_of_capsule_buffers() {
    // 16 capsule buffers, four connections: a share is the minimum, 8.
    let mut r = Rig::with_capsules(16);
    let (_, a) = r.admin(0);
    let qa = r.io(0, a);
    let (_, b) = r.admin(0);
    let qb = r.io(0, b);
    let writes_started = |r: &Rig| r.exec.started.iter().filter(|k| **k == "write").count();
    // Host A sends 20 in-capsule writes; none of them runs yet (a slow
    // namespace). Only its share of them takes capsule buffers.
    let mut sent = Vec::new();
    for i in 0..20u32 {
        let mut w = r.rw(io::WRITE, i, 512);
        w.set_sgl(&Sgl::InCapsule {
            offset: 0,
            len: 512,
        });
        r.capsule(qa, &w, &pattern(i as u8, 512));
        sent.push(w.cid());
    }
    r.pump_transport();
    assert_eq!(writes_started(&r), super::group::MIN_CAPSULE_SHARE as usize);
    // Host B's in-capsule write still gets a buffer and starts.
    let mut w = r.rw(io::WRITE, 40, 512);
    w.set_sgl(&Sgl::InCapsule {
        offset: 0,
        len: 512,
    });
    r.capsule(qb, &w, &pattern(40, 512));
    r.pump_transport();
    assert_eq!(
        writes_started(&r),
        super::group::MIN_CAPSULE_SHARE as usize + 1
    );
    // Once they run, every write of both is answered: A's waiting capsules
    // take the buffers its answered ones gave back.
    let c = r.cqe(qb);
    assert_eq!((c.cid, c.status.is_success()), (w.cid(), true));
    let mut answered: Vec<u16> = (0..20)
        .map(|_| r.cqe(qa))
        .map(|c| {
            assert!(c.status.is_success(), "{}", c.status);
            c.cid
        })
        .collect();
    answered.sort_unstable();
    sent.sort_unstable();
    assert_eq!(answered, sent);
    assert_eq!(r.read(qa, 19, 512), pattern(19, 512));
}

mod hogs;

/// The Linux host closes its sockets with a zero linger: a controller reset
/// ends its I/O queues with a TCP reset, then asks the admin queue for
/// CSTS. The reset ends that queue alone: the admin queue answers (ending
/// it with them left the host's Property Get unanswered until its 60 s
/// admin timeout, over TLS).
#[test]
fn an_io_queue_the_host_resets_ends_alone() {
    let mut r = Rig::new();
    let (a, cntlid) = r.admin(0);
    let q = r.io(0, cntlid);
    socket2::SockRef::from(&r.hosts[q].stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    let gone = std::mem::replace(
        &mut r.hosts[q].stream,
        TcpStream::connect(r.listener.local_addr().unwrap()).unwrap(),
    );
    drop(gone);
    // The queues' timers (a killed queue goes at its next).
    for _ in 0..3 {
        r.pump();
        r.group.tick(&mut r.exec);
    }
    assert!(!r.closed(a), "the admin queue went with the I/O queue");
    r.cid += 1;
    let mut g = PropertyCommand {
        eight_bytes: false,
        offset: prop::CSTS,
        value: 0,
    }
    .to_command(r.cid, false);
    g.set_sgl(&Sgl::Transport { len: 0 });
    r.capsule(a, &g, &[]);
    let c = r.cqe(a);
    assert!(c.status.is_success(), "{}", c.status);
    assert_eq!(c.result & 3, 1, "CSTS: ready, no fatal status");
}
