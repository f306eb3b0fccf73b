//! RDMA-CM listeners: one thread per listening address. A connection request
//! is checked (CM private data, target stopping) and handed to the worker
//! that serves its queue id; the worker sets up the queue pair and accepts.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::cm::RejectStatus;
use rdma::{CmEventKind, CmId, EventChannel};
use tracing::{debug, error, info, warn};

use super::queue::NewConn;
use super::{reject, RdmaShared};
use crate::model::target::Target;
use crate::transport::listener::{Beat, Listener};
use crate::transport::TransportError;

/// How long the listener thread waits for an event before it checks for stop
/// and records its heartbeat.
const LISTEN_TICK: Duration = Duration::from_millis(500);
/// How often the listener has librdmacm look at the RDMA devices, so that
/// it closes those that were removed (their removal waits for that).
const DEVICE_SYNC: Duration = Duration::from_secs(2);

/// A listening RDMA-CM id on `addr`.
fn bind_listen(ch: &Arc<EventChannel>, addr: SocketAddr) -> Result<CmId, TransportError> {
    let rdma_err = |context: String| move |source| TransportError::Rdma { context, source };
    let id = CmId::new(ch).map_err(rdma_err("creating an RDMA-CM id".into()))?;
    id.bind(addr).map_err(rdma_err(format!(
        "binding {addr} (is an RDMA device configured on that address?)"
    )))?;
    id.listen(1024)
        .map_err(rdma_err(format!("listening on {addr}")))?;
    Ok(id)
}

/// Starts a listener thread for `addr`. Returns once the address is bound and listening.
pub fn listen(
    shared: Arc<RdmaShared>,
    target: Arc<Target>,
    addr: SocketAddr,
) -> Result<Listener, TransportError> {
    let ch = EventChannel::new().map_err(|source| TransportError::Rdma {
        context: "creating an RDMA-CM event channel".into(),
        source,
    })?;
    let id = bind_listen(&ch, addr)?;
    info!(%addr, "listening (rdma)");
    Listener::spawn(addr, format!("nvmf-listen-{}", addr.port()), move |beat| {
        listener_loop(shared, target, ch, id, addr, beat)
    })
    .map_err(|source| TransportError::Os {
        context: "spawning the listener thread".into(),
        source,
    })
}

fn listener_loop(
    shared: Arc<RdmaShared>,
    target: Arc<Target>,
    ch: Arc<EventChannel>,
    listen_id: CmId,
    addr: SocketAddr,
    beat: Beat,
) {
    // None while the address's RDMA device is gone: the listener binds again
    // each tick until it is back.
    let mut listen_id = Some(listen_id);
    let mut synced = Instant::now();
    let mut warned_none = false;
    loop {
        beat.beat();
        if synced.elapsed() >= DEVICE_SYNC {
            synced = Instant::now();
            let n = rdma::sync_devices();
            if n == 0 && listen_id.is_none() && !warned_none {
                warn!(%addr, "no RDMA device is left: librdmacm closes a removed device only while another is present, so its removal (rdma link delete, a driver unload) waits until a device is added or the target stops");
            }
            warned_none = n == 0;
        }
        if beat.stopped() {
            drop(listen_id);
            info!(%addr, "stopped listening");
            return;
        }
        if listen_id.is_none() {
            match bind_listen(&ch, addr) {
                Ok(id) => {
                    info!(%addr, "the RDMA device is back: listening again");
                    listen_id = Some(id);
                }
                Err(e) => debug!(%addr, "not listening yet: {e}"),
            }
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
                let params = match super::cm::check_cm_request(&ev.private_data) {
                    Ok(p) => p,
                    Err(why) => {
                        reject(&id, why);
                        continue;
                    }
                };
                if target.stopping.load(Ordering::Acquire) {
                    reject(&id, RejectStatus::NoResources);
                    continue;
                }
                let Some(peer) = id.peer_addr() else {
                    reject(&id, RejectStatus::NoResources);
                    continue;
                };
                let pending = match shared.admission.admit(peer.ip()) {
                    Ok(a) => {
                        // The evicted queue's worker ends it at its next
                        // tick (it sees its place gone).
                        if let Some((from, why)) = a.evicted {
                            crate::transport::listener::evicted(&shared.admission, addr, from, why);
                        }
                        a.pending
                    }
                    Err(why) => {
                        crate::telemetry::metrics::reject(why.reason());
                        if shared.admission.should_log(peer.ip(), Instant::now()) {
                            let (mine, all) = shared.admission.counts(peer.ip());
                            warn!(%addr, %peer, pending_from_peer = mine, pending = all,
                                  limit = why.reason(),
                                  "connection refused: too many queues without a Fabrics Connect \
                                   ([target] max_pending_queues_per_peer / max_pending_queues); \
                                   said once a minute per peer");
                        }
                        reject(&id, RejectStatus::NoResources);
                        continue;
                    }
                };
                shared.assign(params.qid).give(NewConn {
                    id,
                    params,
                    host_ird: ev.initiator_depth,
                    host_ord: ev.responder_resources,
                    pending: Some(pending),
                });
            }
            (CmEventKind::DeviceRemoval, _) => {
                // The listening id goes (librdmacm keeps the device open
                // while it lives), and with it every queue on the device.
                warn!(%addr, "the RDMA device of this address is being removed; listening again when it is back");
                if let Some(key) = listen_id.as_ref().and_then(|i| i.device_key()) {
                    shared.device_removed(key);
                }
                listen_id = None;
            }
            (kind, _) => debug!(%addr, ?kind, "listener event"),
        }
    }
}
