//! The engine's pieces that every transport shares, without I/O: the life
//! of a request, where a command's data is, the data-buffer pool's
//! bookkeeping, when to probe a host that turned keep-alive off, how many
//! queues may wait for their Connect, the write gate, and the counters
//! sharded by worker.

pub mod admission;
pub mod aligned;
pub mod data;
pub mod liveness;
pub mod log_limit;
pub mod peer_rate;
pub mod plan;
pub mod pool;
pub mod qos;
pub mod request;
pub mod write_gate;
