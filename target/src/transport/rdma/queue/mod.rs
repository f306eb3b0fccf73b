//! One queue pair served by a worker: the RDMA driver of a
//! [`QueueCore`]. It turns verbs completions into the core's events and the
//! core's [`Action`]s into verbs; what a command means is the core's.
//!
//! Data path: capsules arrive by RECV (the 64-byte command into one SGE,
//! in-capsule data into a page-aligned second SGE), from the worker's shared
//! receive queue or the queue's own receives. Host writes are fetched by RDMA
//! READ into a pool buffer, or used in place from the in-capsule area; host
//! reads are written from a pool buffer by RDMA WRITE chained before the
//! response SEND. Responses to keyed SGLs with subtype 0xF go out as
//! SEND_WITH_INVALIDATE of the host's key; the 16-byte response is sent
//! inline where the device allows it. Work requests of a loop pass are posted
//! together (one doorbell per queue pair per pass).

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::{Completion, CQE_SIZE};
use rdma::{CmId, SendBatch, SendOp, SendRequest, Sge};
use tracing::error;

use super::device::WorkerDevice;
use super::memory::{Pinned, RecvArea};
use super::poster::{route, Poster, Route};
use super::wr::{self, QueueKey};
use crate::backend::DataRef;
use crate::base::admission::Pending;
use crate::counters::RdmaOp;
use crate::model::controller::QueueLink;
use crate::queue::{Action, Env, Memory, QueueCore, QueueParams, ToHost, Token};
use crate::request::pool::Buf;
use crate::worker::buffers::{self, Asked};
use crate::worker::Lend;

mod conn;

/// The RNR timer our queue pairs give the host (InfiniBand code 10: 0.32 ms,
/// the value RDS uses): how long a capsule that found no receive posted
/// waits before the host's adapter resends it.
pub const MIN_RNR_TIMER: u8 = 10;
/// How long a disconnecting queue waits for the host's side and its work
/// requests to flush before the queue pair is destroyed regardless.
const DISCONNECT_GRACE: Duration = Duration::from_secs(3);
/// Bytes of a response sent inline.
const INLINE_RSP: u32 = CQE_SIZE as u32;

/// What a queue works with while it handles an event: what the worker
/// lends, and its device's resources.
pub struct Cx<'a, 'w> {
    /// What the worker lends.
    pub w: &'a mut Lend<'w>,
    /// The queue's device resources.
    pub dev: &'a mut WorkerDevice,
    /// The worker's poster thread, if sends may be offloaded.
    pub poster: Option<&'a Poster>,
}

/// A queue pair and its core. Field order is drop order: the RDMA-CM id
/// (and with it the QP) goes before the memory its receives name.
pub struct RdmaQueue {
    id: Option<CmId>,
    recv: Option<RecvArea>,
    rsp_mem: Option<Pinned>,
    /// Its place in the worker's table.
    pub key: QueueKey,
    /// Index of its device in the worker.
    pub dev: usize,
    /// The QP number (how shared-receive completions name the queue).
    pub qp_num: u32,
    /// The RDMA-CM id's key (how CM events name the queue).
    pub cm_key: usize,
    /// Completion queue entries it may use.
    pub cq_share: u32,
    core: QueueCore,
    batch: SendBatch,
    /// Since when it disconnects.
    closing: Option<Instant>,
    cm_gone: bool,
}

/// Parameters of an accepted connection, from the listener.
pub struct NewConn {
    /// The id (already on the worker's event channel).
    pub id: CmId,
    /// Checked CM private data.
    pub params: QueueParams,
    /// RDMA READ depth the host offers / asks.
    pub host_ird: u8,
    /// As above.
    pub host_ord: u8,
    /// Its place among the queues not yet connected.
    pub pending: Option<Pending>,
}

/// Request data as the core sees it: pool buffers in the device's data
/// memory, capsules in the queue's receive area or the shared one.
struct RdmaMemory<'a> {
    dev: &'a WorkerDevice,
    own: Option<&'a RecvArea>,
    key: QueueKey,
}

impl Memory for RdmaMemory<'_> {
    fn buffer(&self, b: &Buf) -> DataRef {
        DataRef {
            ptr: self.dev.buf_ptr(b),
            fixed: Some(self.dev.fixed),
        }
    }

    fn capsule(&self, slot: u32) -> DataRef {
        match self.own.or(self.dev.srq.as_ref()) {
            Some(area) => DataRef {
                ptr: area.data_ptr(slot),
                fixed: area.fixed(),
            },
            None => DataRef::NONE,
        }
    }

    fn backend_ud(&self, t: Token) -> u64 {
        wr::req(wr::IO, self.key, t.slot, t.gen)
    }
}

/// Runs `f` on `core` with an environment over the worker's resources.
fn with_env<R>(
    core: &mut QueueCore,
    own: Option<&RecvArea>,
    key: QueueKey,
    cx: &mut Cx<'_, '_>,
    f: impl FnOnce(&mut QueueCore, &mut Env<'_, '_>) -> R,
) -> R {
    let mem = RdmaMemory {
        dev: &*cx.dev,
        own,
        key,
    };
    cx.w.env(core, &mem, f)
}

/// The token of a work request's id.
fn token(id: &rdma::WrId) -> Token {
    Token {
        slot: id.slot,
        gen: id.slot_gen,
    }
}

impl RdmaQueue {
    fn qid(&self) -> u16 {
        self.core.qid()
    }

    /// The queue's link (its controller stops it through it).
    pub fn link(&self) -> &Arc<QueueLink> {
        self.core.link()
    }

    fn live(&self) -> bool {
        self.core.live()
    }

    /// Hands an event to the core, then carries out what it asks.
    pub fn call<R>(
        &mut self,
        cx: &mut Cx<'_, '_>,
        f: impl FnOnce(&mut QueueCore, &mut Env<'_, '_>) -> R,
    ) -> R {
        let r = with_env(&mut self.core, self.recv.as_ref(), self.key, cx, f);
        self.drain(cx);
        r
    }

    /// Carries out the core's actions, in order.
    fn drain(&mut self, cx: &mut Cx<'_, '_>) {
        while let Some(a) = self.core.next_action() {
            match a {
                Action::Repost(slot) => self.repost(cx, slot),
                Action::NeedBuffer { req, len, limited } => {
                    match buffers::ask(cx.w, cx.dev.pool, self.key, req, len, limited) {
                        Asked::Now(b) => {
                            let back = with_env(
                                &mut self.core,
                                self.recv.as_ref(),
                                self.key,
                                cx,
                                |c, env| c.buffer_granted(env, req, b),
                            );
                            if let Some(b) = back {
                                self.give_buffer(cx, b);
                            }
                        }
                        Asked::Waits => {}
                        Asked::TooLarge => {
                            with_env(
                                &mut self.core,
                                self.recv.as_ref(),
                                self.key,
                                cx,
                                |c, env| c.fail(env),
                            );
                        }
                    }
                }
                Action::Fetch {
                    req,
                    cid: _,
                    buf,
                    addr,
                    len,
                    key,
                } => self.fetch(cx, req, &buf, addr, len, key),
                Action::Respond {
                    req,
                    cqe,
                    data,
                    invalidate,
                } => self.respond(cx, req, &cqe, data, invalidate),
                Action::GiveBuffer(b) => self.give_buffer(cx, b),
                Action::Probe => self.send_probe(cx),
                Action::Close => {
                    self.closing.get_or_insert_with(Instant::now);
                    if let Some(id) = &self.id {
                        if let Err(e) = id.disconnect() {
                            tracing::debug!(qid = self.qid(), "rdma_disconnect: {e}");
                        }
                    }
                }
            }
        }
    }

    fn give_buffer(&mut self, cx: &mut Cx<'_, '_>, b: Buf) {
        buffers::give_back(cx.w, cx.dev.pool, b);
    }

    /// Gives a receive slot back: to the shared receive queue (always), or to
    /// this queue pair (while it lives).
    fn repost(&mut self, cx: &mut Cx<'_, '_>, slot: u32) {
        let res = match (&self.recv, &cx.dev.srq) {
            (Some(own), _) => {
                if !self.live() {
                    return;
                }
                let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) else {
                    return;
                };
                // SAFETY: the slot's capsule was consumed; the QP is live.
                unsafe { own.post(slot, wr::recv_qp(self.key, slot), Some(&qp)) }
            }
            // SAFETY: the slot's capsule was consumed.
            (None, Some(srq)) => unsafe { srq.post(slot, wr::recv_srq(slot), None) },
            (None, None) => return,
        };
        if let Err(e) = res {
            error!(qid = self.qid(), error = %e, "reposting a receive");
            self.fail(cx);
        }
    }

    // ---- events in -----------------------------------------------------

    /// A capsule arrived in receive slot `slot`.
    pub fn on_recv(&mut self, cx: &mut Cx<'_, '_>, slot: u32, byte_len: u32) {
        let Some(area) = self.recv.as_ref().or(cx.dev.srq.as_ref()) else {
            return;
        };
        // SAFETY: the receive of `slot` just completed; it is reposted only
        // when the core says so, after the command was copied out
        // (Command::parse copies).
        let sqe = unsafe { area.command(slot) };
        // Copied: the area is borrowed from `cx`, which the call takes.
        let mut cmd = [0u8; nvme::SQE_SIZE];
        cmd.copy_from_slice(&sqe[..nvme::SQE_SIZE]);
        self.call(cx, |c, env| c.capsule(env, slot, &cmd, byte_len));
    }

    /// A work completion for request `id` (READ, WRITE or SEND), or of a
    /// liveness probe.
    pub fn on_wc(&mut self, cx: &mut Cx<'_, '_>, id: &rdma::WrId, ok: bool) {
        match id.kind {
            // A failed probe failed the queue already (`on_wc_error`).
            wr::PROBE if ok => self.core.probe_answered(cx.w.now),
            wr::READ => self.call(cx, |c, env| c.fetched(env, token(id), ok)),
            wr::SEND => self.call(cx, |c, env| c.sent(env, token(id), ok)),
            _ => {}
        }
    }

    /// A work completion failed (`flush`: because the queue pair went to the
    /// error state, which happens on every disconnect).
    pub fn on_wc_error(&mut self, cx: &mut Cx<'_, '_>, flush: bool, what: &str) {
        if !flush {
            error!(qid = self.qid(), "{what}");
            self.log_device_events();
            self.fail(cx);
        } else if self.live() {
            self.log_device_events();
            self.disconnect(cx, "queue pair flushed", "error");
        }
    }

    /// Starts disconnecting; `label` is the reason as counted in metrics.
    pub fn disconnect(&mut self, cx: &mut Cx<'_, '_>, why: &str, label: &'static str) {
        self.call(cx, |c, env| c.disconnect(env, why, label));
    }

    /// A fatal transport error: the controller fails with it.
    fn fail(&mut self, cx: &mut Cx<'_, '_>) {
        self.call(cx, |c, env| c.fail(env));
    }

    // ---- actions out ---------------------------------------------------

    fn fetch(&mut self, cx: &mut Cx<'_, '_>, req: Token, buf: &Buf, addr: u64, len: u32, key: u32) {
        let sge = [Sge {
            addr: cx.dev.buf_ptr(buf) as u64,
            len,
            lkey: cx.dev.data.mr.lkey(),
        }];
        let wr = SendRequest {
            wr_id: wr::req(wr::READ, self.key, req.slot, req.gen),
            op: SendOp::RdmaRead {
                remote_addr: addr,
                rkey: key,
            },
            sges: &sge,
            signaled: true,
        };
        cx.w.tally.rdma(RdmaOp::Read);
        self.queue_sends(cx, &[wr], None);
    }

    fn respond(
        &mut self,
        cx: &mut Cx<'_, '_>,
        req: Token,
        cqe: &Completion,
        data: Option<ToHost>,
        invalidate: Option<u32>,
    ) {
        // Inline (the queue pair took INLINE_RSP bytes of inline data): the
        // batch keeps a copy of the response. Else from the response area.
        let mut inline_rsp = [0u8; CQE_SIZE];
        let rsp_sge = if let Some(mem) = &self.rsp_mem {
            let off = req.slot as usize * CQE_SIZE;
            // SAFETY: slot `req` of the response area is this request's; its
            // previous SEND completed before the request was released.
            let slot = unsafe { std::slice::from_raw_parts_mut(mem.base().add(off), CQE_SIZE) };
            cqe.encode_into(slot);
            mem.mr.sge(off, CQE_SIZE as u32)
        } else {
            cqe.encode_into(&mut inline_rsp);
            Sge::default()
        };
        let rsp_sge = [rsp_sge];
        let send_op = match invalidate {
            Some(k) => {
                cx.w.tally.rdma(RdmaOp::SendWithInvalidate);
                SendOp::SendWithInv(k)
            }
            None => {
                cx.w.tally.rdma(RdmaOp::Send);
                SendOp::Send
            }
        };
        let send = SendRequest {
            wr_id: wr::req(wr::SEND, self.key, req.slot, req.gen),
            op: send_op,
            sges: &rsp_sge,
            signaled: true,
        };
        if let Some(d) = data {
            let data_sge = [Sge {
                addr: cx.dev.buf_ptr(&d.buf) as u64,
                len: d.len,
                lkey: cx.dev.data.mr.lkey(),
            }];
            let write = SendRequest {
                wr_id: wr::req(wr::WRITE, self.key, req.slot, req.gen),
                op: SendOp::RdmaWrite {
                    remote_addr: d.addr,
                    rkey: d.key,
                },
                sges: &data_sge,
                signaled: false,
            };
            cx.w.tally.rdma(RdmaOp::Write);
            self.queue_sends(cx, &[write], None);
        }
        let inline = self.rsp_mem.is_none().then_some(&inline_rsp[..]);
        self.queue_sends(cx, &[send], inline);
    }

    /// Probes the host with a zero-length RDMA WRITE (no memory, no key): its
    /// transport acknowledges it if it is still there.
    fn send_probe(&mut self, cx: &mut Cx<'_, '_>) {
        let probe = SendRequest {
            wr_id: wr::req(wr::PROBE, self.key, 0, 0),
            op: SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            sges: &[],
            signaled: true,
        };
        self.queue_sends(cx, &[probe], None);
    }

    /// Queues work requests; they are posted together at the end of the loop
    /// pass ([`RdmaQueue::flush_sends`]). `inline`: the data of each, sent inline
    /// (the batch keeps a copy).
    fn queue_sends(&mut self, cx: &mut Cx<'_, '_>, wrs: &[SendRequest<'_>], inline: Option<&[u8]>) {
        if self.batch.room() < wrs.len() {
            self.flush_sends(cx);
        }
        for w in wrs {
            let queued = match inline {
                Some(data) => self.batch.push_inline(w, data),
                None => self.batch.push(w),
            };
            if !queued {
                // Only when the flush above could not empty the batch (its
                // queue pair is gone): a response that is not sent would
                // leave the host waiting, so the queue fails instead.
                error!(
                    qid = self.qid(),
                    "a work request did not fit its batch; disconnecting"
                );
                return self.fail(cx);
            }
        }
    }

    /// The capsules this queue may have outstanding on its device's shared
    /// receive queue (0 when it has receives of its own).
    pub fn srq_share(&self) -> u32 {
        if self.recv.is_some() {
            0
        } else {
            self.core.params().sq_size as u32
        }
    }

    /// Whether work requests wait to be posted.
    pub fn has_sends(&self) -> bool {
        !self.batch.is_empty()
    }

    /// Posts the queued work requests with one doorbell.
    pub fn flush_sends(&mut self, cx: &mut Cx<'_, '_>) {
        if self.batch.is_empty() {
            return;
        }
        let Some(qp) = self.id.as_ref().and_then(|i| i.qp()) else {
            return;
        };
        if qp.lent_post_error().is_some() {
            return self.lent_failed(cx);
        }
        let to = route(
            cx.dev.offload_sends,
            self.batch.largest_write(),
            qp.tickets_out(),
        );
        if let (Route::Poster, Some(poster)) = (to, cx.poster) {
            let batch = std::mem::replace(&mut self.batch, SendBatch::new(0));
            // SAFETY: as below; the requests hold their memory until their
            // completions whichever thread posts, and the ticket holds the QP
            // (`finished` waits for it).
            self.batch = unsafe { poster.hand(qp.ticket(), batch) };
            return;
        }
        // SAFETY: every queued WR names a pool buffer or response slot of a
        // request that holds it until its SEND (or READ) completes (inline
        // responses are copies in the batch); the QP is live (owned by `id`).
        if let Err(e) = unsafe { self.batch.post(&qp) } {
            error!(qid = self.qid(), error = %e, "ibv_post_send");
            self.fail(cx);
        }
    }

    /// A batch the poster was given could not be posted: the queue fails
    /// (as when a post on the worker fails), and nothing queued after the
    /// lost batch goes out.
    pub(super) fn lent_failed(&mut self, cx: &mut Cx<'_, '_>) {
        self.batch.clear();
        let code = self.id.as_ref().and_then(|i| i.qp()?.lent_post_error());
        if let (Some(code), true) = (code, self.live()) {
            error!(
                qid = self.qid(),
                "ibv_post_send (poster thread): {}",
                std::io::Error::from_raw_os_error(code.max(0))
            );
            self.fail(cx);
        }
    }
}
