//! A thin, safe wrapper over `rdma-sys` for what an NVMe-oF/RDMA target and
//! initiator need: RDMA-CM event channels and ids (listen, accept/reject with
//! private data, connect, disconnect), protection domains, completion channels
//! and queues, RC queue pairs created through RDMA-CM, memory regions over
//! page-aligned buffers, and posting RECV / SEND / SEND_WITH_INV / RDMA READ /
//! RDMA WRITE work requests (inline where the device allows), shared receive
//! queues, sends posted from another thread ([`SendTicket`]), type-2 memory windows (BIND_MW, LOCAL_INV) for the initiator, and
//! [`WrId`], the work-request id that names a connection, a slot and their
//! generations.
//!
//! Ownership encodes teardown order: a [`MemoryRegion`] holds its
//! [`ProtectionDomain`], a [`CompletionQueue`] its [`CompletionChannel`], a
//! [`CmId`] with a queue pair holds the PD and CQ it was created with, and every
//! [`CmId`] holds its [`EventChannel`]. Dropping in any order is therefore safe.

mod bringup;
mod buffer;
mod cm;
mod completion;
mod device;
mod error;
mod fd;
mod lane;
mod memory;
mod qp;
mod wrid;

pub use bringup::{OwnQueue, ResolveError};
pub use buffer::Buffer;
pub use cm::{CmEvent, CmEventKind, CmId, ConnParams, EventChannel, QpOptions, WaitError};
pub use completion::{CompletionChannel, CompletionQueue, WcOpcode, WorkCompletion};
pub use device::{one_malloc_arena, sync_devices, Context, DeviceAttr};
pub use error::{Error, Result};
pub use lane::SendTicket;
pub use memory::{Access, MemoryRegion, MemoryWindow, MrHandle, MwHandle, ProtectionDomain};
pub use qp::{
    rnr_timer_us, QpCaps, QueuePair, SendBatch, SendOp, SendRequest, Sge, SharedReceiveQueue,
    INLINE_MAX,
};
pub use wrid::WrId;

pub use rdma_sys as sys;
