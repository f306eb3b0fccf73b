//! Persistent reservations: the state machine ([`state`]), a namespace's
//! shared copy of it and the conflict check every I/O command passes
//! ([`NsReservations`]), the Reservation commands ([`command`]) and each
//! controller's notification log ([`notices`]).

pub mod command;
pub mod notices;
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
}

impl NsReservations {
    /// A namespace's state: empty, and `enabled` or not.
    pub fn new(enabled: bool) -> NsReservations {
        NsReservations {
            enabled,
            state: Mutex::new(Reservations::default()),
            held: AtomicBool::new(false),
        }
    }

    /// Whether the namespace supports reservations.
    pub fn enabled(&self) -> bool {
        self.enabled
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

    /// Set Features Reservation Persistence: whether the state persists
    /// through a power loss (a restart of the target).
    pub fn set_ptpl(&self, on: bool) -> Result<(), Status> {
        if on {
            // Nothing keeps the state across a restart yet.
            return Err(Status::INVALID_FIELD);
        }
        self.lock().ptpl = false;
        Ok(())
    }

    /// Runs a Register, Acquire or Release of `host` against the state.
    pub fn apply(&self, host: &HostId, req: &state::Request) -> Result<Effects, Status> {
        let mut st = self.lock();
        let fx = st.apply(host, req, false)?;
        self.held.store(st.holder.is_some(), Ordering::Release);
        Ok(fx)
    }
}

/// How a planned I/O command accesses its namespace, for the conflict
/// check: the read group (Read) or the write group (Write, Write Zeroes,
/// Dataset Management, Flush). Reservation commands are not checked.
pub fn access_of(plan: &IoPlan) -> Option<Access> {
    match plan {
        IoPlan::Read { .. } => Some(Access::Read),
        IoPlan::Write { .. } | IoPlan::Flush | IoPlan::WriteZeroes { .. } | IoPlan::Dsm { .. } => {
            Some(Access::Write)
        }
        IoPlan::Resv { .. } => None,
    }
}
