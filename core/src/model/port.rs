//! The listeners as hosts see them: each has a port id (its slot + 1) that
//! stays the same while the target runs. Listeners added live take a new
//! slot; a removed one leaves its slot empty, so the port ids of the others,
//! which their controllers, ANA states and the discovery log carry, never
//! move. Once every slot was taken, an empty one is used again when no
//! controller of the listener removed from it is left.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

/// Listener slots a target has at most (port ids 1 to this).
pub const MAX_PORTS: usize = 64;

/// Whether an NVMe/TCP listener speaks TLS (`[[listener]] secure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Secure {
    /// Plain NVMe/TCP only (and RDMA).
    #[default]
    None,
    /// TLS or plain, as each host begins.
    Optional,
    /// TLS only.
    Required,
}

impl Secure {
    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Secure::None => "none",
            Secure::Optional => "optional",
            Secure::Required => "required",
        }
    }

    /// The setting a configuration names.
    pub fn from_name(s: &str) -> Option<Secure> {
        [Secure::None, Secure::Optional, Secure::Required]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

/// A listener as the target sees it: its address, its transport and
/// whether it speaks TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// NVMe/TCP (else RDMA).
    pub tcp: bool,
    /// TLS (NVMe/TCP only).
    pub secure: Secure,
}

impl From<SocketAddr> for Port {
    /// An RDMA listener on `addr`.
    fn from(addr: SocketAddr) -> Port {
        Port {
            addr,
            tcp: false,
            secure: Secure::None,
        }
    }
}

/// A listener as the configuration, the commands and status name it:
/// `[rdma:|tcp:]ADDRESS:PORT` (IPv6 in brackets); without a transport, the
/// listeners of every transport at that address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortName {
    /// NVMe/TCP (`Some(true)`), RDMA (`Some(false)`) or either.
    pub tcp: Option<bool>,
    /// The address and port the listener is bound to.
    pub addr: SocketAddr,
}

impl PortName {
    /// Parses `[rdma:|tcp:]ADDRESS:PORT`.
    pub fn parse(text: &str) -> Result<PortName, String> {
        let t = text.trim();
        let (tcp, rest) = if let Some(r) = t.strip_prefix("tcp:") {
            (Some(true), r)
        } else if let Some(r) = t.strip_prefix("rdma:") {
            (Some(false), r)
        } else {
            (None, t)
        };
        let addr = rest.parse().map_err(|_| {
            format!("'{text}' is not [rdma:|tcp:]ADDRESS:PORT (e.g. tcp:192.0.2.10:4420, [fd00::1]:4420)")
        })?;
        Ok(PortName { tcp, addr })
    }

    /// The name of listener `p` (with its transport).
    pub fn of(p: &Port) -> PortName {
        PortName {
            tcp: Some(p.tcp),
            addr: p.addr,
        }
    }

    /// Whether it names listener `p`.
    pub fn names(&self, p: &Port) -> bool {
        self.addr == p.addr && self.tcp.is_none_or(|t| t == p.tcp)
    }
}

impl std::fmt::Display for PortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tcp {
            Some(true) => write!(f, "tcp:{}", self.addr),
            Some(false) => write!(f, "rdma:{}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

/// Every slot is taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a target has at most {MAX_PORTS} listeners (the slots of removed ones are taken again once their controllers are gone)")]
pub struct PortsFull;

/// A slot: its listener, and whether it was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    port: Port,
    live: bool,
}

/// The slot among `slots` (`live` or removed ones) of the listener of that
/// transport bound to `local`, else to the wildcard address on its port.
fn find(slots: &[Slot], local: SocketAddr, tcp: bool, live: bool) -> Option<usize> {
    let at = |f: &dyn Fn(&Port) -> bool| slots.iter().position(|x| x.live == live && f(&x.port));
    at(&|p| p.tcp == tcp && p.addr == local).or_else(|| {
        at(&|p| p.tcp == tcp && p.addr.port() == local.port() && p.addr.ip().is_unspecified())
    })
}

/// The listener slots (index: port id - 1).
#[derive(Debug)]
pub struct Ports {
    slots: ArcSwap<Vec<Slot>>,
    /// Serializes additions and removals (readers never wait).
    edit: Mutex<()>,
}

impl Ports {
    /// The listeners of a start, port ids 1 to `ports.len()`.
    pub fn new(ports: Vec<Port>) -> Ports {
        Ports {
            slots: ArcSwap::from_pointee(
                ports
                    .into_iter()
                    .map(|port| Slot { port, live: true })
                    .collect(),
            ),
            edit: Mutex::new(()),
        }
    }

    /// The live listeners and their slots.
    pub fn live(&self) -> Vec<(usize, Port)> {
        let s = self.slots.load();
        s.iter()
            .enumerate()
            .filter(|(_, s)| s.live)
            .map(|(i, s)| (i, s.port))
            .collect()
    }

    /// How many slots were ever taken (the port ids after them are free).
    pub fn span(&self) -> usize {
        self.slots.load().len()
    }

    /// The listener in `slot`, if it is live.
    pub fn get(&self, slot: usize) -> Option<Port> {
        self.slots
            .load()
            .get(slot)
            .filter(|s| s.live)
            .map(|s| s.port)
    }

    /// The slot of a live listener.
    pub fn slot_of(&self, port: Port) -> Option<usize> {
        let live = Slot { port, live: true };
        self.slots.load().iter().position(|s| *s == live)
    }

    /// Adds a listener (its slot if it is live already): a new slot, else,
    /// all taken, an empty one that `in_use` says no controller holds.
    pub fn add(&self, port: Port, in_use: impl Fn(usize) -> bool) -> Result<usize, PortsFull> {
        let _edit = self.edit.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = self.slot_of(port) {
            return Ok(i);
        }
        let mut slots = (**self.slots.load()).clone();
        let i = match slots.len() {
            n if n < MAX_PORTS => n,
            _ => (0..slots.len())
                .find(|&i| !slots[i].live && !in_use(i))
                .ok_or(PortsFull)?,
        };
        let new = Slot { port, live: true };
        if i == slots.len() {
            slots.push(new);
        } else {
            slots[i] = new;
        }
        self.slots.store(Arc::new(slots));
        Ok(i)
    }

    /// Empties `slot`.
    pub fn remove(&self, slot: usize) {
        let _edit = self.edit.lock().unwrap_or_else(|p| p.into_inner());
        let mut slots = (**self.slots.load()).clone();
        if let Some(s) = slots.get_mut(slot) {
            s.live = false;
            self.slots.store(Arc::new(slots));
        }
    }

    /// Gives `set` the slot of the listener a host connected to at `local`
    /// (as [`Ports::port_of`]), serialized with removals: a removal either
    /// comes first (false: the listener is gone, its controller must go) or
    /// sees what `set` recorded. True when `set` ran.
    pub fn assign(&self, local: SocketAddr, tcp: bool, set: impl FnOnce(usize)) -> bool {
        let _edit = self.edit.lock().unwrap_or_else(|p| p.into_inner());
        match self.port_of(local, tcp) {
            Some(p) => {
                set(p);
                true
            }
            None => false,
        }
    }

    /// The live listener a host connects to at `local` (as
    /// [`Ports::port_of`], without its fallback to slot 0).
    pub fn listener_at(&self, local: SocketAddr, tcp: bool) -> Option<Port> {
        let s = self.slots.load();
        find(&s, local, tcp, true).map(|i| s[i].port)
    }

    /// The slot of the listener a host connected to at `local` over TCP
    /// (`tcp`) or RDMA: the live listener of that transport bound to it,
    /// else one bound to the wildcard address on its port; `None` when
    /// only a removed listener matches (it was removed since the host
    /// connected); slot 0 when none does (a target served in-process).
    pub fn port_of(&self, local: SocketAddr, tcp: bool) -> Option<usize> {
        let s = self.slots.load();
        match find(&s, local, tcp, true) {
            Some(i) => Some(i),
            None if find(&s, local, tcp, false).is_some() => None,
            None => Some(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: &str) -> Port {
        Port::from(a.parse::<SocketAddr>().unwrap())
    }

    #[test]
    fn port_of_local_address() {
        let t = Ports::new(vec![p("10.0.0.1:4420"), p("0.0.0.0:4421")]);
        let at = |a: &str, tcp| t.port_of(a.parse().unwrap(), tcp);
        assert_eq!(at("10.0.0.1:4420", false), Some(0));
        assert_eq!(at("10.0.0.9:4421", false), Some(1), "wildcard");
        assert_eq!(at("10.0.0.1:9999", false), Some(0), "none: the first");
        t.remove(0);
        assert_eq!(at("10.0.0.1:4420", false), None, "removed");
        assert_eq!(at("10.0.0.1:4420", true), Some(0), "another transport");
        assert_eq!(
            Ports::new(vec![]).port_of(p("1.2.3.4:1").addr, true),
            Some(0)
        );
    }

    #[test]
    fn port_ids_stay_as_listeners_come_and_go() {
        let t = Ports::new(vec![p("10.0.0.1:4420"), p("10.0.0.2:4420")]);
        t.remove(0);
        assert_eq!(t.live(), vec![(1, p("10.0.0.2:4420"))]);
        assert_eq!(t.span(), 2);
        // A new one takes a new slot; a live one keeps its own.
        assert_eq!(t.add(p("10.0.0.3:4420"), |_| false), Ok(2));
        assert_eq!(t.add(p("10.0.0.2:4420"), |_| false), Ok(1), "live");
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(1), Some(p("10.0.0.2:4420")));
        assert_eq!(t.slot_of(p("10.0.0.3:4420")), Some(2));
        // Full: an empty slot whose controllers are gone is taken again.
        let t = Ports::new(
            (0..MAX_PORTS)
                .map(|i| p(&format!("10.0.1.{i}:1")))
                .collect(),
        );
        assert_eq!(t.add(p("10.0.2.1:1"), |_| false), Err(PortsFull));
        t.remove(5);
        t.remove(9);
        assert_eq!(t.add(p("10.0.2.1:1"), |i| i == 5), Ok(9));
        assert_eq!(t.add(p("10.0.2.2:1"), |i| i == 5), Err(PortsFull));
        assert_eq!(t.add(p("10.0.2.2:1"), |_| false), Ok(5));
    }
}
