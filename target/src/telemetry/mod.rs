//! What operators read: Prometheus metrics and their HTTP endpoint; the
//! per-namespace I/O metrics and the workers' tallies behind them.

pub mod host;
pub mod http;
pub mod journal;
pub mod log_filter;
pub mod meter;
pub mod metrics;
pub mod namespace;
pub mod reference;
