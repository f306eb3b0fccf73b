//! The reservation state of an RBD namespace, kept in the Ceph cluster so
//! that every gateway of the image enforces the same one.
//!
//! The state is a RADOS object of the image's pool, `nvmf_resv.<image id>`,
//! whose version orders the changes. A gateway changes it by reading the
//! object, applying the command and writing the result only if the version
//! did not move (else it reads and applies again); then it notifies the
//! object's watchers with the new state and waits for their
//! acknowledgements. Every gateway watches the object and installs a newer
//! state when notified, before it acknowledges.
//!
//! A gateway serves the namespace only while it is sure its copy is
//! current: its watch was confirmed by the OSD less than [`LEASE`] ago. A
//! gateway cut off from the OSD stops serving within [`LEASE`], well before
//! a changer's notification to it times out ([`NOTIFY_TIMEOUT`]): a change
//! acknowledged to a host is enforced by every gateway still serving.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::reservation::shared::{SharedState, Sink, Versioned};
use crate::reservation::state::{HostId, Notice, NqnTag, Reservations};

/// How long after its watch was last confirmed a gateway still trusts its
/// copy. librados confirms a watch every `objecter_tick_interval` (the
/// target sets it to 1 s on its cluster connections).
pub const LEASE: Duration = Duration::from_secs(4);
/// How long a change waits for the other gateways' acknowledgements.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the OSD keeps the watch of a gateway it does not hear from.
const WATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the keeper checks the watch.
const TICK: Duration = Duration::from_millis(250);
/// The largest state object (128 registrants take about 12 KiB).
const MAX_OBJECT: usize = 256 * 1024;

/// Errors of the cluster store.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A librados call failed.
    #[error(transparent)]
    Ceph(#[from] ceph::Error),
    /// The object holds no state this target wrote.
    #[error("{object}: not a reservation state ({reason})")]
    Invalid {
        /// `pool/object`.
        object: String,
        /// Why.
        reason: String,
    },
}

/// What a gateway sends the others after a change.
#[derive(Serialize, Deserialize)]
struct Notification {
    /// The gateway that made the change.
    from: u64,
    version: u64,
    state: Reservations,
    /// Notices for the hosts the change affected.
    notices: Vec<Notice>,
    /// Hosts a Preempt and Abort preempted: a gateway drains its writes in
    /// flight before it acknowledges (absent from older gateways' changes).
    #[serde(default)]
    aborted: Vec<HostId>,
    /// The host NQN tag each notice's host registered under: the notice
    /// reaches only controllers of it (absent from older gateways').
    #[serde(default)]
    bindings: Vec<(HostId, NqnTag)>,
}

/// Forged notifications (a version the object does not hold) are logged at
/// most this often.
static FORGED_LOG: crate::base::log_limit::Repeats =
    crate::base::log_limit::Repeats::new(Duration::from_secs(60));

/// Takes a notification of a change another gateway made: a hint that the
/// object changed, never a state to install as sent (anyone who may notify
/// on the object could send one). The state and its version are read from
/// the object (`read`) and installed; the notices are delivered only for a
/// version the object has reached and no notification delivered before
/// (`noticed`). Returns whether the object's state is installed: only then
/// is it acknowledged, so a changer whose notification a gateway could not
/// take learns that not every gateway has the new state.
fn take_notification(
    sink: &dyn Sink,
    me: u64,
    payload: &[u8],
    noticed: &AtomicU64,
    read: impl FnOnce() -> Result<Versioned, ClusterError>,
) -> bool {
    let n = match serde_json::from_slice::<Notification>(payload) {
        Ok(n) => n,
        Err(_) => {
            tracing::warn!(
                "a reservation notification this target cannot read: not acknowledged (its sender's change does not complete)"
            );
            return false;
        }
    };
    if n.from == me {
        // This gateway's own change: installed before it was published.
        return true;
    }
    let current = match read() {
        Ok(c) if c.state.valid() => c,
        Ok(_) => {
            tracing::warn!("a reservation notification: the object holds an inconsistent state; not acknowledged");
            return false;
        }
        Err(e) => {
            tracing::warn!("a reservation notification: reading the object: {e}; not acknowledged");
            return false;
        }
    };
    let version = current.version;
    let forged = n.version > version;
    // The changer drained its own writes before it published.
    let installed = if n.aborted.is_empty() || forged {
        sink.install(current.state, version);
        true
    } else {
        sink.install_draining(current.state, version)
    };
    if forged {
        if let Some(left_out) = FORGED_LOG.admit(Instant::now()) {
            tracing::warn!(
                claimed = n.version,
                version,
                left_out,
                "a reservation notification for a version the object does not hold: ignored (installed the object's state)"
            );
        }
        return installed;
    }
    if noticed.fetch_max(n.version, Ordering::AcqRel) < n.version {
        sink.notices(&n.notices, &n.bindings);
    }
    installed
}

/// The state `object` holds and its version (empty, version 0, when there
/// is no object yet). Blocks.
fn read_object(object: &ceph::Object) -> Result<Versioned, ClusterError> {
    let Some((body, version)) = object.read(MAX_OBJECT)? else {
        return Ok(Versioned::default());
    };
    let state =
        crate::reservation::persist::decode(&body).map_err(|reason| ClusterError::Invalid {
            object: object.spec(),
            reason,
        })?;
    Ok(Versioned { state, version })
}

fn now_ns() -> u64 {
    crate::base::clock::start().elapsed().as_nanos() as u64
}

/// The store of one namespace: the object, its watch and the lease.
#[derive(Debug)]
pub struct ClusterStore {
    object: Arc<ceph::Object>,
    /// This gateway's id in notifications (its own are not notices for it).
    me: u64,
    /// The watch broke: notifications may have been missed.
    broken: Arc<AtomicBool>,
    /// Until when (ns since [`epoch`]) the copy is known current.
    sure_until: AtomicU64,
    /// Changes whose notification some gateway did not acknowledge.
    pub unacknowledged: AtomicU64,
    /// The newest version whose notices were delivered.
    noticed: Arc<AtomicU64>,
}

impl ClusterStore {
    /// The store of the image with id `image_id` in `pool`.
    pub fn open(
        cluster: &Arc<ceph::Cluster>,
        pool: &str,
        image_id: &str,
    ) -> Result<ClusterStore, ClusterError> {
        let object = ceph::Object::open(cluster, pool, &format!("nvmf_resv.{image_id}"))?;
        // Random per open (RandomState draws its keys from the OS).
        let me = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            image_id,
        );
        Ok(ClusterStore {
            object,
            me,
            broken: Arc::new(AtomicBool::new(true)),
            sure_until: AtomicU64::new(0),
            unacknowledged: AtomicU64::new(0),
            noticed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// `pool/object`.
    pub fn spec(&self) -> String {
        self.object.spec()
    }

    /// Whether the copy is known current: the namespace may be served.
    pub fn sure(&self) -> bool {
        now_ns() < self.sure_until.load(Ordering::Acquire)
    }

    /// The state in the cluster and its version (empty, version 0, when
    /// there is no object yet). Blocks.
    pub fn read(&self) -> Result<Versioned, ClusterError> {
        read_object(&self.object)
    }

    /// Writes `state` if the object is still at `version` (0: absent).
    /// `Ok(None)`: it moved, read and apply again. Blocks.
    pub fn write(&self, state: &Reservations, version: u64) -> Result<Option<u64>, ClusterError> {
        let body = crate::reservation::persist::encode(state);
        match self.object.write(&body, (version != 0).then_some(version)) {
            Ok(v) => Ok(Some(v)),
            Err(ceph::WriteError::Changed) => Ok(None),
            Err(ceph::WriteError::Failed(e)) => Err(e.into()),
        }
    }

    /// Tells every gateway of the image (this one included) the new state
    /// and waits for them. Whether every watcher acknowledged: one that did
    /// not has lost its lease by now, or will have before it serves again.
    pub fn publish(
        &self,
        state: &Reservations,
        version: u64,
        notices: &[Notice],
        bindings: &[(HostId, NqnTag)],
        aborted: &[HostId],
    ) -> bool {
        let n = Notification {
            from: self.me,
            version,
            state: state.clone(),
            notices: notices.to_vec(),
            aborted: aborted.to_vec(),
            bindings: bindings.to_vec(),
        };
        let Ok(body) = serde_json::to_vec(&n) else {
            return false;
        };
        match self.object.notify(&body, NOTIFY_TIMEOUT) {
            Ok(()) => true,
            Err(e) => {
                self.unacknowledged.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(object = %self.spec(), version, "a reservation change was not acknowledged by every gateway ({e}); those that missed it stopped serving the namespace");
                false
            }
        }
    }

    /// Watches the object and installs what it holds in `sink` (blocking),
    /// then keeps the copy current: a thread renews the lease while the
    /// watch is confirmed and watches again when it broke; it ends when
    /// `sink` or the store is dropped. The thread owns the watch: removing
    /// it waits for its callbacks, which must not happen in one of them.
    pub fn start(self: &Arc<Self>, sink: &Arc<dyn Sink>) -> Result<(), ClusterError> {
        let mut watch = Some(self.rewatch(sink)?);
        self.sure_until
            .store(now_ns() + LEASE.as_nanos() as u64, Ordering::Release);
        let (store, sink) = (Arc::downgrade(self), Arc::downgrade(sink));
        std::thread::Builder::new()
            .name("resv-keeper".into())
            .spawn(move || loop {
                let (Some(store), Some(sink)) = (store.upgrade(), sink.upgrade()) else {
                    return;
                };
                store.tick(&sink, &mut watch);
                drop((store, sink));
                std::thread::sleep(TICK);
            })
            .map_err(|e| ClusterError::Invalid {
                object: self.spec(),
                reason: format!("starting its keeper thread: {e}"),
            })?;
        Ok(())
    }

    /// Watches the object and reads it (in that order: nothing changed
    /// between the two goes unseen).
    fn rewatch(&self, sink: &Arc<dyn Sink>) -> Result<ceph::Watch, ClusterError> {
        // Only an existing object can be watched: the first gateway creates
        // it empty (an exclusive create: an existing one stands).
        self.write(&Reservations::default(), 0)?;
        self.broken.store(false, Ordering::Release);
        let (on_notify, on_error) = (Arc::downgrade(sink), self.broken.clone());
        let (me, noticed, object) = (self.me, self.noticed.clone(), Arc::downgrade(&self.object));
        let w = self.object.watch(
            WATCH_TIMEOUT,
            move |payload| match (on_notify.upgrade(), object.upgrade()) {
                // Reading in the callback is safe: librados completes the
                // read on its messenger threads, not this one.
                (Some(sink), Some(object)) => {
                    take_notification(&*sink, me, payload, &noticed, || read_object(&object))
                }
                _ => false,
            },
            move |err| {
                on_error.store(true, Ordering::Release);
                tracing::warn!(errno = -err, "the watch of a reservation object broke");
            },
        )?;
        let c = self.read()?;
        sink.install(c.state, c.version);
        Ok(w)
    }

    fn tick(&self, sink: &Arc<dyn Sink>, watch: &mut Option<ceph::Watch>) {
        let age = match (&*watch, self.broken.load(Ordering::Acquire)) {
            (Some(w), false) => w.check().ok(),
            _ => None,
        };
        let now = now_ns();
        match age {
            // Confirmed lately, and the copy was current until now: renew.
            Some(age) if age < LEASE && self.sure() => {
                let until = now.saturating_sub(age.as_nanos() as u64) + LEASE.as_nanos() as u64;
                self.sure_until.store(until, Ordering::Release);
            }
            // Confirmed, but the lease lapsed meanwhile (this process was
            // stopped, or the OSD was slow): read before serving again.
            Some(age) if age < LEASE => match self.read() {
                Ok(c) => {
                    sink.install(c.state, c.version);
                    let until = now.saturating_sub(age.as_nanos() as u64) + LEASE.as_nanos() as u64;
                    self.sure_until.store(until, Ordering::Release);
                    tracing::info!(object = %self.spec(), "reservation state current again");
                }
                Err(e) => {
                    tracing::debug!(object = %self.spec(), "reading the reservation state: {e}")
                }
            },
            _ => {
                let was = self.sure();
                self.sure_until.store(0, Ordering::Release);
                if was {
                    tracing::warn!(object = %self.spec(), "lost the watch of the reservation state: the namespace answers Namespace Not Ready until it is back");
                }
                // The broken watch goes first (waiting for its callbacks).
                *watch = None;
                match self.rewatch(sink) {
                    Ok(w) => {
                        *watch = Some(w);
                        self.sure_until
                            .store(now_ns() + LEASE.as_nanos() as u64, Ordering::Release);
                    }
                    Err(e) => {
                        tracing::debug!(object = %self.spec(), "watching the reservation state: {e}")
                    }
                }
            }
        }
    }
}

impl SharedState for ClusterStore {
    fn spec(&self) -> String {
        ClusterStore::spec(self)
    }

    fn sure(&self) -> bool {
        ClusterStore::sure(self)
    }

    fn read(&self) -> Result<Versioned, String> {
        ClusterStore::read(self).map_err(|e| e.to_string())
    }

    fn write(&self, state: &Reservations, version: u64) -> Result<Option<u64>, String> {
        ClusterStore::write(self, state, version).map_err(|e| e.to_string())
    }

    fn publish(
        &self,
        state: &Reservations,
        version: u64,
        notices: &[Notice],
        bindings: &[(HostId, NqnTag)],
        aborted: &[HostId],
    ) -> bool {
        ClusterStore::publish(self, state, version, notices, bindings, aborted)
    }

    fn start(self: Arc<Self>, sink: &Arc<dyn Sink>) -> Result<(), String> {
        ClusterStore::start(&self, sink).map_err(|e| {
            let hint = match &e {
                ClusterError::Ceph(err) if matches!(err.errno(), Some(1 | 13)) => {
                    " (the Ceph client needs write access to the pool's objects to share the state between gateways; or set reservations = false)"
                }
                _ => "",
            };
            format!("{e}{hint}")
        })
    }

    fn unacknowledged(&self) -> u64 {
        self.unacknowledged.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        installed: Mutex<Vec<u64>>,
        states: Mutex<Vec<Reservations>>,
        notices: Mutex<usize>,
        /// Whether its writes in flight drain in time.
        stuck: bool,
        drained: Mutex<usize>,
    }

    impl Sink for Fake {
        fn install(&self, state: Reservations, version: u64) {
            self.installed.lock().unwrap().push(version);
            self.states.lock().unwrap().push(state);
        }
        fn install_draining(&self, state: Reservations, version: u64) -> bool {
            *self.drained.lock().unwrap() += 1;
            self.install(state, version);
            !self.stuck
        }
        fn notices(&self, notices: &[Notice], _: &[([u8; 16], [u8; 16])]) {
            *self.notices.lock().unwrap() += notices.len();
        }
    }

    fn note(from: u64, version: u64, state: Reservations, aborted: Vec<[u8; 16]>) -> Vec<u8> {
        serde_json::to_vec(&Notification {
            from,
            version,
            state,
            notices: vec![([1; 16], 1)],
            aborted,
            bindings: vec![],
        })
        .unwrap()
    }

    /// What the object holds: `version`, one registrant.
    fn held(version: u64) -> impl FnOnce() -> Result<Versioned, ClusterError> {
        move || {
            let mut state = Reservations::default();
            state
                .registrants
                .push(crate::reservation::state::Registrant {
                    host: [9; 16],
                    key: 1,
                    nqn: [0; 16],
                });
            Ok(Versioned { state, version })
        }
    }

    fn registrants(f: &Fake) -> usize {
        f.states
            .lock()
            .unwrap()
            .last()
            .map_or(0, |s| s.registrants.len())
    }

    /// Issue 38, 6: another gateway's Preempt and Abort is acknowledged
    /// only once the writes in flight here drained; the changer's own
    /// notification does not drain again (it drained before publishing).
    #[test]
    fn a_preempt_and_abort_is_acknowledged_once_drained() {
        let f = Fake::default();
        let seen = AtomicU64::new(0);
        let r = Reservations::default;
        assert!(take_notification(
            &f,
            1,
            &note(2, 7, r(), vec![[5; 16]]),
            &seen,
            held(7)
        ));
        assert_eq!(*f.drained.lock().unwrap(), 1);
        assert!(take_notification(
            &f,
            2,
            &note(2, 8, r(), vec![[5; 16]]),
            &seen,
            held(8)
        ));
        assert_eq!(*f.drained.lock().unwrap(), 1, "its own change");
        assert!(take_notification(
            &f,
            1,
            &note(2, 9, r(), vec![]),
            &seen,
            held(9)
        ));
        assert_eq!(*f.drained.lock().unwrap(), 1, "no abort: nothing to drain");
        let stuck = Fake {
            stuck: true,
            ..Default::default()
        };
        assert!(!take_notification(
            &stuck,
            1,
            &note(2, 7, r(), vec![[5; 16]]),
            &seen,
            held(7)
        ));
        // A change from a gateway of before (no `aborted`) still reads.
        let old = br#"{"from":2,"version":10,"state":{"registrants":[],"holder":null,"generation":0,"ptpl":false},"notices":[]}"#;
        assert!(take_notification(&f, 1, old, &seen, held(10)));
    }

    /// Issue 38, 9: a gateway acknowledges a notification only once it
    /// installed the object's state.
    #[test]
    fn only_an_installed_notification_is_acknowledged() {
        let f = Fake::default();
        let seen = AtomicU64::new(0);
        let n = |from, v| note(from, v, Reservations::default(), vec![]);
        assert!(take_notification(&f, 1, &n(2, 7), &seen, held(7)));
        assert_eq!(*f.installed.lock().unwrap(), vec![7]);
        assert_eq!(*f.notices.lock().unwrap(), 1);
        // Its own change: installed before publishing, no notices again.
        assert!(take_notification(&f, 2, &n(2, 8), &seen, held(8)));
        assert_eq!(*f.notices.lock().unwrap(), 1);
        assert_eq!(f.installed.lock().unwrap().len(), 1);
        // Not readable, the object not readable, or an inconsistent state
        // in it: neither installed nor acknowledged.
        assert!(!take_notification(&f, 1, b"{\"from\":", &seen, held(8)));
        let unreadable = || {
            Err(ClusterError::Invalid {
                object: "p/o".into(),
                reason: "test".into(),
            })
        };
        assert!(!take_notification(&f, 1, &n(2, 8), &seen, unreadable));
        let bad = || {
            Ok(Versioned {
                state: Reservations {
                    holder: Some(crate::reservation::state::Holder {
                        rtype: 9,
                        host: [3; 16],
                    }),
                    ..Default::default()
                },
                version: 8,
            })
        };
        assert!(!take_notification(&f, 1, &n(2, 8), &seen, bad));
        assert_eq!(f.installed.lock().unwrap().len(), 1);
    }

    /// Issue 57, 6: a forged notification (a version the object does not
    /// hold, a state it does not hold) installs the object's state and
    /// version, never the sender's, and delivers no notices; one replayed
    /// for a version already noticed delivers none again.
    #[test]
    fn a_forged_notification_installs_only_what_the_object_holds() {
        let f = Fake::default();
        let seen = AtomicU64::new(0);
        let forged = note(2, u64::MAX, Reservations::default(), vec![[5; 16]]);
        assert!(take_notification(&f, 1, &forged, &seen, held(7)));
        assert_eq!(
            *f.installed.lock().unwrap(),
            vec![7],
            "the object's version"
        );
        assert_eq!(registrants(&f), 1, "the object's state, not the one sent");
        assert_eq!(*f.notices.lock().unwrap(), 0, "no notices from a forgery");
        assert_eq!(*f.drained.lock().unwrap(), 0, "no drain for a forgery");
        // The real change that follows is taken, its notices delivered once.
        assert!(take_notification(
            &f,
            1,
            &note(2, 8, Reservations::default(), vec![]),
            &seen,
            held(8)
        ));
        assert_eq!(*f.installed.lock().unwrap(), vec![7, 8]);
        assert_eq!(*f.notices.lock().unwrap(), 1);
        assert!(take_notification(
            &f,
            1,
            &note(3, 8, Reservations::default(), vec![]),
            &seen,
            held(8)
        ));
        assert_eq!(*f.notices.lock().unwrap(), 1, "a replay of version 8");
    }
}
