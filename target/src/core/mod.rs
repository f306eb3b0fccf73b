//! Core logic shared by every transport, without I/O: the life of a request,
//! the data-buffer pool's bookkeeping, when to probe a host that turned
//! keep-alive off, and how long a worker polls before it sleeps.

pub mod liveness;
pub mod polling;
pub mod pool;
pub mod request;
