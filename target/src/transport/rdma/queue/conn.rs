//! A queue's connection: accepting it (queue pair, receives, reply),
//! RDMA-CM events, timers (kill requests, the
//! Connect timeout, keep-alive), disconnect and teardown.

use std::sync::Arc;
use std::time::Instant;

use nvme::cm::CmReply;
use nvme::CQE_SIZE;
use rdma::{CmEventKind, CmId, ConnParams, QpCaps, QpOptions, SendBatch};
use tracing::{debug, warn};

use super::super::device::WorkerDevice;
use super::super::memory::{Budget, Pinned, RecvArea};
use super::super::wr::{self, QueueKey};
use super::{Cx, NewConn, RdmaQueue, DISCONNECT_GRACE, INLINE_RSP, MIN_RNR_TIMER};
use crate::model::controller::QueueLink;
use crate::queue::{Addrs, QueueCore};

/// Send work requests a queue may have outstanding: each of its `nreq`
/// requests at most two (an RDMA WRITE and its response SEND, or an RDMA
/// READ), and one liveness probe.
fn send_wrs(nreq: u32) -> u32 {
    2 * nreq + 1
}

/// Completion-queue entries a queue may need at once, with `own_recv`
/// receives of its own: one per send work request, signaled or not, since
/// a queue pair that goes to the error state (every disconnect) flushes each
/// outstanding request with a completion; counting only the signaled ones
/// overflows the worker's completion queue when many queues go at once.
fn cq_entries(nreq: u32, own_recv: u32) -> u32 {
    send_wrs(nreq) + own_recv
}

impl RdmaQueue {
    /// Creates the queue pair on `dev`, posts its receives and accepts. On
    /// error the id is handed back for a reject.
    #[allow(clippy::result_large_err)]
    pub fn accept(
        c: NewConn,
        key: QueueKey,
        dev_index: usize,
        dev: &mut WorkerDevice,
        budget: &Arc<Budget>,
        link: Arc<QueueLink>,
    ) -> Result<RdmaQueue, (CmId, String)> {
        let NewConn {
            mut id,
            params,
            host_ird,
            host_ord,
            pending,
        } = c;
        let sq = params.sq_size as u32;
        let nreq = QueueCore::slots_for(params.sq_size);
        // The host may have `sq` capsules outstanding on this queue, and a
        // capsule that finds no receive posted meets an RNR NAK: its queue
        // stalls for the RNR timer, and soft-RoCE, which replays the local
        // operations of a send queue it retransmits, breaks hosts that
        // register memory per I/O. So a queue shares the SRQ only while the
        // SRQ has a receive for every capsule of every queue on it; beyond
        // that it gets receives of its own, and only when the pinned budget
        // cannot pay for them does it share an overcommitted SRQ.
        let srq_room = dev
            .srq
            .as_ref()
            .map(|a| a.slots().saturating_sub(dev.srq_committed));
        let recv = match srq_room {
            Some(room) if room >= sq => None,
            Some(room) => match RecvArea::new(&dev.pd, budget, sq, None, false) {
                Ok(a) => Some(a),
                Err(e) => {
                    // Said once per worker and device; each queue at debug.
                    if !std::mem::replace(&mut dev.srq_overcommitted, true) {
                        warn!(qid = params.qid, sq_size = sq, srq_room = room,
                              "the shared receive queue is overcommitted: the pinned budget has no room \
                               for this queue's own receives ({e}); under load its hosts may meet RNR \
                               retries (raise [target] srq_depth or max_pinned_memory)");
                    } else {
                        debug!(
                            qid = params.qid,
                            sq_size = sq,
                            srq_room = room,
                            "the shared receive queue is overcommitted"
                        );
                    }
                    None
                }
            },
            None => match RecvArea::new(&dev.pd, budget, sq, None, false) {
                Ok(a) => Some(a),
                Err(e) => return Err((id, format!("receive buffers: {e}"))),
            },
        };
        let own_recv = recv.is_some();
        let cq_share = cq_entries(nreq, if own_recv { sq } else { 0 });
        if dev.cq_room < cq_share {
            return Err((id, "the worker's completion queue is full".into()));
        }
        let attr = dev.attr;
        let srq = if own_recv {
            None
        } else {
            dev.srq.as_ref().and_then(|a| a.srq_handle())
        };
        let caps = QpCaps {
            max_send_wr: send_wrs(nreq).min(attr.max_qp_wr),
            max_recv_wr: sq.min(attr.max_qp_wr),
            max_send_sge: 2.min(attr.max_sge),
            max_recv_sge: 2.min(attr.max_sge),
        };
        let granted = match id.create_qp_with(
            &dev.pd,
            &dev.cq,
            caps,
            QpOptions {
                srq,
                max_inline_data: INLINE_RSP,
            },
        ) {
            Ok(g) => g,
            Err(e) => return Err((id, format!("rdma_create_qp: {e}"))),
        };
        let inline = granted >= INLINE_RSP;
        let rsp_mem = if inline {
            None
        } else {
            match Pinned::new(&dev.pd, budget, nreq as usize * CQE_SIZE, 1) {
                Ok(p) => Some(p),
                Err(e) => return Err((id, format!("response buffers: {e}"))),
            }
        };
        let Some(qp) = id.qp() else {
            return Err((id, "no queue pair".into()));
        };
        let qp_num = qp.qp_num();
        if let Some(area) = &recv {
            for s in 0..sq {
                // SAFETY: a fresh area; the QP is live (owned by `id`).
                if let Err(e) = unsafe { area.post(s, wr::recv_qp(key, s), Some(&qp)) } {
                    return Err((id, format!("ibv_post_recv: {e}")));
                }
            }
        }
        let rep = CmReply {
            recfmt: 0,
            crqsize: params.sq_size,
        }
        .encode();
        let p = ConnParams {
            private_data: &rep,
            responder_resources: host_ord.min(attr.max_qp_rd_atom.min(255) as u8),
            initiator_depth: host_ird.min(attr.max_qp_init_rd_atom.min(255) as u8),
            rnr_retry_count: 7,
            retry_count: 7,
        };
        if let Err(e) = id.accept(&p) {
            return Err((id, format!("rdma_accept: {e}")));
        }
        // A capsule that finds the shared receive queue empty is refused with
        // an RNR NAK and resent after this delay; the connection manager's
        // default (code 0) is the longest, 655 ms, which makes a short
        // shortage stall the host's queue for most of a second.
        if let Some(Err(e)) = id.qp().map(|qp| qp.set_min_rnr_timer(MIN_RNR_TIMER)) {
            warn!(qid = params.qid, error = %e, "setting the RNR timer");
        }
        dev.cq_room -= cq_share;
        if !own_recv {
            dev.srq_committed += sq;
        }
        debug!(qid = params.qid, sq_size = params.sq_size, peer = ?id.peer_addr(), inline,
               srq = !own_recv, "queue accepted");
        let addrs = Addrs {
            peer: id.peer_addr(),
            local: id.local_addr(),
            tls: None,
        };
        Ok(RdmaQueue {
            cm_key: id.key(),
            id: Some(id),
            recv,
            rsp_mem,
            key,
            dev: dev_index,
            qp_num,
            cq_share,
            core: QueueCore::new(params, addrs, link, pending, Instant::now()),
            batch: SendBatch::new(super::super::poster::BATCH_WRS),
            closing: None,
            cm_gone: false,
        })
    }

    // ---- connection events --------------------------------------------

    /// An RDMA-CM event for this queue.
    pub fn on_cm_event(&mut self, cx: &mut Cx<'_, '_>, kind: CmEventKind) {
        match kind {
            CmEventKind::Established => debug!(qid = self.qid(), "established"),
            CmEventKind::Disconnected | CmEventKind::TimewaitExit | CmEventKind::DeviceRemoval => {
                self.cm_gone = true;
                self.disconnect(cx, "host disconnected", "host");
            }
            CmEventKind::ConnectError | CmEventKind::Unreachable | CmEventKind::Rejected => {
                warn!(qid = self.qid(), ?kind, "connection failed");
                self.cm_gone = true;
                self.disconnect(cx, "connection failed", "error");
            }
            k => debug!(qid = self.qid(), kind = ?k, "cm event"),
        }
    }

    /// Timers and requests from other threads (every few hundred ms).
    pub fn periodic(&mut self, cx: &mut Cx<'_, '_>) {
        if !self.live() {
            return;
        }
        // A batch the poster failed to post fails the queue at its next
        // flush, or here if nothing was queued after it.
        if self
            .id
            .as_ref()
            .and_then(|i| i.qp()?.lent_post_error())
            .is_some()
        {
            return self.lent_failed(cx);
        }
        self.call(cx, |c, env| c.timer(env));
    }

    pub(super) fn log_device_events(&self) {
        let Some(ctx) = self.id.as_ref().and_then(|i| i.context()) else {
            return;
        };
        match ctx.take_async_events() {
            Ok(evs) => {
                for e in evs {
                    warn!(qid = self.qid(), event = %e, "RDMA device event");
                }
            }
            Err(e) => debug!(qid = self.qid(), "device events: {e}"),
        }
    }

    /// Whether the queue is gone and may be dropped. Past the grace time the
    /// queue pair is destroyed, so work requests that never flushed no longer
    /// hold their requests; backend operations must still complete.
    pub fn finished(&mut self, cx: &mut Cx<'_, '_>, now: Instant) -> bool {
        let Some(since) = self.closing else {
            return false;
        };
        // A poster still holds batches of this queue: the queue pair stays
        // until they are posted (dropping it would wait for them).
        if self
            .id
            .as_ref()
            .and_then(|i| i.qp())
            .is_some_and(|qp| qp.tickets_out() > 0)
        {
            return false;
        }
        let busy = self.core.busy();
        if !busy && (self.cm_gone || now.duration_since(since) > DISCONNECT_GRACE) {
            return true;
        }
        if busy && self.id.is_some() && now.duration_since(since) > DISCONNECT_GRACE {
            debug!(
                qid = self.qid(),
                "destroying the queue pair of a queue that did not drain"
            );
            self.id = None;
            self.call(cx, |c, env| c.transport_gone(env));
        }
        false
    }

    /// Detaches from the controller and updates the gauges (the queue is
    /// about to be dropped).
    pub fn teardown(&mut self, tally: &mut crate::counters::Tally) {
        self.core.teardown(tally);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_reserves_a_completion_for_every_send_it_may_have_posted() {
        // A queue of 128 has 256 request slots: a READ, or a WRITE (not
        // signaled) and a SEND, for each, and a probe; all flush on disconnect.
        assert_eq!(send_wrs(256), 513);
        assert_eq!(cq_entries(256, 0), 513);
        assert_eq!(cq_entries(256, 128), 641);
    }
}
