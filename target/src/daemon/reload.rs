//! Configuration reload, sans-IO: what must change to go from the running
//! configuration to a new one, or why the new one cannot be applied live.
//!
//! Namespaces are compared by their whole configuration: one whose backing
//! path, block size or read-only flag changed is replaced (removed and added
//! under the same nsid); one whose hosts alone changed stays open and is
//! shown to its new hosts. Subsystems are matched by NQN; listeners by
//! transport and address (one added starts, one removed stops and its
//! controllers go). Serial and model numbers and the metrics address cannot
//! change while hosts are connected: such a reload is refused with the
//! reason.

use crate::config::{
    BackendConfig, ListenerConfig, NamespaceConfig, SubsystemConfig, TargetConfig,
};
use crate::model::subsystem::HostAccess;

/// Changes to one subsystem that stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsystemChange {
    /// Its NQN.
    pub nqn: String,
    /// The new host access, if it changed.
    pub access: Option<HostAccess>,
    /// Namespaces to open and add (new nsids and replacements).
    pub add: Vec<NamespaceConfig>,
    /// Namespace ids to remove (removed and replaced).
    pub remove: Vec<u32>,
    /// Namespaces that stay open but are shown to other hosts now: nsid
    /// and its new hosts (`None`: every host).
    pub shown: Vec<(u32, Option<Vec<String>>)>,
    /// Namespaces that stay open with new QoS caps: nsid, its caps, its
    /// hosts' caps.
    pub qos: Vec<(
        u32,
        crate::model::qos::QosCaps,
        Vec<crate::model::qos::HostCaps>,
    )>,
    /// Null namespaces that stay open with a new size: nsid, bytes.
    pub sized: Vec<(u32, u64)>,
}

impl SubsystemChange {
    /// Namespace ids a host must re-examine (changed namespace list).
    pub fn changed_nsids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .remove
            .iter()
            .copied()
            .chain(self.add.iter().map(|n| n.nsid))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Namespace ids removed and not replaced.
    pub fn dropped_nsids(&self) -> Vec<u32> {
        self.remove
            .iter()
            .copied()
            .filter(|id| !self.add.iter().any(|n| n.nsid == *id))
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.access.is_none()
            && self.add.is_empty()
            && self.remove.is_empty()
            && self.shown.is_empty()
            && self.qos.is_empty()
            && self.sized.is_empty()
    }
}

/// What a reload does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// New subsystems.
    pub added: Vec<SubsystemConfig>,
    /// NQNs of removed subsystems.
    pub removed: Vec<String>,
    /// Subsystems that stay but changed.
    pub changed: Vec<SubsystemChange>,
    /// New busy-poll window, if it changed (applies to queues connected later).
    pub poll_spin_us: Option<u64>,
    /// New log filter, if it changed.
    pub log_level: Option<String>,
    /// The ANA states of some listener changed (hosts connected there are
    /// told).
    pub ana: bool,
    /// The `[[host]]` authentication settings changed: they apply to the
    /// next authentication; live associations stay.
    pub hosts: bool,
    /// Namespaces whose store changed size (found while applying the plan).
    pub resized: usize,
    /// Per-host series turned on or off, or their cap changed (for
    /// controllers that connect from now on), or the latency buckets shown.
    pub per_host: bool,
    /// The discovery referrals changed.
    pub referrals: bool,
    /// Listeners to start.
    pub listeners_added: Vec<ListenerConfig>,
    /// Listeners to stop (their controllers are disconnected).
    pub listeners_removed: Vec<ListenerConfig>,
    /// mDNS advertisement turned on or off.
    pub mdns: Option<bool>,
}

impl Plan {
    /// Whether the reload changes nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.poll_spin_us.is_none()
            && self.log_level.is_none()
            && !self.ana
            && !self.hosts
            && !self.per_host
            && !self.referrals
            && self.listeners_added.is_empty()
            && self.listeners_removed.is_empty()
            && self.mdns.is_none()
    }

    /// A one-line summary for the log and the service status.
    pub fn summary(&self) -> String {
        if self.is_empty() && self.resized == 0 {
            return "no changes".into();
        }
        let ns_added: usize = self.changed.iter().map(|c| c.add.len()).sum();
        let ns_removed: usize = self.changed.iter().map(|c| c.remove.len()).sum();
        let access = self.changed.iter().filter(|c| c.access.is_some()).count();
        let shown: usize = self.changed.iter().map(|c| c.shown.len()).sum();
        let qos: usize = self.changed.iter().map(|c| c.qos.len()).sum();
        format!(
            "subsystems +{} -{}, namespaces +{} -{}, host access changed in {}{}{}{}{}{}{}{}{}{}",
            self.added.len(),
            self.removed.len(),
            ns_added,
            ns_removed,
            access,
            match shown {
                0 => String::new(),
                n => format!(", {n} namespace(s) shown to other hosts"),
            },
            match qos {
                0 => String::new(),
                n => format!(", QoS caps of {n} namespace(s) changed"),
            },
            match (self.listeners_added.len(), self.listeners_removed.len()) {
                (0, 0) => String::new(),
                (a, r) => format!(", listeners +{a} -{r}"),
            },
            if self.ana { ", ANA states changed" } else { "" },
            if self.hosts {
                ", host keys changed"
            } else {
                ""
            },
            if self.per_host {
                ", per-host series changed"
            } else {
                ""
            },
            if self.referrals {
                ", referrals changed"
            } else {
                ""
            },
            match self.mdns {
                Some(true) => ", mDNS on",
                Some(false) => ", mDNS off",
                None => "",
            },
            match self.resized {
                0 => String::new(),
                n => format!(", {n} namespace(s) resized"),
            }
        )
    }
}

/// Why a new configuration cannot be applied without a restart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} cannot change while the target runs (restart to apply): {detail}")]
pub struct NeedsRestart {
    /// What changed.
    pub what: &'static str,
    /// Old and new values.
    pub detail: String,
}

pub(crate) fn access(s: &SubsystemConfig) -> HostAccess {
    HostAccess {
        allow_any_host: s.allow_any_host,
        hosts: s.hosts.clone(),
        listeners: s.listeners.clone(),
    }
}

/// The same listener (transport and address) in `c`.
fn same_listener<'c>(c: &'c TargetConfig, l: &ListenerConfig) -> Option<&'c ListenerConfig> {
    c.listeners
        .iter()
        .find(|x| x.transport == l.transport && x.addr == l.addr)
}

/// Computes the changes from `old` to `new`.
pub fn plan(old: &TargetConfig, new: &TargetConfig) -> Result<Plan, NeedsRestart> {
    if old.control_socket != new.control_socket {
        return Err(NeedsRestart {
            what: "control.socket",
            detail: format!("{:?} -> {:?}", old.control_socket, new.control_socket),
        });
    }
    if old.metrics_addr != new.metrics_addr {
        return Err(NeedsRestart {
            what: "metrics.address",
            detail: format!("{:?} -> {:?}", old.metrics_addr, new.metrics_addr),
        });
    }
    if old.engine != new.engine {
        return Err(NeedsRestart {
            what:
                "[target] engine settings (workers, worker_cpus, srq, buffers, max_pinned_memory, send_offload, light_load_spin_us)",
            detail: format!("{:?} -> {:?}", old.engine, new.engine),
        });
    }
    let mut p = Plan::default();
    for o in &old.subsystems {
        let Some(n) = new.subsystems.iter().find(|n| n.nqn == o.nqn) else {
            p.removed.push(o.nqn.clone());
            continue;
        };
        if o.serial != n.serial || o.model != n.model {
            return Err(NeedsRestart {
                what: "serial and model numbers",
                detail: format!(
                    "subsystem {}: {:?}/{:?} -> {:?}/{:?}",
                    o.nqn, o.serial, o.model, n.serial, n.model
                ),
            });
        }
        if o.cntlid_range != n.cntlid_range {
            return Err(NeedsRestart {
                what: "controller id ranges",
                detail: format!(
                    "subsystem {}: {:?} -> {:?}",
                    o.nqn, o.cntlid_range, n.cntlid_range
                ),
            });
        }
        let mut c = SubsystemChange {
            nqn: o.nqn.clone(),
            access: (access(o) != access(n)).then(|| access(n)),
            add: vec![],
            remove: vec![],
            shown: vec![],
            qos: vec![],
            sized: vec![],
        };
        for ons in &o.namespaces {
            match n.namespaces.iter().find(|x| x.nsid == ons.nsid) {
                Some(nns) if nns == ons => {}
                Some(nns) if nns.same_store(ons) => {
                    if nns.hosts != ons.hosts {
                        c.shown.push((nns.nsid, nns.hosts.clone()));
                    }
                    if (nns.qos, &nns.host_qos) != (ons.qos, &ons.host_qos) {
                        c.qos.push((nns.nsid, nns.qos, nns.host_qos.clone()));
                    }
                    if let BackendConfig::Null { size } = nns.backend {
                        if nns.backend != ons.backend {
                            c.sized.push((nns.nsid, size));
                        }
                    }
                }
                Some(nns) => {
                    c.remove.push(ons.nsid);
                    c.add.push(nns.clone());
                }
                None => c.remove.push(ons.nsid),
            }
        }
        for nns in &n.namespaces {
            if !o.namespaces.iter().any(|x| x.nsid == nns.nsid) {
                c.add.push(nns.clone());
            }
        }
        c.add.sort_by_key(|n| n.nsid);
        c.remove.sort_unstable();
        if !c.is_empty() {
            p.changed.push(c);
        }
    }
    for n in &new.subsystems {
        if !old.subsystems.iter().any(|o| o.nqn == n.nqn) {
            p.added.push(n.clone());
        }
    }
    p.poll_spin_us = (old.poll_spin_us != new.poll_spin_us).then_some(new.poll_spin_us);
    p.log_level = (old.log_level != new.log_level).then(|| new.log_level.clone());
    p.listeners_added = new
        .listeners
        .iter()
        .filter(|l| same_listener(old, l).is_none())
        .cloned()
        .collect();
    p.listeners_removed = old
        .listeners
        .iter()
        .filter(|l| same_listener(new, l).is_none())
        .cloned()
        .collect();
    for l in &old.listeners {
        if let Some(n) = same_listener(new, l).filter(|n| n.secure != l.secure) {
            return Err(NeedsRestart {
                what: "a listener's secure setting",
                detail: format!(
                    "{} ({}): {} -> {}: remove the listener, then add it back (nvmf-target listener del, listener add --secure)",
                    l.addr,
                    l.transport.name(),
                    l.secure.name(),
                    n.secure.name()
                ),
            });
        }
    }
    // The new one is bound before the old one goes: on one port, a
    // wildcard address and another cannot swap in one reload.
    let overlap = |a: &ListenerConfig, b: &ListenerConfig| {
        a.transport == b.transport
            && a.addr.port() == b.addr.port()
            && (a.addr.ip().is_unspecified() || b.addr.ip().is_unspecified())
    };
    for a in &p.listeners_added {
        if let Some(r) = p.listeners_removed.iter().find(|r| overlap(a, r)) {
            return Err(NeedsRestart {
                what: "a listener's address on the same port",
                detail: format!(
                    "{} -> {} ({}): remove {} first (nvmf-target listener del), then add {}",
                    r.addr,
                    a.addr,
                    a.transport.name(),
                    r.addr,
                    a.addr
                ),
            });
        }
    }
    p.ana = old
        .listeners
        .iter()
        .any(|l| same_listener(new, l).is_some_and(|n| n.ana != l.ana));
    p.hosts = old.hosts != new.hosts;
    p.per_host =
        old.per_host_series != new.per_host_series || old.latency_buckets != new.latency_buckets;
    p.referrals = old.referrals != new.referrals;
    p.mdns = (old.mdns != new.mdns).then_some(new.mdns);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[listener]]
address = "10.0.2.15"
[[subsystem]]
nqn = "nqn.2026-11.io.test:a"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1M"
[[subsystem.namespace]]
nsid = 2
backend = "null"
size = "2M"
[[subsystem]]
nqn = "nqn.2026-11.io.test:b"
hosts = ["nqn.2026-11.io.test:h1"]
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1M"
"#;

    fn cfg(text: &str) -> TargetConfig {
        TargetConfig::from_toml(text, "t.toml").unwrap()
    }

    #[test]
    fn same_config_changes_nothing() {
        let p = plan(&cfg(BASE), &cfg(BASE)).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.summary(), "no changes");
    }

    #[test]
    fn namespaces_added_removed_replaced() {
        let new = BASE
            .replace("size = \"2M\"", "size = \"2M\"\nreadonly = true")
            .replace(
                "[[subsystem]]\nnqn = \"nqn.2026-11.io.test:b\"",
                "[[subsystem.namespace]]\nnsid = 7\nbackend = \"null\"\nsize = \"1M\"\n\
                 [[subsystem]]\nnqn = \"nqn.2026-11.io.test:b\"",
            );
        let new = new.replacen(
            "[[subsystem.namespace]]\nnsid = 1\nbackend = \"null\"\nsize = \"1M\"\n",
            "",
            1,
        );
        let p = plan(&cfg(BASE), &cfg(&new)).unwrap();
        assert_eq!(p.changed.len(), 1, "{p:?}");
        let c = &p.changed[0];
        assert_eq!(c.nqn, "nqn.2026-11.io.test:a");
        assert_eq!(c.access, None);
        assert_eq!(c.remove, vec![1, 2]);
        assert_eq!(c.add.iter().map(|n| n.nsid).collect::<Vec<_>>(), vec![2, 7]);
        assert!(c.add[0].readonly);
        assert_eq!(c.changed_nsids(), vec![1, 2, 7]);
        assert_eq!(c.dropped_nsids(), vec![1]);
        assert_eq!(
            p.summary(),
            "subsystems +0 -0, namespaces +2 -2, host access changed in 0"
        );
    }

    #[test]
    fn a_null_namespace_resized_stays_open() {
        let grown = BASE.replace("size = \"2M\"", "size = \"4M\"");
        let p = plan(&cfg(BASE), &cfg(&grown)).unwrap();
        assert_eq!(p.changed.len(), 1, "{p:?}");
        let c = &p.changed[0];
        assert!(c.add.is_empty() && c.remove.is_empty(), "reopened: {c:?}");
        assert_eq!(c.sized, vec![(2, 4 << 20)]);
        assert!(!p.is_empty());
    }

    #[test]
    fn a_namespace_shown_to_other_hosts_stays_open() {
        let h = "hosts = [\"nqn.2026-11.io.test:h1\"]\n";
        let masked = BASE.replace("size = \"2M\"\n", &format!("size = \"2M\"\n{h}"));
        let p = plan(&cfg(BASE), &cfg(&masked)).unwrap();
        assert_eq!(p.changed.len(), 1, "{p:?}");
        let c = &p.changed[0];
        assert!(
            c.add.is_empty() && c.remove.is_empty(),
            "not reopened: {c:?}"
        );
        assert_eq!(
            c.shown,
            vec![(2, Some(vec!["nqn.2026-11.io.test:h1".to_string()]))]
        );
        assert!(p
            .summary()
            .ends_with(", 1 namespace(s) shown to other hosts"));
        // Back to every host; and a change of the store with it reopens.
        let p = plan(&cfg(&masked), &cfg(BASE)).unwrap();
        assert_eq!(p.changed[0].shown, vec![(2, None)]);
        let both = masked.replace("size = \"2M\"", "size = \"2M\"\nreadonly = true");
        let p = plan(&cfg(BASE), &cfg(&both)).unwrap();
        assert_eq!(
            (p.changed[0].remove.clone(), p.changed[0].shown.len()),
            (vec![2], 0)
        );
    }

    #[test]
    fn subsystems_and_hosts() {
        let new = BASE
            .replace(
                "hosts = [\"nqn.2026-11.io.test:h1\"]",
                "hosts = [\"nqn.2026-11.io.test:h1\", \"nqn.2026-11.io.test:h2\"]",
            )
            .replace(
                "nqn = \"nqn.2026-11.io.test:a\"",
                "nqn = \"nqn.2026-11.io.test:c\"",
            );
        let p = plan(&cfg(BASE), &cfg(&new)).unwrap();
        assert_eq!(p.removed, vec!["nqn.2026-11.io.test:a".to_string()]);
        assert_eq!(p.added.len(), 1);
        assert_eq!(p.added[0].nqn, "nqn.2026-11.io.test:c");
        assert_eq!(p.changed.len(), 1);
        assert_eq!(
            p.changed[0].access,
            Some(HostAccess {
                allow_any_host: false,
                hosts: vec![
                    "nqn.2026-11.io.test:h1".into(),
                    "nqn.2026-11.io.test:h2".into()
                ],
                listeners: None,
            })
        );
        assert!(p.changed[0].add.is_empty() && p.changed[0].remove.is_empty());
    }

    #[test]
    fn ana_states_and_groups() {
        let with_ana = BASE.replace(
            "address = \"10.0.2.15\"",
            "address = \"10.0.2.15\"\nana = { 1 = \"inaccessible\" }",
        );
        let p = plan(&cfg(BASE), &cfg(&with_ana)).unwrap();
        assert!(p.ana && !p.is_empty());
        assert!(
            p.summary().ends_with("ANA states changed"),
            "{}",
            p.summary()
        );
        assert!(p.changed.is_empty());
        // A namespace that moves to another group is replaced.
        let moved = BASE.replacen("size = \"2M\"", "size = \"2M\"\nana_group = 2", 1);
        let p = plan(&cfg(BASE), &cfg(&moved)).unwrap();
        assert!(!p.ana);
        assert_eq!(p.changed[0].changed_nsids(), vec![2]);
        // Controller id ranges are fixed while hosts are connected.
        let ranged = BASE.replacen(
            "allow_any_host = true",
            "allow_any_host = true\ncntlid_min = 10\ncntlid_max = 20",
            1,
        );
        let e = plan(&cfg(BASE), &cfg(&ranged)).unwrap_err();
        assert_eq!(e.what, "controller id ranges");
    }

    #[test]
    fn settings_that_need_a_restart_are_refused() {
        let e = plan(
            &cfg(BASE),
            &cfg(&format!("[metrics]\naddress = \"127.0.0.1:1\"\n{BASE}")),
        )
        .unwrap_err();
        assert_eq!(e.what, "metrics.address");
        let e = plan(
            &cfg(BASE),
            &cfg(&format!("[control]\nsocket = \"/run/x.sock\"\n{BASE}")),
        )
        .unwrap_err();
        assert_eq!(e.what, "control.socket");
        let e = plan(
            &cfg(BASE),
            &cfg(&BASE.replace(
                "allow_any_host = true",
                "allow_any_host = true\nserial = \"S1\"",
            )),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("subsystem nqn.2026-11.io.test:a"),
            "{e}"
        );
    }

    #[test]
    fn listeners_come_and_go_by_transport_and_address() {
        let moved = BASE.replace("10.0.2.15", "10.0.2.16");
        let p = plan(&cfg(BASE), &cfg(&moved)).unwrap();
        assert_eq!(p.listeners_added.len(), 1);
        assert_eq!(p.listeners_added[0].addr.to_string(), "10.0.2.16:4420");
        assert_eq!(p.listeners_removed[0].addr.to_string(), "10.0.2.15:4420");
        assert!(!p.ana);
        assert!(p.summary().contains("listeners +1 -1"), "{}", p.summary());
        // TCP beside it: added; the RDMA one stays, its ANA states compared.
        let both = BASE.replacen(
            "[[listener]]\naddress = \"10.0.2.15\"\n",
            "[[listener]]\naddress = \"10.0.2.15\"\nana = { 1 = \"non-optimized\" }\n[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.2.15\"\n",
            1,
        );
        let p = plan(&cfg(BASE), &cfg(&both)).unwrap();
        assert_eq!(p.listeners_added.len(), 1);
        assert_eq!(
            p.listeners_added[0].transport,
            crate::config::Transport::Tcp
        );
        assert!(p.listeners_removed.is_empty());
        assert!(p.ana);
        let p = plan(&cfg(&both), &cfg(BASE)).unwrap();
        assert_eq!(p.listeners_removed.len(), 1);
        assert_eq!(
            p.listeners_removed[0].transport,
            crate::config::Transport::Tcp
        );
        // The wildcard and an address on one port: in two steps.
        let e = plan(&cfg(BASE), &cfg(&BASE.replace("10.0.2.15", "0.0.0.0"))).unwrap_err();
        assert!(e.to_string().contains("remove 10.0.2.15:4420 first"), "{e}");
    }

    #[test]
    fn settings_applied_live() {
        let p = plan(
            &cfg(BASE),
            &cfg(&format!(
                "[target]\npoll_spin_us = 3\n[log]\nlevel = \"debug\"\n{BASE}"
            )),
        )
        .unwrap();
        assert_eq!(p.poll_spin_us, Some(3));
        assert_eq!(p.log_level.as_deref(), Some("debug"));
        assert!(p.changed.is_empty());
    }
}
