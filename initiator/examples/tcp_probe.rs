//! tcp-probe: what a well-behaved NVMe/TCP host never sends, sent to a
//! target on purpose. Each case opens its own connection and prints one
//! line, `CASE <name> <outcome>`, where the outcome is a single token:
//! `connected` (the Connect succeeded), `status:<NVMe status>`,
//! `term:<fatal error status>` (a C2HTermReq), `closed` (the target closed
//! the connection without one), `open` (still open, nothing said, after the
//! case's wait), or a case's own. The lab's NVMe/TCP differential
//! (integration/guest/tcp.sh) runs it against nvmet-tcp and against our
//! target in one boot and compares the outcomes.
//!
//! Usage: `tcp-probe IP PORT NQN`. The probe is its own host
//! (`nqn.2026-11.io.nvmf-lab:tcp-probe`).
//!
//! `tcp-probe vanish IP PORT NQN SECONDS KATO_MS`: an admin queue connected
//! with keep-alive timeout KATO_MS (0: off; 4294967295: 49 days), then
//! silent for SECONDS, the connection held open: cut the probe's network
//! meanwhile and it is a host that lost power. Prints `VANISH cntlid N`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nvme::command::Command;
use nvme::fabrics::{ConnectCommand, ConnectData};
use nvme::tcp::{self, digest, fes, DataHeader, IcReq, Layout, Pdu, Rules};
use nvme::Sgl;

const PROBE_NQN: &str = "nqn.2026-11.io.nvmf-lab:tcp-probe";
const PROBE_ID: [u8; 16] = *b"tcp-probe-host01";
const WAIT: Duration = Duration::from_secs(3);

struct Conn {
    s: TcpStream,
    rx: Vec<u8>,
    rules: Rules,
    layout: Layout,
}

impl Conn {
    fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let s = TcpStream::connect_timeout(&addr, WAIT)?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            rx: Vec::new(),
            rules: Rules::host(1 << 20),
            layout: Layout::default(),
        })
    }

    fn send(&mut self, b: &[u8]) {
        let _ = self.s.write_all(b);
    }

    /// The next PDU's outcome within `wait`: the PDU, or `closed`/`open`.
    fn next(&mut self, wait: Duration) -> Result<Vec<u8>, String> {
        let end = Instant::now() + wait;
        loop {
            match tcp::parse(&self.rx, &self.rules) {
                Ok(Some((_, n))) => return Ok(self.rx.drain(..n).collect()),
                Ok(None) => {}
                Err(_) => return Err("garbled".into()),
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("open".into());
            }
            let _ = self.s.set_read_timeout(Some(left));
            let mut buf = [0u8; 65536];
            match self.s.read(&mut buf) {
                Ok(0) => return Err("closed".into()),
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err("open".into())
                }
                Err(_) => return Err("closed".into()),
            }
        }
    }

    /// What the target answers next, as an outcome token.
    fn outcome(&mut self, wait: Duration) -> String {
        match self.next(wait) {
            Err(o) => o,
            Ok(b) => match tcp::parse(&b, &self.rules) {
                Ok(Some((Pdu::Term { fes: f, .. }, _))) => format!("term:{}", fes_name(f)),
                Ok(Some((Pdu::Rsp(c), _))) if c.status.is_success() => "success".into(),
                Ok(Some((Pdu::Rsp(c), _))) => format!("status:{}", status_name(c.status)),
                Ok(Some((Pdu::R2t(_), _))) => "r2t".into(),
                Ok(Some((Pdu::IcResp(_), _))) => "icresp".into(),
                Ok(Some((Pdu::Data { .. }, _))) => "c2hdata".into(),
                _ => "garbled".into(),
            },
        }
    }

    /// ICReq with digests `dg`; true on an ICResp.
    fn init(&mut self, dg: u8) -> bool {
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            digest: dg,
            maxr2t: 0,
        }
        .encode();
        self.send(&req);
        let ok = matches!(self.next(WAIT), Ok(b) if b[0] == tcp::pdu_type::ICRESP);
        if ok {
            self.layout = self.rules.agree(dg, 0);
        }
        ok
    }

    fn capsule(&mut self, c: &Command, data: &[u8]) {
        let mut b = self.layout.cmd(&c.raw, data.len() as u32);
        b.extend_from_slice(data);
        if self.layout.ddgst && !data.is_empty() {
            b.extend_from_slice(&tcp::crc(data).to_le_bytes());
        }
        self.send(&b);
    }
}

fn fes_name(f: u16) -> &'static str {
    match f {
        fes::INVALID_HEADER_FIELD => "invalid_header_field",
        fes::PDU_SEQUENCE_ERROR => "pdu_sequence_error",
        fes::HEADER_DIGEST_ERROR => "header_digest_error",
        fes::DATA_OUT_OF_RANGE => "data_out_of_range",
        fes::DATA_LIMIT_EXCEEDED => "data_limit_exceeded",
        fes::UNSUPPORTED_PARAMETER => "unsupported_parameter",
        _ => "other",
    }
}

fn status_name(s: nvme::Status) -> String {
    s.name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:#x}", s.code()))
}

/// An admin-queue Connect to `nqn`, its data in the capsule (`sgl`: how
/// the SGL names it).
fn connect_cmd(sgl: Sgl) -> Command {
    connect_kato(sgl, 5000)
}

/// An admin-queue Connect with keep-alive timeout `kato` (ms).
fn connect_kato(sgl: Sgl, kato: u32) -> Command {
    let mut c = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato,
    }
    .to_command(1);
    c.set_sgl(&sgl);
    c
}

fn connect_data(nqn: &str) -> Vec<u8> {
    ConnectData {
        hostid: PROBE_ID,
        cntlid: 0xFFFF,
        subsysnqn: nqn.into(),
        hostnqn: PROBE_NQN.into(),
    }
    .encode()
    .to_vec()
}

fn in_capsule() -> Sgl {
    Sgl::InCapsule {
        offset: 0,
        len: 1024,
    }
}

/// Sends an admin Connect whose data is to be fetched by R2T; the R2T, or
/// the outcome when none came.
fn connect_by_r2t(c: &mut Conn) -> Result<tcp::R2t, String> {
    c.capsule(&connect_cmd(Sgl::Transport { len: 1024 }), &[]);
    let b = c.next(WAIT).map_err(|o| format!("no_r2t:{o}"))?;
    match tcp::parse(&b, &c.rules) {
        Ok(Some((Pdu::R2t(t), _))) => Ok(t),
        _ => Err("no_r2t".into()),
    }
}

/// Runs one case on a fresh connection.
fn case(addr: SocketAddr, nqn: &str, name: &str) -> String {
    let Ok(mut c) = Conn::open(addr) else {
        return "refused".into();
    };
    match name {
        "good" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            c.capsule(&connect_cmd(in_capsule()), &connect_data(nqn));
            match c.outcome(WAIT).as_str() {
                "success" => "connected".into(),
                o => o.into(),
            }
        }
        "good-digests" => {
            if !c.init(digest::HEADER | digest::DATA) {
                return "no_icresp".into();
            }
            c.capsule(&connect_cmd(in_capsule()), &connect_data(nqn));
            match c.outcome(WAIT).as_str() {
                "success" => "connected".into(),
                o => o.into(),
            }
        }
        "pdu-before-icreq" => {
            c.layout = Layout::default();
            c.rules.initialized = true;
            c.capsule(&connect_cmd(in_capsule()), &connect_data(nqn));
            c.outcome(WAIT)
        }
        "second-icreq" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let again = IcReq {
                pfv: 0,
                hpda: 0,
                digest: 0,
                maxr2t: 0,
            }
            .encode();
            c.send(&again);
            c.outcome(WAIT)
        }
        "icreq-bad-pfv" => {
            let mut req = IcReq {
                pfv: 0,
                hpda: 0,
                digest: 0,
                maxr2t: 0,
            }
            .encode();
            req[8] = 7;
            c.send(&req);
            c.outcome(WAIT)
        }
        "half-icreq" => {
            // Half of an ICReq, then nothing: how long does the target wait?
            let req = IcReq {
                pfv: 0,
                hpda: 0,
                digest: 0,
                maxr2t: 0,
            }
            .encode();
            c.send(&req[..64]);
            c.outcome(Duration::from_secs(8))
        }
        "unknown-pdu-type" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let mut b = c.layout.cmd(&connect_cmd(in_capsule()).raw, 0);
            b[0] = 0x42;
            c.send(&b);
            c.outcome(WAIT)
        }
        "wrong-hlen" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let mut b = c.layout.cmd(&connect_cmd(in_capsule()).raw, 0);
            b[2] = 24;
            c.send(&b);
            c.outcome(WAIT)
        }
        "oversized-plen" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            // A capsule claiming 16 MiB of in-capsule data: only its header
            // is sent.
            let mut b = c.layout.cmd(&connect_cmd(in_capsule()).raw, 1024);
            let plen = (b.len() + (16 << 20)) as u32;
            b[4..8].copy_from_slice(&plen.to_le_bytes());
            c.send(&b);
            c.outcome(WAIT)
        }
        "truncated-capsule" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let mut b = c.layout.cmd(&connect_cmd(in_capsule()).raw, 1024);
            b.extend_from_slice(&connect_data(nqn)[..512]);
            c.send(&b);
            c.outcome(Duration::from_secs(8))
        }
        "bad-header-digest" => {
            if !c.init(digest::HEADER) {
                return "no_icresp".into();
            }
            let mut b = c.layout.cmd(&connect_cmd(in_capsule()).raw, 1024);
            b[20] ^= 0x40;
            b.extend_from_slice(&connect_data(nqn));
            c.send(&b);
            c.outcome(WAIT)
        }
        "bad-data-digest" => {
            // A Connect whose in-capsule data fails its data digest.
            if !c.init(digest::HEADER | digest::DATA) {
                return "no_icresp".into();
            }
            let data = connect_data(nqn);
            let mut b = c
                .layout
                .cmd(&connect_cmd(in_capsule()).raw, data.len() as u32);
            b.extend_from_slice(&data);
            b.extend_from_slice(&(tcp::crc(&data) ^ 1).to_le_bytes());
            c.send(&b);
            c.outcome(WAIT)
        }
        "h2c-without-r2t" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let d = DataHeader {
                cccid: 1,
                ttag: 5,
                datao: 0,
                datal: 512,
            };
            let mut b = c.layout.data(true, &d, tcp::flags::DATA_LAST);
            b.extend_from_slice(&[0u8; 512]);
            c.send(&b);
            c.outcome(WAIT)
        }
        "h2c-outside-r2t" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            // The Connect's data by R2T instead of in the capsule.
            let t = match connect_by_r2t(&mut c) {
                Ok(t) => t,
                Err(o) => return o,
            };
            let d = DataHeader {
                cccid: t.cccid,
                ttag: t.ttag,
                datao: 512,
                datal: 1024,
            };
            let mut b = c.layout.data(true, &d, tcp::flags::DATA_LAST);
            b.extend_from_slice(&[0u8; 1024]);
            c.send(&b);
            c.outcome(WAIT)
        }
        "connect-by-r2t" => {
            if !c.init(0) {
                return "no_icresp".into();
            }
            let t = match connect_by_r2t(&mut c) {
                Ok(t) => t,
                Err(o) => return o,
            };
            let d = DataHeader {
                cccid: t.cccid,
                ttag: t.ttag,
                datao: 0,
                datal: 1024,
            };
            let mut b = c.layout.data(true, &d, tcp::flags::DATA_LAST);
            b.extend_from_slice(&connect_data(nqn));
            c.send(&b);
            match c.outcome(WAIT).as_str() {
                "success" => "connected".into(),
                o => o.into(),
            }
        }
        _ => "unknown_case".into(),
    }
}

const CASES: &[&str] = &[
    "good",
    "good-digests",
    "connect-by-r2t",
    "pdu-before-icreq",
    "second-icreq",
    "icreq-bad-pfv",
    "half-icreq",
    "unknown-pdu-type",
    "wrong-hlen",
    "oversized-plen",
    "truncated-capsule",
    "bad-header-digest",
    "bad-data-digest",
    "h2c-without-r2t",
    "h2c-outside-r2t",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("vanish") {
        return vanish(&args[2..]);
    }
    if args.len() < 4 {
        eprintln!("usage: tcp-probe IP PORT NQN");
        std::process::exit(2);
    }
    let addr = SocketAddr::new(
        args[1].parse().expect("an IP address"),
        args[2].parse().expect("a port"),
    );
    for name in CASES {
        println!("CASE {name} {}", case(addr, &args[3], name));
    }
}

/// `vanish IP PORT NQN SECONDS KATO_MS`.
fn vanish(args: &[String]) {
    if args.len() < 5 {
        eprintln!("usage: tcp-probe vanish IP PORT NQN SECONDS KATO_MS");
        std::process::exit(2);
    }
    let addr = SocketAddr::new(
        args[0].parse().expect("an IP address"),
        args[1].parse().expect("a port"),
    );
    let secs: u64 = args[3].parse().expect("seconds");
    let kato: u32 = args[4].parse().expect("a keep-alive timeout in ms");
    let mut c = Conn::open(addr).unwrap_or_else(|e| {
        println!("VANISH setup failed: {e}");
        std::process::exit(1)
    });
    if !c.init(0) {
        println!("VANISH setup failed: no ICResp");
        std::process::exit(1);
    }
    c.capsule(&connect_kato(in_capsule(), kato), &connect_data(&args[2]));
    let b = c.next(WAIT).unwrap_or_default();
    match tcp::parse(&b, &c.rules) {
        Ok(Some((Pdu::Rsp(r), _))) if r.status.is_success() => {
            println!("VANISH cntlid {}", r.result as u16);
        }
        _ => {
            println!("VANISH setup failed: {}", c.outcome(Duration::ZERO));
            std::process::exit(1);
        }
    }
    std::thread::sleep(Duration::from_secs(secs));
    drop(c);
}
