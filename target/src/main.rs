//! `nvmf-target`: serve files and block devices to NVMe-oF/RDMA hosts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sd_notify::NotifyState;
use tracing::{error, info, warn};

use nvmf_target::config::TargetConfig;
use nvmf_target::daemon::{Daemon, LogReload};

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
    /// Quick form: a namespace (file, block device, or null:SIZE), repeatable; numbered from 1.
    #[arg(long, value_name = "PATH")]
    namespace: Vec<String>,
    /// Busy-poll window of the queue threads in microseconds (overrides the config).
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
    },
    /// Convert the JSON that `nvmetcli save` writes for the kernel target
    /// (usually /etc/nvmet/config.json) to this target's TOML, on stdout;
    /// what cannot be carried over is listed on stderr and in the output.
    ImportNvmetcli {
        /// The nvmetcli JSON file.
        file: PathBuf,
    },
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

/// Sets up `tracing` to stderr (journald-friendly: no timestamps or colours
/// when stderr is the journal). The filter is RUST_LOG if set, else
/// `--log-level`, else the config's `log.level`; only the last can change on
/// reload, through the returned handle.
fn init_logging(cli_level: Option<&str>, cfg_level: &str) -> Option<LogReload> {
    use tracing_subscriber::{fmt, prelude::*, reload, EnvFilter};
    let fixed = EnvFilter::try_from_default_env()
        .ok()
        .or_else(|| cli_level.map(EnvFilter::new));
    let reloadable = fixed.is_none();
    let filter = fixed.unwrap_or_else(|| EnvFilter::new(cfg_level));
    let (filter, handle) = reload::Layer::new(filter);
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    // SAFETY: isatty only inspects fd 2.
    let tty = unsafe { libc::isatty(2) } == 1;
    let plain = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(tty && !journal);
    let output = if journal {
        plain.without_time().boxed()
    } else {
        plain.boxed()
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

fn load(args: &Args) -> Result<TargetConfig, String> {
    match (&args.listen, &args.nqn, &args.config) {
        (Some(l), Some(n), None) => {
            if args.namespace.is_empty() {
                return Err("the quick form needs at least one --namespace PATH".into());
            }
            TargetConfig::quick(l, n, &args.namespace).map_err(|e| e.to_string())
        }
        (Some(_), _, Some(_)) => Err(
            "use either --config or the quick form (--listen/--nqn/--namespace), not both".into(),
        ),
        _ => {
            let path = args
                .config
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
            TargetConfig::load(&path).map_err(|e| e.to_string())
        }
    }
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local; pthread_sigmask on the calling thread
    // (inherited by the threads spawned after it).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Tells systemd (if it supervises us) about a state change.
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        warn!("sd_notify: {e}");
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
    match nvmf_target::nvmetcli::import(&text, &file.display().to_string()) {
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

fn main() -> ExitCode {
    let args = Args::parse();
    match &args.cmd {
        Some(Cmd::CheckConfig { file }) => {
            return match TargetConfig::load(file) {
                Ok(c) => {
                    println!("{}", summary(&c));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("nvmf-target: configuration refused: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Some(Cmd::ImportNvmetcli { file }) => return import_nvmetcli(file),
        None => {}
    }
    let mut cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: configuration refused: {e}");
            notify(&[NotifyState::Status(&format!("configuration refused: {e}"))]);
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
    let set = block_signals();
    let mut daemon = match Daemon::start(cfg, log_reload) {
        Ok(d) => d,
        Err(e) => {
            error!("{e}");
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
    let mut path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    if args.listen.is_some() {
        path = PathBuf::new();
    }
    loop {
        match wait_signal(&set, tick) {
            Some(libc::SIGHUP) => {
                let mut st = vec![NotifyState::Reloading];
                if let Ok(m) = NotifyState::monotonic_usec_now() {
                    st.push(m);
                }
                notify(&st);
                let result = if path.as_os_str().is_empty() {
                    Err(
                        "the quick form (--listen/--nqn) has no configuration file to reload"
                            .into(),
                    )
                } else {
                    TargetConfig::load(&path)
                        .map_err(|e| e.to_string())
                        .and_then(|c| daemon.reload(c))
                };
                let reloads = &nvmf_target::metrics::metrics().reloads;
                let note = match result {
                    Ok(plan) => {
                        reloads.with_label_values(&["ok"]).inc();
                        info!("configuration reloaded: {}", plan.summary());
                        format!("reloaded ({})", plan.summary())
                    }
                    Err(e) => {
                        reloads.with_label_values(&["refused"]).inc();
                        error!("reload refused, the previous configuration stays in effect: {e}");
                        format!("reload refused: {e}")
                    }
                };
                status = daemon.status();
                notify(&[
                    NotifyState::Ready,
                    NotifyState::Status(&format!("{status}; {note}")),
                ]);
            }
            Some(sig) => {
                info!(signal = sig, "shutting down");
                break;
            }
            None => {}
        }
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
                    error!("liveness check failed (the watchdog is no longer petted): {e}");
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
    match daemon.shutdown() {
        Ok(()) => {
            info!("stopped cleanly");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!("stopped with an error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Waits up to `timeout` for one of the blocked signals in `set`.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<libc::c_int> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `ts` are valid for the call; no siginfo is requested.
    let r = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}
