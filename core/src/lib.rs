//! The NVMe-over-Fabrics target's core: what runs a queue, whatever carries
//! it. The model (subsystems, namespaces, controllers, ANA, hosts' keys),
//! the command set ([`command`]), the queue core driven by events
//! ([`queue`]), a request's lifecycle, data and buffer pool ([`request`]), the
//! reservation state machine ([`reservation`]), the worker that serves many
//! queues over one io_uring ([`worker`]), the backend trait with the local
//! stores ([`backend`]), what is counted ([`counters`]) and the in-process
//! loopback the tests and the fuzzer drive it through ([`loopback`]).
//!
//! It depends on no daemon, configuration file, metrics library, verbs,
//! socket or Ceph library (it names the transports' settings and counts,
//! not their code): a transport implements [`worker::Transport`], a backend
//! [`backend::Storage`], the daemon installs a [`counters::Meter`]. The
//! layering is the crate boundary: nothing here can name the daemon.

pub mod backend;
pub mod base;
pub mod command;
pub mod counters;
pub mod loopback;
pub mod model;
pub mod queue;
pub mod request;
pub mod reservation;
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
