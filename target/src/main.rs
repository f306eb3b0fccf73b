//! `nvmf-target`: serve files and block devices to NVMe-oF/RDMA hosts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tracing::{error, info, warn};

use nvmf_target::backend::open_namespace;
use nvmf_target::config::TargetConfig;
use nvmf_target::subsystem::{Subsystem, SubsystemKind, Target};

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
    /// Log filter (e.g. info, debug, nvmf_target=trace); RUST_LOG overrides.
    #[arg(long, default_value = "info")]
    log_level: String,
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

fn init_logging(level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // SAFETY: isatty only inspects fd 2.
    let tty = unsafe { libc::isatty(2) } == 1;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(tty)
        .init();
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

fn build(cfg: &TargetConfig) -> Result<Target, String> {
    let mut subsystems = Vec::new();
    for s in &cfg.subsystems {
        let mut namespaces = Vec::new();
        for n in &s.namespaces {
            let ns = open_namespace(&s.nqn, n)
                .map_err(|e| format!("subsystem {} namespace {}: {e}", s.nqn, n.nsid))?;
            info!(subsys = %s.nqn, nsid = ns.nsid, backend = %ns.backend.describe(), blocks = ns.blocks,
                  block_size = ns.block_size, "namespace ready");
            namespaces.push(Arc::new(ns));
        }
        subsystems.push(Arc::new(Subsystem::new(
            s.nqn.clone(),
            SubsystemKind::Nvm,
            s.allow_any_host,
            s.hosts.clone(),
            s.serial.clone(),
            s.model.clone(),
            namespaces,
        )));
    }
    Ok(Target::new(
        subsystems,
        cfg.listeners.iter().map(|l| l.addr).collect(),
        cfg.poll_spin_us,
    ))
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

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::CheckConfig { file }) = &args.cmd {
        return match TargetConfig::load(file) {
            Ok(c) => {
                println!("{}", summary(&c));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("nvmf-target: configuration refused: {e}");
                ExitCode::from(2)
            }
        };
    }
    init_logging(&args.log_level);
    let mut cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: configuration refused: {e}");
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
    let target = match build(&cfg) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::from(1);
        }
    };
    let set = block_signals();
    for l in &cfg.listeners {
        if let Err(e) = nvmf_target::rdma::listen(target.clone(), l.addr) {
            error!("{e}");
            return ExitCode::from(1);
        }
    }
    info!(
        subsystems = target.subsystems.len(),
        listeners = target.listeners.len(),
        version = env!("CARGO_PKG_VERSION"),
        "nvmf-target ready"
    );
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals in `set`.
        unsafe { libc::sigwait(&set, &mut sig) };
        if sig == libc::SIGHUP {
            warn!("SIGHUP: configuration reload is not supported yet; keeping the current configuration");
            continue;
        }
        break;
    }
    info!("shutting down: disconnecting hosts");
    for c in target.all_controllers() {
        c.kill_all();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while target.live_queues.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = target.live_queues.load(Ordering::Acquire);
    if left > 0 {
        warn!(queues = left, "queues still open at exit");
    }
    for s in &target.subsystems {
        for ns in &s.namespaces {
            if let nvmf_target::backend::Backend::File { file, .. } = &ns.backend {
                if let Err(e) = file.sync_data() {
                    warn!(nsid = ns.nsid, "final flush: {e}");
                }
            }
        }
    }
    info!("{}", target.stats.line());
    info!("stopped");
    ExitCode::SUCCESS
}
