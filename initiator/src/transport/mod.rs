//! One host-side queue of an NVMe over Fabrics transport: NVMe/RDMA
//! ([`rdma::RdmaQueue`]) or NVMe/TCP ([`tcp::TcpQueue`]), both behind
//! [`HostQueue`], and [`Queue`], either one chosen at connect time. The
//! command bookkeeping is [`crate::slots`].

pub mod rdma;
pub mod tcp;
pub mod tls;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme::command::Command;
use nvme::completion::Completion;
use nvme::SQE_SIZE;

use crate::error::{Error, Result};
pub use rdma::RdmaQueue;
pub use tcp::TcpQueue;

/// The fabric a queue runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// NVMe/RDMA (RDMA-CM, keyed SGLs).
    #[default]
    Rdma,
    /// NVMe/TCP.
    Tcp,
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Kind, String> {
        match s {
            "rdma" => Ok(Kind::Rdma),
            "tcp" => Ok(Kind::Tcp),
            _ => Err(format!("unknown transport {s:?} (rdma or tcp)")),
        }
    }
}

/// How data buffers are exposed to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowMode {
    /// A type-2 memory window per I/O, bound before the command and closed by
    /// the target's SEND_WITH_INVALIDATE (SGL subtype 0xF) or a LOCAL_INV.
    Mw,
    /// A memory region per buffer, registered once with remote access
    /// (SGL subtype 0x0). For devices without windows, and for comparison.
    Mr,
}

/// The data a command moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xfer {
    /// No data.
    None,
    /// `n` bytes from the slot buffer to the target (a write).
    ToTarget(u32),
    /// `n` bytes from the target into the slot buffer (a read).
    FromTarget(u32),
}

/// Queue parameters.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Queue id (0 = admin).
    pub qid: u16,
    /// Queue size: commands in flight, receive buffers, slots.
    pub depth: u16,
    /// Bytes per data slot (largest transfer).
    pub slot_size: usize,
    /// Window mode.
    pub windows: WindowMode,
    /// Largest write sent as in-capsule data (0: never).
    pub inline_max: usize,
    /// Timeout for address/route resolution and connection.
    pub timeout: Duration,
    /// Local address to bind (None: any).
    pub src: Option<SocketAddr>,
    /// Busy-poll the CQ this long before sleeping on the completion channel.
    pub spin: Duration,
    /// Raw mode: the RDMA-CM private data to send instead of the NVMe/RDMA
    /// request built from `qid` and `depth` (malformed-input tests).
    pub cm_private: Option<Vec<u8>>,
    /// NVMe/TCP: header and data digests (CRC32C) asked for in the ICReq.
    pub digests: bool,
    /// NVMe/TCP: TLS 1.3 with this PSK before the ICReq.
    pub tls: Option<tls::Offer>,
}

impl QueueConfig {
    /// A configuration with defaults: memory windows, no in-capsule data,
    /// 10 s timeout, no spinning.
    pub fn new(qid: u16, depth: u16, slot_size: usize) -> QueueConfig {
        QueueConfig {
            qid,
            depth,
            slot_size,
            windows: WindowMode::Mw,
            inline_max: 0,
            timeout: Duration::from_secs(10),
            src: None,
            spin: Duration::ZERO,
            cm_private: None,
            digests: false,
            tls: None,
        }
    }
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Command capsules sent.
    pub commands: u64,
    /// Memory windows bound.
    pub binds: u64,
    /// Windows closed by the target's SEND_WITH_INVALIDATE.
    pub remote_invalidations: u64,
    /// Windows closed by a LOCAL_INV because the response did not invalidate.
    pub local_invalidations: u64,
    /// Writes sent as in-capsule data.
    pub in_capsule: u64,
}

/// A completed command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// The slot (command id) it ran in; still reserved by the caller.
    pub tag: u16,
    /// The response.
    pub cqe: Completion,
}

/// Raw mode: what to send.
#[derive(Debug, Clone)]
pub struct RawRequest<'a> {
    /// The 64-byte SQE, sent as is (cid and SGL included) unless `window` is set.
    pub sqe: [u8; SQE_SIZE],
    /// Bytes appended to the capsule as in-capsule data.
    pub in_capsule: &'a [u8],
    /// If set, the SQE's SGL is replaced by a keyed SGL over a data slot for
    /// this transfer (as a normal command would get); `ToTarget` sends the
    /// first bytes of `write_data`.
    pub window: Option<Xfer>,
    /// Data for a `ToTarget` window.
    pub write_data: &'a [u8],
}

/// Raw mode: what came back.
#[derive(Debug, Clone)]
pub struct RawOutcome {
    /// The response as received (its cid is the one the SQE carried).
    pub cqe: Option<Completion>,
    /// For a `FromTarget` window: the bytes the target wrote.
    pub data: Vec<u8>,
    /// Why no response came (queue failed, disconnected, timed out).
    pub error: Option<String>,
}

/// What a queue of either transport keeps alike: its configuration, the
/// target's address, the command slots, counters, why it failed, and the
/// raw command in flight (the cid the caller chose, and its slot).
pub struct Common {
    cfg: QueueConfig,
    peer: SocketAddr,
    slots: crate::slots::Slots,
    broken: Option<String>,
    stats: QueueStats,
    raw: Option<(u16, u16)>,
    raw_cqe: Option<Completion>,
}

impl Common {
    fn new(peer: SocketAddr, cfg: QueueConfig) -> Common {
        Common {
            slots: crate::slots::Slots::new(cfg.depth),
            cfg,
            peer,
            broken: None,
            stats: QueueStats::default(),
            raw: None,
            raw_cqe: None,
        }
    }

    /// Marks the queue failed (the first reason stays) and returns the error.
    fn fail(&mut self, reason: String) -> Error {
        if self.broken.is_none() {
            self.broken = Some(reason);
        }
        Error::Queue {
            qid: self.cfg.qid,
            reason: self.broken.clone().unwrap_or_default(),
        }
    }

    /// The failure, if the queue failed.
    fn check(&self) -> Result<()> {
        match &self.broken {
            Some(r) => Err(Error::Queue {
                qid: self.cfg.qid,
                reason: r.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// What every transport's queue does: slots with data buffers, commands
/// submitted and completed, raw capsules. [`HostQueue::execute`] runs one
/// command on top of them.
pub trait HostQueue {
    /// What the queue keeps alike with the other transport's.
    fn common(&self) -> &Common;
    /// The same, to change.
    fn common_mut(&mut self) -> &mut Common;

    /// Queue id.
    fn qid(&self) -> u16 {
        self.common().cfg.qid
    }
    /// Queue depth.
    fn depth(&self) -> u16 {
        self.common().cfg.depth
    }
    /// Bytes per data slot.
    fn slot_size(&self) -> usize {
        self.common().cfg.slot_size
    }
    /// The target address.
    fn peer(&self) -> SocketAddr {
        self.common().peer
    }
    /// Sets the largest write sent in-capsule (0: none).
    fn set_inline_max(&mut self, n: usize) {
        let c = self.common_mut();
        c.cfg.inline_max = n.min(c.cfg.slot_size);
    }
    /// Counters.
    fn stats(&self) -> QueueStats {
        self.common().stats
    }
    /// Commands in flight.
    fn in_flight(&self) -> usize {
        self.common().slots.in_flight()
    }
    /// Why the queue failed, if it did.
    fn failure(&self) -> Option<&str> {
        self.common().broken.as_deref()
    }
    /// Reserves a slot (command id) with its data buffer.
    fn alloc(&mut self) -> Option<u16> {
        self.common_mut().slots.alloc()
    }
    /// Releases a reserved slot.
    fn release(&mut self, tag: u16) {
        let _ = self.common_mut().slots.release(tag);
    }
    /// The data buffer of a reserved slot, to read after its command
    /// completed.
    ///
    /// # Panics
    /// If the slot is not reserved (free, or in flight).
    fn buffer(&self, tag: u16) -> &[u8];
    /// The data buffer of a reserved slot, to fill before a write.
    ///
    /// # Panics
    /// If the slot is not reserved (free, or in flight).
    fn buffer_mut(&mut self, tag: u16) -> &mut [u8];
    /// Sends what was queued.
    fn flush(&mut self) -> Result<()>;
    /// Queues command `cmd` on reserved slot `tag` (its cid becomes `tag`,
    /// its SGL describes `xfer` over the slot buffer). Sent at the next
    /// [`flush`](Self::flush) or [`poll`](Self::poll).
    fn submit(&mut self, tag: u16, cmd: Command, xfer: Xfer) -> Result<()>;
    /// Sends queued work, then collects completed commands into `out`,
    /// waiting up to `wait` for at least one. Returns how many were added.
    fn poll(&mut self, out: &mut Vec<Done>, wait: Duration) -> Result<usize>;
    /// Raw mode: sends `req.sqe` as given (with optional in-capsule data, or
    /// the transport's data transfer over a data slot) on an idle queue and
    /// waits up to `timeout` for the response carrying the SQE's cid. A
    /// queue that timed out or failed is left failed.
    fn raw(&mut self, req: &RawRequest<'_>, timeout: Duration) -> Result<RawOutcome>;
    /// Whether the target hung up, waiting up to `wait`.
    fn peer_disconnected(&mut self, wait: Duration) -> bool;
    /// Starts a disconnect.
    fn disconnect(&self);

    /// Runs one command synchronously on a fresh slot: copies `data_out`
    /// into the slot for a `ToTarget` transfer, waits up to `timeout`, and
    /// copies a `FromTarget` transfer into `data_in`. Other commands that
    /// complete meanwhile go to `other`.
    fn execute(
        &mut self,
        cmd: Command,
        xfer: Xfer,
        data_out: &[u8],
        data_in: &mut [u8],
        timeout: Duration,
        other: &mut dyn FnMut(&mut Self, Done),
    ) -> Result<Completion>
    where
        Self: Sized,
    {
        let tag = self
            .alloc()
            .ok_or_else(|| Error::Invalid("no free command slot".into()))?;
        if let Xfer::ToTarget(n) = xfer {
            let n = (n as usize).min(self.slot_size()).min(data_out.len());
            self.buffer_mut(tag)[..n].copy_from_slice(&data_out[..n]);
        }
        if let Err(e) = self.submit(tag, cmd, xfer) {
            self.release(tag);
            return Err(e);
        }
        let cqe = self.wait_for(tag, timeout, other, crate::commands::name(&cmd))?;
        if let Xfer::FromTarget(n) = xfer {
            let n = (n as usize).min(data_in.len());
            data_in[..n].copy_from_slice(&self.buffer(tag)[..n]);
        }
        self.release(tag);
        Ok(cqe)
    }

    /// Waits up to `timeout` for the command in slot `tag` (`what`, for the
    /// error); others that complete meanwhile go to `other`.
    fn wait_for(
        &mut self,
        tag: u16,
        timeout: Duration,
        other: &mut dyn FnMut(&mut Self, Done),
        what: &str,
    ) -> Result<Completion>
    where
        Self: Sized,
    {
        let deadline = Instant::now() + timeout;
        let mut done = Vec::with_capacity(4);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!("{what} on queue {}", self.qid()),
                    after: timeout,
                });
            }
            self.poll(&mut done, left)?;
            let mut mine = None;
            for d in done.drain(..) {
                if d.tag == tag {
                    mine = Some(d.cqe);
                } else {
                    other(self, d);
                }
            }
            if let Some(c) = mine {
                return Ok(c);
            }
        }
    }
}

/// The end of a raw command (either transport): its outcome, the data of a
/// `FromTarget` transfer, the slot released; a timeout leaves the queue
/// failed (`fail`).
fn raw_outcome<Q: HostQueue>(
    q: &mut Q,
    tag: u16,
    req: &RawRequest<'_>,
    r: Result<Completion>,
    cqe: Option<Completion>,
    fail: impl FnOnce(&mut Q),
) -> RawOutcome {
    match r {
        Ok(_) => {
            let data = match req.window {
                Some(Xfer::FromTarget(n)) => q.buffer(tag)[..n as usize].to_vec(),
                _ => Vec::new(),
            };
            q.release(tag);
            RawOutcome {
                cqe,
                data,
                error: None,
            }
        }
        Err(e) => {
            if let Error::Timeout { .. } = e {
                fail(q);
            }
            RawOutcome {
                cqe,
                data: Vec::new(),
                error: Some(e.to_string()),
            }
        }
    }
}

/// A queue of either transport.
pub enum Queue {
    /// NVMe/RDMA.
    Rdma(RdmaQueue),
    /// NVMe/TCP.
    Tcp(TcpQueue),
}

impl Queue {
    /// Connects queue `cfg.qid` to the target at `dst` over `kind`. The
    /// NVMe-level Connect command is the caller's.
    pub fn connect(kind: Kind, dst: SocketAddr, cfg: QueueConfig) -> Result<Queue> {
        Ok(match kind {
            Kind::Rdma => Queue::Rdma(RdmaQueue::connect(dst, cfg)?),
            Kind::Tcp => Queue::Tcp(TcpQueue::connect(dst, cfg)?),
        })
    }

    /// The transport.
    pub fn kind(&self) -> Kind {
        match self {
            Queue::Rdma(_) => Kind::Rdma,
            Queue::Tcp(_) => Kind::Tcp,
        }
    }

    /// How data moves, for reports: `mw` or `mr` (RDMA windows or regions),
    /// `tcp`.
    pub fn data_mode(&self) -> &'static str {
        match self {
            Queue::Rdma(q) => match q.window_mode() {
                WindowMode::Mw => "mw",
                WindowMode::Mr => "mr",
            },
            Queue::Tcp(_) => "tcp",
        }
    }

    /// The RDMA queue, if it is one (windows, raw RDMA-level faults).
    pub fn as_rdma(&mut self) -> Option<&mut RdmaQueue> {
        match self {
            Queue::Rdma(q) => Some(q),
            Queue::Tcp(_) => None,
        }
    }
}

macro_rules! each {
    ($self:ident, $q:ident => $e:expr) => {
        match $self {
            Queue::Rdma($q) => $e,
            Queue::Tcp($q) => $e,
        }
    };
}

impl HostQueue for Queue {
    fn common(&self) -> &Common {
        each!(self, q => q.common())
    }
    fn common_mut(&mut self) -> &mut Common {
        each!(self, q => q.common_mut())
    }
    fn buffer(&self, tag: u16) -> &[u8] {
        each!(self, q => q.buffer(tag))
    }
    fn buffer_mut(&mut self, tag: u16) -> &mut [u8] {
        each!(self, q => q.buffer_mut(tag))
    }
    fn flush(&mut self) -> Result<()> {
        each!(self, q => q.flush())
    }
    fn submit(&mut self, tag: u16, cmd: Command, xfer: Xfer) -> Result<()> {
        each!(self, q => q.submit(tag, cmd, xfer))
    }
    fn poll(&mut self, out: &mut Vec<Done>, wait: Duration) -> Result<usize> {
        each!(self, q => q.poll(out, wait))
    }
    fn raw(&mut self, req: &RawRequest<'_>, timeout: Duration) -> Result<RawOutcome> {
        each!(self, q => q.raw(req, timeout))
    }
    fn peer_disconnected(&mut self, wait: Duration) -> bool {
        each!(self, q => q.peer_disconnected(wait))
    }
    fn disconnect(&self) {
        each!(self, q => q.disconnect())
    }
}
