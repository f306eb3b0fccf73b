//! A userspace NVMe-over-Fabrics target over RDMA and NVMe/TCP: the daemon.
//!
//! It builds on the core ([`nvmf_core`]: the model, the command set, the
//! queue core, the workers and the backend trait, re-exported here under
//! their names) and brings what plugs into it: the transports
//! ([`transport`]: RDMA and NVMe/TCP), the RBD backend ([`rbd`]), the
//! configuration ([`config`]), the metrics and the journal ([`telemetry`]),
//! the daemon and its control socket ([`daemon`]), and the CLI ([`cli`]).

pub use nvmf_core::{
    backend, base, command, counters, loopback, model, queue, request, reservation, worker,
};
pub use nvmf_core::{
    ADMIN_QUEUE_SIZE, INLINE_DATA_SIZE, MAX_AERS, MAX_IO_QUEUES, MAX_IO_SIZE, MAX_NSID,
    MAX_QUEUE_SIZE, MDTS, PAGE, RECV_SLOT_BYTES,
};

pub mod cli;
pub mod config;
pub mod daemon;
pub mod gateway;
pub mod import;
pub mod rbd;
pub mod telemetry;
pub mod transport;

/// Tests that open many descriptors, and the one that counts the process's
/// descriptors, run one at a time.
#[cfg(test)]
pub(crate) static MANY_DESCRIPTORS: std::sync::Mutex<()> = std::sync::Mutex::new(());
