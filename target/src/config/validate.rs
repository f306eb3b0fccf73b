//! Validation: the raw TOML (or the command-line form) checked field by
//! field into a [`TargetConfig`], every error collected with its field.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use nvme::ana::AnaState;

use crate::model::port::Secure;

use super::raw::{RawConfig, RawControl, RawMetrics, RawNamespace, RawSubsystem};
use super::{
    check_nqn, default_poll_spin_us, BackendConfig, ConfigError, EngineConfig, ListenerConfig,
    NamespaceConfig, RbdConfig, ReferralConfig, SubsystemConfig, TargetConfig, Transport,
    DEFAULT_CONTROL_SOCKET, DEFAULT_LOG_LEVEL, DEFAULT_METRICS_ADDR, DEFAULT_MODEL,
};
use nvme::fabrics::{CNTLID_MAX, CNTLID_MIN};

use super::ctx::Ctx;

impl TargetConfig {
    pub(super) fn validate(
        raw: RawConfig,
        mut ctx: Ctx,
        check_paths: bool,
    ) -> Result<TargetConfig, ConfigError> {
        let cx = &mut ctx;
        if raw.listener.len() > crate::model::port::MAX_PORTS {
            cx.err(
                "listener",
                format!(
                    "at most {} [[listener]] entries",
                    crate::model::port::MAX_PORTS
                ),
            );
        }
        let mut listeners = Vec::new();
        let mut seen_addrs = HashSet::new();
        for (i, l) in &raw.listener {
            let f = |n: &str| format!("listener[{i}].{n}");
            let Some((transport, addr)) = endpoint(
                cx,
                &format!("listener[{i}]"),
                l.transport.as_deref(),
                l.address.as_deref(),
                l.port,
            ) else {
                continue;
            };
            if !seen_addrs.insert((transport, addr)) {
                cx.err(
                    f("address"),
                    format!("{addr} is listed twice for {}", transport.name()),
                );
            }
            let mut ana = BTreeMap::new();
            for (g, st) in l.ana.iter().flatten() {
                let group = match g.parse::<u32>() {
                    Ok(n) if (1..=nvme::ana::MAX_GROUPS).contains(&n) => n,
                    _ => {
                        cx.err(
                            f(&format!("ana.{g}")),
                            format!("ANA group ids are 1..={}", nvme::ana::MAX_GROUPS),
                        );
                        continue;
                    }
                };
                match AnaState::from_name(st) {
                    Some(a) => {
                        ana.insert(group, a);
                    }
                    None => cx.err(
                        f(&format!("ana.{g}")),
                        format!("'{st}' is not an ANA state (optimized, non-optimized, inaccessible, persistent-loss, change)"),
                    ),
                }
            }
            let secure = match l.secure.as_deref() {
                None => Secure::None,
                Some(s) => match Secure::from_name(s) {
                    Some(_) if transport != Transport::Tcp => {
                        cx.err(
                            f("secure"),
                            "TLS is for NVMe/TCP listeners (transport = \"tcp\")",
                        );
                        Secure::None
                    }
                    Some(x) => x,
                    None => {
                        cx.err(
                            f("secure"),
                            format!("'{s}' is not one of none, optional, required"),
                        );
                        Secure::None
                    }
                },
            };
            listeners.push(ListenerConfig {
                addr,
                transport,
                ana,
                secure,
            });
        }
        let mut referrals = Vec::new();
        for (i, r) in &raw.referral {
            let Some((transport, addr)) = endpoint(
                cx,
                &format!("referral[{i}]"),
                r.transport.as_deref(),
                r.address.as_deref(),
                r.port,
            ) else {
                continue;
            };
            let f = format!("referral[{i}].address");
            if seen_addrs.contains(&(transport, addr)) {
                cx.err(f, format!("{addr} is this target's own {} listener: a referral names another discovery service", transport.name()));
            } else if referrals
                .iter()
                .any(|x: &ReferralConfig| x.addr == addr && x.transport == transport)
            {
                cx.err(
                    f,
                    format!("{addr} is listed twice for {}", transport.name()),
                );
            } else {
                referrals.push(ReferralConfig { addr, transport });
            }
        }
        let mut subsystems = Vec::new();
        let mut nqns = HashSet::new();
        for (i, s) in raw.subsystem {
            if let Some(sub) = Self::subsystem(cx, i, s, &mut nqns, check_paths) {
                subsystems.push(sub);
            }
        }
        Self::unique_ids(cx, &subsystems);
        Self::named_listeners(cx, &listeners, &subsystems);
        let hosts = super::host::validate(cx, raw.host);
        let state_dir = match raw.target.as_ref().and_then(|t| t.state_dir.clone()) {
            // An empty path: nothing persists (reservations are not kept
            // through a restart, and RESCAP says so).
            Some(d) if d.is_empty() => None,
            Some(d) => {
                let p = PathBuf::from(&d);
                if !p.is_absolute() {
                    cx.err(
                        "target.state_dir",
                        format!("'{d}' must be an absolute path (or \"\" for none)"),
                    );
                }
                Some(p)
            }
            None => Some(super::default_state_dir()),
        };
        for n in subsystems.iter_mut().flat_map(|s| s.namespaces.iter_mut()) {
            n.state_dir = state_dir.clone();
        }
        let drain_on_stop = match raw.target.as_ref().and_then(|t| t.drain_on_stop_s) {
            Some(0) => None,
            Some(s) if !super::DRAIN_TIMEOUT_S.contains(&s) => {
                cx.err(
                    "target.drain_on_stop_s",
                    format!(
                        "{s} is not 0 (stop at once) or {} to {} seconds",
                        super::DRAIN_TIMEOUT_S.start(),
                        super::DRAIN_TIMEOUT_S.end()
                    ),
                );
                None
            }
            s => Some(std::time::Duration::from_secs(
                s.unwrap_or(super::DEFAULT_DRAIN_ON_STOP_S),
            )),
        };
        let poll_spin_us = raw
            .target
            .as_ref()
            .and_then(|t| t.poll_spin_us)
            .unwrap_or_else(default_poll_spin_us);
        let engine = raw.target.map(|t| t.engine).unwrap_or_default().resolve();
        let engine = match engine {
            // Checked here, in the process that will run the workers (the
            // service's CPUAffinity= applies), so that it is refused as a
            // configuration error.
            Ok(e) => {
                if let Some(why) = e.worker_cpus.unavailable() {
                    cx.err("target.worker_cpus", why);
                }
                e
            }
            Err(errors) => {
                for (field, reason) in errors {
                    cx.err(format!("target.{field}"), reason);
                }
                EngineConfig::default()
            }
        };
        let per_host_series = match raw.metrics.as_ref() {
            Some(m) if m.per_host == Some(true) => {
                let max = m
                    .per_host_max
                    .unwrap_or(crate::counters::host::DEFAULT_MAX_SERIES as u32);
                if !(2..=65536).contains(&max) {
                    cx.err(
                        "metrics.per_host_max",
                        format!("{max} is out of range 2..=65536"),
                    );
                }
                let idle = m
                    .per_host_idle_secs
                    .unwrap_or(crate::counters::host::DEFAULT_IDLE.as_secs());
                Some(super::PerHostSeries {
                    max: max as usize,
                    idle: (idle > 0).then(|| std::time::Duration::from_secs(idle)),
                })
            }
            Some(m) if m.per_host_max.is_some() || m.per_host_idle_secs.is_some() => {
                let field = match m.per_host_max {
                    Some(_) => "metrics.per_host_max",
                    None => "metrics.per_host_idle_secs",
                };
                cx.err(field, "is only for per_host = true");
                None
            }
            _ => None,
        };
        let latency_buckets = raw
            .metrics
            .as_ref()
            .and_then(|m| m.latency_buckets.as_ref())
            .map(|b| {
                let mut shown: Vec<usize> = b
                    .iter()
                    .filter_map(|&s| {
                        let i = (s > 0.0)
                            .then(|| crate::telemetry::namespace::bucket_at_or_above(s))
                            .flatten();
                        if i.is_none() {
                            cx.err(
                                "metrics.latency_buckets",
                                format!("{s} is not a bound in seconds above 0 and up to 16.7"),
                            );
                        }
                        i
                    })
                    .collect();
                shown.sort_unstable();
                shown.dedup();
                shown
            });
        let metrics_addr = match raw.metrics {
            Some(RawMetrics {
                enabled: Some(false),
                ..
            }) => None,
            m => {
                let a = m
                    .and_then(|m| m.address)
                    .unwrap_or_else(|| DEFAULT_METRICS_ADDR.to_string());
                match a.parse::<SocketAddr>() {
                    Ok(a) => Some(a),
                    Err(_) => {
                        cx.err(
                            "metrics.address",
                            format!(
                                "'{a}' is not ADDRESS:PORT (e.g. \"127.0.0.1:9469\" or \"[::1]:9469\")"
                            ),
                        );
                        None
                    }
                }
            }
        };
        let control_socket = match raw.control {
            Some(RawControl {
                enabled: Some(false),
                ..
            }) => None,
            c => {
                let p = PathBuf::from(
                    c.and_then(|c| c.socket)
                        .unwrap_or_else(|| DEFAULT_CONTROL_SOCKET.to_string()),
                );
                if !p.is_absolute() || p.file_name().is_none() {
                    cx.err(
                        "control.socket",
                        format!(
                            "'{}' must be an absolute path to a socket file (e.g. \"{DEFAULT_CONTROL_SOCKET}\")",
                            p.display()
                        ),
                    );
                } else if p.as_os_str().len() > 107 {
                    cx.err(
                        "control.socket",
                        "is longer than the 107 bytes a Unix socket path may have",
                    );
                }
                Some(p)
            }
        };
        let log_level = raw
            .log
            .and_then(|l| l.level)
            .unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_string());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            cx.err(
                "log.level",
                format!(
                    "'{log_level}' is not a log filter (e.g. \"info\", \"nvmf_target=debug\"): {e}"
                ),
            );
        }
        let mdns = raw.discovery.and_then(|d| d.mdns).unwrap_or(false);
        ctx.finish(TargetConfig {
            listeners,
            subsystems,
            hosts,
            referrals,
            mdns,
            poll_spin_us,
            metrics_addr,
            per_host_series,
            latency_buckets,
            control_socket,
            control_required: true,
            log_level,
            engine,
            state_dir,
            drain_on_stop,
        })
    }

    /// Checks one `[[subsystem]]`; `None` when it is too broken to use (its
    /// errors are in `cx`).
    fn subsystem(
        cx: &mut Ctx,
        i: usize,
        s: RawSubsystem,
        nqns: &mut HashSet<String>,
        check_paths: bool,
    ) -> Option<SubsystemConfig> {
        let f = |n: &str| format!("subsystem[{i}].{n}");
        let nqn = match s.nqn {
            None => {
                cx.err(f("nqn"), "is required");
                None
            }
            Some(nqn) => {
                if let Err(r) = check_nqn(&nqn) {
                    cx.err(f("nqn"), r);
                } else if nqn == nvme::DISCOVERY_NQN {
                    cx.err(f("nqn"), "the discovery NQN is served by the target itself");
                } else if !nqns.insert(nqn.clone()) {
                    cx.err(f("nqn"), format!("'{nqn}' is defined twice"));
                }
                Some(nqn)
            }
        };
        let allow_any_host = s.allow_any_host.unwrap_or(false);
        for (h, host) in s.hosts.iter().enumerate() {
            if let Err(r) = check_nqn(host) {
                cx.err(f(&format!("hosts[{h}]")), r);
            }
        }
        if let Some(sn) = &s.serial {
            if sn.is_empty() || sn.len() > 20 || !sn.is_ascii() {
                cx.err(f("serial"), "must be 1 to 20 ASCII characters");
            }
        }
        let model = s.model.unwrap_or_else(|| DEFAULT_MODEL.to_string());
        if model.len() > 40 || !model.is_ascii() {
            cx.err(f("model"), "must be at most 40 ASCII characters");
        }
        let cmin = s.cntlid_min.unwrap_or(CNTLID_MIN as u32);
        let cmax = s.cntlid_max.unwrap_or(CNTLID_MAX as u32);
        for (k, v) in [("cntlid_min", cmin), ("cntlid_max", cmax)] {
            if !(CNTLID_MIN as u32..=CNTLID_MAX as u32).contains(&v) {
                cx.err(
                    f(k),
                    format!("{v} is out of range {CNTLID_MIN}..={CNTLID_MAX}"),
                );
            }
        }
        if cmin > cmax {
            cx.err(
                f("cntlid_max"),
                format!("{cmax} is below cntlid_min {cmin}"),
            );
        }
        let mut namespaces = Vec::new();
        let mut nsids = HashSet::new();
        for (j, n) in s.namespaces {
            let g = |k: &str| format!("subsystem[{i}].namespace[{j}].{k}");
            if let Some(ns) = Self::namespace(cx, g, j, n, &mut nsids, check_paths) {
                namespaces.push(ns);
            }
        }
        let mut listeners = None;
        if let Some(names) = s.listeners {
            let mut v: Vec<crate::model::port::PortName> = Vec::new();
            for (k, n) in names.iter().enumerate() {
                match crate::model::port::PortName::parse(n) {
                    Err(r) => cx.err(f(&format!("listeners[{k}]")), r),
                    Ok(p) if v.contains(&p) => cx.err(
                        f(&format!("listeners[{k}]")),
                        format!("'{n}' is listed twice"),
                    ),
                    Ok(p) => v.push(p),
                }
            }
            listeners = Some(v);
        }
        Some(SubsystemConfig {
            listeners,
            nqn: nqn?,
            allow_any_host,
            hosts: s.hosts,
            serial: s.serial,
            model,
            cntlid_range: (cmin as u16, cmax as u16),
            namespaces,
        })
    }

    /// Each listener a subsystem names is one of the target's.
    fn named_listeners(cx: &mut Ctx, listeners: &[ListenerConfig], subsystems: &[SubsystemConfig]) {
        for (i, s) in subsystems.iter().enumerate() {
            for (k, n) in s.listeners.iter().flatten().enumerate() {
                let named = listeners.iter().any(|l| {
                    n.names(&crate::model::port::Port {
                        addr: l.addr,
                        tcp: l.transport == super::Transport::Tcp,
                        secure: l.secure,
                    })
                });
                if !named {
                    cx.err(
                        format!("subsystem[{i}].listeners[{k}]"),
                        format!("'{n}' is no [[listener]] of this target"),
                    );
                }
            }
        }
    }

    /// No identifier the operator set is set twice (a host would take two
    /// namespaces for one).
    fn unique_ids(cx: &mut Ctx, subsystems: &[SubsystemConfig]) {
        let mut seen: std::collections::HashMap<(&str, Vec<u8>), String> = Default::default();
        for s in subsystems {
            for n in &s.namespaces {
                let here = format!("subsystem '{}' namespace {}", s.nqn, n.nsid);
                let ids = &n.ids;
                for (field, v) in [
                    ("nguid", ids.nguid.map(|v| v.to_vec())),
                    ("uuid", ids.uuid.map(|v| v.to_vec())),
                    ("eui64", ids.eui64.map(|v| v.to_vec())),
                ] {
                    let Some(v) = v.filter(|v| v.iter().any(|&b| b != 0)) else {
                        continue;
                    };
                    if let Some(first) = seen.get(&(field, v.clone())) {
                        cx.err(
                            format!("{here}: {field}"),
                            format!("is also {first}'s: each namespace needs its own"),
                        );
                    } else {
                        seen.insert((field, v), here.clone());
                    }
                }
            }
        }
    }

    /// Checks one `[[subsystem.namespace]]` (`g` names its fields).
    fn namespace(
        cx: &mut Ctx,
        g: impl Fn(&str) -> String,
        j: usize,
        n: RawNamespace,
        nsids: &mut HashSet<u32>,
        check_paths: bool,
    ) -> Option<NamespaceConfig> {
        let errors = cx.errors.len();
        let nsid = n.nsid.unwrap_or(j as u32 + 1);
        if nsid == 0 || nsid > crate::MAX_NSID {
            cx.err(
                g("nsid"),
                format!("{nsid} is out of range 1..={}", crate::MAX_NSID),
            );
        } else if !nsids.insert(nsid) {
            cx.err(g("nsid"), format!("{nsid} is used twice in this subsystem"));
        }
        // The block size checks of other fields use (512 when it is wrong,
        // which is reported here).
        let mut valid_bs = n.block_size;
        if let Some(bs) = n.block_size {
            if !(512..=4096).contains(&bs) || !bs.is_power_of_two() {
                cx.err(
                    g("block_size"),
                    format!("{bs} must be a power of two in 512..=4096"),
                );
                valid_bs = None;
            }
        }
        let kind = n
            .backend
            .as_deref()
            .unwrap_or(if n.path.is_some() { "file" } else { "" });
        if kind != "rbd" {
            for (field, set) in [
                ("pool", n.pool.is_some()),
                ("image", n.image.is_some()),
                ("ceph_conf", n.ceph_conf.is_some()),
                ("client", n.client.is_some()),
                ("fencing", n.fencing.is_some()),
            ] {
                if set {
                    cx.err(g(field), "is only for backend = \"rbd\"");
                }
            }
        }
        let backend = match kind {
            "file" | "block" => {
                if n.size.is_some() {
                    cx.err(g("size"), "is taken from the file or device; remove it");
                }
                match n.path {
                    None => {
                        cx.err(g("path"), "is required for a file or block device");
                        None
                    }
                    Some(p) => {
                        let path = PathBuf::from(&p);
                        if check_paths {
                            if let Err(r) = check_backing_path(&path) {
                                cx.err(g("path"), r);
                            }
                        }
                        Some(BackendConfig::File { path })
                    }
                }
            }
            "null" => {
                if n.path.is_some() {
                    cx.err(g("path"), "a null namespace has no path");
                }
                let size = match n.size {
                    None => {
                        cx.err(g("size"), "is required for backend = \"null\"");
                        None
                    }
                    Some(sz) => match sz.bytes() {
                        Ok(v) => Some(v),
                        Err(r) => {
                            cx.err(g("size"), r);
                            None
                        }
                    },
                };
                let bs = valid_bs.unwrap_or(512) as u64;
                match size {
                    Some(size) if size < bs || size % bs != 0 => {
                        cx.err(
                            g("size"),
                            format!("{size} must be a non-zero multiple of the block size {bs}"),
                        );
                        None
                    }
                    Some(size) => Some(BackendConfig::Null { size }),
                    None => None,
                }
            }
            "rbd" => Self::rbd_namespace(cx, &g, &n, check_paths).map(BackendConfig::Rbd),
            "" => {
                cx.err(
                    g("path"),
                    "is required (or set backend = \"null\" with a size, or \"rbd\" with a pool and an image)",
                );
                None
            }
            other => {
                cx.err(
                    g("backend"),
                    format!("'{other}' is unknown (use \"file\", \"null\" or \"rbd\")"),
                );
                None
            }
        };
        let ana_group = n.ana_group.unwrap_or(1);
        if !(1..=nvme::ana::MAX_GROUPS).contains(&ana_group) {
            cx.err(
                g("ana_group"),
                format!("{ana_group} is out of range 1..={}", nvme::ana::MAX_GROUPS),
            );
        }
        if let Some(hosts) = &n.hosts {
            let mut seen = HashSet::new();
            for (h, host) in hosts.iter().enumerate() {
                if let Err(r) = check_nqn(host) {
                    cx.err(g(&format!("hosts[{h}]")), r);
                } else if !seen.insert(host) {
                    cx.err(
                        g(&format!("hosts[{h}]")),
                        format!("'{host}' is listed twice"),
                    );
                }
            }
        }
        let qos = n.qos.unwrap_or_default();
        let mut host_qos = Vec::new();
        for (h, q) in n.host_qos.unwrap_or_default().into_iter().enumerate() {
            let f = |k: &str| g(&format!("host_qos[{h}].{k}"));
            let caps = crate::model::qos::QosCaps {
                rw_iops: q.rw_iops,
                rw_mbps: q.rw_mbps,
                r_mbps: q.r_mbps,
                w_mbps: q.w_mbps,
            };
            match q.host {
                None => cx.err(f("host"), "is required (the host's NQN)"),
                Some(host) => {
                    if let Err(r) = check_nqn(&host) {
                        cx.err(f("host"), r);
                    } else if host_qos
                        .iter()
                        .any(|x: &crate::model::qos::HostCaps| x.host == host)
                    {
                        cx.err(f("host"), format!("'{host}' has caps twice"));
                    } else if caps.is_none() {
                        cx.err(
                            f("host"),
                            "caps nothing (set rw_iops, rw_mbps, r_mbps or w_mbps)",
                        );
                    }
                    host_qos.push(crate::model::qos::HostCaps { host, caps });
                }
            }
        }
        let mut ids = crate::model::identity::SetIds::default();
        {
            use crate::model::identity::parse_hex;
            let mut f = |field: &str, v: &Option<String>| -> Option<Vec<u8>> {
                let v = v.as_deref()?;
                let r = match field {
                    "eui64" => parse_hex::<8>(v).map(|b| b.to_vec()),
                    _ => parse_hex::<16>(v).map(|b| b.to_vec()),
                };
                r.map_err(|e| cx.err(g(field), e)).ok()
            };
            ids.nguid = f("nguid", &n.nguid).and_then(|v| v.try_into().ok());
            ids.uuid = f("uuid", &n.uuid).and_then(|v| v.try_into().ok());
            ids.eui64 = f("eui64", &n.eui64).and_then(|v| v.try_into().ok());
        }
        if ids.nguid == Some([0; 16]) && ids.uuid == Some([0; 16]) {
            cx.err(
                g("uuid"),
                "is none, and so is nguid: a namespace needs one identifier",
            );
        }
        if cx.errors.len() != errors {
            return None;
        }
        Some(NamespaceConfig {
            ids,
            qos,
            host_qos,
            hosts: n.hosts,
            ana_group,
            nsid,
            backend: backend?,
            block_size: n.block_size,
            readonly: n.readonly.unwrap_or(false),
            reservations: n.reservations.unwrap_or(true),
            state_dir: None,
        })
    }

    /// Checks the fields of an RBD namespace.
    fn rbd_namespace(
        cx: &mut Ctx,
        g: &impl Fn(&str) -> String,
        n: &RawNamespace,
        check_paths: bool,
    ) -> Option<RbdConfig> {
        let errors = cx.errors.len();
        if n.path.is_some() {
            cx.err(
                g("path"),
                "an RBD namespace has no path (set pool and image)",
            );
        }
        if n.size.is_some() {
            cx.err(
                g("size"),
                "is the image's size; remove it (rbd resize, then reload)",
            );
        }
        let mut name = |field: &str, v: &Option<String>, required: bool| -> Option<String> {
            match v {
                None if required => {
                    cx.err(g(field), "is required for backend = \"rbd\"");
                    None
                }
                None => None,
                Some(s) if s.is_empty() || s.contains(['\0', '/', '@']) => {
                    cx.err(g(field), format!("{s:?} is not a valid Ceph name"));
                    None
                }
                Some(s) => Some(s.clone()),
            }
        };
        let pool = name("pool", &n.pool, true);
        let image = name("image", &n.image, true);
        let client = name("client", &n.client, false).unwrap_or_else(|| "admin".into());
        let ceph_conf = n.ceph_conf.as_ref().map(PathBuf::from);
        if let (Some(p), true) = (&ceph_conf, check_paths) {
            if let Err(e) = std::fs::metadata(p) {
                cx.err(g("ceph_conf"), format!("{}: {e}", p.display()));
            }
        }
        if cx.errors.len() != errors {
            return None;
        }
        Some(RbdConfig {
            pool: pool?,
            image: image?,
            ceph_conf,
            client,
            fencing: n.fencing.unwrap_or(true),
        })
    }
}

fn check_backing_path(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let ft = m.file_type();
    if !(ft.is_file() || ft.is_block_device()) {
        return Err(format!(
            "{} is neither a regular file nor a block device",
            p.display()
        ));
    }
    if ft.is_file() && m.len() == 0 {
        return Err(format!(
            "{} is empty (size it first, e.g. truncate -s 1G)",
            p.display()
        ));
    }
    Ok(())
}

/// A listener's or a referral's transport and address (`entry`: its field
/// prefix, `listener[0]`); `None` when they are wrong (the errors are in
/// `cx`).
fn endpoint(
    cx: &mut Ctx,
    entry: &str,
    transport: Option<&str>,
    address: Option<&str>,
    port: Option<u16>,
) -> Option<(Transport, SocketAddr)> {
    let f = |n: &str| format!("{entry}.{n}");
    let t = transport.unwrap_or("rdma");
    let transport = match t {
        "rdma" => Transport::Rdma,
        "tcp" => Transport::Tcp,
        _ => {
            cx.err(
                f("transport"),
                format!("'{t}' is not supported (\"rdma\" or \"tcp\")"),
            );
            Transport::Rdma
        }
    };
    let ip = match address {
        None => {
            cx.err(f("address"), "is required");
            None
        }
        Some(a) => match a.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                cx.err(
                    f("address"),
                    format!("'{a}' is not an IPv4 or IPv6 address"),
                );
                None
            }
        },
    };
    let port = port.unwrap_or(nvme::DEFAULT_PORT);
    if port == 0 {
        cx.err(f("port"), "must be 1..=65535");
        return None;
    }
    Some((transport, SocketAddr::new(ip?, port)))
}
