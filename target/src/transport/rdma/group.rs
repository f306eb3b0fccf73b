//! The RDMA transport's part of a worker ([`crate::worker::Transport`]): per
//! RDMA device one completion queue, one shared receive queue and one data
//! pool ([`WorkerDevice`]), one RDMA-CM event channel for its queues'
//! connection events, and the connections the listeners hand it ([`Inbox`]).
//! It polls the completion queues, turns work completions into its queues'
//! events, and before the worker sleeps arms completion notification and
//! the ring's polls of the completion and CM channels.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use nvme::cm::RejectStatus;
use rdma::{CmEventKind, EventChannel, WorkCompletion, WrId};
use tracing::{debug, error, warn};

use super::device::WorkerDevice;
use super::index::QueueIndex;
use super::queue::{Cx, NewConn, RdmaQueue};
use super::wr;
use super::RdmaShared;
use crate::model::controller::QueueLink;
use crate::telemetry::metrics::metrics;
use crate::worker::slots::{QueueKey, Slots};
use crate::worker::ud::Ud;
use crate::worker::{queue_added, CoreEvent, Lend, Transport};

/// Where a listener leaves RDMA connections for a worker.
pub type Inbox = crate::worker::Inbox<NewConn>;

/// A device slot: the device's resources while the worker serves it, and
/// the generation of its completion-channel polls (a slot is reused after a
/// device is removed).
#[derive(Default)]
struct DevSlot {
    gen: u8,
    dev: Option<WorkerDevice>,
}

/// A worker's RDMA queues, devices and connections. Field order is drop
/// order: the queues (their queue pairs) go before the devices whose memory
/// their work requests name.
pub struct RdmaGroup {
    queues: Slots<RdmaQueue>,
    devices: Vec<DevSlot>,
    index: QueueIndex,
    /// Made with the first connection: a target serving NVMe/TCP only
    /// runs where there is no RDMA at all.
    cm: Option<Arc<EventChannel>>,
    cm_armed: bool,
    inbox: Arc<Inbox>,
    shared: Arc<RdmaShared>,
    wcs: Vec<WorkCompletion>,
    /// Its index in its worker's list of transports.
    me: usize,
}

impl RdmaGroup {
    /// The RDMA part of a worker whose connections arrive in `inbox`, at
    /// index `me` in the worker's list of transports.
    pub fn new(shared: Arc<RdmaShared>, inbox: Arc<Inbox>, me: usize) -> RdmaGroup {
        RdmaGroup {
            me,
            queues: Slots::for_transport(me),
            devices: Vec::new(),
            index: QueueIndex::default(),
            cm: None,
            cm_armed: false,
            inbox,
            shared,
            wcs: (0..32).map(|_| WorkCompletion::default()).collect(),
        }
    }

    /// The worker's RDMA-CM event channel, made when first needed.
    fn channel(&mut self) -> Option<Arc<EventChannel>> {
        if self.cm.is_none() {
            match EventChannel::new().and_then(|c| c.set_nonblocking().map(|_| c)) {
                Ok(c) => self.cm = Some(c),
                Err(e) => error!(error = %e, "RDMA-CM event channel"),
            }
        }
        self.cm.clone()
    }

    /// Runs `f` on queue `key` with the device resources it may use.
    fn with_queue(
        &mut self,
        w: &mut Lend<'_>,
        key: QueueKey,
        f: impl FnOnce(&mut RdmaQueue, &mut Cx<'_, '_>),
    ) {
        let Some(q) = self.queues.get_mut(key) else {
            return;
        };
        let dev = q.dev;
        let Some(d) = self.devices.get_mut(dev).and_then(|s| s.dev.as_mut()) else {
            return;
        };
        let mut cx = Cx {
            poster: self.shared.poster(w.worker),
            w,
            dev: d,
        };
        f(q, &mut cx);
    }

    fn on_wc(&mut self, w: &mut Lend<'_>, d: usize, wc: &WorkCompletion) {
        let id = WrId::unpack(wc.wr_id());
        if !wc.is_ok() && !wc.is_flush() {
            metrics()
                .wc_errors
                .with_label_values(&[wc.status_name()])
                .inc();
        }
        match id.kind {
            wr::RECV_SRQ => {
                let slot = id.slot as u32;
                let q = self
                    .index
                    .by_qp(d, wc.qp_num())
                    .and_then(|s| self.queues.key_of(s));
                match (wc.is_ok(), q) {
                    (true, Some(key)) => {
                        let len = wc.byte_len();
                        self.with_queue(w, key, |q, cx| q.on_recv(cx, slot, len));
                    }
                    (ok, _) => {
                        // A receive for a queue pair that is gone, or one
                        // flushed or failed with its queue pair: the device is
                        // done with the buffer, which goes back to the SRQ
                        // (else every queue pair that dies holding a receive
                        // would shrink the SRQ for good).
                        if !ok && !wc.is_flush() {
                            warn!(worker = w.worker, status = %wc.status_str(), "shared receive failed");
                        }
                        if let Some(area) = self
                            .devices
                            .get(d)
                            .and_then(|d| d.dev.as_ref())
                            .and_then(|d| d.srq.as_ref())
                        {
                            // SAFETY: nobody uses the slot: its capsule is dropped.
                            let _ = unsafe { area.post(slot, wr::recv_srq(slot), None) };
                        }
                    }
                }
            }
            wr::RECV_QP => {
                let key = wr::queue_of(&id);
                let (ok, flush, len) = (wc.is_ok(), wc.is_flush(), wc.byte_len());
                let what = if ok {
                    String::new()
                } else {
                    format!("receive failed: {}", wc.status_str())
                };
                self.with_queue(w, key, |q, cx| {
                    if ok {
                        q.on_recv(cx, id.slot as u32, len)
                    } else {
                        q.on_wc_error(cx, flush, &what)
                    }
                });
            }
            wr::READ | wr::WRITE | wr::SEND | wr::PROBE => {
                let key = wr::queue_of(&id);
                let (ok, flush) = (wc.is_ok(), wc.is_flush());
                let what = if ok {
                    String::new()
                } else if id.kind == wr::PROBE {
                    format!(
                        "host unreachable: no acknowledgement of the liveness probe ({}); \
                         the host turned keep-alive off",
                        wc.status_str()
                    )
                } else {
                    format!(
                        "work completion error: {} (vendor error {:#x}, op {})",
                        wc.status_str(),
                        wc.vendor_err(),
                        id.kind
                    )
                };
                self.with_queue(w, key, |q, cx| {
                    if !ok {
                        q.on_wc_error(cx, flush, &what);
                    }
                    q.on_wc(cx, &id, ok);
                });
            }
            k => debug!(worker = w.worker, kind = k, "unexpected completion"),
        }
    }

    /// Polls every device's completion queue. Returns how many completions.
    fn poll_cqs(&mut self, w: &mut Lend<'_>) -> usize {
        let mut work = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        for d in 0..self.devices.len() {
            let Some(dev) = &self.devices[d].dev else {
                continue;
            };
            match dev.cq.poll(&mut wcs) {
                Ok(n) => {
                    for wc in &wcs[..n] {
                        self.on_wc(w, d, wc);
                    }
                    work += n;
                }
                Err(e) => error!(worker = w.worker, error = %e, "ibv_poll_cq"),
            }
        }
        self.wcs = wcs;
        work
    }

    /// Handles the CM events of this worker's queues. Returns how many.
    fn cm_events(&mut self, w: &mut Lend<'_>) -> usize {
        let Some(cm) = self.cm.clone() else {
            return 0;
        };
        let mut n = 0;
        loop {
            match cm.get_event() {
                Ok(Some(ev)) => {
                    n += 1;
                    if let Some(key) = self
                        .index
                        .by_cm(ev.id_key)
                        .and_then(|s| self.queues.key_of(s))
                    {
                        if ev.kind == CmEventKind::DeviceRemoval {
                            self.device_removed(key);
                        }
                        self.with_queue(w, key, |q, cx| q.on_cm_event(cx, ev.kind));
                    }
                }
                Ok(None) => return n,
                Err(e) => {
                    error!(worker = w.worker, error = %e, "rdma_get_cm_event");
                    return n;
                }
            }
        }
    }

    /// A queue's device is being removed (its RDMA-CM id said so).
    fn device_removed(&mut self, key: QueueKey) {
        let Some(dev) = self.queues.get(key).map(|q| q.dev) else {
            return;
        };
        if let Some(d) = self.devices.get_mut(dev).and_then(|s| s.dev.as_mut()) {
            d.removed = true;
            self.shared.device_removed(d.key);
        }
    }

    /// The worker's device for the verbs context of a new connection:
    /// the one it serves, or a new one (in a free slot). None (said) when
    /// it cannot serve it.
    fn device_for(&mut self, w: &mut Lend<'_>, ctx: &rdma::Context) -> Option<usize> {
        let key = ctx.as_ptr() as usize;
        if let Some(d) = self
            .devices
            .iter()
            .position(|s| s.dev.as_ref().is_some_and(|d| d.key == key && !d.removed))
        {
            return Some(d);
        }
        // A free slot (a removed device's) or a new one.
        let idx = self
            .devices
            .iter()
            .position(|s| s.dev.is_none())
            .unwrap_or(self.devices.len());
        let gen = self.devices.get(idx).map_or(0, |s| s.gen.wrapping_add(1));
        let cfg = w.cfg;
        let pool = w.pools.add(super::device::pool_shape(cfg));
        let at = super::device::Place {
            index: idx,
            gen,
            pool,
        };
        let Some(ring) = w.ring() else {
            error!(
                worker = w.worker,
                "an RDMA device needs a worker with an io_uring"
            );
            w.pools.remove(pool);
            return None;
        };
        let made = self
            .shared
            .pd_for(ctx)
            .map_err(|e| e.to_string())
            .and_then(|pd| {
                WorkerDevice::new(ctx, pd, cfg, &self.shared.budget, ring, at)
                    .map_err(|e| e.to_string())
            });
        match made {
            Ok(d) => {
                // The poster's thread starts with the first device that
                // offloads, not mid-run at the first large read.
                if d.offload_sends {
                    if let Some(p) = self.shared.poster(w.worker) {
                        p.start();
                    }
                }
                let s = DevSlot { gen, dev: Some(d) };
                if idx == self.devices.len() {
                    self.devices.push(s);
                } else {
                    self.devices[idx] = s;
                }
                Some(idx)
            }
            Err(e) => {
                error!(worker = w.worker, "cannot serve the RDMA device: {e}");
                w.pools.remove(pool);
                None
            }
        }
    }
}

impl Transport for RdmaGroup {
    fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Takes new connections from the listener: sets up the device (first
    /// time), the queue pair, and accepts.
    fn accept(&mut self, w: &mut Lend<'_>) -> usize {
        let new = self.inbox.take();
        let n = new.len();
        for mut c in new {
            if w.stopping || w.target.stopping.load(Ordering::Acquire) {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            }
            let Some(cm) = self.channel() else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            if let Err(e) = c.id.migrate(&cm) {
                error!(error = %e, "rdma_migrate_id");
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            }
            let Some(ctx) = c.id.context() else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            let Some(dev) = self.device_for(w, &ctx) else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            let (Some(wd), Some(key)) = (
                self.devices.get_mut(dev).and_then(|s| s.dev.as_mut()),
                self.queues.vacant(),
            ) else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            let qid = c.params.qid;
            let link = QueueLink::new(qid, w.waker.clone());
            match RdmaQueue::accept(c, key, dev, wd, &self.shared.budget, link) {
                Ok(q) => {
                    queue_added(w);
                    self.index.insert(q.dev, q.qp_num, q.cm_key, key.slot);
                    self.queues.insert(key, q);
                }
                Err((id, why)) => {
                    warn!(worker = w.worker, qid, peer = ?id.peer_addr(), "queue refused: {why}");
                    super::reject(&id, RejectStatus::NoResources);
                }
            }
        }
        n
    }

    fn poll(&mut self, w: &mut Lend<'_>) -> usize {
        self.poll_cqs(w)
    }

    fn complete(&mut self, w: &mut Lend<'_>, ud: Ud, _res: i32) {
        match ud.local_kind() {
            wr::POLL_CQ => {
                let (index, gen) = (ud.req.slot as usize, ud.queue.gen);
                if let Some(d) = self
                    .devices
                    .get_mut(index)
                    .filter(|s| s.gen == gen)
                    .and_then(|s| s.dev.as_mut())
                {
                    d.cq_poll_armed = false;
                    d.cq.drain_events();
                }
            }
            wr::POLL_CM => {
                self.cm_armed = false;
                self.cm_events(w);
            }
            _ => {}
        }
    }

    fn call(&mut self, w: &mut Lend<'_>, key: QueueKey, event: CoreEvent<'_>) {
        self.with_queue(w, key, |q, cx| q.call(cx, |c, env| event(c, env)));
    }

    fn flush(&mut self, w: &mut Lend<'_>) {
        for i in 0..self.queues.span() {
            let Some(key) = self.queues.key_at(i) else {
                continue;
            };
            if self.queues.get(key).is_some_and(|q| q.has_sends()) {
                self.with_queue(w, key, |q, cx| q.flush_sends(cx));
            }
        }
    }

    /// Arms every completion queue, looks once more, then the ring's polls
    /// of the completion channels and the CM channel.
    fn arm(&mut self, w: &mut Lend<'_>) -> usize {
        let mut late = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        for d in 0..self.devices.len() {
            // A removed device's queues leave on their timers.
            let Some(dev) = self.devices[d].dev.as_ref().filter(|d| !d.removed) else {
                continue;
            };
            if let Err(e) = dev.cq.req_notify() {
                error!(worker = w.worker, error = %e, "ibv_req_notify_cq");
            }
            if let Ok(n) = dev.cq.poll(&mut wcs) {
                for wc in &wcs[..n] {
                    self.on_wc(w, d, wc);
                }
                late += n;
            }
        }
        self.wcs = wcs;
        if late > 0 {
            return late;
        }
        let me = self.me;
        for (i, s) in self.devices.iter_mut().enumerate() {
            let Some(d) = s.dev.as_mut().filter(|d| !d.removed) else {
                continue;
            };
            if !d.cq_poll_armed
                && w.ring().is_some_and(|r| {
                    r.poll_in(d.cq.channel().fd(), wr::poll_cq(me, i as u16, s.gen))
                        .is_ok()
                })
            {
                d.cq_poll_armed = true;
            }
        }
        if let (false, Some(cm)) = (self.cm_armed, &self.cm) {
            self.cm_armed = w.ring().is_some_and(|r| {
                r.poll_in(cm.fd(), wr::ring_op(self.me, wr::POLL_CM, 0))
                    .is_ok()
            });
        }
        0
    }

    fn tick(&mut self, w: &mut Lend<'_>, stop: bool, gone: &mut Vec<QueueKey>) {
        // CM events are also read here: while the worker is busy polling, the
        // channel's poll is not armed.
        self.cm_events(w);
        // Devices another thread saw removed.
        for s in &mut self.devices {
            if let Some(d) = s.dev.as_mut().filter(|d| !d.removed) {
                d.removed = self.shared.is_removed(&d.pd);
            }
        }
        let now: Instant = w.now;
        for key in self.queues.keys() {
            let mut ended = false;
            self.with_queue(w, key, |q, cx| {
                if stop {
                    q.disconnect(cx, "target stopping", "shutdown");
                }
                if cx.dev.removed {
                    q.disconnect(cx, "RDMA device removed", "device_removed");
                }
                q.periodic(cx);
                ended = q.finished(cx, now);
            });
            if ended {
                gone.push(key);
            }
        }
    }

    fn remove(&mut self, w: &mut Lend<'_>, key: QueueKey) -> bool {
        let Some(mut q) = self.queues.remove(key) else {
            return false;
        };
        q.teardown(w.tally);
        self.index.remove(q.dev, q.qp_num, q.cm_key, q.key.slot);
        if let Some(d) = self.devices.get_mut(q.dev).and_then(|s| s.dev.as_mut()) {
            d.cq_room += q.cq_share;
            d.srq_committed = d.srq_committed.saturating_sub(q.srq_share());
        }
        true
    }

    /// Lets go of removed devices no queue uses any more, so that librdmacm
    /// can close them (the kernel's removal of the device waits for that).
    fn tidy(&mut self, w: &mut Lend<'_>) {
        let mut retired = false;
        for i in 0..self.devices.len() {
            // Only a removed device's queues are looked for (each tick).
            let removed = self.devices[i].dev.as_ref().is_some_and(|d| d.removed);
            if removed && !self.queues.iter().any(|(_, q)| q.dev == i) {
                if let (Some(d), Some(ring)) = (self.devices[i].dev.take(), w.ring()) {
                    let pool = d.pool;
                    d.retire(ring, self.me, i as u16);
                    w.pools.remove(pool);
                    retired = true;
                }
            }
        }
        if retired {
            if let Some(Err(e)) = w.ring().map(|r| r.submit()) {
                error!(worker = w.worker, error = %e, "io_uring submit");
            }
            rdma::sync_devices();
        }
    }
}
