//! The daemon's life: signals blocked before any thread starts, the
//! target started, then the main thread's loop (the control socket,
//! SIGHUP's reload, the first signal's drain and the second's stop,
//! maintenance, the liveness check that pets systemd's watchdog, the status
//! line systemd shows) until it stops; then the shutdown and an exit that
//! waits for Ceph's connections to close.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use sd_notify::NotifyState;
use tracing::{error, info, warn};

use super::{Daemon, LogReload, Source};
use crate::config::TargetConfig;

/// Serves `cfg` (read from `source`) until a signal stops the daemon; the
/// process's exit status. Ends the process itself when Ceph connections
/// outlive their bound (see [`leave`]).
pub fn serve(cfg: TargetConfig, source: Option<Source>, log_reload: Option<LogReload>) -> u8 {
    // Before any thread starts, so every thread inherits the mask and the
    // main thread alone takes the signals.
    let sfd = match block_signals() {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot take signals");
            return 1;
        }
    };
    let mut daemon = match Daemon::start(cfg, source, log_reload) {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "failed to start");
            notify(&[NotifyState::Status(&format!("failed to start: {e}"))]);
            return 1;
        }
    };
    let mut status = daemon.status();
    info!(
        version = env!("CARGO_PKG_VERSION"),
        "nvmf-target ready: {status}"
    );
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    daemon.warn_if_idle();
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
        let wait = daemon.maintenance_tick().map_or(tick, |t| t.min(tick));
        match wait_event(&sfd, daemon.control_fd(), wait) {
            Event::Control => {
                daemon.serve_control();
            }
            Event::Signal(Signal::SIGHUP) if daemon.is_stopping() => {
                warn!("reload ignored: the daemon is stopping");
            }
            Event::Signal(Signal::SIGHUP) => {
                let mut st = vec![NotifyState::Reloading];
                if let Ok(m) = NotifyState::monotonic_usec_now() {
                    st.push(m);
                }
                notify(&st);
                let result = daemon.reload_file();
                let reloads = &crate::telemetry::metrics::metrics().reloads;
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
                daemon.warn_if_idle();
            }
            Event::Signal(sig) => {
                info!(signal = %sig, "shutting down");
                if daemon.stop_requested() {
                    break;
                }
                // The unit's stop timeout, extended by the drain's bound
                // and the shutdown after it (flush, disconnect, close).
                let extend = daemon
                    .stop_drain_bound()
                    .map_or(0, |d| (d + STOP_AFTER_DRAIN).as_micros())
                    .min(u32::MAX as u128) as u32;
                notify(&[
                    NotifyState::ExtendTimeoutUsec(extend),
                    NotifyState::Stopping,
                    NotifyState::Status("stopping: draining first (nvmf-target undrain or a second signal stops at once)"),
                ]);
            }
            Event::Tick => {}
        }
        daemon.reap_retired();
        daemon.recover_fenced();
        daemon.maintain();
        if daemon.stop_due() {
            break;
        }
        let alive = daemon.check_alive();
        crate::daemon::gauges::set_healthy(alive.is_ok());
        match alive {
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
pub fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        warn!(error = %e, "sd_notify failed");
    }
}

/// The longest a stop takes after its drain: in-flight I/O, flush,
/// disconnect, cluster connections closing.
const STOP_AFTER_DRAIN: Duration = Duration::from_secs(40);

/// How long exit waits for cluster connections that other threads are
/// still closing (a connection the cluster fenced may take a while).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Ends the process with `code` once no Ceph cluster connection is open.
/// Exit handlers destroy librados's static objects, and a connection still
/// shutting down on another thread (a fenced one closed in the background,
/// an ownership keeper ending) would crash on them: if connections are
/// still open after [`CLOSE_TIMEOUT`], the process ends without running the
/// handlers (everything of ours is flushed by then).
fn leave(code: u8) -> u8 {
    let start = Instant::now();
    while ceph::open_connections() > 0 && start.elapsed() < CLOSE_TIMEOUT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let open = ceph::open_connections();
    if open == 0 {
        return code;
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
