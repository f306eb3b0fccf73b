//! Data buffers: a worker owns the pools (each transport's: one per RDMA
//! device, whose memory it registered, one for NVMe/TCP, the loopback's)
//! and asks for and gives back buffers the same way whatever carries the
//! queue: the pool's bookkeeping, the worker's tally (buffers in use,
//! waits) and the grants to waiting requests are written here once. A
//! transport names its pool and carries out only its wire actions.

use super::{Grant, Lend, QueueKey};
use crate::queue::Token;
use crate::request::pool::{Buf, Pool, PoolShape};

/// A data pool's bookkeeping: its waiters are requests of queues.
pub type DataPool = Pool<(QueueKey, Token)>;

/// A worker's data pools, by number (a grant names its pool so).
#[derive(Default)]
pub struct Pools(Vec<Option<DataPool>>);

impl Pools {
    /// A pool of `shape` (its memory is the transport's); its number.
    pub fn add(&mut self, shape: PoolShape) -> usize {
        let pool = Some(Pool::new(shape));
        match self.0.iter().position(Option::is_none) {
            Some(i) => {
                self.0[i] = pool;
                i
            }
            None => {
                self.0.push(pool);
                self.0.len() - 1
            }
        }
    }

    /// Pool `i` goes (its transport let go of its memory): none of its
    /// buffers may be in use.
    pub fn remove(&mut self, i: usize) -> Option<DataPool> {
        self.0.get_mut(i)?.take()
    }

    /// Pool `i`.
    pub fn get(&self, i: usize) -> Option<&DataPool> {
        self.0.get(i)?.as_ref()
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut DataPool> {
        self.0.get_mut(i)?.as_mut()
    }

    /// Buffers out of every pool.
    pub fn in_use(&self) -> usize {
        self.0.iter().flatten().map(|p| p.in_use()).sum()
    }
}

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
    /// No buffer is that large (or no such pool): the transport gives up
    /// on the queue.
    TooLarge,
}

/// Request `req` of queue `key` asks pool `pool` for `len` bytes
/// (`limited`: within its queue's share of the pool).
pub fn ask(
    w: &mut Lend<'_>,
    pool: usize,
    key: QueueKey,
    req: Token,
    len: u32,
    limited: bool,
) -> Asked {
    let Some(p) = w.pools.get_mut(pool) else {
        return Asked::TooLarge;
    };
    let Some(class) = p.shape().class_for(len as usize) else {
        return Asked::TooLarge;
    };
    match p.take(class, key.owner(), limited, (key, req)) {
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

/// A buffer in use comes back to pool `pool`: out of use, and the first
/// request waiting for one gets it.
pub fn give_back(w: &mut Lend<'_>, pool: usize, b: Buf) {
    w.tally.buffer(b.class as usize, -1);
    unused(w, pool, b);
}

/// A buffer granted to a waiter that no longer wanted it (never counted
/// in use) goes back to pool `pool`, to the next waiter if any.
pub fn unused(w: &mut Lend<'_>, pool: usize, b: Buf) {
    let Some(p) = w.pools.get_mut(pool) else {
        return;
    };
    if let Some(((queue, req), buf)) = p.give(b) {
        w.grants.push(Grant {
            pool,
            queue,
            req,
            buf,
        });
    }
}
