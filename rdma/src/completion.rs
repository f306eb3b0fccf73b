//! Completion channels, completion queues and work completions.

use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use crate::device::Context;
use crate::error::{Error, Result};
use crate::fd::{set_nonblocking, wait_readable};

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

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on this channel holds an Arc to it, so none is left.
        unsafe {
            ibv_destroy_comp_channel(self.raw);
        }
    }
}

/// Counts `n` more events received into `unacked`; returns how many to
/// acknowledge now (every 64, in one call). Two threads draining the same
/// queue at once each take what they find with one swap, so no event is
/// acknowledged twice (acknowledging more events than were received breaks
/// the queue's destruction, which waits for the count to match).
fn ack_due(unacked: &AtomicU32, n: u32) -> Option<u32> {
    if n == 0 || unacked.fetch_add(n, Ordering::AcqRel) + n < 64 {
        return None;
    }
    Some(unacked.swap(0, Ordering::AcqRel)).filter(|&k| k > 0)
}

/// A completion queue bound to a completion channel.
pub struct CompletionQueue {
    raw: *mut ibv_cq,
    unacked: AtomicU32,
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
        if let Some(k) = ack_due(&self.unacked, n) {
            // SAFETY: acking events this CQ received, each once (`ack_due`).
            unsafe { ibv_ack_cq_events(self.raw, k) };
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

#[cfg(test)]
mod ack_tests {
    use super::*;

    #[test]
    fn every_event_is_acknowledged_once_under_concurrent_drains() {
        let unacked = Arc::new(AtomicU32::new(0));
        let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (u, a) = (unacked.clone(), acked.clone());
                std::thread::spawn(move || {
                    for i in 0..100_000u32 {
                        if let Some(k) = ack_due(&u, 1 + i % 3) {
                            a.fetch_add(k as u64, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let received: u64 = 4 * (0..100_000u64).map(|i| 1 + i % 3).sum::<u64>();
        let left = unacked.load(Ordering::Relaxed) as u64;
        assert_eq!(acked.load(Ordering::Relaxed) + left, received);
        assert!(left < 64 + 3 * 4);
    }

    #[test]
    fn acknowledges_in_batches_of_64() {
        let u = AtomicU32::new(0);
        assert_eq!(ack_due(&u, 0), None);
        assert_eq!(ack_due(&u, 63), None);
        assert_eq!(ack_due(&u, 2), Some(65));
        assert_eq!(u.load(Ordering::Relaxed), 0);
    }
}
