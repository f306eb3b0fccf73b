//! Persistent reservations: the state machine ([`state`]), a namespace's
//! shared copy of it and the conflict check every I/O command passes
//! ([`NsReservations`]) and each
//! controller's notification log ([`notices`]). The Reservation commands
//! are [`crate::command::reservation`].

pub mod notices;
pub mod persist;
pub mod shared;
pub mod state;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme::Status;

pub use state::{Access, Effects, HostId, Reservations};

use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;

/// Where a namespace's state is kept beyond this process.
#[derive(Debug)]
pub enum Store {
    /// A file under the state directory, while PTPL is set.
    File(persist::FileStore),
    /// A state shared by every gateway of a store (an RBD image's, in its
    /// cluster).
    Shared(Arc<dyn shared::SharedState>),
}

/// The status of a command while a gateway is not sure its copy of a shared
/// state is current: the host retries after the Command Retry Delay.
pub fn not_sure() -> Status {
    Status::NS_NOT_READY.with_crd(1)
}

/// The status of an I/O command while a gateway is not sure its copy of a
/// shared state is current. Being unsure is this gateway's own condition,
/// so the status is a path error: a multipath host sends the command
/// through another gateway at once, without counting a retry (Namespace
/// Not Ready would keep it here, a Command Retry Delay per try, until the
/// host's retries ran out), and reads the ANA log, which shows the group
/// inaccessible here from the daemon's next tick until the gateway is sure
/// again. A host without multipath retries after the Command Retry Delay.
pub fn unsure_path() -> Status {
    Status::ANA_INACCESSIBLE.with_crd(1)
}

/// The reservation state of one namespace, shared by every controller (and
/// queue) that reaches it.
#[derive(Debug)]
pub struct NsReservations {
    /// Reservations are supported on this namespace.
    enabled: bool,
    state: Mutex<Reservations>,
    /// A reservation is held: I/O must be checked against it. Without one no
    /// command conflicts, and the I/O path does not take the lock.
    held: AtomicBool,
    /// Where the state persists, if it does.
    store: Option<Store>,
    /// The version of the shared object the state is (a cluster store).
    version: AtomicU64,
    /// Serializes the commands that change the state, so that each persists
    /// before the next starts, without holding the state's lock (which I/O
    /// checks take) while the file is synced.
    changing: Mutex<()>,
    /// The subsystem and nsid whose controllers get the notices of changes
    /// another gateway made.
    notify: Mutex<Option<Notify>>,
    /// The namespace's write gate: closed while a Preempt and Abort made by
    /// another gateway is installed, so that the preempted hosts' writes
    /// in flight here complete first.
    gate: Mutex<Option<Arc<WriteGate>>>,
}

/// How long a gateway waits for its writes in flight when another gateway's
/// Preempt and Abort reaches it (the changer waits 10 s for every gateway).
pub const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

impl NsReservations {
    /// A namespace's state: empty, `enabled` or not, kept in `store` if any
    /// (loaded from it when it holds a state).
    /// (loaded from it when it holds a state; a cluster store is read and
    /// watched).
    pub fn new(enabled: bool, store: Option<Store>) -> Result<Arc<NsReservations>, String> {
        let st = match &store {
            Some(Store::File(s)) => s.load().map_err(|e| e.to_string())?.unwrap_or_default(),
            _ => Reservations::default(),
        };
        let r = Arc::new(NsReservations {
            enabled,
            held: AtomicBool::new(st.holder.is_some()),
            state: Mutex::new(st),
            store,
            version: AtomicU64::new(0),
            changing: Mutex::new(()),
            notify: Mutex::new(None),
            gate: Mutex::new(None),
        });
        if let Some(Store::Shared(c)) = &r.store {
            let sink: Arc<dyn shared::Sink> = r.clone();
            c.clone()
                .start(&sink)
                .map_err(|e| format!("the shared state {}: {e}", c.spec()))?;
        }
        Ok(r)
    }

    /// Reservations are supported and kept only in memory.
    pub fn in_memory(enabled: bool) -> NsReservations {
        NsReservations {
            enabled,
            state: Mutex::new(Reservations::default()),
            held: AtomicBool::new(false),
            store: None,
            version: AtomicU64::new(0),
            changing: Mutex::new(()),
            notify: Mutex::new(None),
            gate: Mutex::new(None),
        }
    }

    /// Where the notices of changes made by another gateway go (the
    /// controllers of the namespace's hosts), and the namespace's write gate.
    pub fn attach(&self, notify: Notify, gate: Arc<WriteGate>) {
        *self.notify.lock().unwrap_or_else(|p| p.into_inner()) = Some(notify);
        *self.gate.lock().unwrap_or_else(|p| p.into_inner()) = Some(gate);
    }

    /// The shared store, if the state is shared.
    pub fn shared(&self) -> Option<&Arc<dyn shared::SharedState>> {
        match &self.store {
            Some(Store::Shared(c)) => Some(c),
            _ => None,
        }
    }

    /// The version of the shared object the state is (0 when not shared).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Whether the state may be trusted now: always, unless it is shared
    /// and this gateway lost touch with it.
    pub fn sure(&self) -> bool {
        self.shared().is_none_or(|c| c.sure())
    }

    /// Whether the namespace supports reservations.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the state can persist through a power loss (RESCAP.PTPL).
    pub fn ptpl_capable(&self) -> bool {
        self.store.is_some()
    }

    /// Whether changing the state blocks (a file to sync, an object to
    /// write): the commands that change it then run off the worker.
    pub fn blocks(&self) -> bool {
        self.store.is_some()
    }

    /// Locks the state.
    pub fn lock(&self) -> MutexGuard<'_, Reservations> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks a command of `access` by `host` (connected under the host
    /// NQN `nqn` tags) against the reservation. A gateway unsure of a
    /// shared state serves no I/O: see [`unsure_path`].
    pub fn check(&self, host: &HostId, nqn: &state::NqnTag, access: Access) -> Result<(), Status> {
        if !self.sure() {
            return Err(unsure_path());
        }
        if !self.held.load(Ordering::Acquire) || self.lock().allows(host, nqn, access) {
            Ok(())
        } else {
            Err(Status::RESERVATION_CONFLICT)
        }
    }

    /// Changes the state with `f` on a copy; the copy is persisted (when
    /// PTPL says so) before it replaces the state. A state that cannot be
    /// persisted is not taken: the command fails, and nothing changed.
    fn change<T>(
        &self,
        f: impl FnMut(&mut Reservations) -> Result<(T, bool), Status>,
    ) -> Result<T, Status>
    where
        T: HasNotices,
    {
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = self.shared() {
            return self.change_shared(c, f);
        }
        let mut f = f;
        let mut next = self.lock().clone();
        let was_ptpl = next.ptpl;
        let (out, changed) = f(&mut next)?;
        let mut failed = None;
        if let Some(Store::File(store)) = &self.store {
            if changed && (next.ptpl || was_ptpl) {
                match store.save(&next) {
                    Ok(()) => {}
                    // The file holds the new state: memory follows it, and
                    // the command fails (final: a retry would not be the
                    // same command), as its durability is not known.
                    Err(e @ persist::StoreError::Unsynced { .. }) => {
                        tracing::error!(error = %e, "reservation state may not be durable");
                        failed = Some(Status::INTERNAL.no_retry());
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "reservation state not persisted");
                        return Err(Status::INTERNAL);
                    }
                }
            }
        }
        let mut st = self.lock();
        self.held.store(next.holder.is_some(), Ordering::Release);
        *st = next;
        match failed {
            Some(s) => Err(s),
            None => Ok(out),
        }
    }

    /// [`change`](Self::change) of a state shared through the cluster: read
    /// the object, apply, write it if nobody did meanwhile (else again),
    /// install it, and tell the other gateways before the command completes.
    fn change_shared<T: HasNotices>(
        &self,
        c: &Arc<dyn shared::SharedState>,
        mut f: impl FnMut(&mut Reservations) -> Result<(T, bool), Status>,
    ) -> Result<T, Status> {
        const TRIES: usize = 16;
        if !c.sure() {
            return Err(not_sure());
        }
        for _ in 0..TRIES {
            let cur = c.read().map_err(|e| {
                tracing::warn!(error = %e, "reading the reservation state");
                not_sure()
            })?;
            let mut next = cur.state.clone();
            let (out, changed) = f(&mut next)?;
            if !changed {
                self.install_copy(cur.state, cur.version);
                return Ok(out);
            }
            match c.write(&next, cur.version) {
                Ok(Some(v)) => {
                    self.install_copy(next.clone(), v);
                    let all = c.publish(&next, v, out.notices(), out.bindings(), out.aborted());
                    if !all && !out.aborted().is_empty() {
                        // The preempted hosts' writes may still land
                        // through a gateway that did not confirm it drained
                        // them: the host is not told the abort is done.
                        tracing::warn!(object = %c.spec(), "Preempt and Abort: not every gateway confirmed it drained the preempted hosts' writes; answered Namespace Not Ready");
                        return Err(not_sure());
                    }
                    return Ok(out);
                }
                Ok(None) => continue,
                Err(e) => {
                    // Whether it landed is not known: the host retries the
                    // command, which finds the state as it is then.
                    tracing::warn!(error = %e, "writing the reservation state");
                    return Err(not_sure());
                }
            }
        }
        tracing::warn!(object = %c.spec(), "the reservation state kept changing under this command");
        Err(not_sure())
    }

    fn install_copy(&self, state: Reservations, version: u64) {
        let mut st = self.lock();
        if version > self.version.load(Ordering::Acquire) {
            self.held.store(state.holder.is_some(), Ordering::Release);
            *st = state;
            self.version.store(version, Ordering::Release);
        }
    }

    /// Set Features Reservation Persistence: whether the state persists
    /// through a power loss (a restart of the target).
    pub fn set_ptpl(&self, on: bool) -> Result<(), Status> {
        if on && self.store.is_none() {
            return Err(Status::INVALID_FIELD);
        }
        self.change(|st| {
            let changed = st.ptpl != on;
            st.ptpl = on;
            Ok(((), changed))
        })
    }

    /// Runs a Register, Acquire or Release of `host` against the state.
    pub fn apply(
        &self,
        host: &HostId,
        nqn: &state::NqnTag,
        req: &state::Request,
    ) -> Result<Effects, Status> {
        let capable = self.ptpl_capable();
        self.change(|st| {
            // A host identifier registered by another host NQN is not this
            // host's (the Connect refuses such a pair; this holds even if
            // the registration arrived from another gateway since).
            if st.bound_elsewhere(host, nqn) {
                return Err(Status::RESERVATION_CONFLICT);
            }
            let mut fx = st.apply(host, req, capable)?;
            fx.changed |= st.bind(host, nqn);
            let changed = fx.changed;
            Ok((fx, changed))
        })
    }

    /// Whether `host` is registered here by another host NQN than the one
    /// `nqn` tags.
    pub fn bound_elsewhere(&self, host: &HostId, nqn: &state::NqnTag) -> bool {
        self.enabled && self.lock().bound_elsewhere(host, nqn)
    }
}

/// Tells the hosts of a namespace about changes another gateway made.
#[derive(Clone)]
pub struct Notify(pub Arc<NotifyFn>);

/// What [`Notify`] calls with the notices of a change.
/// `(notices, bindings)`: a notice for a host reaches only controllers of
/// the host NQN it is bound to there, if any.
pub type NotifyFn = dyn Fn(&[state::Notice], &[(HostId, state::NqnTag)]) + Send + Sync;

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}

/// What a change reports to the other gateways.
pub trait HasNotices {
    /// The notices it raised.
    fn notices(&self) -> &[state::Notice];
    /// The hosts a Preempt and Abort preempted: every gateway drains its
    /// writes in flight before the command completes.
    fn aborted(&self) -> &[HostId] {
        &[]
    }
    /// The host NQN tags its notices are bound to.
    fn bindings(&self) -> &[(HostId, state::NqnTag)] {
        &[]
    }
}

impl HasNotices for () {
    fn notices(&self) -> &[state::Notice] {
        &[]
    }
}

impl HasNotices for Effects {
    fn notices(&self) -> &[state::Notice] {
        &self.notices
    }
    fn aborted(&self) -> &[HostId] {
        &self.aborted
    }
    fn bindings(&self) -> &[(HostId, state::NqnTag)] {
        &self.bindings
    }
}

impl shared::Sink for NsReservations {
    fn install(&self, state: Reservations, version: u64) {
        self.install_copy(state, version);
    }

    fn install_draining(&self, state: Reservations, version: u64) -> bool {
        let gate = self.gate.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(gate) = gate else {
            self.install_copy(state, version);
            return true;
        };
        // Closed, the writes inside complete first; those parked meanwhile
        // check the new state when it reopens.
        let closed = gate.close_within(DRAIN_WAIT);
        self.install_copy(state, version);
        if closed.is_none() {
            tracing::warn!(version, "a Preempt and Abort from another gateway: writes here did not complete within {} s; not acknowledged", DRAIN_WAIT.as_secs());
        }
        closed.is_some()
    }

    fn notices(&self, notices: &[state::Notice], bindings: &[(HostId, state::NqnTag)]) {
        let notify = self
            .notify
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(Notify(f)) = notify {
            f(notices, bindings);
        }
    }
}

/// How a planned I/O command accesses its namespace, for the conflict
/// check: the read group (Read, Compare) or the write group (Write, Write Zeroes,
/// Dataset Management, Flush). Reservation commands are not checked.
pub fn access_of(plan: &IoPlan) -> Option<Access> {
    match plan {
        IoPlan::Read { .. } | IoPlan::Compare { .. } => Some(Access::Read),
        IoPlan::Write { .. } | IoPlan::Flush | IoPlan::WriteZeroes { .. } | IoPlan::Dsm { .. } => {
            Some(Access::Write)
        }
        IoPlan::Resv { .. } | IoPlan::Auth { .. } => None,
    }
}
