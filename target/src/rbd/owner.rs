//! Which gateway writes an RBD image: one at a time, and never one that was
//! cut off after another took over (docs/fencing.md).
//!
//! The owner is named in a RADOS object of the image's pool,
//! `nvmf_owner.<image id>`, by the address the OSDs know its cluster
//! connection by. A gateway writes the image only while it owns it (its
//! namespace's [`WriteGate`] is open). A write that reaches a gateway that
//! does not own the image parks and asks for ownership; the keeper thread
//! then reads the record and
//! - takes it when nobody owns it or its owner released it;
//! - otherwise asks the owner (a notification on the object) to hand over:
//!   the owner stops writing, waits until each of its writes completed in
//!   the cluster, and marks the record released;
//! - and if the owner has not released it within [`HANDOVER`] (stopped,
//!   hung, cut off from the cluster), adds the owner's address to the OSD
//!   blocklist and waits for the OSD map that holds it before taking the
//!   record: from then on no write of the old owner can land, not even
//!   one already on its way.
//!
//! Every step that changes the record is a compare-and-swap on the object's
//! version, so two gateways racing for it cannot both win.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Conn;
use crate::gateway::ownership::{decide, Attempt, Me, Read, Record, Step, HANDOVER};
use crate::request::write_gate::WriteGate;

/// How long a request to hand over waits for the watchers' acknowledgements.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a new owner keeps the image at least, so that the writes that
/// waited for it get in before it hands it over again.
const MIN_HOLD: Duration = Duration::from_millis(30);
/// How long the OSD keeps the watch of a gateway it does not hear from.
const WATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a hand-over waits for the owner's writes in flight.
const DRAIN: Duration = Duration::from_secs(60);
/// How often the keeper looks at its watch without being woken.
const TICK: Duration = Duration::from_millis(500);
/// A keeper loop that took longer than this was stopped or starved.
const STALL: Duration = Duration::from_secs(3);
/// How often a gateway waiting for the image reads the record.
const POLL: Duration = Duration::from_millis(20);
/// How long the keeper waits after a failed cluster operation.
const RETRY: Duration = Duration::from_millis(200);
/// The largest record read.
const MAX_RECORD: usize = 4096;
/// EBLOCKLISTED (ESHUTDOWN on Linux): the OSDs refuse this connection.
const EBLOCKLISTED: i32 = 108;

/// What a gateway that wants the image sends the watchers.
#[derive(Serialize, Deserialize)]
struct Request {
    /// Its address.
    want: String,
    /// Its ownership's id.
    #[serde(default)]
    id: u64,
}

/// What this gateway is to the image, for `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It writes the image.
    Owner,
    /// Another gateway (or none) does; writes here ask for the image.
    Standby,
    /// Another gateway fenced this one: its connection is blocklisted.
    Fenced,
}

impl Role {
    /// The word `status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Standby => "standby",
            Role::Fenced => "fenced",
        }
    }
}

/// Counts of what happened, for `status`.
#[derive(Debug, Default)]
pub struct Counts {
    /// Ownership taken (from nobody, or handed over).
    pub acquired: AtomicU64,
    /// Ownership handed over to another gateway.
    pub released: AtomicU64,
    /// Ownership taken from a gateway that did not hand over, fenced first.
    pub fenced_peer: AtomicU64,
}

#[derive(Default)]
struct Wants {
    acquire: bool,
    release: bool,
    stop: bool,
}

struct Shared {
    object: Arc<ceph::Object>,
    conn: Arc<Conn>,
    gate: Arc<WriteGate>,
    /// This gateway's record, unreleased.
    mine: Record,
    /// `pool/image`, for logs and metrics.
    image: String,
    wants: Mutex<Wants>,
    wake: Condvar,
    /// The gateway the record named when last read.
    holder: Mutex<String>,
    /// The last gateway that asked for the image (its address).
    asker: Mutex<Option<String>>,
    counts: Counts,
    /// The watch broke: requests to hand over may go unheard.
    broken: AtomicBool,
    /// The keeper thread ended.
    ended: AtomicBool,
    /// When this gateway last took the image.
    granted: Mutex<Instant>,
    /// The record names this ownership, not released: a request to hand
    /// over is for it (even while its gate is closed).
    holding: AtomicBool,
}

/// The ownership of one image by this gateway; its keeper thread stops,
/// handing the image over if it owns it, when this is dropped.
pub struct Ownership {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership")
            .field("image", &self.shared.image)
            .field("role", &self.role())
            .finish()
    }
}

/// This gateway's name for people: `host:pid`.
pub(super) fn gateway_name() -> String {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into());
    format!("{host}:{}", std::process::id())
}

fn metric(image: &str, event: &str) {
    crate::telemetry::metrics::metrics()
        .fencing
        .with_label_values(&[image, event])
        .inc();
}

impl Ownership {
    /// Makes `gate` need ownership of the image of `pool` with id
    /// `image_id` (`spec`: `pool/image`) and starts the keeper thread.
    pub fn start(
        conn: &Arc<Conn>,
        pool: &str,
        image_id: &str,
        spec: &str,
        gate: &Arc<WriteGate>,
    ) -> Result<Ownership, ceph::Error> {
        let object = ceph::Object::open(&conn.cluster, pool, &format!("nvmf_owner.{image_id}"))?;
        let shared = Arc::new(Shared {
            object,
            conn: conn.clone(),
            gate: gate.clone(),
            mine: Record {
                owner: conn.addr.clone(),
                id: std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    spec,
                ),
                gateway: gateway_name(),
                released: false,
                to: None,
            },
            image: spec.into(),
            wants: Mutex::default(),
            wake: Condvar::new(),
            holder: Mutex::default(),
            asker: Mutex::default(),
            counts: Counts::default(),
            broken: AtomicBool::new(true),
            ended: AtomicBool::new(false),
            granted: Mutex::new(Instant::now()),
            holding: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        gate.owned_by(move || {
            if let Some(s) = weak.upgrade() {
                s.want(|w| w.acquire = true);
            }
        });
        let keeper = shared.clone();
        std::thread::Builder::new()
            .name("rbd-owner".into())
            .spawn(move || {
                keeper.clone().run();
                keeper.ended.store(true, Ordering::Release);
            })
            .map_err(|e| ceph::Error::Library(format!("starting the ownership thread: {e}")))?;
        Ok(Ownership { shared })
    }

    /// What this gateway is to the image now.
    pub fn role(&self) -> Role {
        if self.shared.conn.fenced() {
            Role::Fenced
        } else if self.shared.gate.owned() {
            Role::Owner
        } else {
            Role::Standby
        }
    }

    /// The gateway the record named when last read (`host:pid`).
    pub fn holder(&self) -> String {
        lock(&self.shared.holder).clone()
    }

    /// What happened so far.
    pub fn counts(&self) -> &Counts {
        &self.shared.counts
    }

    /// Whether the record names this gateway the owner (until a hand-over
    /// has written it released, even once its writes stopped).
    pub fn holds(&self) -> bool {
        self.shared.holding.load(Ordering::Acquire)
    }

    /// Hands the image over if this gateway owns it (a drain): no new
    /// writes, every write in flight completed, the record marked
    /// released, so that the next writer takes it without fencing.
    /// Returns at once; a write that arrives later asks for it again.
    pub fn hand_over(&self) {
        self.shared.want(|w| w.release = true);
    }

    /// Stops the keeper, which hands the image over if this gateway owns
    /// it (at shutdown, once no write is in flight), and waits for it at
    /// most `timeout`: the next owner need not fence this one.
    pub fn stop(&self, timeout: Duration) {
        self.shared.want(|w| w.stop = true);
        let until = Instant::now() + timeout;
        while !self.shared.ended.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.shared.want(|w| w.stop = true);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn want(&self, f: impl FnOnce(&mut Wants)) {
        f(&mut lock(&self.wants));
        self.wake.notify_all();
    }

    fn run(self: Arc<Self>) {
        let mut watch: Option<ceph::Watch> = None;
        let mut last = Instant::now();
        loop {
            // A keeper that did not run for a while (this process was
            // stopped, or starved) may have been fenced meanwhile; so may
            // one whose watch broke. The monitors know.
            let stalled = last.elapsed() > STALL;
            last = Instant::now();
            self.conn
                .probe(stalled || self.broken.load(Ordering::Acquire));
            let wants = {
                let mut w = lock(&self.wants);
                if !(w.acquire || w.release || w.stop) {
                    w = self
                        .wake
                        .wait_timeout(w, TICK)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                std::mem::take(&mut *w)
            };
            if self.conn.fenced() {
                // Writes go to the cluster and fail there (the blocklist is
                // the fence): the host hears a path error at once and uses
                // another gateway while this one reconnects.
                self.gate.grant();
                if wants.stop {
                    return;
                }
                continue;
            }
            if wants.stop {
                self.release();
                return;
            }
            if watch.is_none() || self.broken.load(Ordering::Acquire) {
                drop(watch.take());
                watch = self.watch();
            }
            if wants.release {
                self.release();
            }
            if wants.acquire && !self.gate.owned() && !self.acquire() {
                // Not yet (the cluster did not answer): the parked writes
                // still wait, so try again.
                std::thread::sleep(RETRY);
                self.want(|w| w.acquire = true);
            }
        }
    }

    /// Watches the object for requests to hand over (it must exist first).
    fn watch(self: &Arc<Self>) -> Option<ceph::Watch> {
        if let Err(e) = self.object.write(b"", None) {
            if !matches!(e, ceph::WriteError::Changed) {
                self.failed("creating the ownership record", &e.to_string(), None);
                return None;
            }
        }
        let me = (self.mine.owner.clone(), self.mine.id);
        let (on_req, on_err) = (Arc::downgrade(self), Arc::downgrade(self));
        self.broken.store(false, Ordering::Release);
        let w = self.object.watch(
            WATCH_TIMEOUT,
            move |payload| {
                // Acknowledged whatever it says: the asker waits for a
                // release, not for the acknowledgement.
                let Some(s) = on_req.upgrade() else {
                    return true;
                };
                if let Ok(r) = serde_json::from_slice::<Request>(payload) {
                    if (r.want.as_str(), r.id) != (me.0.as_str(), me.1)
                        && s.holding.load(Ordering::Acquire)
                    {
                        *lock(&s.asker) = Some(r.want);
                        s.want(|w| w.release = true);
                    }
                }
                true
            },
            move |_err| {
                let Some(s): Option<Arc<Shared>> = Weak::upgrade(&on_err) else {
                    return;
                };
                s.broken.store(true, Ordering::Release);
                s.conn.suspect();
                s.wake.notify_all();
            },
        );
        match w {
            Ok(w) => Some(w),
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                self.failed("watching the ownership record", &e.to_string(), e.errno());
                None
            }
        }
    }

    fn failed(&self, what: &str, e: &str, errno: Option<i32>) {
        if errno == Some(EBLOCKLISTED) {
            // The monitors confirm it (a client shutting down says the same).
            self.conn.suspect();
        }
        tracing::debug!(image = %self.image, "{what}: {e}");
    }

    fn read(&self) -> Option<Read> {
        match self.object.read(MAX_RECORD) {
            Ok(None) => Some(Read::Free(None)),
            Ok(Some((body, v))) if body.is_empty() => Some(Read::Free(Some(v))),
            Ok(Some((body, v))) => match serde_json::from_slice::<Record>(&body) {
                Ok(r) => {
                    *lock(&self.holder) = r.gateway.clone();
                    Some(Read::Found(r, v))
                }
                Err(_) => {
                    tracing::warn!(image = %self.image, "the ownership record holds something this target did not write: taking it over");
                    Some(Read::Found(
                        Record {
                            owner: String::new(),
                            id: 0,
                            gateway: "?".into(),
                            released: true,
                            to: None,
                        },
                        v,
                    ))
                }
            },
            Err(e) => {
                self.failed("reading the ownership record", &e.to_string(), e.errno());
                None
            }
        }
    }

    /// Replaces the record at `version` (None: creates it). Some(true):
    /// written; Some(false): it changed meanwhile; None: failed.
    fn write(&self, r: &Record, version: Option<u64>) -> Option<bool> {
        let body = serde_json::to_vec(r).ok()?;
        match self.object.write(&body, version) {
            Ok(_) => {
                *lock(&self.holder) = r.gateway.clone();
                Some(true)
            }
            Err(ceph::WriteError::Changed) => Some(false),
            Err(ceph::WriteError::Failed(e)) => {
                self.failed("writing the ownership record", &e.to_string(), e.errno());
                None
            }
        }
    }

    /// Takes the image (blocking): true once owned, false if the cluster
    /// did not answer.
    fn acquire(&self) -> bool {
        let mut attempt = Attempt::default();
        loop {
            if self.conn.fenced() || lock(&self.wants).stop {
                return false;
            }
            let Some(seen) = self.read() else {
                return false;
            };
            let prev = match &seen {
                Read::Found(r, _) => Some(r.clone()),
                Read::Free(_) => None,
            };
            let me = Me {
                addr: &self.mine.owner,
                id: self.mine.id,
            };
            let written = match decide(me, &seen, Instant::now(), &mut attempt) {
                Step::Take(v) => self.write(&self.mine, v),
                Step::Wait => {
                    std::thread::sleep(POLL);
                    continue;
                }
                Step::Ask => {
                    let req = serde_json::to_vec(&Request {
                        want: self.mine.owner.clone(),
                        id: self.mine.id,
                    })
                    .unwrap_or_default();
                    // Acknowledged or not, the owner gets HANDOVER.
                    let _ = self.object.notify(&req, NOTIFY_TIMEOUT);
                    continue;
                }
                Step::Fence(v) => {
                    let Some(r) = &prev else { continue };
                    tracing::warn!(image = %self.image, owner = %r.gateway, address = %r.owner,
                                   "the owner did not hand the image over within {} s: fencing it (OSD blocklist) before taking over", HANDOVER.as_secs());
                    if let Err(e) = self.conn.cluster.blocklist(&r.owner, 0) {
                        tracing::warn!(image = %self.image, "blocklisting {}: {e}", r.owner);
                        self.failed("blocklisting the owner", &e.to_string(), e.errno());
                        return false;
                    }
                    self.counts.fenced_peer.fetch_add(1, Ordering::Relaxed);
                    metric(&self.image, "fenced_peer");
                    let w = self.write(&self.mine, Some(v));
                    if w == Some(true) {
                        tracing::warn!(image = %self.image, fenced = %r.gateway, address = %r.owner,
                                       "took the image over from a fenced gateway: none of its writes can land any more");
                    }
                    w
                }
            };
            match written {
                None => return false,
                Some(false) => continue,
                Some(true) => {
                    *lock(&self.granted) = Instant::now();
                    self.holding.store(true, Ordering::Release);
                    self.gate.grant();
                    self.counts.acquired.fetch_add(1, Ordering::Relaxed);
                    metric(&self.image, "acquired");
                    match prev {
                        Some(p)
                            if (p.owner.as_str(), p.id)
                                != (self.mine.owner.as_str(), self.mine.id) =>
                        {
                            tracing::info!(image = %self.image, from = %p.gateway, "this gateway owns the image now")
                        }
                        _ => tracing::info!(image = %self.image, "this gateway owns the image now"),
                    }
                    return true;
                }
            }
        }
    }

    /// Hands the image over: no new writes, every write in flight done in
    /// the cluster, then the record marked released.
    fn release(&self) {
        if !self.holding.load(Ordering::Acquire) {
            return;
        }
        if self.gate.uncertain() {
            tracing::warn!(image = %self.image, "not handing the image over: a write timed out in the cluster and may still land; the gateway that asked fences this one");
            return;
        }
        let held = lock(&self.granted).elapsed();
        if held < MIN_HOLD {
            std::thread::sleep(MIN_HOLD - held);
        }
        if !self.gate.revoke(DRAIN) {
            tracing::warn!(image = %self.image, "writes still in flight after {} s: not handing the image over (the gateway that asked fences this one)", DRAIN.as_secs());
            return;
        }
        if self.gate.uncertain() {
            return;
        }
        for _ in 0..3 {
            match self.read() {
                Some(Read::Found(r, v))
                    if r.owner == self.mine.owner && r.id == self.mine.id && !r.released =>
                {
                    let done = Record {
                        released: true,
                        to: lock(&self.asker).take(),
                        ..self.mine.clone()
                    };
                    match self.write(&done, Some(v)) {
                        Some(true) => {
                            self.holding.store(false, Ordering::Release);
                            self.counts.released.fetch_add(1, Ordering::Relaxed);
                            metric(&self.image, "released");
                            tracing::info!(image = %self.image, "handed the image over (every write of this gateway completed)");
                            return;
                        }
                        Some(false) => continue,
                        None => return,
                    }
                }
                // Not ours any more (taken from this gateway by fencing).
                Some(Read::Found(..)) | Some(Read::Free(_)) => {
                    self.holding.store(false, Ordering::Release);
                    return;
                }
                None => return,
            }
        }
    }
}
