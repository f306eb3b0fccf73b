//! Persistent reservations: the state machine ([`state`]), a namespace's
//! shared copy of it and the conflict check every I/O command passes
//! ([`NsReservations`]), the Reservation commands ([`command`]) and each
//! controller's notification log ([`notices`]).

pub mod command;
pub mod notices;
pub mod persist;
pub mod state;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use nvme::Status;

pub use state::{Access, Effects, HostId, Reservations};

use crate::io::IoPlan;

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
    /// Where the state persists (PTPL), if it can.
    store: Option<persist::FileStore>,
    /// Serializes the commands that change the state, so that each persists
    /// before the next starts, without holding the state's lock (which I/O
    /// checks take) while the file is synced.
    changing: Mutex<()>,
}

impl NsReservations {
    /// A namespace's state: empty, `enabled` or not, kept in `store` if any
    /// (loaded from it when it holds a state).
    pub fn new(
        enabled: bool,
        store: Option<persist::FileStore>,
    ) -> Result<NsReservations, persist::StoreError> {
        let st = match &store {
            Some(s) => s.load()?.unwrap_or_default(),
            None => Reservations::default(),
        };
        Ok(NsReservations {
            enabled,
            held: AtomicBool::new(st.holder.is_some()),
            state: Mutex::new(st),
            store,
            changing: Mutex::new(()),
        })
    }

    /// Reservations are supported and kept only in memory.
    pub fn in_memory(enabled: bool) -> NsReservations {
        NsReservations {
            enabled,
            state: Mutex::new(Reservations::default()),
            held: AtomicBool::new(false),
            store: None,
            changing: Mutex::new(()),
        }
    }

    /// Whether the namespace supports reservations.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the state can persist through a power loss (RESCAP.PTPL).
    pub fn ptpl_capable(&self) -> bool {
        self.store.is_some()
    }

    /// Whether changing the state blocks (a file to sync): the commands that
    /// change it then run off the worker.
    pub fn blocks(&self) -> bool {
        self.store.is_some()
    }

    /// Locks the state.
    pub fn lock(&self) -> MutexGuard<'_, Reservations> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks a command of `access` by `host` against the reservation.
    pub fn check(&self, host: &HostId, access: Access) -> Result<(), Status> {
        if !self.held.load(Ordering::Acquire) || self.lock().allows(host, access) {
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
        f: impl FnOnce(&mut Reservations) -> Result<(T, bool), Status>,
    ) -> Result<T, Status> {
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = self.lock().clone();
        let was_ptpl = next.ptpl;
        let (out, changed) = f(&mut next)?;
        let mut failed = None;
        if let Some(store) = &self.store {
            if changed && (next.ptpl || was_ptpl) {
                match store.save(&next) {
                    Ok(()) => {}
                    // The file holds the new state: memory follows it, and
                    // the command fails (final: a retry would not be the
                    // same command), as its durability is not known.
                    Err(e @ persist::StoreError::Unsynced { .. }) => {
                        tracing::error!("reservation state may not be durable: {e}");
                        failed = Some(Status::INTERNAL.no_retry());
                    }
                    Err(e) => {
                        tracing::error!("reservation state not persisted: {e}");
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
    pub fn apply(&self, host: &HostId, req: &state::Request) -> Result<Effects, Status> {
        let capable = self.ptpl_capable();
        self.change(|st| {
            let fx = st.apply(host, req, capable)?;
            let changed = fx.changed;
            Ok((fx, changed))
        })
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
        IoPlan::Resv { .. } => None,
    }
}
