//! Pinned memory: the budget every registration is charged to, and the
//! receive-buffer areas (a shared receive queue's, or a queue pair's own).
//!
//! The kernel counts memory registered for RDMA and for io_uring fixed
//! buffers in `VmPin` (and against `RLIMIT_MEMLOCK` for unprivileged users);
//! the budget counts it the same way, so `max_pinned_memory` bounds `VmPin`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nvme::SQE_SIZE;
use rdma::{Access, Buffer, MemoryRegion, ProtectionDomain, QueuePair, Sge, SharedReceiveQueue};

use crate::telemetry::metrics::metrics;
use crate::INLINE_DATA_SIZE;
use crate::{PAGE, RECV_SLOT_BYTES};

/// The pinned-memory budget.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

/// Bytes charged to the budget, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Budget> {
        metrics().engine.pinned_budget.set(limit as i64);
        Arc::new(Budget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Charges `bytes`, or returns `None` if that would exceed the budget.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(bytes).filter(|&n| n <= self.limit)?;
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    metrics().engine.pinned_bytes.add(bytes as i64);
                    return Some(Reservation {
                        budget: self.clone(),
                        bytes,
                    });
                }
                Err(c) => cur = c,
            }
        }
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        metrics().engine.pinned_bytes.sub(self.bytes as i64);
    }
}

/// Why pinned memory could not be had.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The budget is spent.
    #[error(
        "the pinned-memory budget is spent ({used} of {limit} bytes in use, {asked} more asked)"
    )]
    Budget {
        /// In use.
        used: u64,
        /// The limit.
        limit: u64,
        /// Asked for.
        asked: u64,
    },
    /// Allocation or registration failed.
    #[error("{0}")]
    Rdma(#[from] rdma::Error),
}

/// Charges `bytes` to `budget`.
pub fn charge(budget: &Arc<Budget>, bytes: u64) -> Result<Reservation, MemoryError> {
    budget.reserve(bytes).ok_or(MemoryError::Budget {
        used: budget.used(),
        limit: budget.limit(),
        asked: bytes,
    })
}

/// Registered memory, charged to the budget for as long as it lives.
pub struct Pinned {
    /// The region. Dropped before the reservation gives the bytes back.
    pub mr: MemoryRegion,
    _charge: Reservation,
}

impl Pinned {
    /// Allocates and registers `len` bytes (page-rounded), charging `len ×
    /// factor` (factor 2 when the memory is also io_uring fixed buffers).
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        budget: &Arc<Budget>,
        len: usize,
        factor: u64,
    ) -> Result<Pinned, MemoryError> {
        let len = len.max(1).next_multiple_of(PAGE);
        let charge = charge(budget, len as u64 * factor)?;
        let buf = Buffer::new(len)?;
        let mr = MemoryRegion::new(pd, buf, Access::LOCAL_WRITE)?;
        Ok(Pinned {
            mr,
            _charge: charge,
        })
    }

    /// Start of the memory.
    pub fn base(&self) -> *mut u8 {
        self.mr.as_ptr()
    }
}

/// Receive buffers: per slot a 64-byte command and a page-aligned in-capsule
/// data area, posted to a shared receive queue or to one queue pair.
/// Field order is drop order: the shared receive queue (whose posted
/// receives name this memory) goes first.
pub struct RecvArea {
    srq: Option<Arc<SharedReceiveQueue>>,
    mem: Pinned,
    slots: u32,
    fixed: Option<u16>,
}

impl RecvArea {
    /// `slots` receive buffers, for `srq` if given (else for one queue pair).
    /// `fixed`: the area is to be an io_uring fixed buffer as well (see
    /// [`RecvArea::set_fixed`]), so the budget counts it twice, as the kernel does.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        budget: &Arc<Budget>,
        slots: u32,
        srq: Option<Arc<SharedReceiveQueue>>,
        fixed: bool,
    ) -> Result<RecvArea, MemoryError> {
        let len = Self::bytes(slots);
        debug_assert!(len as u64 <= slots as u64 * RECV_SLOT_BYTES as u64 + 2 * PAGE as u64);
        Ok(RecvArea {
            mem: Pinned::new(pd, budget, len, if fixed { 2 } else { 1 })?,
            slots,
            srq,
            fixed: None,
        })
    }

    /// Bytes of an area of `slots` receive buffers.
    pub fn bytes(slots: u32) -> usize {
        Self::data_off(slots) + slots as usize * INLINE_DATA_SIZE as usize
    }

    /// Start and length of the area's memory (to register it as a fixed buffer).
    pub fn memory(&self) -> (*mut u8, usize) {
        (self.mem.base(), self.mem.mr.len())
    }

    /// Records that the area is io_uring fixed buffer `index`.
    pub fn set_fixed(&mut self, index: u16) {
        self.fixed = Some(index);
    }

    /// The io_uring fixed buffer over this area, if it is one: in-capsule data
    /// is then written to the backend straight from its receive buffer
    /// without the kernel pinning its pages for each write.
    pub fn fixed(&self) -> Option<u16> {
        self.fixed
    }

    fn data_off(slots: u32) -> usize {
        (slots as usize * SQE_SIZE).next_multiple_of(PAGE)
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The shared receive queue this area feeds, if any.
    pub fn srq_handle(&self) -> Option<Arc<SharedReceiveQueue>> {
        self.srq.clone()
    }

    /// The command bytes of `slot`.
    ///
    /// # Safety
    /// The slot's receive must have completed, and the slot must not be
    /// posted again while the returned bytes are in use (the device writes
    /// into a posted slot).
    pub unsafe fn command(&self, slot: u32) -> &[u8] {
        assert!(slot < self.slots);
        // SAFETY: in bounds of the registered buffer; per the caller, no
        // receive is posted on the slot.
        unsafe {
            std::slice::from_raw_parts(self.mem.base().add(slot as usize * SQE_SIZE), SQE_SIZE)
        }
    }

    /// Start of the in-capsule data of `slot`.
    pub fn data_ptr(&self, slot: u32) -> *mut u8 {
        assert!(slot < self.slots);
        self.mem
            .base()
            .wrapping_add(Self::data_off(self.slots) + slot as usize * INLINE_DATA_SIZE as usize)
    }

    /// Posts the receive of `slot`: to the shared receive queue, or to `qp`.
    ///
    /// # Safety
    /// The slot must not be in use (its previous receive was consumed and
    /// nothing reads its memory any more); `qp` must be live.
    pub unsafe fn post(&self, slot: u32, wr_id: u64, qp: Option<&QueuePair>) -> rdma::Result<()> {
        let lkey = self.mem.mr.lkey();
        let sges = [
            Sge {
                addr: self.mem.base() as u64 + (slot as usize * SQE_SIZE) as u64,
                len: SQE_SIZE as u32,
                lkey,
            },
            Sge {
                addr: self.data_ptr(slot) as u64,
                len: INLINE_DATA_SIZE,
                lkey,
            },
        ];
        // SAFETY: both SGEs lie in the registered buffer; per the caller, the
        // slot is free until this receive completes.
        unsafe {
            match (&self.srq, qp) {
                (Some(srq), _) => srq.post_recv(wr_id, &sges),
                (None, Some(qp)) => qp.post_recv(wr_id, &sges),
                (None, None) => Err(rdma::Error::Invalid {
                    call: "ibv_post_recv",
                    reason: "no queue pair for a private receive area",
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_charges_and_gives_back() {
        let b = Budget::new(10_000);
        let r1 = b.reserve(6_000).unwrap();
        assert_eq!(b.used(), 6_000);
        assert!(b.reserve(5_000).is_none(), "over the limit");
        let e = charge(&b, 5_000).unwrap_err().to_string();
        assert!(
            e.contains("6000 of 10000 bytes in use, 5000 more asked"),
            "{e}"
        );
        let r2 = b.reserve(4_000).unwrap();
        assert_eq!(b.used(), 10_000);
        drop(r1);
        assert_eq!(b.used(), 4_000);
        drop(r2);
        assert_eq!(b.used(), 0);
        assert!(b.reserve(u64::MAX).is_none(), "no overflow");
    }

    #[test]
    fn budget_is_shared_across_threads() {
        let b = Budget::new(1000);
        let got: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..50).filter_map(|_| b.reserve(3)).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got.len(), 333, "exactly what fits");
        assert_eq!(b.used(), 999);
        drop(got);
        assert_eq!(b.used(), 0);
    }
}
