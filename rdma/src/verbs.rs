//! Verbs objects: device context, protection domain, completion channel and
//! queue, memory region, queue pair posting and work completions.

use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

use rdma_sys::*;

use crate::buffer::Buffer;
use crate::device::Context;
use crate::error::{Error, Result};

/// A protection domain.
pub struct ProtectionDomain {
    raw: *mut ibv_pd,
    ctx: Context,
}

// SAFETY: PDs may be used from any thread.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a PD on `ctx` (which it holds).
    pub fn new(ctx: &Context) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: ctx is a live context.
        let raw = unsafe { ibv_alloc_pd(ctx.as_ptr()) };
        if raw.is_null() {
            return Err(Error::last("ibv_alloc_pd"));
        }
        Ok(Arc::new(ProtectionDomain {
            raw,
            ctx: ctx.clone(),
        }))
    }
    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    /// The raw pointer.
    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.raw
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: every MR/QP using this PD holds an Arc to it, so none is left.
        unsafe {
            ibv_dealloc_pd(self.raw);
        }
    }
}

/// Memory access rights of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(pub u32);

impl Access {
    /// Local write (needed as the sink of RDMA READ and RECV).
    pub const LOCAL_WRITE: Access = Access(ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Remote write.
    pub const REMOTE_WRITE: Access = Access(ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// Remote read.
    pub const REMOTE_READ: Access = Access(ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// Memory window binding allowed.
    pub const MW_BIND: Access = Access(ibv_access_flags::IBV_ACCESS_MW_BIND.0);
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A memory region: owns the buffer it registers and holds its PD.
///
/// Registered memory is written by the device (receives, RDMA READs, remote
/// writes) behind the compiler's back, so safe code cannot borrow it: reading
/// or writing it is an `unsafe` promise that no such access is in flight.
///
/// ```compile_fail,E0133
/// fn peek(mr: &rdma::MemoryRegion) -> u8 {
///     mr.bytes(0..1)[0] // a receive may be landing there: needs `unsafe`
/// }
/// ```
/// ```no_run
/// fn peek(mr: &rdma::MemoryRegion) -> u8 {
///     // SAFETY: (the caller knows) no work request writes byte 0 now.
///     unsafe { mr.bytes(0..1)[0] }
/// }
/// ```
pub struct MemoryRegion {
    raw: *mut ibv_mr,
    buf: Buffer,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: an MR is usable from any thread; the buffer is owned.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; its memory is reached only through `bytes`/`bytes_mut`
// (unsafe: the device may be writing it) or raw pointers.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `buf` with `access`.
    pub fn new(pd: &Arc<ProtectionDomain>, buf: Buffer, access: Access) -> Result<MemoryRegion> {
        // SAFETY: buf is a live mapping of buf.len() bytes that this MR will own.
        let raw = unsafe {
            ibv_reg_mr(
                pd.raw,
                buf.as_ptr() as *mut std::ffi::c_void,
                buf.len(),
                access.0 as i32,
            )
        };
        if raw.is_null() {
            return Err(Error::last("ibv_reg_mr"));
        }
        Ok(MemoryRegion {
            raw,
            buf,
            _pd: pd.clone(),
        })
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: raw is live.
        unsafe { (*self.raw).lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: raw is live.
        unsafe { (*self.raw).rkey }
    }
    /// Bytes of registered memory.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether the region is empty (never: a buffer has at least one page).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Start of the registered memory (for io_uring fixed buffers and raw
    /// users that keep the rules of [`bytes`](Self::bytes)).
    pub fn as_ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }
    /// Reads `range` of the registered memory. Panics if out of bounds.
    ///
    /// Once registered, the memory is written by the device behind the
    /// compiler's back, so a safe shared slice could change under its reader:
    /// reading is the caller's promise.
    ///
    /// # Safety
    /// Nothing may write `range` while the slice lives: no receive or RDMA
    /// READ posted into it, and no remote write through this region's key (or
    /// a window bound on it) possible.
    pub unsafe fn bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf.as_slice()[range]
    }
    /// Writes `range` of the registered memory. Panics if out of bounds.
    ///
    /// # Safety
    /// Nothing else may read or write `range` while the slice lives: no work
    /// request naming it posted, and no remote access to it possible.
    pub unsafe fn bytes_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.buf.as_mut_slice()[range]
    }
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    /// A handle naming this region in a memory-window bind request.
    pub fn handle(&self) -> MrHandle {
        MrHandle(self.raw)
    }
    /// An SGE for `[offset, offset+len)` of this region. Panics if out of bounds.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        assert!(offset + len as usize <= self.buf.len(), "SGE out of region");
        Sge {
            addr: self.addr() + offset as u64,
            len,
            lkey: self.lkey(),
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregistering the MR created in `new`; the buffer is unmapped after.
        unsafe {
            ibv_dereg_mr(self.raw);
        }
    }
}

/// Names a memory region in a [`SendOp::BindMw`] request. Posting such a
/// request is unsafe: the region must outlive the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrHandle(*mut ibv_mr);

/// Names a memory window in a [`SendOp::BindMw`] request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwHandle(*mut ibv_mw);

/// A type-2 memory window: a remotely accessible view of part of a memory
/// region, opened by a BIND_MW work request on one queue pair (type 2B) and
/// closed by invalidation (the peer's SEND_WITH_INVALIDATE, or a local
/// LOCAL_INV). Each bind gives it a fresh key: the low 8 bits of the rkey
/// advance, so a key seen by the peer for one I/O is useless for the next.
pub struct MemoryWindow {
    raw: *mut ibv_mw,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: a MW may be used from any thread; binds go through a QP.
unsafe impl Send for MemoryWindow {}
// SAFETY: as above.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    /// Allocates a type-2 window in `pd`.
    pub fn new_type2(pd: &Arc<ProtectionDomain>) -> Result<MemoryWindow> {
        // SAFETY: pd is live; the result is checked.
        let raw = unsafe { ibv_alloc_mw(pd.raw, ibv_mw_type::IBV_MW_TYPE_2) };
        match raw {
            Some(p) if !p.is_null() => Ok(MemoryWindow {
                raw: p,
                _pd: pd.clone(),
            }),
            _ => Err(Error::last("ibv_alloc_mw")),
        }
    }
    /// The key of the current (or last) binding.
    pub fn rkey(&self) -> u32 {
        // SAFETY: raw is live.
        unsafe { (*self.raw).rkey }
    }
    /// The key the next bind will give the window: the same index with the low
    /// 8 bits advanced by one.
    pub fn next_rkey(&self) -> u32 {
        let k = self.rkey();
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }
    /// Records that a bind to `rkey` was posted (the provider checks the
    /// window's current key against the device's on the next bind).
    pub fn set_rkey(&mut self, rkey: u32) {
        // SAFETY: raw is live and owned by self.
        unsafe { (*self.raw).rkey = rkey };
    }
    /// A handle for a bind request.
    pub fn handle(&self) -> MwHandle {
        MwHandle(self.raw)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: deallocating the window allocated in `new_type2`.
        unsafe {
            ibv_dealloc_mw(self.raw);
        }
    }
}

/// A completion channel (a file descriptor that becomes readable when an armed
/// CQ gets a completion).
pub struct CompletionChannel {
    raw: *mut ibv_comp_channel,
    _ctx: Context,
}

// SAFETY: usable from any thread.
unsafe impl Send for CompletionChannel {}
// SAFETY: as above.
unsafe impl Sync for CompletionChannel {}

impl CompletionChannel {
    /// Creates a channel on `ctx` (which it holds), in non-blocking mode.
    pub fn new(ctx: &Context) -> Result<Arc<CompletionChannel>> {
        // SAFETY: ctx is live.
        let raw = unsafe { ibv_create_comp_channel(ctx.as_ptr()) };
        if raw.is_null() {
            return Err(Error::last("ibv_create_comp_channel"));
        }
        let ch = CompletionChannel {
            raw,
            _ctx: ctx.clone(),
        };
        set_nonblocking(ch.fd())?;
        Ok(Arc::new(ch))
    }
    /// The file descriptor.
    pub fn fd(&self) -> RawFd {
        // SAFETY: raw is live.
        unsafe { (*self.raw).fd }
    }
    /// Waits up to `timeout_ms` (-1: forever) for the channel to become
    /// readable. Returns whether it did.
    pub fn wait(&self, timeout_ms: i32) -> Result<bool> {
        wait_readable(self.fd(), timeout_ms, "poll(completion channel)")
    }
}

/// Waits up to `timeout_ms` (-1: forever) for `fd` to become readable.
/// Returns whether it did (an interrupted wait counts as not yet).
pub(crate) fn wait_readable(fd: RawFd, timeout_ms: i32, call: &'static str) -> Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // SAFETY: the callers pass the descriptor of a channel they own and keep
    // open for the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let t = if timeout_ms < 0 {
        PollTimeout::NONE
    } else {
        PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::MAX)
    };
    match poll(&mut fds, t) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(Error::Os {
            call,
            source: e.into(),
        }),
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on this channel holds an Arc to it, so none is left.
        unsafe {
            ibv_destroy_comp_channel(self.raw);
        }
    }
}

/// Sets O_NONBLOCK on `fd` (a descriptor a verbs or RDMA-CM object owns).
pub(crate) fn set_nonblocking(fd: RawFd) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let os = |e: nix::errno::Errno| Error::Os {
        call: "fcntl(O_NONBLOCK)",
        source: e.into(),
    };
    let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL).map_err(os)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).map_err(os)?;
    Ok(())
}

/// A completion queue bound to a completion channel.
pub struct CompletionQueue {
    raw: *mut ibv_cq,
    unacked: std::sync::atomic::AtomicU32,
    channel: Arc<CompletionChannel>,
}

// SAFETY: ibv_poll_cq / ibv_req_notify_cq are thread safe in libibverbs.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// Creates a CQ with at least `entries` entries.
    pub fn new(channel: &Arc<CompletionChannel>, entries: u32) -> Result<Arc<CompletionQueue>> {
        // SAFETY: the channel's context is live; no cq_context.
        let raw = unsafe {
            ibv_create_cq(
                (*channel.raw).context,
                entries as i32,
                ptr::null_mut(),
                channel.raw,
                0,
            )
        };
        if raw.is_null() {
            return Err(Error::last("ibv_create_cq"));
        }
        Ok(Arc::new(CompletionQueue {
            raw,
            unacked: 0.into(),
            channel: channel.clone(),
        }))
    }

    /// Polls up to `out.len()` completions; returns how many were written.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // SAFETY: WorkCompletion is repr(transparent) over ibv_wc; out is valid for len entries.
        let n = unsafe { ibv_poll_cq(self.raw, out.len() as i32, out.as_mut_ptr() as *mut ibv_wc) };
        if n < 0 {
            return Err(Error::Os {
                call: "ibv_poll_cq",
                source: std::io::Error::from_raw_os_error(-n),
            });
        }
        Ok(n as usize)
    }

    /// Arms the CQ: the channel becomes readable at the next completion.
    pub fn req_notify(&self) -> Result<()> {
        // SAFETY: raw is live.
        let r = unsafe { ibv_req_notify_cq(self.raw, 0) };
        if r != 0 {
            return Err(Error::from_ret("ibv_req_notify_cq", r));
        }
        Ok(())
    }

    /// Consumes pending channel events (non-blocking). Returns how many.
    pub fn drain_events(&self) -> u32 {
        let mut n = 0;
        loop {
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut ctx: *mut std::ffi::c_void = ptr::null_mut();
            // SAFETY: the channel is non-blocking; out pointers are valid.
            let r = unsafe { ibv_get_cq_event(self.channel.raw, &mut cq, &mut ctx) };
            if r != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            let total = self
                .unacked
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed)
                + n;
            if total >= 64 {
                self.unacked.store(0, std::sync::atomic::Ordering::Relaxed);
                // SAFETY: acking events this CQ received.
                unsafe { ibv_ack_cq_events(self.raw, total) };
            }
        }
        n
    }

    /// The completion channel.
    pub fn channel(&self) -> &Arc<CompletionChannel> {
        &self.channel
    }
    /// The raw pointer.
    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.raw
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let n = *self.unacked.get_mut();
        // SAFETY: all events must be acked before destroy; no QP uses this CQ anymore
        // (each holds an Arc).
        unsafe {
            if n > 0 {
                ibv_ack_cq_events(self.raw, n);
            }
            ibv_destroy_cq(self.raw);
        }
    }
}

/// A shared receive queue: receive buffers posted once for many queue pairs.
/// A receive it completes names its queue pair by [`WorkCompletion::qp_num`].
/// Queue pairs created on it hold it (see [`crate::CmId::create_qp_with`]).
pub struct SharedReceiveQueue {
    raw: *mut ibv_srq,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: ibv_post_srq_recv is thread safe in libibverbs; the SRQ is owned.
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue {}

impl SharedReceiveQueue {
    /// Creates an SRQ of `max_wr` receives with `max_sge` SGEs each.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Arc<SharedReceiveQueue>> {
        // SAFETY: plain data; zero is a valid value.
        let mut attr: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        // SAFETY: pd is live; attr is valid for the call; the result is checked.
        let raw = unsafe { ibv_create_srq(pd.raw, &mut attr) };
        if raw.is_null() {
            return Err(Error::last("ibv_create_srq"));
        }
        Ok(Arc::new(SharedReceiveQueue {
            raw,
            _pd: pd.clone(),
        }))
    }

    /// Posts one receive WR with up to 4 SGEs.
    ///
    /// # Safety
    /// As [`QueuePair::post_recv`]: the memory stays registered and untouched
    /// until the receive completes or the SRQ is destroyed.
    pub unsafe fn post_recv(&self, wr_id: u64, sg: &[Sge]) -> Result<()> {
        // SAFETY: the SRQ is live; memory per the caller's guarantee.
        unsafe {
            post_recv_with("ibv_post_srq_recv", wr_id, sg, |wr, bad| {
                ibv_post_srq_recv(self.raw, wr, bad)
            })
        }
    }

    /// The raw pointer.
    pub fn as_ptr(&self) -> *mut ibv_srq {
        self.raw
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: every QP on this SRQ holds an Arc to it, so none is left.
        unsafe {
            ibv_destroy_srq(self.raw);
        }
    }
}

/// Builds one receive WR over `sg` and hands it to `post` (a QP's or an SRQ's).
///
/// # Safety
/// As the post call's: the memory stays registered and untouched until the
/// receive completes.
unsafe fn post_recv_with(
    call: &'static str,
    wr_id: u64,
    sg: &[Sge],
    post: impl FnOnce(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32,
) -> Result<()> {
    let (mut sges, n) = raw_sges(sg, call)?;
    let mut wr = ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: sges.as_mut_ptr(),
        num_sge: n,
    };
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    // wr and sges live for the call.
    let r = post(&mut wr, &mut bad);
    if r != 0 {
        return Err(Error::from_ret(call, r));
    }
    Ok(())
}

fn raw_sges(sg: &[Sge], call: &'static str) -> Result<([ibv_sge; MAX_SGE], i32)> {
    if sg.len() > MAX_SGE {
        return Err(Error::Invalid {
            call,
            reason: "too many SGEs",
        });
    }
    // SAFETY: plain data.
    let mut sges: [ibv_sge; MAX_SGE] = unsafe { std::mem::zeroed() };
    for (j, s) in sg.iter().enumerate() {
        sges[j] = ibv_sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        };
    }
    Ok((sges, sg.len() as i32))
}

/// Queue pair sizing.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
}

/// A scatter/gather element: `len` bytes at `addr` in the region with `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the region that holds it.
    pub lkey: u32,
}

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND_WITH_INVALIDATE of this remote key.
    SendWithInv(u32),
    /// RDMA READ from the remote window into the local SGEs.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE of the local SGEs to the remote window.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// BIND_MW: opens type-2 window `mw` on `[addr, addr+len)` of region `mr`
    /// with `access` (remote read and/or write), under the new key `rkey`.
    /// Takes no SGEs.
    BindMw {
        /// The window.
        mw: MwHandle,
        /// The region it views.
        mr: MrHandle,
        /// Start address (inside the region).
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Remote access granted.
        access: Access,
        /// The window's new key ([`MemoryWindow::next_rkey`]).
        rkey: u32,
    },
    /// LOCAL_INV of a window or region key. Takes no SGEs.
    LocalInv(u32),
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local buffers.
    pub sges: &'a [Sge],
    /// Generate a completion.
    pub signaled: bool,
}

/// A reusable batch of send-queue work requests, posted with one
/// `ibv_post_send` call (one doorbell). Holds no allocation per request.
pub struct SendBatch {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<[ibv_sge; 2]>,
    len: usize,
}

// SAFETY: the raw pointers inside point only into the batch's own vectors.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// A batch of at most `cap` work requests with up to 2 SGEs each.
    pub fn new(cap: usize) -> SendBatch {
        SendBatch {
            // SAFETY: plain data; zero is a valid value.
            wrs: (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect(),
            // SAFETY: as above.
            sges: (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect(),
            len: 0,
        }
    }
    /// Number of queued requests.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Room left.
    pub fn room(&self) -> usize {
        self.wrs.len() - self.len
    }
    /// Queues a request (at most 2 SGEs). Returns false if the batch is full.
    pub fn push(&mut self, r: &SendRequest<'_>) -> bool {
        self.push_with(r, false)
    }

    /// Queues a request whose data the device copies into the work request at
    /// post time (`IBV_SEND_INLINE`): its SGEs need no memory region, but must
    /// hold no more than the queue pair's `max_inline_data` bytes in all, and
    /// stay valid until [`SendBatch::post`]. Returns false if the batch is full.
    pub fn push_inline(&mut self, r: &SendRequest<'_>) -> bool {
        self.push_with(r, true)
    }

    fn push_with(&mut self, r: &SendRequest<'_>, inline: bool) -> bool {
        if self.len == self.wrs.len() || r.sges.len() > 2 {
            return false;
        }
        let i = self.len;
        for (j, s) in r.sges.iter().enumerate() {
            self.sges[i][j] = ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            };
        }
        // SAFETY: plain data.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = r.wr_id;
        w.num_sge = r.sges.len() as i32;
        w.send_flags = if r.signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        if inline {
            w.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        fill_op(&mut w, r.op);
        self.wrs[i] = w;
        self.len += 1;
        true
    }
    /// Posts everything queued, in order, and empties the batch.
    ///
    /// # Safety
    /// As [`QueuePair::post_send`], for every queued request.
    pub unsafe fn post(&mut self, qp: &QueuePair) -> Result<()> {
        let n = std::mem::replace(&mut self.len, 0);
        if n == 0 {
            return Ok(());
        }
        let base = self.wrs.as_mut_ptr();
        for i in 0..n {
            self.wrs[i].sg_list = self.sges[i].as_mut_ptr();
            // SAFETY: i + 1 <= n <= cap: within the vector (or null for the last).
            self.wrs[i].next = if i + 1 < n {
                unsafe { base.add(i + 1) }
            } else {
                ptr::null_mut()
            };
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the chain lives in self for the call; memory per the caller's guarantee.
        let r = unsafe { ibv_post_send(qp.raw, base, &mut bad) };
        if r != 0 {
            return Err(Error::from_ret("ibv_post_send", r));
        }
        Ok(())
    }
}

fn fill_op(w: &mut ibv_send_wr, op: SendOp) {
    match op {
        SendOp::Send => w.opcode = ibv_wr_opcode::IBV_WR_SEND,
        SendOp::SendWithInv(key) => {
            w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
            w.imm_data_invalidated_rkey_union.invalidated_rkey = key;
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            w.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            w.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::RdmaWrite { remote_addr, rkey } => {
            w.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            w.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::BindMw {
            mw,
            mr,
            addr,
            len,
            access,
            rkey,
        } => {
            w.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
            w.bind_mw_tso_union.bind_mw = bind_mw_t {
                mw: mw.0,
                rkey,
                bind_info: ibv_mw_bind_info {
                    mr: mr.0,
                    addr,
                    length: len,
                    mw_access_flags: access.0,
                },
            };
        }
        SendOp::LocalInv(rkey) => {
            w.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
            w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        }
    }
}

/// The queue pair of a connected [`crate::CmId`], borrowed from it: it
/// cannot outlive the id, which destroys the QP.
///
/// ```no_run
/// fn qp_num_of(id: &rdma::CmId) -> Option<u32> {
///     id.qp().map(|qp| qp.qp_num())
/// }
/// ```
/// A queue pair kept after its id is gone does not compile:
/// ```compile_fail
/// fn stale(ch: &std::sync::Arc<rdma::EventChannel>) -> Option<u32> {
///     let qp = {
///         let id = rdma::CmId::new(ch).ok()?;
///         id.qp()?
///     };
///     Some(qp.qp_num())
/// }
/// ```
#[derive(Clone, Copy)]
pub struct QueuePair<'id> {
    pub(crate) raw: *mut ibv_qp,
    pub(crate) _id: std::marker::PhantomData<&'id crate::CmId>,
}

const MAX_CHAIN: usize = 4;
const MAX_SGE: usize = 4;

impl QueuePair<'_> {
    /// Posts a chain of up to 4 send WRs, each with up to 4 SGEs.
    ///
    /// # Safety
    /// The memory named by every SGE must stay registered, and must not be
    /// touched by the CPU in a conflicting way, until the WR completes (or a
    /// later signaled WR on this QP completes).
    pub unsafe fn post_send(&self, reqs: &[SendRequest<'_>]) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        if reqs.len() > MAX_CHAIN || reqs.iter().any(|r| r.sges.len() > MAX_SGE) {
            return Err(Error::Invalid {
                call: "ibv_post_send",
                reason: "too many work requests or SGEs",
            });
        }
        // SAFETY: ibv_send_wr and ibv_sge are plain data; zero is valid.
        let mut wrs: [ibv_send_wr; MAX_CHAIN] = unsafe { std::mem::zeroed() };
        let mut sges: [[ibv_sge; MAX_SGE]; MAX_CHAIN] = unsafe { std::mem::zeroed() };
        let n = reqs.len();
        for (i, r) in reqs.iter().enumerate() {
            for (j, s) in r.sges.iter().enumerate() {
                sges[i][j] = ibv_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                };
            }
            let w = &mut wrs[i];
            w.wr_id = r.wr_id;
            w.sg_list = sges[i].as_mut_ptr();
            w.num_sge = r.sges.len() as i32;
            w.send_flags = if r.signaled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            fill_op(w, r.op);
        }
        let base = wrs.as_mut_ptr();
        for (i, w) in wrs.iter_mut().enumerate().take(n - 1) {
            // SAFETY: i+1 < n <= MAX_CHAIN, within the array.
            w.next = unsafe { base.add(i + 1) };
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the WR chain and SGE arrays live on this stack frame for the call;
        // the caller guarantees the memory they name (see above).
        let r = unsafe { ibv_post_send(self.raw, base, &mut bad) };
        if r != 0 {
            return Err(Error::from_ret("ibv_post_send", r));
        }
        Ok(())
    }

    /// Posts one receive WR with up to 4 SGEs.
    ///
    /// # Safety
    /// The memory named by the SGEs must stay registered and untouched until the
    /// receive completes (or the QP is destroyed).
    pub unsafe fn post_recv(&self, wr_id: u64, sg: &[Sge]) -> Result<()> {
        // SAFETY: the QP is live; memory per the caller's guarantee.
        unsafe {
            post_recv_with("ibv_post_recv", wr_id, sg, |wr, bad| {
                ibv_post_recv(self.raw, wr, bad)
            })
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: raw is live while the owning CmId lives (QueuePair is borrowed from it).
        unsafe { (*self.raw).qp_num }
    }
}

/// Work completion opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// SEND (including SEND_WITH_INV).
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// RECV.
    Recv,
    /// BIND_MW.
    BindMw,
    /// LOCAL_INV.
    LocalInv,
    /// Anything else.
    Other(u32),
}

/// A work completion (layout-identical to `ibv_wc`).
#[repr(transparent)]
pub struct WorkCompletion(ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain data.
        WorkCompletion(unsafe { std::mem::zeroed() })
    }
}

impl WorkCompletion {
    /// The WR id given when posting.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// Whether the WR succeeded.
    pub fn is_ok(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_SUCCESS
    }
    /// Whether the WR was flushed because the QP went to the error state.
    pub fn is_flush(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR
    }
    /// Whether the peer refused an RDMA access (bad key, range or rights).
    pub fn is_remote_access_error(&self) -> bool {
        self.0.status == ibv_wc_status::IBV_WC_REM_ACCESS_ERR
    }
    /// Raw status.
    pub fn status(&self) -> u32 {
        self.0.status
    }
    /// Status as the verbs constant's short name (`REM_ACCESS_ERR`, ...), for
    /// metrics labels.
    pub fn status_name(&self) -> &'static str {
        const NAMES: [&str; 24] = [
            "SUCCESS",
            "LOC_LEN_ERR",
            "LOC_QP_OP_ERR",
            "LOC_EEC_OP_ERR",
            "LOC_PROT_ERR",
            "WR_FLUSH_ERR",
            "MW_BIND_ERR",
            "BAD_RESP_ERR",
            "LOC_ACCESS_ERR",
            "REM_INV_REQ_ERR",
            "REM_ACCESS_ERR",
            "REM_OP_ERR",
            "RETRY_EXC_ERR",
            "RNR_RETRY_EXC_ERR",
            "LOC_RDD_VIOL_ERR",
            "REM_INV_RD_REQ_ERR",
            "REM_ABORT_ERR",
            "INV_EECN_ERR",
            "INV_EEC_STATE_ERR",
            "FATAL_ERR",
            "RESP_TIMEOUT_ERR",
            "GENERAL_ERR",
            "TM_ERR",
            "TM_RNDV_INCOMPLETE",
        ];
        NAMES
            .get(self.0.status as usize)
            .copied()
            .unwrap_or("UNKNOWN")
    }
    /// Status as text.
    pub fn status_str(&self) -> String {
        // SAFETY: returns a static C string for any status value.
        let p = unsafe { ibv_wc_status_str(self.0.status) };
        if p.is_null() {
            return format!("status {}", self.0.status);
        }
        // SAFETY: non-null static NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
    /// Opcode (valid only when `is_ok`).
    pub fn opcode(&self) -> WcOpcode {
        match self.0.opcode {
            ibv_wc_opcode::IBV_WC_SEND => WcOpcode::Send,
            ibv_wc_opcode::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            ibv_wc_opcode::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            ibv_wc_opcode::IBV_WC_RECV => WcOpcode::Recv,
            ibv_wc_opcode::IBV_WC_BIND_MW => WcOpcode::BindMw,
            ibv_wc_opcode::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
            o => WcOpcode::Other(o),
        }
    }
    /// Bytes received (RECV).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// The rkey the peer invalidated with its SEND_WITH_INV, if any.
    ///
    /// Hardware providers report it with `IBV_WC_WITH_INV` (bit 3). Soft-RoCE
    /// copies the kernel's completion to user space untranslated, where the
    /// kernel's `IB_WC_WITH_INVALIDATE` is bit 2 (user space's
    /// `IBV_WC_IP_CSUM_OK`, which no provider sets on an RC receive), so both
    /// bits count. Missing an invalidation is not harmless: a LOCAL_INV of a
    /// window the peer already invalidated oopses the 6.1 rxe driver.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        const KERNEL_WITH_INVALIDATE: u32 = 1 << 2;
        let flags = ibv_wc_flags::IBV_WC_WITH_INV.0 | KERNEL_WITH_INVALIDATE;
        if self.0.opcode == ibv_wc_opcode::IBV_WC_RECV && self.0.wc_flags & flags != 0 {
            // SAFETY: the union holds the invalidated rkey when IBV_WC_WITH_INV is set.
            Some(unsafe { self.0.imm_data_invalidated_rkey_union.invalidated_rkey })
        } else {
            None
        }
    }
    /// Vendor error.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// The number of the local queue pair the work request ran on (how a
    /// receive from a shared receive queue names its connection).
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
}
