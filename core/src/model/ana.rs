//! Asymmetric Namespace Access: the state of each ANA group at each listener
//! (a controller reports the states of the listener its host connected
//! through), the change count, and the ANA log page a controller returns.
//!
//! Several gateways that serve one subsystem each say, per listener, which
//! groups they serve optimized, non-optimized or not at all; the host's
//! multipath sends I/O to the optimized path and fails over to the others.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use nvme::ana::{AnaGroup, AnaState, MAX_GROUPS};

use crate::model::namespace::Namespace;
use crate::model::port::MAX_PORTS;

/// The configured states of the groups at one listener (groups not listed:
/// optimized).
pub type Configured = std::collections::BTreeMap<u32, AnaState>;

/// A group's configured state at a listener.
pub fn configured(states: &Configured, group: u32) -> AnaState {
    states.get(&group).copied().unwrap_or(AnaState::Optimized)
}

/// The states of the groups at one listener (index: group id; 0 unused).
type States = [AtomicU8; MAX_GROUPS as usize + 1];

/// ANA states by listener (port id - 1) and group.
#[derive(Debug)]
pub struct Ana {
    /// By listener slot (every slot a target may have).
    ports: Vec<States>,
    /// Slots taken so far (the others were never used).
    span: AtomicUsize,
    /// Slots whose listener was removed: inaccessible.
    closed: Vec<AtomicBool>,
    /// Groups inaccessible at every listener whatever their configured
    /// state: this gateway cannot serve them now (the cluster fenced its
    /// connection for them, or it is not sure its copy of a namespace's
    /// shared reservation state is current).
    withheld: [AtomicBool; MAX_GROUPS as usize + 1],
    /// Per listener, the best state a drain leaves its groups (a state's
    /// code; 0: not drained): non-optimized, then inaccessible.
    drained: Vec<AtomicU8>,
    /// Groups configured non-optimized that this gateway serves optimized
    /// while no other gateway of their images does (one that did drains).
    promoted: [AtomicBool; MAX_GROUPS as usize + 1],
    change_count: AtomicU64,
}

impl Ana {
    /// `ports` listeners, every group optimized.
    pub fn new(ports: usize) -> Ana {
        let code = AnaState::Optimized.code();
        Ana {
            ports: (0..MAX_PORTS)
                .map(|_| std::array::from_fn(|_| AtomicU8::new(code)))
                .collect(),
            span: AtomicUsize::new(ports.min(MAX_PORTS)),
            closed: (0..MAX_PORTS).map(|_| AtomicBool::new(false)).collect(),
            withheld: std::array::from_fn(|_| AtomicBool::new(false)),
            drained: (0..MAX_PORTS).map(|_| AtomicU8::new(0)).collect(),
            promoted: std::array::from_fn(|_| AtomicBool::new(false)),
            change_count: AtomicU64::new(1),
        }
    }

    /// Makes `groups` (and only them) inaccessible everywhere while this
    /// gateway cannot serve them; true (and the change counted) when that
    /// changed anything.
    pub fn set_withheld(&self, groups: &BTreeSet<u32>) -> bool {
        let mut any = false;
        for (g, f) in self.withheld.iter().enumerate().skip(1) {
            let now = groups.contains(&(g as u32));
            if f.swap(now, Ordering::AcqRel) != now {
                any = true;
            }
        }
        if any {
            self.bump();
        }
        any
    }

    /// A listener added in `slot` (a new one, or one removed before): its
    /// configured states, not drained.
    pub fn open(&self, slot: usize, l: &Configured) {
        if slot >= MAX_PORTS {
            return;
        }
        self.update(&[(slot, l)]);
        self.drained[slot].store(0, Ordering::Release);
        self.closed[slot].store(false, Ordering::Release);
        self.span.fetch_max(slot + 1, Ordering::AcqRel);
        self.bump();
    }

    /// The listener in `slot` is removed: its groups are inaccessible
    /// there.
    pub fn close(&self, slot: usize) {
        if let (Some(c), Some(d)) = (self.closed.get(slot), self.drained.get(slot)) {
            c.store(true, Ordering::Release);
            d.store(0, Ordering::Release);
            self.bump();
        }
    }

    /// The slots of the listeners (removed ones left out).
    fn open_slots(&self) -> impl Iterator<Item = usize> + Clone + '_ {
        (0..self.span.load(Ordering::Acquire)).filter(|&p| !self.closed[p].load(Ordering::Acquire))
    }

    /// The state of `group` at listener `port` (optimized for a listener or
    /// group out of range): the configured one, promoted, then capped by a
    /// drain, then inaccessible while withheld; inaccessible at a listener
    /// removed.
    pub fn state(&self, port: usize, group: u32) -> AnaState {
        if self
            .closed
            .get(port)
            .is_some_and(|c| c.load(Ordering::Acquire))
        {
            return AnaState::Inaccessible;
        }
        let flag = |a: &[AtomicBool]| {
            a.get(group as usize)
                .is_some_and(|f| f.load(Ordering::Acquire))
        };
        let mut s = self.configured(port, group);
        if s == AnaState::NonOptimized && flag(&self.promoted) {
            s = AnaState::Optimized;
        }
        let cap = self
            .drained
            .get(port)
            .and_then(|d| AnaState::from_code(d.load(Ordering::Acquire)));
        match (s, cap) {
            (AnaState::Optimized, Some(AnaState::NonOptimized)) => s = AnaState::NonOptimized,
            (AnaState::Optimized | AnaState::NonOptimized, Some(AnaState::Inaccessible)) => {
                s = AnaState::Inaccessible
            }
            _ => {}
        }
        match s {
            AnaState::Optimized | AnaState::NonOptimized if flag(&self.withheld) => {
                AnaState::Inaccessible
            }
            s => s,
        }
    }

    /// The state the configuration gives `group` at `port`.
    pub fn configured(&self, port: usize, group: u32) -> AnaState {
        self.ports
            .get(port)
            .and_then(|s| s.get(group as usize))
            .and_then(|a| AnaState::from_code(a.load(Ordering::Acquire)))
            .unwrap_or(AnaState::Optimized)
    }

    /// The best state of `group` at any listener: what this gateway offers
    /// the group's hosts (inaccessible without listeners).
    pub fn best(&self, group: u32) -> AnaState {
        self.open_slots()
            .map(|p| self.state(p, group))
            .min_by_key(|s| rank(*s))
            .unwrap_or(AnaState::Inaccessible)
    }

    /// Caps the groups at `ports` to `cap` (non-optimized or inaccessible;
    /// `None`: no cap, the drain is over); returns the ports whose cap
    /// changed, and counts the change.
    pub fn drain(&self, ports: &[usize], cap: Option<AnaState>) -> Vec<usize> {
        let code = cap.map_or(0, |s| s.code());
        let inaccessible = AnaState::Inaccessible.code();
        let changed: Vec<usize> = ports
            .iter()
            .copied()
            .filter(|&p| {
                // A removed listener is not drained (its groups are
                // inaccessible there anyway).
                let closed = self
                    .closed
                    .get(p)
                    .is_some_and(|c| c.load(Ordering::Acquire));
                !closed
                    && self.drained.get(p).is_some_and(|d| {
                        // A drain again does not let I/O back in.
                        let old = d.load(Ordering::Acquire);
                        let keep = old == inaccessible && cap == Some(AnaState::NonOptimized);
                        !keep && d.swap(code, Ordering::AcqRel) != code
                    })
            })
            .collect();
        if !changed.is_empty() {
            self.bump();
        }
        changed
    }

    /// The ports a drain caps now, and to what.
    pub fn drained(&self) -> Vec<(usize, AnaState)> {
        self.drained
            .iter()
            .enumerate()
            .filter_map(|(p, d)| AnaState::from_code(d.load(Ordering::Acquire)).map(|s| (p, s)))
            .collect()
    }

    /// Whether this gateway would serve `group` optimized if no other
    /// gateway did: configured non-optimized (and nowhere optimized) at a
    /// listener not drained, and not withheld.
    pub fn candidate(&self, group: u32) -> bool {
        let withheld = self
            .withheld
            .get(group as usize)
            .is_some_and(|f| f.load(Ordering::Acquire));
        let undrained = |p: usize| {
            self.drained
                .get(p)
                .is_some_and(|d| d.load(Ordering::Acquire) == 0)
        };
        let conf = self.open_slots().map(|p| (p, self.configured(p, group)));
        !withheld
            && !conf.clone().any(|(_, s)| s == AnaState::Optimized)
            && conf
                .into_iter()
                .any(|(p, s)| s == AnaState::NonOptimized && undrained(p))
    }

    /// Serves `group` optimized where it is configured non-optimized (or
    /// not any more); true (and the change counted) when that changed.
    pub fn promote(&self, group: u32, on: bool) -> bool {
        let changed = self
            .promoted
            .get(group as usize)
            .is_some_and(|p| p.swap(on, Ordering::AcqRel) != on);
        if changed {
            self.bump();
        }
        changed
    }

    /// Whether `group` is promoted.
    pub fn promoted(&self, group: u32) -> bool {
        self.promoted
            .get(group as usize)
            .is_some_and(|p| p.load(Ordering::Acquire))
    }

    /// Takes the states of `listeners` (each with its slot); returns the
    /// slots where a state changed, and counts the change.
    pub fn update(&self, listeners: &[(usize, &Configured)]) -> Vec<usize> {
        let mut changed = Vec::new();
        for &(port, l) in listeners {
            let Some(states) = self.ports.get(port) else {
                continue;
            };
            let mut any = false;
            for (g, a) in states.iter().enumerate().skip(1) {
                let code = configured(l, g as u32).code();
                if a.swap(code, Ordering::AcqRel) != code {
                    any = true;
                }
            }
            if any {
                changed.push(port);
            }
        }
        if !changed.is_empty() {
            self.bump();
        }
        changed
    }

    /// The change count (reported in the log page; it moves on every change).
    pub fn change_count(&self) -> u64 {
        self.change_count.load(Ordering::Acquire)
    }

    /// Counts a change (of states or of which namespaces are in which group).
    pub fn bump(&self) {
        self.change_count.fetch_add(1, Ordering::AcqRel);
    }

    /// The ANA log page for a controller at `port` of a subsystem with
    /// `namespaces`: group 1 and every group a namespace is in, with their
    /// namespaces unless `groups_only`.
    pub fn log_page(
        &self,
        port: usize,
        namespaces: &[Arc<Namespace>],
        groups_only: bool,
    ) -> Vec<u8> {
        let ids: BTreeSet<u32> = std::iter::once(1)
            .chain(namespaces.iter().map(|n| n.ana_group))
            .collect();
        let groups: Vec<AnaGroup> = ids
            .into_iter()
            .map(|id| AnaGroup {
                id,
                state: self.state(port, id),
                nsids: namespaces
                    .iter()
                    .filter(|n| n.ana_group == id)
                    .map(|n| n.nsid)
                    .collect(),
            })
            .collect();
        nvme::ana::encode_log(self.change_count(), &groups, groups_only)
    }
}

/// How good a path in a state is (lower is better).
pub fn rank(s: AnaState) -> u8 {
    match s {
        AnaState::Optimized => 0,
        AnaState::NonOptimized => 1,
        AnaState::Change => 2,
        AnaState::Inaccessible => 3,
        AnaState::PersistentLoss => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(ana: &[(u32, AnaState)]) -> Configured {
        ana.iter().copied().collect()
    }

    fn slots(l: &[Configured]) -> Vec<(usize, &Configured)> {
        l.iter().enumerate().collect()
    }

    #[test]
    fn a_listener_added_has_its_states_and_a_removed_one_none() {
        let a = Ana::new(1);
        let c0 = a.change_count();
        a.drain(&[0], Some(AnaState::Inaccessible));
        assert_eq!(a.best(1), AnaState::Inaccessible);
        a.open(1, &listener(&[(1, AnaState::NonOptimized)]));
        assert!(a.change_count() > c0);
        assert_eq!(a.state(1, 1), AnaState::NonOptimized);
        assert_eq!(a.best(1), AnaState::NonOptimized, "the new listener's");
        assert!(!a.candidate(1), "drained where optimized");
        a.close(1);
        assert_eq!(a.state(1, 1), AnaState::Inaccessible, "removed");
        assert_eq!(a.best(1), AnaState::Inaccessible);
        assert!(
            a.drain(&[1], Some(AnaState::Inaccessible)).is_empty(),
            "a removed listener is not drained"
        );
        // Back in its slot, drained no more.
        a.open(1, &listener(&[]));
        assert_eq!(a.state(1, 1), AnaState::Optimized);
        a.close(0);
        assert!(a.drained().is_empty(), "a removed listener's drain ends");
    }

    fn ns(nsid: u32, group: u32) -> Arc<Namespace> {
        let mut n = Namespace::new(
            "nqn.t",
            nsid,
            Box::new(crate::backend::null::Null::default()),
            1 << 20,
            512,
            false,
        );
        n.ana_group = group;
        Arc::new(n)
    }

    #[test]
    fn states_by_port_and_group() {
        let a = Ana::new(2);
        assert_eq!(a.state(0, 1), AnaState::Optimized);
        let c0 = a.change_count();
        let l = [
            listener(&[(2, AnaState::NonOptimized)]),
            listener(&[(1, AnaState::Inaccessible)]),
        ];
        assert_eq!(a.update(&slots(&l)), vec![0, 1]);
        assert_eq!(a.change_count(), c0 + 1);
        assert_eq!(a.state(0, 1), AnaState::Optimized, "not listed: optimized");
        assert_eq!(a.state(0, 2), AnaState::NonOptimized);
        assert_eq!(a.state(1, 1), AnaState::Inaccessible);
        assert_eq!(a.update(&slots(&l)), Vec::<usize>::new(), "nothing changed");
        assert_eq!(a.change_count(), c0 + 1);
        let l2 = [l[0].clone(), listener(&[])];
        assert_eq!(a.update(&slots(&l2)), vec![1], "only the port that changed");
        assert_eq!(a.state(1, 1), AnaState::Optimized);
        assert_eq!(a.state(7, 1), AnaState::Optimized, "unknown port");
        assert_eq!(a.state(0, 999), AnaState::Optimized, "unknown group");
    }

    #[test]
    fn a_drain_caps_then_restores_and_a_promotion_lifts_non_optimized() {
        let a = Ana::new(2);
        a.update(&slots(&[
            listener(&[(2, AnaState::NonOptimized), (3, AnaState::Inaccessible)]),
            listener(&[]),
        ]));
        let c0 = a.change_count();
        assert_eq!(a.drain(&[0], Some(AnaState::NonOptimized)), vec![0]);
        assert_eq!(a.change_count(), c0 + 1);
        assert_eq!(a.state(0, 1), AnaState::NonOptimized);
        assert_eq!(a.state(0, 2), AnaState::NonOptimized);
        assert_eq!(a.state(0, 3), AnaState::Inaccessible);
        assert_eq!(a.state(1, 1), AnaState::Optimized, "port 1 not drained");
        assert_eq!(a.best(1), AnaState::Optimized);
        assert_eq!(a.drain(&[0, 1], Some(AnaState::Inaccessible)), vec![0, 1]);
        assert_eq!(a.best(1), AnaState::Inaccessible);
        assert_eq!(a.best(2), AnaState::Inaccessible);
        assert_eq!(a.drained().len(), 2);
        assert!(a.drain(&[0, 1], Some(AnaState::Inaccessible)).is_empty());
        assert!(
            a.drain(&[0], Some(AnaState::NonOptimized)).is_empty(),
            "never relaxed"
        );
        assert_eq!(a.best(1), AnaState::Inaccessible);
        // A promotion does not lift a drain; undrained, it shows.
        assert!(a.promote(2, true));
        assert!(!a.promote(2, true));
        assert_eq!(a.state(0, 2), AnaState::Inaccessible);
        assert_eq!(a.drain(&[0, 1], None), vec![0, 1]);
        assert_eq!(a.state(0, 2), AnaState::Optimized, "promoted");
        assert_eq!(a.configured(0, 2), AnaState::NonOptimized);
        assert_eq!(
            a.state(0, 3),
            AnaState::Inaccessible,
            "only non-optimized is lifted"
        );
        assert!(a.promote(2, false));
        assert_eq!(a.state(0, 2), AnaState::NonOptimized);
        // Group 2 is configured non-optimized at port 0, optimized
        // (unlisted) at port 1: not a candidate; group 3 neither.
        assert!(!a.candidate(2) && !a.candidate(3));
        let b = Ana::new(1);
        b.update(&slots(&[listener(&[(2, AnaState::NonOptimized)])]));
        assert!(b.candidate(2) && !b.candidate(1));
        b.drain(&[0], Some(AnaState::NonOptimized));
        assert!(!b.candidate(2), "drained");
        b.drain(&[0], None);
        b.set_withheld(&[2].into());
        assert!(!b.candidate(2), "withheld");
        // Withheld beats everything.
        a.set_withheld(&[1].into());
        assert_eq!(a.best(1), AnaState::Inaccessible);
    }

    #[test]
    fn log_page_lists_groups_of_namespaces() {
        let a = Ana::new(1);
        a.update(&slots(&[listener(&[(3, AnaState::Inaccessible)])]));
        let nss = [ns(1, 3), ns(2, 1), ns(4, 3)];
        let (count, groups) = nvme::ana::parse_log(&a.log_page(0, &nss, false)).unwrap();
        assert_eq!(count, a.change_count());
        assert_eq!(
            groups,
            vec![
                AnaGroup {
                    id: 1,
                    state: AnaState::Optimized,
                    nsids: vec![2]
                },
                AnaGroup {
                    id: 3,
                    state: AnaState::Inaccessible,
                    nsids: vec![1, 4]
                },
            ]
        );
        let (_, only) = nvme::ana::parse_log(&a.log_page(0, &[], true)).unwrap();
        assert_eq!(only.len(), 1, "group 1 is always there");
        assert!(only[0].nsids.is_empty());
    }
}
