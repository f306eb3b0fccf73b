//! The RDMA transport: RDMA-CM listeners that hand connections to the
//! engine's workers ([`super::engine`]), and each worker's RDMA part.
//!
//! - [`listener`]: accepts connection requests, checks the CM private data,
//!   and gives each queue to a worker: I/O queue *q* of any host to worker
//!   `(q - 1) mod N` (a host's per-CPU queues land on distinct workers),
//!   admin and discovery queues in turn.
//! - [`group`]: the RDMA part of a worker ([`crate::worker`], the poll
//!   loop every transport shares); [`device`]: a worker's completion queue,
//!   shared receive queue and data pool per RDMA device; [`queue`]: one queue
//!   pair, the RDMA driver of a [`crate::queue::QueueCore`].
//! - [`memory`]: the pinned-memory budget every registration is charged to.
//! - [`poster`]: threads that post the sends carrying large RDMA WRITEs, for
//!   software RDMA devices, whose post call runs the protocol.
//!
//! One protection domain per device serves the whole target.

pub mod cm;
pub mod device;
pub mod group;
mod index;
pub mod listener;
pub mod memory;
pub mod poster;
pub mod queue;
mod wr;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use nvme::cm::{CmReject, RejectStatus};
use rdma::{CmId, Context, ProtectionDomain};
use tracing::warn;

use crate::base::admission::Admission;
use crate::config::{EngineConfig, SendOffload};
use group::Inbox;
pub use listener::listen;
use memory::Budget;
use poster::{Poster, Posters};

/// What the RDMA listeners and the workers' RDMA parts share.
pub struct RdmaShared {
    /// Queues that have not connected yet, capped per peer and in all
    /// (NVMe/TCP's too).
    pub admission: Arc<Admission>,
    /// The pinned-memory budget.
    pub budget: Arc<Budget>,
    pds: Mutex<Vec<(usize, Arc<ProtectionDomain>)>>,
    /// Protection domains of removed devices, until every worker let go.
    removed: Mutex<Vec<Weak<ProtectionDomain>>>,
    /// Where each worker takes its new connections.
    inboxes: Vec<Arc<Inbox>>,
    next_admin: AtomicUsize,
    /// Poster threads (none with `send_offload = "off"`).
    posters: Option<Posters>,
}

impl RdmaShared {
    /// The shared part for workers with `inboxes`.
    pub fn new(
        cfg: &EngineConfig,
        admission: Arc<Admission>,
        inboxes: Vec<Arc<Inbox>>,
    ) -> Arc<RdmaShared> {
        Arc::new(RdmaShared {
            admission,
            budget: Budget::new(cfg.max_pinned_memory),
            pds: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            posters: (cfg.send_offload != SendOffload::Off)
                .then(|| Posters::new(poster::poster_count(cfg.workers))),
            inboxes,
            next_admin: AtomicUsize::new(0),
        })
    }

    /// Each worker's inbox.
    pub fn inboxes(&self) -> &[Arc<Inbox>] {
        &self.inboxes
    }

    /// The target-wide protection domain of the device of `ctx`.
    pub fn pd_for(&self, ctx: &Context) -> rdma::Result<Arc<ProtectionDomain>> {
        let key = ctx.as_ptr() as usize;
        let mut pds = self.pds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, pd)) = pds.iter().find(|(k, _)| *k == key) {
            return Ok(pd.clone());
        }
        let pd = ProtectionDomain::new(ctx)?;
        pds.push((key, pd.clone()));
        Ok(pd)
    }

    /// The RDMA device `key` (its verbs context) is being removed: no new
    /// queue gets its protection domain, and every worker lets go of it once
    /// its queues there are gone (the removal waits for that).
    pub fn device_removed(&self, key: usize) {
        let mut pds = self.pds.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = pds.iter().position(|(k, _)| *k == key) else {
            return;
        };
        let (_, pd) = pds.remove(i);
        drop(pds);
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.retain(|w| w.strong_count() > 0);
        removed.push(Arc::downgrade(&pd));
        drop(removed);
        warn!("RDMA device removed: its queues are disconnected and its resources freed");
        for i in &self.inboxes {
            i.wake();
        }
    }

    /// The poster of worker `worker`, if sends may be offloaded.
    pub fn poster(&self, worker: usize) -> Option<&Poster> {
        Some(self.posters.as_ref()?.for_worker(worker))
    }

    /// Whether `pd` belongs to a removed device.
    pub fn is_removed(&self, pd: &Arc<ProtectionDomain>) -> bool {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|w| w.upgrade().is_some_and(|r| Arc::ptr_eq(&r, pd)))
    }

    /// The inbox of the worker that serves queue `qid`.
    pub fn assign(&self, qid: u16) -> &Arc<Inbox> {
        let n = self.inboxes.len();
        let i = if qid > 0 {
            (qid as usize - 1) % n
        } else {
            self.next_admin.fetch_add(1, Ordering::Relaxed) % n
        };
        &self.inboxes[i]
    }
}

/// Whether the process may lock `bytes` of memory: it has CAP_IPC_LOCK, or
/// RLIMIT_MEMLOCK allows that much. Returns a clear message if not.
pub fn check_memlock(bytes: u64) -> Result<(), String> {
    use nix::sys::resource::{getrlimit, Resource};
    let cap_ipc_lock = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 14) != 0);
    if cap_ipc_lock {
        return Ok(());
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_MEMLOCK).map_err(|e| format!("getrlimit: {e}"))?;
    if soft != nix::sys::resource::RLIM_INFINITY && soft < bytes {
        return Err(format!(
            "RLIMIT_MEMLOCK is {} KiB but [target] max_pinned_memory is {} KiB: raise the limit \
             (ulimit -l, or LimitMEMLOCK= in the systemd unit), run with CAP_IPC_LOCK, or lower \
             max_pinned_memory",
            soft >> 10,
            bytes >> 10
        ));
    }
    Ok(())
}

/// Rejects a connection request with an NVMe/RDMA reject status.
pub(crate) fn reject(id: &CmId, why: RejectStatus) {
    crate::telemetry::metrics::reject(match why {
        RejectStatus::NoResources => "cm_no_resources",
        RejectStatus::InvalidHsqsize => "cm_invalid_hsqsize",
        RejectStatus::InvalidHrqsize => "cm_invalid_hrqsize",
        RejectStatus::InvalidQid => "cm_invalid_qid",
        RejectStatus::InvalidRecfmt => "cm_invalid_recfmt",
        _ => "cm_invalid_private_data",
    });
    warn!(peer = ?id.peer_addr(), reason = ?why, "rejecting queue connection");
    if let Err(e) = id.reject(&CmReject::new(why).encode()) {
        warn!(error = %e, "rdma_reject");
    }
}
