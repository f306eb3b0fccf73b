//! `nvmf-target`: serve files and block devices to NVMe-oF/RDMA hosts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use clap::{Parser, Subcommand};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use sd_notify::NotifyState;
use tracing::{error, info, warn};

use nvmf_target::cli;
use nvmf_target::config::TargetConfig;
use nvmf_target::daemon::{Daemon, LogReload, Source};

/// Default configuration file.
const DEFAULT_CONFIG: &str = "/etc/nvmf-target/nvmf-target.toml";

#[derive(Parser, Debug)]
#[command(
    name = "nvmf-target",
    version,
    about = "Userspace NVMe-over-Fabrics target over RDMA"
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// TOML configuration file (default /etc/nvmf-target/nvmf-target.toml unless the quick form is used).
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Quick form: listen on ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT", requires = "nqn")]
    listen: Option<String>,
    /// Quick form: subsystem NQN (open to any host).
    #[arg(long, requires = "listen")]
    nqn: Option<String>,
    /// Quick form: a namespace (file, block device, null:SIZE, or rbd:POOL/IMAGE with the default Ceph configuration), repeatable; numbered from 1.
    #[arg(long, value_name = "PATH")]
    namespace: Vec<String>,
    /// Busy-poll window of the workers in microseconds (overrides the config).
    #[arg(long, value_name = "US")]
    poll_spin_us: Option<u64>,
    /// Validate the configuration and exit.
    #[arg(long)]
    check: bool,
    /// Log filter (e.g. info, debug, nvmf_target=trace) instead of the
    /// config's log.level; RUST_LOG overrides both.
    #[arg(long)]
    log_level: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Validate a configuration file (with its NVMF_TARGET_* environment
    /// overrides) without serving: exit 0 and a summary if valid, 2 and the
    /// file, field and reason if not.
    CheckConfig {
        /// The file.
        file: PathBuf,
        /// Print the result as JSON: {"ok": true, "listeners", "subsystems",
        /// "namespaces"} or {"ok": false, "errors": [{"file", "field", "reason"}]}.
        #[arg(long)]
        json: bool,
    },
    /// Convert the JSON that `nvmetcli save` writes for the kernel target
    /// (usually /etc/nvmet/config.json) to this target's TOML, on stdout;
    /// what cannot be carried over is listed on stderr and in the output.
    ImportNvmetcli {
        /// The nvmetcli JSON file.
        file: PathBuf,
    },
    /// Show what the running daemon serves and who is connected: subsystems,
    /// namespaces, listeners and each controller (host NQN and address,
    /// queues, keep-alive, I/O counts). Asks the daemon over its control
    /// socket (the [control] socket of the configuration, by default
    /// /run/nvmf-target/control.sock); needs root.
    Status {
        /// Print the status as JSON (format documented in the README).
        #[arg(long)]
        json: bool,
        /// The control socket (default: from the configuration file).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Subsystems: add, del (live; kept in the configuration file).
    Subsystem {
        #[command(subcommand)]
        cmd: cli::SubsystemCmd,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// Namespaces: add, del (live; hosts see the change without reconnecting).
    Namespace {
        #[command(subcommand)]
        cmd: cli::NamespaceCmd,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// Hosts allowed to connect: add, del (a removed host is disconnected at once).
    Host {
        #[command(subcommand)]
        cmd: cli::HostCmd,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// Controllers: disconnect.
    Controller {
        #[command(subcommand)]
        cmd: cli::ControllerCmd,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// The running configuration: show.
    Config {
        #[command(subcommand)]
        cmd: cli::ConfigCmd,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// Write the man pages and shell completions into DIR (for packaging).
    #[command(hide = true, name = "generate-docs")]
    GenerateDocs {
        /// Where.
        dir: PathBuf,
    },
    /// Print a systemd drop-in that narrows the service's devices from every
    /// block device (the unit's default) to exactly the ones a configuration
    /// exports, for administrators who prefer that to reload-only disk
    /// changes: `nvmf-target systemd-devices /etc/nvmf-target/nvmf-target.toml
    /// > /etc/systemd/system/nvmf-target.service.d/devices.conf`; regenerate
    /// it (and `systemctl daemon-reload`, restart) for every new disk.
    SystemdDevices {
        /// The configuration file.
        file: PathBuf,
    },
}

/// The `DeviceAllow=` drop-in for the block devices of `cfg`.
fn device_allow(cfg: &TargetConfig, file: &std::path::Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    let mut out = format!(
        "# Generated by: nvmf-target systemd-devices {}\n# Narrows the unit's devices to the RDMA devices and the block devices this\n# configuration exports; regenerate, daemon-reload and restart after adding one.\n[Service]\nDeviceAllow=\nDeviceAllow=/dev/infiniband/rdma_cm rw\nDeviceAllow=char-infiniband_verbs rw\n",
        file.display()
    );
    let mut seen = std::collections::BTreeSet::new();
    for s in &cfg.subsystems {
        for n in &s.namespaces {
            if let nvmf_target::config::BackendConfig::File { path } = &n.backend {
                let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                let is_block = std::fs::metadata(&real)
                    .map(|m| m.file_type().is_block_device())
                    .unwrap_or(false);
                if is_block && seen.insert(real.clone()) {
                    out.push_str(&format!("DeviceAllow={} rw\n", real.display()));
                }
            }
        }
    }
    out
}

fn summary(cfg: &TargetConfig) -> String {
    format!(
        "configuration OK: {} listener(s), {} subsystem(s), {} namespace(s)",
        cfg.listeners.len(),
        cfg.subsystems.len(),
        cfg.subsystems
            .iter()
            .map(|s| s.namespaces.len())
            .sum::<usize>()
    )
}

/// Sets up `tracing` to stderr: under systemd (stderr is the journal) each
/// line carries its syslog priority and no timestamp or colour. The filter is
/// RUST_LOG if set, else `--log-level`, else the config's `log.level`; only
/// the last can change on reload, through the returned handle.
fn init_logging(cli_level: Option<&str>, cfg_level: &str) -> Option<LogReload> {
    use nvmf_target::telemetry::journal;
    use tracing_subscriber::{fmt, prelude::*, reload, EnvFilter};
    let fixed = EnvFilter::try_from_default_env()
        .ok()
        .or_else(|| cli_level.map(EnvFilter::new));
    let reloadable = fixed.is_none();
    let filter = fixed.unwrap_or_else(|| EnvFilter::new(cfg_level));
    let (filter, handle) = reload::Layer::new(filter);
    let journal = journal::stderr_is_journal();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let output = if journal {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .event_format(journal::WithPriority(
                fmt::format().with_ansi(false).without_time(),
            ))
            .boxed()
    } else {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(tty)
            .boxed()
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .init();
    reloadable.then(|| {
        Box::new(move |level: &str| {
            let f = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
            handle.reload(f).map_err(|e| e.to_string())
        }) as LogReload
    })
}

/// A refused configuration, for stderr: one error on the line, several as an
/// indented list under a count.
fn refusal(e: &nvmf_target::config::ConfigError) -> String {
    match e.count() {
        1 => format!("configuration refused: {e}"),
        n => format!(
            "configuration refused, {n} errors:\n{}",
            e.to_string()
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// The configuration, and the file it came from (none for the quick form).
fn load(args: &Args) -> Result<(TargetConfig, Option<Source>), String> {
    match (&args.listen, &args.nqn, &args.config) {
        (Some(l), Some(n), None) => {
            if args.namespace.is_empty() {
                return Err("configuration refused: the quick form needs at least one --namespace PATH".into());
            }
            TargetConfig::quick(l, n, &args.namespace)
                .map(|c| (c, None))
                .map_err(|e| refusal(&e))
        }
        (Some(_), _, Some(_)) => Err(
            "configuration refused: use either --config or the quick form (--listen/--nqn/--namespace), not both".into(),
        ),
        _ => {
            let path = config_path(args);
            TargetConfig::load_text(&path)
                .map(|(c, text)| (c, Some(Source { path, text })))
                .map_err(|e| refusal(&e))
        }
    }
}

/// `--config`, or the default file.
fn config_path(args: &Args) -> PathBuf {
    args.config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and so in every thread
/// spawned after) and returns a descriptor the main thread reads them from.
fn block_signals() -> std::io::Result<SignalFd> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block()?;
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Tells systemd (if it supervises us) about a state change.
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        warn!(error = %e, "sd_notify failed");
    }
}

fn import_nvmetcli(file: &PathBuf) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nvmf-target: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    match nvmf_target::import::import(&text, &file.display().to_string()) {
        Ok(imp) => {
            for n in &imp.notes {
                eprintln!("note: {n}");
            }
            print!("{}", imp.toml);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvmf-target: import refused: {e}");
            ExitCode::from(2)
        }
    }
}

/// Loads `file` (with its environment overrides) and prints what `out` makes
/// of it: exit 0, or 2 with the reason the file is refused.
fn print_from_config(
    file: &std::path::Path,
    out: impl FnOnce(&TargetConfig) -> String,
) -> ExitCode {
    match TargetConfig::load(file) {
        Ok(c) => {
            print!("{}", out(&c));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvmf-target: {}", refusal(&e));
            ExitCode::from(2)
        }
    }
}

/// `check-config --json`: the verdict on stdout, exit 0 or 2 as without.
fn check_config_json(file: &std::path::Path) -> ExitCode {
    let (v, code) = match TargetConfig::load(file) {
        Ok(c) => (
            serde_json::json!({
                "ok": true,
                "listeners": c.listeners.len(),
                "subsystems": c.subsystems.len(),
                "namespaces": c.subsystems.iter().map(|s| s.namespaces.len()).sum::<usize>(),
            }),
            ExitCode::SUCCESS,
        ),
        Err(e) => (
            serde_json::json!({"ok": false, "errors": e.to_json()}),
            ExitCode::from(2),
        ),
    };
    println!("{v}");
    code
}

/// `nvmf-target status`.
fn status(args: &Args, json: bool, socket: Option<&std::path::Path>) -> ExitCode {
    let path = match cli::socket_path(&config_path(args), socket, "status") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmf-target status: {e}");
            return ExitCode::from(2);
        }
    };
    match nvmf_target::daemon::control::query_status(&path) {
        Ok(st) if json => match serde_json::to_string_pretty(&st) {
            Ok(j) => {
                println!("{j}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("nvmf-target status: {e}");
                ExitCode::from(1)
            }
        },
        Ok(st) => {
            print!("{}", st.text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", cli::explain("status", &e));
            ExitCode::from(1)
        }
    }
}

/// `generate-docs`: the man pages (nvmf-target(8), one per command, and
/// nvmf-target.toml(5) from the shipped, commented configuration) and the
/// shell completions.
fn generate_docs(dir: &std::path::Path) -> ExitCode {
    use clap::CommandFactory;
    let config = clidoc::config_page(
        "nvmf-target.toml",
        "5",
        "configuration of the nvmf-target daemon",
        "The daemon reads /etc/nvmf-target/nvmf-target.toml (or --config FILE) at start and on \
         systemctl reload; nvmf-target check-config FILE validates a file. Live changes \
         (nvmf-target namespace add, ...) are written back into it, its comments kept. \
         Scalar settings can be overridden by NVMF_TARGET_<SECTION>__<KEY> environment variables.",
        include_str!("../../etc/nvmf-target.toml"),
        "nvmf-target(8), nvmf-target-namespace(8), nvmf-target-check-config(8); \
         /usr/share/doc/nvmf-target/",
    );
    let done = clidoc::write_all(Args::command(), "8", dir)
        .and_then(|_| std::fs::write(dir.join("man/nvmf-target.toml.5"), config));
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvmf-target generate-docs: {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    // Before any thread: librdmacm's device list must survive a device
    // added back after a removal (see the function).
    rdma::one_malloc_arena();
    let args = Args::parse();
    match &args.cmd {
        Some(Cmd::Status { json, socket }) => return status(&args, *json, socket.as_deref()),
        Some(Cmd::CheckConfig { file, json: true }) => return check_config_json(file),
        Some(Cmd::CheckConfig { file, json: false }) => {
            return print_from_config(file, |c| format!("{}\n", summary(c)))
        }
        Some(Cmd::ImportNvmetcli { file }) => return import_nvmetcli(file),
        Some(Cmd::SystemdDevices { file }) => {
            return print_from_config(file, |c| device_allow(c, file))
        }
        Some(Cmd::GenerateDocs { dir }) => return generate_docs(dir),
        Some(Cmd::Subsystem { cmd, conn }) => {
            return cli::run(
                &cli::Admin::Subsystem(cmd.clone()),
                conn,
                &config_path(&args),
            )
        }
        Some(Cmd::Namespace { cmd, conn }) => {
            return cli::run(
                &cli::Admin::Namespace(cmd.clone()),
                conn,
                &config_path(&args),
            )
        }
        Some(Cmd::Host { cmd, conn }) => {
            return cli::run(&cli::Admin::Host(cmd.clone()), conn, &config_path(&args))
        }
        Some(Cmd::Controller { cmd, conn }) => {
            return cli::run(
                &cli::Admin::Controller(cmd.clone()),
                conn,
                &config_path(&args),
            )
        }
        Some(Cmd::Config { cmd, conn }) => {
            return cli::run(&cli::Admin::Config(cmd.clone()), conn, &config_path(&args))
        }
        None => {}
    }
    let (mut cfg, source) = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            // systemd's STATUS= is one line.
            notify(&[NotifyState::Status(&e.replace("\n", "; "))]);
            return ExitCode::from(2);
        }
    };
    if let Some(us) = args.poll_spin_us {
        cfg.poll_spin_us = us;
    }
    if args.check {
        println!("{}", summary(&cfg));
        return ExitCode::SUCCESS;
    }
    let log_reload = init_logging(args.log_level.as_deref(), &cfg.log_level);
    // Before any thread starts, so every thread inherits the mask and the
    // main thread alone takes the signals.
    let sfd = match block_signals() {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot take signals");
            return ExitCode::from(1);
        }
    };
    let mut daemon = match Daemon::start(cfg, source, log_reload) {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "failed to start");
            notify(&[NotifyState::Status(&format!("failed to start: {e}"))]);
            return ExitCode::from(1);
        }
    };
    let mut status = daemon.status();
    info!(
        version = env!("CARGO_PKG_VERSION"),
        "nvmf-target ready: {status}"
    );
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    let mut wd_usec = 0u64;
    let watchdog = sd_notify::watchdog_enabled(false, &mut wd_usec);
    // Wake at least every second (status) and twice per watchdog period.
    let tick = if watchdog {
        Duration::from_micros(wd_usec / 2).min(Duration::from_secs(1))
    } else {
        Duration::from_secs(1)
    };
    let mut healthy = true;
    loop {
        match wait_event(&sfd, daemon.control_fd(), tick) {
            Event::Control => {
                daemon.serve_control();
            }
            Event::Signal(Signal::SIGHUP) => {
                let mut st = vec![NotifyState::Reloading];
                if let Ok(m) = NotifyState::monotonic_usec_now() {
                    st.push(m);
                }
                notify(&st);
                let result = daemon.reload_file();
                let reloads = &nvmf_target::telemetry::metrics::metrics().reloads;
                let note = match result {
                    Ok(plan) => {
                        reloads.with_label_values(&["ok"]).inc();
                        info!("configuration reloaded: {}", plan.summary());
                        format!("reloaded ({})", plan.summary())
                    }
                    Err(e) => {
                        reloads.with_label_values(&["refused"]).inc();
                        error!(error = %e, "reload refused, the previous configuration stays in effect");
                        format!("reload refused: {}", e.replace('\n', "; "))
                    }
                };
                status = daemon.status();
                notify(&[
                    NotifyState::Ready,
                    NotifyState::Status(&format!("{status}; {note}")),
                ]);
            }
            Event::Signal(sig) => {
                info!(signal = %sig, "shutting down");
                break;
            }
            Event::Tick => {}
        }
        daemon.reap_retired();
        daemon.recover_fenced();
        match daemon.check_alive() {
            Ok(()) => {
                if watchdog {
                    notify(&[NotifyState::Watchdog]);
                }
                if !healthy {
                    info!("healthy again");
                    healthy = true;
                }
            }
            Err(e) => {
                if healthy {
                    error!(error = %e, "liveness check failed (the watchdog is no longer petted)");
                    notify(&[NotifyState::Status(&format!("unhealthy: {e}"))]);
                    healthy = false;
                }
            }
        }
        let now = daemon.status();
        if now != status && healthy {
            status = now;
            notify(&[NotifyState::Status(&status)]);
        }
    }
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: draining I/O, flushing, disconnecting hosts"),
    ]);
    let code = match daemon.shutdown() {
        Ok(()) => {
            info!("stopped cleanly");
            0
        }
        Err(e) => {
            error!(error = %e, "stopped with an error");
            1
        }
    };
    leave(code)
}

/// How long exit waits for cluster connections that other threads are
/// still closing (a connection the cluster fenced may take a while).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Ends the process with `code` once no Ceph cluster connection is open.
/// Exit handlers destroy librados's static objects, and a connection still
/// shutting down on another thread (a fenced one closed in the background,
/// an ownership keeper ending) would crash on them: if connections are
/// still open after [`CLOSE_TIMEOUT`], the process ends without running the
/// handlers (everything of ours is flushed by then).
fn leave(code: u8) -> ExitCode {
    let start = Instant::now();
    while ceph::open_connections() > 0 && start.elapsed() < CLOSE_TIMEOUT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let open = ceph::open_connections();
    if open == 0 {
        return ExitCode::from(code);
    }
    warn!(
        connections = open,
        "Ceph cluster connections still closing at exit: leaving without exit handlers"
    );
    // SAFETY: ends the process at once; nothing of ours needs an exit
    // handler (the log writes to stderr unbuffered, the engine is stopped).
    unsafe { libc::_exit(code.into()) }
}

/// What woke the main thread.
enum Event {
    /// One of the blocked signals.
    Signal(Signal),
    /// The control socket has requests for this thread.
    Control,
    /// Nothing (the timeout passed).
    Tick,
}

/// Waits up to `timeout` for one of the blocked signals or a request from
/// the control socket (`control`).
fn wait_event(
    sfd: &SignalFd,
    control: Option<std::os::fd::BorrowedFd<'_>>,
    timeout: Duration,
) -> Event {
    let signal = || match sfd.read_signal() {
        Ok(Some(si)) => Signal::try_from(si.ssi_signo as i32)
            .ok()
            .map(Event::Signal),
        _ => None,
    };
    if let Some(e) = signal() {
        return e;
    }
    let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
    if let Some(c) = control {
        fds.push(PollFd::new(c, PollFlags::POLLIN));
    }
    let t = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, t) {
        Ok(n) if n > 0 => {
            let control_ready = fds
                .get(1)
                .and_then(|f| f.revents())
                .is_some_and(|r| r.contains(PollFlags::POLLIN));
            match signal() {
                Some(e) => e,
                None if control_ready => Event::Control,
                None => Event::Tick,
            }
        }
        _ => Event::Tick,
    }
}
