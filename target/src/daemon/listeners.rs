//! Listeners while the daemon runs: each in its slot of the target's port
//! table (port id - 1), started at start or when a reload adds it; one a
//! reload removes stops, its slot empties and its controllers go.
//! `nvmf-target listener del` drains the listener's controllers first (see
//! [`super::maintenance`]).

use tracing::info;

use super::Daemon;
use crate::config::{ListenerConfig, Transport};
use crate::model::subsystem::{Port, Target};
use crate::transport::engine::Engine;
use crate::transport::listener::Listener;

/// The port a listener's configuration says.
pub fn port(l: &ListenerConfig) -> Port {
    Port {
        addr: l.addr,
        tcp: l.transport == Transport::Tcp,
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
            crate::transport::tcp::listener::listen(s.tcp.clone(), target.clone(), l.addr)
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
    /// its ANA states, then listens. On an error the ones started stop
    /// again and their slots empty.
    pub(super) fn start_listeners(&mut self, added: &[ListenerConfig]) -> Result<(), String> {
        let Some(engine) = &self.engine else {
            return Err("the engine is stopped".into());
        };
        let mut started: Vec<(usize, Listener)> = Vec::new();
        let mut failed = None;
        for l in added {
            let in_use = |slot: usize| {
                self.target
                    .all_controllers()
                    .iter()
                    .any(|c| c.port() == slot)
            };
            let slot = match self.target.listeners.add(port(l), in_use) {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            };
            self.target.ana.open(slot, l);
            match listen(engine, &self.target, l) {
                Ok(x) => started.push((slot, x)),
                Err(e) => {
                    self.target.listeners.remove(slot);
                    self.target.ana.close(slot);
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            for (slot, x) in started {
                x.stop();
                self.target.listeners.remove(slot);
                self.target.ana.close(slot);
            }
            return Err(e);
        }
        for (slot, x) in started {
            info!(listener = %x.addr, port_id = slot + 1, "listener added");
            self.listeners.push((slot, x));
        }
        Ok(())
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
            self.target.listeners.remove(slot);
            self.target.ana.close(slot);
            let gone: Vec<String> = self
                .target
                .all_controllers()
                .into_iter()
                .filter(|c| c.port() == slot && !c.is_revoked())
                .map(|c| {
                    c.revoke();
                    format!(
                        "{} (controller {} of {})",
                        c.hostnqn, c.cntlid, c.subsys.nqn
                    )
                })
                .collect();
            info!(listener = %l.addr, transport = l.transport.name(), port_id = slot + 1,
                  disconnected = ?gone, "listener removed; its controllers are disconnected");
        }
    }
}
