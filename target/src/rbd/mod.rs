//! Ceph RBD images through librbd. Each operation is a librbd asynchronous
//! call, started on the worker within its connection's operation budget
//! ([`budget`], [`io`]), whose completion runs on a librbd thread and posts
//! `(ud, result)` to the submitting worker's mailbox, which wakes the worker
//! through its eventfd: no thread per I/O, nothing blocking on a worker.
//!
//! Namespaces of one ANA group on the same cluster (same configuration file
//! and client) share one connection: the unit another gateway fences
//! ([`owner`]). The connection runs without librbd's writeback
//! cache: several gateways serve one image to a multipath host, and a write
//! acknowledged by one must be read back by the other, and survive the death
//! of the first. Writes are durable when librbd completes them, so FUA asks
//! for nothing more and a flush is cheap.

pub mod budget;
pub mod cluster;
mod io;
pub mod owner;
pub mod presence;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use nix::errno::Errno;

use crate::backend::compare::{refused, MISCOMPARE};
use crate::backend::{Backend, BackendError, DataRef, Executor, Shared, Storage, Submitted};
use crate::config::RbdConfig;
use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;
use cluster::{ClusterError, ClusterStore};

/// How long a librados operation may wait for an unavailable cluster before
/// it fails (the host then gets a retryable status), unless the Ceph
/// configuration sets its own: below the Linux host's 30 s I/O timeout.
const OP_TIMEOUT_S: &str = "20";
/// How long connecting (at start or reload) waits for the monitors.
const MOUNT_TIMEOUT_S: &str = "15";

/// A cluster connection and whether the cluster fenced it.
#[derive(Debug)]
pub struct Conn {
    /// The connection.
    pub cluster: Arc<ceph::Cluster>,
    /// How the OSDs know it (`ip:port/nonce`): what fences it.
    pub addr: String,
    /// An OSD refused one of its operations as blocklisted.
    fenced: AtomicBool,
    /// Something looked like it (a watch broke, an operation timed out):
    /// ask the monitors.
    suspect: AtomicBool,
    /// When the monitors were last asked (ms since `epoch`).
    probed_ms: std::sync::atomic::AtomicU64,
    /// The operations its images' I/O may have in flight.
    pub budget: Arc<budget::Budget>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.budget.close();
    }
}

impl Conn {
    /// Whether the cluster refuses this connection (blocklisted): it is
    /// useless and must be replaced.
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Something hinted that the connection may be blocklisted.
    pub fn suspect(&self) {
        self.suspect.store(true, Ordering::Release);
    }

    /// Asks the monitors whether the connection is blocklisted, when
    /// something hinted at it or `force` (at most every 2 s; blocking).
    /// Operations of a blocklisted client do not all fail at once: some
    /// wait, and a broken watch says "not connected".
    pub fn probe(&self, force: bool) {
        let now = crate::base::clock::monotonic_ms();
        let last = self.probed_ms.load(Ordering::Acquire);
        if self.fenced() || (!force && !self.suspect.load(Ordering::Acquire)) || now < last + 2000 {
            return;
        }
        self.probed_ms.store(now.max(1), Ordering::Release);
        self.suspect.store(false, Ordering::Release);
        match self.cluster.is_blocklisted(&self.addr) {
            Ok(true) => self.mark_fenced(),
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(address = %self.addr, "asking the monitors whether this gateway is blocklisted: {e}");
                self.suspect();
            }
        }
    }

    /// The monitors list this connection in the OSD blocklist.
    fn mark_fenced(&self) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            tracing::error!(message_id = %crate::telemetry::journal::ids::FENCED, address = %self.addr, "this gateway's cluster connection was fenced (OSD blocklist): another gateway took its images over; their namespaces answer path errors until they are reopened");
        }
    }
}

/// An open image and what identifies it.
#[derive(Debug)]
pub struct RbdImage {
    /// Shared with the calls its connection's dispatcher starts.
    image: Arc<ceph::Image>,
    /// Its stripe unit: each unit lies in one object.
    unit: u64,
    conn: Arc<Conn>,
    fsid: String,
    id: String,
    fencing: bool,
    owner: OnceLock<owner::Ownership>,
    /// This gateway among those that serve the image (`None`: the record
    /// could not be opened; logged).
    presence: Option<presence::Presence>,
}

impl RbdImage {
    /// `pool/image`.
    pub fn spec(&self) -> String {
        self.image.spec()
    }

    /// The cluster fsid and the image id: equal on every gateway.
    pub fn identity(&self) -> String {
        format!("rbd:{}/{}/{}", self.fsid, self.image.pool().name(), self.id)
    }

    /// The image's size in bytes, as the cluster says now.
    pub fn size(&self) -> Result<u64, ceph::Error> {
        self.image.size()
    }

    /// Flushes (blocking).
    pub fn flush(&self) -> std::io::Result<()> {
        let r = self.image.flush();
        if r.as_ref()
            .is_err_and(|e| e.errno() == Some(Errno::ESHUTDOWN as i32))
        {
            self.conn.mark_fenced();
        }
        Ok(r?)
    }

    /// The image itself.
    pub fn image(&self) -> &ceph::Image {
        &self.image
    }

    /// The image's reservation state in the cluster (not yet read).
    pub fn reservation_store(&self) -> Result<ClusterStore, ClusterError> {
        let pool = self.image.pool();
        ClusterStore::open(pool.cluster(), pool.name(), &self.id)
    }

    /// Its connection.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// Whether the cluster fenced this gateway's connection.
    pub fn fenced(&self) -> bool {
        self.conn.fenced()
    }

    /// Makes writes through `gate` need ownership of the image, when the
    /// namespace is configured with fencing.
    pub fn own_through(&self, gate: &Arc<WriteGate>) -> Result<(), ceph::Error> {
        if !self.fencing || self.owner.get().is_some() {
            return Ok(());
        }
        let o = owner::Ownership::start(
            &self.conn,
            self.image.pool().name(),
            &self.id,
            &self.spec(),
            gate,
        )?;
        let _ = self.owner.set(o);
        Ok(())
    }

    /// Its ownership (None without fencing).
    pub fn ownership(&self) -> Option<&owner::Ownership> {
        self.owner.get()
    }
}

type ClusterKey = (Option<PathBuf>, String, u32);

/// The connections in use, by configuration file, client and ANA group: a
/// namespace opened while another of its group on the same cluster is
/// served shares its connection (unless the cluster fenced it).
fn clusters() -> &'static Mutex<HashMap<ClusterKey, Weak<Conn>>> {
    static CLUSTERS: OnceLock<Mutex<HashMap<ClusterKey, Weak<Conn>>>> = OnceLock::new();
    CLUSTERS.get_or_init(Default::default)
}

fn connect(cfg: &RbdConfig, group: u32) -> Result<Arc<Conn>, ceph::Error> {
    let key = (cfg.ceph_conf.clone(), cfg.client.clone(), group);
    let mut map = clusters().lock().unwrap_or_else(|p| p.into_inner());
    map.retain(|_, w| w.upgrade().is_some_and(|c| !c.fenced()));
    if let Some(c) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(c);
    }
    let c = ceph::Cluster::connect(
        cfg.ceph_conf.as_deref(),
        &cfg.client,
        // The watch of a reservation state is confirmed on every tick
        // (5 s by default): once a second keeps its lease short.
        &[
            ("client_mount_timeout", MOUNT_TIMEOUT_S),
            ("objecter_tick_interval", "1"),
        ],
    )?;
    // Workers call librbd themselves, within the connection's budget
    // (budget.rs): no hand-off to librbd's work queue thread per I/O.
    c.set("rbd_non_blocking_aio", "false")?;
    let limit = |k: &str, default: u64| {
        c.get(k)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
            .unwrap_or(default)
    };
    let cap = budget::Need {
        ops: limit("objecter_inflight_ops", 1024) / 2,
        bytes: limit("objecter_inflight_op_bytes", 100 << 20) / 2,
    };
    if c.get("rbd_cache").is_ok_and(|v| v == "true") {
        tracing::info!(client = %cfg.client, "librbd's writeback cache is turned off for this target (gateways must not cache writes)");
    }
    c.set("rbd_cache", "false")?;
    for k in ["rados_osd_op_timeout", "rados_mon_op_timeout"] {
        if c.get(k).is_ok_and(|v| v.parse::<f64>() == Ok(0.0)) {
            c.set(k, OP_TIMEOUT_S)?;
        }
    }
    let addr = c.addrs()?;
    // Last: a connection that fails to open leaves no dispatcher behind.
    let budget = budget::Budget::start(cap, "rbd-dispatch").map_err(|e| {
        ceph::Error::Library(format!(
            "starting a cluster connection's dispatcher thread: {e}"
        ))
    })?;
    let conn = Arc::new(Conn {
        addr,
        cluster: c,
        fenced: AtomicBool::new(false),
        suspect: AtomicBool::new(false),
        probed_ms: 0.into(),
        budget,
    });
    map.insert(key, Arc::downgrade(&conn));
    Ok(conn)
}

/// Opens the image of `cfg` for a namespace of ANA group `group` (blocking:
/// at start or reload, never on a worker): the backend and its size in
/// bytes.
pub fn open(cfg: &RbdConfig, group: u32) -> Result<(Backend, u64), BackendError> {
    let spec = format!("rbd:{}/{}", cfg.pool, cfg.image);
    let fail = |e: ceph::Error| {
        let hint = match e.errno().map(Errno::from_raw) {
            Some(Errno::ENOENT) => " (does it exist? `rbd ls <pool>`, `ceph osd pool ls`)",
            Some(Errno::ETIMEDOUT) | Some(Errno::ECONNREFUSED) => {
                " (are the monitors of the Ceph configuration reachable?)"
            }
            Some(Errno::EACCES) | Some(Errno::EPERM) => " (the client's key and capabilities)",
            _ => "",
        };
        BackendError::Invalid {
            path: spec.clone(),
            reason: format!("{e}{hint}"),
        }
    };
    let conn = connect(cfg, group).map_err(fail)?;
    let fsid = conn.cluster.fsid().map_err(fail)?;
    let image = conn
        .cluster
        .pool(&cfg.pool)
        .map_err(fail)?
        .image(&cfg.image)
        .map_err(fail)?;
    // A pool or image override (`rbd config image set IMG rbd_cache true`)
    // would turn the writeback cache on again for this image.
    if image.config("rbd_cache").map_err(fail)?.as_deref() == Some("true") {
        return Err(BackendError::Invalid {
            path: spec.clone(),
            reason: format!(
                "librbd's writeback cache is on for this image (a pool or image override of rbd_cache): a gateway must not cache writes; remove it with `rbd config image remove {0}/{1} rbd_cache` (or `rbd config pool remove {0} rbd_cache`)",
                cfg.pool, cfg.image
            ),
        });
    }
    // Persistent write-back caches (librbd's pwl plugin) keep acknowledged
    // writes on this machine, where the other gateways cannot read them.
    let plugins = image
        .config("rbd_plugins")
        .map_err(fail)?
        .unwrap_or_default();
    if plugins.contains("pwl_cache") {
        return Err(BackendError::Invalid {
            path: spec.clone(),
            reason: format!(
                "librbd's persistent write-back cache is on for this image (rbd_plugins = {plugins:?}): a gateway must not cache writes; remove pwl_cache from rbd_plugins (`rbd config image remove {0}/{1} rbd_plugins`, or the pool's or client's setting)",
                cfg.pool, cfg.image
            ),
        });
    }
    let id = image.id().map_err(fail)?;
    let size = image.size().map_err(fail)?;
    let unit = image.stripe_unit().map_err(fail)?;
    let presence = presence(&conn, &cfg.pool, &id, &spec);
    let backend: Backend = Box::new(RbdImage {
        image: Arc::new(image),
        unit,
        conn,
        fsid,
        id,
        fencing: cfg.fencing,
        owner: OnceLock::new(),
        presence,
    });
    Ok((backend, size))
}

/// Starts this gateway's presence among those that serve image `id` of
/// `pool` (`spec`: for logs); `None`, logged, if the record cannot be
/// opened (QoS caps then hold for this gateway alone, and the other
/// gateways do not know it).
fn presence(conn: &Conn, pool: &str, id: &str, spec: &str) -> Option<presence::Presence> {
    let started = ceph::Object::open(&conn.cluster, pool, &format!("nvmf_gw.{id}"))
        .map_err(|e| e.to_string())
        .and_then(|object| {
            // This process's id (random: it differs on every start) and the
            // entry's: one entry per namespace.
            static GATEWAY: OnceLock<String> = OnceLock::new();
            let rand = || {
                std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    (spec, std::process::id()),
                )
            };
            let gateway = GATEWAY.get_or_init(|| format!("{:016x}", rand()));
            let key = format!("{gateway}#{:016x}", rand());
            presence::Presence::start(object, key, owner::gateway_name(), spec.into())
                .map_err(|e| e.to_string())
        });
    started
        .map_err(|e| tracing::warn!(image = %spec, "the record of the gateways that serve the image: {e}"))
        .ok()
}

/// How long a Compare and Write waits for this gateway to own the image:
/// what a takeover of a gateway that does not answer takes, with room to
/// spare, and below the host's 30 s command timeout.
const OWNERSHIP_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

impl Storage for RbdImage {
    fn describe(&self) -> String {
        format!("rbd:{}", self.spec())
    }

    fn identity(&self) -> String {
        RbdImage::identity(self)
    }

    fn status(&self) -> (&'static str, Option<String>) {
        ("rbd", Some(self.spec()))
    }

    fn size_now(&self) -> std::io::Result<Option<u64>> {
        Ok(Some(self.size()?))
    }

    /// Every write of an image is counted, owned or not: a Preempt and
    /// Abort drains them (on every gateway of the image).
    fn gated(&self) -> bool {
        true
    }

    unsafe fn submit(
        &self,
        gate: &Arc<WriteGate>,
        plan: &IoPlan,
        data: DataRef,
        ranges: &[(u64, u64)],
        io: &mut dyn Executor,
        ud: u64,
    ) -> Submitted {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { io::submit(self, plan, data, ranges, io.mailbox(), Some(gate), ud) }
    }

    fn flush(&self) -> std::io::Result<()> {
        RbdImage::flush(self)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        match self.image.read(offset, buf) {
            Ok(n) if n == buf.len() => {}
            Ok(n) => buf[n..].fill(0), // a hole at the end of a sparse image
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Both in the cluster (`rbd_compare_and_write`), atomic against every
    /// client of the image, other gateways included.
    fn compare_and_write(
        &self,
        gate: &WriteGate,
        offset: u64,
        cmp: &[u8],
        data: &[u8],
        fua: bool,
        allowed: &dyn Fn() -> Result<(), nvme::Status>,
    ) -> i32 {
        if let Err(st) = allowed() {
            return refused(st);
        }
        // An image that needs ownership is written by its owner only: wait
        // for it as a write at the gate does.
        if !gate.enter_wait(OWNERSHIP_WAIT) {
            return -nix::libc::EAGAIN;
        }
        // Again: a Preempt and Abort may have passed while it waited.
        if let Err(st) = allowed() {
            gate.leave();
            return refused(st);
        }
        let r = match self.image.compare_and_write(offset, cmp, data) {
            Ok(()) if fua => {
                RbdImage::flush(self).map_or_else(|e| crate::backend::compare::errno_of(&e), |_| 0)
            }
            Ok(()) => 0,
            Err(e) if e == -nix::libc::EILSEQ => MISCOMPARE,
            Err(e) => e,
        };
        if r == -nix::libc::ETIMEDOUT {
            gate.mark_uncertain();
        }
        if r == -nix::libc::ESHUTDOWN {
            self.conn.suspect();
        }
        gate.leave();
        r
    }

    fn shared(&self) -> Option<&dyn Shared> {
        Some(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// An image several gateways serve: its ownership, the QoS caps and the
/// gateways' states, shared through its cluster ([`presence`], [`owner`];
/// the rules are [`crate::gateway`]'s).
impl Shared for RbdImage {
    fn qos_changed(&self, qos: &Arc<crate::model::qos::NsQos>) {
        if let Some(p) = &self.presence {
            p.set_qos(qos.clone());
        }
    }

    fn publish_state(&self, state: crate::backend::GatewayState) {
        if let Some(p) = &self.presence {
            p.set_state(state);
        }
    }

    fn peers(&self) -> Option<Vec<crate::backend::Peer>> {
        self.presence.as_ref().and_then(|p| p.peers())
    }

    fn owned(&self) -> bool {
        self.owner.get().is_some_and(|o| o.holds())
    }

    fn hand_over(&self) {
        if let Some(o) = self.owner.get() {
            o.hand_over();
        }
    }

    fn fenced(&self) -> bool {
        self.conn.fenced()
    }

    fn stop(&self, within: std::time::Duration) {
        if let Some(o) = self.owner.get() {
            o.stop(within);
        }
    }
}

/// The RBD image behind `store`, if it is one.
pub fn image(store: &dyn Storage) -> Option<&RbdImage> {
    store.as_any().downcast_ref()
}
