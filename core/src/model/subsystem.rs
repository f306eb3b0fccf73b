//! Subsystems (NVM and discovery).

use nvme::fabrics::{CNTLID_MAX, CNTLID_MIN};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use nvme::Status;

use crate::model::controller::Controller;
use crate::model::namespace::Namespace;
use crate::model::ns_cache::{NsCache, NsRef};

/// Kind of subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubsystemKind {
    /// An NVM subsystem with namespaces.
    Nvm,
    /// The discovery subsystem.
    Discovery,
}

/// A controller a Connect asks for: who the host says it is, and what the
/// queue's transport knows.
#[derive(Debug, Clone, Copy)]
pub struct NewController<'a> {
    /// The host's NQN.
    pub hostnqn: &'a str,
    /// The host's identifier.
    pub hostid: [u8; 16],
    /// Its keep-alive timeout (ms; 0: none).
    pub kato_ms: u32,
    /// Its host must authenticate before it takes one of the host's places.
    pub auth_required: bool,
    /// The address its admin queue came from (none: in-process).
    pub peer: Option<std::net::IpAddr>,
    /// When: its keep-alive timer starts here.
    pub now: std::time::Instant,
}

impl<'a> NewController<'a> {
    /// A controller of `hostnqn` with no authentication, from no address,
    /// made now (tests, and the fuzzer's admin target).
    pub fn of(hostnqn: &'a str, hostid: [u8; 16], kato_ms: u32) -> NewController<'a> {
        NewController {
            hostnqn,
            hostid,
            kato_ms,
            auth_required: false,
            peer: None,
            now: std::time::Instant::now(),
        }
    }
}

/// A subsystem.
#[derive(Debug)]
pub struct Subsystem {
    /// NQN.
    pub nqn: String,
    /// Kind.
    pub kind: SubsystemKind,
    /// Who may connect (replaced on reload).
    access: ArcSwap<HostAccess>,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Namespaces, ordered by nsid (replaced on reload).
    namespaces: ArcSwap<Vec<Arc<Namespace>>>,
    /// Changes when the namespaces or a namespace's hosts change: what a
    /// queue remembers of a namespace ([`NsCache`]) is good while it holds.
    ns_epoch: AtomicU64,
    controllers: Mutex<BTreeMap<u16, Arc<Controller>>>,
    /// The controller ids given out (lowest free first).
    cntlids: (u16, u16),
    /// Removed by a reload: no new controller (set before its controllers
    /// are revoked, read under the controllers' lock).
    removed: AtomicBool,
    /// When each host last asked for a change that blocks (a Persist
    /// Through Power Loss toggle that syncs a file or the cluster).
    blocking_asked: Mutex<std::collections::HashMap<String, Instant>>,
}

/// Which hosts may connect to a subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAccess {
    /// Any host may connect.
    pub allow_any_host: bool,
    /// Allowed host NQNs.
    pub hosts: Vec<String>,
    /// The listeners hosts reach it through (`None`: every listener).
    pub listeners: Option<Vec<crate::model::port::PortName>>,
}

impl Subsystem {
    /// Creates a subsystem.
    pub fn new(
        nqn: String,
        kind: SubsystemKind,
        allow_any_host: bool,
        hosts: Vec<String>,
        serial: Option<String>,
        model: String,
        mut namespaces: Vec<Arc<Namespace>>,
    ) -> Subsystem {
        namespaces.sort_by_key(|n| n.nsid);
        let serial = serial.unwrap_or_else(|| {
            format!("{:016x}", crate::model::namespace::fnv64(7, nqn.as_bytes()))
        });
        Subsystem {
            nqn,
            kind,
            access: ArcSwap::from_pointee(HostAccess {
                allow_any_host,
                hosts,
                listeners: None,
            }),
            serial,
            model,
            namespaces: ArcSwap::from_pointee(namespaces),
            ns_epoch: AtomicU64::new(0),
            controllers: Mutex::new(BTreeMap::new()),
            cntlids: (CNTLID_MIN, CNTLID_MAX),
            removed: AtomicBool::new(false),
            blocking_asked: Default::default(),
        }
    }

    /// Gives out controller ids in `min..=max` only (several gateways of one
    /// subsystem must never give the same id).
    pub fn with_cntlids(mut self, (min, max): (u16, u16)) -> Subsystem {
        self.cntlids = (min.max(CNTLID_MIN), max.min(CNTLID_MAX));
        self
    }

    /// Whether host `hostnqn` may ask at `now` for a change that blocks: at
    /// most once per `every` per host, whatever its number of controllers.
    /// The record forgets hosts whose last ask is older than `every`.
    pub fn ask_blocking(&self, hostnqn: &str, now: Instant, every: Duration) -> bool {
        let mut m = self
            .blocking_asked
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if m.get(hostnqn)
            .is_some_and(|&t| now.saturating_duration_since(t) < every)
        {
            return false;
        }
        if m.len() >= 64 {
            m.retain(|_, t| now.saturating_duration_since(*t) < every);
        }
        m.insert(hostnqn.to_string(), now);
        true
    }

    /// Whether `hostnqn` may connect (and see this subsystem in discovery).
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        if self.kind == SubsystemKind::Discovery {
            return true;
        }
        let a = self.access.load();
        a.allow_any_host || a.hosts.iter().any(|h| h == hostnqn)
    }

    /// Whether hosts reach it through listener `port` (the discovery
    /// subsystem is on every listener).
    pub fn reachable_via(&self, port: &crate::model::port::Port) -> bool {
        if self.kind == SubsystemKind::Discovery {
            return true;
        }
        match &self.access.load().listeners {
            None => true,
            Some(l) => l.iter().any(|n| n.names(port)),
        }
    }

    /// Revokes the controllers whose host connected through a listener
    /// the subsystem is no longer on (as nvmet when a port's link to it
    /// goes): the hosts of those, once each.
    pub fn revoke_unreachable(&self, ports: &crate::model::port::Ports) -> Vec<String> {
        let mut gone = Vec::new();
        for c in self.controllers() {
            let Some(p) = c.listener().and_then(|s| ports.get(s)) else {
                continue;
            };
            if !self.reachable_via(&p) && !c.is_revoked() {
                c.revoke();
                gone.push(c.hostnqn.clone());
            }
        }
        gone
    }

    /// Who may connect.
    pub fn access(&self) -> Arc<HostAccess> {
        self.access.load_full()
    }

    /// Replaces who may connect (existing controllers stay connected).
    pub fn set_access(&self, access: HostAccess) {
        self.access.store(Arc::new(access));
    }

    /// The namespace with `nsid`.
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let v = self.namespaces.load();
        v.binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| v[i].clone())
    }

    /// The current namespaces, ordered by nsid.
    pub fn namespaces(&self) -> Arc<Vec<Arc<Namespace>>> {
        self.namespaces.load_full()
    }

    /// Replaces the namespaces. Commands already executing keep their
    /// namespace (and its backend) until they complete.
    pub fn set_namespaces(&self, mut namespaces: Vec<Arc<Namespace>>) {
        namespaces.sort_by_key(|n| n.nsid);
        self.namespaces.store(Arc::new(namespaces));
        self.ns_epoch.fetch_add(1, Ordering::Release);
    }

    /// The namespace `nsid` if `hostnqn` sees it, through `cache` (what
    /// the queue found before): while neither the namespaces nor their
    /// hosts changed, the epoch's load and a search among the queue's own
    /// instead of two `ArcSwap` loads and a search, and no write to the
    /// namespace's shared count.
    pub fn namespace_for(&self, nsid: u32, hostnqn: &str, cache: &mut NsCache) -> Option<NsRef> {
        let epoch = self.ns_epoch.load(Ordering::Acquire);
        if let Some(ns) = cache.get(nsid, epoch) {
            return Some(ns);
        }
        cache.expire(epoch);
        let ns = self.namespace(nsid).filter(|n| n.visible_to(hostnqn))?;
        Some(cache.put(ns, epoch))
    }

    /// Lets `cache` forget what it found before the namespaces or their
    /// hosts last changed.
    pub fn expire(&self, cache: &mut NsCache) {
        cache.expire(self.ns_epoch.load(Ordering::Acquire));
    }

    /// Shows namespace `nsid` to `hosts` only (`None`: every host), at
    /// once: the controllers whose host gains or loses it are told (a
    /// namespace-changed notice; the host then finds it, or no longer
    /// finds it, in its active namespace list). Commands it took before
    /// complete. Returns the ids of the controllers told, `None` when there
    /// is no such namespace.
    pub fn show_namespace(&self, nsid: u32, hosts: Option<Vec<String>>) -> Option<Vec<u16>> {
        let ns = self.namespace(nsid)?;
        let ctrls = self.controllers();
        let before: Vec<bool> = ctrls.iter().map(|c| ns.visible_to(&c.hostnqn)).collect();
        ns.set_hosts(hosts);
        self.ns_epoch.fetch_add(1, Ordering::Release);
        let mut told = Vec::new();
        for (c, was) in ctrls.iter().zip(before) {
            if was != ns.visible_to(&c.hostnqn) {
                c.notify_ns_changed(&[nsid]);
                told.push(c.cntlid);
            }
        }
        Some(told)
    }

    /// Creates controller `new` with the lowest free id. One whose host
    /// must authenticate takes none of the host's places until it did
    /// ([`Subsystem::prove`]); a host has at most `max_per_host`.
    pub fn add_controller(
        self: &Arc<Self>,
        new: NewController<'_>,
        max_per_host: u32,
    ) -> Result<Arc<Controller>, Status> {
        let NewController {
            hostnqn,
            auth_required,
            peer,
            ..
        } = new;
        let mut m = self.controllers.lock().unwrap_or_else(|p| p.into_inner());
        // Access is checked again here, under the lock `revoke_disallowed`
        // takes after a reload changed it: a Connect that passed the first
        // check before the change either is seen by the revocation or sees
        // the change itself.
        if self.removed.load(Ordering::SeqCst) {
            return Err(Status::CONNECT_INVALID_PARAM);
        }
        if !self.host_allowed(hostnqn) {
            return Err(Status::CONNECT_INVALID_HOST);
        }
        // A host has one controller per path; more are a host that leaks
        // them or a peer that uses its name to hold the target's resources.
        // Only proven controllers count: anyone may name a keyed host.
        // Discovery controllers prove nothing, ever: they are counted by the
        // address they came from, so no peer takes a host's discovery by
        // naming it.
        let taken = match self.kind {
            SubsystemKind::Discovery => m.values().filter(|c| c.peer == peer).count(),
            SubsystemKind::Nvm if auth_required => 0,
            SubsystemKind::Nvm => Self::places_taken(&m, hostnqn, None),
        };
        if taken >= max_per_host as usize {
            return Err(Status::CONNECT_CTRL_BUSY);
        }
        let (mut id, max) = self.cntlids;
        for &k in m.range(id..).map(|(k, _)| k) {
            if k == id {
                id += 1;
            } else if k > id {
                break;
            }
        }
        if id > max {
            return Err(Status::CONNECT_CTRL_BUSY);
        }
        let c = Arc::new(Controller::new(id, self.clone(), &new));
        c.auth.set_required(auth_required);
        m.insert(id, c.clone());
        Ok(c)
    }

    /// The host's places its proven controllers take (`except` left out).
    fn places_taken(
        m: &BTreeMap<u16, Arc<Controller>>,
        hostnqn: &str,
        except: Option<u16>,
    ) -> usize {
        m.values()
            .filter(|c| c.hostnqn == hostnqn && c.auth.proven() && Some(c.cntlid) != except)
            .count()
    }

    /// `ctrl`'s host authenticated: the controller takes one of the host's
    /// places, or is refused with Controller Busy when the host has its
    /// `max_per_host` proven controllers already (or the controller went).
    pub fn prove(&self, ctrl: &Controller, max_per_host: u32) -> Result<(), Status> {
        let m = self.controllers.lock().unwrap_or_else(|p| p.into_inner());
        if ctrl.auth.proven() {
            return Ok(());
        }
        if ctrl.is_revoked() || !m.contains_key(&ctrl.cntlid) {
            return Err(Status::CONNECT_INVALID_HOST);
        }
        if Self::places_taken(&m, &ctrl.hostnqn, Some(ctrl.cntlid)) >= max_per_host as usize {
            return Err(Status::CONNECT_CTRL_BUSY);
        }
        ctrl.auth.set_proven();
        Ok(())
    }

    /// The controller with `cntlid`.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cntlid)
            .cloned()
    }

    /// Disconnects the controllers of hosts the current access list no
    /// longer allows (all of them with `everyone`, for a removed subsystem),
    /// as nvmet does; returns their host NQNs.
    pub fn revoke_disallowed(&self, everyone: bool) -> Vec<String> {
        if everyone {
            self.removed.store(true, Ordering::SeqCst);
        }
        let mut gone = Vec::new();
        for c in self.controllers() {
            if (everyone || !self.host_allowed(&c.hostnqn)) && !c.is_revoked() {
                c.revoke();
                gone.push(c.hostnqn.clone());
            }
        }
        gone
    }

    /// Removes a controller.
    pub fn remove_controller(&self, cntlid: u16) {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&cntlid);
    }

    /// All controllers.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

pub use crate::model::port::Port;

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(any: bool) -> Arc<Subsystem> {
        Arc::new(Subsystem::new(
            "nqn.2026-11.io.example:s".into(),
            SubsystemKind::Nvm,
            any,
            vec!["nqn.h1".into()],
            None,
            "m".into(),
            vec![],
        ))
    }

    #[test]
    fn a_queues_namespace_cache_follows_changes_and_keeps_nothing_alive() {
        let s = sub(true);
        let ns = |nsid| {
            Arc::new(Namespace::new(
                &s.nqn,
                nsid,
                Box::new(crate::backend::null::Null::default()),
                1 << 20,
                512,
                false,
            ))
        };
        let (a, b) = (ns(1), ns(2));
        s.set_namespaces(vec![a.clone(), b.clone()]);
        let mut cache = NsCache::default();
        let got = s.namespace_for(1, "nqn.h1", &mut cache).unwrap();
        assert!(Arc::ptr_eq(&got, &a));
        assert!(Arc::ptr_eq(
            &s.namespace_for(1, "nqn.h1", &mut cache).unwrap(),
            &a
        ));
        assert!(Arc::ptr_eq(
            &s.namespace_for(2, "nqn.h1", &mut cache).unwrap(),
            &b
        ));
        // Hidden from the host: gone at once for a queue that remembered it.
        s.show_namespace(2, Some(vec!["nqn.h2".into()])).unwrap();
        assert!(s.namespace_for(2, "nqn.h1", &mut cache).is_none());
        assert!(s.namespace_for(2, "nqn.h2", &mut cache).is_some());
        // Replaced: the new one, not the one remembered.
        let a2 = ns(1);
        s.namespace_for(1, "nqn.h1", &mut cache).unwrap();
        s.set_namespaces(vec![a2.clone(), b.clone()]);
        assert!(Arc::ptr_eq(
            &s.namespace_for(1, "nqn.h1", &mut cache).unwrap(),
            &a2
        ));
        // Removed: the cache lets it go once expired (its backend closes),
        // and no longer finds it.
        let weak = Arc::downgrade(&a2);
        s.namespace_for(1, "nqn.h1", &mut cache).unwrap();
        s.set_namespaces(vec![b.clone()]);
        drop((a, a2, got));
        assert!(weak.upgrade().is_some(), "held until the queue expires it");
        s.expire(&mut cache);
        assert!(weak.upgrade().is_none(), "a removed namespace stays alive");
        assert!(s.namespace_for(1, "nqn.h1", &mut cache).is_none());
        // Two namespaces on one queue: both held, each found again without
        // a new hold.
        let (x, y) = (
            s.namespace_for(2, "nqn.h2", &mut cache).unwrap(),
            s.namespace_for(2, "nqn.h2", &mut cache).unwrap(),
        );
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(Arc::strong_count(&b), 3, "b: the table, the test, one hold");
    }

    #[test]
    fn hosts() {
        assert!(sub(false).host_allowed("nqn.h1"));
        assert!(!sub(false).host_allowed("nqn.h2"));
        assert!(sub(true).host_allowed("nqn.h2"));
    }

    #[test]
    fn a_host_that_loses_access_loses_its_controllers() {
        use crate::base::wake::Waker;
        use crate::model::controller::QueueLink;
        let s = sub(true);
        let w = Waker::new().unwrap();
        let c1 = s
            .add_controller(NewController::of("nqn.h1", [1; 16], 0), 16)
            .unwrap();
        let c2 = s
            .add_controller(NewController::of("nqn.h2", [2; 16], 0), 16)
            .unwrap();
        let q0 = QueueLink::new(0, w.clone());
        c2.attach(q0.clone()).unwrap();
        assert!(
            s.revoke_disallowed(false).is_empty(),
            "any host may connect"
        );
        s.set_access(HostAccess {
            allow_any_host: false,
            hosts: vec!["nqn.h1".into()],
            listeners: None,
        });
        assert_eq!(s.revoke_disallowed(false), vec!["nqn.h2".to_string()]);
        assert!(q0.killed(), "the revoked host's queues are disconnected");
        assert!(!c1.is_revoked());
        // A queue racing in afterwards is refused.
        assert_eq!(
            c2.attach(QueueLink::new(1, w.clone())),
            Err(nvme::Status::CONNECT_INVALID_HOST)
        );
        assert!(s.revoke_disallowed(false).is_empty(), "once");
        // A removed subsystem: everyone goes.
        assert_eq!(s.revoke_disallowed(true), vec!["nqn.h1".to_string()]);
        assert!(c1.attach(QueueLink::new(0, w)).is_err());
    }

    #[test]
    fn cntlids_stay_in_their_range() {
        let s = Arc::try_unwrap(sub(true)).unwrap().with_cntlids((100, 102));
        let s = Arc::new(s);
        let ids: Vec<u16> = (0..3)
            .map(|_| {
                s.add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
                    .unwrap()
                    .cntlid
            })
            .collect();
        assert_eq!(ids, vec![100, 101, 102]);
        assert_eq!(
            s.add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
                .err(),
            Some(Status::CONNECT_CTRL_BUSY),
            "the range is used up"
        );
        s.remove_controller(101);
        assert_eq!(
            s.add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
                .unwrap()
                .cntlid,
            101
        );
    }

    #[test]
    fn cntlid_allocation_reuses_lowest() {
        let s = sub(true);
        let a = s
            .add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
            .unwrap();
        let b = s
            .add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
            .unwrap();
        let c = s
            .add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
            .unwrap();
        assert_eq!((a.cntlid, b.cntlid, c.cntlid), (1, 2, 3));
        s.remove_controller(2);
        assert_eq!(
            s.add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
                .unwrap()
                .cntlid,
            2
        );
        assert_eq!(
            s.add_controller(NewController::of("h", [0; 16], 0), u32::MAX)
                .unwrap()
                .cntlid,
            4
        );
        assert!(s.controller(3).is_some());
        assert!(s.controller(9).is_none());
    }
}
