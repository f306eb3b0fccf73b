//! The administrator's commands that talk to the running daemon over its
//! control socket: live changes (`subsystem`, `namespace`, `host`,
//! `controller`) and `config show`, in the style of ceph-nvmeof's CLI.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub mod list;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::config::edit::{
    HostAdd, HostKey, HostNqn, HostRef, ListenerAna, ListenerRef, NamespaceAdd, NamespaceHost,
    NamespaceQos, NamespaceRef, NamespaceResize, SubsystemAdd, SubsystemListener, SubsystemRef,
};
use crate::config::TargetConfig;
use crate::daemon::control::ControlError;
use crate::daemon::rpc::{
    self, CallError, Changed, ConfigText, ControllerRef, DrainParams, StopCheck,
};

/// Where the daemon is and how to print its answers.
#[derive(Args, Debug, Clone, Default)]
pub struct Conn {
    /// The control socket (default: from the configuration file).
    #[arg(long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// Print the daemon's answer as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `nvmf-target subsystem ...`
#[derive(Subcommand, Debug, Clone)]
pub enum SubsystemCmd {
    /// List the subsystems: hosts, namespaces, controllers, listeners.
    List,
    /// Add a subsystem (give --allow-any-host or at least one --host-nqn).
    Add {
        /// Its NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// Any host may connect.
        #[arg(long)]
        allow_any_host: bool,
        /// A host that may connect (repeatable).
        #[arg(long = "host-nqn", short = 'q', value_name = "HOSTNQN")]
        hosts: Vec<String>,
        /// Serial number (default: derived from the NQN).
        #[arg(long)]
        serial: Option<String>,
        /// Model number.
        #[arg(long)]
        model: Option<String>,
    },
    /// Remove a subsystem: its hosts are disconnected. Refused while a
    /// host is connected to it, unless --force.
    Del {
        /// Its NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// Remove it although hosts are connected (they lose it).
        #[arg(long)]
        force: bool,
    },
    /// The listeners hosts reach a subsystem through (default: every
    /// listener): add, del. A Connect through another is refused, and the
    /// discovery log lists the subsystem only at its listeners.
    #[command(subcommand)]
    Listener(SubsystemListenerCmd),
}

/// `nvmf-target subsystem listener ...`
#[derive(Subcommand, Debug, Clone)]
pub enum SubsystemListenerCmd {
    /// Put the subsystem on a listener (one that has a `listeners` list).
    Add {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// [rdma:|tcp:]ADDRESS:PORT (without a transport: every listener at
        /// the address).
        #[arg(long, value_name = "[TRANSPORT:]ADDRESS:PORT")]
        listener: String,
    },
    /// Take the subsystem off a listener (one on every listener is then on
    /// the others). Refused while hosts are connected through it, unless
    /// --force (they are disconnected).
    Del {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// [rdma:|tcp:]ADDRESS:PORT.
        #[arg(long, value_name = "[TRANSPORT:]ADDRESS:PORT")]
        listener: String,
        /// Take it off although hosts are connected through it.
        #[arg(long)]
        force: bool,
    },
}

/// `nvmf-target namespace ...`
#[derive(Subcommand, Debug, Clone)]
pub enum NamespaceCmd {
    /// List the namespaces: store, size, ANA group, NGUID.
    List {
        /// Only this subsystem's.
        #[arg(long, short = 'n', value_name = "NQN")]
        subsystem: Option<String>,
    },
    /// Add a namespace; connected hosts see it without reconnecting.
    Add {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// A block device or a regular file.
        #[arg(long, group = "store")]
        path: Option<String>,
        /// A Ceph pool (with --rbd-image).
        #[arg(long, requires = "rbd_image", group = "store")]
        rbd_pool: Option<String>,
        /// An RBD image in --rbd-pool.
        #[arg(long, requires = "rbd_pool")]
        rbd_image: Option<String>,
        /// A null namespace of SIZE (e.g. 1G) that discards writes, for fabric tests.
        #[arg(long, value_name = "SIZE", group = "store")]
        null: Option<String>,
        /// Its nsid (default: the lowest free one).
        #[arg(long)]
        nsid: Option<u32>,
        /// Refuse writes.
        #[arg(long)]
        read_only: bool,
        /// Its ANA group (default 1).
        #[arg(long, value_name = "GROUP")]
        ana_group: Option<u32>,
        /// Show it only to this host (repeat for several; default: every
        /// host of the subsystem).
        #[arg(long = "host-nqn", short = 'q', value_name = "HOSTNQN")]
        hosts: Vec<String>,
        /// Show it to no host until one is attached.
        #[arg(long, conflicts_with = "hosts")]
        hidden: bool,
        /// Its NGUID, 32 hex digits (default: derived from what identifies
        /// the data, then kept).
        #[arg(long)]
        nguid: Option<String>,
        /// Its UUID (default: derived, then kept).
        #[arg(long)]
        uuid: Option<String>,
        /// Its EUI-64, 16 hex digits (default: none).
        #[arg(long)]
        eui64: Option<String>,
    },
    /// Remove a namespace; connected hosts see it go. Refused while a
    /// host it is shown to is connected, unless --force.
    Del {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The nsid.
        #[arg(long)]
        nsid: u32,
        /// Remove it although hosts it is shown to are connected (they
        /// lose it).
        #[arg(long)]
        force: bool,
    },
    /// Show a namespace to a host; the host finds it without reconnecting.
    Attach {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The nsid.
        #[arg(long)]
        nsid: u32,
        /// The host's NQN.
        #[arg(long, short = 'q')]
        host_nqn: String,
    },
    /// Cap a namespace's I/O (all hosts together), or one host's on it; 0
    /// removes a cap, caps not given stay. I/O over a cap waits.
    Qos {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The nsid.
        #[arg(long)]
        nsid: u32,
        /// This host's caps on the namespace (default: the namespace's own).
        #[arg(long)]
        host_nqn: Option<String>,
        /// Reads and writes per second.
        #[arg(long, value_name = "N")]
        rw_iops: Option<u64>,
        /// MB (2^20 bytes) read and written per second.
        #[arg(long, value_name = "N")]
        rw_mbps: Option<u64>,
        /// MB read per second.
        #[arg(long, value_name = "N")]
        r_mbps: Option<u64>,
        /// MB written per second.
        #[arg(long, value_name = "N")]
        w_mbps: Option<u64>,
    },
    /// Grow a namespace; connected hosts read the new size at once
    /// (namespace-changed event). A file grows to --size; a null
    /// namespace's size is kept in the file. A block device or an RBD
    /// image sets its own size: grow it (lvextend, rbd resize), then run
    /// this without --size. A namespace never shrinks.
    Resize {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The nsid.
        #[arg(long)]
        nsid: u32,
        /// The new size: bytes, or with a suffix (K, M, G, T; powers of 2).
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
    },
    /// Hide a namespace from a host; the host sees it go at once.
    Detach {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The nsid.
        #[arg(long)]
        nsid: u32,
        /// The host's NQN.
        #[arg(long, short = 'q')]
        host_nqn: String,
    },
}

/// `nvmf-target host ...`
#[derive(Subcommand, Debug, Clone)]
pub enum HostCmd {
    /// List the hosts that may connect to each subsystem, and how many
    /// controllers each has.
    List {
        /// Only this subsystem's.
        #[arg(long, short = 'n', value_name = "NQN")]
        subsystem: Option<String>,
    },
    /// Let a host connect to a subsystem ('*': any host), with its keys if given.
    Add {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The host's NQN, or '*'.
        #[arg(long, short = 'q')]
        host_nqn: String,
        #[command(flatten)]
        keys: Keys,
    },
    /// Stop a host connecting to a subsystem; it is disconnected at once ('*': only listed hosts).
    Del {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The host's NQN, or '*'.
        #[arg(long, short = 'q')]
        host_nqn: String,
    },
    /// A host's DH-HMAC-CHAP keys and TLS PSK: set (rotate), del. They apply
    /// at once: the host's controllers must authenticate again (a new PSK
    /// disconnects them).
    Key {
        #[command(subcommand)]
        cmd: KeyCmd,
    },
}

/// A host's DH-HMAC-CHAP keys on the command line.
#[derive(Args, Clone, Default)]
pub struct Keys {
    /// The secret the host must prove it holds (DHHC-1:...; '-': read a line from stdin, kept out of the process list).
    #[arg(long, value_name = "KEY")]
    pub dhchap_key: Option<String>,
    /// The secret this target proves it holds when the host asks (bidirectional; '-': from stdin, after --dhchap-key's).
    #[arg(long, value_name = "KEY")]
    pub dhchap_ctrl_key: Option<String>,
    /// The host's TLS pre-shared key for NVMe/TCP (NVMeTLSkey-1:..., as `nvme gen-tls-key` prints it; '-': from stdin, after the DH-HMAC-CHAP keys').
    #[arg(long, value_name = "KEY")]
    pub tls_key: Option<String>,
}

/// Which keys are given; never the keys.
impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let given = |k: &Option<String>| k.as_ref().map(|_| "(secret)");
        f.debug_struct("Keys")
            .field("dhchap_key", &given(&self.dhchap_key))
            .field("dhchap_ctrl_key", &given(&self.dhchap_ctrl_key))
            .field("tls_key", &given(&self.tls_key))
            .finish()
    }
}

/// `nvmf-target host key ...`
#[derive(Subcommand, Debug, Clone)]
pub enum KeyCmd {
    /// Set a host's key or controller key (the one not given stays).
    Set {
        /// The host's NQN.
        #[arg(long, short = 'q')]
        host_nqn: String,
        #[command(flatten)]
        keys: Keys,
    },
    /// Remove a host's keys: it connects without authenticating.
    Del {
        /// The host's NQN.
        #[arg(long, short = 'q')]
        host_nqn: String,
    },
}

/// `nvmf-target listener ...`
#[derive(Subcommand, Debug, Clone)]
pub enum ListenerCmd {
    /// List the listeners and their ANA states.
    List,
    /// Set the ANA state of a group at the listeners of an address (default:
    /// every listener); the hosts connected there are told at once.
    Ana {
        /// [rdma:|tcp:]ADDRESS:PORT (without a transport: every listener
        /// there); default: every listener.
        #[arg(long, value_name = "[TRANSPORT:]ADDRESS:PORT")]
        listener: Option<String>,
        /// The ANA group.
        #[arg(long)]
        group: u32,
        /// optimized, non-optimized or inaccessible.
        #[arg(long)]
        state: String,
    },
    /// Start listening at an address (RDMA or TCP); hosts may connect there
    /// at once, and the discovery log lists it.
    Add {
        #[command(flatten)]
        listener: ListenerArgs,
        /// NVMe/TCP over TLS: none, optional (TLS or plain, as the host
        /// begins) or required.
        #[arg(long)]
        secure: Option<String>,
    },
    /// Stop listening at an address: the hosts connected there are drained
    /// first (their ANA groups go non-optimized, then inaccessible, so that
    /// their multipath moves to other paths), then disconnected.
    Del(ListenerArgs),
}

/// A listener's transport and address.
#[derive(Args, Debug, Clone)]
pub struct ListenerArgs {
    /// rdma or tcp.
    #[arg(long, short = 't', default_value = "rdma")]
    transport: String,
    /// The IP address (IPv4 or IPv6).
    #[arg(long, short = 'a')]
    address: String,
    /// The port.
    #[arg(long, short = 's', default_value_t = nvme::DEFAULT_PORT)]
    port: u16,
}

impl From<ListenerArgs> for ListenerRef {
    fn from(a: ListenerArgs) -> ListenerRef {
        ListenerRef {
            transport: Some(a.transport),
            address: a.address,
            port: Some(a.port),
            secure: None,
        }
    }
}

/// `nvmf-target controller ...`
#[derive(Subcommand, Debug, Clone)]
pub enum ControllerCmd {
    /// List the connected controllers: host, transport, address, queues.
    List {
        /// Only this subsystem's.
        #[arg(long, short = 'n', value_name = "NQN")]
        subsystem: Option<String>,
    },
    /// Disconnect a controller (its host reconnects, as after a network error).
    Disconnect {
        /// The subsystem's NQN.
        #[arg(long, short = 'n')]
        subsystem: String,
        /// The controller id (nvmf-target status lists them).
        #[arg(long)]
        cntlid: u16,
    },
}

/// `nvmf-target config ...`
#[derive(Subcommand, Debug, Clone)]
pub enum ConfigCmd {
    /// Print the running configuration, as TOML.
    Show,
}

/// A command for the daemon (`nvmf-target subsystem|namespace|host|controller|config`).
#[derive(Subcommand, Debug, Clone)]
pub enum Admin {
    /// Subsystems: add, del (live; kept in the configuration file).
    Subsystem {
        #[command(subcommand)]
        cmd: SubsystemCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Namespaces: add, del (live; hosts see the change without reconnecting).
    Namespace {
        #[command(subcommand)]
        cmd: NamespaceCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Hosts allowed to connect: add, del (a removed host is disconnected at once).
    Host {
        #[command(subcommand)]
        cmd: HostCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Listeners: add, remove, ANA states (live; kept in the configuration
    /// file).
    Listener {
        #[command(subcommand)]
        cmd: ListenerCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Controllers: disconnect.
    Controller {
        #[command(subcommand)]
        cmd: ControllerCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// The running configuration: show.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Drain this gateway before maintenance: its ANA groups go non-optimized,
    /// then inaccessible (the hosts move to the other paths); returns once no
    /// I/O arrives, none is in flight and its RBD images are handed over.
    Drain {
        /// Only this listener, [rdma:|tcp:]ADDRESS:PORT (without a
        /// transport: every listener at the address); default: all.
        #[arg(long, value_name = "[TRANSPORT:]ADDRESS:PORT")]
        listener: Option<String>,
        /// Give up after this long (seconds, default 60, 5 to 110); the
        /// listeners stay drained.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        #[command(flatten)]
        conn: Conn,
    },
    /// End a drain: the configured ANA states again.
    Undrain {
        #[command(flatten)]
        conn: Conn,
    },
    /// Whether stopping now leaves every connected host an optimized path to
    /// each namespace it uses (exit 0), or not (exit 3, with the reasons;
    /// exit 4: those namespaces are served by this target alone, so no
    /// drain or wait would help).
    OkToStop {
        /// Stopping once drained (as `systemctl stop` does where other
        /// gateways serve the hosts): a live gateway that would take a
        /// drained group over counts as a path.
        #[arg(long)]
        after_drain: bool,
        #[command(flatten)]
        conn: Conn,
    },
}

impl Admin {
    /// Where the daemon is and how to print its answer.
    pub fn conn(&self) -> &Conn {
        match self {
            Admin::Subsystem { conn, .. }
            | Admin::Namespace { conn, .. }
            | Admin::Host { conn, .. }
            | Admin::Listener { conn, .. }
            | Admin::Controller { conn, .. }
            | Admin::Config { conn, .. }
            | Admin::Drain { conn, .. }
            | Admin::Undrain { conn }
            | Admin::OkToStop { conn, .. } => conn,
        }
    }

    /// What a `list` command lists (and of which subsystem).
    pub fn list(&self) -> Option<(list::Kind, Option<&str>)> {
        use list::Kind;
        match self {
            Admin::Subsystem {
                cmd: SubsystemCmd::List,
                ..
            } => Some((Kind::Subsystems, None)),
            Admin::Namespace {
                cmd: NamespaceCmd::List { subsystem },
                ..
            } => Some((Kind::Namespaces, subsystem.as_deref())),
            Admin::Host {
                cmd: HostCmd::List { subsystem },
                ..
            } => Some((Kind::Hosts, subsystem.as_deref())),
            Admin::Listener {
                cmd: ListenerCmd::List,
                ..
            } => Some((Kind::Listeners, None)),
            Admin::Controller {
                cmd: ControllerCmd::List { subsystem },
                ..
            } => Some((Kind::Controllers, subsystem.as_deref())),
            _ => None,
        }
    }

    /// The method and its parameters.
    pub fn request(&self) -> (&'static str, Value) {
        fn v<T: serde::Serialize>(t: T) -> Value {
            serde_json::to_value(t).unwrap_or(Value::Null)
        }
        match self.clone() {
            Admin::Subsystem {
                cmd: SubsystemCmd::List,
                ..
            }
            | Admin::Namespace {
                cmd: NamespaceCmd::List { .. },
                ..
            }
            | Admin::Host {
                cmd: HostCmd::List { .. },
                ..
            }
            | Admin::Listener {
                cmd: ListenerCmd::List,
                ..
            }
            | Admin::Controller {
                cmd: ControllerCmd::List { .. },
                ..
            } => ("status", Value::Null),
            Admin::Subsystem {
                cmd:
                    SubsystemCmd::Add {
                        subsystem,
                        allow_any_host,
                        hosts,
                        serial,
                        model,
                    },
                ..
            } => (
                "subsystem_add",
                v(SubsystemAdd {
                    nqn: subsystem,
                    allow_any_host,
                    hosts,
                    serial,
                    model,
                }),
            ),
            Admin::Subsystem {
                cmd: SubsystemCmd::Del { subsystem, force },
                ..
            } => (
                "subsystem_del",
                with_force(v(SubsystemRef { nqn: subsystem }), force),
            ),
            Admin::Subsystem {
                cmd:
                    SubsystemCmd::Listener(SubsystemListenerCmd::Add {
                        subsystem,
                        listener,
                    }),
                ..
            } => (
                "subsystem_listener_add",
                v(SubsystemListener {
                    subsystem,
                    listener,
                }),
            ),
            Admin::Subsystem {
                cmd:
                    SubsystemCmd::Listener(SubsystemListenerCmd::Del {
                        subsystem,
                        listener,
                        force,
                    }),
                ..
            } => (
                "subsystem_listener_del",
                with_force(
                    v(SubsystemListener {
                        subsystem,
                        listener,
                    }),
                    force,
                ),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Add {
                        subsystem,
                        path,
                        rbd_pool,
                        rbd_image,
                        null,
                        nsid,
                        read_only,
                        ana_group,
                        hosts,
                        hidden,
                        nguid,
                        uuid,
                        eui64,
                    },
                ..
            } => (
                "namespace_add",
                v(NamespaceAdd {
                    nguid,
                    uuid,
                    eui64,
                    subsystem,
                    nsid,
                    path,
                    rbd_pool,
                    rbd_image,
                    null_size: null,
                    read_only,
                    ana_group,
                    hosts: (hidden || !hosts.is_empty()).then_some(hosts),
                }),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Del {
                        subsystem,
                        nsid,
                        force,
                    },
                ..
            } => (
                "namespace_del",
                with_force(v(NamespaceRef { subsystem, nsid }), force),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Attach {
                        subsystem,
                        nsid,
                        host_nqn,
                    },
                ..
            } => (
                "namespace_attach",
                v(NamespaceHost {
                    subsystem,
                    nsid,
                    host_nqn,
                }),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Qos {
                        subsystem,
                        nsid,
                        host_nqn,
                        rw_iops,
                        rw_mbps,
                        r_mbps,
                        w_mbps,
                    },
                ..
            } => (
                "namespace_qos",
                v(NamespaceQos {
                    subsystem,
                    nsid,
                    host_nqn,
                    rw_iops,
                    rw_mbps,
                    r_mbps,
                    w_mbps,
                }),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Resize {
                        subsystem,
                        nsid,
                        size,
                    },
                ..
            } => (
                "namespace_resize",
                v(NamespaceResize {
                    subsystem,
                    nsid,
                    size,
                }),
            ),
            Admin::Namespace {
                cmd:
                    NamespaceCmd::Detach {
                        subsystem,
                        nsid,
                        host_nqn,
                    },
                ..
            } => (
                "namespace_detach",
                v(NamespaceHost {
                    subsystem,
                    nsid,
                    host_nqn,
                }),
            ),
            Admin::Host {
                cmd:
                    HostCmd::Add {
                        subsystem,
                        host_nqn,
                        keys,
                    },
                ..
            } => (
                "host_add",
                v(HostAdd {
                    subsystem,
                    host_nqn,
                    dhchap_key: keys.dhchap_key,
                    dhchap_ctrl_key: keys.dhchap_ctrl_key,
                    tls_key: keys.tls_key,
                }),
            ),
            Admin::Host {
                cmd:
                    HostCmd::Key {
                        cmd: KeyCmd::Set { host_nqn, keys },
                    },
                ..
            } => (
                "host_key_set",
                v(HostKey {
                    host_nqn,
                    dhchap_key: keys.dhchap_key,
                    dhchap_ctrl_key: keys.dhchap_ctrl_key,
                    tls_key: keys.tls_key,
                }),
            ),
            Admin::Host {
                cmd:
                    HostCmd::Key {
                        cmd: KeyCmd::Del { host_nqn },
                    },
                ..
            } => ("host_key_del", v(HostNqn { host_nqn })),
            Admin::Listener {
                cmd:
                    ListenerCmd::Ana {
                        listener,
                        group,
                        state,
                    },
                ..
            } => (
                "listener_ana",
                v(ListenerAna {
                    listener,
                    group,
                    state,
                }),
            ),
            Admin::Listener {
                cmd: ListenerCmd::Add { listener, secure },
                ..
            } => (
                "listener_add",
                v(ListenerRef {
                    secure,
                    ..ListenerRef::from(listener)
                }),
            ),
            Admin::Listener {
                cmd: ListenerCmd::Del(a),
                ..
            } => ("listener_del", v(ListenerRef::from(a))),
            Admin::Host {
                cmd:
                    HostCmd::Del {
                        subsystem,
                        host_nqn,
                    },
                ..
            } => (
                "host_del",
                v(HostRef {
                    subsystem,
                    host_nqn,
                }),
            ),
            Admin::Controller {
                cmd: ControllerCmd::Disconnect { subsystem, cntlid },
                ..
            } => (
                "controller_disconnect",
                v(ControllerRef { subsystem, cntlid }),
            ),
            Admin::Config {
                cmd: ConfigCmd::Show,
                ..
            } => ("config_show", Value::Null),
            Admin::Drain {
                listener, timeout, ..
            } => (
                "drain",
                v(DrainParams {
                    listener,
                    timeout_s: timeout,
                }),
            ),
            Admin::Undrain { .. } => ("undrain", Value::Null),
            Admin::OkToStop { after_drain, .. } => (
                "ok_to_stop",
                match after_drain {
                    true => v(rpc::StopParams { after_drain }),
                    false => Value::Null,
                },
            ),
        }
    }
}

/// The control socket: `socket` if given, else the configuration file's
/// (if it loads), else the default. `Err`: the file disables the socket.
pub fn socket_path(config: &Path, socket: Option<&Path>, cmd: &str) -> Result<PathBuf, String> {
    if let Some(p) = socket {
        return Ok(p.to_path_buf());
    }
    match TargetConfig::load(config) {
        Ok(c) => c.control_socket.ok_or_else(|| {
            format!(
                "{}: the configuration disables the control socket ([control] enabled = false)",
                config.display()
            )
        }),
        Err(e) => {
            if config.exists() {
                eprintln!(
                    "nvmf-target {cmd}: note: {} does not load ({} error(s)); asking the default socket",
                    config.display(),
                    e.count()
                );
            }
            Ok(PathBuf::from(crate::config::DEFAULT_CONTROL_SOCKET))
        }
    }
}

/// The keys given as `-`, read from stdin, a line each (the key, the
/// controller key, the TLS PSK): a secret on the command line is in the
/// process list.
fn keys_from_stdin(mut cmd: Admin) -> Result<Admin, String> {
    let keys = match &mut cmd {
        Admin::Host {
            cmd:
                HostCmd::Add { keys, .. }
                | HostCmd::Key {
                    cmd: KeyCmd::Set { keys, .. },
                },
            ..
        } => keys,
        _ => return Ok(cmd),
    };
    for k in [
        &mut keys.dhchap_key,
        &mut keys.dhchap_ctrl_key,
        &mut keys.tls_key,
    ] {
        if k.as_deref() == Some("-") {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| format!("reading a key from stdin: {e}"))?;
            let line = line.trim();
            if line.is_empty() {
                return Err(
                    "no key on stdin (one line each, in order: the key, the controller key, the TLS PSK)".into(),
                );
            }
            *k = Some(line.to_string());
        }
    }
    Ok(cmd)
}

/// A failed call, for stderr, with a hint where one helps.
pub fn explain(cmd: &str, e: &CallError) -> String {
    let hint = match e {
        CallError::Control(ControlError::Io { source, .. }) => match source.kind() {
            std::io::ErrorKind::PermissionDenied => " (run as root)",
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                " (is nvmf-target running? `systemctl status nvmf-target`)"
            }
            _ => "",
        },
        _ => "",
    };
    format!("nvmf-target {cmd}: {e}{hint}")
}

/// The daemon could not be reached, or answered garbage.
pub const EXIT_UNREACHABLE: u8 = 1;
/// The daemon refused: nothing changed (in use, not allowed now, the
/// configuration would be invalid).
pub const EXIT_REFUSED: u8 = 2;
/// The command line is wrong (sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// The request is invalid: a malformed value, an unknown method
/// (sysexits' EX_DATAERR).
pub const EXIT_INVALID: u8 = 65;
/// The change cannot be made now: the file was edited since the daemon
/// loaded it, or could not be saved (sysexits' EX_TEMPFAIL).
pub const EXIT_LATER: u8 = 75;

/// The daemon's configuration is invalid (sysexits' EX_CONFIG): systemd
/// does not restart it for that (the unit's RestartPreventExitStatus).
pub const EXIT_CONFIG: u8 = 78;

/// Every exit status of the commands, for the man pages.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Success."),
    ("1", "The daemon could not be reached over its control socket, or answered garbage."),
    ("2", "Refused: nothing changed. The message says why (in use, not allowed now, the configuration would be invalid, no such subsystem); check-config and import-nvmetcli: the file is invalid."),
    ("3", "ok-to-stop: stopping now would leave a connected host without an optimized path."),
    ("4", "ok-to-stop: as 3, and no other gateway serves those namespaces."),
    ("5", "ok-to-stop --after-drain: the daemon is too old to answer it."),
    ("64", "Usage: an unknown option or a missing argument."),
    ("65", "Invalid request: a malformed value (a key, an ANA state, a listener name)."),
    ("75", "Not now: the file was edited since the daemon loaded it (reload it first), or the change could not be saved and was undone."),
    ("78", "The daemon (no command): its configuration is invalid; the message says why. The unit does not restart it (RestartPreventExitStatus=78)."),
];

/// The exit status of a refusal with JSON-RPC error `code`.
pub fn exit_of(code: i64) -> u8 {
    match code {
        rpc::PARSE_ERROR | rpc::INVALID_REQUEST | rpc::METHOD_NOT_FOUND | rpc::INVALID_PARAMS => {
            EXIT_INVALID
        }
        rpc::UNAVAILABLE | rpc::NOT_SAVED => EXIT_LATER,
        _ => EXIT_REFUSED,
    }
}

/// Runs `cmd` against the daemon; the exit status is one of
/// [`EXIT_STATUS`].
pub fn run(cmd: &Admin, config: &Path) -> ExitCode {
    let conn = cmd.conn();
    let cmd = match keys_from_stdin(cmd.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let (method, params) = cmd.request();
    let name = method.replace('_', " ");
    let path = match socket_path(config, conn.socket.as_deref(), &name) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmf-target {name}: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let after_drain = !params.is_null();
    match rpc::call(&path, method, params, rpc::CHANGE_TIMEOUT) {
        Ok(v) if cmd.list().is_some() => {
            let Some((kind, only)) = cmd.list() else {
                return ExitCode::SUCCESS;
            };
            let st: crate::daemon::status::Status = match serde_json::from_value(v) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("nvmf-target {name}: the daemon's status is not what this version reads: {e}");
                    return ExitCode::from(EXIT_UNREACHABLE);
                }
            };
            if let Some(n) = only {
                if !st.subsystems.iter().any(|s| s.nqn == n) {
                    eprintln!("nvmf-target: no subsystem '{n}'");
                    return ExitCode::from(EXIT_REFUSED);
                }
            }
            let (head, rows) = list::rows(&st, kind, only);
            if conn.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list::json(&rows)).unwrap_or_default()
                );
            } else {
                print!("{}", list::table(&head, &rows));
            }
            ExitCode::SUCCESS
        }
        Ok(v) if method == "ok_to_stop" => stop_check(&v, conn.json, after_drain),
        Ok(v) if conn.json => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(v) => {
            print!("{}", text(&v));
            ExitCode::SUCCESS
        }
        Err(e) => {
            if conn.json {
                if let CallError::Refused(r) = &e {
                    println!("{}", serde_json::json!({ "error": r }));
                }
            }
            eprintln!("{}", explain(&name, &e));
            match e {
                CallError::Refused(r) => ExitCode::from(exit_of(r.code)),
                CallError::Control(_) => ExitCode::from(EXIT_UNREACHABLE),
            }
        }
    }
}

/// Prints the answer of `ok_to_stop`: exit 0 when it is safe, 3 when not,
/// 4 when not and nothing but this target could serve those namespaces, 5
/// when the daemon is too old to answer `--after-drain`.
fn stop_check(v: &Value, json: bool, after_drain: bool) -> ExitCode {
    let Ok(c) = serde_json::from_value::<StopCheck>(v.clone()) else {
        eprintln!("nvmf-target ok-to-stop: an answer it does not understand: {v}");
        return ExitCode::from(1);
    };
    if json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else if c.ok {
        println!("ok to stop");
    } else {
        println!("not ok to stop:");
        for r in &c.reasons {
            println!("  {r}");
        }
    }
    match (c.ok, c.alone) {
        (_, None) if after_drain => {
            eprintln!("nvmf-target ok-to-stop: the daemon runs an older version, which neither answers --after-drain nor drains when it stops");
            ExitCode::from(5)
        }
        (true, _) => ExitCode::SUCCESS,
        (false, Some(true)) => ExitCode::from(4),
        (false, _) => ExitCode::from(3),
    }
}

/// A result for the terminal.
fn text(v: &Value) -> String {
    if let Ok(c) = serde_json::from_value::<ConfigText>(v.clone()) {
        return format!("# {} (as running)\n{}", c.path, c.toml);
    }
    match serde_json::from_value::<Changed>(v.clone()) {
        Ok(c) => {
            let mut s = c.summary;
            if let Some(a) = c.applied {
                s.push_str(&format!("\n  applied: {a}"));
            }
            if let Some(f) = c.saved {
                s.push_str(&format!("\n  saved to {f}"));
            }
            s + "\n"
        }
        Err(_) => format!("{v}\n"),
    }
}

#[cfg(test)]
mod tests;

/// A removal's parameters, with `force` when given (older daemons refuse
/// an unknown field: it is sent only when asked for).
fn with_force(mut p: Value, force: bool) -> Value {
    if force {
        if let Some(o) = p.as_object_mut() {
            o.insert("force".into(), Value::Bool(true));
        }
    }
    p
}
