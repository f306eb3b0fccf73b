//! A userspace NVMe-over-Fabrics target over RDMA.
//!
//! The protocol core (controller state machine, fabrics/admin/I/O command
//! handling, discovery, the request lifecycle and buffer pool in [`engine`]) is
//! sans-IO and unit tested; the RDMA transport ([`transport::rdma`]: workers
//! serving many queue pairs) and the backends ([`backend`]) drive it.

pub mod backend;
pub mod base;
pub mod cli;
pub mod command;
pub mod config;
pub mod counters;
pub mod daemon;
pub mod engine;
pub mod import;
pub mod loopback;
pub mod model;
pub mod queue;
pub mod rbd;
pub mod reservation;
pub mod telemetry;
pub mod transport;
pub mod worker;

/// Maximum data transfer per command (bytes): MDTS = 5 → 2^5 × 4 KiB.
pub const MAX_IO_SIZE: u32 = 128 * 1024;
/// MDTS as advertised (power of two of 4 KiB pages).
pub const MDTS: u8 = 5;
/// In-capsule data the target accepts on I/O queues (bytes).
pub const INLINE_DATA_SIZE: u32 = 8192;
/// The page size the engine aligns buffers to (O_DIRECT wants the logical
/// block; a page is enough for every block size).
pub const PAGE: usize = 4096;
/// Bytes of one receive buffer: the 64-byte command and the in-capsule data.
pub const RECV_SLOT_BYTES: usize = nvme::SQE_SIZE + INLINE_DATA_SIZE as usize;
/// Maximum I/O queue size (entries); CAP.MQES = this − 1.
pub const MAX_QUEUE_SIZE: u16 = 128;
/// Admin queue size (entries).
pub const ADMIN_QUEUE_SIZE: u16 = 32;
/// Maximum number of I/O queues granted to a controller.
pub const MAX_IO_QUEUES: u16 = 64;
/// Asynchronous event requests a controller parks at most (AERL + 1).
pub const MAX_AERS: usize = 4;
/// Maximum namespace id (NN).
pub const MAX_NSID: u32 = 1024;

/// Tests that open many descriptors, and the one that counts the process's
/// descriptors, run one at a time.
#[cfg(test)]
pub(crate) static MANY_DESCRIPTORS: std::sync::Mutex<()> = std::sync::Mutex::new(());
