//! hostile-probe: what the kernel host never sends, sent to a target on
//! purpose. Each case opens its own RDMA-CM connection and prints one line,
//! `CASE <name> <outcome> [detail]`, where the outcome is a single token:
//! `accepted`, `reject:<NVMe/RDMA reject status>`, `status:<NVMe status>`,
//! `disconnected`, `timeout`, or a case's own summary. The lab's
//! differential suite (integration/guest/hostile.sh) runs it against nvmet
//! and against our target in one boot and compares the outcomes.
//!
//! Usage:
//! - `hostile-probe cases IP PORT NQN OTHER_CNTLID`: every case; OTHER_CNTLID
//!   is the controller of another host connected to NQN (the kernel host's).
//! - `hostile-probe flood IP PORT NQN COUNT DEADLINE_S`: COUNT connections
//!   that never send Connect; meanwhile a real host connects and reads; then
//!   how many of them the target hung up on within DEADLINE_S.
//! - `hostile-probe cycles IP PORT NQN N`: N connect / read / disconnect cycles
//!   of a whole controller (admin + one I/O queue).
//! - `hostile-probe kato0 IP PORT NQN SECONDS`: a controller with keep-alive
//!   off (KATO 0) and one I/O queue, idle for SECONDS (the target probes it
//!   at the RDMA level and must keep it).
//! - `hostile-probe vanish IP PORT NQN SECONDS [KATO_MS]`: a controller with
//!   keep-alive off (KATO 0, or KATO_MS: 4294967295 is 49 days), enabled, with one I/O queue, whose queue pairs then fall
//!   silent without a disconnect (error state: nothing acknowledged, as from
//!   a host that lost power); holds them for SECONDS. The target must find
//!   out by its RDMA-level probe and free the controller.
//!
//! - `hostile-probe shared IP PORT NQN OTHER_IP`: what a peer on a shared
//!   fabric may try on a queue (the `CASE` lines above): an I/O queue sent
//!   more commands than it holds (reads of namespace 2 of NQN, which is to be
//!   slow), several Connects at once on one queue, a Connect with far more data than a Connect has, and an
//!   I/O-queue Connect for this probe's controller (admin queue on IP) sent to
//!   the target's OTHER_IP, so from another address (soft-RoCE delivers a
//!   connection to a local address only from that same address).
//! - `hostile-probe pending IP PORT COUNT HOLD_S`: COUNT connections to IP
//!   that never send Connect; prints how many were accepted and how many
//!   refused, how many of those the target hung up on within a second of
//!   the last (evicted for newer ones), then holds the rest for HOLD_S
//!   seconds and prints how many it hung up on in all.
//!
//! The probe is its own host (`nqn.2026-11.io.nvmf-lab:probe`), so it is not
//! the kernel host of the same machine.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::cm::{CmRequest, RejectStatus};
use nvme::command::Command;
use nvme::fabrics::{prop, ConnectCommand, ConnectData, CONNECT_DATA_SIZE};
use nvme::Status;
use nvmf_initiator::host::HostIdentity;
use nvmf_initiator::transport::RawRequest;
use nvmf_initiator::{
    commands, ConnectOptions, Controller, Done, Error, HostQueue, QueueConfig, RdmaQueue,
    WindowMode, Xfer,
};
use rdma::{CmEventKind, CmId, ConnParams, EventChannel, QpCaps};

const PROBE_NQN: &str = "nqn.2026-11.io.nvmf-lab:probe";
const PROBE_ID: [u8; 16] = *b"hostile-probe-01";
const WAIT: Duration = Duration::from_secs(5);
/// Receive slots and data slots of the probe's queues (more than the target
/// is told, for the overrun cases).
const LOCAL_DEPTH: u16 = 64;

struct Probe {
    dst: SocketAddr,
    nqn: String,
    other_cntlid: u16,
}

fn cm_req(recfmt: u16, qid: u16, hrqsize: u16, hsqsize: u16) -> Vec<u8> {
    CmRequest {
        recfmt,
        qid,
        hrqsize,
        hsqsize,
    }
    .encode()
    .to_vec()
}

fn host() -> HostIdentity {
    HostIdentity::from_parts(Some(PROBE_NQN.into()), Some(PROBE_ID))
}

/// The outcome of a raw command as one token.
fn outcome(r: Result<nvmf_initiator::transport::RawOutcome, Error>) -> String {
    match r {
        Ok(o) => match o.cqe {
            Some(c) => status_token(c.status),
            None => lost(o.error.as_deref().unwrap_or("")),
        },
        Err(e) => lost(&e.to_string()),
    }
}

fn status_token(s: Status) -> String {
    match s.name() {
        Some(n) => format!("status:{n}"),
        None => format!("status:{:#05x}", s.code()),
    }
}

/// The outcome of an admin command run through [`Controller::admin`].
fn admin_token(r: Result<nvme::completion::Completion, Error>) -> String {
    match r {
        Ok(c) => status_token(c.status),
        Err(e) => match e.status() {
            Some(s) => status_token(s),
            None => lost(&e.to_string()),
        },
    }
}

fn lost(why: &str) -> String {
    if why.contains("timed out") {
        "timeout".into()
    } else if why.contains("flushed") || why.contains("disconnect") {
        "disconnected".into()
    } else {
        format!("error:{}", why.replace(' ', "_"))
    }
}

impl Probe {
    /// An RDMA-CM connection with `cm` as its private data (None: a valid
    /// request for `qid` with 32 entries).
    fn queue(&self, qid: u16, cm: Option<Vec<u8>>) -> Result<RdmaQueue, Error> {
        self.queue_to(self.dst, qid, cm, 8192)
    }

    /// As [`Probe::queue`], to `dst`, with data slots of `slot` bytes.
    fn queue_to(
        &self,
        dst: SocketAddr,
        qid: u16,
        cm: Option<Vec<u8>>,
        slot: usize,
    ) -> Result<RdmaQueue, Error> {
        let mut qc = QueueConfig::new(qid, LOCAL_DEPTH, slot);
        qc.windows = WindowMode::Mr;
        qc.timeout = WAIT;
        qc.cm_private = Some(cm.unwrap_or_else(|| cm_req(0, qid, 32, 31)));
        RdmaQueue::connect(dst, qc)
    }

    fn raw(&self, q: &mut RdmaQueue, cmd: &Command, xfer: Xfer, data: &[u8]) -> String {
        outcome(q.raw(
            &RawRequest {
                sqe: cmd.raw,
                in_capsule: &[],
                window: Some(xfer),
                write_data: data,
            },
            WAIT,
        ))
    }

    fn connect_data(&self, cntlid: u16) -> ConnectData {
        ConnectData {
            hostid: PROBE_ID,
            cntlid,
            subsysnqn: self.nqn.clone(),
            hostnqn: PROBE_NQN.into(),
        }
    }

    /// Sends a Connect with `cmd` and `data` (all 1024 bytes, or the first
    /// `len`) on queue `q`.
    fn connect(&self, q: &mut RdmaQueue, cmd: &Command, data: &ConnectData, len: usize) -> String {
        let d = data.encode();
        self.raw(q, cmd, Xfer::ToTarget(len as u32), &d[..len])
    }

    /// A new RDMA-CM connection (valid private data) and one Connect on it.
    fn connect_case(&self, cm_qid: u16, cmd: Command, data: ConnectData, len: usize) -> String {
        match self.queue(cm_qid, None) {
            Ok(mut q) => self.connect(&mut q, &cmd, &data, len),
            Err(e) => format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        }
    }

    /// An admin queue connected (Connect succeeded) but never enabled. Returns
    /// the queue and its controller id.
    fn admin_not_enabled(&self) -> Result<(RdmaQueue, u16), String> {
        self.admin_with_kato(0)
    }

    /// As [`Probe::admin_not_enabled`], with keep-alive timeout `kato_ms`.
    fn admin_with_kato(&self, kato_ms: u32) -> Result<(RdmaQueue, u16), String> {
        let mut q = self.queue(0, None).map_err(|e| e.to_string())?;
        let d = self.connect_data(0xFFFF).encode();
        let r = q
            .raw(
                &RawRequest {
                    sqe: commands::connect(0, 32, kato_ms).raw,
                    in_capsule: &[],
                    window: Some(Xfer::ToTarget(CONNECT_DATA_SIZE as u32)),
                    write_data: &d,
                },
                WAIT,
            )
            .map_err(|e| e.to_string())?;
        match r.cqe {
            Some(c) if c.status.is_success() => Ok((q, c.result as u16)),
            Some(c) => Err(format!("admin Connect: {}", c.status)),
            None => Err(format!("admin Connect: {:?}", r.error)),
        }
    }

    /// A controller brought up as a real host does, with no I/O queue yet.
    fn controller(&self) -> Result<Controller, Error> {
        let mut o = ConnectOptions::new(self.dst, &self.nqn);
        o.host = host();
        o.io_queues = 0;
        o.windows = WindowMode::Mr;
        o.timeout = WAIT;
        Controller::connect(&o)
    }

    /// An I/O queue of `ctrl` connected by hand (CM hsqsize 31, Connect 32).
    fn io_queue(&self, ctrl: &Controller, qid: u16) -> Result<RdmaQueue, String> {
        let mut q = self.queue(qid, None).map_err(|e| e.to_string())?;
        let st = self.connect(
            &mut q,
            &commands::connect(qid, 32, 0),
            &self.connect_data(ctrl.info().cntlid),
            CONNECT_DATA_SIZE,
        );
        if st != "status:SUCCESS" {
            return Err(format!("I/O Connect: {st}"));
        }
        Ok(q)
    }

    /// Sends `n` commands at once on `q` (which the target was told holds
    /// `told` entries) and collects responses for a while.
    fn burst(&self, q: &mut RdmaQueue, n: u16, cmd: &Command, xfer: Xfer) -> String {
        for _ in 0..n {
            let Some(tag) = q.alloc() else {
                return "error:no_local_slot".into();
            };
            if let Err(e) = q.submit(tag, *cmd, xfer) {
                return lost(&e.to_string());
            }
        }
        let mut answered = 0u16;
        let mut bad = 0u16;
        let mut done: Vec<Done> = Vec::new();
        let deadline = Instant::now() + WAIT;
        while answered < n && Instant::now() < deadline {
            match q.poll(&mut done, Duration::from_millis(200)) {
                Ok(_) => {
                    for d in done.drain(..) {
                        answered += 1;
                        if !d.cqe.status.is_success() {
                            bad += 1;
                        }
                        q.release(d.tag);
                    }
                }
                Err(e) => return format!("{}:after_{answered}_answers", lost(&e.to_string())),
            }
        }
        if answered == n {
            format!("answered:{n}:errors_{bad}")
        } else if q.peer_disconnected(Duration::from_millis(500)) {
            format!("disconnected:after_{answered}_answers")
        } else {
            format!("timeout:after_{answered}_answers")
        }
    }

    fn cases(&self) {
        let case = |name: &str, out: String| println!("CASE {name} {out}");
        let cm = |qid, cm| match self.queue(qid, Some(cm)) {
            Ok(_) => "accepted".to_string(),
            Err(Error::Rejected {
                status: Some(s), ..
            }) => match RejectStatus::from_code(s) {
                Some(r) => format!("reject:{r:?}"),
                None => format!("reject:status_{s}"),
            },
            Err(Error::Rejected { status: None, .. }) => "reject:no_status".into(),
            Err(e) => format!("error:{}", e.to_string().replace(' ', "_")),
        };
        // --- RDMA-CM private data, wrong in each field
        case("cm-recfmt-1", cm(0, cm_req(1, 0, 32, 31)));
        case("cm-no-private-data", cm(0, Vec::new()));
        case("cm-admin-hsqsize-0", cm(0, cm_req(0, 0, 32, 0)));
        case("cm-admin-hsqsize-32", cm(0, cm_req(0, 0, 33, 32)));
        case("cm-io-hsqsize-0", cm(1, cm_req(0, 1, 32, 0)));
        // nvmet-rdma 7.x allocates a queue of this size (about 1.2 GB per
        // attempt as the CM retries): a target that would die of it is not
        // sent it (HOSTILE_SKIP_HUGE_QUEUE).
        if std::env::var_os("HOSTILE_SKIP_HUGE_QUEUE").is_some() {
            case("cm-io-hsqsize-65535", "skipped".into());
        } else {
            case("cm-io-hsqsize-65535", cm(1, cm_req(0, 1, 32, 65535)));
        }
        case("cm-io-hrqsize-0", cm(1, cm_req(0, 1, 0, 31)));
        case("cm-qid-65535", cm(65535, cm_req(0, 65535, 32, 31)));
        case("cm-valid-admin", cm(0, cm_req(0, 0, 32, 31)));

        // --- Fabrics Connect, wrong in each part
        let full = CONNECT_DATA_SIZE;
        let admin = |sq| commands::connect(0, sq, 0);
        let d = self.connect_data(0xFFFF);
        let mut fmt1 = ConnectCommand::from_command(&admin(32));
        fmt1.recfmt = 1;
        case(
            "connect-recfmt-1",
            self.connect_case(0, fmt1.to_command(0), d.clone(), full),
        );
        case(
            "connect-data-512-bytes",
            self.connect_case(0, admin(32), d.clone(), 512),
        );
        case(
            "connect-qid-1-on-cm-qid-0",
            self.connect_case(0, commands::connect(1, 32, 0), d.clone(), full),
        );
        case(
            "connect-sqsize-ne-hsqsize",
            self.connect_case(0, admin(16), d.clone(), full),
        );
        case(
            "connect-sqsize-0",
            self.connect_case(0, admin(1), d.clone(), full),
        );
        let mut other = d.clone();
        other.subsysnqn = "nqn.2026-11.io.nvmf-lab:no-such-subsystem".into();
        case(
            "connect-unknown-subnqn",
            self.connect_case(0, admin(32), other, full),
        );
        let mut other = d.clone();
        other.hostnqn = String::new();
        case(
            "connect-empty-hostnqn",
            self.connect_case(0, admin(32), other, full),
        );
        // The identifier of another host (the kernel host's, connected
        // meanwhile) under this probe's NQN: it belongs to that host.
        let victim = std::env::var("HOSTILE_VICTIM_HOSTID")
            .ok()
            .and_then(|s| nvme::fabrics::parse_uuid(s.trim()));
        if let Some(id) = victim {
            let mut other = d.clone();
            other.hostid = id;
            case(
                "connect-victim-hostid",
                self.connect_case(0, admin(32), other, full),
            );
        }

        // --- before Connect, before CC.EN
        case("read-before-connect", {
            match self.queue(1, None) {
                Ok(mut q) => self.raw(
                    &mut q,
                    &commands::read(1, 0, 1),
                    Xfer::FromTarget(4096),
                    &[],
                ),
                Err(e) => format!("cm-failed:{e}"),
            }
        });
        case("property-get-before-connect", {
            match self.queue(0, None) {
                Ok(mut q) => self.raw(
                    &mut q,
                    &commands::property_get(prop::CAP, true),
                    Xfer::None,
                    &[],
                ),
                Err(e) => format!("cm-failed:{e}"),
            }
        });
        match self.admin_not_enabled() {
            Ok((mut q, cntlid)) => {
                case(
                    "identify-before-cc-en",
                    self.raw(
                        &mut q,
                        &commands::identify_controller(),
                        Xfer::FromTarget(4096),
                        &[],
                    ),
                );
                case(
                    "io-connect-before-cc-en",
                    self.connect_case(
                        1,
                        commands::connect(1, 32, 0),
                        self.connect_data(cntlid),
                        full,
                    ),
                );
            }
            Err(e) => {
                case("identify-before-cc-en", format!("setup-failed:{e}"));
                case("io-connect-before-cc-en", format!("setup-failed:{e}"));
            }
        }

        // --- I/O queue Connect against a live controller
        let ctrl = match self.controller() {
            Ok(c) => c,
            Err(e) => {
                println!("SETUP FAILED: controller: {e}");
                std::process::exit(1);
            }
        };
        let cntlid = ctrl.info().cntlid;
        // Eight I/O queues, so that each case that connects one uses its own
        // qid: a queue just dropped may still be leaving its controller.
        let granted = match ctrl.admin(commands::set_num_queues(8)) {
            Ok(c) if c.status.is_success() => ((c.result & 0xFFFF) as u16).saturating_add(1),
            Ok(c) => {
                println!("SETUP FAILED: Set Features Number of Queues: {}", c.status);
                std::process::exit(1);
            }
            Err(e) => {
                println!("SETUP FAILED: Set Features Number of Queues: {e}");
                std::process::exit(1);
            }
        };
        let io = |qid| commands::connect(qid, 32, 0);
        let mine = self.connect_data(cntlid);
        let mut x = mine.clone();
        x.cntlid = 0x7F00;
        case(
            "io-connect-unknown-cntlid",
            self.connect_case(1, io(1), x, full),
        );
        let mut x = mine.clone();
        x.cntlid = self.other_cntlid;
        case(
            "io-connect-other-hosts-cntlid",
            self.connect_case(1, io(1), x, full),
        );
        let mut x = mine.clone();
        x.hostid = *b"some-other-hosti";
        case(
            "io-connect-other-hostid",
            self.connect_case(1, io(1), x, full),
        );
        case(
            "io-connect-sqsize-ne-hsqsize",
            self.connect_case(1, commands::connect(1, 16, 0), mine.clone(), full),
        );
        let beyond = granted.saturating_add(1);
        case(
            "io-connect-qid-beyond-granted",
            self.connect_case(beyond, io(beyond), mine.clone(), full),
        );
        case(
            "io-connect-valid",
            self.connect_case(2, io(2), mine.clone(), full),
        );

        // --- commands on the wrong queue
        match self.io_queue(&ctrl, 3) {
            Ok(mut q) => {
                let mut c = |name: &str, cmd: Command, x: Xfer| {
                    let out = self.raw(&mut q, &cmd, x, &[]);
                    case(name, out)
                };
                c(
                    "io-queue-property-get",
                    commands::property_get(prop::CAP, true),
                    Xfer::None,
                );
                // nsid 1: an admin opcode, not a missing namespace, is what
                // is wrong with these.
                let mut id = commands::identify_controller();
                id.set_nsid(1);
                c("io-queue-identify-opcode", id, Xfer::FromTarget(4096));
                let mut ka = commands::keep_alive();
                ka.set_nsid(1);
                c("io-queue-keep-alive-opcode", ka, Xfer::None);
                c(
                    "io-queue-second-connect",
                    commands::connect(1, 32, 0),
                    Xfer::ToTarget(full as u32),
                );
                c(
                    "io-queue-read-ok",
                    commands::read(1, 0, 1),
                    Xfer::FromTarget(4096),
                );
            }
            Err(e) => println!("CASE io-queue-setup setup-failed:{}", e.replace(' ', "_")),
        }
        let mut unknown = commands::property_get(prop::CAP, true);
        unknown.raw[4] = 0x7E; // fctype
        case("admin-unknown-fctype", admin_token(ctrl.admin(unknown)));

        // --- a queue filled to its size, then overrun: told 16 entries, sent 40
        let told16 = |qid: u16, n: u16| match self.queue(qid, Some(cm_req(0, qid, LOCAL_DEPTH, 15)))
        {
            Ok(mut q) => {
                let st = self.connect(&mut q, &commands::connect(qid, 16, 0), &mine, full);
                if st == "status:SUCCESS" {
                    self.burst(&mut q, n, &commands::read(1, 0, 1), Xfer::FromTarget(4096))
                } else {
                    format!("setup-failed:{st}")
                }
            }
            Err(e) => format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        };
        case("io-queue-16-of-16-at-once", told16(4, 16));
        // The probe's controller still serves after all of the above.
        case("probe-controller-serves", {
            let mut page = vec![0u8; 4096];
            match ctrl.admin_read(commands::identify_controller(), &mut page) {
                Ok(_) => match self.io_queue(&ctrl, 5) {
                    Ok(mut q) => self.raw(
                        &mut q,
                        &commands::read(1, 0, 1),
                        Xfer::FromTarget(4096),
                        &[],
                    ),
                    Err(e) => format!("error:{}", e.replace(' ', "_")),
                },
                Err(e) => admin_token(Err(e)),
            }
        });
        case("io-queue-40-of-16-at-once", told16(6, 40));
        // Whatever the overrun cost this host, a new association works.
        case(
            "new-controller-after-overrun",
            self.cycle().map_or_else(
                |e| format!("error:{}", e.to_string().replace(' ', "_")),
                |_| "serves".into(),
            ),
        );
        let _ = ctrl.shutdown();
    }

    /// One whole controller: connect, one 4 KiB read on one I/O queue, clean
    /// shutdown.
    fn cycle(&self) -> Result<(), Error> {
        let mut o = ConnectOptions::new(self.dst, &self.nqn);
        o.host = host();
        o.io_queues = 1;
        o.queue_depth = 8;
        o.windows = WindowMode::Mr;
        o.timeout = WAIT;
        let c = Controller::connect(&o)?;
        {
            let mut qs = c.connect_io_queues()?;
            let q = qs
                .first_mut()
                .ok_or_else(|| Error::Protocol("no I/O queue".into()))?;
            let bs = c.identify_namespace(1)?.block_size().max(512);
            let blocks = (4096 / bs).max(1);
            let mut b = vec![0u8; (blocks * bs) as usize];
            q.read(1, 0, blocks as u32, &mut b)?;
        }
        c.shutdown()
    }

    fn cycles(&self, n: u32) {
        let t0 = Instant::now();
        let mut failed = 0u32;
        for i in 0..n {
            if let Err(e) = self.cycle() {
                failed += 1;
                if failed <= 5 {
                    println!("cycle {i}: {e}");
                }
            }
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "CYCLES {n} failed {failed} in {s:.1} s ({:.1} ms per cycle)",
            s * 1000.0 / n.max(1) as f64
        );
    }

    fn kato0(&self, secs: u64) {
        let mut o = ConnectOptions::new(self.dst, &self.nqn);
        o.host = host();
        o.kato = Duration::ZERO;
        o.io_queues = 1;
        o.windows = WindowMode::Mr;
        o.timeout = WAIT;
        let c = match Controller::connect(&o) {
            Ok(c) => c,
            Err(e) => {
                println!("KATO0 connect failed: {e}");
                std::process::exit(1);
            }
        };
        let _qs = match c.connect_io_queues() {
            Ok(q) => q,
            Err(e) => {
                println!("KATO0 I/O queue failed: {e}");
                std::process::exit(1);
            }
        };
        println!("KATO0 cntlid {} idle for {secs} s", c.info().cntlid);
        std::thread::sleep(Duration::from_secs(secs));
        let mut page = vec![0u8; 4096];
        match c.admin_read(commands::identify_controller(), &mut page) {
            Ok(_) => println!("KATO0 still connected"),
            Err(e) => println!("KATO0 lost: {e}"),
        }
    }

    /// An admin queue connected with keep-alive timeout `kato_ms` and its
    /// controller enabled (CC: EN, IOSQES 6 (64 B), IOCQES 4 (16 B)).
    fn admin_enabled(&self, kato_ms: u32) -> Result<(RdmaQueue, u16), String> {
        let (mut admin, cntlid) = self.admin_with_kato(kato_ms)?;
        let en = self.raw(
            &mut admin,
            &commands::property_set(prop::CC, 1 | (6 << 16) | (4 << 20)),
            Xfer::None,
            &[],
        );
        if en != "status:SUCCESS" {
            return Err(format!("CC.EN: {en}"));
        }
        Ok((admin, cntlid))
    }

    fn vanish(&self, secs: u64, kato_ms: u32) {
        let run = || -> Result<(u16, Vec<RdmaQueue>), String> {
            let (admin, cntlid) = self.admin_enabled(kato_ms)?;
            let mut io = self.queue(1, None).map_err(|e| e.to_string())?;
            let st = self.connect(
                &mut io,
                &commands::connect(1, 32, 0),
                &self.connect_data(cntlid),
                CONNECT_DATA_SIZE,
            );
            if st != "status:SUCCESS" {
                return Err(format!("I/O Connect: {st}"));
            }
            let mut qs = vec![admin, io];
            for q in &mut qs {
                q.go_silent().map_err(|e| e.to_string())?;
            }
            Ok((cntlid, qs))
        };
        match run() {
            Ok((cntlid, qs)) => {
                println!("VANISH cntlid {cntlid} silent for {secs} s");
                std::thread::sleep(Duration::from_secs(secs));
                drop(qs);
            }
            Err(e) => {
                println!("VANISH setup failed: {e}");
                std::process::exit(1);
            }
        }
    }

    /// Sends `n` Connects at once on one new admin queue, each with its
    /// 1,024 bytes by keyed SGL (so each fetches its data before it executes),
    /// and counts the answers: `success:S:refused:R:[statuses]`.
    fn concurrent_connects(&self, n: u16) -> String {
        let mut q = match self.queue(0, None) {
            Ok(q) => q,
            Err(e) => return format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        };
        let d = self.connect_data(0xFFFF).encode();
        for _ in 0..n {
            let Some(tag) = q.alloc() else {
                return "error:no_local_slot".into();
            };
            q.buffer_mut(tag)[..d.len()].copy_from_slice(&d);
            let xfer = Xfer::ToTarget(CONNECT_DATA_SIZE as u32);
            if let Err(e) = q.submit(tag, commands::connect(0, 32, 0), xfer) {
                return lost(&e.to_string());
            }
        }
        let (mut ok, mut refused) = (0u16, 0u16);
        let mut statuses = std::collections::BTreeSet::new();
        let mut done: Vec<Done> = Vec::new();
        let deadline = Instant::now() + WAIT;
        while ok + refused < n && Instant::now() < deadline {
            match q.poll(&mut done, Duration::from_millis(200)) {
                Ok(_) => {
                    for d in done.drain(..) {
                        if d.cqe.status.is_success() {
                            ok += 1;
                        } else {
                            refused += 1;
                            statuses.insert(status_token(d.cqe.status));
                        }
                        q.release(d.tag);
                    }
                }
                Err(e) => {
                    return format!("{}:after_{}_answers", lost(&e.to_string()), ok + refused)
                }
            }
        }
        let st: Vec<_> = statuses.into_iter().collect();
        format!("success:{ok}:refused:{refused}:[{}]", st.join(","))
    }

    /// A Connect whose keyed SGL offers `len` bytes (a Connect has 1,024).
    fn oversized_connect(&self, len: usize) -> String {
        match self.queue_to(self.dst, 0, None, len) {
            Ok(mut q) => {
                let mut data = vec![0u8; len];
                data[..CONNECT_DATA_SIZE].copy_from_slice(&self.connect_data(0xFFFF).encode());
                self.raw(
                    &mut q,
                    &commands::connect(0, 32, 0),
                    Xfer::ToTarget(len as u32),
                    &data,
                )
            }
            Err(e) => format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        }
    }

    /// This probe's controller, enabled; then an I/O queue for it sent to
    /// `other` (another address of the target: from another address).
    fn io_connect_via(&self, other: IpAddr) -> String {
        let (_admin, cntlid) = match self.admin_enabled(0) {
            Ok(a) => a,
            Err(e) => return format!("setup-failed:{}", e.replace(' ', "_")),
        };
        // The kernel host asks for its I/O queues with Set Features; a
        // controller that was never asked grants one.
        let dst = SocketAddr::new(other, self.dst.port());
        match self.queue_to(dst, 1, None, 8192) {
            Ok(mut q) => self.connect(
                &mut q,
                &commands::connect(1, 32, 0),
                &self.connect_data(cntlid),
                CONNECT_DATA_SIZE,
            ),
            Err(e) => format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        }
    }

    /// An I/O queue that told the target it holds 16 entries, sent `n`
    /// commands at once (more than 16: a host that ignores flow control):
    /// 4 KiB reads of namespace 2, which is to be slow, so that they are all
    /// outstanding at once.
    fn overrun(&self, n: u16) -> String {
        let ctrl = match self.controller() {
            Ok(c) => c,
            Err(e) => return format!("setup-failed:{}", e.to_string().replace(' ', "_")),
        };
        match self.queue(1, Some(cm_req(0, 1, LOCAL_DEPTH, 15))) {
            Ok(mut q) => {
                let d = self.connect_data(ctrl.info().cntlid);
                let st = self.connect(&mut q, &commands::connect(1, 16, 0), &d, CONNECT_DATA_SIZE);
                if st != "status:SUCCESS" {
                    return format!("setup-failed:{st}");
                }
                let read = commands::read(2, 0, 4096 / ctrl_block(&ctrl, 2));
                self.burst(&mut q, n, &read, Xfer::FromTarget(4096))
            }
            Err(e) => format!("cm-failed:{}", e.to_string().replace(' ', "_")),
        }
    }

    fn shared(&self, other: IpAddr) {
        let case = |name: &str, out: String| println!("CASE {name} {out}");
        case("io-queue-24-of-16-at-once", self.overrun(24));
        case("connect-concurrent-8", self.concurrent_connects(8));
        case("connect-data-128k", self.oversized_connect(128 * 1024));
        case("io-connect-other-peer", self.io_connect_via(other));
    }

    fn pending(&self, count: u16, hold: Duration) {
        let (mut conns, mut refused, mut failed) = (Vec::new(), 0, 0);
        for i in 0..count {
            match idle_connection(self.dst, i % 4) {
                Ok(c) => conns.push(c),
                Err(e) if e.contains("Rejected") => refused += 1,
                Err(e) => {
                    failed += 1;
                    println!("PENDING connection {i}: {e}");
                }
            }
        }
        println!(
            "PENDING to {} accepted {} refused {refused} failed {failed} of {count}",
            self.dst,
            conns.len()
        );
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        let mut gone = vec![false; conns.len()];
        for (g, c) in gone.iter_mut().zip(&conns) {
            *g =
                c.ch.wait_for(CmEventKind::Disconnected, Duration::from_millis(20))
                    .is_ok();
        }
        let early = gone.iter().filter(|&&g| g).count();
        println!("PENDING within 1 s: hung up on {early}");
        std::thread::sleep(hold.saturating_sub(t0.elapsed()));
        for (g, c) in gone.iter_mut().zip(&conns) {
            *g = *g
                || c.ch
                    .wait_for(CmEventKind::Disconnected, Duration::from_millis(200))
                    .is_ok();
        }
        println!(
            "PENDING held {hold:?}: hung up on {} of {}",
            gone.iter().filter(|&&g| g).count(),
            conns.len()
        );
    }

    fn flood(&self, count: u16, deadline: Duration) {
        let mut conns = Vec::new();
        let t0 = Instant::now();
        for i in 0..count {
            match idle_connection(self.dst, i % 4) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    println!("FLOOD connection {i} failed: {e}");
                    break;
                }
            }
        }
        let opened = conns.len();
        let served = self
            .cycle()
            .map_or_else(|e| format!("no:{e}"), |_| "yes".into());
        let mut gone = 0;
        for c in &conns {
            let left = deadline.saturating_sub(t0.elapsed());
            if c.ch.wait_for(CmEventKind::Disconnected, left).is_ok() {
                gone += 1;
            }
        }
        println!(
            "FLOOD opened {opened}/{count} served_meanwhile {served} hung_up {gone}/{opened} within {:.0} s",
            deadline.as_secs_f64()
        );
    }
}

/// The block size of namespace `nsid` of `ctrl` (512 if unknown).
fn ctrl_block(ctrl: &Controller, nsid: u32) -> u32 {
    let mut page = vec![0u8; 4096];
    match ctrl.admin_read(commands::identify_namespace(nsid), &mut page) {
        Ok(_) => {
            // LBA format FLBAS (byte 26) names; LBADS is byte 2 of each 4-byte
            // format descriptor starting at byte 128.
            let f = (page[26] & 0xF) as usize;
            let lbads = page[128 + 4 * f + 2];
            if (9..=12).contains(&lbads) {
                1 << lbads
            } else {
                512
            }
        }
        Err(_) => 512,
    }
}

/// A connection that never sends a Fabrics Connect: the id with its QP, and
/// the channel its events arrive on.
struct Idle {
    ch: Arc<EventChannel>,
    _id: CmId,
}

fn e<E: ToString>(e: E) -> String {
    e.to_string()
}

fn idle_connection(dst: SocketAddr, qid: u16) -> Result<Idle, String> {
    let ch = EventChannel::new().map_err(e)?;
    let mut id = CmId::new(&ch).map_err(e)?;
    id.resolve(None, dst, WAIT).map_err(e)?;
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    id.create_own_qp(8, caps).map_err(e)?;
    let req = cm_req(0, qid, 32, 31);
    let params = ConnParams {
        private_data: &req,
        responder_resources: 0,
        initiator_depth: 0,
        rnr_retry_count: 7,
        retry_count: 7,
    };
    id.connect(&params).map_err(e)?;
    ch.wait_for(CmEventKind::Established, WAIT)
        .map_err(|w| format!("{w:?}"))?;
    Ok(Idle { ch, _id: id })
}

fn usage() -> ! {
    eprintln!(
        "usage: hostile-probe cases IP PORT NQN OTHER_CNTLID\n       \
         hostile-probe flood IP PORT NQN COUNT DEADLINE_S\n       \
         hostile-probe cycles IP PORT NQN N\n       \
         hostile-probe kato0 IP PORT NQN SECONDS\n       \
         hostile-probe vanish IP PORT NQN SECONDS [KATO_MS]\n       \
         hostile-probe shared IP PORT NQN OTHER_IP\n       \
         hostile-probe pending IP PORT COUNT HOLD_S"
    );
    std::process::exit(2)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        usage();
    }
    let ip: IpAddr = a[2].parse().unwrap_or_else(|_| usage());
    let port: u16 = a[3].parse().unwrap_or_else(|_| usage());
    let num = |s: &str| -> u32 { s.parse().unwrap_or_else(|_| usage()) };
    let mut p = Probe {
        dst: SocketAddr::new(ip, port),
        nqn: a[4].clone(),
        other_cntlid: 0,
    };
    match a[1].as_str() {
        "cases" => {
            p.other_cntlid = num(&a[5]) as u16;
            p.cases();
        }
        "cycles" => p.cycles(num(&a[5])),
        "kato0" => p.kato0(num(&a[5]) as u64),
        "vanish" => p.vanish(num(&a[5]) as u64, a.get(6).map_or(0, |k| num(k))),
        "shared" => p.shared(a[5].parse().unwrap_or_else(|_| usage())),
        "pending" => p.pending(num(&a[4]) as u16, Duration::from_secs(num(&a[5]) as u64)),
        "flood" if a.len() == 7 => {
            p.flood(num(&a[5]) as u16, Duration::from_secs(num(&a[6]) as u64))
        }
        _ => usage(),
    }
}
