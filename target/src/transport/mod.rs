//! Transports: RDMA and NVMe/TCP (listeners, and each one's part of the
//! workers) and the engine that runs the workers with both ([`engine`]).
//! The in-process loopback the tests and the fuzzer drive the queue core
//! through is the core's own (`crate::loopback`).

pub mod engine;
pub mod listener;
pub mod rdma;
pub mod tcp;

/// Errors setting up a transport or the engine.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A verbs / RDMA-CM call failed.
    #[error("{context}: {source}")]
    Rdma {
        /// What was being done.
        context: String,
        /// The failure.
        source: ::rdma::Error,
    },
    /// An OS call failed.
    #[error("{context}: {source}")]
    Os {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
    /// Anything else, said in words.
    #[error("{0}")]
    Setup(String),
}
