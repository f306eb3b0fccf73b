//! The engine's settings: its workers, receive queues, pinned-memory budget
//! and the caps on peers not yet proven (read from `[target]` by the
//! daemon's configuration).

use serde::Deserialize;

pub use crate::base::shard::MAX_WORKERS;

/// Whether queue pairs share a receive queue per worker and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrqMode {
    /// Use shared receive queues when the device has them.
    Auto,
    /// Require them (a device without is refused).
    On,
    /// Each queue pair posts its own receive buffers.
    Off,
}

/// Whether poster threads post the sends that carry a large RDMA WRITE
/// (see `transport::rdma::poster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendOffload {
    /// For software RDMA devices (soft-RoCE, soft-iWARP), whose post call
    /// runs the protocol; never for hardware, whose post call rings a doorbell.
    Auto,
    /// For every device.
    On,
    /// Never: workers post all their sends.
    Off,
}

/// Settings of the RDMA engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Worker (poll group) threads.
    pub workers: usize,
    /// Shared receive queues.
    pub srq: SrqMode,
    /// Receive buffers per shared receive queue (one per worker and device).
    pub srq_depth: u32,
    /// Small (8 KiB) data buffers per worker and device.
    pub small_buffers: u32,
    /// Large (128 KiB) data buffers per worker and device.
    pub large_buffers: u32,
    /// Bytes of memory the target may pin in all (registered for RDMA or io_uring).
    pub max_pinned_memory: u64,
    /// Large sends posted by poster threads.
    pub send_offload: SendOffload,
    /// The longest a worker polls (µs) after its last work while at most
    /// one I/O is in flight; it polls about as long as its hosts take to send
    /// the next command (see `worker::polling`); 0: off.
    pub light_load_spin_us: u64,
    /// Queues not yet connected (no successful Fabrics Connect) one peer
    /// address may hold (see `engine::admission`).
    pub max_pending_queues_per_peer: u32,
    /// Queues not yet connected the target holds in all.
    pub max_pending_queues: u32,
    /// Keep-alive timeouts above this (ms) are not waited out: a quiet host
    /// is probed at the RDMA level, as one without keep-alive (see
    /// `core::liveness`).
    pub max_keep_alive_ms: u32,
    /// Controllers one host NQN may have in one subsystem (discovery
    /// controllers: one peer address).
    pub max_controllers_per_host: u32,
    /// Controllers of keyed hosts not yet authenticated that one peer
    /// address may hold (see `model::unproven`).
    pub max_unauthenticated_controllers_per_peer: u32,
    /// Controllers not yet authenticated the target holds in all.
    pub max_unauthenticated_controllers: u32,
    /// How long (ms) a host's controllers keep serving after its
    /// DH-HMAC-CHAP key was replaced, for its queues to authenticate again
    /// with the new key; 0: they end at once.
    pub key_rotation_grace_ms: u32,
}

/// Bytes of a small data buffer.
pub const SMALL_BUFFER: usize = 8 * 1024;
/// Default receive buffers per shared receive queue.
pub const DEFAULT_SRQ_DEPTH: u32 = 512;
/// Default small buffers per worker.
pub const DEFAULT_SMALL_BUFFERS: u32 = 256;
/// Default large buffers per worker.
pub const DEFAULT_LARGE_BUFFERS: u32 = 32;
/// Default polling window under light load (µs).
pub const DEFAULT_LIGHT_LOAD_SPIN_US: u64 = 2000;
/// Default cap of pending queues per peer address.
pub const DEFAULT_MAX_PENDING_PER_PEER: u32 = 16;
/// Default cap of pending queues in all.
pub const DEFAULT_MAX_PENDING: u32 = 64;
/// Default cap of controllers per host NQN and subsystem.
pub const DEFAULT_MAX_CONTROLLERS_PER_HOST: u32 = 16;
/// Default grace after a key rotation (ms).
pub const DEFAULT_KEY_ROTATION_GRACE_MS: u32 = 10_000;
/// Default keep-alive bound (ms).
pub const DEFAULT_MAX_KEEP_ALIVE_MS: u32 = 120_000;
/// Default pinned-memory budget.
pub const DEFAULT_MAX_PINNED: u64 = 192 << 20;

/// The CPUs this process may run on (its affinity mask), at least 1.
pub fn affinity_cpus() -> usize {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .count()
            .max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

impl EngineConfig {
    /// Pinned bytes one worker needs per RDMA device, before any connection:
    /// its data buffers and its shared receive queue's buffers, each counted
    /// twice (registered as a memory region and as io_uring fixed buffers,
    /// and the kernel counts both).
    pub fn per_worker_bytes(&self, srq: bool) -> u64 {
        let pool = self.small_buffers as u64 * SMALL_BUFFER as u64
            + self.large_buffers as u64 * crate::MAX_IO_SIZE as u64;
        let recv = if srq {
            self.srq_depth as u64 * crate::RECV_SLOT_BYTES as u64
        } else {
            0
        };
        2 * (pool + recv)
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: affinity_cpus(),
            srq: SrqMode::Auto,
            srq_depth: DEFAULT_SRQ_DEPTH,
            small_buffers: DEFAULT_SMALL_BUFFERS,
            large_buffers: DEFAULT_LARGE_BUFFERS,
            max_pinned_memory: DEFAULT_MAX_PINNED,
            send_offload: SendOffload::Auto,
            light_load_spin_us: DEFAULT_LIGHT_LOAD_SPIN_US,
            max_pending_queues_per_peer: DEFAULT_MAX_PENDING_PER_PEER,
            max_pending_queues: DEFAULT_MAX_PENDING,
            max_keep_alive_ms: DEFAULT_MAX_KEEP_ALIVE_MS,
            max_controllers_per_host: DEFAULT_MAX_CONTROLLERS_PER_HOST,
            max_unauthenticated_controllers_per_peer: crate::model::unproven::DEFAULT_PER_PEER,
            max_unauthenticated_controllers: crate::model::unproven::DEFAULT_TOTAL,
            key_rotation_grace_ms: DEFAULT_KEY_ROTATION_GRACE_MS,
        }
    }
}
