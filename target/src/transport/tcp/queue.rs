//! One NVMe/TCP connection: the TCP driver of a [`QueueCore`]. It frames
//! the host's PDUs ([`nvme::tcp::parse`]) and turns them into the core's
//! events, and the core's [`Action`]s into PDUs: an R2T for data to fetch
//! (the host's H2CData PDUs land in the request's pool buffer), C2HData and
//! the response capsule for an answer. What a command means is the core's.
//!
//! Before the connection proves anything it holds one ICReq's worth of
//! receive buffer and no core; the core is made when the first capsule
//! arrives, from the queue id and size its Connect names (bounded by what
//! a queue may have).

use std::collections::VecDeque;
use std::io::{IoSlice, Read};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use nvme::tcp::{self, digest, fes, flags, DataHeader, Fatal, IcResp, Layout, Pdu, R2t, Rules};
use nvme::{Command, Completion};
use tracing::{debug, warn};

use super::group::Res;
use super::h2c::{Transfer, Transfers};
use super::zerocopy::{self, ZeroCopy};
use super::{MAX_CAPSULE_DATA, MAX_H2C_DATA};
use crate::base::admission::Pending;
use crate::model::controller::QueueLink;
use crate::queue::{Action, Addrs, Env, QueueCore, QueueParams, ToHost, Token, CONNECT_TIMEOUT};
use crate::request::data::SglKind;
use crate::worker::buffers::{self, Asked};
use crate::worker::slots::QueueKey;
use crate::worker::{Lend, PlainMemory};

/// Outputs (PDUs with their data) written per `sendmsg`.
const SEND_OUTPUTS: usize = 16;

/// Data in a pool buffer of the worker's TCP part.
#[derive(Clone, Copy)]
struct DataPtr(*const u8);

// SAFETY: the pointer names a pool buffer of the TCP part of the worker
// that owns the queue; it is only read on that worker's thread (moving a
// worker to its thread before it serves anything moves this with it).
unsafe impl Send for DataPtr {}

/// Something to write to the socket: a PDU's header, its data (in a pool
/// buffer the request holds until it was written), the data digest.
struct Out {
    head: Vec<u8>,
    data: Option<(DataPtr, u32)>,
    dgst: Option<[u8; 4]>,
    /// The response whose delivery this completes.
    sent: Option<Token>,
}

impl Out {
    fn len(&self) -> usize {
        self.head.len() + self.data.map_or(0, |d| d.1 as usize) + self.dgst.map_or(0, |_| 4)
    }
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the ICReq.
    Init,
    /// Initialized; the first capsule makes the core.
    Connect,
    /// The core serves.
    Live,
}

/// One connection and (once it sent a capsule) its core.
pub struct TcpQueue {
    stream: TcpStream,
    addrs: Addrs,
    accepted: Instant,
    phase: Phase,
    rules: Rules,
    layout: Layout,
    rx: Vec<u8>,
    rx_len: usize,
    /// The socket may have bytes to read (a poll said so, or no ring polls).
    pub(super) readable: bool,
    /// A poll for readability is armed on the ring.
    pub(super) poll_in: bool,
    /// A write would block: a poll for writability is (to be) armed.
    pub(super) blocked: bool,
    /// A poll for writability is armed on the ring.
    pub(super) poll_out: bool,
    /// A capsule waits for a free capsule buffer.
    pub(super) starved: bool,
    /// Capsule buffers its commands hold.
    capsules_held: u32,
    tx: VecDeque<Out>,
    tx_off: usize,
    core: Option<QueueCore>,
    pending: Option<Pending>,
    /// The R2Ts' transfers.
    transfers: Transfers,
    /// Since when it closes.
    closing: Option<Instant>,
    key: QueueKey,
    /// Its zero-copy sends and the buffers they pin.
    zc: ZeroCopy,
    /// A poll reported an error (its error queue has something).
    pub(super) errors: bool,
    /// Tests: the kernel's notifications are left unread.
    #[cfg(test)]
    pub(super) hold_notifications: bool,
}

/// The rules a controller receives by before the ICReq.
fn initial_rules() -> Rules {
    Rules {
        controller: true,
        initialized: false,
        hdgst: false,
        ddgst: false,
        pda: 0,
        max_capsule_data: MAX_CAPSULE_DATA,
        max_data: MAX_H2C_DATA,
    }
}

impl TcpQueue {
    /// A connection accepted at `now`, named `key` in its worker.
    pub fn new(
        stream: TcpStream,
        peer: SocketAddr,
        local: SocketAddr,
        pending: Pending,
        tls: Option<std::sync::Arc<crate::model::tls_keys::Proven>>,
        key: QueueKey,
        now: Instant,
    ) -> TcpQueue {
        TcpQueue {
            // The kernel's TLS layer seals what it sends: no zero copy.
            zc: ZeroCopy::new(tls.is_none() && zerocopy::enable(stream.as_raw_fd())),
            errors: false,
            #[cfg(test)]
            hold_notifications: false,
            stream,
            addrs: Addrs {
                peer: Some(peer),
                local: Some(local),
                tls,
            },
            accepted: now,
            phase: Phase::Init,
            rules: initial_rules(),
            layout: Layout::default(),
            rx: vec![0u8; tcp::IC_SIZE],
            rx_len: 0,
            readable: true,
            poll_in: false,
            blocked: false,
            poll_out: false,
            starved: false,
            capsules_held: 0,
            tx: VecDeque::new(),
            tx_off: 0,
            core: None,
            pending: Some(pending),
            transfers: Transfers::default(),
            closing: None,
            key,
        }
    }

    /// The socket's descriptor.
    pub fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// Whether it is closing.
    pub fn closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Reads the kernel's zero-copy notifications and gives back to the
    /// pool the buffers it finished with.
    pub fn reclaim(&mut self, w: &mut Lend<'_>, res: &mut Res) {
        #[cfg(test)]
        if self.hold_notifications {
            return;
        }
        if !self.zc.outstanding() && !std::mem::take(&mut self.errors) {
            return;
        }
        let before = self.zc.on;
        let free = self.zc.drain(self.stream.as_raw_fd());
        for b in free {
            let pool = res.pool(w);
            buffers::give_back(w, pool, b);
        }
        if before && !self.zc.on {
            crate::telemetry::metrics::zero_copy("copied", 1);
            debug!(peer = ?self.addrs.peer, "the kernel copies zero-copy sends here (a local peer?): sending as before");
        }
    }

    /// Whether it sends read data zero-copy now.
    #[cfg(test)]
    pub(super) fn zero_copy_on(&self) -> bool {
        self.zc.on
    }

    /// Whether writes wait to go out.
    pub fn has_sends(&self) -> bool {
        !self.tx.is_empty() && !self.blocked
    }

    /// Hands an event to the core (if there is one yet), then carries out
    /// what it asks.
    pub fn call(
        &mut self,
        w: &mut Lend<'_>,
        res: &mut Res,
        f: &mut dyn FnMut(&mut QueueCore, &mut Env<'_, '_>),
    ) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let mem = PlainMemory {
            pool: res.pool_mem.ptr(),
            capsules: res.capsules.ptr(),
            key: self.key,
        };
        w.env(core, &mem, |c, env| f(c, env));
        self.drain(w, res);
    }

    /// Carries out the core's actions, in order.
    fn drain(&mut self, w: &mut Lend<'_>, res: &mut Res) {
        while let Some(a) = self.core.as_mut().and_then(|c| c.next_action()) {
            self.act(w, res, a);
        }
    }

    fn act(&mut self, w: &mut Lend<'_>, res: &mut Res, a: Action) {
        match a {
            Action::Repost(slot) => {
                res.capsule_free.push(slot);
                self.capsules_held = self.capsules_held.saturating_sub(1);
            }
            Action::NeedBuffer { req, len, limited } => {
                let pool = res.pool(w);
                match buffers::ask(w, pool, self.key, req, len, limited) {
                    Asked::Now(b) => {
                        let mut back = None;
                        self.call(w, res, &mut |c, env| back = c.buffer_granted(env, req, b));
                        if let Some(b) = back {
                            buffers::give_back(w, pool, b);
                        }
                    }
                    Asked::Waits => {}
                    Asked::TooLarge => self.call(w, res, &mut |c, env| c.fail(env)),
                }
            }
            Action::Fetch {
                req, cid, buf, len, ..
            } => {
                // One R2T for the whole transfer; the host splits it into
                // H2CData PDUs of at most MAXH2CDATA. Its tag is the
                // request's slot.
                self.transfers.open(req.slot, req, cid, buf, len);
                let r2t = R2t {
                    cccid: cid,
                    ttag: req.slot,
                    r2to: 0,
                    r2tl: len,
                };
                self.push(Out {
                    head: self.layout.r2t(&r2t),
                    data: None,
                    dgst: None,
                    sent: None,
                });
            }
            Action::Respond { req, cqe, data, .. } => {
                // A host that turned SQ flow control off needs no SQ head:
                // a read that succeeded with no result is answered by its
                // data alone (C2HData with SUCCESS), one PDU less.
                let alone = cqe.sq_head == 0xFFFF && cqe.status.is_success() && cqe.result == 0;
                if let Some(d) = data {
                    self.push_c2h(res, &cqe, d, alone.then_some(req));
                    if alone {
                        return;
                    }
                }
                self.push(Out {
                    head: self.layout.rsp(&cqe),
                    data: None,
                    dgst: None,
                    sent: Some(req),
                });
            }
            Action::GiveBuffer(b) => {
                // Not while the kernel may still send from it.
                if let Some(b) = self.zc.release(b) {
                    let pool = res.pool(w);
                    buffers::give_back(w, pool, b);
                }
            }
            Action::Probe => {
                // The socket says whether the host is still there (TCP
                // retransmits until it gives up on the peer).
                let err = nix::sys::socket::getsockopt(
                    &self.stream,
                    nix::sys::socket::sockopt::SocketError,
                );
                match err {
                    Ok(0) => {
                        if let Some(c) = self.core.as_mut() {
                            c.probe_answered(w.now);
                        }
                    }
                    _ => self.call(w, res, &mut |c, env| c.fail(env)),
                }
            }
            Action::Close => self.close(w, res),
        }
    }

    /// The data of a host read: one C2HData PDU, the last; with `success`
    /// it is the answer too (no response capsule follows).
    fn push_c2h(&mut self, res: &Res, cqe: &Completion, d: ToHost, success: Option<Token>) {
        let hdr = DataHeader {
            cccid: cqe.cid,
            ttag: 0,
            datao: 0,
            datal: d.len,
        };
        let ptr = res.pool_mem.ptr().wrapping_add(d.buf.offset) as *const u8;
        let dgst = self.layout.ddgst.then(|| {
            // SAFETY: the request's pool buffer, `d.len` bytes it filled; it
            // holds the buffer until its response was written.
            let data = unsafe { std::slice::from_raw_parts(ptr, d.len as usize) };
            tcp::crc(data).to_le_bytes()
        });
        let f = if success.is_some() {
            flags::DATA_LAST | flags::DATA_SUCCESS
        } else {
            flags::DATA_LAST
        };
        self.push(Out {
            head: self.layout.data(false, &hdr, f),
            data: Some((DataPtr(ptr), d.len)),
            dgst,
            sent: success,
        });
    }

    fn push(&mut self, o: Out) {
        if self.closing.is_none() {
            self.tx.push_back(o);
        } else if let Some(t) = o.sent {
            // A closed connection answers nothing: the response fails.
            self.tx.push_back(Out {
                head: Vec::new(),
                data: None,
                dgst: None,
                sent: Some(t),
            });
        }
    }

    /// Closes the connection: nothing more is read or written; responses
    /// not written fail.
    fn close(&mut self, w: &mut Lend<'_>, res: &mut Res) {
        if self.closing.is_none() {
            self.closing = Some(w.now);
            // What was queued before the end (a response saying why, a
            // termination request) goes out as far as the socket takes it
            // now, as RDMA's posted sends do before its disconnect.
            let _ = self.send_queued(w, res);
            let _ = self.stream.shutdown(Shutdown::Both);
        }
        let unsent: Vec<Token> = self.tx.drain(..).filter_map(|o| o.sent).collect();
        self.tx_off = 0;
        for t in unsent {
            self.call(w, res, &mut |c, env| c.sent(env, t, false));
        }
        // Data the host was to send never comes.
        for h in self.transfers.take_all() {
            self.call(w, res, &mut |c, env| c.fetched(env, h.req, false));
        }
    }

    /// A fatal protocol error: the host gets a C2HTermReq naming it, and the
    /// connection ends.
    fn fatal(&mut self, w: &mut Lend<'_>, res: &mut Res, f: Fatal, offending: &[u8]) {
        // Once a minute per peer at warn: a peer that keeps breaking the
        // rules cannot flood the log (the metric counts each).
        let loud = self
            .addrs
            .peer
            .is_none_or(|p| w.target.refusal_log.should_log(p.ip(), w.now));
        if loud {
            warn!(qid = self.core.as_ref().map(|c| c.qid()), peer = ?self.addrs.peer, fes = f.fes, fei = f.fei,
                  "NVMe/TCP protocol error: terminating the connection (said once a minute per peer)");
        } else {
            debug!(peer = ?self.addrs.peer, fes = f.fes, fei = f.fei, "NVMe/TCP protocol error");
        }
        crate::telemetry::metrics::reject("tcp_protocol_error");
        // The offending PDU's header, as far as it says how long that is.
        let hlen = offending.get(2).map_or(tcp::CH_SIZE, |&h| h as usize);
        let head = &offending[..offending.len().min(hlen.max(tcp::CH_SIZE))];
        self.tx.push_back(Out {
            head: tcp::term(true, f, head),
            data: None,
            dgst: None,
            sent: None,
        });
        self.write(w, res);
        match self.core.is_some() {
            true => self.call(w, res, &mut |c, env| c.fail(env)),
            false => self.close(w, res),
        }
    }

    /// Reads what the socket has and handles every whole PDU. Returns the
    /// PDUs handled.
    pub fn read(&mut self, w: &mut Lend<'_>, res: &mut Res) -> usize {
        if self.closing.is_some() {
            self.readable = false;
            return 0;
        }
        let mut n = self.handle(w, res);
        while self.readable && !self.starved && self.closing.is_none() {
            let direct = self.transfers.receiving();
            if !direct && self.rx_len == self.rx.len() {
                // Full: only a PDU waiting for a capsule buffer stays.
                break;
            }
            let stream = &mut self.stream;
            let got = match direct {
                true => self
                    .transfers
                    .receive(res.pool_mem.ptr(), |b| stream.read(b)),
                false => stream.read(&mut self.rx[self.rx_len..]).map(|k| (k, None)),
            };
            match got {
                Ok((0, _)) => {
                    self.readable = false;
                    debug!(peer = ?self.addrs.peer, "the host closed the connection");
                    match self.core.is_some() {
                        true => self.call(w, res, &mut |c, env| {
                            c.disconnect(env, "host disconnected", "host")
                        }),
                        false => self.close(w, res),
                    }
                    return n;
                }
                Ok((_, Some(t))) => {
                    n += 1;
                    self.transferred(w, res, t);
                }
                Ok((_, None)) if direct => {}
                Ok((k, None)) => {
                    self.rx_len += k;
                    n += self.handle(w, res);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = ?self.addrs.peer, error = %e, "receive failed");
                    self.readable = false;
                    self.lost(w, res, &e);
                    return n;
                }
            }
        }
        n
    }

    /// Handles the whole PDUs in the receive buffer. Returns how many.
    fn handle(&mut self, w: &mut Lend<'_>, res: &mut Res) -> usize {
        let mut rx = std::mem::take(&mut self.rx);
        let mut at = 0;
        let mut n = 0;
        while self.closing.is_none() {
            let pdu = match tcp::parse(&rx[at..self.rx_len], &self.rules) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    // A data PDU whose header is in: the rest of it goes
                    // straight to its transfer's buffer.
                    let start = match tcp::data_start(&rx[at..self.rx_len], &self.rules) {
                        Ok(Some(st)) if st.h2c => st,
                        Ok(_) => break,
                        Err(f) => {
                            let bad = rx[at..self.rx_len].to_vec();
                            self.fatal(w, res, f, &bad);
                            break;
                        }
                    };
                    let have = &rx[at + start.data_at..self.rx_len];
                    match self.transfers.start(res.pool_mem.ptr(), &start, have) {
                        Ok(done) => {
                            at = self.rx_len;
                            if let Some(t) = done {
                                n += 1;
                                self.transferred(w, res, t);
                            }
                        }
                        Err(f) => {
                            let bad = rx[at..at + start.data_at].to_vec();
                            self.fatal(w, res, f, &bad);
                        }
                    }
                    break;
                }
                Err(f) => {
                    let bad = rx[at..self.rx_len].to_vec();
                    self.fatal(w, res, f, &bad);
                    break;
                }
            };
            let (pdu, len) = pdu;
            match self.on_pdu(w, res, pdu) {
                Ok(true) => {
                    at += len;
                    n += 1;
                }
                // Waits for a capsule buffer: the PDU stays.
                Ok(false) => break,
                Err(f) => {
                    let bad = rx[at..at + len.min(tcp::MAX_TERM_PLEN)].to_vec();
                    self.fatal(w, res, f, &bad);
                    break;
                }
            }
            if self.rx.len() > rx.len() {
                // The ICReq made the buffer larger.
                let grown = std::mem::take(&mut self.rx);
                rx.resize(grown.len(), 0);
            }
        }
        rx.copy_within(at..self.rx_len, 0);
        self.rx_len -= at;
        self.rx = rx;
        n
    }

    /// One PDU: Ok(false) when it must wait (no capsule buffer free).
    fn on_pdu(&mut self, w: &mut Lend<'_>, res: &mut Res, pdu: Pdu<'_>) -> Result<bool, Fatal> {
        match pdu {
            Pdu::IcReq(r) => {
                let dg = r.digest & (digest::HEADER | digest::DATA);
                self.layout = self.rules.agree(dg, r.hpda);
                // Now the buffer for the largest PDU the rules allow, but
                // for a data PDU's data: that goes straight to its buffer.
                self.rx = vec![0u8; self.rules.max_buffered()];
                self.phase = Phase::Connect;
                let resp = IcResp {
                    pfv: 0,
                    cpda: 0,
                    digest: dg,
                    maxh2cdata: MAX_H2C_DATA,
                };
                self.push(Out {
                    head: resp.encode().to_vec(),
                    data: None,
                    dgst: None,
                    sent: None,
                });
                Ok(true)
            }
            Pdu::Cmd { sqe, data, data_ok } => {
                if !data_ok {
                    // The capsule's data cannot be trusted: the connection
                    // ends, as nvmet ends it (the host retries the command
                    // on its next association).
                    warn!(peer = ?self.addrs.peer, "data digest error in a command capsule; closing");
                    crate::telemetry::metrics::reject("tcp_data_digest");
                    match self.core.is_some() {
                        true => self.call(w, res, &mut |c, env| c.fail(env)),
                        false => self.close(w, res),
                    }
                    return Ok(true);
                }
                if self.phase == Phase::Connect {
                    self.make_core(w, sqe);
                }
                let slot = match self.capsules_held < res.capsule_share {
                    true => res.capsule_free.pop(),
                    false => None,
                };
                let Some(slot) = slot else {
                    if !self.starved {
                        w.tally.capsule_wait();
                    }
                    self.starved = true;
                    return Ok(false);
                };
                self.starved = false;
                self.capsules_held += 1;
                let at = res
                    .capsules
                    .ptr()
                    .wrapping_add(slot as usize * MAX_CAPSULE_DATA as usize);
                // SAFETY: a free capsule buffer of MAX_CAPSULE_DATA bytes,
                // which the rules bound the data to; nothing uses it until
                // the core gives it back.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
                let len = (nvme::SQE_SIZE + data.len()) as u32;
                self.call(w, res, &mut |c, env| c.capsule(env, slot, sqe, len));
                Ok(true)
            }
            Pdu::Data {
                h2c: true,
                hdr,
                flags: f,
                data,
                data_ok,
            } => {
                let pool = res.pool_mem.ptr();
                if let Some(t) = self.transfers.whole(pool, &hdr, f, data, data_ok)? {
                    self.transferred(w, res, t);
                }
                Ok(true)
            }
            Pdu::Term { .. } => {
                debug!(peer = ?self.addrs.peer, "the host terminated the connection");
                match self.core.is_some() {
                    true => self.call(w, res, &mut |c, env| {
                        c.disconnect(env, "host terminated the connection", "host")
                    }),
                    false => self.close(w, res),
                }
                Ok(true)
            }
            // The framer lets through only what a host sends.
            _ => Err(Fatal {
                fes: fes::INVALID_HEADER_FIELD,
                fei: 0,
            }),
        }
    }

    /// A transfer's data all came: the request goes on (or fails, when a
    /// data digest did not match).
    fn transferred(&mut self, w: &mut Lend<'_>, res: &mut Res, t: Transfer) {
        if t.ok {
            self.call(w, res, &mut |c, env| c.fetched(env, t.req, true));
        } else {
            debug!(peer = ?self.addrs.peer, cid = t.cid, "data digest error in H2CData");
            crate::telemetry::metrics::reject("tcp_data_digest");
            self.call(w, res, &mut |c, env| c.fetch_corrupt(env, t.req));
        }
    }

    /// The core, made for the first capsule: a Connect names the queue id
    /// and size (bounded; the Connect itself is checked by the core, which
    /// refuses a size it was not made for). Another command gets a core of
    /// an admin queue that is not connected: it answers Command Sequence
    /// Error.
    fn make_core(&mut self, w: &mut Lend<'_>, sqe: &[u8]) {
        let cmd = Command::parse(sqe).unwrap_or_default();
        let (qid, sq) = if cmd.is_fabrics() && cmd.fctype() == nvme::opcode::fctype::CONNECT {
            let c = nvme::fabrics::ConnectCommand::from_command(&cmd);
            let max = if c.qid == 0 {
                crate::ADMIN_QUEUE_SIZE
            } else {
                crate::MAX_QUEUE_SIZE
            };
            (c.qid, c.sqsize.saturating_add(1).clamp(2, max))
        } else {
            (0, crate::ADMIN_QUEUE_SIZE)
        };
        let params = QueueParams {
            qid,
            sq_size: sq,
            sgl: SglKind::Transport,
        };
        let link = QueueLink::new(qid, w.waker.clone());
        self.core = Some(QueueCore::new(
            params,
            self.addrs.clone(),
            link,
            self.pending.take(),
            self.accepted,
        ));
        self.phase = Phase::Live;
    }

    /// The connection failed with `e`. A reset or a broken pipe is the
    /// host closing it (the Linux host closes its sockets with a zero
    /// linger, so a reset is how its queues end): that queue goes, as when
    /// it reads the end, and the controller stays for the host's other
    /// queues. A host resetting its controller closes the I/O queues first
    /// and then still asks the admin queue for CSTS; ending the admin queue
    /// with them leaves that command unanswered (over TLS the host waits
    /// out its 60 s admin timeout). nvmet shuts down only the queue on
    /// EPIPE and ECONNRESET too. Any other error fails the controller.
    fn lost(&mut self, w: &mut Lend<'_>, res: &mut Res, e: &std::io::Error) {
        use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
        match (self.core.is_some(), e.kind()) {
            (true, ConnectionReset | BrokenPipe) => self.call(w, res, &mut |c, env| {
                c.disconnect(env, "host reset the connection", "host")
            }),
            (true, _) => self.call(w, res, &mut |c, env| c.fail(env)),
            (false, _) => self.close(w, res),
        }
    }

    /// Writes what waits, as far as the socket takes it. Returns whether
    /// something was written.
    pub fn write(&mut self, w: &mut Lend<'_>, res: &mut Res) -> bool {
        if self.closing.is_some() {
            return false;
        }
        match self.send_queued(w, res) {
            Ok(wrote) => wrote,
            Err(e) => {
                debug!(peer = ?self.addrs.peer, error = %e, "send failed");
                self.lost(w, res, &std::io::Error::from(e));
                true
            }
        }
    }

    /// Sends queued PDUs until the socket would block; responses written
    /// whole are delivered (the core hears of each). Returns whether
    /// something was written, or the socket's error.
    fn send_queued(&mut self, w: &mut Lend<'_>, res: &mut Res) -> Result<bool, nix::errno::Errno> {
        use nix::sys::socket::MsgFlags;
        let mut wrote = false;
        while !self.tx.is_empty() {
            // Up to SEND_OUTPUTS outputs of at most 3 parts (header, data,
            // digest) each: on the stack, not the heap.
            let mut iov = [IoSlice::new(&[]); 3 * SEND_OUTPUTS];
            let mut n = 0;
            // A large read's data goes alone in a zero-copy send: the
            // kernel would pin every part of the call, headers too.
            let mut zero_copy = None;
            let mut skip = self.tx_off;
            'outs: for o in self.tx.iter().take(SEND_OUTPUTS) {
                // SAFETY: the data of a response's C2HData PDU: the request
                // holds its pool buffer until the response was written.
                let data = o
                    .data
                    .map(|(p, l)| unsafe { std::slice::from_raw_parts(p.0, l as usize) });
                let zc = self.zc.on && o.data.is_some_and(|(_, l)| l >= zerocopy::MIN_LEN);
                for (i, part) in [Some(&o.head[..]), data, o.dgst.as_ref().map(|d| &d[..])]
                    .into_iter()
                    .enumerate()
                {
                    let Some(part) = part else {
                        continue;
                    };
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    if zc && i == 1 {
                        if n > 0 {
                            break 'outs;
                        }
                        iov[n] = IoSlice::new(&part[skip..]);
                        n += 1;
                        zero_copy = o
                            .data
                            .map(|(p, _)| p.0 as usize - res.pool_mem.ptr() as usize);
                        break 'outs;
                    }
                    iov[n] = IoSlice::new(&part[skip..]);
                    n += 1;
                    skip = 0;
                }
            }
            if n == 0 {
                // Only the markers of responses to a closed connection.
                break;
            }
            let mut flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            if zero_copy.is_some() {
                flags |= MsgFlags::from_bits_retain(libc::MSG_ZEROCOPY);
            }
            let r = nix::sys::socket::sendmsg(
                self.stream.as_raw_fd(),
                &iov[..n],
                &[],
                flags,
                None::<&nix::sys::socket::SockaddrStorage>,
            );
            match r {
                Ok(mut k) => {
                    wrote = true;
                    self.blocked = false;
                    if let Some(offset) = zero_copy {
                        self.zc.sent(offset);
                        crate::telemetry::metrics::zero_copy("sent", 1);
                    }
                    // Whole outputs written: their responses are delivered.
                    while let Some(o) = self.tx.front() {
                        let left = o.len() - self.tx_off;
                        if k < left {
                            self.tx_off += k;
                            break;
                        }
                        k -= left;
                        self.tx_off = 0;
                        if let Some(t) = self.tx.pop_front().and_then(|o| o.sent) {
                            self.call(w, res, &mut |c, env| c.sent(env, t, true));
                        }
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => {
                    self.blocked = true;
                    break;
                }
                Err(nix::errno::Errno::EINTR) => {}
                // Socket memory for pinned pages ran out (optmem_max): the
                // connection sends by copy from now on.
                Err(nix::errno::Errno::ENOBUFS) if zero_copy.is_some() => {
                    debug!(peer = ?self.addrs.peer, "no socket memory to pin a zero-copy send (net.core.optmem_max): sending by copy");
                    crate::telemetry::metrics::zero_copy("refused", 1);
                    self.zc.on = false;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(wrote)
    }

    /// Timers: the connection's deadline before its core exists, then the
    /// core's. Returns whether the queue ended and may go.
    pub fn tick(&mut self, w: &mut Lend<'_>, res: &mut Res, stop: bool) -> bool {
        if self.core.is_none() {
            // Evicted: its socket was shut down, and it closes here if a
            // read has not seen that yet.
            let evicted = self.pending.as_ref().is_some_and(|p| p.evicted());
            if evicted || stop || w.now.saturating_duration_since(self.accepted) > CONNECT_TIMEOUT {
                if self.closing.is_none() && !evicted {
                    debug!(peer = ?self.addrs.peer, phase = ?self.phase,
                           "no ICReq and Connect within {CONNECT_TIMEOUT:?}; closing");
                    crate::telemetry::metrics::reject("tcp_connect_timeout");
                }
                self.close(w, res);
            }
        } else {
            if stop {
                self.call(w, res, &mut |c, env| {
                    c.disconnect(env, "target stopping", "shutdown")
                });
            }
            self.call(w, res, &mut |c, env| c.timer(env));
        }
        // Markers of responses that failed at close.
        if self.closing.is_some() {
            self.close(w, res);
        }
        let Some(since) = self.closing else {
            return false;
        };
        if self.core.as_ref().is_some_and(|c| c.busy()) {
            return false;
        }
        // The socket stays until the kernel gave back every buffer it sends
        // from; then its held buffers go back to the pool (the group's
        // reclaim) and the queue may go.
        if !self.zc.outstanding() {
            return true;
        }
        if w.now.saturating_duration_since(since) < zerocopy::GIVE_UP {
            return false;
        }
        warn!(peer = ?self.addrs.peer, buffers = self.zc.held(),
              "the kernel did not give back a closed connection's zero-copy buffers: they stay out of the pool");
        crate::telemetry::metrics::zero_copy("abandoned", self.zc.held() as u64);
        true
    }

    /// The queue leaves its worker: it detaches from its controller.
    pub fn teardown(&mut self, tally: &mut crate::counters::Tally) {
        if let Some(c) = self.core.as_mut() {
            c.teardown(tally);
        }
    }
}
