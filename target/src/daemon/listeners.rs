//! Listeners while the daemon runs: each in its slot of the target's port
//! table (port id - 1), started at start or when a reload adds it; one a
//! reload removes stops, its slot empties and its controllers go.
//! `nvmf-target listener del` drains the listener's controllers first (see
//! [`super::maintenance`]).

use nvme::ana::AnaState;
use tracing::info;

use super::Daemon;
use crate::config::{ListenerConfig, Transport};
use crate::model::ana::rank;
use crate::model::subsystem::Port;
use crate::model::target::Target;
use crate::transport::engine::Engine;
use crate::transport::listener::Listener;

/// The port a listener's configuration says.
pub fn port(l: &ListenerConfig) -> Port {
    Port {
        addr: l.addr,
        tcp: l.transport == Transport::Tcp,
        secure: l.secure,
    }
}

/// Starts listening as `l` says.
pub(super) fn listen(
    engine: &Engine,
    target: &std::sync::Arc<Target>,
    l: &ListenerConfig,
) -> Result<Listener, String> {
    let s = engine.shared();
    match l.transport {
        Transport::Rdma => crate::transport::rdma::listen(s.rdma.clone(), target.clone(), l.addr)
            .map_err(|e| format!("listener {} (rdma): {e}", l.addr)),
        // Its errors name the address.
        Transport::Tcp => {
            crate::transport::tcp::listener::listen(s.tcp.clone(), target.clone(), l.addr, l.secure)
                .map_err(|e| e.to_string())
        }
    }
}

impl Daemon {
    /// The slot of a configured listener.
    pub(super) fn slot(&self, l: &ListenerConfig) -> Option<usize> {
        self.target.listeners.slot_of(port(l))
    }

    /// The slots of the configured listeners.
    pub(super) fn slots(&self) -> Vec<usize> {
        self.config
            .listeners
            .iter()
            .filter_map(|l| self.slot(l))
            .collect()
    }

    /// The configuration of the listener in `slot`.
    pub(super) fn listener_at(&self, slot: usize) -> Option<&ListenerConfig> {
        let p = self.target.listeners.get(slot)?;
        self.config.listeners.iter().find(|l| port(l) == p)
    }

    /// Starts the listeners `added` (a reload's): each takes a slot with
    /// its ANA states, then listens. A gateway drained at every listener
    /// it has stays so: a new listener takes the drain's cap (hosts must
    /// not come back through it). On an error the ones started stop again,
    /// their slots empty and any controller they took goes.
    pub(super) fn start_listeners(&mut self, added: &[ListenerConfig]) -> Result<(), String> {
        let Some(engine) = &self.engine else {
            return Err("the engine is stopped".into());
        };
        let drained = self.target.ana.drained();
        let live = self.target.listeners.live();
        // The weakest cap, if every listener has one.
        let cap = live
            .iter()
            .map(|(s, _)| drained.iter().find(|(d, _)| d == s).map(|(_, c)| *c))
            .try_fold(None, |weakest: Option<AnaState>, c| {
                let c = c?;
                Some(Some(match weakest {
                    Some(w) if rank(w) < rank(c) => w,
                    _ => c,
                }))
            })
            .flatten();
        let mut started: Vec<(usize, Listener)> = Vec::new();
        let mut failed = None;
        for l in added {
            let in_use = |slot: usize| {
                self.target
                    .all_controllers()
                    .iter()
                    .any(|c| c.listener() == Some(slot))
            };
            let slot = match self.target.listeners.add(port(l), in_use) {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            };
            self.target.ana.open(slot, &l.ana);
            if cap.is_some() {
                self.target.ana.drain(&[slot], cap);
            }
            match listen(engine, &self.target, l) {
                Ok(x) => started.push((slot, x)),
                Err(e) => {
                    self.retire(slot);
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            for (slot, x) in started {
                x.stop();
                self.retire(slot);
            }
            return Err(e);
        }
        for (slot, x) in started {
            info!(listener = %x.addr, port_id = slot + 1, drained = ?cap, "listener added");
            self.listeners.push((slot, x));
        }
        Ok(())
    }

    /// Empties `slot` (its groups inaccessible there) and disconnects the
    /// controllers connected through it; returns them, for the log.
    fn retire(&self, slot: usize) -> Vec<String> {
        // First: a Connect that records its listener after this finds it
        // gone (see [`crate::model::port::Ports::assign`]).
        self.target.listeners.remove(slot);
        self.target.ana.close(slot);
        self.target
            .all_controllers()
            .into_iter()
            .filter(|c| c.listener() == Some(slot) && !c.is_revoked())
            .map(|c| {
                c.revoke();
                format!(
                    "{} (controller {} of {})",
                    c.hostnqn, c.cntlid, c.subsys.nqn
                )
            })
            .collect()
    }

    /// Stops the listeners `removed`: no new connection, their slots empty
    /// (their groups inaccessible there) and their controllers disconnect.
    pub(super) fn stop_listeners(&mut self, removed: &[ListenerConfig]) {
        for l in removed {
            let Some(slot) = self.slot(l) else {
                continue;
            };
            self.forget_drained(l);
            if let Some(i) = self.listeners.iter().position(|(s, _)| *s == slot) {
                self.listeners.swap_remove(i).1.stop();
            }
            let gone = self.retire(slot);
            info!(listener = %l.addr, transport = l.transport.name(), port_id = slot + 1,
                  disconnected = ?gone, "listener removed; its controllers are disconnected");
        }
    }
}
