//! What a worker keeps per RDMA device: one completion queue shared by all
//! its queue pairs on that device, one shared receive queue (when the device
//! has them and the configuration allows), and its data-buffer pool,
//! registered once as a memory region and as an io_uring fixed buffer.

use std::sync::Arc;

use rdma::{CompletionChannel, CompletionQueue, Context, DeviceAttr, ProtectionDomain};
use tracing::{info, warn};

use super::memory::{Budget, MemoryError, Pinned, RecvArea};
use super::wr;
use crate::backend::uring::{Ring, FIXED_SLOTS};
use crate::config::{EngineConfig, SendOffload, SrqMode, SMALL_BUFFER};
use crate::request::pool::{Buf, Class, PoolShape};
use crate::telemetry::metrics::metrics;
use crate::MAX_IO_SIZE;

/// Completion queue entries per worker and device (capped by the device).
const CQ_ENTRIES: u32 = 32 * 1024;
/// Fixed-buffer slots of a worker's ring: device `i`'s data pool is slot `i`,
/// its shared receive queue's area slot `RECV_FIXED_BASE + i`.
const RECV_FIXED_BASE: u16 = (FIXED_SLOTS / 2) as u16;

/// Why a worker could not serve a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A verbs call failed.
    #[error("{0}: {1}")]
    Rdma(&'static str, rdma::Error),
    /// Pinned memory.
    #[error("{0}")]
    Memory(#[from] MemoryError),
    /// `srq = "on"` but the device has none.
    #[error("[target] srq = \"on\", but the device has no shared receive queues")]
    NoSrq,
    /// Too many devices for the ring's fixed-buffer table.
    #[error("a worker serves at most {RECV_FIXED_BASE} RDMA devices")]
    TooManyDevices,
    /// io_uring registration failed.
    #[error("registering io_uring fixed buffers: {0}")]
    Uring(std::io::Error),
}

/// A worker's resources on one device.
pub struct WorkerDevice {
    /// Names the device (its verbs context).
    pub key: usize,
    /// The target-wide protection domain of the device.
    pub pd: Arc<ProtectionDomain>,
    /// Device limits.
    pub attr: DeviceAttr,
    /// The completion queue all this worker's queue pairs on the device share.
    pub cq: Arc<CompletionQueue>,
    /// Completion queue entries not yet promised to a queue pair.
    pub cq_room: u32,
    /// Whether the ring polls the completion channel now.
    pub cq_poll_armed: bool,
    /// The shared receive queue's buffers, if the device has one.
    pub srq: Option<RecvArea>,
    /// Capsules the queue pairs on the shared receive queue may have
    /// outstanding together (the sum of their queue sizes).
    pub srq_committed: u32,
    /// A queue had to share the SRQ beyond what it covers (said once).
    pub srq_overcommitted: bool,
    /// The data-buffer pool's memory.
    pub data: Pinned,
    /// The pool's shape.
    pub shape: PoolShape,
    /// Its pool's number among the worker's pools.
    pub pool: usize,
    /// The io_uring fixed buffer over `data`.
    pub fixed: u16,
    /// Tells this device's completion-channel polls from those of an earlier
    /// device in the same slot.
    pub gen: u8,
    /// The device is being removed: its queues are leaving, and the worker
    /// lets go of it when they are gone.
    pub removed: bool,
    /// Batches with a large RDMA WRITE go to a poster thread (`poster.rs`).
    pub offload_sends: bool,
}

/// Where a worker's device goes.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    /// Its slot among the worker's devices (and its data pool's fixed
    /// buffer on the worker's ring).
    pub index: usize,
    /// The slot's generation.
    pub gen: u8,
    /// Its data pool's number among the worker's pools.
    pub pool: usize,
}

impl WorkerDevice {
    /// Sets up a worker's resources on the device of `ctx` at `at`:
    /// completion queue, shared receive queue (posted full), data pool
    /// (registered with the device and as fixed buffer `at.index` of `ring`).
    pub fn new(
        ctx: &Context,
        pd: Arc<ProtectionDomain>,
        cfg: &EngineConfig,
        budget: &Arc<Budget>,
        ring: &mut Ring,
        at: Place,
    ) -> Result<WorkerDevice, DeviceError> {
        let Place { index, gen, pool } = at;
        if index >= RECV_FIXED_BASE as usize {
            return Err(DeviceError::TooManyDevices);
        }
        let attr = ctx
            .query()
            .map_err(|e| DeviceError::Rdma("ibv_query_device", e))?;
        let ch = CompletionChannel::new(ctx)
            .map_err(|e| DeviceError::Rdma("ibv_create_comp_channel", e))?;
        let entries = CQ_ENTRIES.min(attr.max_cqe);
        let cq = CompletionQueue::new(&ch, entries)
            .map_err(|e| DeviceError::Rdma("ibv_create_cq", e))?;
        let use_srq = match cfg.srq {
            SrqMode::Off => false,
            SrqMode::Auto => attr.max_srq > 0 && attr.max_srq_sge >= 2,
            SrqMode::On if attr.max_srq > 0 && attr.max_srq_sge >= 2 => true,
            SrqMode::On => return Err(DeviceError::NoSrq),
        };
        let mut cq_room = entries;
        let mut srq = if use_srq {
            let depth = cfg.srq_depth.min(attr.max_srq_wr.max(16));
            let q = rdma::SharedReceiveQueue::new(&pd, depth, 2)
                .map_err(|e| DeviceError::Rdma("ibv_create_srq", e))?;
            let area = RecvArea::new(&pd, budget, depth, Some(q), true)?;
            for s in 0..depth {
                // SAFETY: a fresh area: no slot is in use.
                unsafe { area.post(s, wr::recv_srq(s), None) }
                    .map_err(|e| DeviceError::Rdma("ibv_post_srq_recv", e))?;
            }
            cq_room = cq_room.saturating_sub(depth);
            Some(area)
        } else {
            None
        };
        let shape = pool_shape(cfg);
        let data = Pinned::new(&pd, budget, shape.bytes(), 2)?;
        // SAFETY: `data` lives in the WorkerDevice, which the worker drops
        // after its ring (field order), and no operation outlives the worker.
        unsafe { ring.register_fixed(index as u16, data.base(), data.mr.len()) }
            .map_err(DeviceError::Uring)?;
        // Last, so that no error path leaves a ring slot naming freed memory.
        if let Some(area) = srq.as_mut() {
            let (base, len) = area.memory();
            let fixed = RECV_FIXED_BASE + index as u16;
            // SAFETY: as for `data`; a removed device's slots are emptied
            // (`retire`) before its memory goes.
            if let Err(e) = unsafe { ring.register_fixed(fixed, base, len) } {
                if let Err(u) = ring.unregister_fixed(index as u16) {
                    warn!("unregistering the buffers of a device that failed to set up: {u}");
                }
                return Err(DeviceError::Uring(e));
            }
            area.set_fixed(fixed);
        }
        count_pool(&shape, 1);
        let offload_sends = match cfg.send_offload {
            SendOffload::On => true,
            SendOffload::Off => false,
            SendOffload::Auto => ctx.is_software(),
        };
        info!(
            device = %ctx.name(),
            offload_sends,
            srq = srq.as_ref().map_or(0, |a| a.slots()),
            cq = entries,
            pool_mib = shape.bytes() >> 20,
            "worker set up on RDMA device"
        );
        Ok(WorkerDevice {
            key: ctx.as_ptr() as usize,
            pd,
            attr,
            cq,
            cq_room,
            srq_committed: 0,
            srq_overcommitted: false,
            cq_poll_armed: false,
            srq,
            data,
            shape,
            pool,
            fixed: index as u16,
            gen,
            removed: false,
            offload_sends,
        })
    }

    /// Lets go of a removed device once no queue uses it: the ring stops
    /// polling its completion channel and forgets the pool's fixed buffer;
    /// dropping the rest frees the completion queue, the shared receive
    /// queue, the pool's memory region and the channel.
    pub fn retire(self, ring: &mut Ring, me: usize, index: u16) {
        if self.cq_poll_armed {
            if let Err(e) = ring.poll_cancel(
                wr::poll_cq(me, index, self.gen),
                wr::ring_op(me, wr::POLL_CANCEL, index),
            ) {
                warn!(error = %e, "cancelling the completion-channel poll of a removed device");
            }
        }
        for f in std::iter::once(self.fixed).chain(self.srq.as_ref().and_then(|a| a.fixed())) {
            if let Err(e) = ring.unregister_fixed(f) {
                warn!(error = %e, "unregistering the buffers of a removed device");
            }
        }
        info!("worker let go of a removed RDMA device");
    }

    /// Start of a pool buffer.
    pub fn buf_ptr(&self, b: &Buf) -> *mut u8 {
        self.data.base().wrapping_add(b.offset)
    }
}

/// The shape of a device's data pool.
pub fn pool_shape(cfg: &EngineConfig) -> PoolShape {
    PoolShape {
        small_size: SMALL_BUFFER,
        small_count: cfg.small_buffers as usize,
        large_size: MAX_IO_SIZE as usize,
        large_count: cfg.large_buffers as usize,
    }
}

/// Adds (`sign` 1) or removes (-1) a pool's buffers in `buffer_pool_buffers`.
fn count_pool(shape: &PoolShape, sign: i64) {
    let m = &metrics().engine;
    for (class, n) in [
        (Class::Small, shape.small_count),
        (Class::Large, shape.large_count),
    ] {
        m.pool_buffers
            .with_label_values(&[class.label()])
            .add(sign * n as i64);
    }
}

impl Drop for WorkerDevice {
    fn drop(&mut self) {
        count_pool(&self.shape, -1);
    }
}
