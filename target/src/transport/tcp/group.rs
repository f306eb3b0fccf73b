//! The NVMe/TCP part of a worker ([`crate::worker::Transport`]): its
//! connections, one data pool and one set of capsule buffers shared by all
//! of them, each connection holding at most an equal share (a connection
//! whose capsule finds none it may take waits: TCP's flow control holds its
//! host back, and no host's burst of in-capsule writes to a slow namespace
//! stalls the others). Sockets are read and written with
//! non-blocking calls when the worker's ring says they are ready (a poll
//! per socket, armed again each time it fires); with no ring (a test's
//! executor) every socket is tried on every pass.

use std::sync::Arc;

use tracing::warn;

use super::queue::TcpQueue;
use super::{Inbox, MAX_CAPSULE_DATA};
use crate::base::aligned::Aligned;
use crate::queue::Token;
use crate::request::pool::PoolShape;
use crate::worker::slots::{QueueKey, Slots};
use crate::worker::ud::Ud;
use crate::worker::{queue_added, CoreEvent, Lend, Transport};

/// The ring operation of a socket's poll for readability (as this
/// transport numbers its own, [`ring_kind`]).
pub const POLL_IN: u8 = 0;
/// The ring operation of a socket's poll for writability.
pub const POLL_OUT: u8 = 1;

/// The kind of this transport's ring operation `local` for queue `key`:
/// tagged with the transport's index, which the key carries.
fn ring_kind(key: QueueKey, local: u8) -> u8 {
    crate::worker::ud::transport_kind(key.transport(), local)
}

/// What a worker's TCP queues share: the data pool and the capsule
/// buffers.
pub struct Res {
    /// The pool's shape.
    pub shape: PoolShape,
    /// Its number among the worker's pools, once it was added (with the
    /// first queue that needs a buffer).
    pub pool: Option<usize>,
    /// The pool's memory.
    pub pool_mem: Aligned,
    /// Capsule buffers (in-capsule data), [`MAX_CAPSULE_DATA`] bytes each.
    pub capsules: Aligned,
    /// The free ones.
    pub capsule_free: Vec<u32>,
    /// How many one connection may hold: an equal part of them for each
    /// connection of the worker, at least [`MIN_CAPSULE_SHARE`].
    pub capsule_share: u32,
    capsule_total: u32,
}

impl Res {
    /// Its pool's number among the worker's, added at the first ask.
    pub fn pool(&mut self, w: &mut Lend<'_>) -> usize {
        *self.pool.get_or_insert_with(|| w.pools.add(self.shape))
    }
}

/// The capsule buffers a connection may always hold, however many
/// connections the worker serves (more than two is enough for a Compare
/// waiting for its fused Write).
pub const MIN_CAPSULE_SHARE: u32 = 8;
/// Capsule buffers of an engine worker's NVMe/TCP connections (8 KiB each).
pub const CAPSULES: u32 = 256;

impl Res {
    /// Sets the share of capsule buffers for `connections` connections.
    fn share_for(&mut self, connections: usize) {
        let n = (connections.max(1)).min(u32::MAX as usize) as u32;
        self.capsule_share = (self.capsule_total / n).max(MIN_CAPSULE_SHARE);
    }
}

/// A worker's NVMe/TCP connections.
pub struct TcpGroup {
    queues: Slots<TcpQueue>,
    res: Res,
    inbox: Arc<Inbox>,
}

impl TcpGroup {
    /// The TCP part of an engine's worker, at index `me` in its list of
    /// transports: [`CAPSULES`] capsule buffers and a data pool shaped as an
    /// RDMA device's (its memory is touched only as NVMe/TCP uses it).
    pub fn for_engine(inbox: Arc<Inbox>, cfg: &crate::config::EngineConfig, me: usize) -> TcpGroup {
        let shape = PoolShape {
            small_size: crate::config::SMALL_BUFFER,
            small_count: cfg.small_buffers as usize,
            large_size: crate::MAX_IO_SIZE as usize,
            large_count: cfg.large_buffers as usize,
        };
        Self::new(inbox, shape, CAPSULES, me)
    }

    /// The TCP part of a worker whose connections arrive in `inbox`, with a
    /// pool of `shape` and `capsules` capsule buffers, at index `me` in the
    /// worker's list of transports.
    pub fn new(inbox: Arc<Inbox>, shape: PoolShape, capsules: u32, me: usize) -> TcpGroup {
        TcpGroup {
            queues: Slots::for_transport(me),
            res: Res {
                shape,
                pool: None,
                pool_mem: Aligned::new(shape.bytes()),
                capsules: Aligned::new(capsules as usize * MAX_CAPSULE_DATA as usize),
                capsule_free: (0..capsules).rev().collect(),
                capsule_share: capsules.max(MIN_CAPSULE_SHARE),
                capsule_total: capsules,
            },
            inbox,
        }
    }

    /// Arms the polls a queue needs (none without a ring).
    fn arm_queue(w: &mut Lend<'_>, key: QueueKey, q: &mut TcpQueue) {
        let fd = q.fd();
        let Some(ring) = w.ring() else {
            // Polled every pass instead.
            q.readable = true;
            return;
        };
        if !q.readable && !q.poll_in && !q.closing() {
            q.poll_in = ring
                .poll_in(
                    fd,
                    Ud::of(ring_kind(key, POLL_IN), key, Token::default()).pack(),
                )
                .is_ok();
        }
        if q.blocked && !q.poll_out {
            q.poll_out = ring
                .poll_out(
                    fd,
                    Ud::of(ring_kind(key, POLL_OUT), key, Token::default()).pack(),
                )
                .is_ok();
        }
    }

    /// Reads and writes queue `key`'s socket. Returns the PDUs handled.
    fn serve(&mut self, w: &mut Lend<'_>, key: QueueKey) -> usize {
        let Some(q) = self.queues.get_mut(key) else {
            return 0;
        };
        let mut n = 0;
        q.reclaim(w, &mut self.res);
        if q.readable || q.starved {
            n += q.read(w, &mut self.res);
        }
        if q.has_sends() {
            q.write(w, &mut self.res);
        }
        Self::arm_queue(w, key, q);
        n
    }
}

#[cfg(test)]
impl TcpGroup {
    /// Leaves the kernel's zero-copy notifications unread (`hold`), as
    /// when they come late.
    pub(super) fn hold_notifications(&mut self, hold: bool) {
        for i in 0..self.queues.span() {
            if let Some(q) = self.queues.key_at(i).and_then(|k| self.queues.get_mut(k)) {
                q.hold_notifications = hold;
            }
        }
    }

    /// Whether each connection sends read data zero-copy now.
    pub(super) fn zero_copy(&self) -> Vec<bool> {
        (0..self.queues.span())
            .filter_map(|i| self.queues.key_at(i))
            .filter_map(|k| self.queues.get(k))
            .map(|q| q.zero_copy_on())
            .collect()
    }
}

impl Transport for TcpGroup {
    fn queues(&self) -> usize {
        self.queues.len()
    }

    fn accept(&mut self, w: &mut Lend<'_>) -> usize {
        let new = self.inbox.take();
        let n = new.len();
        for c in new {
            if w.stopping {
                continue;
            }
            let Some(key) = self.queues.vacant() else {
                warn!(peer = %c.peer, "the worker's queue table is full; closing");
                continue;
            };
            let mut q = TcpQueue::new(c.stream, c.peer, c.local, c.pending, c.tls, key, w.now);
            Self::arm_queue(w, key, &mut q);
            self.queues.insert(key, q);
            queue_added(w);
        }
        self.res.share_for(self.queues.len());
        n
    }

    fn poll(&mut self, w: &mut Lend<'_>) -> usize {
        let mut n = 0;
        for i in 0..self.queues.span() {
            if let Some(key) = self.queues.key_at(i) {
                n += self.serve(w, key);
            }
        }
        n
    }

    fn complete(&mut self, w: &mut Lend<'_>, ud: Ud, res: i32) {
        let Some(q) = self.queues.get_mut(ud.queue) else {
            return;
        };
        // An error queue that is not read keeps the socket's polls firing.
        if res > 0 && res & libc::POLLERR as i32 != 0 {
            q.errors = true;
        }
        match ud.local_kind() {
            POLL_IN => {
                q.poll_in = false;
                q.readable = true;
            }
            POLL_OUT => {
                q.poll_out = false;
                q.blocked = false;
            }
            _ => return,
        }
        self.serve(w, ud.queue);
    }

    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, event: CoreEvent<'_>) {
        if let Some(q) = self.queues.get_mut(key) {
            q.call(w, &mut self.res, event);
        }
    }

    fn flush(&mut self, w: &mut Lend<'_>) {
        for i in 0..self.queues.span() {
            let Some(key) = self.queues.key_at(i) else {
                continue;
            };
            let Some(q) = self.queues.get_mut(key) else {
                continue;
            };
            if q.has_sends() {
                q.write(w, &mut self.res);
                Self::arm_queue(w, key, q);
            }
        }
    }

    fn arm(&mut self, w: &mut Lend<'_>) -> usize {
        let mut late = 0;
        for i in 0..self.queues.span() {
            let Some(key) = self.queues.key_at(i) else {
                continue;
            };
            let Some(q) = self.queues.get_mut(key) else {
                continue;
            };
            // Without a ring nothing wakes the worker for a socket: it
            // looks at every one before it sleeps.
            if w.ring().is_none() {
                late += q.read(w, &mut self.res);
            }
            Self::arm_queue(w, key, q);
        }
        late
    }

    fn tick(&mut self, w: &mut Lend<'_>, stop: bool, gone: &mut Vec<QueueKey>) {
        for key in self.queues.keys() {
            if let Some(q) = self.queues.get_mut(key) {
                // A closing socket is not polled: its zero-copy
                // notifications are read here.
                q.reclaim(w, &mut self.res);
                if q.tick(w, &mut self.res, stop) {
                    gone.push(key);
                }
            }
        }
    }

    fn remove(&mut self, w: &mut Lend<'_>, key: QueueKey) -> bool {
        let Some(mut q) = self.queues.remove(key) else {
            return false;
        };
        q.teardown(w.tally);
        self.res.share_for(self.queues.len());
        true
    }
}
