//! Core logic shared by every transport, without I/O: the life of a request
//! and the data-buffer pool's bookkeeping.

pub mod pool;
pub mod request;
