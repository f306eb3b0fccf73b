//! Data buffers, asked for and given back the same way whatever carries
//! the queue: the pool's bookkeeping, the worker's tally (buffers in use,
//! waits) and the grants to waiting requests are written here once. A
//! transport says which of its pools (its memory: one per RDMA device, one
//! for NVMe/TCP) and carries out only its wire actions.

use super::{Grant, Lend, QueueKey};
use crate::engine::pool::{Buf, Pool};
use crate::queue::Token;

/// A transport's data pool: its waiters are requests of its queues.
pub type DataPool = Pool<(QueueKey, Token)>;

/// What became of a request's ask for a data buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// A buffer, now (counted in use): the transport hands it to the
    /// request, and gives it back with [`give_back`] if the request
    /// refuses it.
    Now(Buf),
    /// None free: the request waits (counted) for one given back, which
    /// reaches it through the worker's grants.
    Waits,
    /// No buffer is that large: the transport gives up on the queue.
    TooLarge,
}

/// Request `req` of queue `key` asks `pool` for `len` bytes (`limited`:
/// within its queue's share of the pool).
pub fn ask(
    w: &mut Lend<'_>,
    pool: &mut DataPool,
    key: QueueKey,
    req: Token,
    len: u32,
    limited: bool,
) -> Asked {
    let Some(class) = pool.shape().class_for(len as usize) else {
        return Asked::TooLarge;
    };
    match pool.take(class, key.owner(), limited, (key, req)) {
        Some(b) => {
            w.tally.buffer(class as usize, 1);
            Asked::Now(b)
        }
        None => {
            w.tally.buffer_wait(class as usize);
            Asked::Waits
        }
    }
}

/// A buffer in use comes back to `pool` (the transport's pool number
/// `index`): out of use, and the first request waiting for one gets it.
pub fn give_back(w: &mut Lend<'_>, pool: &mut DataPool, index: usize, b: Buf) {
    w.tally.buffer(b.class as usize, -1);
    unused(w, pool, index, b);
}

/// A buffer granted to a waiter that no longer wanted it (never counted
/// in use) goes back to `pool`, to the next waiter if any.
pub fn unused(w: &mut Lend<'_>, pool: &mut DataPool, index: usize, b: Buf) {
    if let Some(((queue, req), buf)) = pool.give(b) {
        w.grants.push(Grant {
            pool: index,
            queue,
            req,
            buf,
        });
    }
}
