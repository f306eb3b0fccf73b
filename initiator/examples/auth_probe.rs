//! auth-probe: what a host that does not follow DH-HMAC-CHAP sends, sent to
//! a target on purpose. Each case connects its own admin queue as HOSTNQN
//! (a host the target requires to authenticate), sends its messages and
//! prints one line, `CASE <name> <outcome>`, where the outcome is a single
//! token: `status:<NVMe status>` (a command failed), `failure1:<reason>`
//! (the controller's Failure1), `challenge`, `success1`, `disconnected`
//! (the target hung up), `none` (a queue that stopped answering: torn down
//! without a message), or `error`. The
//! lab's authentication suite (integration/guest/auth.sh) runs it against
//! nvmet and our target in one boot and compares the outcomes.
//!
//! Usage: `auth-probe IP PORT SUBNQN HOSTNQN HOSTID SECRET`; SECRET is the
//! host's `DHHC-1` key, for the case that must succeed (`good`).
//! `NVMF_TRANSPORT=tcp` runs it over NVMe/TCP.
//!
//! `auth-probe IP PORT SUBNQN HOSTNQN HOSTID SECRET hold N SRC SECONDS`:
//! what a peer that knows only a keyed host's NQN does to lock it out:
//! opens N admin queues from address SRC as that host, never
//! authenticates, prints `HELD <connected> OF <N> <statuses>` and holds
//! them SECONDS.
//!
//! `auth-probe IP PORT SUBNQN HOSTNQN HOSTID SECRET flood THREADS SRC ADDRS SECONDS`:
//! what makes a target compute for strangers: THREADS loops, each from one
//! of ADDRS source addresses (SRC, SRC+1, ...), connect an admin queue as
//! HOSTNQN, negotiate SHA-256 with every FFDHE group (the target takes
//! the host's, and computes its exponentiation), take the challenge and
//! hang up, for SECONDS. Prints
//! `FLOOD challenges N refused M other K` (K: no answer, or another).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dhchap::host::Transaction;
use dhchap::Secret;
use nvme::auth::{AuthCommand, Message};
use nvme::fabrics::{ConnectData, CONNECT_DATA_SIZE};
use nvme::Command;
use nvmf_initiator::auth::{CONNECT_ATR, RECEIVE_LEN};
use nvmf_initiator::host::parse_uuid;
use nvmf_initiator::{commands, HostQueue, Kind, Queue, QueueConfig, Xfer};

// nvmet answers some broken sequences with nothing at all; every answer it gives comes
// within a second, even under TCG, so a longer wait only slows the suite.
const WAIT: Duration = Duration::from_secs(5);

struct Probe {
    dst: SocketAddr,
    sub: String,
    host: String,
    hostid: [u8; 16],
    key: Secret,
}

/// One admin queue, connected, not authenticated.
struct Admin {
    q: Queue,
}

impl Admin {
    fn run(
        &mut self,
        cmd: Command,
        xfer: Xfer,
        out: &[u8],
        inp: &mut [u8],
    ) -> Option<nvme::Completion> {
        self.q
            .execute(cmd, xfer, out, inp, WAIT, &mut |q, d| q.release(d.tag))
            .ok()
    }

    /// Authentication Send of `msg` (`tl` in the command; `len` bytes moved).
    fn send_as(&mut self, msg: &[u8], tl: u32, len: u32) -> Result<(), String> {
        let cmd = AuthCommand::dhchap(tl).to_command(0, false);
        match self.run(cmd, Xfer::ToTarget(len), msg, &mut []) {
            None => Err("none".into()),
            Some(c) if !c.status.is_success() => Err(format!("status:{}", name(c.status))),
            Some(_) => Ok(()),
        }
    }

    fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        self.send_as(msg, msg.len() as u32, msg.len() as u32)
    }

    /// Authentication Receive of `al` bytes: the message, or the outcome.
    fn receive(&mut self, al: u32) -> Result<Vec<u8>, String> {
        let cmd = AuthCommand::dhchap(al).to_command(0, true);
        let mut buf = vec![0u8; al as usize];
        match self.run(cmd, Xfer::FromTarget(al), &[], &mut buf) {
            None => Err("none".into()),
            Some(c) if !c.status.is_success() => Err(format!("status:{}", name(c.status))),
            Some(_) => Ok(buf),
        }
    }

    /// The outcome a received message stands for.
    fn outcome(&mut self, al: u32) -> String {
        match self.receive(al) {
            Err(o) => o,
            Ok(b) => describe(&b),
        }
    }
}

fn name(s: nvme::Status) -> String {
    s.name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:#x}", s.code()))
}

fn describe(b: &[u8]) -> String {
    match Message::parse(b) {
        Ok(Message::Failure { explanation, .. }) => {
            format!("failure1:{}", nvme::auth::reason::name(explanation))
        }
        Ok(Message::Challenge { .. }) => "challenge".into(),
        Ok(Message::Success1 { .. }) => "success1".into(),
        Ok(m) => format!("message:{:#x}", m.auth_id()),
        Err(_) => "error".into(),
    }
}

fn negotiate(t_id: u16, hashes: Vec<u8>, groups: Vec<u8>) -> Vec<u8> {
    Message::negotiate(t_id, &hashes, &groups).encode()
}

fn all_ids() -> Vec<u8> {
    vec![0, 1, 2, 3, 4, 5]
}

impl Probe {
    fn admin(&self) -> Result<Admin, String> {
        self.admin_from(None)
    }

    /// An admin queue from source address `src` (any, when `None`).
    fn admin_from(&self, src: Option<IpAddr>) -> Result<Admin, String> {
        let mut qc = QueueConfig::new(0, 32, 8192);
        qc.timeout = WAIT;
        qc.src = src.map(|ip| SocketAddr::new(ip, 0));
        let mut q =
            Queue::connect(transport(), self.dst, qc).map_err(|e| format!("connect: {e}"))?;
        let data = ConnectData {
            hostid: self.hostid,
            cntlid: 0xFFFF,
            subsysnqn: self.sub.clone(),
            hostnqn: self.host.clone(),
        }
        .encode();
        let c = q
            .execute(
                commands::connect(0, 32, 0),
                Xfer::ToTarget(CONNECT_DATA_SIZE as u32),
                &data,
                &mut [],
                WAIT,
                &mut |q, d| q.release(d.tag),
            )
            .map_err(|e| format!("Connect: {e}"))?;
        if !c.status.is_success() {
            return Err(format!("Connect: {}", c.status));
        }
        if c.result & CONNECT_ATR == 0 {
            return Err("the controller does not require authentication".into());
        }
        Ok(Admin { q })
    }

    /// The host's own transaction up to its Reply (a valid one).
    fn reply(&self, a: &mut Admin, t_id: u16) -> Result<Vec<u8>, String> {
        let mut tx = Transaction::new(self.key.clone(), None, &self.host, &self.sub, t_id);
        a.send(&tx.negotiate())?;
        let chal = a.receive(RECEIVE_LEN)?;
        tx.challenge(&chal).map_err(|e| format!("host: {e}"))
    }

    fn case(&self, name: &str) -> String {
        let mut a = match self.admin() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{name}: {e}");
                return "error".into();
            }
        };
        let r: Result<String, String> = (|| {
            Ok(match name {
                "good" => {
                    let reply = self.reply(&mut a, 1)?;
                    a.send(&reply)?;
                    a.outcome(RECEIVE_LEN)
                }
                "identify-first" => match a.run(
                    commands::identify_controller(),
                    Xfer::FromTarget(4096),
                    &[],
                    &mut [0; 4096],
                ) {
                    Some(c) => format!("status:{}", name_of(c.status)),
                    None => "none".into(),
                },
                "property-get-first" => {
                    match a.run(commands::property_get(0, true), Xfer::None, &[], &mut []) {
                        Some(c) => format!("status:{}", name_of(c.status)),
                        None => "none".into(),
                    }
                }
                "receive-first" => a.outcome(RECEIVE_LEN),
                "reply-first" => {
                    let m = Message::Reply {
                        t_id: 1,
                        cvalid: false,
                        seqnum: 0,
                        response: vec![0; 32],
                        challenge: vec![0; 32],
                        dhv: vec![],
                    };
                    a.send(&m.encode())?;
                    a.outcome(RECEIVE_LEN)
                }
                "success2-first" => {
                    a.send(&Message::Success2 { t_id: 1 }.encode())?;
                    a.outcome(RECEIVE_LEN)
                }
                "unknown-message" => {
                    a.send(&[0x07, 0x07, 0, 0, 1, 0, 0, 0])?;
                    a.outcome(RECEIVE_LEN)
                }
                "negotiate-short" => {
                    a.send(&negotiate(1, vec![1], all_ids())[..40])?;
                    a.outcome(RECEIVE_LEN)
                }
                "negotiate-unknown-hash" => {
                    a.send(&negotiate(1, vec![0x10, 0x20], all_ids()))?;
                    a.outcome(RECEIVE_LEN)
                }
                "negotiate-unknown-group" => {
                    a.send(&negotiate(1, vec![1, 2, 3], vec![0x10]))?;
                    a.outcome(RECEIVE_LEN)
                }
                "reply-wrong-tid" => {
                    let mut reply = self.reply(&mut a, 1)?;
                    reply[4] ^= 0x55;
                    a.send(&reply)?;
                    a.outcome(RECEIVE_LEN)
                }
                "reply-truncated" => {
                    let reply = self.reply(&mut a, 1)?;
                    a.send(&reply[..16 + 32])?;
                    a.outcome(RECEIVE_LEN)
                }
                "reply-wrong-response" => {
                    let mut reply = self.reply(&mut a, 1)?;
                    reply[16] ^= 1;
                    a.send(&reply)?;
                    a.outcome(RECEIVE_LEN)
                }
                "renegotiate-4-times" => {
                    // Each Negotiate and Receive costs the target a challenge
                    // (with a group, an exponentiation): three, then the fourth.
                    for _ in 0..3 {
                        a.send(&negotiate(1, vec![1], all_ids()))?;
                        a.receive(RECEIVE_LEN)?;
                    }
                    a.send(&negotiate(1, vec![1], all_ids()))?;
                    if a.q.peer_disconnected(Duration::from_secs(5)) {
                        "disconnected".into()
                    } else {
                        a.outcome(RECEIVE_LEN)
                    }
                }
                "send-length-mismatch" => {
                    let n = negotiate(1, vec![1], all_ids());
                    match a.send_as(&n, n.len() as u32, 64) {
                        Ok(()) => "accepted".into(),
                        Err(o) => o,
                    }
                }
                "send-wrong-secp" => {
                    let n = negotiate(1, vec![1], all_ids());
                    let mut cmd = AuthCommand::dhchap(n.len() as u32).to_command(0, false);
                    cmd.raw[43] = 0xEA;
                    match a.run(cmd, Xfer::ToTarget(n.len() as u32), &n, &mut []) {
                        Some(c) => format!("status:{}", name_of(c.status)),
                        None => "none".into(),
                    }
                }
                other => return Err(format!("unknown case {other}")),
            })
        })();
        r.unwrap_or_else(|e| e)
    }
}

fn name_of(s: nvme::Status) -> String {
    name(s)
}

const CASES: &[&str] = &[
    "good",
    "identify-first",
    "property-get-first",
    "receive-first",
    "reply-first",
    "success2-first",
    "unknown-message",
    "negotiate-short",
    "negotiate-unknown-hash",
    "negotiate-unknown-group",
    "reply-wrong-tid",
    "reply-truncated",
    "reply-wrong-response",
    "renegotiate-4-times",
    "send-length-mismatch",
    "send-wrong-secp",
];

/// The fabric: `NVMF_TRANSPORT` (rdma, the default, or tcp).
fn transport() -> Kind {
    std::env::var("NVMF_TRANSPORT")
        .ok()
        .map_or(Kind::Rdma, |t| {
            t.parse().expect("NVMF_TRANSPORT: rdma or tcp")
        })
}

/// The flood: see the module's documentation.
fn flood(p: Probe, threads: usize, src: std::net::Ipv4Addr, addrs: u32, secs: u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let p = Arc::new(p);
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (p, counts) = (p.clone(), counts.clone());
            let ip = std::net::Ipv4Addr::from(u32::from(src) + (i as u32 % addrs.max(1)));
            std::thread::spawn(move || {
                let mut t_id = i as u16;
                while std::time::Instant::now() < end {
                    t_id = t_id.wrapping_add(threads as u16);
                    let k = match p.admin_from(Some(IpAddr::V4(ip))) {
                        Err(_) => 1,
                        Ok(mut a) => match a.send(&negotiate(t_id, vec![1], vec![1, 2, 3, 4, 5])) {
                            Err(_) => 2,
                            Ok(()) => match a.outcome(RECEIVE_LEN).as_str() {
                                "challenge" => 0,
                                _ => 2,
                            },
                        },
                    };
                    counts[k].fetch_add(1, Ordering::Relaxed);
                    if k != 0 {
                        // Refused or dropped: as a peer would, come back soon.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let n = |i: usize| counts[i].load(Ordering::Relaxed);
    println!("FLOOD challenges {} refused {} other {}", n(0), n(1), n(2));
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let flooding = a.len() == 12 && a[7] == "flood";
    if a.len() != 7 && !(a.len() == 11 && a[7] == "hold") && !flooding {
        eprintln!(
            "usage: auth-probe IP PORT SUBNQN HOSTNQN HOSTID SECRET \
             [hold N SRC SECONDS | flood THREADS SRC ADDRS SECONDS]"
        );
        std::process::exit(2);
    }
    let ip: IpAddr = a[1].parse().expect("IP");
    let port: u16 = a[2].parse().expect("PORT");
    let p = Probe {
        dst: SocketAddr::new(ip, port),
        sub: a[3].clone(),
        host: a[4].clone(),
        hostid: parse_uuid(&a[5]).expect("HOSTID is a UUID"),
        key: Secret::parse(&a[6]).expect("SECRET is a DHHC-1 key"),
    };
    if flooding {
        let threads: usize = a[8].parse().expect("THREADS");
        let src: std::net::Ipv4Addr = a[9].parse().expect("SRC (IPv4)");
        let addrs: u32 = a[10].parse().expect("ADDRS");
        let secs: u64 = a[11].parse().expect("SECONDS");
        return flood(p, threads, src, addrs, secs);
    }
    if a.len() == 11 {
        let n: usize = a[8].parse().expect("N");
        let src: IpAddr = a[9].parse().expect("SRC");
        let secs: u64 = a[10].parse().expect("SECONDS");
        let mut held = Vec::new();
        let mut outcomes = Vec::new();
        for _ in 0..n {
            match p.admin_from(Some(src)) {
                Ok(q) => {
                    held.push(q);
                    outcomes.push("connected".to_string());
                }
                Err(e) => outcomes.push(e.replace(' ', "_")),
            }
        }
        println!("HELD {} OF {n} {}", held.len(), outcomes.join(","));
        std::thread::sleep(Duration::from_secs(secs));
        return;
    }
    for c in CASES {
        println!("CASE {c} {}", p.case(c));
        // The target tears a failed association down: let it go first.
        std::thread::sleep(Duration::from_millis(300));
    }
}
