//! What `nvmf-target status` shows: a snapshot of the running target
//! (subsystems, namespaces, listeners, connected controllers), its stable JSON
//! form, and the text an administrator reads.
//!
//! The JSON is versioned by `format`; fields are only ever added within a
//! format. README ("Status") documents every field.

use std::fmt::Write as _;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::model::controller::Controller;
use crate::model::subsystem::SubsystemKind;
use crate::model::target::Target;

/// The JSON format version.
pub const FORMAT: u32 = 1;

/// The whole status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Format version ([`FORMAT`]).
    pub format: u32,
    /// The daemon process.
    pub daemon: DaemonInfo,
    /// Where hosts connect.
    pub listeners: Vec<ListenerInfo>,
    /// NVM subsystems, in configuration order; then removed ones that still
    /// have controllers (`configured: false`).
    pub subsystems: Vec<SubsystemInfo>,
    /// Controllers of the discovery subsystem (hosts running `nvme discover`
    /// or holding a persistent discovery connection).
    pub discovery_controllers: Vec<ControllerInfo>,
}

/// The daemon process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// nvmf-target version.
    pub version: String,
    /// Process id.
    pub pid: u32,
    /// Seconds since start.
    pub uptime_seconds: u64,
}

/// What to do about [`nothing_served`], said by `status` and the journal.
pub const NOTHING_SERVED_HINT: &str = "add a [[listener]] and a [[subsystem]] to the configuration file and reload, or nvmf-target listener add, subsystem add";

/// Why a target with (or without) listeners and subsystems serves nothing:
/// what is missing, or `None` when hosts can reach a subsystem.
pub fn nothing_served(listeners: bool, subsystems: bool) -> Option<&'static str> {
    match (listeners, subsystems) {
        (true, true) => None,
        (false, false) => Some("no listener and no subsystem configured"),
        (false, true) => Some("no listener configured"),
        (true, false) => Some("no subsystem configured"),
    }
}

/// Group 1 and the ANA groups of the namespaces of `subsystems`.
fn ana_groups(subsystems: &[SubsystemInfo]) -> std::collections::BTreeSet<u32> {
    std::iter::once(1)
        .chain(
            subsystems
                .iter()
                .flat_map(|s| s.namespaces.iter().map(|n| n.ana_group)),
        )
        .collect()
}

/// A listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListenerInfo {
    /// "rdma" or "tcp".
    pub transport: String,
    /// IP address.
    pub address: String,
    /// Port.
    pub port: u16,
    /// The state of each ANA group in use (group 1 and the groups of the
    /// namespaces) at this listener: "optimized", "non-optimized", ...
    #[serde(default)]
    pub ana: std::collections::BTreeMap<u32, String>,
}

impl ListenerInfo {
    /// Its name as every command takes it: `rdma:10.0.0.1:4420`,
    /// `tcp:[fd00::1]:4420` ([`crate::model::port::PortName`]).
    pub fn name(&self) -> String {
        match self.address.parse::<std::net::IpAddr>() {
            Ok(ip) => crate::model::port::PortName {
                tcp: Some(self.transport == "tcp"),
                addr: std::net::SocketAddr::new(ip, self.port),
            }
            .to_string(),
            Err(_) => format!("{}:{}:{}", self.transport, self.address, self.port),
        }
    }
}

/// A subsystem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubsystemInfo {
    /// NQN.
    pub nqn: String,
    /// In the configuration (false: removed by a reload, controllers left).
    pub configured: bool,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Any host may connect.
    pub allow_any_host: bool,
    /// Allowed host NQNs.
    pub hosts: Vec<String>,
    /// The listeners hosts reach it through (absent: every listener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<String>>,
    /// Namespaces by nsid.
    pub namespaces: Vec<NamespaceInfo>,
    /// Connected controllers by cntlid.
    pub controllers: Vec<ControllerInfo>,
}

/// A namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceInfo {
    /// Namespace id.
    pub nsid: u32,
    /// "block", "file" or "null".
    pub backend: String,
    /// The device or file (null for a null namespace).
    pub path: Option<String>,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Writes are refused.
    pub readonly: bool,
    /// Its ANA group.
    #[serde(default)]
    pub ana_group: u32,
    /// Its NGUID (hex, as nvme-cli prints it).
    #[serde(default)]
    pub nguid: String,
    /// Its UUID.
    #[serde(default)]
    pub uuid: String,
    /// Its EUI-64 (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
    /// The hosts that see it (absent: every host of the subsystem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Its QoS caps, all hosts together (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<crate::model::qos::QosCaps>,
    /// Each capped host's caps on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_qos: Vec<crate::model::qos::HostCaps>,
    /// The gateways that share its cap now (an RBD image several serve),
    /// and this one's part (absent: not shared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_shared: Option<QosShared>,
    /// Its persistent reservation (absent when the namespace has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationInfo>,
    /// Which gateway writes its RBD image (absent without fencing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<OwnershipInfo>,
}

/// Who writes an RBD image served by several gateways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnershipInfo {
    /// What this gateway is: "owner", "standby" or "fenced".
    pub role: String,
    /// The gateway the ownership record named when last read (`host:pid`).
    pub holder: String,
    /// This gateway's cluster address (what fences it).
    pub address: String,
    /// Times this gateway took ownership.
    pub acquired: u64,
    /// Times it handed ownership over.
    pub released: u64,
    /// Times it took ownership from a gateway it fenced first.
    pub fenced_peer: u64,
}

/// A cap shared by the gateways that serve one RBD image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QosShared {
    /// The gateways that share it now, this one among them.
    pub gateways: u32,
    /// This gateway's part of it.
    pub part_percent: f64,
}

/// A namespace's reservation state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationInfo {
    /// Generation.
    pub generation: u32,
    /// The reservation's type ("write_exclusive", ...), if one is held.
    pub rtype: Option<String>,
    /// The state persists through a restart (PTPL).
    pub ptpl: bool,
    /// Registered hosts.
    pub registrants: Vec<RegistrantInfo>,
    /// The RADOS object that holds a state shared by several gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedInfo>,
}

/// A reservation state kept in the Ceph cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedInfo {
    /// `pool/object`.
    pub object: String,
    /// The object version this gateway holds.
    pub version: u64,
    /// This gateway is sure its copy is current (it serves the namespace).
    pub current: bool,
    /// Changes of this gateway some other gateway did not acknowledge.
    pub unacknowledged: u64,
}

/// A registered host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistrantInfo {
    /// Host identifier (UUID form).
    pub host_id: String,
    /// Its reservation key.
    pub key: String,
    /// It holds the reservation.
    pub holder: bool,
}

/// The snake-case name of a reservation type.
fn rtype_name(t: nvme::reservation::ResvType) -> &'static str {
    use nvme::reservation::ResvType as T;
    match t {
        T::WriteExclusive => "write_exclusive",
        T::ExclusiveAccess => "exclusive_access",
        T::WriteExclusiveRegOnly => "write_exclusive_registrants_only",
        T::ExclusiveAccessRegOnly => "exclusive_access_registrants_only",
        T::WriteExclusiveAllRegs => "write_exclusive_all_registrants",
        T::ExclusiveAccessAllRegs => "exclusive_access_all_registrants",
    }
}

fn ownership_info(n: &crate::model::namespace::Namespace) -> Option<OwnershipInfo> {
    let img = crate::rbd::image(&*n.backend)?;
    let o = img.ownership()?;
    let c = o.counts();
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    Some(OwnershipInfo {
        role: o.role().as_str().into(),
        holder: o.holder(),
        address: img.conn().addr.clone(),
        acquired: get(&c.acquired),
        released: get(&c.released),
        fenced_peer: get(&c.fenced_peer),
    })
}

fn reservation_info(n: &crate::model::namespace::Namespace) -> Option<ReservationInfo> {
    if !n.resv.enabled() {
        return None;
    }
    let st = n.resv.lock();
    Some(ReservationInfo {
        generation: st.generation,
        rtype: st.rtype().map(|t| rtype_name(t).to_string()),
        ptpl: st.ptpl,
        registrants: st
            .registrants
            .iter()
            .map(|r| RegistrantInfo {
                host_id: nvme::fabrics::format_uuid(&r.host),
                key: format!("{:#x}", r.key),
                holder: st.holds(&r.host),
            })
            .collect(),
        shared: n.resv.shared().map(|c| SharedInfo {
            object: c.spec(),
            version: n.resv.version(),
            current: c.sure(),
            unacknowledged: c.unacknowledged(),
        }),
    })
}

/// A connected controller (one host association).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerInfo {
    /// Controller id.
    pub cntlid: u16,
    /// Host NQN.
    pub host_nqn: String,
    /// Host identifier (UUID form).
    pub host_id: String,
    /// The transport of its admin queue (`rdma`, `tcp`).
    pub transport: String,
    /// The host's address and port ("10.0.0.2:47123"), from its admin queue.
    pub host_address: Option<String>,
    /// The target address the host connected to.
    pub local_address: Option<String>,
    /// Seconds since the admin queue connected.
    pub connected_seconds: u64,
    /// CSTS.RDY: the host enabled the controller.
    pub ready: bool,
    /// Connected queues, the admin queue included.
    pub queues: usize,
    /// The qids of the connected I/O queues.
    pub io_queues: Vec<u16>,
    /// Keep-alive timeout in milliseconds (0: none).
    pub keep_alive_ms: u32,
    /// Milliseconds since the last keep-alive (or connect).
    pub last_keep_alive_ms: u64,
    /// Read commands completed.
    pub reads: u64,
    /// Write commands completed.
    pub writes: u64,
    /// Bytes read by the host.
    pub bytes_read: u64,
    /// Bytes written by the host.
    pub bytes_written: u64,
    /// The mean time of its reads in the target, microseconds.
    #[serde(default)]
    pub read_latency_us: u64,
    /// The mean time of its writes in the target, microseconds.
    #[serde(default)]
    pub write_latency_us: u64,
    /// Its commands answered with an error.
    #[serde(default)]
    pub errors: u64,
    /// The host honours Command Retry Delay (it enabled ACRE).
    #[serde(default)]
    pub retry_delay: bool,
    /// In-band authentication (never key material).
    #[serde(default)]
    pub authentication: AuthInfo,
}

/// How a controller's host authenticated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuthInfo {
    /// The host has a key: every queue must authenticate.
    pub required: bool,
    /// The admin queue authenticated (last time, after re-authentication).
    pub authenticated: bool,
    /// Hash function (`hmac(sha256)`, ...), once authenticated.
    pub hash: Option<String>,
    /// Diffie-Hellman group (`null`, `ffdhe2048`, ...), once authenticated.
    pub dhgroup: Option<String>,
    /// The target proved its key too.
    pub bidirectional: bool,
}

fn controller(target: &Target, c: &Controller, now: Instant) -> ControllerInfo {
    let (kato, since_ka, ready, acre) = {
        let st = c.state();
        (
            st.kato_ms,
            now.saturating_duration_since(st.last_keepalive).as_millis() as u64,
            st.ready(),
            st.acre,
        )
    };
    let qids = c.qids();
    let addrs = c.addrs();
    let io = c.io_totals();
    ControllerInfo {
        cntlid: c.cntlid,
        host_nqn: c.hostnqn.clone(),
        host_id: nvme::fabrics::format_uuid(&c.hostid),
        transport: match target.listeners.get(c.port()) {
            Some(p) if p.tcp => "tcp",
            _ => "rdma",
        }
        .into(),
        host_address: addrs.map(|a| a.0.to_string()),
        local_address: addrs.map(|a| a.1.to_string()),
        connected_seconds: now.saturating_duration_since(c.created).as_secs(),
        ready,
        queues: qids.len(),
        io_queues: qids.into_iter().filter(|&q| q != 0).collect(),
        keep_alive_ms: kato,
        last_keep_alive_ms: since_ka,
        reads: io.reads,
        writes: io.writes,
        bytes_read: io.units_read * 512,
        bytes_written: io.units_written * 512,
        read_latency_us: io.read_latency().as_micros() as u64,
        write_latency_us: io.write_latency().as_micros() as u64,
        errors: io.errors,
        retry_delay: acre,
        authentication: {
            let last = c.auth.last();
            AuthInfo {
                required: c.auth.required(),
                authenticated: last.is_some(),
                hash: last.map(|a| a.hash.name().to_string()),
                dhgroup: last.map(|a| a.group.name().to_string()),
                bidirectional: last.is_some_and(|a| a.bidirectional),
            }
        },
    }
}

impl Status {
    /// A snapshot of `target`, started at `started`.
    pub fn of(target: &Target, started: Instant) -> Status {
        let now = Instant::now();
        let configured = target.subsystems();
        let subsystems: Vec<SubsystemInfo> = target
            .all_subsystems()
            .iter()
            .filter(|s| s.kind == SubsystemKind::Nvm)
            .map(|s| {
                let access = s.access();
                let mut controllers: Vec<_> = s
                    .controllers()
                    .iter()
                    .map(|c| controller(target, c, now))
                    .collect();
                controllers.sort_by_key(|c| c.cntlid);
                SubsystemInfo {
                    nqn: s.nqn.clone(),
                    configured: configured.iter().any(|x| std::sync::Arc::ptr_eq(x, s)),
                    serial: s.serial.clone(),
                    model: s.model.clone(),
                    allow_any_host: access.allow_any_host,
                    hosts: access.hosts.clone(),
                    listeners: access
                        .listeners
                        .as_ref()
                        .map(|l| l.iter().map(|n| n.to_string()).collect()),
                    namespaces: s
                        .namespaces()
                        .iter()
                        .map(|n| {
                            let (backend, path) = n.backend.status();
                            NamespaceInfo {
                                nsid: n.nsid,
                                backend: backend.into(),
                                path,
                                size_bytes: n.blocks() << n.block_shift,
                                block_size: n.block_size,
                                readonly: n.readonly,
                                ana_group: n.ana_group,
                                nguid: crate::model::identity::hex_or_none(&n.nguid),
                                uuid: if n.uuid == [0; 16] {
                                    "none".into()
                                } else {
                                    crate::model::identity::uuid_text(&n.uuid)
                                },
                                eui64: (n.eui64 != [0; 8])
                                    .then(|| crate::model::identity::hex(&n.eui64)),
                                hosts: n.hosts().map(|h| h.to_vec()),
                                qos: n.qos().and_then(|q| q.all.as_ref().map(|l| l.caps())),
                                host_qos: n
                                    .qos()
                                    .map(|q| {
                                        q.hosts
                                            .iter()
                                            .map(|(h, l)| crate::model::qos::HostCaps {
                                                host: h.clone(),
                                                caps: l.caps(),
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                                qos_shared: n.qos().and_then(|q| {
                                    q.all
                                        .as_ref()
                                        .filter(|l| l.gateways() > 1)
                                        .map(|l| QosShared {
                                            gateways: l.gateways(),
                                            part_percent: (l.part() * 1000.0).round() / 10.0,
                                        })
                                }),
                                reservation: reservation_info(n),
                                ownership: ownership_info(n),
                            }
                        })
                        .collect(),
                    controllers,
                }
            })
            .collect();
        let mut discovery_controllers: Vec<_> = target
            .discovery
            .subsystem
            .controllers()
            .iter()
            .map(|c| controller(target, c, now))
            .collect();
        discovery_controllers.sort_by_key(|c| c.cntlid);
        Status {
            format: FORMAT,
            daemon: DaemonInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
                uptime_seconds: now.saturating_duration_since(started).as_secs(),
            },
            listeners: target
                .listeners
                .live()
                .into_iter()
                .map(|(port, p)| ListenerInfo {
                    transport: if p.tcp { "tcp" } else { "rdma" }.into(),
                    address: p.addr.ip().to_string(),
                    port: p.addr.port(),
                    ana: ana_groups(&subsystems)
                        .into_iter()
                        .map(|g| (g, target.ana.state(port, g).name().to_string()))
                        .collect(),
                })
                .collect(),
            subsystems,
            discovery_controllers,
        }
    }

    /// Why hosts can reach nothing here (no listener, no subsystem, or
    /// neither configured), or `None`.
    pub fn serves_nothing(&self) -> Option<&'static str> {
        let subsystems = self.subsystems.iter().any(|s| s.configured);
        nothing_served(!self.listeners.is_empty(), subsystems)
    }

    /// The text `nvmf-target status` prints.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let d = &self.daemon;
        let _ = writeln!(
            o,
            "nvmf-target {} (pid {}, up {})",
            d.version,
            d.pid,
            duration(d.uptime_seconds)
        );
        let ls: Vec<String> = self
            .listeners
            .iter()
            .map(|l| {
                let ana = if l.ana.values().all(|s| s == "optimized") {
                    String::new()
                } else {
                    let g: Vec<String> = l.ana.iter().map(|(g, s)| format!("{g} {s}")).collect();
                    format!(" (ANA groups: {})", g.join(", "))
                };
                if l.address.contains(':') {
                    format!("{} [{}]:{}{ana}", l.transport, l.address, l.port)
                } else {
                    format!("{} {}:{}{ana}", l.transport, l.address, l.port)
                }
            })
            .collect();
        match self.serves_nothing() {
            Some(why) => {
                let _ = writeln!(o, "serving nothing yet: {why} ({NOTHING_SERVED_HINT})");
            }
            None => {
                let _ = writeln!(o, "listeners: {}", ls.join(", "));
            }
        }
        for s in &self.subsystems {
            let access = if s.allow_any_host {
                "any host".to_string()
            } else if s.hosts.is_empty() {
                "no host may connect (warning: none is listed)".to_string()
            } else {
                format!("hosts: {}", s.hosts.join(", "))
            };
            let removed = if s.configured {
                ""
            } else {
                " [removed from the configuration]"
            };
            let _ = writeln!(o, "\nsubsystem {}{removed}", s.nqn);
            let _ = writeln!(
                o,
                "  serial {}, model {}, {access}",
                s.serial.trim(),
                s.model.trim()
            );
            match &s.listeners {
                None => {}
                Some(l) if l.is_empty() => {
                    let _ = writeln!(o, "  on no listener (no host reaches it)");
                }
                Some(l) => {
                    let _ = writeln!(o, "  on listeners {}", l.join(", "));
                }
            }
            if s.namespaces.is_empty() {
                let _ = writeln!(o, "  no namespaces");
            }
            for n in &s.namespaces {
                let _ = writeln!(
                    o,
                    "  namespace {:<3} {:<5} {:<24} {:>10}  {} B blocks  {}  ANA group {}",
                    n.nsid,
                    n.backend,
                    n.path.as_deref().unwrap_or("-"),
                    sizes::format(n.size_bytes),
                    n.block_size,
                    if n.readonly {
                        "read-only"
                    } else {
                        "read-write"
                    },
                    n.ana_group
                );
                let _ = writeln!(
                    o,
                    "    nguid {}  uuid {}{}",
                    n.nguid,
                    n.uuid,
                    n.eui64
                        .as_deref()
                        .map(|e| format!("  eui64 {e}"))
                        .unwrap_or_default()
                );
                match n.hosts.as_deref() {
                    None => {}
                    Some([]) => {
                        let _ = writeln!(o, "    shown to no host");
                    }
                    Some(h) => {
                        let _ = writeln!(o, "    shown to {}", h.join(", "));
                    }
                }
                if let Some(q) = &n.qos {
                    let _ = writeln!(o, "    QoS (all hosts together): {q}");
                }
                if let Some(q) = &n.qos_shared {
                    let _ = writeln!(
                        o,
                        "    QoS shared by {} gateways: this one's part {} %",
                        q.gateways, q.part_percent
                    );
                }
                for h in &n.host_qos {
                    let _ = writeln!(o, "    QoS of {}: {}", h.host, h.caps);
                }
                if let Some(w) = &n.ownership {
                    let _ = writeln!(
                        o,
                        "    ownership: {} (record: {}; this gateway {}); acquired {}, handed over {}, fenced others {}",
                        w.role, w.holder, w.address, w.acquired, w.released, w.fenced_peer
                    );
                }
                if let Some(sh) = n.reservation.as_ref().and_then(|r| r.shared.as_ref()) {
                    let _ = writeln!(
                        o,
                        "    reservations shared in {} (version {}, {})",
                        sh.object,
                        sh.version,
                        if sh.current {
                            "current"
                        } else {
                            "NOT current: the namespace answers Namespace Not Ready"
                        }
                    );
                }
                if let Some(r) = n.reservation.as_ref().filter(|r| !r.registrants.is_empty()) {
                    let _ = writeln!(
                        o,
                        "    reservation: {} (generation {}{})",
                        r.rtype.as_deref().unwrap_or("none held"),
                        r.generation,
                        if r.ptpl { ", persists" } else { "" }
                    );
                    for g in &r.registrants {
                        let _ = writeln!(
                            o,
                            "    registrant {} key {}{}",
                            g.host_id,
                            g.key,
                            if g.holder { " (holder)" } else { "" }
                        );
                    }
                }
            }
            if s.controllers.is_empty() {
                let _ = writeln!(o, "  no controllers connected");
            }
            for c in &s.controllers {
                ctrl_text(&mut o, c);
            }
        }
        if !self.discovery_controllers.is_empty() {
            let _ = writeln!(o, "\ndiscovery");
            for c in &self.discovery_controllers {
                ctrl_text(&mut o, c);
            }
        }
        o
    }
}

fn ctrl_text(o: &mut String, c: &ControllerInfo) {
    let _ = writeln!(
        o,
        "  controller {} host {} from {} over {} ({}; connected {})",
        c.cntlid,
        c.host_nqn,
        c.host_address.as_deref().unwrap_or("?"),
        c.transport,
        if c.ready { "enabled" } else { "not enabled" },
        duration(c.connected_seconds)
    );
    let ka = if c.keep_alive_ms == 0 {
        "keep-alive off".to_string()
    } else {
        format!(
            "keep-alive {} ms (last {} ms ago)",
            c.keep_alive_ms, c.last_keep_alive_ms
        )
    };
    let a = &c.authentication;
    if a.required || a.authenticated {
        let _ = writeln!(
            o,
            "    authentication: {}",
            match (&a.hash, &a.dhgroup) {
                (Some(h), Some(g)) => format!(
                    "DH-HMAC-CHAP {h}, {g}{}",
                    if a.bidirectional {
                        ", bidirectional"
                    } else {
                        ""
                    }
                ),
                _ => "required, not yet done".into(),
            }
        );
    }
    let _ = writeln!(
        o,
        "    queues {} (admin + {} I/O), {ka}; reads {} ({}, {} us), writes {} ({}, {} us), errors {}",
        c.queues,
        c.io_queues.len(),
        c.reads,
        sizes::format(c.bytes_read),
        c.read_latency_us,
        c.writes,
        sizes::format(c.bytes_written),
        c.write_latency_us,
        c.errors
    );
}

/// "3d 4h", "5m 3s", "42s".
pub fn duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::subsystem::Subsystem;
    use std::sync::Arc;

    #[test]
    fn what_is_missing_when_nothing_is_served() {
        assert_eq!(nothing_served(true, true), None);
        assert_eq!(
            nothing_served(false, false),
            Some("no listener and no subsystem configured")
        );
        assert_eq!(nothing_served(false, true), Some("no listener configured"));
        assert_eq!(nothing_served(true, false), Some("no subsystem configured"));
    }

    fn target() -> Target {
        let ns = crate::model::namespace::Namespace::new(
            "nqn.2026-11.io.test:a",
            1,
            Box::new(crate::backend::null::Null::default()),
            1 << 32,
            4096,
            false,
        );
        let s = Arc::new(Subsystem::new(
            "nqn.2026-11.io.test:a".into(),
            SubsystemKind::Nvm,
            false,
            vec!["nqn.2026-11.io.test:h1".into()],
            Some("SN1".into()),
            "model".into(),
            vec![Arc::new(ns)],
        ));
        Target::new(vec![s], vec!["10.0.0.1:4420".parse().unwrap()], 0)
    }

    #[test]
    fn snapshot_lists_subsystems_namespaces_and_controllers() {
        let t = target();
        let s = t.subsystem("nqn.2026-11.io.test:a").unwrap();
        let c = s
            .add_controller(
                crate::model::subsystem::NewController::of(
                    "nqn.2026-11.io.test:h1",
                    [0xab; 16],
                    5000,
                ),
                16,
            )
            .unwrap();
        c.set_addrs(
            "10.0.0.2:50000".parse().unwrap(),
            "10.0.0.1:4420".parse().unwrap(),
        );
        let w = crate::base::wake::Waker::new().unwrap();
        c.attach(crate::model::controller::QueueLink::new(0, w.clone()))
            .unwrap();
        c.attach(crate::model::controller::QueueLink::new(2, w.clone()))
            .unwrap();
        c.attach(crate::model::controller::QueueLink::new(1, w))
            .unwrap();
        for w in 0..3 {
            c.io()
                .count_io(w, false, 4096, std::time::Duration::from_micros(50));
        }
        let st = Status::of(&t, Instant::now());
        assert_eq!(st.format, FORMAT);
        assert_eq!(st.listeners[0].address, "10.0.0.1");
        assert_eq!(st.listeners[0].port, 4420);
        let sub = &st.subsystems[0];
        assert!(sub.configured);
        assert_eq!(sub.hosts, vec!["nqn.2026-11.io.test:h1".to_string()]);
        let n = &sub.namespaces[0];
        assert_eq!(
            (n.nsid, n.backend.as_str(), n.path.as_deref()),
            (1, "null", None)
        );
        assert_eq!((n.size_bytes, n.block_size), (1 << 32, 4096));
        let c = &sub.controllers[0];
        assert_eq!(c.host_nqn, "nqn.2026-11.io.test:h1");
        assert_eq!(c.host_id, "abababab-abab-abab-abab-abababababab");
        assert_eq!(c.host_address.as_deref(), Some("10.0.0.2:50000"));
        assert_eq!((c.queues, c.io_queues.clone()), (3, vec![1, 2]));
        assert_eq!((c.reads, c.bytes_read, c.keep_alive_ms), (3, 12288, 5000));
        assert_eq!(
            (c.read_latency_us, c.write_latency_us, c.errors),
            (50, 0, 0)
        );
        // The JSON round-trips, and its field names are the documented ones.
        let json = serde_json::to_string(&st).unwrap();
        assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), st);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["subsystems"][0]["controllers"][0]["host_nqn"],
            "nqn.2026-11.io.test:h1"
        );
        let text = st.text();
        assert!(text.contains("subsystem nqn.2026-11.io.test:a"), "{text}");
        assert!(
            text.contains("controller 1 host nqn.2026-11.io.test:h1 from 10.0.0.2:50000"),
            "{text}"
        );
        assert!(text.contains("queues 3 (admin + 2 I/O)"), "{text}");
    }

    #[test]
    fn a_removed_subsystem_with_controllers_is_marked() {
        let t = target();
        let s = t.subsystem("nqn.2026-11.io.test:a").unwrap();
        let _c = s
            .add_controller(
                crate::model::subsystem::NewController::of("nqn.2026-11.io.test:h1", [1; 16], 0),
                16,
            )
            .unwrap();
        t.set_subsystems(vec![]);
        let st = Status::of(&t, Instant::now());
        assert_eq!(st.subsystems.len(), 1);
        assert!(!st.subsystems[0].configured);
        assert!(st.text().contains("[removed from the configuration]"));
    }

    #[test]
    fn durations() {
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(303), "5m 3s");
        assert_eq!(duration(90061), "1d 1h");
    }
}
