//! A listener thread, whatever its transport: the address it serves, its
//! stop flag and its heartbeat (the watchdog's check), and the handle that
//! stops it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::base::clock::monotonic_ms;

/// A running listener thread.
#[derive(Debug)]
pub struct Listener {
    /// The address it listens on.
    pub addr: SocketAddr,
    beat: Beat,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a listener's loop looks at: whether to stop, and where to record
/// that it went round.
#[derive(Debug, Clone)]
pub struct Beat {
    stop: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
}

impl Beat {
    /// Records that the loop went round.
    pub fn beat(&self) {
        self.heartbeat.store(monotonic_ms(), Ordering::Relaxed);
    }

    /// Whether the loop is asked to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

impl Listener {
    /// Runs `run` on a thread named `name`, listening on `addr`.
    pub fn spawn(
        addr: SocketAddr,
        name: String,
        run: impl FnOnce(Beat) + Send + 'static,
    ) -> std::io::Result<Listener> {
        let beat = Beat {
            stop: Arc::new(AtomicBool::new(false)),
            heartbeat: Arc::new(AtomicU64::new(monotonic_ms())),
        };
        let b = beat.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(b))?;
        Ok(Listener {
            addr,
            beat,
            thread: Some(thread),
        })
    }

    /// Whether the thread is running and went round its loop within `max_ms`.
    pub fn alive(&self, max_ms: u64) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
            && monotonic_ms().saturating_sub(self.beat.heartbeat.load(Ordering::Relaxed)) <= max_ms
    }

    /// Stops accepting; connected queues are not affected.
    pub fn stop(mut self) {
        self.beat.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts and logs (once a minute per address) a pending connection of
/// `from` that lost its place to a newer one.
pub fn evicted(
    adm: &crate::base::admission::Admission,
    addr: SocketAddr,
    from: std::net::IpAddr,
    why: crate::base::admission::Refusal,
) {
    crate::telemetry::metrics::reject(why.evicted_reason());
    if adm.should_log(from, std::time::Instant::now()) {
        let (mine, all) = adm.counts(from);
        tracing::warn!(%addr, peer = %from, pending_from_peer = mine, pending = all, limit = why.reason(),
              "a connection not yet connected lost its place to a newer one \
               ([target] max_pending_queues_per_peer / max_pending_queues; said once a minute per peer)");
    }
}
