//! A worker (poll group): one thread serving many queue pairs. Per RDMA
//! device it has one completion queue, one shared receive queue and one data
//! pool ([`WorkerDevice`]); it has one io_uring for every backend operation of
//! its queues, and one RDMA-CM event channel for their connection events.
//!
//! The loop busy-polls while there is work and for `poll_spin_us` after the
//! last of it (longer while the target is lightly loaded:
//! [`crate::worker::polling`]), then arms completion notification and sleeps in one
//! `io_uring_enter` that wakes on a completion of any device, a CM event, a
//! backend completion, or the worker's eventfd (new connection, a queue to
//! stop, an offload result). It goes round at least every [`IDLE_WAIT`],
//! so its heartbeat tells a sleeping worker from a stuck one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme::cm::RejectStatus;
use rdma::{CmEventKind, EventChannel, WorkCompletion, WrId};
use tracing::{debug, error, warn};

use super::device::WorkerDevice;
use super::index::QueueIndex;
use super::queue::{Cx, NewConn, Queue};
use super::wr::{self, QueueKey};
use super::EngineShared;
use crate::backend::offload::Offload;
use crate::backend::uring::Ring;
use crate::engine::pool::Buf;
use crate::model::controller::QueueLink;
use crate::telemetry::metrics::metrics;
use crate::telemetry::tally::Tally;
use crate::worker::polling::{spin_window_us, Pace};
use crate::worker::wake::Mailbox;
use crate::worker::wake::Waker;

/// A pass this long after the last run of the timers follows a stall.
const STALLED: Duration = Duration::from_millis(1000);
/// How often an awake worker runs its timers.
pub const TICK: Duration = Duration::from_millis(100);
/// The longest a worker sleeps: timers (connect and keep-alive timeouts, the
/// heartbeat) need no finer grain, and everything else wakes it.
pub const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Work done within this long of an I/O's start counts as part of a stream
/// of I/O for the polling rule ([`spin_window_us`]): a host at queue depth 1
/// starts one every round trip; keep-alives and the workers' timers start
/// none.
const IO_RECENT: Duration = Duration::from_millis(1);
/// io_uring entries per worker.
const RING_ENTRIES: u32 = 4096;

/// What other threads share with a worker.
pub struct WorkerShared {
    /// Its index.
    pub index: usize,
    /// Wakes it; its heartbeat.
    pub waker: Arc<Waker>,
    /// Completions from outside its ring (the offload thread).
    pub mailbox: Arc<Mailbox>,
    inbox: Mutex<Vec<NewConn>>,
    inbox_pending: AtomicBool,
    /// Asks it to disconnect everything and stop.
    pub stop: AtomicBool,
}

impl WorkerShared {
    /// A worker's shared half.
    pub fn new(index: usize) -> std::io::Result<Arc<WorkerShared>> {
        let waker = Waker::new()?;
        Ok(Arc::new(WorkerShared {
            index,
            mailbox: Mailbox::new(waker.clone()),
            waker,
            inbox: Mutex::new(Vec::new()),
            inbox_pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }))
    }

    /// Hands a connection request to the worker.
    pub fn give(&self, c: NewConn) {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        self.inbox_pending.store(true, Ordering::Release);
        self.waker.wake();
    }
}

struct Slot {
    gen: u8,
    queue: Option<Queue>,
}

/// The worker thread's state. Field order is drop order: the queues (their
/// queue pairs) go before the resources whose memory their work requests name.
pub struct Worker {
    slots: Vec<Slot>,
    free_slots: Vec<u16>,
    index: QueueIndex,
    queues: usize,
    cm: Arc<EventChannel>,
    armed: Armed,
    label: String,
    res: Res,
}

/// What a worker lends its queues. Field order is drop order: the ring (with
/// its fixed-buffer registrations) goes before the devices' memory.
struct Res {
    ring: Ring,
    devices: Vec<DevSlot>,
    grants: Vec<(WrId, Buf)>,
    /// What the worker counted since it last published.
    tally: Tally,
    /// When the current pass began.
    now: Instant,
    shared: Arc<WorkerShared>,
    engine: Arc<EngineShared>,
    offload: Arc<Offload>,
}

/// A device slot: the device's resources while the worker serves it, and
/// the generation of its completion-channel polls (a slot is reused after a
/// device is removed).
#[derive(Default)]
struct DevSlot {
    gen: u8,
    dev: Option<WorkerDevice>,
}

impl Res {
    /// The context a queue on device `dev` works with (None once the device
    /// is let go of, which waits for its queues).
    fn cx(&mut self, dev: usize) -> Option<Cx<'_>> {
        Some(Cx {
            target: &self.engine.target,
            dev: self.devices.get_mut(dev)?.dev.as_mut()?,
            io: crate::backend::exec::Uring {
                ring: &mut self.ring,
                offload: &self.offload,
                mailbox: &self.shared.mailbox,
            },
            grants: &mut self.grants,
            now: self.now,
            poster: self.engine.poster(self.shared.index),
            max_keep_alive_ms: self.engine.cfg.max_keep_alive_ms,
            worker: self.shared.index,
            tally: &mut self.tally,
        })
    }
}

#[derive(Default)]
struct Armed {
    cm: bool,
    wake: bool,
    /// The CM channel became readable: read its events in this pass.
    cm_ready: bool,
    /// The eventfd fired (a queue to stop, the worker to stop): run the
    /// timers in this pass rather than after the next sleep.
    tick_now: bool,
}

impl Worker {
    /// A worker, ready to run.
    pub fn new(
        shared: Arc<WorkerShared>,
        engine: Arc<EngineShared>,
        offload: Arc<Offload>,
    ) -> Result<Worker, String> {
        let ring = Ring::new(RING_ENTRIES).map_err(|e| format!("io_uring setup: {e}"))?;
        let cm = EventChannel::new()
            .and_then(|c| c.set_nonblocking().map(|_| c))
            .map_err(|e| format!("RDMA-CM event channel: {e}"))?;
        Ok(Worker {
            slots: Vec::new(),
            free_slots: Vec::new(),
            index: QueueIndex::default(),
            queues: 0,
            cm,
            armed: Armed::default(),
            label: shared.index.to_string(),
            res: Res {
                ring,
                devices: Vec::new(),
                grants: Vec::new(),
                tally: Tally::new(),
                now: Instant::now(),
                shared,
                engine,
                offload,
            },
        })
    }

    fn queue_count(&self) -> usize {
        self.queues
    }

    /// Runs `f` on the queue in `slot` (if its generation is `gen`), with the
    /// worker resources it may use; then hands out buffers it gave back.
    fn with_queue(&mut self, key: QueueKey, f: impl FnOnce(&mut Queue, &mut Cx<'_>)) {
        let Some(s) = self.slots.get_mut(key.slot as usize) else {
            return;
        };
        if s.gen != key.gen {
            return;
        }
        let Some(q) = s.queue.as_mut() else { return };
        let dev = q.dev;
        let Some(mut cx) = self.res.cx(dev) else {
            return;
        };
        f(q, &mut cx);
        self.hand_out(dev);
    }

    /// Gives buffers that came back to the requests waiting for them.
    fn hand_out(&mut self, dev: usize) {
        while let Some((who, buf)) = self.res.grants.pop() {
            let key = wr::queue_of(&who);
            let q = self
                .slots
                .get_mut(key.slot as usize)
                .filter(|s| s.gen == key.gen)
                .and_then(|s| s.queue.as_mut());
            let Some(mut cx) = self.res.cx(dev) else {
                return;
            };
            let back = match q {
                Some(q) => q.grant(&mut cx, &who, buf),
                None => Some(buf),
            };
            if let Some(b) = back {
                if let Some(g) = cx.dev.pool.give(b) {
                    cx.grants.push(g);
                }
            }
        }
    }

    fn queue_keys(&self) -> Vec<QueueKey> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.queue.is_some())
            .map(|(i, s)| QueueKey {
                slot: i as u16,
                gen: s.gen,
            })
            .collect()
    }

    fn key_of(&self, slot: u16) -> QueueKey {
        QueueKey {
            slot,
            gen: self.slots[slot as usize].gen,
        }
    }

    /// The loop. Returns when asked to stop and every queue is gone.
    pub fn run(mut self) {
        // A local, so dropped before `self` (the device memory) if this unwinds.
        let _abort = crate::transport::abort::AbortOnUnwind("worker");
        let m = metrics();
        let busy = m.engine.worker_busy.with_label_values(&[&self.label]);
        let wakeups = m.engine.worker_wakeups.with_label_values(&[&self.label]);
        let mut wcs: [WorkCompletion; 32] = std::array::from_fn(|_| WorkCompletion::default());
        let mut cqes = [(0u64, 0i32); 64];
        let mut mail = Vec::new();
        let mut last_work = Instant::now();
        let mut last_tick = last_work;
        // The start of the last pass that found work: the busy time runs from
        // there to the start of the next pass (one clock read per pass).
        let mut busy_since: Option<Instant> = None;
        let mut woke = false;
        // When the target last started an I/O (seen by this worker).
        let (mut io_seen, mut last_io) = (0i64, last_work);
        // The hosts' turn-around under light load, and since when the target
        // has had nothing in flight (while I/O flowed).
        let mut pace = Pace::default();
        let mut answered_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            self.res.now = now;
            let target = &self.res.engine.target;
            let io_started = target.io_started.sum(Ordering::Relaxed);
            if io_started != io_seen {
                (io_seen, last_io) = (io_started, now);
                if let Some(at) = answered_at.take() {
                    let max = self.res.engine.cfg.light_load_spin_us;
                    pace.learn(now.duration_since(at).as_micros() as u64, max);
                }
            }
            if let Some(b) = busy_since.take() {
                busy.inc_by(now.duration_since(b).as_secs_f64());
            }
            if std::mem::take(&mut woke) {
                last_work = now;
            }
            // A worker that did not run for a while (its process stopped,
            // its threads frozen) runs its timers first: an association
            // whose keep-alive expired meanwhile, which its host has given
            // up on and retried elsewhere, ends before its commands that
            // waited in the receive queue could execute.
            if now.duration_since(last_tick) >= STALLED {
                last_tick = now;
                self.tick(now);
            }
            let mut work = 0;
            for d in 0..self.res.devices.len() {
                let Some(dev) = &self.res.devices[d].dev else {
                    continue;
                };
                match dev.cq.poll(&mut wcs) {
                    Ok(n) => {
                        for wc in &wcs[..n] {
                            self.on_wc(d, wc);
                        }
                        work += n;
                    }
                    Err(e) => error!(worker = self.res.shared.index, error = %e, "ibv_poll_cq"),
                }
            }
            let n = self.res.ring.reap(&mut cqes);
            for &(ud, res) in &cqes[..n] {
                self.on_ring(ud, res);
            }
            work += n;
            self.res.shared.mailbox.take(&mut mail);
            work += mail.len();
            for (ud, res) in mail.drain(..) {
                self.on_backend(ud, res);
            }
            work += self.accept_new();
            if std::mem::take(&mut self.armed.cm_ready) {
                work += self.cm_events();
            }
            self.flush_sends();
            if let Err(e) = self.res.ring.submit() {
                error!(worker = self.res.shared.index, error = %e, "io_uring submit");
            }
            if std::mem::take(&mut self.armed.tick_now) || now.duration_since(last_tick) >= TICK {
                last_tick = now;
                self.tick(now);
                if self.res.shared.stop.load(Ordering::Acquire) && self.queue_count() == 0 {
                    return;
                }
            }
            if work > 0 {
                busy_since = Some(now);
                last_work = now;
                continue;
            }
            let target = &self.res.engine.target;
            let in_flight = target.io_in_flight.sum(Ordering::Relaxed).max(0) as usize;
            let io_recent = last_work.duration_since(last_io) < IO_RECENT;
            if in_flight == 0 && io_recent && answered_at.is_none() {
                answered_at = Some(now);
            }
            let spin = Duration::from_micros(spin_window_us(
                target.poll_spin_us.load(Ordering::Relaxed),
                pace.window_us(self.res.engine.cfg.light_load_spin_us),
                in_flight,
                io_recent,
            ));
            if now.duration_since(last_work) < spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep: what was counted goes out first; arm every CQ, look
            // once more, then wait on the ring.
            self.res.tally.publish();
            let mut late = 0;
            for d in 0..self.res.devices.len() {
                // A removed device's queues leave on their timers.
                let Some(dev) = self.res.devices[d].dev.as_ref().filter(|d| !d.removed) else {
                    continue;
                };
                if let Err(e) = dev.cq.req_notify() {
                    error!(worker = self.res.shared.index, error = %e, "ibv_req_notify_cq");
                }
                if let Ok(n) = dev.cq.poll(&mut wcs) {
                    for wc in &wcs[..n] {
                        self.on_wc(d, wc);
                    }
                    late += n;
                }
            }
            if late > 0 {
                self.flush_sends();
                busy_since = Some(now);
                last_work = now;
                continue;
            }
            self.arm_polls();
            if let Err(e) = self.res.ring.wait(IDLE_WAIT) {
                error!(worker = self.res.shared.index, error = %e, "io_uring wait");
                std::thread::sleep(Duration::from_millis(10));
            }
            wakeups.inc();
            woke = true;
        }
    }

    fn arm_polls(&mut self) {
        for (i, s) in self.res.devices.iter_mut().enumerate() {
            let Some(d) = s.dev.as_mut().filter(|d| !d.removed) else {
                continue;
            };
            if !d.cq_poll_armed
                && self
                    .res
                    .ring
                    .poll_in(d.cq.channel().fd(), wr::poll_cq(i as u16, s.gen))
                    .is_ok()
            {
                d.cq_poll_armed = true;
            }
        }
        if !self.armed.cm
            && self
                .res
                .ring
                .poll_in(self.cm.fd(), wr::worker(wr::POLL_CM, 0))
                .is_ok()
        {
            self.armed.cm = true;
        }
        if !self.armed.wake
            && self
                .res
                .ring
                .poll_in(self.res.shared.waker.fd(), wr::worker(wr::POLL_WAKE, 0))
                .is_ok()
        {
            self.armed.wake = true;
        }
    }

    fn flush_sends(&mut self) {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.queue.as_ref().is_some_and(|q| q.has_sends()) {
                let key = QueueKey {
                    slot: i as u16,
                    gen: s.gen,
                };
                self.with_queue(key, |q, cx| q.flush_sends(cx));
            }
        }
    }

    fn on_wc(&mut self, d: usize, wc: &WorkCompletion) {
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
                let q = self.index.by_qp(d, wc.qp_num());
                match (wc.is_ok(), q) {
                    (true, Some(s)) => {
                        let key = self.key_of(s);
                        let len = wc.byte_len();
                        self.with_queue(key, |q, cx| q.on_recv(cx, slot, len));
                    }
                    (ok, _) => {
                        // A receive for a queue pair that is gone, or one
                        // flushed or failed with its queue pair: the device is
                        // done with the buffer, which goes back to the SRQ
                        // (else every queue pair that dies holding a receive
                        // would shrink the SRQ for good).
                        if !ok && !wc.is_flush() {
                            warn!(worker = self.res.shared.index, status = %wc.status_str(), "shared receive failed");
                        }
                        if let Some(area) = self
                            .res
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
                self.with_queue(key, |q, cx| {
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
                self.with_queue(key, |q, cx| {
                    if !ok {
                        q.on_wc_error(cx, flush, &what);
                    }
                    q.on_wc(cx, &id, ok);
                });
            }
            k => debug!(
                worker = self.res.shared.index,
                kind = k,
                "unexpected completion"
            ),
        }
    }

    fn on_ring(&mut self, ud: u64, res: i32) {
        let id = WrId::unpack(ud);
        match id.kind {
            wr::POLL_CQ => {
                if let Some(d) = self
                    .res
                    .devices
                    .get_mut(id.slot as usize)
                    .filter(|s| s.gen == id.conn_gen)
                    .and_then(|s| s.dev.as_mut())
                {
                    d.cq_poll_armed = false;
                    d.cq.drain_events();
                }
            }
            wr::POLL_CM => {
                self.armed.cm = false;
                self.armed.cm_ready = true;
            }
            wr::POLL_WAKE => {
                self.armed.wake = false;
                self.armed.tick_now = true;
                self.res.shared.waker.clear();
            }
            wr::IO => self.on_backend(ud, res),
            _ => {}
        }
    }

    fn on_backend(&mut self, ud: u64, res: i32) {
        let id = WrId::unpack(ud);
        self.with_queue(wr::queue_of(&id), |q, cx| q.on_backend(cx, &id, res));
    }

    /// Takes new connections from the listener: sets up the device (first
    /// time), the queue pair, and accepts. Returns how many were handled.
    fn accept_new(&mut self) -> usize {
        if !self.res.shared.inbox_pending.swap(false, Ordering::AcqRel) {
            return 0;
        }
        let new: Vec<NewConn> = std::mem::take(
            &mut *self
                .res
                .shared
                .inbox
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let n = new.len();
        for mut c in new {
            let target = &self.res.engine.target;
            if self.res.shared.stop.load(Ordering::Acquire)
                || target.stopping.load(Ordering::Acquire)
            {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            }
            if let Err(e) = c.id.migrate(&self.cm) {
                error!(error = %e, "rdma_migrate_id");
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            }
            let Some(ctx) = c.id.context() else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            let key = ctx.as_ptr() as usize;
            let found = self
                .res
                .devices
                .iter()
                .position(|s| s.dev.as_ref().is_some_and(|d| d.key == key && !d.removed));
            let dev = match found {
                Some(d) => d,
                None => {
                    // A free slot (a removed device's) or a new one.
                    let idx = self
                        .res
                        .devices
                        .iter()
                        .position(|s| s.dev.is_none())
                        .unwrap_or(self.res.devices.len());
                    let gen = self
                        .res
                        .devices
                        .get(idx)
                        .map_or(0, |s| s.gen.wrapping_add(1));
                    let made = self
                        .res
                        .engine
                        .pd_for(&ctx)
                        .map_err(|e| e.to_string())
                        .and_then(|pd| {
                            WorkerDevice::new(
                                &ctx,
                                pd,
                                &self.res.engine.cfg,
                                &self.res.engine.budget,
                                &mut self.res.ring,
                                idx,
                                gen,
                            )
                            .map_err(|e| e.to_string())
                        });
                    match made {
                        Ok(d) => {
                            // The poster's thread starts with the first device
                            // that offloads, not mid-run at the first large read.
                            if d.offload_sends {
                                if let Some(p) = self.res.engine.poster(self.res.shared.index) {
                                    p.start();
                                }
                            }
                            let s = DevSlot { gen, dev: Some(d) };
                            if idx == self.res.devices.len() {
                                self.res.devices.push(s);
                            } else {
                                self.res.devices[idx] = s;
                            }
                            idx
                        }
                        Err(e) => {
                            error!(
                                worker = self.res.shared.index,
                                "cannot serve the RDMA device: {e}"
                            );
                            super::reject(&c.id, RejectStatus::NoResources);
                            continue;
                        }
                    }
                }
            };
            let Some(wd) = self.res.devices.get_mut(dev).and_then(|s| s.dev.as_mut()) else {
                super::reject(&c.id, RejectStatus::NoResources);
                continue;
            };
            let slot = match self.free_slots.pop() {
                Some(s) => s,
                None if self.slots.len() < u16::MAX as usize => {
                    self.slots.push(Slot {
                        gen: 0,
                        queue: None,
                    });
                    (self.slots.len() - 1) as u16
                }
                None => {
                    super::reject(&c.id, RejectStatus::NoResources);
                    continue;
                }
            };
            let s = &mut self.slots[slot as usize];
            s.gen = s.gen.wrapping_add(1);
            let qkey = QueueKey { slot, gen: s.gen };
            let qid = c.params.qid;
            let link = QueueLink::new(qid, self.res.shared.waker.clone());
            match Queue::accept(c, qkey, dev, wd, &self.res.engine.budget, link) {
                Ok(q) => {
                    target.live_queues.fetch_add(1, Ordering::AcqRel);
                    metrics()
                        .engine
                        .worker_queues
                        .with_label_values(&[&self.label])
                        .inc();
                    self.index.insert(q.dev, q.qp_num, q.cm_key, slot);
                    self.queues += 1;
                    self.slots[slot as usize].queue = Some(q);
                }
                Err((id, why)) => {
                    warn!(worker = self.res.shared.index, qid, peer = ?id.peer_addr(), "queue refused: {why}");
                    super::reject(&id, RejectStatus::NoResources);
                    self.free_slots.push(slot);
                }
            }
        }
        n
    }

    /// Handles the CM events of this worker's queues. Returns how many.
    fn cm_events(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.cm.get_event() {
                Ok(Some(ev)) => {
                    n += 1;
                    if let Some(slot) = self.index.by_cm(ev.id_key) {
                        let key = self.key_of(slot);
                        if ev.kind == CmEventKind::DeviceRemoval {
                            self.device_removed(slot);
                        }
                        self.with_queue(key, |q, cx| q.on_cm_event(cx, ev.kind));
                    }
                }
                Ok(None) => return n,
                Err(e) => {
                    error!(worker = self.res.shared.index, error = %e, "rdma_get_cm_event");
                    return n;
                }
            }
        }
    }

    /// Timers: heartbeat, queue timers, stop requests, and removal of queues
    /// that are gone.
    fn tick(&mut self, now: Instant) {
        self.res.shared.waker.beat();
        self.res.tally.publish();
        // CM events are also read here: while the worker is busy polling, the
        // channel's poll is not armed.
        self.cm_events();
        let stop = self.res.shared.stop.load(Ordering::Acquire);
        // Devices another thread saw removed.
        for s in &mut self.res.devices {
            if let Some(d) = s.dev.as_mut().filter(|d| !d.removed) {
                d.removed = self.res.engine.is_removed(&d.pd);
            }
        }
        for key in self.queue_keys() {
            let mut gone = false;
            self.with_queue(key, |q, cx| {
                if stop {
                    q.disconnect(cx, "target stopping", "shutdown");
                }
                if cx.dev.removed {
                    q.disconnect(cx, "RDMA device removed", "device_removed");
                }
                q.periodic(cx);
                gone = q.finished(cx, now);
            });
            if gone {
                self.remove(key.slot);
            }
        }
        // What the timers queued (AER answers, liveness probes) goes now, not
        // after the next wake-up.
        self.flush_sends();
        self.retire_removed();
    }

    /// A queue's device is being removed (its RDMA-CM id said so).
    fn device_removed(&mut self, slot: u16) {
        let Some(dev) = self.slots[slot as usize].queue.as_ref().map(|q| q.dev) else {
            return;
        };
        if let Some(d) = self.res.devices.get_mut(dev).and_then(|s| s.dev.as_mut()) {
            d.removed = true;
            self.res.engine.device_removed(d.key);
        }
    }

    /// Lets go of removed devices no queue uses any more, so that librdmacm
    /// can close them (the kernel's removal of the device waits for that).
    fn retire_removed(&mut self) {
        let mut retired = false;
        for i in 0..self.res.devices.len() {
            // Only a removed device's queues are looked for (each tick).
            let removed = self.res.devices[i].dev.as_ref().is_some_and(|d| d.removed);
            if removed
                && !self
                    .slots
                    .iter()
                    .any(|s| s.queue.as_ref().is_some_and(|q| q.dev == i))
            {
                if let Some(d) = self.res.devices[i].dev.take() {
                    d.retire(&mut self.res.ring, i as u16);
                    retired = true;
                }
            }
        }
        if retired {
            if let Err(e) = self.res.ring.submit() {
                error!(worker = self.res.shared.index, error = %e, "io_uring submit");
            }
            rdma::sync_devices();
        }
    }

    fn remove(&mut self, slot: u16) {
        let Some(mut q) = self.slots[slot as usize].queue.take() else {
            return;
        };
        let target = self.res.engine.target.clone();
        q.teardown(&target);
        self.index.remove(q.dev, q.qp_num, q.cm_key, slot);
        self.queues -= 1;
        if let Some(d) = self.res.devices.get_mut(q.dev).and_then(|s| s.dev.as_mut()) {
            d.cq_room += q.cq_share;
            d.srq_committed = d.srq_committed.saturating_sub(q.srq_share());
        }
        drop(q);
        self.free_slots.push(slot);
        target.live_queues.fetch_sub(1, Ordering::AcqRel);
        metrics()
            .engine
            .worker_queues
            .with_label_values(&[&self.label])
            .dec();
    }
}
