//! Transports: RDMA and NVMe/TCP (listeners, and each one's part of the
//! workers), and the in-process loopback the tests and the fuzzer drive the
//! queue core through; what stops the process when a transport thread
//! panics.

pub mod abort;
pub mod listener;
pub mod loopback;
pub mod rdma;
pub mod tcp;
