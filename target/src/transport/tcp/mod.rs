//! The NVMe/TCP transport (NVMe over Fabrics TCP Transport specification):
//! listeners that accept connections and hand them to the workers, and the
//! TCP part of a worker ([`group::TcpGroup`]) driving each connection's queue
//! ([`queue::TcpQueue`]) on the worker's poll group, beside RDMA's.
//!
//! A connection costs little before it proves anything: it is counted among
//! its peer's unconnected queues from accept (the engine's
//! [`crate::base::admission::Admission`], shared with RDMA), holds a
//! receive buffer of one ICReq until the ICReq came, has no queue core (no
//! request slots) until its first capsule (a Connect, whose queue id and
//! size it takes), and is closed when the ICReq and the Connect have not
//! both come within [`crate::queue::CONNECT_TIMEOUT`]. Every length the peer
//! sends is checked before it is used ([`nvme::tcp::parse`]); a PDU that
//! breaks the rules gets the specification's C2HTermReq and the connection
//! ends.

pub mod group;
mod h2c;
pub mod listener;
pub mod queue;
pub mod tls;
pub mod zerocopy;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::base::admission::{Admission, Pending};

/// The most data one H2CData PDU may carry (ICResp MAXH2CDATA): the
/// largest transfer, so that a host sends a write's data in one PDU. Its
/// data goes straight to the request's buffer (`h2c`), never through the
/// connection's receive buffer.
pub const MAX_H2C_DATA: u32 = crate::MAX_IO_SIZE;
/// In-capsule data a capsule may carry (IOCCSZ says so to the host, and
/// NVMe/TCP's admin queues take 8 KiB too).
pub const MAX_CAPSULE_DATA: u32 = crate::INLINE_DATA_SIZE;

/// Idle time before the kernel probes a quiet connection (TCP keep-alive),
/// then the time between probes. A host with keep-alive off (KATO 0, or a
/// KATO of days) that loses power sends no FIN: only the socket can tell,
/// and the core's probes ask it ([`crate::queue::QueueCore`]'s
/// `Action::Probe`).
pub const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(10);
/// Time between keep-alive probes.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long data we sent (or a keep-alive probe) may stay unacknowledged
/// before the kernel gives up on the host (TCP_USER_TIMEOUT): without it a
/// vanished host's connection retransmits for some 15 minutes.
pub const USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sets an accepted connection's liveness: keep-alive probes after
/// [`KEEPALIVE_IDLE`], the host given up after [`USER_TIMEOUT`] without an
/// acknowledgement, no Nagle delay.
pub fn tune(stream: &std::net::TcpStream) -> nix::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    let secs = |d: std::time::Duration| d.as_secs() as u32;
    setsockopt(stream, sockopt::TcpNoDelay, &true)?;
    setsockopt(stream, sockopt::KeepAlive, &true)?;
    setsockopt(stream, sockopt::TcpKeepIdle, &secs(KEEPALIVE_IDLE))?;
    setsockopt(stream, sockopt::TcpKeepInterval, &secs(KEEPALIVE_INTERVAL))?;
    setsockopt(stream, sockopt::TcpKeepCount, &3)?;
    setsockopt(
        stream,
        sockopt::TcpUserTimeout,
        &(USER_TIMEOUT.as_millis() as u32),
    )
}

/// A connection a listener accepted, for a worker.
pub struct NewSocket {
    /// The socket (non-blocking).
    pub stream: std::net::TcpStream,
    /// The host's address.
    pub peer: SocketAddr,
    /// Ours.
    pub local: SocketAddr,
    /// Its place among the queues not yet connected.
    pub pending: Pending,
    /// The TLS identity its host proved (the socket is under kTLS).
    pub tls: Option<Arc<crate::model::tls_keys::Proven>>,
}

/// Where a listener leaves NVMe/TCP connections for one worker.
pub type Inbox = crate::worker::Inbox<NewSocket>;

/// What the TCP listeners and the workers share.
pub struct TcpShared {
    /// Queues not yet connected, capped per peer and in all (RDMA's too).
    pub admission: Arc<Admission>,
    /// Each worker's inbox.
    pub inboxes: Vec<Arc<Inbox>>,
    next: AtomicUsize,
}

impl TcpShared {
    /// The shared part for workers with `inboxes`.
    pub fn new(admission: Arc<Admission>, inboxes: Vec<Arc<Inbox>>) -> Arc<TcpShared> {
        Arc::new(TcpShared {
            admission,
            inboxes,
            next: AtomicUsize::new(0),
        })
    }

    /// The inbox of the worker that takes the next connection: in turn (a
    /// connection's queue id is known only from its Connect).
    pub fn assign(&self) -> Option<&Arc<Inbox>> {
        let n = self.inboxes.len();
        (n > 0).then(|| &self.inboxes[self.next.fetch_add(1, Ordering::Relaxed) % n])
    }
}

#[cfg(test)]
mod tests;
