//! Maintenance on the daemon's thread: every pass of its loop tells the
//! other gateways of each RBD image how this one serves the image's ANA
//! group and takes over or gives back groups ([`crate::gateway::takeover`]),
//! and moves a drain on ([`super::drain`]). `nvmf-target drain`,
//! `undrain` and `ok-to-stop` come here from the control socket.

use crate::telemetry::journal::ids;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::ana::AnaState;
use serde_json::Value;
use tracing::{info, warn};

use super::drain::{Drain, Seen, Step};
use super::rpc::{self, Changed, DrainParams, RpcError, StopCheck, StopParams};
use super::Daemon;
use crate::config::{ListenerConfig, TargetConfig};
use crate::gateway::ok_to_stop::{drain_helps, verdict, NsPaths};
use crate::model::namespace::Namespace;
use crate::model::subsystem::{Subsystem, SubsystemKind};

/// How often the loop runs while a drain is on.
pub const DRAIN_TICK: Duration = Duration::from_millis(100);

/// Where a stop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stopping {
    /// No signal yet.
    #[default]
    No,
    /// A signal came during a drain: the stop waits for it to end.
    Asked,
    /// The stop's own drain runs (or none was needed).
    Draining,
}

/// Where a control request's answer goes.
pub type Reply = std::sync::mpsc::Sender<Result<Value, RpcError>>;

/// A drain under way and who waits for it.
#[derive(Debug)]
pub struct Draining {
    drain: Drain,
    reply: Option<Reply>,
    /// A listener's removal, made once its controllers are drained
    /// (`nvmf-target listener del`).
    then: Option<(crate::config::edit::Edit, usize)>,
}

/// The file that says a listener was drained by the operator, in the
/// state directory (per listener: gateways that share the directory keep
/// apart).
fn drained_file(config: &TargetConfig, l: &ListenerConfig) -> Option<std::path::PathBuf> {
    let name = format!("drained-{:?}-{}", l.transport, l.addr).to_lowercase();
    Some(config.state_dir.as_ref()?.join(name))
}

/// At start, before the listeners: those the operator drained and did not
/// undrain start inaccessible.
pub fn restore_drained(config: &TargetConfig, ana: &crate::model::ana::Ana) {
    let ports: Vec<usize> = (0..config.listeners.len())
        .filter(|&p| drained_file(config, &config.listeners[p]).is_some_and(|f| f.exists()))
        .collect();
    if ports.is_empty() {
        return;
    }
    ana.drain(&ports, Some(AnaState::Inaccessible));
    let addrs: Vec<String> = ports
        .iter()
        .map(|&p| config.listeners[p].addr.to_string())
        .collect();
    warn!(listeners = ?addrs, "started drained, as the operator left these listeners: ANA groups inaccessible there (nvmf-target undrain restores the configured states)");
}

impl Daemon {
    /// The longest the main loop may wait before [`Daemon::maintain`].
    pub fn maintenance_tick(&self) -> Option<Duration> {
        self.draining.as_ref().map(|_| DRAIN_TICK)
    }

    /// One pass: publish, take over or give back, move a drain on.
    pub fn maintain(&mut self) {
        let nss: Vec<Arc<Namespace>> = self.nvm_namespaces().into_iter().map(|(_, n)| n).collect();
        for (g, want) in crate::gateway::takeover::pass(&self.target.ana, &nss) {
            let n = self.notify_ana(None);
            match want {
                true => info!(group = g, controllers_notified = n, "ANA group served optimized here: no other gateway of its images serves it optimized"),
                false => info!(group = g, controllers_notified = n, "ANA group back to non-optimized here: another gateway serves it optimized"),
            }
        }
        self.drain_tick();
    }

    /// The namespaces of the NVM subsystems.
    fn nvm_namespaces(&self) -> Vec<(Arc<Subsystem>, Arc<Namespace>)> {
        self.target
            .subsystems()
            .iter()
            .filter(|s| s.kind == SubsystemKind::Nvm)
            .flat_map(|s| {
                s.namespaces()
                    .iter()
                    .map(|n| (s.clone(), n.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Tells the hosts connected at `ports` (all: `None`) that ANA states
    /// changed; how many controllers were told.
    fn notify_ana(&self, ports: Option<&[usize]>) -> usize {
        self.target
            .all_controllers()
            .iter()
            .filter(|c| c.subsys.kind == SubsystemKind::Nvm)
            .filter(|c| ports.is_none_or(|p| p.contains(&c.port())))
            .filter(|c| c.notify_ana_changed())
            .count()
    }

    /// Starts draining the listeners at `p.listener` (all without one);
    /// the answer goes to `reply` once drained.
    pub fn drain_start(&mut self, p: DrainParams, reply: Reply) {
        let refuse = |m: String| {
            let _ = reply.send(Err(RpcError::new(rpc::REFUSED, m)));
        };
        if self.draining.is_some() || self.stopping != Stopping::No {
            return refuse("a drain is already under way, or the daemon is stopping (nvmf-target undrain cancels a drain; during a stop it stops the daemon at once)".into());
        }
        let bounds = crate::config::DRAIN_TIMEOUT_S;
        if p.timeout_s.is_some_and(|t| !bounds.contains(&t)) {
            return refuse(format!(
                "a drain's timeout is {} to {} s (the groups are non-optimized for {} s first; the client waits {} s at most)",
                bounds.start(),
                bounds.end(),
                super::drain::HOLD_NON_OPTIMIZED.as_secs(),
                rpc::CHANGE_TIMEOUT.as_secs()
            ));
        }
        let ports: Vec<usize> = match &p.listener {
            None => self.slots(),
            Some(a) => {
                let name = match crate::model::port::PortName::parse(a) {
                    Ok(n) => n,
                    Err(e) => return refuse(e),
                };
                let ports: Vec<usize> = self
                    .config
                    .listeners
                    .iter()
                    .filter(|l| name.names(&super::listeners::port(l)))
                    .filter_map(|l| self.slot(l))
                    .collect();
                if ports.is_empty() {
                    return refuse(format!("no listener at {name}"));
                }
                ports
            }
        };
        let timeout = p
            .timeout_s
            .map_or(super::drain::DEFAULT_TIMEOUT, Duration::from_secs);
        // The operator's drain holds through a restart (an upgrade, a
        // reboot) until undrained.
        self.remember_drained(&ports, true);
        self.begin_drain(ports, timeout, Some(reply));
    }

    /// Removes a listener (`nvmf-target listener del`): with hosts
    /// connected through it, once they are drained (at most the default
    /// drain time; then it goes anyway); the answer goes to `reply`.
    pub fn listener_del_start(&mut self, l: crate::config::edit::ListenerRef, reply: Reply) {
        let edit = crate::config::edit::Edit::ListenerDel(l);
        let slot = match self.removed_slot(&edit) {
            Ok(s) => s,
            Err(e) => {
                let _ = reply.send(self.counted("listener_del", Err(e)));
                return;
            }
        };
        let connected = self.target.all_controllers().iter().any(|c| {
            c.subsys.kind == SubsystemKind::Nvm && c.listener() == Some(slot) && !c.is_revoked()
        });
        if !connected {
            let r = self.change(&edit);
            let _ = reply.send(self.counted("listener_del", r));
            return;
        }
        if self.draining.is_some() || self.stopping != Stopping::No {
            let m = "a drain is under way, or the daemon is stopping: the listener stays (remove it once the drain ends)";
            let _ = reply.send(Err(RpcError::new(rpc::REFUSED, m)));
            return;
        }
        self.begin_drain(vec![slot], super::drain::DEFAULT_TIMEOUT, Some(reply));
        if let Some(d) = &mut self.draining {
            d.then = Some((edit, slot));
        }
    }

    fn begin_drain(&mut self, ports: Vec<usize>, timeout: Duration, reply: Option<Reply>) {
        let changed = self.target.ana.drain(&ports, Some(AnaState::NonOptimized));
        let n = self.notify_ana(Some(&changed));
        info!(message_id = %ids::DRAIN_STARTED, listeners = ?self.listener_addrs(&ports), controllers_notified = n, timeout_s = timeout.as_secs(), "draining: ANA groups non-optimized");
        self.draining = Some(Draining {
            drain: Drain::new(ports, Instant::now(), timeout),
            reply,
            then: None,
        });
    }

    /// Records (or forgets) that `ports` are drained; a failure is logged
    /// (the drain holds until a restart).
    fn remember_drained(&self, ports: &[usize], drained: bool) {
        for &p in ports {
            let Some(f) = self
                .listener_at(p)
                .and_then(|l| drained_file(&self.config, l))
            else {
                continue;
            };
            let r = match drained {
                true => std::fs::create_dir_all(f.parent().unwrap_or(&f)).and_then(|_| {
                    std::fs::write(
                        &f,
                        "drained by nvmf-target drain; nvmf-target undrain ends it\n",
                    )
                }),
                false => match std::fs::remove_file(&f) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    r => r,
                },
            };
            if let Err(e) = r {
                warn!(file = %f.display(), error = %e, drained, "cannot record the drain: a restart does not keep it");
            }
        }
    }

    /// A listener removed: its operator's drain is forgotten.
    pub(super) fn forget_drained(&self, l: &ListenerConfig) {
        if let Some(f) = drained_file(&self.config, l) {
            let _ = std::fs::remove_file(f);
        }
    }

    /// SIGTERM or SIGINT: whether the daemon may stop now. A gateway
    /// whose hosts another gateway would serve drains first (at most
    /// `[target] drain_on_stop_s`), after a drain under way if there is
    /// one; a second signal stops it at once.
    pub fn stop_requested(&mut self) -> bool {
        if self.stopping != Stopping::No {
            warn!("stopping without waiting for the drain (a second signal)");
            self.drain_stopped();
            return true;
        }
        self.stopping = Stopping::Asked;
        if self.draining.as_ref().is_some_and(|d| d.then.is_some()) {
            // A listener's removal waits no longer: the stop drains all.
            self.drain_answer(Err("the daemon is stopping".into()), false);
        }
        if self.draining.is_some() {
            info!("stopping once the drain under way ends");
            return false;
        }
        self.stop_due()
    }

    /// Whether a stop may go on now: once the drain under way ended, the
    /// listeners it left undrained drain too (when that helps a host).
    pub fn stop_due(&mut self) -> bool {
        match self.stopping {
            Stopping::No => return false,
            _ if self.draining.is_some() => return false,
            Stopping::Draining => return true,
            Stopping::Asked => {}
        }
        self.stopping = Stopping::Draining;
        let Some(timeout) = self.config.drain_on_stop else {
            return true;
        };
        let drained = self.target.ana.drained();
        let undrained: Vec<usize> = self
            .slots()
            .into_iter()
            .filter(|p| {
                !drained
                    .iter()
                    .any(|(d, s)| d == p && *s == AnaState::Inaccessible)
            })
            .collect();
        if undrained.is_empty() || !drain_helps(&self.ns_paths()) {
            return true;
        }
        info!(
            timeout_s = timeout.as_secs(),
            "stopping: draining first (another gateway serves the hosts meanwhile)"
        );
        self.begin_drain(undrained, timeout, None);
        false
    }

    /// A drain is under way, or a stop.
    pub(super) fn draining_or_stopping(&self) -> bool {
        self.draining.is_some() || self.stopping != Stopping::No
    }

    /// A signal asked the daemon to stop (it may be draining first).
    pub fn is_stopping(&self) -> bool {
        self.stopping != Stopping::No
    }

    /// How much longer than usual a stop may take: its drain's bound.
    pub fn stop_drain_bound(&self) -> Option<Duration> {
        self.config.drain_on_stop
    }

    fn listener_addrs(&self, ports: &[usize]) -> Vec<String> {
        ports
            .iter()
            .filter_map(|&p| self.listener_at(p))
            .map(|l| format!("{} ({:?})", l.addr, l.transport).to_lowercase())
            .collect()
    }

    /// What a drain sees now.
    fn drain_seen(&self, ports: &[usize]) -> Seen {
        let completed = self
            .target
            .all_controllers()
            .iter()
            .filter(|c| c.subsys.kind == SubsystemKind::Nvm && ports.contains(&c.port()))
            .map(|c| {
                let t = c.io().totals();
                t.reads + t.writes + t.errors
            })
            .sum();
        let all = ports.len() == self.config.listeners.len();
        let in_flight = all.then(|| self.target.io_in_flight.sum(Ordering::SeqCst).max(0) as u64);
        let owned = self.owned_drained().len();
        Seen {
            completed,
            in_flight,
            owned,
        }
    }

    /// The namespaces whose store this gateway writes although their group
    /// is inaccessible at every listener (drained).
    fn owned_drained(&self) -> Vec<Arc<Namespace>> {
        self.nvm_namespaces()
            .into_iter()
            .map(|(_, ns)| ns)
            .filter(|ns| {
                self.target.ana.best(ns.ana_group) == AnaState::Inaccessible
                    && ns.backend.shared().is_some_and(|s| s.owned())
            })
            .collect()
    }

    fn drain_tick(&mut self) {
        let Some(d) = &self.draining else {
            return;
        };
        let ports = d.drain.ports.clone();
        let seen = self.drain_seen(&ports);
        let Some(d) = self.draining.as_mut() else {
            return;
        };
        match d.drain.poll(Instant::now(), seen) {
            Step::Wait => {}
            Step::Inaccessible => {
                let changed = self.target.ana.drain(&ports, Some(AnaState::Inaccessible));
                let n = self.notify_ana(Some(&changed));
                info!(
                    controllers_notified = n,
                    "draining: ANA groups inaccessible; waiting for the I/O to stop"
                );
            }
            Step::HandOver => {
                let nss = self.owned_drained();
                info!(
                    images = nss.len(),
                    "draining: I/O stopped; handing the RBD images over"
                );
                for ns in nss {
                    if let Some(s) = ns.backend.shared() {
                        s.hand_over();
                    }
                }
            }
            Step::Done(t) => {
                let io = match ports.len() == self.config.listeners.len() {
                    true => "no I/O in flight",
                    // In flight is counted for the whole target only.
                    false => "no command completed there for a second",
                };
                let summary = format!(
                    "drained {} in {:.1} s: ANA groups inaccessible there, {io}, no RBD image of a drained group owned (nvmf-target undrain restores the configured states)",
                    self.listener_addrs(&ports).join(", "),
                    t.as_secs_f64()
                );
                info!(message_id = %ids::DRAINED, "{summary}");
                self.drain_answer(Ok(summary), true);
            }
            Step::TimedOut(what) => {
                let m = match self.draining.as_ref().is_some_and(|d| d.then.is_some()) {
                    true => format!("not drained in time: still {what}"),
                    false => format!("not drained in time: still {what}; the listeners stay drained (nvmf-target undrain restores them)"),
                };
                warn!(message_id = %ids::DRAIN_TIMED_OUT, "{m}");
                self.drain_answer(Err(m), true);
            }
        }
    }

    /// Answers the drain's client: `r`, what it came to; `ended`: it
    /// ran its course (else it was cancelled). A listener removal waiting
    /// for it is made (drained or not in time) or given up (cancelled).
    fn drain_answer(&mut self, r: Result<String, String>, ended: bool) {
        let Some(d) = self.draining.take() else {
            return;
        };
        let Some(reply) = d.reply else {
            return;
        };
        if let Some((edit, slot)) = d.then {
            let drained = match &r {
                Ok(_) => "drained first".to_string(),
                Err(m) => format!("removed anyway, {m}"),
            };
            let answer = match ended {
                // The same listener still (a reload may have removed it,
                // or put another in its place, meanwhile).
                true => match self.removed_slot(&edit) {
                    Ok(s) if s == slot => self.change(&edit).map(|mut c| {
                        c.summary = format!("{} ({drained})", c.summary);
                        c
                    }),
                    Ok(_) => Err(super::live::LiveError::Refused(
                        "the listener was replaced meanwhile (a reload)".into(),
                    )),
                    Err(e) => Err(e),
                },
                false => Err(super::live::LiveError::Refused(match r {
                    Err(m) => m,
                    Ok(m) => m,
                })),
            };
            let answer = answer.map_err(|e| {
                // It stays: its hosts may come back through it.
                let lifted = self.target.ana.drain(&[slot], None);
                self.notify_ana(Some(&lifted));
                super::live::LiveError::Refused(format!(
                    "the listener stays, with its ANA states restored: {e}"
                ))
            });
            let _ = reply.send(self.counted("listener_del", answer));
            return;
        }
        let _ = reply.send(match r {
            Ok(summary) => serde_json::to_value(Changed {
                summary,
                nsid: None,
                applied: None,
                saved: None,
            })
            .map_err(|e| RpcError::new(rpc::REFUSED, e.to_string())),
            Err(m) => Err(RpcError::new(rpc::REFUSED, m)),
        });
    }

    /// The daemon stops: a drain under way is answered so.
    pub fn drain_stopped(&mut self) {
        if self.draining.is_some() {
            self.drain_answer(Err("the daemon is stopping".into()), false);
        }
    }

    /// Ends a drain (one under way is cancelled): the configured ANA
    /// states again.
    pub fn undrain(&mut self) -> Changed {
        if self.draining.is_some() {
            self.drain_answer(Err("cancelled by nvmf-target undrain".into()), false);
        }
        if self.stopping != Stopping::No {
            // Stopping: the drain ends, the daemon stops now; the hosts are
            // not sent back to a path about to go, the operator's drain
            // stays recorded.
            self.draining = None;
            self.stopping = Stopping::Draining;
            let summary =
                "the daemon is stopping: its drain is ended and it stops now (the listeners stay drained until it is gone)".to_string();
            info!("{summary}");
            return Changed {
                summary,
                nsid: None,
                applied: None,
                saved: None,
            };
        }
        let ports: Vec<usize> = self.target.ana.drained().iter().map(|(p, _)| *p).collect();
        self.remember_drained(&self.slots(), false);
        let changed = self.target.ana.drain(&ports, None);
        let n = self.notify_ana(Some(&changed));
        let summary = match changed.is_empty() {
            true => "nothing was drained".to_string(),
            false => format!(
                "undrained {}: configured ANA states restored",
                self.listener_addrs(&changed).join(", ")
            ),
        };
        info!(message_id = %ids::UNDRAINED, controllers_notified = n, "{summary}");
        Changed {
            summary,
            nsid: None,
            applied: None,
            saved: None,
        }
    }

    /// Whether stopping (now, or once drained) leaves every host an
    /// optimized path.
    pub fn ok_to_stop(&self, p: &StopParams) -> StopCheck {
        // A stop that does not drain first leaves the hosts without a path
        // until a candidate notices: it counts only when the stop drains.
        let v = verdict(
            &self.ns_paths(),
            p.after_drain && self.config.drain_on_stop.is_some(),
        );
        StopCheck {
            ok: v.reasons.is_empty(),
            alone: Some(v.alone),
            drained: self
                .target
                .ana
                .drained()
                .iter()
                .filter(|(_, s)| *s == AnaState::Inaccessible)
                .count(),
            reasons: v.reasons,
        }
    }

    /// Each namespace's paths, as this target sees them.
    fn ns_paths(&self) -> Vec<NsPaths> {
        self.nvm_namespaces()
            .into_iter()
            .map(|(sub, ns)| NsPaths {
                subsystem: sub.nqn.clone(),
                nsid: ns.nsid,
                store: ns.backend.describe(),
                controllers: sub
                    .controllers()
                    .iter()
                    .filter(|c| c.namespace(ns.nsid).is_some())
                    .count(),
                others: ns.backend.shared().map(|s| s.peers()),
            })
            .collect()
    }
}
