//! Posting a queue pair's sends from a thread other than its owner's.
//!
//! The owner of a [`crate::CmId`] asks its [`QueuePair`] for a
//! [`SendTicket`] and hands the ticket, with a [`SendBatch`], to another
//! thread, which posts the batch through it. The queue pair is not destroyed
//! while a ticket is out: dropping the id waits until every ticket is posted
//! or dropped, so a ticket can never post to a freed queue pair. An owner
//! that must not wait asks [`QueuePair::tickets_out`] first. (So a ticket
//! must not be leaked, nor held by the thread that drops the id.)
//!
//! Order: the work requests of one queue pair are executed in the order they
//! are posted. An owner that posts some batches itself and lends others keeps
//! its order by posting itself only while no ticket is out (a ticket is
//! counted out until its post has returned).

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use rdma_sys::ibv_qp;

use crate::error::Result;
use crate::qp::{QueuePair, SendBatch};

/// What a queue pair's owner and the holders of its tickets share.
#[derive(Default)]
pub(crate) struct Lane {
    /// Tickets issued and not yet posted or dropped.
    out: AtomicUsize,
    /// The return code of the first post through a ticket that failed (0: none).
    error: AtomicI32,
}

impl Lane {
    /// Waits until no ticket is out (called before the queue pair is destroyed).
    pub(crate) fn wait_idle(&self) {
        while self.out.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
    }
}

/// The right to post one batch to a queue pair from any thread; the queue
/// pair lives at least until the ticket is posted or dropped.
pub struct SendTicket {
    qp: *mut ibv_qp,
    lane: Arc<Lane>,
}

// SAFETY: ibv_post_send may be called from any thread; the queue pair the
// pointer names is kept alive by the lane's count (see `Lane::wait_idle`).
unsafe impl Send for SendTicket {}

impl SendTicket {
    /// Posts everything queued in `batch` to the ticket's queue pair, in
    /// order, and empties the batch. A failure is also recorded for the
    /// owner ([`QueuePair::lent_post_error`]).
    ///
    /// # Safety
    /// As [`QueuePair::post_send`], for every queued request.
    pub unsafe fn post(self, batch: &mut SendBatch) -> Result<()> {
        // SAFETY: the queue pair is live while this ticket is out; memory per
        // the caller's guarantee.
        let r = unsafe { batch.post_raw(self.qp) };
        if let Err(e) = &r {
            let code = e.raw_os_error().filter(|&c| c != 0).unwrap_or(-1);
            let _ = self
                .lane
                .error
                .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        }
        r
    }
}

impl SendTicket {
    /// Gives the ticket up without posting: recorded as a failed post
    /// (`EIO`), so that the owner learns its batch was lost.
    pub fn abandon(self) {
        let _ = self
            .lane
            .error
            .compare_exchange(0, libc::EIO, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl Drop for SendTicket {
    fn drop(&mut self) {
        // Release: the post (if any) happened before the owner sees the count fall.
        self.lane.out.fetch_sub(1, Ordering::Release);
    }
}

impl QueuePair<'_> {
    /// A ticket to post one batch to this queue pair from another thread.
    pub fn ticket(&self) -> SendTicket {
        self.lane.out.fetch_add(1, Ordering::AcqRel);
        SendTicket {
            qp: self.raw,
            lane: self.lane.clone(),
        }
    }

    /// Tickets out (issued, not yet posted or dropped). When this reads 0,
    /// every post through a ticket has returned.
    pub fn tickets_out(&self) -> usize {
        self.lane.out.load(Ordering::Acquire)
    }

    /// The return code of the first post through a ticket that failed.
    pub fn lent_post_error(&self) -> Option<i32> {
        match self.lane.error.load(Ordering::Acquire) {
            0 => None,
            e => Some(e),
        }
    }
}
