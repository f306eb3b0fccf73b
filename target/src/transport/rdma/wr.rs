//! The ids of the RDMA transport's work requests and io_uring operations,
//! packed as [`rdma::WrId`], which lays its fields out as the worker's user
//! data ([`crate::worker::ud`]): kind, queue (slot and generation in the
//! worker's table), request (index and generation). The kinds here are the
//! transport's; [`IO`] is the worker's.

use rdma::WrId;

use crate::worker::ud::transport_kind;

pub use crate::worker::slots::QueueKey;
pub use crate::worker::ud::IO;

/// A receive from a worker's shared receive queue (slot = receive buffer).
pub const RECV_SRQ: u8 = 1;
/// A receive posted to one queue pair (conn = queue, slot = receive buffer).
pub const RECV_QP: u8 = 2;
/// RDMA READ of host data.
pub const READ: u8 = 3;
/// RDMA WRITE of read data (unsignaled; seen only when it fails).
pub const WRITE: u8 = 4;
/// The response SEND.
pub const SEND: u8 = 5;
/// A zero-length RDMA WRITE probing a host without keep-alive (signaled).
pub const PROBE: u8 = 6;
/// The transport's own ring operations (kinds as it numbers them,
/// [`ring_op`] tags them with its index in the worker's list):
/// io_uring poll of a device's completion channel (slot = device index).
pub const POLL_CQ: u8 = 0;
/// io_uring poll of the worker's RDMA-CM channel.
pub const POLL_CM: u8 = 1;
/// The cancel of a poll (of a removed device's completion channel).
pub const POLL_CANCEL: u8 = 2;

/// The id of the poll of device `index`'s completion channel, in the
/// device's generation `gen` (a slot is reused after a device is removed),
/// of the RDMA transport at index `me` in its worker's list.
pub fn poll_cq(me: usize, index: u16, gen: u8) -> u64 {
    WrId {
        kind: transport_kind(me, POLL_CQ),
        slot: index,
        conn_gen: gen,
        ..Default::default()
    }
    .pack()
}

/// The id of an operation of request `req` (generation `gen`) of queue `q`.
pub fn req(kind: u8, q: QueueKey, req: u16, gen: u16) -> u64 {
    WrId {
        kind,
        conn: q.slot,
        conn_gen: q.gen,
        slot: req,
        slot_gen: gen,
    }
    .pack()
}

/// The id of a shared receive queue's receive.
pub fn recv_srq(slot: u32) -> u64 {
    WrId {
        kind: RECV_SRQ,
        slot: slot as u16,
        ..Default::default()
    }
    .pack()
}

/// The id of a queue pair's own receive.
pub fn recv_qp(q: QueueKey, slot: u32) -> u64 {
    req(RECV_QP, q, slot as u16, 0)
}

/// The id of one of its own ring operations (a poll, a cancel) of `kind`
/// of the RDMA transport at index `me` in its worker's list.
pub fn ring_op(me: usize, kind: u8, slot: u16) -> u64 {
    WrId {
        kind: transport_kind(me, kind),
        slot,
        ..Default::default()
    }
    .pack()
}

/// The queue an id names.
pub fn queue_of(id: &WrId) -> QueueKey {
    QueueKey {
        slot: id.conn,
        gen: id.conn_gen,
    }
}
