//! Core logic shared by every transport, without I/O: the life of a request,
//! the data-buffer pool's bookkeeping, when to probe a host that turned
//! keep-alive off, how long a worker polls before it sleeps, and how many
//! queues may wait for their Connect.

pub mod admission;
pub mod data;
pub mod liveness;
pub mod log_limit;
pub mod peer_rate;
pub mod plan;
pub mod polling;
pub mod pool;
pub mod request;
pub mod shard;
pub mod wake;
pub mod write_gate;
