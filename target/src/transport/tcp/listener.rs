//! NVMe/TCP listeners: one thread per listening address. A connection is
//! counted among its peer's unconnected queues (refused, closed at once,
//! beyond the caps) and handed to a worker in turn, which reads its ICReq;
//! at a listener that speaks TLS, after its handshake ([`super::tls`]).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use tracing::{info, warn};

use super::tls::accept::{spawn, Secured};
use super::tls::handshake::Acceptor;
use super::{NewSocket, TcpShared};
use crate::model::port::Secure;
use crate::model::target::Target;
use crate::model::tls_keys::Proven;
use crate::transport::listener::{Beat, Listener};
use crate::transport::TransportError;

/// How long the listener thread waits for a connection before it checks
/// for stop and records its heartbeat.
const LISTEN_TICK: Duration = Duration::from_millis(500);

/// Starts a listener thread for `addr`. Returns once the address is bound
/// and listening.
pub fn listen(
    shared: Arc<TcpShared>,
    target: Arc<Target>,
    addr: SocketAddr,
    secure: Secure,
) -> Result<Listener, TransportError> {
    let os = |context: String| move |source| TransportError::Os { context, source };
    let tls = match secure {
        Secure::None => None,
        _ => {
            let t = target.clone();
            let acceptor = Acceptor::new(Box::new(move |id| t.tls_keys.resolve(id)))
                .map_err(|e| std::io::Error::other(e.to_string()))
                .map_err(os(format!("{addr} (tcp): TLS")))?;
            Some(Arc::new(Secured {
                acceptor: Arc::new(acceptor),
                secure,
            }))
        }
    };
    let l = TcpListener::bind(addr).map_err(os(format!("binding {addr} (tcp)")))?;
    l.set_nonblocking(true)
        .map_err(os(format!("{addr}: non-blocking")))?;
    info!(%addr, secure = secure.name(), "listening (tcp)");
    Listener::spawn(addr, format!("nvmf-tcp-{}", addr.port()), move |beat| {
        listener_loop(shared, target, l, addr, tls, beat)
    })
    .map_err(os("spawning the listener thread".into()))
}

fn listener_loop(
    shared: Arc<TcpShared>,
    target: Arc<Target>,
    l: TcpListener,
    addr: SocketAddr,
    tls: Option<Arc<Secured>>,
    beat: Beat,
) {
    loop {
        beat.beat();
        if beat.stopped() {
            info!(%addr, "stopped listening (tcp)");
            return;
        }
        let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
        let tick =
            PollTimeout::try_from(LISTEN_TICK.as_millis() as i32).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, tick) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                warn!(%addr, error = %e, "poll of the listening socket");
                std::thread::sleep(LISTEN_TICK);
                continue;
            }
        }
        loop {
            match l.accept() {
                Ok((stream, peer)) => handle(&shared, &target, tls.as_ref(), stream, peer, addr),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, say: the listener goes on.
                    warn!(%addr, error = %e, "accept");
                    break;
                }
            }
        }
    }
}

fn handle(
    shared: &Arc<TcpShared>,
    target: &Target,
    tls: Option<&Arc<Secured>>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    addr: SocketAddr,
) {
    if target.stopping.load(Ordering::Acquire) {
        return;
    }
    let pending = match shared.admission.admit(peer.ip()) {
        Ok(a) => {
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
                      "connection refused: too many queues not yet connected \
                       ([target] max_pending_queues_per_peer / max_pending_queues; \
                       said once a minute per peer)");
            }
            return;
        }
    };
    // A connection that loses its place is shut down at once: a worker's
    // queue reads its end, a handshake's thread returns from its read.
    match stream.try_clone() {
        Ok(s) => pending.on_evict(move || {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }),
        Err(e) => {
            warn!(%peer, error = %e, "accept: no descriptor for the connection's eviction; closing it");
            return;
        }
    }
    let local = stream.local_addr().unwrap_or(addr);
    let Some(tls) = tls else {
        return give(shared, stream, peer, local, pending, None);
    };
    // The handshake's thread hands the socket on (it stays counted among
    // the peer's unconnected queues meanwhile).
    let sh = shared.clone();
    // Read before the handshake: a key changed meanwhile makes it stale.
    let keys_at = target.tls_keys.generation();
    let r = spawn(tls, stream, peer, keys_at, move |stream, id| {
        give(&sh, stream, peer, local, pending, id)
    });
    if let Err(e) = r {
        crate::telemetry::metrics::reject(e.reason());
        if shared.admission.should_log(peer.ip(), Instant::now()) {
            warn!(%peer, error = %e, "TLS: connection refused (said once a minute per peer)");
        }
    }
}

/// Hands a connection to a worker (non-blocking, tuned).
fn give(
    shared: &TcpShared,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    pending: crate::base::admission::Pending,
    tls: Option<Arc<Proven>>,
) {
    // The handshake's deadlines go with it.
    if let Err(e) = stream
        .set_read_timeout(None)
        .and_then(|_| stream.set_write_timeout(None))
        .and_then(|_| stream.set_nonblocking(true))
        .and_then(|_| super::tune(&stream).map_err(std::io::Error::from))
    {
        warn!(%peer, error = %e, "setting up an accepted connection");
        return;
    }
    match shared.assign() {
        Some(inbox) => inbox.give(NewSocket {
            stream,
            peer,
            local,
            pending,
            tls,
        }),
        None => warn!(%peer, "no worker takes NVMe/TCP connections"),
    }
}
