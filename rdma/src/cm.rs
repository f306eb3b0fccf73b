//! RDMA connection manager: event channels, ids, and events.

use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

use nix::sys::socket::{SockaddrIn, SockaddrIn6, SockaddrLike, SockaddrStorage};
use rdma_sys::*;

use crate::completion::CompletionQueue;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::fd::{set_nonblocking, wait_readable};
use crate::memory::ProtectionDomain;
use crate::qp::{QpCaps, QueuePair, SharedReceiveQueue};

/// An RDMA-CM event channel: the file descriptor on which a set of ids report
/// their connection events.
pub struct EventChannel {
    raw: *mut rdma_event_channel,
}

// SAFETY: librdmacm event channels may be used from any thread.
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

/// Connection event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    /// Address resolved (active side).
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// Route resolved (active side).
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A peer asks to connect (passive side); the event carries the new id.
    ConnectRequest,
    /// Connection response (active side without QP).
    ConnectResponse,
    /// Connection error.
    ConnectError,
    /// Peer unreachable.
    Unreachable,
    /// Peer rejected the connection.
    Rejected,
    /// Connection established.
    Established,
    /// Connection closed.
    Disconnected,
    /// Device removed.
    DeviceRemoval,
    /// Timewait exited: the QP may be reused.
    TimewaitExit,
    /// Any other event.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(t: u32) -> CmEventKind {
        use rdma_cm_event_type::*;
        match t {
            RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            o => CmEventKind::Other(o),
        }
    }
}

/// A connection event, copied out of librdmacm and acknowledged.
pub struct CmEvent {
    /// Event type.
    pub kind: CmEventKind,
    /// Status (e.g. reject reason for `Rejected`).
    pub status: i32,
    /// For `ConnectRequest`: the new id, owned by the receiver of the event.
    pub new_id: Option<CmId>,
    /// Private data carried by the event (connect request, accept, reject).
    pub private_data: Vec<u8>,
    /// Responder resources the peer offers.
    pub responder_resources: u8,
    /// Initiator depth the peer asks for.
    pub initiator_depth: u8,
    /// The id the event concerns, as [`CmId::key`] gives it (for
    /// `ConnectRequest`, the listening id). Tells apart the ids that share a
    /// channel.
    pub id_key: usize,
}

impl EventChannel {
    /// Creates a channel.
    pub fn new() -> Result<Arc<EventChannel>> {
        // SAFETY: no arguments; the result is checked.
        let raw = unsafe { rdma_create_event_channel() };
        if raw.is_null() {
            return Err(Error::last("rdma_create_event_channel"));
        }
        Ok(Arc::new(EventChannel { raw }))
    }

    /// The file descriptor (readable when an event is pending).
    pub fn fd(&self) -> RawFd {
        // SAFETY: raw is live.
        unsafe { (*self.raw).fd }
    }

    /// Makes `get_event` non-blocking (it then returns `Ok(None)` when idle).
    pub fn set_nonblocking(&self) -> Result<()> {
        set_nonblocking(self.fd())
    }

    /// Waits up to `timeout` for the next event (`Ok(None)` on timeout). Works on
    /// blocking and non-blocking channels alike.
    pub fn wait_event(self: &Arc<Self>, timeout: std::time::Duration) -> Result<Option<CmEvent>> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        if !wait_readable(self.fd(), ms, "poll(rdma_cm channel)")? {
            return Ok(None);
        }
        self.get_event()
    }

    /// Waits up to `timeout` for the next event and expects it to be `want`
    /// (the steps of connection bring-up). Any other event, a timeout, or a
    /// channel failure is an error.
    pub fn wait_for(
        self: &Arc<Self>,
        want: CmEventKind,
        timeout: std::time::Duration,
    ) -> std::result::Result<CmEvent, WaitError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(WaitError::Timeout { want, timeout });
            }
            match self.wait_event(left) {
                Ok(Some(ev)) if ev.kind == want => return Ok(ev),
                Ok(Some(ev)) => {
                    return Err(WaitError::Other {
                        kind: ev.kind,
                        status: ev.status,
                    })
                }
                Ok(None) => continue,
                Err(e) => return Err(WaitError::Channel(e)),
            }
        }
    }

    /// Waits for (or, if non-blocking, polls for) the next event.
    pub fn get_event(self: &Arc<Self>) -> Result<Option<CmEvent>> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: raw is live; ev is a valid out pointer.
        let r = unsafe { rdma_get_cm_event(self.raw, &mut ev) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(nix::errno::Errno::EAGAIN as i32) {
                return Ok(None);
            }
            return Err(Error::Os {
                call: "rdma_get_cm_event",
                source: e,
            });
        }
        // SAFETY: ev points at a live event until it is acked below.
        let out = unsafe {
            let e = &*ev;
            let kind = CmEventKind::from_raw(e.event);
            let conn = e.param.conn;
            let private_data = if !conn.private_data.is_null() && conn.private_data_len > 0 {
                std::slice::from_raw_parts(
                    conn.private_data as *const u8,
                    conn.private_data_len as usize,
                )
                .to_vec()
            } else {
                Vec::new()
            };
            let id_key = if kind == CmEventKind::ConnectRequest {
                e.listen_id as usize
            } else {
                e.id as usize
            };
            let new_id = if kind == CmEventKind::ConnectRequest {
                Some(CmId {
                    raw: e.id,
                    channel: self.clone(),
                    qp_res: None,
                })
            } else {
                None
            };
            CmEvent {
                kind,
                status: e.status,
                new_id,
                private_data,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                id_key,
            }
        };
        // SAFETY: acking the event obtained above exactly once.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }
}

/// Why [`EventChannel::wait_for`] did not see the event it waited for.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Another event came first.
    #[error("{kind:?} (status {status})")]
    Other {
        /// The event that came.
        kind: CmEventKind,
        /// Its status (e.g. the reject reason).
        status: i32,
    },
    /// Nothing came in time.
    #[error("no {want:?} event within {timeout:?}")]
    Timeout {
        /// The event waited for.
        want: CmEventKind,
        /// How long.
        timeout: std::time::Duration,
    },
    /// The channel failed.
    #[error("{0}")]
    Channel(Error),
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc to it, so none is left.
        unsafe { rdma_destroy_event_channel(self.raw) };
    }
}

struct QpResources {
    lane: Arc<crate::lane::Lane>,
    _cq: Arc<CompletionQueue>,
    _pd: Arc<ProtectionDomain>,
    _srq: Option<Arc<SharedReceiveQueue>>,
}

/// Optional queue pair settings beyond [`QpCaps`].
#[derive(Default, Clone)]
pub struct QpOptions {
    /// Take receives from this shared receive queue instead of the QP's own.
    pub srq: Option<Arc<SharedReceiveQueue>>,
    /// Bytes of data a send may carry inline (0: none). If the device refuses
    /// the size, the QP is created without inline data.
    pub max_inline_data: u32,
}

/// An RDMA-CM id (listening, or one connection). Destroying it destroys its QP
/// first; it keeps its CQ, PD and event channel alive until then.
pub struct CmId {
    raw: *mut rdma_cm_id,
    qp_res: Option<QpResources>,
    channel: Arc<EventChannel>,
}

// SAFETY: a cm id may be moved to and used from another thread; librdmacm
// serialises its internal state.
unsafe impl Send for CmId {}

/// Connection parameters for accept.
#[derive(Debug, Clone, Copy)]
pub struct ConnParams<'a> {
    /// Private data (at most 196 bytes for accept, 148 for reject on IB/RoCE).
    pub private_data: &'a [u8],
    /// Outstanding RDMA READs this side accepts as responder.
    pub responder_resources: u8,
    /// Outstanding RDMA READs this side issues.
    pub initiator_depth: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry_count: u8,
    /// Transport retry count.
    pub retry_count: u8,
}

fn conn_param(p: &ConnParams<'_>) -> rdma_conn_param {
    // SAFETY: plain data; zero is a valid value.
    let mut cp: rdma_conn_param = unsafe { std::mem::zeroed() };
    cp.private_data = p.private_data.as_ptr() as *const std::ffi::c_void;
    cp.private_data_len = p.private_data.len().min(255) as u8;
    cp.responder_resources = p.responder_resources;
    cp.initiator_depth = p.initiator_depth;
    cp.flow_control = 1;
    cp.retry_count = p.retry_count;
    cp.rnr_retry_count = p.rnr_retry_count;
    cp
}

/// The C form of `addr`, for librdmacm (which copies what it keeps).
fn to_sockaddr(addr: SocketAddr) -> SockaddrStorage {
    SockaddrStorage::from(addr)
}

/// A pointer librdmacm takes; it only reads through it. (`libc::sockaddr`:
/// the type rdma-sys's bindings use.)
fn sockaddr_ptr(ss: &SockaddrStorage) -> *mut libc::sockaddr {
    ss.as_ptr() as *mut libc::sockaddr
}

/// Reads the IPv4 or IPv6 address at `sa` (None for null or another family).
///
/// Reads only as much as the family says: nix's `SockaddrStorage` accessors
/// would read bytes of the storage past a `sockaddr_in` (the length check of
/// a Unix address), which `from_raw` left uninitialized (Miri: undefined
/// behaviour).
///
/// # Safety
/// `sa` is null or points at a sockaddr as large as its family says.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: the family field is there.
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        // SAFETY: an AF_INET sockaddr is a sockaddr_in (caller's contract).
        libc::AF_INET => {
            unsafe { SockaddrIn::from_raw(sa, None) }.map(|a| SocketAddr::V4(SocketAddrV4::from(a)))
        }
        // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6 (caller's contract).
        libc::AF_INET6 => unsafe { SockaddrIn6::from_raw(sa, None) }
            .map(|a| SocketAddr::V6(SocketAddrV6::from(a))),
        _ => None,
    }
}

impl CmId {
    /// Creates an id on `channel` (TCP port space, RC).
    pub fn new(channel: &Arc<EventChannel>) -> Result<CmId> {
        let mut raw: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: channel is live; raw is a valid out pointer.
        let r = unsafe {
            rdma_create_id(
                channel.raw,
                &mut raw,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if r != 0 {
            return Err(Error::last("rdma_create_id"));
        }
        Ok(CmId {
            raw,
            qp_res: None,
            channel: channel.clone(),
        })
    }

    /// Binds to a local address.
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let ss = to_sockaddr(addr);
        // SAFETY: raw is live; ss is a valid sockaddr for the call.
        let r = unsafe { rdma_bind_addr(self.raw, sockaddr_ptr(&ss)) };
        if r != 0 {
            return Err(Error::last("rdma_bind_addr"));
        }
        Ok(())
    }

    /// Resolves `dst` (and optionally the local `src`) to a device and port
    /// (active side). Completes with an `AddrResolved` or `AddrError` event.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> Result<()> {
        let s = src.map(to_sockaddr);
        let d = to_sockaddr(dst);
        let sp = s.as_ref().map_or(ptr::null_mut(), sockaddr_ptr);
        // SAFETY: raw is live; the sockaddrs live for the call (librdmacm copies them).
        let r = unsafe { rdma_resolve_addr(self.raw, sp, sockaddr_ptr(&d), timeout_ms) };
        if r != 0 {
            return Err(Error::last("rdma_resolve_addr"));
        }
        Ok(())
    }

    /// Resolves the route to the resolved address (active side). Completes with
    /// a `RouteResolved` or `RouteError` event.
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        // SAFETY: raw is live and its address is resolved.
        if unsafe { rdma_resolve_route(self.raw, timeout_ms) } != 0 {
            return Err(Error::last("rdma_resolve_route"));
        }
        Ok(())
    }

    /// Sends a connection request with private data (active side, after the
    /// route is resolved and the QP created). Completes with `Established`,
    /// `Rejected`, `Unreachable` or `ConnectError`.
    pub fn connect(&self, p: &ConnParams<'_>) -> Result<()> {
        let mut cp = conn_param(p);
        // SAFETY: raw is live; cp and its private data live for the call.
        if unsafe { rdma_connect(self.raw, &mut cp) } != 0 {
            return Err(Error::last("rdma_connect"));
        }
        Ok(())
    }

    /// Starts listening.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: raw is live and bound.
        if unsafe { rdma_listen(self.raw, backlog) } != 0 {
            return Err(Error::last("rdma_listen"));
        }
        Ok(())
    }

    /// The device context this id is bound to (None before address binding
    /// to a device, or if the device went away).
    pub fn context(&self) -> Option<Context> {
        // SAFETY: raw is live.
        let v = unsafe { (*self.raw).verbs };
        Context::anchored(v)
    }

    /// Names the device this id is bound to (its verbs context's address),
    /// without touching it: usable after the device went away.
    pub fn device_key(&self) -> Option<usize> {
        // SAFETY: raw is live; the pointer is only read, not followed.
        let v = unsafe { (*self.raw).verbs };
        (!v.is_null()).then_some(v as usize)
    }

    /// Moves the id's events to another channel.
    pub fn migrate(&mut self, channel: &Arc<EventChannel>) -> Result<()> {
        // SAFETY: both live; no event of this id is held unacked (events are acked on receipt).
        if unsafe { rdma_migrate_id(self.raw, channel.raw) } != 0 {
            return Err(Error::last("rdma_migrate_id"));
        }
        self.channel = channel.clone();
        Ok(())
    }

    /// Creates the RC queue pair of this id, with `cq` for both send and receive.
    pub fn create_qp(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<()> {
        self.create_qp_with(pd, cq, caps, QpOptions::default())
            .map(|_| ())
    }

    /// Creates the RC queue pair of this id with [`QpOptions`]. Returns the
    /// inline data size the device granted (0 when it refused the one asked).
    pub fn create_qp_with(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        caps: QpCaps,
        opts: QpOptions,
    ) -> Result<u32> {
        if self.qp_res.is_some() {
            return Err(Error::Invalid {
                call: "rdma_create_qp",
                reason: "the id already has a queue pair",
            });
        }
        let attempt = |inline: u32| {
            // SAFETY: plain data.
            let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            attr.send_cq = cq.as_ptr();
            attr.recv_cq = cq.as_ptr();
            attr.qp_type = ibv_qp_type::IBV_QPT_RC;
            attr.cap.max_send_wr = caps.max_send_wr;
            attr.cap.max_recv_wr = if opts.srq.is_some() {
                0
            } else {
                caps.max_recv_wr
            };
            attr.cap.max_send_sge = caps.max_send_sge;
            attr.cap.max_recv_sge = if opts.srq.is_some() {
                0
            } else {
                caps.max_recv_sge
            };
            attr.cap.max_inline_data = inline;
            if let Some(srq) = &opts.srq {
                attr.srq = srq.as_ptr();
            }
            // SAFETY: raw, pd, cq (and srq) are live; attr is valid for the call.
            if unsafe { rdma_create_qp(self.raw, pd.as_ptr(), &mut attr) } != 0 {
                return Err(Error::last("rdma_create_qp"));
            }
            Ok(attr.cap.max_inline_data)
        };
        let granted = match attempt(opts.max_inline_data) {
            Ok(n) => n,
            Err(_) if opts.max_inline_data > 0 => attempt(0)?,
            Err(e) => return Err(e),
        };
        self.qp_res = Some(QpResources {
            lane: Arc::default(),
            _cq: cq.clone(),
            _pd: pd.clone(),
            _srq: opts.srq,
        });
        Ok(granted)
    }

    /// A key naming this id among those on its channel (see [`CmEvent::id_key`]).
    pub fn key(&self) -> usize {
        self.raw as usize
    }

    /// The queue pair, if created.
    pub fn qp(&self) -> Option<QueuePair<'_>> {
        let res = self.qp_res.as_ref()?;
        // SAFETY: raw is live; qp was set by rdma_create_qp.
        let qp = unsafe { (*self.raw).qp };
        (!qp.is_null()).then_some(QueuePair {
            raw: qp,
            lane: &res.lane,
        })
    }

    /// Accepts a connection request.
    pub fn accept(&self, p: &ConnParams<'_>) -> Result<()> {
        let mut cp = conn_param(p);
        // SAFETY: raw is live; cp and its private data live for the call.
        if unsafe { rdma_accept(self.raw, &mut cp) } != 0 {
            return Err(Error::last("rdma_accept"));
        }
        Ok(())
    }

    /// Rejects a connection request with private data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        // SAFETY: raw is live; the data lives for the call.
        let r = unsafe {
            rdma_reject(
                self.raw,
                private_data.as_ptr() as *const std::ffi::c_void,
                private_data.len().min(255) as u8,
            )
        };
        if r != 0 {
            return Err(Error::last("rdma_reject"));
        }
        Ok(())
    }

    /// Starts disconnecting (the QP moves to the error state; pending WRs flush).
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: raw is live.
        if unsafe { rdma_disconnect(self.raw) } != 0 {
            return Err(Error::last("rdma_disconnect"));
        }
        Ok(())
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: raw is live; route.addr is inline data of the id, a union as
        // large as sockaddr_storage whose family field says what it holds.
        unsafe {
            from_sockaddr(&(*self.raw).route.addr.dst_addr_union.dst_addr as *const libc::sockaddr)
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        unsafe {
            from_sockaddr(&(*self.raw).route.addr.src_addr_union.src_addr as *const libc::sockaddr)
        }
    }

    /// The event channel of this id.
    pub fn channel(&self) -> &Arc<EventChannel> {
        &self.channel
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: destroying the QP (if any) and then the id created/owned by self;
        // the CQ, PD and channel are released after (fields drop after this).
        // A send ticket still out is about to post (lane.rs): its post returns
        // before the queue pair goes.
        unsafe {
            if let Some(res) = &self.qp_res {
                res.lane.wait_idle();
                rdma_destroy_qp(self.raw);
            }
            rdma_destroy_id(self.raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_the_c_form() {
        for a in [
            "10.0.2.15:4420",
            "[fe80::1%3]:4421",
            "[2001:db8::7]:1",
            "0.0.0.0:0",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            let ss = to_sockaddr(addr);
            // SAFETY: ss is a live sockaddr of its family's size.
            let back = unsafe { from_sockaddr(sockaddr_ptr(&ss)) };
            assert_eq!(back, Some(addr), "{a}");
        }
        // SAFETY: null is allowed.
        assert_eq!(unsafe { from_sockaddr(ptr::null()) }, None);
    }
}
