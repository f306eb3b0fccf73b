//! Queue pairs and shared receive queues: posting receives, and SEND /
//! SEND_WITH_INV / RDMA READ / RDMA WRITE / memory-window binds in batches
//! (one doorbell per batch, inline where the device allows).

use std::ptr;
use std::sync::Arc;

use rdma_sys::*;

use crate::error::{Error, Result};
use crate::memory::{Access, MrHandle, MwHandle, ProtectionDomain};

/// A shared receive queue: receive buffers posted once for many queue pairs.
/// A receive it completes names its queue pair by [`WorkCompletion::qp_num`](crate::WorkCompletion::qp_num).
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
        let raw = unsafe { ibv_create_srq(pd.as_ptr(), &mut attr) };
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
        /// The window's new key ([`MemoryWindow::next_rkey`](crate::MemoryWindow::next_rkey)).
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
/// `ibv_post_send` call (one doorbell). Holds no allocation per request;
/// the data of inline sends is copied into the batch.
pub struct SendBatch {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<[ibv_sge; 2]>,
    inline: Vec<[u8; INLINE_MAX]>,
    len: usize,
    largest_write: u32,
}

/// Bytes of data an inline send in a [`SendBatch`] may carry.
pub const INLINE_MAX: usize = 32;

// SAFETY: the raw pointers inside point into the batch's own vectors (their
// heap storage does not move with the batch), or at registered memory that
// the caller of `post` vouches for whichever thread posts.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// A batch of at most `cap` work requests with up to 2 SGEs each.
    pub fn new(cap: usize) -> SendBatch {
        SendBatch {
            // SAFETY: plain data; zero is a valid value.
            wrs: (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect(),
            // SAFETY: as above.
            sges: (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect(),
            inline: vec![[0; INLINE_MAX]; cap],
            len: 0,
            largest_write: 0,
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
    #[must_use = "a request that did not fit is not sent"]
    pub fn push(&mut self, r: &SendRequest<'_>) -> bool {
        self.push_with(r, None)
    }

    /// Queues a send of `data` (at most [`INLINE_MAX`] bytes, and no more
    /// than the queue pair's `max_inline_data`) that the device copies into
    /// the work request at post time (`IBV_SEND_INLINE`): the batch keeps a
    /// copy, so the data needs no memory region and the caller's buffer is
    /// free at once. `r.sges` is ignored. Returns false if the batch is full
    /// or the data too long.
    #[must_use = "a request that did not fit is not sent"]
    pub fn push_inline(&mut self, r: &SendRequest<'_>, data: &[u8]) -> bool {
        self.push_with(r, Some(data))
    }

    fn push_with(&mut self, r: &SendRequest<'_>, inline: Option<&[u8]>) -> bool {
        let sges = if inline.is_some() { 1 } else { r.sges.len() };
        if self.len == self.wrs.len() || sges > 2 || inline.is_some_and(|d| d.len() > INLINE_MAX) {
            return false;
        }
        let i = self.len;
        if let Some(d) = inline {
            self.inline[i][..d.len()].copy_from_slice(d);
            self.sges[i][0] = ibv_sge {
                addr: self.inline[i].as_ptr() as u64,
                length: d.len() as u32,
                lkey: 0,
            };
        } else {
            for (j, s) in r.sges.iter().enumerate() {
                self.sges[i][j] = ibv_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                };
            }
        }
        // SAFETY: plain data.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = r.wr_id;
        w.num_sge = sges as i32;
        w.send_flags = if r.signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        if inline.is_some() {
            w.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        fill_op(&mut w, r.op);
        if let SendOp::RdmaWrite { .. } = r.op {
            let bytes = r.sges.iter().map(|s| s.len).sum::<u32>();
            self.largest_write = self.largest_write.max(bytes);
        }
        self.wrs[i] = w;
        self.len += 1;
        true
    }
    /// Posts everything queued, in order, and empties the batch.
    ///
    /// # Safety
    /// As [`QueuePair::post_send`], for every queued request.
    pub unsafe fn post(&mut self, qp: &QueuePair) -> Result<()> {
        // SAFETY: the borrowed queue pair is live; memory per the caller.
        unsafe { self.post_raw(qp.raw) }
    }

    /// Drops everything queued, unposted.
    pub fn clear(&mut self) {
        self.len = 0;
        self.largest_write = 0;
    }

    /// The longest RDMA WRITE queued, in bytes (0: none).
    pub fn largest_write(&self) -> u32 {
        self.largest_write
    }

    /// # Safety
    /// `qp` is a live queue pair; memory as [`QueuePair::post_send`].
    pub(crate) unsafe fn post_raw(&mut self, qp: *mut ibv_qp) -> Result<()> {
        self.largest_write = 0;
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
        let r = unsafe { ibv_post_send(qp, base, &mut bad) };
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
    pub(crate) lane: &'id std::sync::Arc<crate::lane::Lane>,
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

    /// Sets the RNR timer of a connected (RTS) queue pair: how long the peer
    /// waits before resending a message that found no receive posted here, in
    /// the InfiniBand encoding ([`rnr_timer_us`]: 1 = 0.01 ms ... 31 = 491.52
    /// ms, and 0 = 655.36 ms). The connection manager leaves it at 0, the
    /// longest.
    pub fn set_min_rnr_timer(&self, code: u8) -> Result<()> {
        // SAFETY: ibv_qp_attr is plain data; zero is a valid initial value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.min_rnr_timer = code & 0x1f;
        let mask = ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0 as i32;
        // SAFETY: raw is live (borrowed from its CmId); an RTS-to-RTS change
        // of an optional attribute only.
        let r = unsafe { ibv_modify_qp(self.raw, &mut attr, mask) };
        if r != 0 {
            return Err(Error::from_ret("ibv_modify_qp(MIN_RNR_TIMER)", r));
        }
        Ok(())
    }

    /// Moves the QP to the error state without a word to the peer: its work
    /// requests flush, and the peer's requests go unanswered from now on (as
    /// from a host that lost power). For fault tests.
    pub fn set_error(&self) -> Result<()> {
        // SAFETY: ibv_qp_attr is plain data; zero is a valid initial value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: raw is live (borrowed from its CmId); only the state changes.
        let r =
            unsafe { ibv_modify_qp(self.raw, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        if r != 0 {
            return Err(Error::from_ret("ibv_modify_qp(ERR)", r));
        }
        Ok(())
    }
}

/// The InfiniBand RNR timer values (IBA table 45) in microseconds, by code.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The delay of RNR timer `code`, in microseconds.
pub fn rnr_timer_us(code: u8) -> u32 {
    RNR_TIMER_US[(code & 0x1f) as usize]
}

#[cfg(test)]
mod rnr_tests {
    use super::*;

    #[test]
    fn rnr_timer_codes() {
        assert_eq!(
            rnr_timer_us(0),
            655_360,
            "0 is the longest, not the shortest"
        );
        assert_eq!(rnr_timer_us(12), 640);
        for c in 2..32u8 {
            assert!(rnr_timer_us(c) > rnr_timer_us(c - 1), "increasing from 1");
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    fn send(wr_id: u64) -> SendRequest<'static> {
        SendRequest {
            wr_id,
            op: SendOp::Send,
            sges: &[],
            signaled: true,
        }
    }

    #[test]
    fn an_inline_send_is_a_copy_the_caller_may_reuse_at_once() {
        let mut b = SendBatch::new(4);
        let mut rsp = [7u8; 16];
        assert!(b.push_inline(&send(1), &rsp));
        rsp.fill(0); // the caller's buffer is free again
        let sge = b.sges[0][0];
        assert_eq!(sge.length, 16);
        assert_eq!(sge.addr, b.inline[0].as_ptr() as u64);
        assert_eq!(&b.inline[0][..16], &[7u8; 16]);
        assert_ne!(b.wrs[0].send_flags & ibv_send_flags::IBV_SEND_INLINE.0, 0);
        // Moving the batch (to a poster thread) keeps the copy where the SGE points.
        let moved = b;
        assert_eq!(moved.sges[0][0].addr, moved.inline[0].as_ptr() as u64);
    }

    #[test]
    fn too_long_inline_data_and_a_full_batch_are_refused() {
        let mut b = SendBatch::new(2);
        assert!(!b.push_inline(&send(1), &[0; INLINE_MAX + 1]));
        assert!(b.is_empty());
        assert!(b.push_inline(&send(1), &[0; INLINE_MAX]));
        assert!(b.push(&send(2)));
        assert!(!b.push_inline(&send(3), &[1]));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn the_largest_rdma_write_is_tracked_until_cleared() {
        let mut b = SendBatch::new(4);
        let sg = |len| {
            [Sge {
                addr: 0x1000,
                len,
                lkey: 1,
            }]
        };
        let w = |sges: &'static [Sge]| SendRequest {
            wr_id: 0,
            op: SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            sges,
            signaled: false,
        };
        let (a, c) = (
            Box::leak(Box::new(sg(4096))),
            Box::leak(Box::new(sg(65536))),
        );
        assert!(b.push(&w(a)));
        assert_eq!(b.largest_write(), 4096);
        assert!(b.push(&w(c)));
        assert!(b.push(&send(9)));
        assert_eq!(b.largest_write(), 65536);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.largest_write(), 0);
    }
}
