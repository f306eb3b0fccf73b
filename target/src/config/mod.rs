//! Configuration: the TOML file (loaded with the `config` crate) or the quick
//! command-line form, validated into a [`TargetConfig`] before anything starts.

use std::collections::BTreeMap;

use nvme::ana::AnaState;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod ctx;
pub mod edit;
mod engine;
mod host;
mod raw;
mod validate;
use ctx::Ctx;
pub use engine::{
    affinity_cpus, EngineConfig, EngineSettings, SendOffload, Size, SrqMode,
    DEFAULT_KEY_ROTATION_GRACE_MS, DEFAULT_MAX_CONTROLLERS_PER_HOST, MAX_WORKERS, SMALL_BUFFER,
};
pub use host::HostConfig;
use raw::{RawConfig, RawListener, RawNamespace, RawSubsystem};

/// A configuration error, naming the file (if any), the field and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or parsed.
    #[error("{file}: {reason}")]
    Load {
        /// The file.
        file: String,
        /// The parser's message.
        reason: String,
    },
    /// A field has an invalid value.
    #[error("{source_name}: {field}: {reason}")]
    Invalid {
        /// The file, or "command line".
        source_name: String,
        /// The field path, e.g. `subsystem[0].namespace[1].path`.
        field: String,
        /// Why it is wrong.
        reason: String,
    },
    /// Several fields are invalid: every one, a line each.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Several(Vec<ConfigError>),
}

/// A parser's message with the secrets it may quote left out: a syntax
/// error quotes the line it is on, which `check-config` and the journal
/// then show. A line that sets a key (`..._key = ...`) keeps what precedes
/// the value; a DH-HMAC-CHAP secret or a TLS PSK anywhere else (an inline
/// table, a value cut short) loses the rest of its token.
fn without_secrets(msg: &str) -> String {
    msg.lines()
        .map(|l| {
            let sets_key = l
                .split_once('=')
                .is_some_and(|(k, _)| k.trim_end().ends_with("key"));
            if sets_key {
                let (k, _) = l.split_once('=').unwrap_or((l, ""));
                format!("{k}= <secret left out>")
            } else {
                secrets_cut(l)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` with each DH-HMAC-CHAP secret (`DHHC-1:`) and TLS PSK
/// (`NVMeTLSkey-`) cut after its prefix, up to the end of its token.
fn secrets_cut(line: &str) -> String {
    const MARKS: [&str; 2] = ["DHHC-1:", "NVMeTLSkey-"];
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some((i, mark)) = MARKS
        .iter()
        .filter_map(|m| rest.find(m).map(|i| (i, *m)))
        .min_by_key(|&(i, _)| i)
    {
        out.push_str(&rest[..i + mark.len()]);
        out.push_str("<secret left out>");
        let after = &rest[i + mark.len()..];
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}' | ']'))
            .unwrap_or(after.len());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

impl ConfigError {
    /// How many errors this is.
    pub fn count(&self) -> usize {
        match self {
            ConfigError::Several(v) => v.len(),
            _ => 1,
        }
    }

    /// Every error, as JSON objects `{"file", "field", "reason"}` (`field`
    /// null for a file that does not load), for `check-config --json`.
    pub fn to_json(&self) -> Vec<serde_json::Value> {
        match self {
            ConfigError::Load { file, reason } => {
                vec![serde_json::json!({"file": file, "field": null, "reason": reason})]
            }
            ConfigError::Invalid {
                source_name,
                field,
                reason,
            } => vec![serde_json::json!({"file": source_name, "field": field, "reason": reason})],
            ConfigError::Several(v) => v.iter().flat_map(|e| e.to_json()).collect(),
        }
    }
}

/// A listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Address and port.
    pub addr: SocketAddr,
    /// The transport it serves.
    pub transport: Transport,
    /// The state of each ANA group at this listener (groups not listed:
    /// optimized).
    pub ana: BTreeMap<u32, AnaState>,
    /// TLS (NVMe/TCP listeners: `secure`).
    pub secure: crate::model::port::Secure,
}

/// Another discovery service the discovery log refers hosts to
/// (`[[referral]]`: a peer gateway's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferralConfig {
    /// Its address and port.
    pub addr: SocketAddr,
    /// Its transport.
    pub transport: Transport,
}

/// The transport a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// RDMA (RoCE, InfiniBand, iWARP).
    #[default]
    Rdma,
    /// NVMe/TCP.
    Tcp,
}

impl Transport {
    /// Its name in the configuration (`rdma`, `tcp`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rdma => "rdma",
            Transport::Tcp => "tcp",
        }
    }
}

impl ListenerConfig {
    /// The state of ANA group `group` at this listener.
    pub fn ana_state(&self, group: u32) -> AnaState {
        crate::model::ana::configured(&self.ana, group)
    }
}

/// What backs a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendConfig {
    /// A regular file or a block device.
    File {
        /// Its path.
        path: PathBuf,
    },
    /// Discards writes, returns whatever the buffer holds on reads.
    Null {
        /// Size in bytes.
        size: u64,
    },
    /// A Ceph RBD image (librbd); its size is the image's.
    Rbd(RbdConfig),
}

/// Where an RBD image is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RbdConfig {
    /// The pool.
    pub pool: String,
    /// The image.
    pub image: String,
    /// The Ceph configuration file (librados' default search when `None`).
    pub ceph_conf: Option<PathBuf>,
    /// The Ceph client id (`admin` for `client.admin`).
    pub client: String,
    /// Only the gateway that owns the image writes it, and a gateway that
    /// takes ownership from one that does not answer fences it first
    /// (default: on; see docs/fencing.md).
    pub fencing: bool,
}

/// A namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Namespace id (1..=1024).
    pub nsid: u32,
    /// Backing store.
    pub backend: BackendConfig,
    /// Logical block size override (512..=4096, power of two).
    pub block_size: Option<u32>,
    /// Refuse writes.
    pub readonly: bool,
    /// Its ANA group (1..=128).
    pub ana_group: u32,
    /// Persistent reservations are supported (default: on).
    pub reservations: bool,
    /// Where its reservations persist through a restart (`[target]
    /// state_dir`; `None`: they cannot).
    pub state_dir: Option<PathBuf>,
    /// The hosts that see it (`hosts = [...]`; `None`: every host of the
    /// subsystem).
    pub hosts: Option<Vec<String>>,
    /// Its QoS caps (`qos = { rw_iops = ... }`; all hosts together).
    pub qos: crate::model::qos::QosCaps,
    /// Each capped host's caps (`[[subsystem.namespace.host_qos]]`).
    pub host_qos: Vec<crate::model::qos::HostCaps>,
    /// The identifiers the operator set (`nguid`, `uuid`, `eui64`).
    pub ids: crate::model::identity::SetIds,
}

impl NamespaceConfig {
    /// Whether `other` is this namespace with only what applies to the open
    /// namespace changed (its hosts, its QoS caps): no need to open it again.
    pub fn same_store(&self, other: &NamespaceConfig) -> bool {
        let mut o = other.clone();
        o.hosts = self.hosts.clone();
        o.qos = self.qos;
        o.host_qos = self.host_qos.clone();
        // A null store's size changes in place (a resize).
        if let (BackendConfig::Null { .. }, BackendConfig::Null { size }) =
            (&other.backend, &self.backend)
        {
            o.backend = BackendConfig::Null { size: *size };
        }
        *self == o
    }
}

/// A subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// NQN.
    pub nqn: String,
    /// Any host may connect.
    pub allow_any_host: bool,
    /// Allowed host NQNs (when not `allow_any_host`).
    pub hosts: Vec<String>,
    /// Serial number (default: derived from the NQN).
    pub serial: Option<String>,
    /// Model number.
    pub model: String,
    /// The controller ids this target gives out (disjoint ranges let several
    /// gateways serve one subsystem).
    pub cntlid_range: (u16, u16),
    /// Namespaces.
    pub namespaces: Vec<NamespaceConfig>,
    /// The listeners hosts reach it through (`listeners = [...]`; `None`:
    /// every listener).
    pub listeners: Option<Vec<crate::model::port::PortName>>,
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// Listeners.
    pub listeners: Vec<ListenerConfig>,
    /// Subsystems.
    pub subsystems: Vec<SubsystemConfig>,
    /// Hosts with authentication settings (`[[host]]`).
    pub hosts: Vec<HostConfig>,
    /// Other discovery services the discovery log lists (`[[referral]]`).
    pub referrals: Vec<ReferralConfig>,
    /// Advertise the discovery service by mDNS (`[discovery] mdns`).
    pub mdns: bool,
    /// Microseconds a worker busy-polls after its last activity before
    /// it sleeps on its completion channel.
    pub poll_spin_us: u64,
    /// Where `/metrics` is served (`None`: disabled).
    pub metrics_addr: Option<SocketAddr>,
    /// Per-host series (`[metrics] per_host`), `None`: none.
    pub per_host_series: Option<PerHostSeries>,
    /// The latency histograms' buckets (`[metrics] latency_buckets`, each
    /// rounded up to a bound the histogram keeps); `None`: all.
    pub latency_buckets: Option<Vec<usize>>,
    /// The control socket `nvmf-target status` talks to (`None`: disabled).
    pub control_socket: Option<PathBuf>,
    /// Whether the target must not start without its control socket (true
    /// for a configuration file; the quick form runs without one when it
    /// cannot have it, e.g. as a non-root user or beside another daemon).
    pub control_required: bool,
    /// Log filter (`tracing` EnvFilter syntax), e.g. `info` or `nvmf_target=debug`.
    pub log_level: String,
    /// The RDMA engine: workers, receive queues, buffers, pinned-memory budget.
    pub engine: EngineConfig,
    /// The daemon's state directory (reservations that persist), if any.
    pub state_dir: Option<PathBuf>,
    /// On SIGTERM, a gateway whose hosts another gateway would serve drains
    /// first, for at most this long (`None`: it stops at once).
    pub drain_on_stop: Option<std::time::Duration>,
}

/// Something a valid configuration does that an administrator may not mean.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigWarning {
    /// The field, as errors name it (`subsystem[0].hosts`).
    pub field: String,
    /// What it means.
    pub reason: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl TargetConfig {
    /// What `check-config` warns of, the daemon logs and `status` shows:
    /// subsystems no host may reach (allowed, as nvmet, SPDK and
    /// ceph-nvmeof allow them: removing the last host is how an
    /// administrator shuts a compromised one out).
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let mut v: Vec<ConfigWarning> = self
            .subsystems
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.allow_any_host && s.hosts.is_empty())
            .map(|(i, s)| ConfigWarning {
                field: format!("subsystem[{i}].hosts"),
                reason: format!(
                    "no host may connect to {} (allow_any_host = true or hosts = [\"nqn...\"] opens it)",
                    s.nqn
                ),
            })
            .collect();
        for (i, s) in self.subsystems.iter().enumerate() {
            if s.listeners.as_ref().is_some_and(|l| l.is_empty()) {
                v.push(ConfigWarning {
                    field: format!("subsystem[{i}].listeners"),
                    reason: format!(
                        "is empty: no host reaches {} (`subsystem listener add` puts it on one)",
                        s.nqn
                    ),
                });
            }
            for (j, n) in s.namespaces.iter().enumerate() {
                // A namespace shown to a host that may not connect: the host
                // sees nothing until the subsystem lets it in (not an error,
                // so that `host del` does not need a detach from every
                // namespace first).
                for h in n.hosts.iter().flatten() {
                    if !s.allow_any_host && !s.hosts.contains(h) {
                        v.push(ConfigWarning {
                            field: format!("subsystem[{i}].namespace[{j}].hosts"),
                            reason: format!(
                                "host {h} may not connect to {}: it sees namespace {} only once it may",
                                s.nqn, n.nsid
                            ),
                        });
                    }
                }
                // A kernel name may name another disk after a reboot or a
                // hot-plug: hosts would then see other data under the same
                // namespace.
                if let BackendConfig::File { path } = &n.backend {
                    if is_moving_kernel_name(path) {
                        v.push(ConfigWarning {
                            field: format!("subsystem[{i}].namespace[{j}].path"),
                            reason: format!(
                                "{} is a kernel name that may name another disk after a reboot or a hot-plug; name the disk by what identifies it (/dev/disk/by-id/...)",
                                path.display()
                            ),
                        });
                    }
                }
            }
        }
        // The packaged file serves nothing until the administrator adds both.
        if self.listeners.is_empty() {
            v.push(ConfigWarning {
                field: "listener".into(),
                reason: "no [[listener]]: hosts can reach nothing here until one is added".into(),
            });
        }
        if self.subsystems.is_empty() {
            v.push(ConfigWarning {
                field: "subsystem".into(),
                reason: "no [[subsystem]]: nothing is served until one is added".into(),
            });
        }
        v
    }
}

/// Whether `path` is a kernel device name given out in discovery order
/// (`/dev/sdb`, `/dev/nvme0n1p2`, `/dev/dm-3`, ...), not one that names the
/// disk itself (`/dev/disk/by-id/...`, `/dev/mapper/...`, `/dev/ram0`).
pub fn is_moving_kernel_name(path: &std::path::Path) -> bool {
    let Some(name) = path
        .to_str()
        .and_then(|p| p.strip_prefix("/dev/"))
        .filter(|n| !n.contains('/'))
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let letters_then_part = |s: &str| {
        let l = s.bytes().take_while(|b| b.is_ascii_lowercase()).count();
        l > 0 && (l == s.len() || digits(&s[l..]))
    };
    for p in ["sd", "vd", "xvd", "hd"] {
        if let Some(rest) = name.strip_prefix(p) {
            return letters_then_part(rest);
        }
    }
    for p in ["dm-", "loop", "nbd", "rbd"] {
        if let Some(rest) = name.strip_prefix(p) {
            let rest = rest.split_once('p').map_or(rest, |(d, _)| d);
            return digits(rest);
        }
    }
    // nvme<ctrl>n<ns>[p<part>]
    name.strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .is_some_and(|(c, r)| {
            let ns = r
                .split_once('p')
                .map_or(r, |(n, p)| if digits(p) { n } else { "" });
            digits(c) && digits(ns)
        })
}

/// Default address of the Prometheus endpoint.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9469";
/// Default log filter.
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Default of `[target] drain_on_stop_s`.
pub const DEFAULT_DRAIN_ON_STOP_S: u64 = 30;
/// The bounds of a drain's timeout (seconds): the groups' non-optimized
/// hold and a quiet second at least; below the control client's wait.
pub const DRAIN_TIMEOUT_S: std::ops::RangeInclusive<u64> = 5..=110;

/// Default state directory (systemd's `StateDirectory=nvmf-target`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nvmf-target";

/// The state directory when the configuration names none: the one systemd
/// made for the unit (`$STATE_DIRECTORY`), else [`DEFAULT_STATE_DIR`].
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|v| {
            let first = v.to_string_lossy().split(':').next()?.to_string();
            (!first.is_empty()).then(|| PathBuf::from(first))
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// Default path of the control socket.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/nvmf-target/control.sock";

/// Checks an NQN: `nqn.yyyy-mm.reverse.domain:...` or the discovery/UUID forms, ≤ 223 bytes.
pub fn check_nqn(nqn: &str) -> Result<(), String> {
    if nqn.is_empty() {
        return Err("must not be empty".into());
    }
    if nqn.len() > 223 {
        return Err(format!("is {} bytes long, the limit is 223", nqn.len()));
    }
    if !nqn.starts_with("nqn.") {
        return Err(format!("'{nqn}' must start with 'nqn.'"));
    }
    if !nqn.is_ascii() || nqn.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err(format!("'{nqn}' must be printable ASCII without spaces"));
    }
    Ok(())
}

/// Prefix of the environment variables that override settings of the file.
pub const ENV_PREFIX: &str = "NVMF_TARGET";

/// Default model number reported in Identify Controller.
pub const DEFAULT_MODEL: &str = "nvmf-target";
/// Default busy-poll window on machines with cores to spare. On machines with
/// two CPUs or fewer, spinning steals the CPU the rest of the I/O path needs,
/// so the default there is 0 (sleep at once on the completion channel).
pub const DEFAULT_POLL_SPIN_US: u64 = 50;

/// The default busy-poll window for this machine.
pub fn default_poll_spin_us() -> u64 {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 2 => DEFAULT_POLL_SPIN_US,
        _ => 0,
    }
}

impl TargetConfig {
    /// Loads and validates a TOML file, with overrides from the process
    /// environment (see [`ENV_PREFIX`]).
    pub fn load(path: &Path) -> Result<TargetConfig, ConfigError> {
        Self::load_with_env(path, None)
    }

    /// Loads and validates a TOML file. Variables named
    /// `NVMF_TARGET_<SECTION>__<KEY>` override scalar settings, e.g.
    /// `NVMF_TARGET_TARGET__POLL_SPIN_US=0`; `env` replaces the process
    /// environment (for tests).
    pub fn load_with_env(
        path: &Path,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<TargetConfig, ConfigError> {
        Self::read_file(path).and_then(|text| Self::from_file_text(&text, path, env))
    }

    /// Loads and validates a TOML file (as [`TargetConfig::load`]) and
    /// returns the text it was read from, which live changes edit.
    pub fn load_text(path: &Path) -> Result<(TargetConfig, String), ConfigError> {
        let text = Self::read_file(path)?;
        Self::from_file_text(&text, path, None).map(|c| (c, text))
    }

    /// The text of a configuration file.
    pub fn read_file(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| ConfigError::Load {
            file: path.display().to_string(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".into(),
                _ => e.to_string(),
            },
        })
    }

    /// Validates `text` as the content of the file `path`, with the
    /// environment's overrides (`env`: instead of the process environment)
    /// and the checks of paths a loaded file gets.
    pub fn from_file_text(
        text: &str,
        path: &Path,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<TargetConfig, ConfigError> {
        let file = path.display().to_string();
        let overridden = match &env {
            Some(vars) => vars.keys().any(|k| k.starts_with(ENV_PREFIX)),
            None => std::env::vars_os()
                .any(|(k, _)| k.to_str().is_some_and(|k| k.starts_with(ENV_PREFIX))),
        };
        let c = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(
                config::Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true)
                    .source(env),
            )
            .build();
        let label = if overridden {
            format!("{file} (with {ENV_PREFIX}_* overrides)")
        } else {
            file.clone()
        };
        let c = c.map_err(|e| ConfigError::Load {
            file: label.clone(),
            reason: without_secrets(&e.to_string()),
        })?;
        let mut cx = Ctx::new(&label);
        let raw = raw::read(&mut cx, c);
        Self::validate(raw, cx, true)
    }

    /// Parses and validates TOML text (for tests and `check-config`).
    pub fn from_toml(text: &str, name: &str) -> Result<TargetConfig, ConfigError> {
        let c = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .map_err(|e| ConfigError::Load {
                file: name.into(),
                reason: without_secrets(&e.to_string()),
            })?;
        let mut cx = Ctx::new(name);
        let raw = raw::read(&mut cx, c);
        Self::validate(raw, cx, false)
    }

    /// The quick form: one listener of `transport` (`rdma` or `tcp`), one
    /// subsystem open to any host, namespaces numbered from 1.
    pub fn quick(
        transport: &str,
        listen: &str,
        nqn: &str,
        namespaces: &[String],
    ) -> Result<TargetConfig, ConfigError> {
        let (address, port) = match listen.rsplit_once(':') {
            Some((a, p)) => (
                a.trim_matches(|c| c == '[' || c == ']').to_string(),
                p.parse().ok(),
            ),
            None => (listen.to_string(), Some(nvme::DEFAULT_PORT)),
        };
        let raw = RawConfig {
            listener: vec![(
                0,
                RawListener {
                    transport: Some(transport.into()),
                    address: Some(address),
                    port: port.or(Some(0)),
                    ana: None,
                    secure: None,
                },
            )],
            subsystem: vec![(
                0,
                RawSubsystem {
                    nqn: Some(nqn.into()),
                    allow_any_host: Some(true),
                    hosts: vec![],
                    serial: None,
                    model: None,
                    cntlid_min: None,
                    cntlid_max: None,
                    listeners: None,
                    namespace_values: vec![],
                    namespaces: namespaces
                        .iter()
                        .enumerate()
                        .map(|(i, p)| {
                            let n = RawNamespace {
                                nsid: Some(i as u32 + 1),
                                ..RawNamespace::default()
                            };
                            let n = if let Some(sz) = p.strip_prefix("null:") {
                                RawNamespace {
                                    backend: Some("null".into()),
                                    size: Some(Size::Text(sz.into())),
                                    ..n
                                }
                            } else if let Some(spec) = p.strip_prefix("rbd:") {
                                let (pool, image) = spec.split_once('/').unwrap_or(("", spec));
                                RawNamespace {
                                    backend: Some("rbd".into()),
                                    pool: Some(pool.into()),
                                    image: Some(image.into()),
                                    ..n
                                }
                            } else {
                                RawNamespace {
                                    path: Some(p.clone()),
                                    ..n
                                }
                            };
                            (i, n)
                        })
                        .collect(),
                },
            )],
            ..RawConfig::default()
        };
        let mut c = Self::validate(raw, Ctx::new("command line"), true)?;
        c.control_required = false;
        // Nothing persists from a command line (it may run as any user): its
        // reservations live as long as the process.
        c.state_dir = None;
        for n in c
            .subsystems
            .iter_mut()
            .flat_map(|s| s.namespaces.iter_mut())
        {
            n.state_dir = None;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests;

/// Per-host Prometheus series (`[metrics] per_host = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerHostSeries {
    /// Series at most (`per_host_max`), `_other` included.
    pub max: usize,
    /// How long a series whose host has no controller stays
    /// (`per_host_idle_secs`; `None`: for ever, 0 in the file).
    pub idle: Option<std::time::Duration>,
}
