//! The controller: registers (CAP/VS/CC/CSTS) with the enable and shutdown
//! state machine, features, keep-alive, asynchronous events and the error log.
//! No I/O: the transport feeds it commands and the time.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nvme::fabrics::{cc, csts, prop};
use nvme::log::ErrorLogEntry;
use nvme::Status;

use crate::base::wake::Waker;
use crate::counters::host::{CtrlIo, IoTotals};
use crate::model::namespace::Namespace;
use crate::model::subsystem::Subsystem;

/// NVMe version 1.3.0.
pub const VERSION: u32 = 0x0001_0300;
/// Keep-alive timeout applied to discovery controllers that ask for none.
pub const DISCOVERY_KATO_MS: u32 = 120_000;
/// Number of error log entries kept (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;

/// The CAP register value.
pub fn cap() -> u64 {
    let mqes = (crate::MAX_QUEUE_SIZE - 1) as u64;
    let cqr = 1u64 << 16;
    let to = 15u64 << 24; // 7.5 s in 500 ms units
    let css_nvm = 1u64 << 37;
    mqes | cqr | to | css_nvm
}

/// A handle by which a controller stops one of its queues and wakes the
/// worker that serves it.
#[derive(Debug)]
pub struct QueueLink {
    /// Queue id.
    pub qid: u16,
    kill: AtomicBool,
    waker: Arc<Waker>,
}

impl QueueLink {
    /// A link for queue `qid`, served by the worker that `waker` wakes.
    pub fn new(qid: u16, waker: Arc<Waker>) -> Arc<QueueLink> {
        Arc::new(QueueLink {
            qid,
            kill: AtomicBool::new(false),
            waker,
        })
    }
    /// Wakes the worker of the queue.
    pub fn wake(&self) {
        self.waker.wake();
    }
    /// Asks the queue to disconnect, and wakes its worker.
    pub fn kill(&self) {
        self.kill.store(true, Ordering::Release);
        self.wake();
    }
    /// Whether the queue was asked to disconnect.
    pub fn killed(&self) -> bool {
        self.kill.load(Ordering::Acquire)
    }
    /// Milliseconds since the queue's worker last went round its loop.
    pub fn silent_ms(&self) -> u64 {
        self.waker.silent_ms()
    }
}

/// Mutable controller state.
#[derive(Debug)]
pub struct CtrlState {
    /// Controller Configuration.
    pub cc: u32,
    /// Controller Status.
    pub csts: u32,
    /// Keep-alive timeout (ms, 0 = disabled).
    pub kato_ms: u32,
    /// Last keep-alive (or admin command).
    pub last_keepalive: Instant,
    /// I/O queues granted (count, not 0-based).
    pub io_queues: u16,
    /// Asynchronous event configuration.
    pub aen_config: u32,
    /// Parked Asynchronous Event Request command ids.
    pub aers: Vec<u16>,
    /// Events waiting for an AER (completion result values).
    pub events: VecDeque<u32>,
    /// Changed namespace list (cleared when read).
    pub changed_ns: Vec<u32>,
    /// A namespace-changed event was raised and the log not yet read: further
    /// changes only extend the list.
    pub ns_event_masked: bool,
    /// An ANA change notice is outstanding (until the ANA log is read).
    pub ana_event_masked: bool,
    /// A discovery log change notice is outstanding (until the log is read).
    pub disc_event_masked: bool,
    /// What the host last read of the discovery log (a digest of its
    /// entries); `None`: never read it.
    pub disc_seen: Option<u64>,
    /// Reservation notices and their masks.
    pub resv_notices: crate::reservation::notices::NoticeLog,
    /// A reservation log notice is outstanding (until the log is read).
    pub resv_event_masked: bool,
    /// The host honours Command Retry Delay (Host Behavior Support, ACRE).
    pub acre: bool,
    /// Error log.
    pub errors: VecDeque<ErrorLogEntry>,
    /// Error count (unique id of the last entry).
    pub error_count: u64,
    /// The controller failed (keep-alive expiry, fatal transport error).
    pub failed: bool,
}

/// What a property write asks of the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyEffect {
    /// Nothing beyond the register change.
    None,
    /// The host enabled the controller.
    Enabled,
    /// The host disabled the controller (reset): I/O queues must go.
    Reset,
    /// The host asked for shutdown: flush, then report complete.
    Shutdown,
}

impl CtrlState {
    /// Fresh state with a keep-alive timeout.
    pub fn new(kato_ms: u32, now: Instant) -> CtrlState {
        CtrlState {
            cc: 0,
            csts: 0,
            kato_ms,
            last_keepalive: now,
            io_queues: crate::MAX_IO_QUEUES,
            aen_config: 0,
            aers: Vec::new(),
            events: VecDeque::new(),
            changed_ns: Vec::new(),
            ns_event_masked: false,
            ana_event_masked: false,
            disc_event_masked: false,
            disc_seen: None,
            resv_notices: Default::default(),
            resv_event_masked: false,
            acre: false,
            errors: VecDeque::new(),
            error_count: 0,
            failed: false,
        }
    }

    /// Whether CSTS.RDY is set.
    pub fn ready(&self) -> bool {
        self.csts & csts::RDY != 0
    }

    /// Property Get.
    pub fn property_get(&self, offset: u32, eight: bool) -> Result<u64, Status> {
        match (offset, eight) {
            (prop::CAP, true) => Ok(cap()),
            (prop::VS, false) => Ok(VERSION as u64),
            (prop::CC, false) => Ok(self.cc as u64),
            (prop::CSTS, false) => Ok(self.csts as u64),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Property Set: only CC is writable.
    pub fn property_set(
        &mut self,
        offset: u32,
        eight: bool,
        value: u64,
    ) -> Result<PropertyEffect, Status> {
        if offset != prop::CC || eight {
            return Err(Status::INVALID_FIELD);
        }
        let new = value as u32;
        let old = self.cc;
        self.cc = new;
        let en_on = new & cc::EN != 0 && old & cc::EN == 0;
        let en_off = new & cc::EN == 0 && old & cc::EN != 0;
        let shn_new = new & cc::SHN_MASK != 0 && old & cc::SHN_MASK == 0;
        if en_on {
            let field = |shift: u32, bits: u32| (new >> shift) & ((1 << bits) - 1);
            let ok = field(cc::IOSQES_SHIFT, 4) == 6
                && field(cc::IOCQES_SHIFT, 4) == 4
                && field(cc::MPS_SHIFT, 4) == 0
                && field(cc::AMS_SHIFT, 3) == 0
                && field(cc::CSS_SHIFT, 3) == 0;
            if ok {
                self.csts = csts::RDY;
            } else {
                self.csts |= csts::CFS;
            }
            return Ok(PropertyEffect::Enabled);
        }
        if en_off {
            self.csts &= !(csts::RDY | csts::SHST_MASK | csts::CFS);
            return Ok(PropertyEffect::Reset);
        }
        if shn_new {
            // Complete only once the flushes of shutdown processing are done
            // (see `shutdown_done`).
            self.csts = (self.csts & !csts::SHST_MASK) | csts::SHST_OCCURRING;
            self.csts &= !csts::RDY;
            return Ok(PropertyEffect::Shutdown);
        }
        Ok(PropertyEffect::None)
    }

    /// The flushes of a host shutdown (CC.SHN) finished. `ok`: every one
    /// succeeded, and shutdown processing is complete (CSTS.SHST). Otherwise
    /// data acknowledged to the host may not be durable: the controller reports
    /// a fatal status (CSTS.CFS) and never "complete", so the host sees the
    /// failure rather than a clean shutdown.
    pub fn shutdown_done(&mut self, ok: bool) {
        if self.csts & csts::SHST_MASK != csts::SHST_OCCURRING || self.csts & csts::CFS != 0 {
            return;
        }
        if ok {
            self.csts = (self.csts & !csts::SHST_MASK) | csts::SHST_COMPLETE;
        } else {
            self.csts |= csts::CFS;
        }
    }

    /// Whether the keep-alive timer expired at `now`.
    pub fn keep_alive_expired(&self, now: Instant) -> bool {
        self.kato_ms != 0
            && now.saturating_duration_since(self.last_keepalive)
                > Duration::from_millis(self.kato_ms as u64)
    }

    /// Records a failed command in the error log.
    pub fn log_error(&mut self, sqid: u16, cid: u16, status: Status, nsid: u32) {
        self.error_count += 1;
        if self.errors.len() == ERROR_LOG_ENTRIES {
            self.errors.pop_back();
        }
        self.errors.push_front(ErrorLogEntry {
            error_count: self.error_count,
            sqid,
            cid,
            status: status.to_field() << 1,
            param_error_location: 0xFFFF,
            lba: 0,
            nsid,
        });
    }

    /// Queues an asynchronous event; returns the (cid, result) pairs of parked
    /// AERs that can now complete.
    pub fn push_event(&mut self, result: u32) -> Vec<(u16, u32)> {
        self.events.push_back(result);
        self.match_events()
    }

    /// Records changed namespaces in the changed-namespace log and raises a
    /// Namespace Attribute Changed notice when the host enabled it (Set
    /// Features, Asynchronous Event Configuration bit 8) and no such notice
    /// is outstanding. Returns whether an event was queued.
    pub fn ns_changed(&mut self, nsids: &[u32]) -> bool {
        for &n in nsids {
            if !self.changed_ns.contains(&n) {
                self.changed_ns.push(n);
            }
        }
        self.changed_ns.sort_unstable();
        if self.aen_config & nvme::identify::oaes::NS_ATTR == 0 || self.ns_event_masked {
            return false;
        }
        self.ns_event_masked = true;
        use nvme::log::aen;
        use nvme::opcode::lid;
        self.events.push_back(aen::result(
            aen::TYPE_NOTICE,
            aen::INFO_NS_CHANGED,
            lid::CHANGED_NS,
        ));
        true
    }

    /// Raises a Discovery Log Page Change notice when the host enabled it
    /// (Asynchronous Event Configuration bit 31) and none is outstanding.
    /// Returns whether an event was queued.
    pub fn disc_changed(&mut self) -> bool {
        if self.aen_config & nvme::identify::oaes::DISC_CHANGE == 0 || self.disc_event_masked {
            return false;
        }
        self.disc_event_masked = true;
        use nvme::log::aen;
        self.events.push_back(aen::result(
            aen::TYPE_NOTICE,
            aen::INFO_DISC_CHANGE,
            nvme::opcode::lid::DISCOVERY,
        ));
        true
    }

    /// Raises an Asymmetric Namespace Access Change notice when the host
    /// enabled it (Asynchronous Event Configuration bit 11) and none is
    /// outstanding. Returns whether an event was queued.
    pub fn ana_changed(&mut self) -> bool {
        if self.aen_config & nvme::identify::oaes::ANA_CHANGE == 0 || self.ana_event_masked {
            return false;
        }
        self.ana_event_masked = true;
        use nvme::log::aen;
        self.events.push_back(aen::result(
            aen::TYPE_NOTICE,
            aen::INFO_ANA_CHANGE,
            nvme::opcode::lid::ANA,
        ));
        true
    }

    /// Logs a reservation notice of `kind` for namespace `nsid` (unless the
    /// host masked it) and raises the Reservation Log Page Available event
    /// when none is outstanding. Returns whether an event was queued.
    pub fn resv_notice(&mut self, nsid: u32, kind: u8) -> bool {
        if !self.resv_notices.push(nsid, kind) || self.resv_event_masked {
            return false;
        }
        self.raise_resv_event();
        true
    }

    /// Queues the Reservation Log Page Available event (masked until the
    /// log is read).
    fn raise_resv_event(&mut self) {
        self.resv_event_masked = true;
        use nvme::reservation::aen;
        self.events.push_back(nvme::log::aen::result(
            aen::TYPE_IO_SPECIFIC,
            aen::INFO_RESV_LOG,
            nvme::opcode::lid::RESV_NOTIFICATION,
        ));
    }

    /// The Reservation Notification log was read (without Retain
    /// Asynchronous Event): takes its oldest notice, and re-arms the event
    /// for the notices left, if any.
    pub fn take_resv_notice(&mut self, retain: bool) -> nvme::reservation::Notification {
        if retain {
            return self.resv_notices.peek();
        }
        let n = self.resv_notices.take();
        self.resv_event_masked = false;
        if !self.resv_notices.is_empty() {
            self.raise_resv_event();
        }
        n
    }

    /// The changed-namespace log was read: clears it (unless `retain`) and
    /// unmasks the notice.
    pub fn take_changed_ns(&mut self, retain: bool) -> Vec<u32> {
        let v = self.changed_ns.clone();
        if !retain {
            self.changed_ns.clear();
            self.ns_event_masked = false;
        }
        v
    }

    /// Pairs queued events with parked AERs.
    pub fn match_events(&mut self) -> Vec<(u16, u32)> {
        let mut out = Vec::new();
        while !self.aers.is_empty() && !self.events.is_empty() {
            let cid = self.aers.remove(0);
            let ev = self.events.pop_front().unwrap_or_default();
            out.push((cid, ev));
        }
        out
    }
}

/// A controller: one host association with a subsystem.
#[derive(Debug)]
pub struct Controller {
    /// Controller id.
    pub cntlid: u16,
    /// The subsystem.
    pub subsys: Arc<Subsystem>,
    /// Host NQN.
    pub hostnqn: String,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// The tag of its host NQN that registrations keep (computed once:
    /// the reservation check of every I/O compares it).
    pub nqn_tag: crate::reservation::state::NqnTag,
    state: Mutex<CtrlState>,
    /// CSTS.RDY, mirrored so the I/O path reads it without taking the lock.
    ready: AtomicBool,
    links: Mutex<Vec<Arc<QueueLink>>>,
    /// Its host's I/O: commands, bytes, latency, errors (SMART / Health,
    /// status, per-host series).
    io: Arc<CtrlIo>,
    /// The host's and our transport address, from its admin queue.
    addrs: std::sync::OnceLock<(SocketAddr, SocketAddr)>,
    /// When the controller was created (Connect on the admin queue).
    pub created: Instant,
    /// The host lost its access (a reload removed the subsystem or the host):
    /// every queue is disconnected and none may attach any more.
    revoked: AtomicBool,
    /// The listener (port id - 1) its host connected through: the ANA
    /// states it reports are that listener's.
    port: std::sync::OnceLock<usize>,
    /// The TLS identity its admin queue's host proved (recorded once).
    tls: std::sync::OnceLock<Option<tlspsk::Identity>>,
    /// Whether its queues must authenticate, and how the admin queue did.
    pub auth: crate::model::auth::CtrlAuth,
    /// The address its admin queue's Connect came from (none on the
    /// in-process loopback): discovery controllers are counted by it.
    pub peer: Option<std::net::IpAddr>,
}

impl Controller {
    /// Creates controller `cntlid` of `subsys`, as `new` asks.
    pub fn new(
        cntlid: u16,
        subsys: Arc<Subsystem>,
        new: &crate::model::subsystem::NewController<'_>,
    ) -> Controller {
        let hostnqn = new.hostnqn.to_string();
        // Discovery controllers do no I/O: no host series of their own.
        let io = match subsys.kind {
            crate::model::subsystem::SubsystemKind::Nvm => {
                crate::counters::host::registry().controller(&subsys.nqn, &hostnqn, new.now)
            }
            crate::model::subsystem::SubsystemKind::Discovery => Arc::default(),
        };
        Controller {
            cntlid,
            subsys,
            nqn_tag: crate::reservation::state::nqn_tag(&hostnqn),
            hostnqn,
            hostid: new.hostid,
            state: Mutex::new(CtrlState::new(new.kato_ms, new.now)),
            ready: AtomicBool::new(false),
            links: Mutex::new(Vec::new()),
            io,
            addrs: std::sync::OnceLock::new(),
            created: new.now,
            revoked: AtomicBool::new(false),
            port: std::sync::OnceLock::new(),
            tls: std::sync::OnceLock::new(),
            auth: Default::default(),
            peer: new.peer,
        }
    }

    /// Records the host's address and the local address it connected to
    /// (its admin queue's; the first call wins).
    pub fn set_addrs(&self, host: SocketAddr, local: SocketAddr) {
        let _ = self.addrs.set((host, local));
    }

    /// Records the listener its host connected through (the first call wins).
    pub fn set_port(&self, port: usize) {
        let _ = self.port.set(port);
    }

    /// The listener its host connected through (port id - 1; the first
    /// listener's when its transport did not say).
    pub fn port(&self) -> usize {
        self.port.get().copied().unwrap_or(0)
    }

    /// Records the TLS identity of its admin queue (none: plain).
    pub fn set_tls(&self, id: Option<&tlspsk::Identity>) {
        let _ = self.tls.set(id.cloned());
    }

    /// The TLS identity of its admin queue (none: plain).
    pub fn tls(&self) -> Option<&tlspsk::Identity> {
        self.tls.get().and_then(|t| t.as_ref())
    }

    /// The listener its host connected through, once recorded.
    pub fn listener(&self) -> Option<usize> {
        self.port.get().copied()
    }

    /// The host's address and the local address it connected to.
    pub fn addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.addrs.get().copied()
    }

    /// The qids of the attached queues, ascending (0 is the admin queue).
    pub fn qids(&self) -> Vec<u16> {
        let mut v: Vec<u16> = self.links().iter().map(|l| l.qid).collect();
        v.sort_unstable();
        v
    }

    /// Locks the state.
    pub fn state(&self) -> MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its host's I/O counts.
    pub fn io(&self) -> &CtrlIo {
        &self.io
    }

    /// What its host's I/O counted so far.
    pub fn io_totals(&self) -> IoTotals {
        self.io.totals()
    }

    /// `st` as this controller's host may see it: without Command Retry
    /// Delay unless the host enabled it (ACRE).
    pub fn retry_delay(&self, st: nvme::Status) -> nvme::Status {
        if self.state().acre {
            st
        } else {
            st.with_crd(0)
        }
    }

    /// Whether CSTS.RDY is set (lock-free; kept in step by [`Controller::sync_ready`]).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Mirrors CSTS.RDY of `st` (call with the state locked, after a register write).
    pub fn sync_ready(&self, st: &CtrlState) {
        self.ready.store(st.ready(), Ordering::Release);
    }

    fn links(&self) -> MutexGuard<'_, Vec<Arc<QueueLink>>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attaches a queue; fails with CONNECT_CTRL_BUSY if its qid is taken,
    /// CONNECT_INVALID_HOST if the host's access was revoked.
    pub fn attach(&self, link: Arc<QueueLink>) -> Result<(), Status> {
        let mut l = self.links();
        // Checked under the links lock: `revoke` sets the flag before it
        // takes the lock, so a queue either sees it or is disconnected by it.
        if self.revoked.load(Ordering::SeqCst) {
            return Err(Status::CONNECT_INVALID_HOST);
        }
        if l.iter().any(|x| x.qid == link.qid) {
            return Err(Status::CONNECT_CTRL_BUSY);
        }
        l.push(link);
        Ok(())
    }

    /// Detaches a queue.
    pub fn detach(&self, link: &Arc<QueueLink>) {
        self.links().retain(|x| !Arc::ptr_eq(x, link));
    }

    /// Number of attached queues (admin included).
    pub fn queue_count(&self) -> usize {
        self.links().len()
    }

    /// Takes the host's access away: disconnects every queue and refuses
    /// queues that try to attach later.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        self.kill_all();
    }

    /// Whether the host's access was revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
    }

    /// Disconnects every queue (controller failure or admin queue gone).
    pub fn kill_all(&self) {
        for l in self.links().iter() {
            l.kill();
        }
    }

    /// Disconnects the I/O queues only (controller reset).
    pub fn kill_io_queues(&self) {
        for l in self.links().iter().filter(|l| l.qid != 0) {
            l.kill();
        }
    }

    /// Namespaces of the subsystem changed (added, removed or replaced):
    /// records them and, if a notice is raised, wakes the admin queue to
    /// complete a parked Asynchronous Event Request with it.
    pub fn notify_ns_changed(&self, nsids: &[u32]) -> bool {
        let raised = self.state().ns_changed(nsids);
        if raised {
            crate::counters::meter().async_event(&self.subsys.nqn, "ns_changed");
            self.wake_admin();
        }
        raised
    }

    /// The discovery log its host would read changed: raises the notice and
    /// wakes the admin queue to complete a parked Asynchronous Event Request.
    pub fn notify_disc_changed(&self) -> bool {
        let raised = self.state().disc_changed();
        if raised {
            crate::counters::meter().async_event(&self.subsys.nqn, "discovery_change");
            self.wake_admin();
        }
        raised
    }

    /// The ANA states of its listener changed: raises the notice and wakes
    /// the admin queue to complete a parked Asynchronous Event Request.
    pub fn notify_ana_changed(&self) -> bool {
        let raised = self.state().ana_changed();
        if raised {
            crate::counters::meter().async_event(&self.subsys.nqn, "ana_change");
            self.wake_admin();
        }
        raised
    }

    /// Namespace `nsid` as its host sees it: `None` when the subsystem has
    /// none or does not show it to this host (the same to the host).
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.subsys
            .namespace(nsid)
            .filter(|n| n.visible_to(&self.hostnqn))
    }

    /// As [`Controller::namespace`], through a queue's cache (the I/O path).
    pub fn namespace_cached(
        &self,
        nsid: u32,
        cache: &mut crate::model::ns_cache::NsCache,
    ) -> Option<crate::model::ns_cache::NsRef> {
        self.subsys.namespace_for(nsid, &self.hostnqn, cache)
    }

    /// The namespaces its host sees, ordered by nsid.
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.subsys
            .namespaces()
            .iter()
            .filter(|n| n.visible_to(&self.hostnqn))
            .cloned()
            .collect()
    }

    /// A reservation notice for its host: logs it and, when an event is
    /// raised, wakes the admin queue to complete a parked Asynchronous Event
    /// Request. None for a namespace its host does not see.
    pub fn notify_reservation(&self, nsid: u32, kind: u8) {
        if self.namespace(nsid).is_none() {
            return;
        }
        if self.state().resv_notice(nsid, kind) {
            crate::counters::meter().async_event(&self.subsys.nqn, "reservation");
            self.wake_admin();
        }
    }

    /// Wakes the admin queue (an event is pending).
    pub fn wake_admin(&self) {
        if let Some(l) = self.links().iter().find(|l| l.qid == 0) {
            l.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc_enable() -> u64 {
        (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64
    }

    #[test]
    fn cap_value() {
        let c = cap();
        assert_eq!(c & 0xFFFF, 127);
        assert_eq!((c >> 24) & 0xFF, 15);
        assert_ne!(c & (1 << 37), 0);
        assert_eq!((c >> 48) & 0xF, 0, "MPSMIN must be 0 for the Linux host");
    }

    #[test]
    fn enable_disable_shutdown() {
        let mut s = CtrlState::new(5000, Instant::now());
        assert!(!s.ready());
        assert_eq!(s.property_get(prop::CAP, true), Ok(cap()));
        assert_eq!(s.property_get(prop::CAP, false), Err(Status::INVALID_FIELD));
        assert_eq!(s.property_get(prop::VS, false), Ok(VERSION as u64));
        assert_eq!(s.property_get(0x40, false), Err(Status::INVALID_FIELD));
        // write CC without EN first, as the Linux host does
        let cfg = cc_enable() & !1;
        assert_eq!(
            s.property_set(prop::CC, false, cfg),
            Ok(PropertyEffect::None)
        );
        assert_eq!(s.property_get(prop::CC, false), Ok(cfg));
        assert_eq!(
            s.property_set(prop::CC, false, cc_enable()),
            Ok(PropertyEffect::Enabled)
        );
        assert!(s.ready());
        assert_eq!(s.property_get(prop::CSTS, false), Ok(1));
        let shn = cc_enable() | (1 << cc::SHN_SHIFT) as u64;
        assert_eq!(
            s.property_set(prop::CC, false, shn),
            Ok(PropertyEffect::Shutdown)
        );
        // Not complete before the flushes are done.
        assert_eq!(s.csts & csts::SHST_MASK, csts::SHST_OCCURRING);
        s.shutdown_done(true);
        assert_eq!(s.csts & csts::SHST_MASK, csts::SHST_COMPLETE);
        assert_eq!(s.csts & csts::CFS, 0);
        assert_eq!(
            s.property_set(prop::CC, false, 0),
            Ok(PropertyEffect::Reset)
        );
        assert_eq!(s.csts, 0);
        assert_eq!(
            s.property_set(prop::CSTS, false, 1),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            s.property_set(prop::CC, true, 1),
            Err(Status::INVALID_FIELD)
        );
    }

    /// A flush at host shutdown failed: acknowledged writes may not be
    /// durable, so the controller never says the shutdown completed.
    #[test]
    fn failed_shutdown_flush_is_fatal_not_complete() {
        let mut s = CtrlState::new(0, Instant::now());
        s.property_set(prop::CC, false, cc_enable()).unwrap();
        let shn = cc_enable() | (1 << cc::SHN_SHIFT) as u64;
        assert_eq!(
            s.property_set(prop::CC, false, shn),
            Ok(PropertyEffect::Shutdown)
        );
        s.shutdown_done(false);
        assert_eq!(s.csts & csts::SHST_MASK, csts::SHST_OCCURRING);
        assert_ne!(s.csts & csts::CFS, 0);
        // A late report changes nothing.
        s.shutdown_done(true);
        assert_eq!(s.csts & csts::SHST_MASK, csts::SHST_OCCURRING);
    }

    #[test]
    fn bad_entry_sizes_set_cfs() {
        let mut s = CtrlState::new(0, Instant::now());
        let bad = (7 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64;
        s.property_set(prop::CC, false, bad).unwrap();
        assert!(!s.ready());
        assert_ne!(s.csts & csts::CFS, 0);
        let bad_mps = cc_enable() | (1 << cc::MPS_SHIFT) as u64;
        let mut s = CtrlState::new(0, Instant::now());
        s.property_set(prop::CC, false, bad_mps).unwrap();
        assert_ne!(s.csts & csts::CFS, 0);
    }

    #[test]
    fn keep_alive() {
        let t0 = Instant::now();
        let mut s = CtrlState::new(1000, t0);
        assert!(!s.keep_alive_expired(t0 + Duration::from_millis(999)));
        assert!(s.keep_alive_expired(t0 + Duration::from_millis(1001)));
        s.last_keepalive = t0 + Duration::from_millis(900);
        assert!(!s.keep_alive_expired(t0 + Duration::from_millis(1800)));
        s.kato_ms = 0;
        assert!(!s.keep_alive_expired(t0 + Duration::from_secs(100000)));
    }

    #[test]
    fn events_and_aers() {
        let mut s = CtrlState::new(0, Instant::now());
        assert!(s.push_event(0x40002).is_empty());
        s.aers.push(31);
        assert_eq!(s.match_events(), vec![(31, 0x40002)]);
        s.aers.push(30);
        assert!(s.match_events().is_empty());
        assert_eq!(s.push_event(7), vec![(30, 7)]);
    }

    #[test]
    fn namespace_change_notice_is_masked_until_the_log_is_read() {
        let mut s = CtrlState::new(0, Instant::now());
        // Not enabled by the host: only the log grows.
        assert!(!s.ns_changed(&[3]));
        assert!(s.events.is_empty());
        s.aen_config = nvme::identify::oaes::NS_ATTR;
        s.aers.push(9);
        assert!(s.ns_changed(&[2, 3]));
        assert_eq!(s.match_events(), vec![(9, 0x0004_0002)]);
        // Masked until the log is read.
        assert!(!s.ns_changed(&[5]));
        assert_eq!(s.take_changed_ns(true), vec![2, 3, 5]);
        assert!(!s.ns_changed(&[6]));
        assert_eq!(s.take_changed_ns(false), vec![2, 3, 5, 6]);
        assert!(s.changed_ns.is_empty());
        assert!(s.ns_changed(&[7]));
        assert_eq!(s.events.len(), 1);
    }

    #[test]
    fn error_log_is_bounded() {
        let mut s = CtrlState::new(0, Instant::now());
        for i in 0..100 {
            s.log_error(1, i, Status::LBA_RANGE, 1);
        }
        assert_eq!(s.errors.len(), ERROR_LOG_ENTRIES);
        assert_eq!(s.errors[0].error_count, 100);
        assert_eq!(s.errors[0].cid, 99);
    }
}
