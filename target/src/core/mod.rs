//! Core logic shared by every transport, without I/O: the life of a request
//! the data-buffer pool's bookkeeping, and when to probe a host that turned
//! keep-alive off.

pub mod liveness;
pub mod pool;
pub mod request;
