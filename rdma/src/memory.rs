//! Protection domains, memory regions over page-aligned buffers, and type-2
//! memory windows (bound and invalidated per I/O by the initiator).

use std::sync::Arc;

use rdma_sys::*;

use crate::buffer::Buffer;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::qp::Sge;

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

/// Names a memory region in a [`SendOp::BindMw`](crate::SendOp::BindMw) request. Posting such a
/// request is unsafe: the region must outlive the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrHandle(pub(crate) *mut ibv_mr);

/// Names a memory window in a [`SendOp::BindMw`](crate::SendOp::BindMw) request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwHandle(pub(crate) *mut ibv_mw);

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
