//! The small tools every layer uses and that use nothing of the target: how
//! threads wake a worker ([`wake`]), one monotonic clock ([`clock`]), the
//! guard that aborts rather than unwind a thread whose memory the device
//! still uses ([`abort`]), counters sharded per worker ([`shard`]), the
//! per-peer and total count of places peers not yet proven hold
//! ([`peer_table`]) with the queues that wait for their Connect under it
//! ([`admission`]), how often a peer may do something costly
//! ([`peer_rate`]) and be logged ([`log_limit`]), page-aligned memory
//! ([`aligned`]) and the journal's message ids of the events an operator
//! looks for ([`message_ids`]).

pub mod abort;
pub mod admission;
pub mod aligned;
pub mod clock;
pub mod log_limit;
pub mod message_ids;
pub mod peer_rate;
pub mod peer_table;
pub mod shard;
pub mod wake;
