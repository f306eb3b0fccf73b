//! The running daemon: builds the target from a configuration, starts the
//! listeners and the metrics endpoint, applies reloads, checks liveness for
//! the systemd watchdog, and shuts down without losing acknowledged writes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

pub mod advertise;
pub mod control;
pub mod drain;
pub mod gauges;
pub mod listeners;
pub mod live;
pub mod maintenance;
pub mod mdns;
pub mod open;
pub mod reload;
pub mod rpc;
pub mod run;
pub mod status;

use control::{ControlServer, Inbox};
pub use live::Source;

use crate::config::{NamespaceConfig, SubsystemConfig, TargetConfig};
use crate::model::namespace::Namespace;
use crate::model::subsystem::{HostAccess, Subsystem, SubsystemKind};
use crate::model::target::Target;
use crate::telemetry::http::MetricsServer;
use crate::transport::engine::Engine;
use crate::transport::rdma::check_memlock;

use crate::transport::listener::Listener;
use reload::Plan;

/// Applies a new log filter (the daemon's `tracing` reload handle).
pub type LogReload = Box<dyn Fn(&str) -> Result<(), String> + Send>;

/// How long a queue or listener thread may go without a heartbeat before the
/// daemon counts as unhealthy (and stops petting the watchdog).
pub const STALL_MS: u64 = 10_000;
/// How long shutdown waits for in-flight I/O.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the queues to disconnect.
pub const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn open_ns(nqn: &str, n: &NamespaceConfig) -> Result<Arc<Namespace>, String> {
    let ns = open::namespace(nqn, n)
        .map_err(|e| format!("subsystem {nqn} namespace {}: {e}", n.nsid))?;
    info!(subsys = %nqn, nsid = ns.nsid, backend = %ns.backend.describe(), identity = %ns.backend.identity(),
          nguid = %crate::model::identity::hex(&ns.nguid),
          blocks = ns.blocks(), block_size = ns.block_size, "namespace ready");
    Ok(Arc::new(ns))
}

/// Opens a subsystem's namespaces and builds it.
pub fn open_subsystem(s: &SubsystemConfig) -> Result<Arc<Subsystem>, String> {
    let namespaces = s
        .namespaces
        .iter()
        .map(|n| open_ns(&s.nqn, n))
        .collect::<Result<Vec<_>, _>>()?;
    let sub = Arc::new(
        Subsystem::new(
            s.nqn.clone(),
            SubsystemKind::Nvm,
            s.allow_any_host,
            s.hosts.clone(),
            s.serial.clone(),
            s.model.clone(),
            namespaces,
        )
        .with_cntlids(s.cntlid_range),
    );
    sub.set_access(reload::access(s));
    attach_namespaces(&sub);
    Ok(sub)
}

/// Points each namespace's reservations at the subsystem, for the notices
/// of changes other gateways make.
fn attach_namespaces(sub: &Arc<Subsystem>) {
    for n in sub.namespaces().iter() {
        let (weak, nsid) = (Arc::downgrade(sub), n.nsid);
        n.resv.attach(
            crate::reservation::Notify(Arc::new(move |notices, bindings| {
                if let Some(sub) = weak.upgrade() {
                    for (host, kind) in notices {
                        let bound = crate::reservation::state::binding(bindings, host);
                        crate::command::reservation::notify(&sub, host, bound, nsid, *kind);
                    }
                }
            })),
            n.gate.clone(),
        );
    }
}

/// Builds the target (opening every namespace) without serving it.
pub fn build_target(cfg: &TargetConfig) -> Result<Target, String> {
    // The core's events count in the process's metrics from here on.
    crate::telemetry::meter::install();
    let ids = |r: Result<(), String>| r.map_err(|e| format!("namespace identifiers: {e}"));
    if let Some(dir) = &cfg.state_dir {
        ids(crate::model::identity::prepare(dir))?;
    }
    let subsystems = cfg
        .subsystems
        .iter()
        .map(open_subsystem)
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(dir) = &cfg.state_dir {
        ids(crate::model::identity::settle(dir))?;
    }
    let t = Target::with_ports(
        subsystems,
        cfg.listeners.iter().map(listeners::port).collect(),
        cfg.poll_spin_us,
    );
    t.ana.update(
        &cfg.listeners
            .iter()
            .map(|l| &l.ana)
            .enumerate()
            .collect::<Vec<_>>(),
    );
    t.discovery.set_referrals(referrals(cfg));
    t.credentials.set(&cfg.hosts);
    t.tls_keys.set(&cfg.hosts);
    t.max_controllers_per_host
        .store(cfg.engine.max_controllers_per_host, Ordering::Relaxed);
    t.key_rotation_grace_ms
        .store(cfg.engine.key_rotation_grace_ms, Ordering::Relaxed);
    t.unproven.set_caps(
        cfg.engine.max_unauthenticated_controllers_per_peer,
        cfg.engine.max_unauthenticated_controllers,
    );
    Ok(t)
}

/// The referrals of `cfg`, as the discovery service lists them.
fn referrals(cfg: &TargetConfig) -> Vec<crate::model::subsystem::Port> {
    cfg.referrals
        .iter()
        .map(|r| crate::model::subsystem::Port {
            addr: r.addr,
            tcp: r.transport == crate::config::Transport::Tcp,
            secure: Default::default(),
        })
        .collect()
}

/// Starts advertising the discovery service at `target`'s listeners (a
/// failure is logged: hosts still find the target by its address).
fn advertise(target: &Target) -> Option<advertise::Advertiser> {
    match advertise::Advertiser::start() {
        Ok(mut a) => {
            a.sync(&target.listeners.live());
            Some(a)
        }
        Err(e) => {
            warn!(error = %e, "[discovery] mdns: not advertised");
            None
        }
    }
}

/// Logs what the configuration does that an administrator may not mean.
/// The series `cfg` asks for: per-host ones (for controllers that connect
/// from now on) and the latency histograms' buckets (from the next scrape).
fn metric_series(cfg: &TargetConfig) {
    crate::telemetry::namespace::show_buckets(cfg.latency_buckets.as_deref());
    let r = crate::counters::host::registry();
    match cfg.per_host_series {
        Some(p) => {
            r.configure(true, p.max, p.idle);
            info!(
                max_series = p.max,
                idle_secs = p.idle.map(|d| d.as_secs()),
                "per-host metrics on ([metrics] per_host)"
            );
        }
        None => r.configure(
            false,
            crate::counters::host::DEFAULT_MAX_SERIES,
            Some(crate::counters::host::DEFAULT_IDLE),
        ),
    }
}

fn log_warnings(cfg: &TargetConfig) {
    for w in cfg.warnings() {
        warn!(field = %w.field, "{}", w.reason);
    }
}

/// The daemon.
pub struct Daemon {
    /// The target being served.
    pub target: Arc<Target>,
    /// The configuration in effect.
    pub config: TargetConfig,
    /// The listeners running, with their slots.
    listeners: Vec<(usize, Listener)>,
    engine: Option<Engine>,
    /// Namespaces a reload removed, kept until no request holds them: the
    /// last reference (whose drop flushes the backend) is dropped here, on the
    /// daemon thread, never on a worker.
    retired: Vec<Arc<Namespace>>,
    /// Subsystems a reload removed, until their last controller is gone:
    /// then their metric series go too.
    removed: Vec<Arc<Subsystem>>,
    metrics_server: Option<MetricsServer>,
    control: Option<ControlServer>,
    /// Live changes from the control socket, for this thread.
    inbox: Option<Inbox>,
    /// The configuration file and its text (`None`: the quick form).
    source: Option<Source>,
    log_reload: Option<LogReload>,
    /// When reopening a fenced namespace last failed with a warning.
    fence_warned: Option<Instant>,
    /// A drain under way.
    draining: Option<maintenance::Draining>,
    /// Where a stop stands (it may drain first).
    stopping: maintenance::Stopping,
    /// The mDNS advertisement of the discovery service (`[discovery] mdns`).
    advertiser: Option<advertise::Advertiser>,
}

impl Daemon {
    /// Opens the namespaces, starts the metrics endpoint and the listeners.
    /// `log_reload` is `None` when the log filter is fixed (RUST_LOG or
    /// `--log-level`); `source`: the file `config` was read from.
    pub fn start(
        config: TargetConfig,
        source: Option<Source>,
        log_reload: Option<LogReload>,
    ) -> Result<Daemon, String> {
        let started = Instant::now();
        check_memlock(config.engine.max_pinned_memory)?;
        // Before the namespaces' counters are made: a shard per worker.
        crate::base::shard::set_workers(config.engine.workers);
        let target = Arc::new(build_target(&config)?);
        maintenance::restore_drained(&config, &target.ana);
        let built = started.elapsed();
        metric_series(&config);
        let metrics_server = match config.metrics_addr {
            Some(a) => Some(crate::telemetry::http::start(a).map_err(|e| {
                format!("metrics endpoint {a}: {e} (set [metrics] address, or enabled = false)")
            })?),
            None => None,
        };
        let engine =
            Engine::start(target.clone(), config.engine.clone()).map_err(|e| e.to_string())?;
        let engine_up = started.elapsed();
        let mut listeners = Vec::new();
        for (slot, l) in config.listeners.iter().enumerate() {
            listeners.push((slot, listeners::listen(&engine, &target, l)?));
        }
        // An upgrade's pause is the hosts' reconnect delay times the tries
        // a restart needs: how long each part of the start took.
        info!(
            namespaces_ms = built.as_millis() as u64,
            engine_ms = (engine_up - built).as_millis() as u64,
            listeners_ms = (started.elapsed() - engine_up).as_millis() as u64,
            "started"
        );
        let (inbox, outbox) = match control::mailbox() {
            Ok((i, o)) => (Some(i), Some(o)),
            Err(e) => {
                warn!(error = %e, "live changes are off (nvmf-target status still answers)");
                (None, None)
            }
        };
        gauges::watch(&target, started);
        let control = match &config.control_socket {
            Some(p) => match ControlServer::start(p, target.clone(), started, outbox) {
                Ok(c) => Some(c),
                Err(e) if !config.control_required => {
                    warn!(error = %e, "running without a control socket (nvmf-target status)");
                    None
                }
                Err(e) => return Err(format!("control socket: {e}")),
            },
            None => None,
        };
        log_warnings(&config);
        let advertiser = config.mdns.then(|| advertise(&target)).flatten();
        Ok(Daemon {
            target,
            config,
            listeners,
            engine: Some(engine),
            retired: Vec::new(),
            removed: Vec::new(),
            metrics_server,
            control,
            inbox,
            source,
            log_reload,
            fence_warned: None,
            draining: None,
            advertiser,
            stopping: Default::default(),
        })
    }

    /// Drops (and so flushes) removed namespaces that no request holds any
    /// more, and the series of removed subsystems no controller holds.
    pub fn reap_retired(&mut self) {
        self.target.prune_retired();
        let current = self.target.subsystems();
        self.removed.retain(|s| {
            if current.iter().any(|c| c.nqn == s.nqn) {
                // Back under the same NQN: the series are the new one's.
                return false;
            }
            // Held by a queue or controller still (or by the target's list
            // of removed subsystems that have controllers): its gauges may
            // still move.
            if Arc::strong_count(s) > 1 {
                return true;
            }
            crate::telemetry::metrics::metrics().forget_subsystem(&s.nqn);
            false
        });
        // Queues hold a removed namespace until their commands on it ended
        // and their timer let it go (`model::ns_cache`); `try_unwrap` makes
        // sure the last reference, and the backend's flush, is ours.
        for ns in std::mem::take(&mut self.retired) {
            let ns = match Arc::try_unwrap(ns) {
                Ok(ns) => ns,
                Err(held) => {
                    self.retired.push(held);
                    continue;
                }
            };
            if ns.backend.shared().is_some_and(|s| s.fenced()) {
                // Closing an image (and shutting down a connection) the
                // cluster blocklisted may wait on it: not on this thread.
                let _ = std::thread::Builder::new()
                    .name("rbd-close".into())
                    .spawn(move || drop(ns));
            }
        }
    }

    /// Withholds the ANA groups this gateway cannot serve now, and reopens,
    /// on a new cluster connection, the RBD namespaces whose connection
    /// another gateway fenced (blocklisted) when it took their images over.
    /// A group is inaccessible here while a namespace of it is fenced, or
    /// not sure its copy of the shared reservation state is current: hosts
    /// use the other gateways, and come back at the ANA change that follows.
    /// Called every tick.
    pub fn recover_fenced(&mut self) {
        let mut groups = std::collections::BTreeSet::new();
        let mut unsure = std::collections::BTreeSet::new();
        let mut fenced = Vec::new();
        for sub in self.target.subsystems().iter() {
            for ns in sub.namespaces().iter() {
                if let Some(img) = crate::rbd::image(&*ns.backend) {
                    if img.fenced() {
                        groups.insert(ns.ana_group);
                        fenced.push((sub.clone(), ns.clone(), img.spec()));
                    }
                }
                if !ns.resv.sure() {
                    unsure.insert(ns.ana_group);
                }
            }
        }
        let fenced_groups = groups.clone();
        groups.extend(&unsure);
        if self.target.ana.set_withheld(&groups) {
            let mut raised = 0;
            for ctrl in self.target.all_controllers() {
                if ctrl.subsys.kind == SubsystemKind::Nvm && ctrl.notify_ana_changed() {
                    raised += 1;
                }
            }
            info!(fenced_groups = ?fenced_groups, unsure_groups = ?unsure, controllers_notified = raised, "ANA groups inaccessible here changed (fenced, or unsure of their reservation state)");
        }
        for (sub, old, spec) in fenced {
            let Some(cfg) = self
                .config
                .subsystems
                .iter()
                .find(|s| s.nqn == sub.nqn)
                .and_then(|s| s.namespaces.iter().find(|n| n.nsid == old.nsid))
            else {
                continue;
            };
            match open_ns(&sub.nqn, cfg) {
                Ok(new) => {
                    let v = sub
                        .namespaces()
                        .iter()
                        .map(|n| {
                            if Arc::ptr_eq(n, &old) {
                                new.clone()
                            } else {
                                n.clone()
                            }
                        })
                        .collect();
                    sub.set_namespaces(v);
                    attach_namespaces(&sub);
                    crate::telemetry::metrics::metrics()
                        .fencing
                        .with_label_values(&[&spec, "recovered"])
                        .inc();
                    info!(subsys = %sub.nqn, nsid = old.nsid, "namespace reopened on a new cluster connection after this gateway was fenced: it serves again (as a standby until a host writes through it)");
                    self.retired.push(old);
                }
                Err(e) => {
                    if self
                        .fence_warned
                        .is_none_or(|t| t.elapsed() > Duration::from_secs(30))
                    {
                        warn!(subsys = %sub.nqn, nsid = old.nsid, error = %e, "reopening a fenced namespace failed (retried every second)");
                        self.fence_warned = Some(Instant::now());
                    }
                }
            }
        }
    }

    /// What hosts cannot reach here for want of a listener or a subsystem,
    /// or `None` (the packaged configuration serves nothing until edited).
    pub fn serves_nothing(&self) -> Option<&'static str> {
        status::nothing_served(
            !self.listeners.is_empty(),
            !self.target.subsystems().is_empty(),
        )
    }

    /// Says in the journal that hosts can reach nothing yet, and where to
    /// add what is missing.
    pub fn warn_if_idle(&self) {
        if let Some(why) = self.serves_nothing() {
            let file = self.source.as_ref().map(|s| s.path.display().to_string());
            warn!(
                config = file.as_deref().unwrap_or("(command line)"),
                "serving nothing yet: {why}; {}",
                status::NOTHING_SERVED_HINT
            );
        }
    }

    /// A status line: what is served to whom.
    pub fn status(&self) -> String {
        if let Some(why) = self.serves_nothing() {
            return format!("serving nothing yet: {why}");
        }
        let subs = self.target.subsystems();
        let ns: usize = subs.iter().map(|s| s.namespaces().len()).sum();
        let ctrls = self.target.all_controllers();
        let nvm = ctrls
            .iter()
            .filter(|c| c.subsys.kind == SubsystemKind::Nvm)
            .count();
        let queues: usize = ctrls.iter().map(|c| c.queue_count()).sum();
        format!(
            "serving {} subsystem(s), {} namespace(s) on {} listener(s); {} controller(s), {} queue(s) connected",
            subs.len(),
            ns,
            self.listeners.len(),
            nvm,
            queues
        )
    }

    /// The liveness check behind the watchdog: every listener, queue and the
    /// metrics thread went round its loop recently.
    pub fn check_alive(&self) -> Result<(), String> {
        for (_, l) in &self.listeners {
            if !l.alive(STALL_MS) {
                return Err(format!("listener {} is not running", l.addr));
            }
        }
        if let Some(m) = &self.metrics_server {
            if !m.alive(STALL_MS) {
                return Err(format!("metrics endpoint {} is not running", m.addr));
            }
        }
        if let Some(c) = &self.control {
            if !c.alive() {
                return Err(format!(
                    "control socket {} is not served",
                    c.path().display()
                ));
            }
        }
        match &self.engine {
            Some(e) => e.check_alive(STALL_MS),
            None => Ok(()),
        }
    }

    /// Applies a new configuration. On any error nothing changes and the old
    /// configuration keeps serving.
    pub fn reload(&mut self, new: TargetConfig) -> Result<Plan, String> {
        let mut plan = reload::plan(&self.config, &new).map_err(|e| e.to_string())?;
        if plan.is_empty() {
            self.config = new;
            plan.resized = self.refresh_sizes();
            return Ok(plan);
        }
        // Open everything new first: a backend that fails refuses the reload.
        let mut added = Vec::new();
        let mut opened: Vec<Vec<Arc<Namespace>>> = Vec::new();
        let mut result = Ok(());
        for s in &plan.added {
            match open_subsystem(s) {
                Ok(x) => added.push(x),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        for c in &plan.changed {
            if result.is_err() {
                break;
            }
            let mut v = Vec::new();
            for n in &c.add {
                match open_ns(&c.nqn, n) {
                    Ok(ns) => v.push(ns),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            opened.push(v);
        }
        if result.is_ok() {
            result = self.start_listeners(&plan.listeners_added);
        }
        if result.is_ok() {
            if let (Some(level), Some(f)) = (&plan.log_level, &self.log_reload) {
                result = f(level).map_err(|e| format!("log.level: {e}"));
                if result.is_err() {
                    self.stop_listeners(&plan.listeners_added);
                }
            }
        }
        if let Err(e) = result {
            // Drop the series of namespaces that never served (a replaced
            // nsid shares its series with the namespace still serving).
            for s in &added {
                s.namespaces().iter().for_each(|n| n.metrics.unregister());
            }
            for (c, v) in plan.changed.iter().zip(&opened) {
                for n in v.iter().filter(|n| !c.remove.contains(&n.nsid)) {
                    n.metrics.unregister();
                }
            }
            return Err(e);
        }
        // Commit. Keys first: access widened below never lets a Connect in
        // under the old keys.
        if plan.hosts {
            let k = self
                .target
                .set_credentials(&new.hosts, std::time::Instant::now());
            for c in &k.gone {
                info!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn,
                      "the host's keys changed: its controller is disconnected and must authenticate again");
            }
            for c in &k.rekeying {
                info!(cntlid = c.cntlid, host = %c.hostnqn, subsys = %c.subsys.nqn,
                      grace_ms = self.target.key_rotation_grace_ms.load(Ordering::Relaxed),
                      "the host's key was rotated: its controller serves on while its queues authenticate again with the new key");
            }
            info!(
                with_keys = new.hosts.iter().filter(|h| h.dhchap_key.is_some()).count(),
                changed = ?k.hosts,
                controllers_disconnected = k.gone.len(),
                controllers_rekeying = k.rekeying.len(),
                "host keys changed: they apply at once"
            );
        }
        let current = self.target.subsystems();
        for (c, mut new_ns) in plan.changed.iter().zip(opened) {
            let Some(sub) = current.iter().find(|s| s.nqn == c.nqn) else {
                continue;
            };
            if let Some(a) = &c.access {
                sub.set_access(HostAccess::clone(a));
                for host in sub.revoke_disallowed(false) {
                    warn!(subsys = %c.nqn, %host, "host no longer allowed: its controller is disconnected");
                }
                for host in sub.revoke_unreachable(&self.target.listeners) {
                    warn!(subsys = %c.nqn, %host, "the subsystem left the listener the host connected through: its controller is disconnected");
                }
            }
            if !c.add.is_empty() || !c.remove.is_empty() {
                let old = sub.namespaces();
                for id in c.dropped_nsids() {
                    if let Some(ns) = old.iter().find(|n| n.nsid == id) {
                        ns.metrics.unregister();
                        self.retired.push(ns.clone());
                        info!(subsys = %c.nqn, nsid = id, "namespace removed (in-flight commands complete first)");
                    }
                }
                let mut v: Vec<_> = old
                    .iter()
                    .filter(|n| !c.remove.contains(&n.nsid))
                    .cloned()
                    .collect();
                // A namespace replaced over the same store (its ANA group or
                // access changed) keeps its reservations and its write gate:
                // commands still in flight on the old one share them.
                for n in new_ns.iter_mut() {
                    let same = old.iter().find(|o| {
                        o.nsid == n.nsid
                            && (o.nguid, o.uuid, o.eui64) == (n.nguid, n.uuid, n.eui64)
                            && o.resv.enabled() == n.resv.enabled()
                            && o.resv.ptpl_capable() == n.resv.ptpl_capable()
                    });
                    if let (Some(o), Some(m)) = (same, Arc::get_mut(n)) {
                        m.resv = o.resv.clone();
                        m.lane = o.lane.clone();
                        // An RBD image's gate is its ownership, which the
                        // new namespace's connection holds.
                        if m.backend.shared().is_none() {
                            m.gate = o.gate.clone();
                        }
                    }
                }
                v.extend(new_ns);
                sub.set_namespaces(v);
                attach_namespaces(sub);
                let changed = c.changed_nsids();
                let now = sub.namespaces();
                let mut raised = 0;
                for ctrl in sub.controllers() {
                    // A host is told of the namespaces it saw or sees.
                    let seen = |n: &Arc<Namespace>| {
                        changed.contains(&n.nsid) && n.visible_to(&ctrl.hostnqn)
                    };
                    let mut ids: Vec<u32> = old
                        .iter()
                        .chain(now.iter())
                        .filter(|n| seen(n))
                        .map(|n| n.nsid)
                        .collect();
                    ids.sort_unstable();
                    ids.dedup();
                    if !ids.is_empty() && ctrl.notify_ns_changed(&ids) {
                        raised += 1;
                    }
                }
                info!(subsys = %c.nqn, nsids = ?changed, controllers_notified = raised, "namespaces changed");
            }
            for (nsid, caps, hosts) in &c.qos {
                if let Some(ns) = sub.namespace(*nsid) {
                    ns.set_qos(&sub.nqn, *caps, hosts);
                    info!(subsys = %c.nqn, nsid, caps = %caps, hosts = hosts.len(), "QoS caps changed");
                }
            }
            for (nsid, bytes) in &c.sized {
                // Taken, and the hosts told, by the size refresh below.
                if let Some(ns) = sub.namespace(*nsid) {
                    if let Err(e) = ns.backend.grow(*bytes) {
                        warn!(subsys = %c.nqn, nsid, error = %e, "namespace not resized");
                    }
                }
            }
            for (nsid, hosts) in &c.shown {
                let told = sub.show_namespace(*nsid, hosts.clone());
                let to = match hosts {
                    None => "every host".to_string(),
                    Some(h) => format!("{} host(s)", h.len()),
                };
                info!(subsys = %c.nqn, nsid, ?hosts, controllers_notified = ?told.unwrap_or_default(),
                      "namespace shown to {to}");
            }
        }
        let mut subs: Vec<Arc<Subsystem>> = Vec::new();
        for s in &new.subsystems {
            if let Some(x) = current.iter().find(|x| x.nqn == s.nqn) {
                subs.push(x.clone());
            } else if let Some(x) = added.iter().find(|x| x.nqn == s.nqn) {
                info!(subsys = %s.nqn, "subsystem added");
                subs.push(x.clone());
            }
        }
        // The new set first: a Connect that looks a removed subsystem up from
        // now on does not find it, and one that found it before is refused
        // when it makes its controller (the subsystem is marked removed under
        // the controllers' lock) or revoked below.
        self.target.set_subsystems(subs);
        for nqn in &plan.removed {
            if let Some(s) = current.iter().find(|s| &s.nqn == nqn) {
                for ns in s.namespaces().iter() {
                    ns.metrics.unregister();
                    self.retired.push(ns.clone());
                }
                let hosts = s.revoke_disallowed(true);
                info!(subsys = %nqn, disconnected = ?hosts,
                      "subsystem removed; its controllers are disconnected");
                self.removed.push(s.clone());
            }
        }
        plan.resized = self.refresh_sizes();
        self.stop_listeners(&plan.listeners_removed);
        if plan.ana {
            let listeners: Vec<(usize, &crate::config::ListenerConfig)> = new
                .listeners
                .iter()
                .filter_map(|l| Some((self.slot(l)?, l)))
                .collect();
            let slots: Vec<_> = listeners.iter().map(|&(s, l)| (s, &l.ana)).collect();
            let ports = self.target.ana.update(&slots);
            let mut raised = 0;
            for ctrl in self.target.all_controllers() {
                if ctrl.subsys.kind == SubsystemKind::Nvm
                    && ports.contains(&ctrl.port())
                    && ctrl.notify_ana_changed()
                {
                    raised += 1;
                }
            }
            for (_, l) in listeners.iter().filter(|(s, _)| ports.contains(s)) {
                info!(listener = %l.addr, ana = ?l.ana, controllers_notified = raised, "ANA states changed");
            }
        }
        if let Some(us) = plan.poll_spin_us {
            self.target.poll_spin_us.store(us, Ordering::Relaxed);
        }
        if self.target.discovery.set_referrals(referrals(&new)) {
            info!(
                referrals = new.referrals.len(),
                "discovery referrals changed"
            );
        }
        let told = self.target.notify_discovery();
        if told > 0 {
            info!(
                controllers_notified = told,
                "discovery log changed: its persistent discovery controllers are told"
            );
        }
        if plan.per_host {
            metric_series(&new);
        }
        match (plan.mdns, self.advertiser.take()) {
            (Some(false), Some(a)) => a.stop(),
            (Some(true), None) => self.advertiser = advertise(&self.target),
            (_, mut a) => {
                if let Some(a) = &mut a {
                    a.sync(&self.target.listeners.live());
                }
                self.advertiser = a;
            }
        }
        log_warnings(&new);
        self.config = new;
        Ok(plan)
    }

    /// Reads the size of every namespace's store again (an RBD image resized,
    /// a file or volume grown): a namespace whose size changed takes the new
    /// one and its hosts get a namespace-changed event, as for any change of
    /// its attributes. Returns how many changed.
    fn refresh_sizes(&self) -> usize {
        let mut n = 0;
        for sub in self.target.subsystems().iter() {
            for ns in sub.namespaces().iter() {
                n += usize::from(Self::refresh_size(sub, ns).is_some());
            }
        }
        n
    }

    /// Reads the size of one namespace's store again; when it changed,
    /// tells the hosts it is shown to and returns (old, new) in blocks.
    pub(super) fn refresh_size(sub: &Subsystem, ns: &Namespace) -> Option<(u64, u64)> {
        match ns.refresh_size() {
            Ok(Some((old, new))) => {
                let raised = sub
                    .controllers()
                    .iter()
                    .filter(|c| ns.visible_to(&c.hostnqn) && c.notify_ns_changed(&[ns.nsid]))
                    .count();
                info!(subsys = %sub.nqn, nsid = ns.nsid, old_blocks = old, new_blocks = new,
                      controllers_notified = raised, "namespace resized");
                Some((old, new))
            }
            Ok(None) => None,
            Err(e) => {
                warn!(subsys = %sub.nqn, nsid = ns.nsid, error = %e, "size of the store unknown");
                None
            }
        }
    }

    /// Stops the daemon: refuse new connections, let in-flight I/O finish
    /// (new I/O is held unanswered, for the host to resend after it
    /// reconnects), flush the backends, then disconnect every host.
    pub fn shutdown(mut self) -> Result<(), String> {
        // A drain's client must not hold the control thread up.
        self.drain_stopped();
        // Hosts browsing for discovery services are told first.
        if let Some(a) = self.advertiser.take() {
            a.stop();
        }
        let t = &self.target;
        t.stopping.store(true, Ordering::SeqCst);
        drop(self.control.take());
        for (_, l) in self.listeners {
            l.stop();
        }
        let start = Instant::now();
        while t.io_in_flight.sum(Ordering::SeqCst) > 0 && start.elapsed() < DRAIN_TIMEOUT {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = t.io_in_flight.sum(Ordering::SeqCst);
        if left > 0 {
            warn!(commands = left, "in-flight I/O did not finish in time");
        } else {
            info!(
                ms = start.elapsed().as_millis() as u64,
                "in-flight I/O drained"
            );
        }
        let mut flush_failed = false;
        for s in t.all_subsystems() {
            for ns in s.namespaces().iter() {
                if let Err(e) = ns.flush() {
                    error!(subsys = %s.nqn, nsid = ns.nsid, error = %e, "final flush failed");
                    flush_failed = true;
                }
            }
        }
        for s in t.all_subsystems() {
            for ns in s.namespaces().iter() {
                if let Some(shared) = ns.backend.shared() {
                    shared.stop(Duration::from_secs(5));
                }
            }
        }
        info!("backends flushed; disconnecting hosts");
        let start = Instant::now();
        // Repeated: a queue that connected while the listeners stopped is
        // caught by a later pass.
        while t.live_queues.load(Ordering::Acquire) > 0 && start.elapsed() < DISCONNECT_TIMEOUT {
            for c in t.all_controllers() {
                c.kill_all();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Queues that never connected a controller, and the workers.
        if let Some(e) = self.engine.take() {
            e.stop(DISCONNECT_TIMEOUT);
        }
        let left = t.live_queues.load(Ordering::Acquire);
        if left > 0 {
            warn!(queues = left, "queues still open at exit");
        }
        info!("{}", crate::telemetry::metrics::summary_line());
        if flush_failed {
            return Err("a backend could not be flushed".into());
        }
        Ok(())
    }
}
