//! An NVMe-over-Fabrics initiator over RDMA and TCP.
//!
//! - [`transport::RdmaQueue`]: one queue pair, with per-I/O type-2 memory
//!   windows (or plain memory regions), many commands in flight, and a
//!   completion path that does not allocate;
//! - [`transport::TcpQueue`]: one NVMe/TCP connection (digests, in-capsule
//!   writes, R2T and H2CData, C2HData), the same [`transport::HostQueue`];
//! - [`controller::Controller`]: admin queue bring-up (Connect, Property
//!   Get/Set enable, Identify, Set Features), keep-alive, asynchronous events,
//!   I/O queues, shutdown;
//! - [`discovery`]: the discovery log, read consistently (genctr retry);
//! - [`perf`]: a load generator with latency percentiles.
//!
//! Raw mode ([`transport::HostQueue::raw`]) sends any SQE with any SGL, for
//! malformed-input tests.

pub mod auth;
pub mod commands;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod hist;
pub mod host;
pub mod perf;
pub mod slots;
pub mod transport;

pub use controller::{ConnectOptions, Controller, IoQueue};
pub use error::{Error, Result};
pub use transport::{
    Done, HostQueue, Kind, Queue, QueueConfig, RdmaQueue, TcpQueue, WindowMode, Xfer,
};
