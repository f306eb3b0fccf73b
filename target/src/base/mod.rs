//! The small tools every layer uses and that use nothing of the target: how
//! threads wake a worker ([`wake`]), one monotonic clock ([`clock`]), the
//! guard that aborts rather than unwind a thread whose memory the device
//! still uses ([`abort`]), and counters sharded per worker ([`shard`]).

pub mod abort;
pub mod clock;
pub mod shard;
pub mod wake;
