//! One NVMe/TCP queue on the host side: a TCP connection initialized by
//! ICReq/ICResp, command capsules (small writes with their data in the
//! capsule), the target's R2Ts answered with H2CData from the slot, C2HData
//! copied into the slot (a read the target ends with the SUCCESS flag has
//! no response capsule), responses. Every PDU from the target is framed
//! and checked by [`nvme::tcp::parse`] and checked against the command it
//! names: data beyond the transfer, or for a command that moves none the
//! other way, fails the queue.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nvme::command::Command;
use nvme::completion::Completion;
use nvme::fabrics::CONNECT_DATA_SIZE;
use nvme::sgl::Sgl;
use nvme::tcp::{self, digest, flags, DataHeader, IcReq, Layout, Pdu, Rules};
use nvme::Status;

use super::tls::{self, Stream};
use super::{raw_outcome, Common, Done, HostQueue, QueueConfig, RawOutcome, RawRequest, Xfer};
use crate::error::{Error, Result};
use crate::slots::Next;

/// In-capsule data the admin queue may carry (what a target's admin queue
/// takes on NVMe/TCP, as Linux's host assumes).
const ADMIN_CAPSULE_DATA: usize = 8192;

/// One connected NVMe/TCP queue.
pub struct TcpQueue {
    s: Stream,
    rules: Rules,
    layout: Layout,
    maxh2cdata: u32,
    bufs: Vec<Vec<u8>>,
    xfers: Vec<Xfer>,
    tx: Vec<u8>,
    rx: Vec<u8>,
    c: Common,
}

fn pollfd_wait(s: &TcpStream, f: PollFlags, wait: Duration) -> std::io::Result<PollFlags> {
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    let mut fds = [PollFd::new(s.as_fd(), f)];
    match poll(
        &mut fds,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(fds[0].revents().unwrap_or(PollFlags::empty())),
        Err(e) => Err(e.into()),
    }
}

/// A TCP connection to `dst` from local address `src` (any port).
fn connect_from(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{
        bind, connect, getsockopt, socket, sockopt, AddressFamily, SockFlag, SockType,
        SockaddrStorage,
    };
    let family = match dst {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_NONBLOCK, None)?;
    bind(
        fd.as_raw_fd(),
        &SockaddrStorage::from(SocketAddr::new(src.ip(), 0)),
    )?;
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(dst)) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    let s = TcpStream::from(fd);
    if pollfd_wait(&s, PollFlags::POLLOUT, timeout)?.is_empty() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    match getsockopt(&s, sockopt::SocketError)? {
        0 => {}
        e => return Err(std::io::Error::from_raw_os_error(e)),
    }
    s.set_nonblocking(false)?;
    Ok(s)
}

impl TcpQueue {
    /// Connects queue `cfg.qid` to the target at `dst`: the TCP connection,
    /// then ICReq/ICResp (digests as `cfg.digests` asks). The NVMe-level
    /// Connect command is the caller's.
    pub fn connect(dst: SocketAddr, cfg: QueueConfig) -> Result<TcpQueue> {
        if cfg.depth < 2 || cfg.slot_size == 0 {
            return Err(Error::Invalid(format!(
                "queue depth {} / slot size {}",
                cfg.depth, cfg.slot_size
            )));
        }
        let qid = cfg.qid;
        let conn_err = |what: String| Error::Connect {
            addr: dst,
            qid,
            what,
        };
        let s = match cfg.src {
            None => TcpStream::connect_timeout(&dst, cfg.timeout),
            Some(src) => connect_from(src, dst, cfg.timeout),
        }
        .map_err(|e| conn_err(format!("TCP connect: {e}")))?;
        s.set_nodelay(true)
            .map_err(|e| conn_err(format!("TCP_NODELAY: {e}")))?;
        let s = match &cfg.tls {
            None => Stream::Plain(s),
            Some(offer) => Stream::Tls(Box::new(
                tls::handshake(s, offer, cfg.timeout).map_err(conn_err)?,
            )),
        };
        let dg = if cfg.digests {
            digest::HEADER | digest::DATA
        } else {
            0
        };
        let depth = cfg.depth as usize;
        let mut q = TcpQueue {
            s,
            rules: Rules::host(cfg.slot_size.min(u32::MAX as usize) as u32),
            layout: Layout::default(),
            maxh2cdata: tcp::MIN_MAXH2CDATA,
            bufs: (0..depth).map(|_| vec![0u8; cfg.slot_size]).collect(),
            xfers: vec![Xfer::None; depth],
            tx: Vec::new(),
            rx: Vec::new(),
            c: Common::new(dst, cfg),
        };
        q.tx.extend_from_slice(
            &IcReq {
                pfv: 0,
                hpda: 0,
                digest: dg,
                maxr2t: 0,
            }
            .encode(),
        );
        let deadline = Instant::now() + q.c.cfg.timeout;
        q.s.write_all(&q.tx)
            .map_err(|e| conn_err(format!("sending the ICReq: {e}")))?;
        q.tx.clear();
        let resp = loop {
            match tcp::parse(&q.rx, &q.rules) {
                Ok(Some((Pdu::IcResp(r), n))) => {
                    q.rx.drain(..n);
                    break r;
                }
                Ok(Some((Pdu::Term { fes, .. }, _))) => {
                    return Err(conn_err(format!(
                        "the target terminated the connection (fatal error status {fes:#x})"
                    )))
                }
                Ok(Some((other, _))) => {
                    return Err(conn_err(format!("{other:?} instead of an ICResp")))
                }
                Err(f) => return Err(conn_err(format!("bad ICResp: {f:?}"))),
                Ok(None) => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!("ICResp on queue {qid} from {dst}"),
                    after: q.c.cfg.timeout,
                });
            }
            q.s.tcp()
                .set_read_timeout(Some(left))
                .map_err(|e| conn_err(e.to_string()))?;
            let mut b = [0u8; tcp::IC_SIZE];
            match q.s.read(&mut b) {
                Ok(0) => return Err(conn_err("closed before its ICResp".into())),
                Ok(n) => q.rx.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(conn_err(format!("reading the ICResp: {e}"))),
            }
        };
        if resp.pfv != 0 || resp.digest & !dg != 0 || resp.maxh2cdata < tcp::MIN_MAXH2CDATA {
            return Err(conn_err(format!("ICResp refused: {resp:?}")));
        }
        q.maxh2cdata = resp.maxh2cdata;
        q.layout = q.rules.agree(resp.digest, resp.cpda);
        q.s.tcp()
            .set_nonblocking(true)
            .map_err(|e| conn_err(e.to_string()))?;
        Ok(q)
    }

    /// The most in-capsule data a write may carry: the admin queue's, or
    /// what [`HostQueue::set_inline_max`] allowed (a Connect's data always
    /// fits: targets take it in the capsule).
    fn inline_limit(&self) -> usize {
        if self.c.cfg.qid == 0 {
            ADMIN_CAPSULE_DATA
        } else {
            self.c.cfg.inline_max.max(CONNECT_DATA_SIZE)
        }
    }

    /// Appends a PDU: `head`, then `data` and its digest.
    fn push(&mut self, head: &[u8], data: &[u8]) {
        self.tx.extend_from_slice(head);
        self.tx.extend_from_slice(data);
        if self.layout.ddgst && !data.is_empty() {
            self.tx.extend_from_slice(&tcp::crc(data).to_le_bytes());
        }
    }

    /// Queues capsule `sqe` of slot `tag` with in-capsule `data_len` bytes
    /// of the slot (the transfer `xfer` follows by R2T or C2HData).
    fn send_capsule(
        &mut self,
        tag: u16,
        sqe: &[u8; nvme::SQE_SIZE],
        data_len: usize,
        xfer: Xfer,
    ) -> Result<()> {
        self.c
            .slots
            .start(tag, None)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        // The capsule is copied out: the "send" is done at once.
        if let Err(e) = self.c.slots.on_send_done(tag) {
            return Err(self.c.fail(format!("slot bookkeeping: {e}")));
        }
        self.xfers[tag as usize] = xfer;
        let head = self.layout.cmd(sqe, data_len as u32);
        let buf = std::mem::take(&mut self.bufs[tag as usize]);
        self.push(&head, &buf[..data_len]);
        self.bufs[tag as usize] = buf;
        self.c.stats.commands += 1;
        Ok(())
    }

    /// The slot a PDU's command id names (a raw command's own cid too).
    fn tag_of(&self, cid: u16) -> u16 {
        match self.c.raw {
            Some((user, tag)) if user == cid => tag,
            _ => cid,
        }
    }

    fn in_flight_tag(&self, cid: u16) -> Option<u16> {
        let t = self.tag_of(cid);
        self.c.slots.is_in_flight(t).then_some(t)
    }

    /// Answers an R2T: H2CData PDUs of at most MAXH2CDATA over the range.
    fn on_r2t(&mut self, r: tcp::R2t) -> Result<()> {
        let Some(tag) = self.in_flight_tag(r.cccid) else {
            return Err(self
                .c
                .fail(format!("R2T for command {} not in flight", r.cccid)));
        };
        let Xfer::ToTarget(n) = self.xfers[tag as usize] else {
            return Err(self
                .c
                .fail(format!("R2T for command {} that sends no data", r.cccid)));
        };
        let end = r.r2to as u64 + r.r2tl as u64;
        if r.r2tl == 0 || end > n as u64 {
            return Err(self.c.fail(format!(
                "R2T {}+{} beyond the {n} bytes of command {}",
                r.r2to, r.r2tl, r.cccid
            )));
        }
        let buf = std::mem::take(&mut self.bufs[tag as usize]);
        let mut off = r.r2to;
        while off < end as u32 {
            let len = (end as u32 - off).min(self.maxh2cdata);
            let last = off + len == end as u32;
            let hdr = DataHeader {
                cccid: r.cccid,
                ttag: r.ttag,
                datao: off,
                datal: len,
            };
            let f = if last { flags::DATA_LAST } else { 0 };
            let head = self.layout.data(true, &hdr, f);
            self.push(&head, &buf[off as usize..(off + len) as usize]);
            off += len;
        }
        self.bufs[tag as usize] = buf;
        Ok(())
    }

    /// A response for slot `tag`.
    fn on_rsp(&mut self, mut cqe: Completion, out: &mut Vec<Done>) -> Result<()> {
        if let Some((user, tag)) = self.c.raw {
            if cqe.cid == user {
                self.c.raw_cqe = Some(cqe);
                cqe.cid = tag;
            }
        }
        match self.c.slots.on_response(cqe, None) {
            Ok(Next::Complete(c)) => out.push(Done { tag: c.cid, cqe: c }),
            Ok(_) => {}
            Err(e) => return Err(self.c.fail(format!("target protocol error: {e}"))),
        }
        Ok(())
    }

    /// C2HData: copied into the slot, within the command's transfer.
    fn on_c2h(
        &mut self,
        hdr: DataHeader,
        f: u8,
        data: &[u8],
        data_ok: bool,
        out: &mut Vec<Done>,
    ) -> Result<()> {
        let Some(tag) = self.in_flight_tag(hdr.cccid) else {
            return Err(self
                .c
                .fail(format!("C2HData for command {} not in flight", hdr.cccid)));
        };
        let Xfer::FromTarget(n) = self.xfers[tag as usize] else {
            return Err(self.c.fail(format!(
                "C2HData for command {} that reads nothing",
                hdr.cccid
            )));
        };
        let end = hdr.datao as u64 + data.len() as u64;
        if end > n as u64 {
            return Err(self.c.fail(format!(
                "C2HData {}+{} beyond the {n} bytes of command {}",
                hdr.datao,
                data.len(),
                hdr.cccid
            )));
        }
        if !data_ok {
            return Err(self
                .c
                .fail(format!("data digest error in C2HData of {}", hdr.cccid)));
        }
        self.bufs[tag as usize][hdr.datao as usize..end as usize].copy_from_slice(data);
        if f & flags::DATA_SUCCESS != 0 {
            // The data is the answer: success, no response capsule.
            let cqe = Completion::new(hdr.cccid, Status::SUCCESS);
            self.on_rsp(cqe, out)?;
        }
        Ok(())
    }

    /// Handles every whole PDU received.
    fn process(&mut self, out: &mut Vec<Done>) -> Result<()> {
        let rx = std::mem::take(&mut self.rx);
        let mut at = 0;
        let r = loop {
            let (pdu, n) = match tcp::parse(&rx[at..], &self.rules) {
                Ok(Some(p)) => p,
                Ok(None) => break Ok(()),
                Err(f) => break Err(self.c.fail(format!("malformed PDU from the target: {f:?}"))),
            };
            at += n;
            let r = match pdu {
                Pdu::Rsp(c) => self.on_rsp(c, out),
                Pdu::R2t(t) => self.on_r2t(t),
                Pdu::Data {
                    h2c: false,
                    hdr,
                    flags: f,
                    data,
                    data_ok,
                } => self.on_c2h(hdr, f, data, data_ok, out),
                Pdu::Term { fes, fei, .. } => Err(self.c.fail(format!(
                    "the target terminated the connection (fatal error status {fes:#x}, \
                     information {fei:#x})"
                ))),
                other => Err(self.c.fail(format!("unexpected PDU {other:?}"))),
            };
            if r.is_err() {
                break r;
            }
        };
        let mut rx = rx;
        rx.drain(..at);
        self.rx = rx;
        r
    }

    /// Reads what the socket has. Returns why it ended, if it did (what
    /// came before is in the receive buffer).
    fn receive(&mut self) -> Option<String> {
        let mut b = [0u8; 65536];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return Some("disconnected (the target closed the connection)".into()),
                Ok(n) => self.rx.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Some(format!("receive: {e}")),
            }
        }
    }

    /// Reads and handles what came. A connection the target ended fails
    /// the queue, but what it answered before goes to `out` first (a
    /// target may close right after the response that says why).
    fn drain(&mut self, out: &mut Vec<Done>) -> Result<()> {
        let before = out.len();
        let ended = self.receive();
        self.process(out)?;
        if let Some(why) = ended {
            let e = self.c.fail(why);
            return match out.len() > before {
                true => Ok(()),
                false => Err(e),
            };
        }
        self.flush()
    }
}

impl HostQueue for TcpQueue {
    fn common(&self) -> &Common {
        &self.c
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.c
    }

    fn buffer(&self, tag: u16) -> &[u8] {
        assert!(self.c.slots.is_reserved(tag), "slot {tag} is not reserved");
        &self.bufs[tag as usize]
    }

    fn buffer_mut(&mut self, tag: u16) -> &mut [u8] {
        assert!(self.c.slots.is_reserved(tag), "slot {tag} is not reserved");
        &mut self.bufs[tag as usize]
    }

    fn flush(&mut self) -> Result<()> {
        let mut off = 0;
        while off < self.tx.len() {
            match self.s.write(&self.tx[off..]) {
                Ok(0) => break,
                Ok(n) => off += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.tx.clear();
                    return Err(self.c.fail(format!("send: {e}")));
                }
            }
        }
        self.tx.drain(..off);
        Ok(())
    }

    fn submit(&mut self, tag: u16, mut cmd: Command, xfer: Xfer) -> Result<()> {
        self.c.check()?;
        if !self.c.slots.is_reserved(tag) {
            return Err(Error::Invalid(format!("slot {tag} is not reserved")));
        }
        let len = match xfer {
            Xfer::None => 0,
            Xfer::ToTarget(n) | Xfer::FromTarget(n) => n,
        };
        if xfer != Xfer::None && (len == 0 || len as usize > self.c.cfg.slot_size) {
            return Err(Error::Invalid(format!(
                "transfer of {len} bytes (slot size {})",
                self.c.cfg.slot_size
            )));
        }
        cmd.set_cid(tag);
        let in_capsule = matches!(xfer, Xfer::ToTarget(n) if n as usize <= self.inline_limit());
        if in_capsule {
            cmd.set_sgl(&Sgl::InCapsule { offset: 0, len });
            self.c.stats.in_capsule += 1;
        } else {
            cmd.set_sgl(&Sgl::Transport { len });
        }
        let data = if in_capsule { len as usize } else { 0 };
        self.send_capsule(tag, &cmd.raw, data, xfer)
    }

    fn poll(&mut self, out: &mut Vec<Done>, wait: Duration) -> Result<usize> {
        self.c.check()?;
        self.flush()?;
        let before = out.len();
        let start = Instant::now();
        loop {
            self.drain(out)?;
            if out.len() > before || wait.is_zero() {
                return Ok(out.len() - before);
            }
            let left = wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(0);
            }
            let mut f = PollFlags::POLLIN;
            if !self.tx.is_empty() {
                f |= PollFlags::POLLOUT;
            }
            if let Err(e) = pollfd_wait(self.s.tcp(), f, left) {
                return Err(self.c.fail(format!("poll: {e}")));
            }
        }
    }

    fn raw(&mut self, req: &RawRequest<'_>, timeout: Duration) -> Result<RawOutcome> {
        self.c.check()?;
        if self.c.slots.in_flight() != 0 {
            return Err(Error::Invalid("raw mode needs an idle queue".into()));
        }
        let tag = self
            .alloc()
            .ok_or_else(|| Error::Invalid("no free command slot".into()))?;
        let mut sqe = req.sqe;
        let user_cid = u16::from_le_bytes([sqe[2], sqe[3]]);
        let mut xfer = Xfer::None;
        let mut data = 0;
        let cap = self.c.cfg.slot_size;
        if let Some(x) = req.window {
            if let Xfer::ToTarget(n) = x {
                let n = (n as usize).min(req.write_data.len()).min(cap);
                self.buffer_mut(tag)[..n].copy_from_slice(&req.write_data[..n]);
            }
            let len = match x {
                Xfer::None => 0,
                Xfer::ToTarget(n) | Xfer::FromTarget(n) => (n as usize).min(cap) as u32,
            };
            sqe[24..40].copy_from_slice(&Sgl::Transport { len }.encode());
            xfer = match x {
                Xfer::ToTarget(_) => Xfer::ToTarget(len),
                Xfer::FromTarget(_) => Xfer::FromTarget(len),
                Xfer::None => Xfer::None,
            };
        } else if !req.in_capsule.is_empty() {
            data = req.in_capsule.len().min(cap);
            self.buffer_mut(tag)[..data].copy_from_slice(&req.in_capsule[..data]);
        }
        self.c.raw = Some((user_cid, tag));
        self.c.raw_cqe = None;
        if let Err(e) = self.send_capsule(tag, &sqe, data, xfer) {
            self.c.raw = None;
            self.release(tag);
            return Err(e);
        }
        let r = self.wait_for(tag, timeout, &mut |_, _| {}, "raw command");
        self.c.raw = None;
        let cqe = self.c.raw_cqe.take();
        Ok(raw_outcome(self, tag, req, r, cqe, |q| {
            q.c.fail("raw command timed out; queue state unknown".into());
        }))
    }

    fn peer_disconnected(&mut self, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        loop {
            if self.receive().is_some() {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if pollfd_wait(self.s.tcp(), PollFlags::POLLIN, left).is_err() {
                return true;
            }
        }
    }

    fn disconnect(&self) {
        let _ = self.s.tcp().shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use nvme::opcode::io;
    use nvme::tcp::{IcResp, R2t};

    use super::*;

    /// A target written here: reads whole PDUs as a controller does.
    struct Target {
        s: Stream,
        rx: Vec<u8>,
        rules: Rules,
    }

    impl Target {
        fn next(&mut self) -> (Vec<u8>, usize) {
            loop {
                if let Some((_, n)) = tcp::parse(&self.rx, &self.rules).unwrap() {
                    let b: Vec<u8> = self.rx.drain(..n).collect();
                    return (b, n);
                }
                let mut b = [0u8; 65536];
                let n = self.s.read(&mut b).unwrap();
                assert!(n > 0, "the host closed");
                self.rx.extend_from_slice(&b[..n]);
            }
        }
    }

    impl Target {
        /// Answers the next capsule, a read, with `n` bytes of `byte(i)` in
        /// one C2HData PDU that ends it (the SUCCESS flag: no response).
        fn answer_read(&mut self, n: u32, byte: impl Fn(u32) -> u8) {
            let (b, _) = self.next();
            let Some((Pdu::Cmd { sqe, .. }, _)) = tcp::parse(&b, &self.rules).unwrap() else {
                panic!("not a capsule")
            };
            let hdr = DataHeader {
                cccid: Command::parse(sqe).unwrap().cid(),
                ttag: 0,
                datao: 0,
                datal: n,
            };
            let mut pdu =
                Layout::default().data(false, &hdr, flags::DATA_LAST | flags::DATA_SUCCESS);
            pdu.extend((0..n).map(byte));
            self.s.write_all(&pdu).unwrap();
        }
    }

    /// A queue connected to a target thread running `serve`.
    fn pair(serve: impl FnOnce(&mut Target) + Send + 'static) -> TcpQueue {
        connected(None, serve).unwrap()
    }

    const PSK: [u8; 32] = [9; 32];
    const IDENTITY: &str = "NVMe0R01 nqn.2026-11.io.test:h nqn.2026-11.io.test:s";

    /// A TLS server taking [`IDENTITY`] with [`PSK`] (OpenSSL's PSK
    /// callback: SHA-256).
    fn tls_server(s: TcpStream) -> Option<Stream> {
        use openssl::ssl::{Ssl, SslContextBuilder, SslMethod, SslVersion};
        let mut b = SslContextBuilder::new(SslMethod::tls_server()).unwrap();
        b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
        b.set_num_tickets(0).unwrap();
        b.set_psk_server_callback(|_, id, out| {
            if id != Some(IDENTITY.as_bytes()) {
                return Ok(0);
            }
            out[..PSK.len()].copy_from_slice(&PSK);
            Ok(PSK.len())
        });
        let ssl = Ssl::new(&b.build()).unwrap();
        ssl.accept(s).ok().map(|t| Stream::Tls(Box::new(t)))
    }

    /// A queue connected (over TLS with `offer`) to a target thread
    /// running `serve`.
    fn connected(
        offer: Option<tls::Offer>,
        serve: impl FnOnce(&mut Target) + Send + 'static,
    ) -> Result<TcpQueue> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let secure = offer.is_some();
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let s = match secure {
                false => Stream::Plain(s),
                true => match tls_server(s) {
                    Some(s) => s,
                    None => return,
                },
            };
            let mut t = Target {
                s,
                rx: Vec::new(),
                rules: Rules {
                    controller: true,
                    initialized: false,
                    hdgst: false,
                    ddgst: false,
                    pda: 0,
                    max_capsule_data: 8192,
                    max_data: 4096,
                },
            };
            t.next();
            let r = IcResp {
                pfv: 0,
                cpda: 0,
                digest: 0,
                maxh2cdata: 4096,
            };
            t.s.write_all(&r.encode()).unwrap();
            t.rules.initialized = true;
            serve(&mut t);
            // Holds the connection until the host is done.
            let mut b = [0u8; 64];
            while t.s.read(&mut b).is_ok_and(|n| n > 0) {}
        });
        let mut cfg = QueueConfig::new(1, 4, 65536);
        cfg.tls = offer;
        cfg.timeout = Duration::from_secs(5);
        TcpQueue::connect(addr, cfg)
    }

    fn rw(opc: u8) -> Command {
        let mut c = Command::new(opc, 0);
        c.set_nsid(1);
        c
    }

    #[test]
    fn a_write_answers_its_r2t_in_pieces_of_maxh2cdata() {
        let mut q = pair(|t| {
            let (b, _) = t.next();
            let Some((Pdu::Cmd { sqe, data, .. }, _)) = tcp::parse(&b, &t.rules).unwrap() else {
                panic!("not a capsule")
            };
            assert!(data.is_empty());
            let cmd = Command::parse(sqe).unwrap();
            assert_eq!(cmd.sgl(), Sgl::Transport { len: 10000 });
            let r2t = R2t {
                cccid: cmd.cid(),
                ttag: 7,
                r2to: 0,
                r2tl: 10000,
            };
            t.s.write_all(&Layout::default().r2t(&r2t)).unwrap();
            let mut got = Vec::new();
            for (off, len, last) in [(0, 4096, false), (4096, 4096, false), (8192, 1808, true)] {
                let (b, _) = t.next();
                let Some((
                    Pdu::Data {
                        h2c: true,
                        hdr,
                        flags: f,
                        data,
                        ..
                    },
                    _,
                )) = tcp::parse(&b, &t.rules).unwrap()
                else {
                    panic!("not H2CData")
                };
                assert_eq!((hdr.ttag, hdr.datao, hdr.datal), (7, off, len));
                assert_eq!(f & flags::DATA_LAST != 0, last);
                got.extend_from_slice(data);
            }
            assert!(got.iter().enumerate().all(|(i, &b)| b == i as u8));
            let rsp = Layout::default().rsp(&Completion::new(cmd.cid(), Status::SUCCESS));
            t.s.write_all(&rsp).unwrap();
        });
        let tag = q.alloc().unwrap();
        for (i, b) in q.buffer_mut(tag).iter_mut().enumerate() {
            *b = i as u8;
        }
        q.submit(tag, rw(io::WRITE), Xfer::ToTarget(10000)).unwrap();
        let mut done = Vec::new();
        while done.is_empty() {
            q.poll(&mut done, Duration::from_secs(5)).unwrap();
        }
        assert_eq!((done[0].tag, done[0].cqe.status), (tag, Status::SUCCESS));
    }

    #[test]
    fn a_read_ended_by_its_data_and_data_beyond_a_read_fails_the_queue() {
        let mut q = pair(|t| {
            for n in [8192u32, 8193] {
                t.answer_read(n, |_| 0xA5);
            }
        });
        let mut done = Vec::new();
        let tag = q.alloc().unwrap();
        q.submit(tag, rw(io::READ), Xfer::FromTarget(8192)).unwrap();
        while done.is_empty() {
            q.poll(&mut done, Duration::from_secs(5)).unwrap();
        }
        assert_eq!(done[0].cqe.status, Status::SUCCESS);
        assert!(q.buffer(tag)[..8192].iter().all(|&b| b == 0xA5));
        q.release(tag);
        // One byte more than the read asked for.
        let tag = q.alloc().unwrap();
        q.submit(tag, rw(io::READ), Xfer::FromTarget(8192)).unwrap();
        let mut r = Ok(0);
        for _ in 0..100 {
            r = q.poll(&mut done, Duration::from_millis(50));
            if r.is_err() {
                break;
            }
        }
        assert!(r.is_err(), "data beyond the read was taken");
        assert!(q.failure().unwrap().contains("beyond"), "{:?}", q.failure());
    }

    #[test]
    fn a_response_just_before_the_target_closes_is_delivered() {
        let mut q = pair(|t| {
            let (b, _) = t.next();
            let Some((Pdu::Cmd { sqe, .. }, _)) = tcp::parse(&b, &t.rules).unwrap() else {
                panic!("not a capsule")
            };
            let cid = Command::parse(sqe).unwrap().cid();
            let rsp = Layout::default().rsp(&Completion::new(cid, Status::INVALID_FIELD));
            t.s.write_all(&rsp).unwrap();
            t.s.tcp().shutdown(std::net::Shutdown::Both).unwrap();
        });
        let tag = q.alloc().unwrap();
        q.submit(tag, rw(io::FLUSH), Xfer::None).unwrap();
        // Both the response and the close are in by then.
        std::thread::sleep(Duration::from_millis(100));
        let mut done = Vec::new();
        q.poll(&mut done, Duration::from_secs(5)).unwrap();
        assert_eq!(done[0].cqe.status, Status::INVALID_FIELD);
        assert!(q.poll(&mut done, Duration::ZERO).is_err());
        assert!(q.failure().unwrap().contains("closed"));
    }

    fn offer(key: [u8; 32]) -> tls::Offer {
        tls::Offer {
            identity: IDENTITY.into(),
            psk: zeroize::Zeroizing::new(key.to_vec()),
            hash: tlspsk::PskHash::Sha256,
        }
    }

    #[test]
    fn over_tls_pdus_larger_than_a_record_arrive_whole_and_a_wrong_key_is_refused() {
        let mut q = connected(Some(offer(PSK)), |t| {
            // 60000 bytes of data: four TLS records at least.
            t.answer_read(60000, |i| i as u8);
        })
        .unwrap();
        assert!(q.s.is_tls());
        let tag = q.alloc().unwrap();
        q.submit(tag, rw(io::READ), Xfer::FromTarget(60000))
            .unwrap();
        let mut done = Vec::new();
        while done.is_empty() {
            q.poll(&mut done, Duration::from_secs(5)).unwrap();
        }
        assert_eq!(done[0].cqe.status, Status::SUCCESS);
        assert!(q.buffer(tag)[..60000]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == i as u8));
        // Another key: the server's binder check fails, the queue never
        // gets to its ICReq.
        let e = connected(Some(offer([8; 32])), |_| {})
            .err()
            .expect("refused");
        assert!(e.to_string().contains("TLS handshake"), "{e}");
    }
}
