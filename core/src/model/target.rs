//! The target: every subsystem, the discovery subsystem, the listeners and
//! their ANA states, the hosts' credentials, and the limits every host is
//! held to.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::model::controller::Controller;
use crate::model::port::Port;
use crate::model::subsystem::{Subsystem, SubsystemKind};

/// What a change of the hosts' keys did.
#[derive(Debug, Default)]
pub struct KeyChange {
    /// The hosts whose keys changed.
    pub hosts: Vec<String>,
    /// Their controllers disconnected.
    pub gone: Vec<Arc<Controller>>,
    /// Their controllers given the grace to authenticate again.
    pub rekeying: Vec<Arc<Controller>>,
}

/// The whole target: subsystems, the discovery subsystem, listeners, counters.
#[derive(Debug)]
pub struct Target {
    /// NVM subsystems (replaced on reload).
    subsystems: ArcSwap<Vec<Arc<Subsystem>>>,
    /// Subsystems removed by a reload whose controllers may still be connected.
    retired: Mutex<Vec<Arc<Subsystem>>>,
    /// The discovery service: its subsystem, generation counter, referrals.
    pub discovery: crate::model::discovery::DiscoveryService,
    /// The listeners (port ids are slot + 1).
    pub listeners: crate::model::port::Ports,
    /// ANA group states by listener.
    pub ana: crate::model::ana::Ana,
    /// Busy-poll window of the workers (µs), read when a worker starts.
    pub poll_spin_us: AtomicU64,
    /// Queue threads running.
    pub live_queues: AtomicUsize,
    /// I/O commands accepted and not yet released (drained at shutdown),
    /// per worker.
    pub io_in_flight: crate::base::shard::Sharded,
    /// I/O commands accepted since start, per worker (workers tell I/O
    /// activity from keep-alives and timers by it).
    pub io_started: crate::base::shard::Sharded,
    /// Shutting down: listeners stop, new I/O is held unanswered (the host
    /// resends it after reconnecting).
    pub stopping: AtomicBool,
    /// Controllers one host NQN may have in one subsystem (`[target]
    /// max_controllers_per_host`).
    pub max_controllers_per_host: AtomicU32,
    /// `[target] key_rotation_grace_ms`.
    pub key_rotation_grace_ms: AtomicU32,
    /// Connect refusals logged, per peer (once a minute).
    pub refusal_log: crate::base::log_limit::PeerLogLimit,
    /// The hosts' authentication keys (`[[host]]`, replaced on reload).
    pub credentials: crate::model::auth::Credentials,
    /// The hosts' TLS PSKs (`[[host]] tls_key`, replaced on reload).
    pub tls_keys: crate::model::tls_keys::TlsKeys,
    /// Controllers of keyed hosts not authenticated yet, capped apart.
    pub unproven: Arc<crate::model::unproven::Unproven>,
    /// Held while an admin Connect checks and takes its host identifier's
    /// binding (see [`crate::model::hostid`]).
    binding: Mutex<()>,
    /// Where authentication transactions run: their exponentiations stay
    /// off the workers, and each peer address takes its turn.
    pub auth_pool: Arc<crate::backend::fair::FairPool>,
    /// Authentication transactions each peer address may start.
    pub auth_rate: crate::base::peer_rate::PeerRate,
}

impl Target {
    /// Creates a target with RDMA listeners on `listeners`.
    pub fn new(
        subsystems: Vec<Arc<Subsystem>>,
        listeners: Vec<SocketAddr>,
        poll_spin_us: u64,
    ) -> Target {
        let ports = listeners.into_iter().map(Port::from).collect();
        Self::with_ports(subsystems, ports, poll_spin_us)
    }

    /// Creates a target with listeners `listeners`.
    pub fn with_ports(
        subsystems: Vec<Arc<Subsystem>>,
        listeners: Vec<Port>,
        poll_spin_us: u64,
    ) -> Target {
        Target {
            subsystems: ArcSwap::from_pointee(subsystems),
            retired: Mutex::new(Vec::new()),
            discovery: Default::default(),
            ana: crate::model::ana::Ana::new(listeners.len()),
            listeners: crate::model::port::Ports::new(listeners),
            poll_spin_us: AtomicU64::new(poll_spin_us),
            live_queues: Default::default(),
            io_in_flight: Default::default(),
            io_started: Default::default(),
            stopping: Default::default(),
            max_controllers_per_host: AtomicU32::new(
                crate::worker::config::DEFAULT_MAX_CONTROLLERS_PER_HOST,
            ),
            key_rotation_grace_ms: AtomicU32::new(
                crate::worker::config::DEFAULT_KEY_ROTATION_GRACE_MS,
            ),
            refusal_log: Default::default(),
            credentials: Default::default(),
            tls_keys: Default::default(),
            unproven: Default::default(),
            binding: Mutex::new(()),
            auth_pool: crate::backend::fair::FairPool::for_machine(
                crate::model::auth::PEER_QUEUED,
                crate::model::auth::QUEUED,
            ),
            auth_rate: crate::base::peer_rate::PeerRate::new(
                crate::model::auth::PEER_BURST,
                crate::model::auth::PEER_PER_SECOND,
            ),
        }
    }

    /// Serializes the admin Connects' host identifier checks and their
    /// reading of the hosts' keys with a change of the keys.
    pub fn binding_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.binding.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the hosts' keys (`[[host]]`) at once: the controllers of a
    /// host whose keys changed authenticated with another key, or none,
    /// and are disconnected (revoked: their host connects again and
    /// authenticates as the new keys say), but for a DH-HMAC-CHAP key
    /// replaced by another: those of its controllers that authenticated
    /// keep serving for `[target] key_rotation_grace_ms` after `now`, by
    /// when each of their queues must have authenticated again with the
    /// new key (the Linux host does when its new key is written to
    /// `dhchap_secret`), or the controller ends ([`crate::queue`]'s timer).
    /// No admin Connect runs meanwhile, so none makes a controller under
    /// the old keys after this.
    pub fn set_credentials(
        &self,
        hosts: &[crate::model::auth::HostConfig],
        now: Instant,
    ) -> KeyChange {
        let _connects = self.binding_lock();
        let keyed_before: Vec<bool> = hosts
            .iter()
            .map(|h| self.credentials.has_key(&h.nqn))
            .collect();
        let was_keyed = |nqn: &str| {
            hosts
                .iter()
                .zip(&keyed_before)
                .any(|(h, &k)| k && h.nqn == nqn)
        };
        let chap = self.credentials.set(hosts);
        // A TLS PSK added, replaced or removed counts as a key change: the
        // host's controllers connected under the old one go.
        let tls = self.tls_keys.set(hosts);
        let mut changed: Vec<String> = chap.iter().chain(&tls).cloned().collect();
        changed.sort();
        changed.dedup();
        let mut out = KeyChange {
            hosts: changed,
            gone: Vec::new(),
            rekeying: Vec::new(),
        };
        if out.hosts.is_empty() {
            return out;
        }
        let grace =
            Duration::from_millis(self.key_rotation_grace_ms.load(Ordering::Relaxed).into());
        let epoch = self.credentials.epoch();
        for c in self.all_controllers() {
            if c.subsys.kind != SubsystemKind::Nvm
                || out.hosts.binary_search(&c.hostnqn).is_err()
                || c.is_revoked()
            {
                continue;
            }
            let rotated = !grace.is_zero()
                && tls.binary_search(&c.hostnqn).is_err()
                && was_keyed(&c.hostnqn)
                && self.credentials.has_key(&c.hostnqn)
                && c.auth.authenticated();
            if rotated {
                c.auth.rekey(epoch, now + grace);
                out.rekeying.push(c);
            } else {
                c.revoke();
                out.gone.push(c);
            }
        }
        out
    }

    /// The NVM subsystems.
    pub fn subsystems(&self) -> Arc<Vec<Arc<Subsystem>>> {
        self.subsystems.load_full()
    }

    /// Replaces the NVM subsystems (new connections see the new set). Removed
    /// subsystems keep serving their connected controllers.
    pub fn set_subsystems(&self, subsystems: Vec<Arc<Subsystem>>) {
        let old = self.subsystems.swap(Arc::new(subsystems));
        let now = self.subsystems.load();
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(
                old.iter()
                    .filter(|s| !now.iter().any(|n| Arc::ptr_eq(n, s)))
                    .cloned(),
            );
        self.prune_retired();
        self.discovery.bump_genctr();
    }

    /// Forgets removed subsystems whose last controller is gone.
    pub fn prune_retired(&self) {
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|s| !s.controllers().is_empty());
    }

    /// Tells each discovery controller whose host would read another log
    /// now than it last read (a subsystem, its hosts, a listener or a
    /// referral changed): how many were told.
    pub fn notify_discovery(&self) -> usize {
        self.discovery
            .subsystem
            .controllers()
            .iter()
            .filter(|c| {
                // Only hosts that read the log are measured against it.
                let Some(seen) = c.state().disc_seen else {
                    return false;
                };
                seen != crate::model::discovery_log::digest(self, &c.hostnqn)
                    && c.notify_disc_changed()
            })
            .count()
    }

    /// The subsystem named `nqn` (the discovery NQN included).
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == nvme::DISCOVERY_NQN {
            return Some(self.discovery.subsystem.clone());
        }
        self.subsystems
            .load()
            .iter()
            .find(|s| s.nqn == nqn)
            .cloned()
    }

    /// Every subsystem that may have controllers: current, retired, discovery.
    pub fn all_subsystems(&self) -> Vec<Arc<Subsystem>> {
        let mut v: Vec<_> = self.subsystems.load().iter().cloned().collect();
        v.extend(
            self.retired
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        v.push(self.discovery.subsystem.clone());
        v
    }

    /// Every controller of every subsystem.
    pub fn all_controllers(&self) -> Vec<Arc<Controller>> {
        self.all_subsystems()
            .iter()
            .flat_map(|s| s.controllers())
            .collect()
    }
}
