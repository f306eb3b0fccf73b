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
    affinity_cpus, EngineConfig, SendOffload, SrqMode, DEFAULT_MAX_CONTROLLERS_PER_HOST,
    SMALL_BUFFER,
};
pub use host::HostConfig;
pub(crate) use raw::SizeValue;
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
/// then show. A line that sets a key (`..._key = ...`) or holds a DHHC-1
/// secret keeps what precedes the value.
fn without_secrets(msg: &str) -> String {
    msg.lines()
        .map(|l| {
            let sets_key = l
                .split_once('=')
                .is_some_and(|(k, _)| k.trim_end().ends_with("key"));
            if sets_key {
                let (k, _) = l.split_once('=').unwrap_or((l, ""));
                format!("{k}= <secret left out>")
            } else if let Some(i) = l.find("DHHC-1:") {
                format!("{}DHHC-1:<secret left out>", &l[..i])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
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

    /// Whether this error is about `field` or a field inside it.
    fn names(&self, field: &str) -> bool {
        match self {
            ConfigError::Invalid { field: f, .. } => {
                f == field
                    || f.starts_with(&format!("{field}["))
                    || f.starts_with(&format!("{field}."))
            }
            ConfigError::Load { .. } => false,
            ConfigError::Several(v) => v.iter().any(|e| e.names(field)),
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
        self.ana.get(&group).copied().unwrap_or(AnaState::Optimized)
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
    /// Microseconds a worker busy-polls after its last activity before
    /// it sleeps on its completion channel.
    pub poll_spin_us: u64,
    /// Where `/metrics` is served (`None`: disabled).
    pub metrics_addr: Option<SocketAddr>,
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
        self.subsystems
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
            .collect()
    }
}

/// Default address of the Prometheus endpoint.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9469";
/// Default log filter.
pub const DEFAULT_LOG_LEVEL: &str = "info";
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
                                    size: Some(SizeValue::Text(sz.into())),
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
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[listener]]
transport = "rdma"
address = "10.0.2.15"
port = 4420
[[subsystem]]
nqn = "nqn.2026-11.io.example:disk1"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1G"
[[subsystem]]
nqn = "nqn.2026-11.io.example:disk2"
hosts = ["nqn.2026-11.io.example:host1"]
[[subsystem.namespace]]
nsid = 3
backend = "null"
size = 1048576
block_size = 4096
"#;

    #[test]
    fn good_config() {
        let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
        assert_eq!(c.listeners[0].addr, "10.0.2.15:4420".parse().unwrap());
        assert_eq!(c.subsystems.len(), 2);
        assert_eq!(
            c.subsystems[0].namespaces[0].backend,
            BackendConfig::Null { size: 1 << 30 }
        );
        assert_eq!(c.subsystems[1].namespaces[0].nsid, 3);
        assert_eq!(c.subsystems[1].namespaces[0].block_size, Some(4096));
        assert!(!c.subsystems[1].allow_any_host);
    }

    /// Issue 38, 8: a subsystem no host may reach is valid (every other
    /// target allows it; removing the last host is an emergency), with a
    /// warning.
    #[test]
    fn a_subsystem_no_host_may_reach_is_a_warning() {
        let c = TargetConfig::from_toml(
            &GOOD.replace("hosts = [\"nqn.2026-11.io.example:host1\"]", ""),
            "t.toml",
        )
        .expect("valid");
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].field, "subsystem[1].hosts");
        assert!(w[0].to_string().contains("no host may connect"), "{}", w[0]);
        assert!(TargetConfig::from_toml(GOOD, "t.toml")
            .unwrap()
            .warnings()
            .is_empty());
    }

    fn bad(text: &str, expect: &str) {
        let e = TargetConfig::from_toml(text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(expect),
            "error '{e}' does not contain '{expect}'"
        );
    }

    const LISTENER: &str = "[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n[[subsystem]]\nnqn = \"nqn.2026-11.io.example:rbd\"\nallow_any_host = true\n";

    #[test]
    fn ana_and_cntlids() {
        let text = format!(
            "{LISTENER}cntlid_min = 100\ncntlid_max = 199\n[[subsystem.namespace]]\nbackend = \"null\"\nsize = \"1M\"\nana_group = 2\n"
        )
        .replace("port = 4420", "port = 4420\nana = { 1 = \"optimized\", 2 = \"non-optimized\" }");
        let c = TargetConfig::from_toml(&text, "t.toml").unwrap();
        let l = &c.listeners[0];
        assert_eq!(l.ana_state(1), AnaState::Optimized);
        assert_eq!(l.ana_state(2), AnaState::NonOptimized);
        assert_eq!(l.ana_state(3), AnaState::Optimized, "not listed");
        assert_eq!(c.subsystems[0].cntlid_range, (100, 199));
        assert_eq!(c.subsystems[0].namespaces[0].ana_group, 2);
        let d = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
        assert_eq!(d.subsystems[0].cntlid_range, (1, 0xFFEF));
        assert_eq!(d.subsystems[0].namespaces[0].ana_group, 1);
        bad(
            &text.replace("\"non-optimized\"", "\"standby\""),
            "listener[0].ana.2: 'standby' is not an ANA state",
        );
        bad(
            &text.replace("2 = \"non", "129 = \"non"),
            "listener[0].ana.129: ANA group ids are 1..=128",
        );
        bad(
            &text.replace("ana_group = 2", "ana_group = 0"),
            "namespace[0].ana_group: 0 is out of range 1..=128",
        );
        bad(
            &text.replace("cntlid_max = 199", "cntlid_max = 50"),
            "subsystem[0].cntlid_max: 50 is below cntlid_min 100",
        );
        bad(
            &text.replace("cntlid_max = 199", "cntlid_max = 65535"),
            "subsystem[0].cntlid_max: 65535 is out of range 1..=65519",
        );
    }

    #[test]
    fn rbd_namespaces() {
        let c = TargetConfig::from_toml(
            &format!("{LISTENER}[[subsystem.namespace]]\nbackend = \"rbd\"\npool = \"rbd\"\nimage = \"disk1\"\n[[subsystem.namespace]]\nbackend = \"rbd\"\npool = \"fast\"\nimage = \"disk2\"\nclient = \"nvmf\"\nfencing = false\nceph_conf = \"/etc/hostname\"\nblock_size = 4096\n"),
            "t.toml",
        )
        .unwrap();
        let ns = &c.subsystems[0].namespaces;
        assert_eq!(
            ns[0].backend,
            BackendConfig::Rbd(RbdConfig {
                pool: "rbd".into(),
                image: "disk1".into(),
                ceph_conf: None,
                client: "admin".into(),
                fencing: true,
            })
        );
        assert_eq!(
            ns[1].backend,
            BackendConfig::Rbd(RbdConfig {
                pool: "fast".into(),
                image: "disk2".into(),
                ceph_conf: Some("/etc/hostname".into()),
                client: "nvmf".into(),
                fencing: false,
            })
        );
        assert_eq!(ns[1].block_size, Some(4096));
        let ns = |body: &str| format!("{LISTENER}[[subsystem.namespace]]\n{body}");
        bad(
            &ns("backend = \"rbd\"\nimage = \"d\""),
            "subsystem[0].namespace[0].pool: is required for backend = \"rbd\"",
        );
        bad(
            &ns("backend = \"rbd\"\npool = \"p\""),
            "namespace[0].image: is required",
        );
        bad(
            &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"a/b\""),
            "namespace[0].image: \"a/b\" is not a valid Ceph name",
        );
        bad(
            &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"i\"\npath = \"/dev/null\""),
            "namespace[0].path: an RBD namespace has no path",
        );
        bad(
            &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"i\"\nsize = \"1G\""),
            "namespace[0].size: is the image's size",
        );
        bad(
            &ns("backend = \"null\"\nsize = \"1M\"\npool = \"p\""),
            "namespace[0].pool: is only for backend = \"rbd\"",
        );
        bad(
            &ns("backend = \"ceph\""),
            "use \"file\", \"null\" or \"rbd\"",
        );
    }

    #[test]
    fn bad_configs_name_field_and_reason() {
        bad("", "listener: at least one");
        bad(
            &GOOD.replace("10.0.2.15", "ten"),
            "listener[0].address: 'ten' is not an IPv4",
        );
        bad(
            &GOOD.replace("transport = \"rdma\"", "transport = \"fc\""),
            "listener[0].transport: 'fc' is not supported",
        );
        bad(
            &GOOD.replace(
                "nqn.2026-11.io.example:disk2",
                "nqn.2026-11.io.example:disk1",
            ),
            "subsystem[1].nqn: 'nqn.2026-11.io.example:disk1' is defined twice",
        );
        bad(
            &GOOD.replace("nqn = \"nqn.2026-11.io.example:disk1\"", "nqn = \"disk1\""),
            "subsystem[0].nqn: 'disk1' must start with 'nqn.'",
        );
        bad(
            &GOOD.replace("size = \"1G\"", "size = \"1Q\""),
            "subsystem[0].namespace[0].size: '1Q' has an unknown unit",
        );
        bad(
            &GOOD.replace("size = \"1G\"", ""),
            "subsystem[0].namespace[0].size: is required",
        );
        bad(
            &GOOD.replace("nsid = 3", "nsid = 0"),
            "subsystem[1].namespace[0].nsid: 0 is out of range",
        );
        bad(
            &GOOD.replace("block_size = 4096", "block_size = 1000"),
            "block_size: 1000 must be a power of two",
        );
        bad(
            &GOOD.replace("backend = \"null\"\nsize = \"1G\"", "backend = \"iscsi\""),
            "subsystem[0].namespace[0].backend: 'iscsi' is unknown",
        );
        bad(
            &GOOD.replace("port = 4420", "port = 4420\nspeed = 1"),
            "unknown field `speed`",
        );
        bad(&GOOD.replace("port = 4420", "port = \"x\""), "t.toml");
        bad(
            &GOOD.replace(
                "nsid = 3",
                "nsid = 1\nbackend = \"null\"\nsize = 512\n[[subsystem.namespace]]\nnsid = 1",
            ),
            "subsystem[1].namespace[1].nsid: 1 is used twice",
        );
    }

    #[test]
    fn every_error_is_reported_in_one_run() {
        let text = r#"
[target]
workers = 0
srq_depth = 1
[[subsystem]]
nqn = "disk1"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1Q"
[[subsystem.namespace]]
nsid = 2
bogus = 1
[[subsystem]]
nqn = "nqn.2026-11.io.example:ok"
port = 1
[metrics]
address = "nowhere"
[controls]
socket = "x"
"#;
        let e = TargetConfig::from_toml(text, "t.toml").unwrap_err();
        let msg = e.to_string();
        let lines: Vec<&str> = msg.lines().collect();
        for want in [
            "t.toml: controls: unknown section",
            "t.toml: listener: at least one [[listener]] is required",
            "t.toml: subsystem[0].nqn: 'disk1' must start with 'nqn.'",
            "t.toml: subsystem[0].namespace[0].size: '1Q' has an unknown unit",
            "t.toml: subsystem[0].namespace[1]: unknown field `bogus`",
            "t.toml: subsystem[1]: unknown field `port`",
            "t.toml: target.workers: 0 is out of range",
            "t.toml: target.srq_depth: 1 is out of range",
            "t.toml: metrics.address: 'nowhere' is not ADDRESS:PORT",
        ] {
            assert!(
                lines.iter().any(|l| l.starts_with(want)),
                "no line starts with '{want}' in:\n{msg}"
            );
        }
        assert_eq!(e.count(), 9, "{msg}");
        assert_eq!(lines.len(), 9, "{msg}");
    }

    #[test]
    fn a_zero_or_odd_block_size_is_one_error_not_a_panic() {
        for bs in ["0", "3", "8192"] {
            let text = GOOD.replace("block_size = 4096", &format!("block_size = {bs}"));
            let e = TargetConfig::from_toml(&text, "t.toml").unwrap_err();
            assert_eq!(e.count(), 1, "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("block_size: {bs} must be a power of two")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_bad_nqn_and_no_listener_are_both_named() {
        let text = GOOD
            .replace("nqn.2026-11.io.example:disk1", "disk1")
            .replace(
                "[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n",
                "",
            );
        let e = TargetConfig::from_toml(&text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml: listener: at least one"), "{e}");
        assert!(e.contains("t.toml: subsystem[0].nqn: 'disk1'"), "{e}");
    }

    #[test]
    fn control_socket() {
        let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
        assert_eq!(
            c.control_socket.as_deref(),
            Some(Path::new(DEFAULT_CONTROL_SOCKET))
        );
        let c = TargetConfig::from_toml(&format!("[control]\nenabled = false\n{GOOD}"), "t.toml")
            .unwrap();
        assert_eq!(c.control_socket, None);
        let c = TargetConfig::from_toml(
            &format!("[control]\nsocket = \"/tmp/n.sock\"\n{GOOD}"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.control_socket.as_deref(), Some(Path::new("/tmp/n.sock")));
        let e =
            TargetConfig::from_toml(&format!("[control]\nsocket = \"n.sock\"\n{GOOD}"), "t.toml")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("control.socket: 'n.sock' must be an absolute path"),
            "{e}"
        );
    }

    #[test]
    fn metrics_and_log_sections() {
        let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
        assert_eq!(c.metrics_addr, Some("127.0.0.1:9469".parse().unwrap()));
        assert_eq!(c.log_level, "info");
        let c = TargetConfig::from_toml(
            &format!(
                "[metrics]\naddress = \"[::1]:9100\"\n[log]\nlevel = \"nvmf_target=debug\"\n{GOOD}"
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.metrics_addr, Some("[::1]:9100".parse().unwrap()));
        assert_eq!(c.log_level, "nvmf_target=debug");
        let c = TargetConfig::from_toml(&format!("[metrics]\nenabled = false\n{GOOD}"), "t.toml")
            .unwrap();
        assert_eq!(c.metrics_addr, None);
        let bad = |text: String, want: &str| {
            let e = TargetConfig::from_toml(&text, "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        };
        bad(
            format!("[metrics]\naddress = \"localhost\"\n{GOOD}"),
            "t.toml: metrics.address: 'localhost' is not ADDRESS:PORT",
        );
        bad(
            format!("[log]\nlevel = \"info,,=x=\"\n{GOOD}"),
            "t.toml: log.level: 'info,,=x=' is not a log filter",
        );
    }

    #[test]
    fn missing_backing_file_is_refused() {
        let e = TargetConfig::quick(
            "rdma",
            "10.0.0.1:4420",
            "nqn.2026-11.io.example:x",
            &["/nonexistent/disk".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("command line: subsystem[0].namespace[0].path: /nonexistent/disk"),
            "{e}"
        );
    }

    #[test]
    fn environment_overrides() {
        let dir = std::env::temp_dir().join(format!("nvmf-cfg-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.toml");
        std::fs::write(
            &path,
            "[target]\npoll_spin_us = 7\n[[listener]]\naddress = \"127.0.0.1\"\n\
             [[subsystem]]\nnqn = \"nqn.2026-11.io.test:a\"\nallow_any_host = true\n\
             [[subsystem.namespace]]\nnsid = 1\nbackend = \"null\"\nsize = \"1M\"\n",
        )
        .unwrap();
        let env = |k: &str, v: &str| Some([(k.to_string(), v.to_string())].into_iter().collect());
        let c = TargetConfig::load_with_env(&path, Some(Default::default())).unwrap();
        assert_eq!(c.poll_spin_us, 7);
        let c = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN_US", "0"))
            .unwrap();
        assert_eq!(c.poll_spin_us, 0);
        let e = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN_US", "lots"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.toml") && e.contains("NVMF_TARGET_") && e.contains("poll_spin_us"),
            "{e}"
        );
        let e = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN", "1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("poll_spin"), "{e}");
        assert_eq!(c.engine.send_offload, SendOffload::Auto);
        let c = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__SEND_OFFLOAD", "off"))
            .unwrap();
        assert_eq!(c.engine.send_offload, SendOffload::Off);
        let e = TargetConfig::load_with_env(
            &path,
            env("NVMF_TARGET_TARGET__SEND_OFFLOAD", "sometimes"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sometimes") && e.contains("send_offload"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn quick_form() {
        let c = TargetConfig::quick(
            "rdma",
            "10.0.0.1:4421",
            "nqn.2026-11.io.example:x",
            &["null:64M".into()],
        )
        .unwrap();
        assert_eq!(c.listeners[0].addr.port(), 4421);
        assert!(c.subsystems[0].allow_any_host);
        assert_eq!(
            c.subsystems[0].namespaces[0].backend,
            BackendConfig::Null { size: 64 << 20 }
        );
        let c = TargetConfig::quick(
            "rdma",
            "10.0.0.1:4420",
            "nqn.2026-11.io.example:x",
            &["rbd:rbd/disk1".into(), "null:1M".into()],
        )
        .unwrap();
        assert_eq!(
            c.subsystems[0].namespaces[0].backend,
            BackendConfig::Rbd(RbdConfig {
                pool: "rbd".into(),
                image: "disk1".into(),
                ceph_conf: None,
                client: "admin".into(),
                fencing: true,
            })
        );
        let e = TargetConfig::quick(
            "rdma",
            "10.0.0.1:4420",
            "nqn.2026-11.io.example:x",
            &["rbd:disk1".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("namespace[0].pool"), "{e}");
    }

    #[test]
    fn errors_as_json_name_file_field_and_reason() {
        let e = TargetConfig::from_toml(
            "[[subsystem]]\nnqn = \"disk1\"\nallow_any_host = true\n",
            "t.toml",
        )
        .unwrap_err();
        let j = e.to_json();
        assert_eq!(j.len(), e.count());
        assert!(j.iter().any(|x| x["field"] == "subsystem[0].nqn"
            && x["file"] == "t.toml"
            && x["reason"].as_str().unwrap().contains("nqn.")));
        let e = TargetConfig::from_toml("[[x", "t.toml").unwrap_err();
        assert_eq!(e.to_json()[0]["field"], serde_json::Value::Null);
    }
}
