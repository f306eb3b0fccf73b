//! The engine: the worker threads (poll groups, [`crate::worker`]), each
//! driving every transport's part ([`super::rdma::group::RdmaGroup`],
//! [`super::tcp::group::TcpGroup`]), and what the listeners share with them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::backend::offload::Offload;
use crate::base::admission::Admission;
use crate::config::EngineConfig;
use crate::model::target::Target;
use crate::transport::rdma::group::RdmaGroup;
use crate::transport::rdma::RdmaShared;
use crate::transport::tcp::group::TcpGroup;
use crate::transport::tcp::TcpShared;
use crate::transport::TransportError;
use crate::worker::{Inbox, Transports, Worker, WorkerShared};

/// What the listeners and workers share.
pub struct EngineShared {
    /// The target served.
    pub target: Arc<Target>,
    /// Engine settings.
    pub cfg: EngineConfig,
    /// The RDMA listeners' and workers' part.
    pub rdma: Arc<RdmaShared>,
    /// The NVMe/TCP listeners' and workers' part.
    pub tcp: Arc<TcpShared>,
    workers: Vec<Arc<WorkerShared>>,
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
        crate::base::shard::set_workers(cfg.workers);
        let offload = Arc::new(Offload::start().map_err(os("starting the offload thread"))?);
        let workers = (0..cfg.workers)
            .map(WorkerShared::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(os("creating a worker eventfd"))?;
        // One cap on unconnected queues, whichever transport brings them.
        let admission =
            Admission::evicting(cfg.max_pending_queues_per_peer, cfg.max_pending_queues);
        let rdma = workers
            .iter()
            .map(|w| Inbox::new(w.waker.clone()))
            .collect();
        let tcp = workers
            .iter()
            .map(|w| Inbox::new(w.waker.clone()))
            .collect();
        let shared = Arc::new(EngineShared {
            rdma: RdmaShared::new(&cfg, admission.clone(), rdma),
            tcp: TcpShared::new(admission, tcp),
            target,
            cfg,
            workers,
        });
        let mut threads = Vec::new();
        for (i, w) in shared.workers.iter().enumerate() {
            // Each transport at its index: its queue keys and ring
            // operations carry it.
            let rdma = RdmaGroup::new(shared.rdma.clone(), shared.rdma.inboxes()[i].clone(), 0);
            let tcp = TcpGroup::for_engine(shared.tcp.inboxes[i].clone(), &shared.cfg, 1);
            let worker = Worker::new(
                w.clone(),
                Transports::new(vec![Box::new(rdma), Box::new(tcp)]),
                shared.target.clone(),
                shared.cfg.clone(),
                offload.clone(),
            )
            .map_err(TransportError::Setup)?;
            let cpu = shared.cfg.worker_cpus.of_worker(i);
            // A worker asked to have a CPU of its own starts only once it
            // runs there: the start fails rather than serve unpinned.
            let (pinned, on_cpu) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name(format!("nvmf-worker-{}", w.index))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let r = crate::worker::cpus::pin_this_thread(cpu);
                        let ok = r.is_ok();
                        let _ = pinned.send(r);
                        if !ok {
                            return;
                        }
                    }
                    worker.run()
                })
                .map_err(os("spawning a worker thread"))?;
            if let Some(cpu) = cpu {
                match on_cpu.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Err(TransportError::Setup(format!(
                            "worker_cpus: worker {i} cannot run on CPU {cpu}: {e}"
                        )))
                    }
                    Err(_) => {
                        return Err(TransportError::Setup(format!(
                            "worker_cpus: worker {i} ended before it ran on CPU {cpu}"
                        )))
                    }
                }
            }
            threads.push(t);
        }
        info!(
            workers = shared.workers.len(),
            worker_cpus = %shared.cfg.worker_cpus,
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
