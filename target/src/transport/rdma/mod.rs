//! The RDMA transport: an engine of worker threads (poll groups) that serve
//! many queue pairs each, and RDMA-CM listeners that hand them connections.
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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme::cm::{CmReject, RejectStatus};
use rdma::{CmId, Context, ProtectionDomain};
use tracing::{info, warn};

use crate::backend::offload::Offload;
use crate::config::{EngineConfig, SendOffload};
use crate::engine::admission::Admission;
use crate::model::subsystem::Target;
use crate::transport::tcp::group::TcpGroup;
use crate::worker::{Both, Worker, WorkerShared};

/// Capsule buffers of a worker's NVMe/TCP connections (8 KiB each).
const TCP_CAPSULES: u32 = 256;

/// The data pool of a worker's NVMe/TCP connections: as an RDMA device's
/// (its memory is touched only as NVMe/TCP uses it).
fn tcp_pool_shape(cfg: &EngineConfig) -> crate::engine::pool::PoolShape {
    crate::engine::pool::PoolShape {
        small_size: crate::config::SMALL_BUFFER,
        small_count: cfg.small_buffers as usize,
        large_size: crate::MAX_IO_SIZE as usize,
        large_count: cfg.large_buffers as usize,
    }
}
use group::{Inbox, RdmaGroup};
pub use listener::listen;
use memory::Budget;
use poster::{Poster, Posters};

/// Errors setting up the transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A verbs / RDMA-CM call failed.
    #[error("{context}: {source}")]
    Rdma {
        /// What was being done.
        context: String,
        /// The failure.
        source: rdma::Error,
    },
    /// An OS call failed.
    #[error("{context}: {source}")]
    Os {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
    /// Anything else, said in words.
    #[error("{0}")]
    Setup(String),
}

/// What the listeners and workers share.
pub struct EngineShared {
    /// The target served.
    pub target: Arc<Target>,
    /// Engine settings.
    pub cfg: EngineConfig,
    /// The pinned-memory budget.
    pub budget: Arc<Budget>,
    /// Queues that have not connected yet, capped per peer and in all.
    pub admission: Arc<Admission>,
    /// What the NVMe/TCP listeners and the workers' TCP parts share.
    pub tcp: Arc<crate::transport::tcp::TcpShared>,
    pds: Mutex<Vec<(usize, Arc<ProtectionDomain>)>>,
    /// Protection domains of removed devices, until every worker let go.
    removed: Mutex<Vec<Weak<ProtectionDomain>>>,
    workers: Vec<Arc<WorkerShared>>,
    /// Where each worker takes its new connections.
    inboxes: Vec<Arc<Inbox>>,
    next_admin: AtomicUsize,
    /// Poster threads (none with `send_offload = "off"`).
    posters: Option<Posters>,
}

impl EngineShared {
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
        for w in &self.workers {
            w.waker.wake();
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

/// The running engine.
pub struct Engine {
    shared: Arc<EngineShared>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the workers.
    pub fn start(target: Arc<Target>, cfg: EngineConfig) -> Result<Engine, TransportError> {
        let os = |context: &str| {
            let context = context.to_string();
            move |source| TransportError::Os { context, source }
        };
        let offload = Arc::new(Offload::start().map_err(os("starting the offload thread"))?);
        let workers = (0..cfg.workers)
            .map(WorkerShared::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(os("creating a worker eventfd"))?;
        let posters = (cfg.send_offload != SendOffload::Off)
            .then(|| Posters::new(poster::poster_count(cfg.workers)));
        let inboxes = workers
            .iter()
            .map(|w| Inbox::new(w.waker.clone()))
            .collect();
        let tcp_inboxes: Vec<_> = workers
            .iter()
            .map(|w| crate::transport::tcp::Inbox::new(w.waker.clone()))
            .collect();
        let admission = Admission::new(cfg.max_pending_queues_per_peer, cfg.max_pending_queues);
        let shared = Arc::new(EngineShared {
            target,
            budget: Budget::new(cfg.max_pinned_memory),
            tcp: crate::transport::tcp::TcpShared::new(admission.clone(), tcp_inboxes),
            admission,
            cfg,
            pds: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            posters,
            workers,
            inboxes,
            next_admin: AtomicUsize::new(0),
        });
        let mut threads = Vec::new();
        for (i, (w, inbox)) in shared.workers.iter().zip(&shared.inboxes).enumerate() {
            let rdma = RdmaGroup::new(shared.clone(), inbox.clone(), 0);
            let tcp = TcpGroup::new(
                shared.tcp.inboxes[i].clone(),
                tcp_pool_shape(&shared.cfg),
                TCP_CAPSULES,
                crate::worker::slots::SECOND,
            );
            let worker = Worker::new(
                w.clone(),
                Both(rdma, tcp),
                shared.target.clone(),
                shared.cfg.clone(),
                offload.clone(),
            )
            .map_err(TransportError::Setup)?;
            let t = std::thread::Builder::new()
                .name(format!("nvmf-worker-{}", w.index))
                .spawn(move || worker.run())
                .map_err(os("spawning a worker thread"))?;
            threads.push(t);
        }
        info!(
            workers = shared.workers.len(),
            srq = ?shared.cfg.srq,
            send_offload = ?shared.cfg.send_offload,
            max_pinned_mib = shared.cfg.max_pinned_memory >> 20,
            "engine started"
        );
        Ok(Engine { shared, threads })
    }

    /// What listeners need.
    pub fn shared(&self) -> &Arc<EngineShared> {
        &self.shared
    }

    /// Checks that every worker runs and went round its loop within `max_ms`
    /// (a sleeping worker still does, every [`crate::worker::IDLE_WAIT`]).
    pub fn check_alive(&self, max_ms: u64) -> Result<(), String> {
        for (t, w) in self.threads.iter().zip(&self.shared.workers) {
            if t.is_finished() {
                return Err(format!("worker {} is not running", w.index));
            }
            if w.waker.silent_ms() > max_ms {
                return Err(format!(
                    "worker {} stalled ({} ms without a heartbeat)",
                    w.index,
                    w.waker.silent_ms()
                ));
            }
        }
        Ok(())
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Pinned bytes charged now.
    pub fn pinned_bytes(&self) -> u64 {
        self.shared.budget.used()
    }

    /// Disconnects every queue and stops the workers (waits up to `timeout`).
    pub fn stop(self, timeout: Duration) {
        for w in &self.shared.workers {
            w.stop.store(true, Ordering::Release);
            w.waker.wake();
        }
        let start = Instant::now();
        while self.threads.iter().any(|t| !t.is_finished()) && start.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in self.threads {
            if t.is_finished() {
                let _ = t.join();
            } else {
                warn!("a worker did not stop in time");
            }
        }
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
