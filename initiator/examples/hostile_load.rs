//! hostile-load: the load of peers on a shared fabric that hold what a
//! target gives before anyone has proven anything, for the lab's hostile
//! runs (integration/guest/tcp.sh). Each mode runs for a bounded time against
//! one target address and prints its summary line every second (the last
//! line is the whole run's, however it was stopped).
//!
//! - `hostile-load stall IP PORT SRC ADDRS PER_ADDR SECONDS`: from ADDRS
//!   source addresses (SRC, SRC+1, ... : IPv4, all of 127/8 works on the
//!   loopback), PER_ADDR NVMe/TCP connections each that send nothing;
//!   whichever the target closes is opened again at once. Prints
//!   `STALL opened N closed_by_target M`.
//! - `hostile-load hog IP PORT CONNS SECONDS`: CONNS discovery controllers,
//!   each of its own host NQN (no key), that keep their admin queue full of
//!   Set Features asking to send 128 KiB (data by R2T) and never send the
//!   data the target asks for; a connection the target ends is opened
//!   again. Prints `HOG r2ts N refused M ended K`.
//! - `hostile-load garbage IP PORT SRC ADDRS CONNS SECONDS`: CONNS
//!   connections at a time, from ADDRS source addresses, each sending one
//!   kind of garbage (random bytes; an ICReq with random fields; a valid
//!   ICReq then a capsule of random bytes; a valid ICReq then a Connect
//!   with random data), then waiting up to 2 s for the target to hang up
//!   before it goes and another comes. Prints
//!   `GARBAGE sent N closed_by_target M lingered K`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use nvme::command::Command;
use nvme::fabrics::{cc, prop, ConnectCommand, ConnectData, PropertyCommand};
use nvme::tcp::{self, IcReq, Layout, Pdu, Rules};
use nvme::Sgl;

const WAIT: Duration = Duration::from_secs(3);

fn usage() -> ! {
    eprintln!(
        "usage: hostile-load stall IP PORT SRC ADDRS PER_ADDR SECONDS\n       \
         hostile-load hog IP PORT CONNS SECONDS\n       \
         hostile-load garbage IP PORT SRC ADDRS CONNS SECONDS"
    );
    std::process::exit(2)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or_default();
    let dst = SocketAddr::new(arg::<IpAddr>(&args, 1), arg(&args, 2));
    match mode {
        "stall" => stall(
            dst,
            arg(&args, 3),
            arg(&args, 4),
            arg(&args, 5),
            Duration::from_secs(arg(&args, 6)),
        ),
        "hog" => hog(dst, arg(&args, 3), Duration::from_secs(arg(&args, 4))),
        "garbage" => garbage(
            dst,
            arg(&args, 3),
            arg(&args, 4),
            arg(&args, 5),
            Duration::from_secs(arg(&args, 6)),
        ),
        _ => usage(),
    }
}

/// A non-blocking TCP connection to `dst` from `src` (connect under way).
fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let SocketAddr::V4(d) = dst else {
        return Err(std::io::ErrorKind::Unsupported.into());
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    bind(fd.as_raw_fd(), &SockaddrIn::from(SocketAddrV4::new(src, 0)))?;
    match connect(fd.as_raw_fd(), &SockaddrIn::from(d)) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => Ok(TcpStream::from(fd)),
        Err(e) => Err(e.into()),
    }
}

/// Whether the target ended `s` (a read sees its end or an error).
fn ended(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 512];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => return false,
            Err(_) => return true,
        }
    }
}

fn stall(dst: SocketAddr, src: Ipv4Addr, addrs: u32, per_addr: u32, secs: Duration) {
    let end = Instant::now() + secs;
    let srcs: Vec<Ipv4Addr> = (0..addrs)
        .map(|i| Ipv4Addr::from(u32::from(src) + i))
        .collect();
    let mut slots: Vec<(Ipv4Addr, Option<TcpStream>)> = srcs
        .iter()
        .flat_map(|&s| (0..per_addr).map(move |_| (s, None)))
        .collect();
    let (mut opened, mut closed) = (0u64, 0u64);
    let mut said = Instant::now();
    while Instant::now() < end {
        if said.elapsed() >= Duration::from_secs(1) {
            println!("STALL opened {opened} closed_by_target {closed}");
            said = Instant::now();
        }
        for (s, c) in slots.iter_mut() {
            if c.as_mut().is_some_and(ended) {
                closed += 1;
                *c = None;
            }
            if c.is_none() {
                if let Ok(t) = connect_from(*s, dst) {
                    opened += 1;
                    *c = Some(t);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("STALL opened {opened} closed_by_target {closed}");
}

/// A plain ICReq (no digests, no alignment).
fn icreq() -> [u8; tcp::IC_SIZE] {
    IcReq {
        pfv: 0,
        hpda: 0,
        digest: 0,
        maxr2t: 0,
    }
    .encode()
}

/// An admin queue's Connect, its 1 KiB of data in the capsule.
fn admin_connect() -> Command {
    let mut c = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato: 0,
    }
    .to_command(0);
    c.set_sgl(&Sgl::InCapsule {
        offset: 0,
        len: 1024,
    });
    c
}

/// One hog connection: a discovery controller whose admin queue is kept full
/// of Set Features waiting for data it never sends.
struct Hog {
    s: TcpStream,
    rx: Vec<u8>,
    rules: Rules,
    layout: Layout,
    cid: u16,
    out: u32,
}

impl Hog {
    fn open(dst: SocketAddr, n: usize) -> Option<Hog> {
        let s = TcpStream::connect_timeout(&dst, WAIT).ok()?;
        s.set_nodelay(true).ok()?;
        s.set_read_timeout(Some(WAIT)).ok()?;
        let mut h = Hog {
            s,
            rx: Vec::new(),
            rules: Rules::host(1 << 20),
            layout: Layout::default(),
            cid: 0,
            out: 0,
        };
        let req = icreq();
        h.s.write_all(&req).ok()?;
        matches!(h.next()?, Pdu2::IcResp).then_some(())?;
        h.layout = h.rules.agree(0, 0);
        let c = admin_connect();
        let d = ConnectData {
            hostid: [n as u8; 16],
            cntlid: 0xFFFF,
            subsysnqn: nvme::DISCOVERY_NQN.into(),
            hostnqn: format!("nqn.2026-11.io.nvmf-lab:hog-{n}"),
        }
        .encode();
        h.capsule(&c, &d).ok()?;
        matches!(h.next()?, Pdu2::Rsp(true)).then_some(())?;
        let en = PropertyCommand {
            eight_bytes: false,
            offset: prop::CC,
            value: (cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT) as u64,
        };
        let mut c = en.to_command(1, true);
        c.set_sgl(&Sgl::Transport { len: 0 });
        h.capsule(&c, &[]).ok()?;
        matches!(h.next()?, Pdu2::Rsp(true)).then_some(())?;
        h.s.set_nonblocking(true).ok()?;
        Some(h)
    }

    fn capsule(&mut self, c: &Command, data: &[u8]) -> std::io::Result<()> {
        let mut b = self.layout.cmd(&c.raw, data.len() as u32);
        b.extend_from_slice(data);
        self.s.write_all(&b)
    }

    /// The next PDU (blocking, within the read timeout), in short.
    fn next(&mut self) -> Option<Pdu2> {
        loop {
            if let Some(p) = self.parse() {
                return Some(p);
            }
            let mut buf = [0u8; 65536];
            match self.s.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
            }
        }
    }

    fn parse(&mut self) -> Option<Pdu2> {
        let (p, n) = match tcp::parse(&self.rx, &self.rules) {
            Ok(Some((p, n))) => (Pdu2::of(&p), n),
            _ => return None,
        };
        self.rx.drain(..n);
        Some(p)
    }

    /// Keeps 30 Set Features out; counts R2Ts and answers. False once the
    /// target ended the connection.
    fn pump(&mut self, r2ts: &mut u64, refused: &mut u64) -> bool {
        while self.out < 30 {
            self.cid = self.cid.wrapping_add(1).max(2);
            let mut c = Command::new(nvme::opcode::admin::SET_FEATURES, self.cid);
            c.set_cdw(10, nvme::opcode::fid::KEEP_ALIVE_TIMER as u32);
            c.set_sgl(&Sgl::Transport { len: 128 << 10 });
            if self.capsule(&c, &[]).is_err() {
                return false;
            }
            self.out += 1;
        }
        let mut buf = [0u8; 65536];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        while let Some(p) = self.parse() {
            match p {
                Pdu2::R2t => *r2ts += 1,
                Pdu2::Rsp(_) => {
                    *refused += 1;
                    self.out = self.out.saturating_sub(1);
                }
                Pdu2::Term => return false,
                _ => {}
            }
        }
        true
    }
}

/// What a hog needs of a PDU.
enum Pdu2 {
    IcResp,
    Rsp(bool),
    R2t,
    Term,
    Other,
}

impl Pdu2 {
    fn of(p: &Pdu<'_>) -> Pdu2 {
        match p {
            Pdu::IcResp(_) => Pdu2::IcResp,
            Pdu::Rsp(c) => Pdu2::Rsp(c.status.is_success()),
            Pdu::R2t(_) => Pdu2::R2t,
            Pdu::Term { .. } => Pdu2::Term,
            _ => Pdu2::Other,
        }
    }
}

fn hog(dst: SocketAddr, conns: usize, secs: Duration) {
    let end = Instant::now() + secs;
    let mut hogs: Vec<Option<Hog>> = (0..conns).map(|n| Hog::open(dst, n)).collect();
    let (mut r2ts, mut refused, mut ended) = (0u64, 0u64, 0u64);
    let mut said = Instant::now();
    while Instant::now() < end {
        if said.elapsed() >= Duration::from_secs(1) {
            println!("HOG r2ts {r2ts} refused {refused} ended {ended}");
            said = Instant::now();
        }
        for (n, h) in hogs.iter_mut().enumerate() {
            if h.as_mut().is_some_and(|x| !x.pump(&mut r2ts, &mut refused)) {
                ended += 1;
                *h = None;
            }
            if h.is_none() {
                *h = Hog::open(dst, n);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("HOG r2ts {r2ts} refused {refused} ended {ended}");
}

/// A small fast generator (xorshift64*): garbage needs no quality.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Garbage of kind `k`.
fn junk(k: u64, noise: &mut Noise) -> Vec<u8> {
    let ic = icreq();
    match k % 4 {
        0 => {
            let n = 72 + (noise.next() % 512) as usize;
            noise.bytes(n)
        }
        1 => {
            let mut b = ic.to_vec();
            let at = 1 + (noise.next() % 15) as usize;
            b[at] = noise.next() as u8;
            b[8 + (noise.next() % 8) as usize] = noise.next() as u8;
            b
        }
        2 => {
            let mut b = ic.to_vec();
            let mut sqe = [0u8; 64];
            sqe.copy_from_slice(&noise.bytes(64));
            let mut cap = Layout::default().cmd(&sqe, (noise.next() % 4096) as u32);
            cap[2] = noise.next() as u8; // hlen
            b.extend_from_slice(&cap);
            let n = (noise.next() % 256) as usize;
            b.extend_from_slice(&noise.bytes(n));
            b
        }
        _ => {
            let mut b = ic.to_vec();
            let c = admin_connect();
            b.extend_from_slice(&Layout::default().cmd(&c.raw, 1024));
            b.extend_from_slice(&noise.bytes(1024));
            b
        }
    }
}

fn garbage(dst: SocketAddr, src: Ipv4Addr, addrs: u32, conns: usize, secs: Duration) {
    let end = Instant::now() + secs;
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    // Each slot: its connection, since when, and whether its garbage went.
    let mut slots: Vec<Option<(TcpStream, Instant, bool)>> = (0..conns).map(|_| None).collect();
    let (mut sent, mut closed, mut lingered, mut k) = (0u64, 0u64, 0u64, 0u64);
    let mut said = Instant::now();
    while Instant::now() < end {
        if said.elapsed() >= Duration::from_secs(1) {
            println!("GARBAGE sent {sent} closed_by_target {closed} lingered {lingered}");
            said = Instant::now();
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some((s, since, went)) = slot {
                if !*went {
                    k += 1;
                    if s.write_all(&junk(k, &mut noise)).is_ok() {
                        *went = true;
                        sent += 1;
                    } else if since.elapsed() > WAIT {
                        *slot = None;
                    }
                } else if ended(s) {
                    closed += 1;
                    *slot = None;
                } else if since.elapsed() > Duration::from_secs(2) {
                    lingered += 1;
                    *slot = None;
                }
            }
            if slot.is_none() {
                let from = Ipv4Addr::from(u32::from(src) + (i as u32 % addrs.max(1)));
                if let Ok(t) = connect_from(from, dst) {
                    *slot = Some((t, Instant::now(), false));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("GARBAGE sent {sent} closed_by_target {closed} lingered {lingered}");
}
