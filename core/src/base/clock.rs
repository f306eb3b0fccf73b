//! One process-wide monotonic clock, for what counts milliseconds since the
//! process started (heartbeats, the metrics endpoint's liveness, the epochs
//! gateways compare).

use std::time::Instant;

/// The instant the clock started (its first use).
pub fn start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Milliseconds since the first call (a process-wide monotonic clock).
pub fn monotonic_ms() -> u64 {
    start().elapsed().as_millis() as u64
}
