//! What operators read: Prometheus metrics, their HTTP endpoint, and the
//! counters of the STATS line.

pub mod http;
pub mod metrics;
pub mod stats;
