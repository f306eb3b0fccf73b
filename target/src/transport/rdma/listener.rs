//! RDMA-CM listeners: one thread per listening address. A connection request
//! is checked (CM private data, target stopping) and handed to the worker
//! that serves its queue id; the worker sets up the queue pair and accepts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvme::cm::RejectStatus;
use rdma::{CmEventKind, CmId, EventChannel};
use tracing::{debug, error, info};

use super::queue::NewConn;
use super::{reject, EngineShared, TransportError};
use crate::controller::monotonic_ms;
use crate::transport;

/// A running listener thread.
#[derive(Debug)]
pub struct Listener {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the listener thread waits for an event before it checks for stop
/// and records its heartbeat.
const LISTEN_TICK: Duration = Duration::from_millis(500);

impl Listener {
    /// Whether the thread is running and went round its loop within `max_ms`.
    pub fn alive(&self, max_ms: u64) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
            && monotonic_ms().saturating_sub(self.heartbeat.load(Ordering::Relaxed)) <= max_ms
    }

    /// Stops accepting: the listening id is destroyed, so the RDMA-CM refuses
    /// new connection requests. Connected queues are not affected.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a listener thread for `addr`. Returns once the address is bound and listening.
pub fn listen(engine: Arc<EngineShared>, addr: SocketAddr) -> Result<Listener, TransportError> {
    let rdma_err = |context: String| move |source| TransportError::Rdma { context, source };
    let ch = EventChannel::new().map_err(rdma_err("creating an RDMA-CM event channel".into()))?;
    let id = CmId::new(&ch).map_err(rdma_err("creating an RDMA-CM id".into()))?;
    id.bind(addr).map_err(rdma_err(format!(
        "binding {addr} (is an RDMA device configured on that address?)"
    )))?;
    id.listen(1024)
        .map_err(rdma_err(format!("listening on {addr}")))?;
    info!(%addr, "listening (rdma)");
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat = Arc::new(AtomicU64::new(monotonic_ms()));
    let (st, hb) = (stop.clone(), heartbeat.clone());
    let thread = std::thread::Builder::new()
        .name(format!("nvmf-listen-{}", addr.port()))
        .spawn(move || listener_loop(engine, ch, id, addr, st, hb))
        .map_err(|source| TransportError::Os {
            context: "spawning the listener thread".into(),
            source,
        })?;
    Ok(Listener {
        addr,
        stop,
        heartbeat,
        thread: Some(thread),
    })
}

fn listener_loop(
    engine: Arc<EngineShared>,
    ch: Arc<EventChannel>,
    listen_id: CmId,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
) {
    loop {
        heartbeat.store(monotonic_ms(), Ordering::Relaxed);
        if stop.load(Ordering::Acquire) {
            drop(listen_id);
            info!(%addr, "stopped listening");
            return;
        }
        let ev = match ch.wait_event(LISTEN_TICK) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(e) => {
                error!(%addr, "RDMA-CM event channel failed: {e}");
                return;
            }
        };
        match (ev.kind, ev.new_id) {
            (CmEventKind::ConnectRequest, Some(id)) => {
                let target = &engine.target;
                let params = match transport::check_cm_request(&ev.private_data) {
                    Ok(p) => p,
                    Err(why) => {
                        reject(target, &id, why);
                        continue;
                    }
                };
                if target.stopping.load(Ordering::Acquire) {
                    reject(target, &id, RejectStatus::NoResources);
                    continue;
                }
                engine.assign(params.qid).give(NewConn {
                    id,
                    params,
                    host_ird: ev.initiator_depth,
                    host_ord: ev.responder_resources,
                });
            }
            (kind, _) => debug!(%addr, ?kind, "listener event"),
        }
    }
}
