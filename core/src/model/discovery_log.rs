//! The discovery log page: one entry per (listener, subsystem) the
//! asking host may see.

use nvme::discovery::{adrfam, encode_log, sectype, subtype, treq, trtype, DiscoveryEntry};

use crate::model::port::{Port, Secure};
use crate::model::target::Target;

/// Builds the entry for one subsystem on one listener (NVMe/TCP's: no RDMA
/// fields; its security type TLS 1.3 and its requirement when it speaks
/// TLS, as nvmet says them).
pub fn entry(portid: u16, port: Port, nqn: &str) -> DiscoveryEntry {
    let (addr, tcp) = (port.addr, port.tcp);
    let rdma = u8::from(!tcp);
    let (treq, sectype) = match port.secure {
        _ if !tcp => (0, 0),
        Secure::None => (0, 0),
        Secure::Required => (treq::SECURE_CHANNEL_REQUIRED, sectype::TLS13),
        Secure::Optional => (treq::SECURE_CHANNEL_NOT_REQUIRED, sectype::TLS13),
    };
    DiscoveryEntry {
        trtype: if tcp { trtype::TCP } else { trtype::RDMA },
        adrfam: if addr.is_ipv4() {
            adrfam::IPV4
        } else {
            adrfam::IPV6
        },
        subtype: subtype::NVME,
        treq,
        portid,
        cntlid: 0xFFFF,
        asqsz: crate::ADMIN_QUEUE_SIZE,
        eflags: 0,
        trsvcid: addr.port().to_string(),
        subnqn: nqn.to_string(),
        traddr: addr.ip().to_string(),
        rdma_qptype: if tcp { sectype } else { rdma },
        rdma_prtype: rdma,
        rdma_cms: rdma,
        rdma_pkey: 0,
    }
}

/// The entries `hostnqn` sees: each subsystem it may connect to at each
/// listener the subsystem is on, then the referrals (port ids after the listeners').
fn entries(target: &Target, hostnqn: &str) -> Vec<DiscoveryEntry> {
    let mut entries = Vec::new();
    for (i, l) in target.listeners.live() {
        for s in target
            .subsystems()
            .iter()
            .filter(|s| s.host_allowed(hostnqn) && s.reachable_via(&l))
        {
            entries.push(entry(i as u16 + 1, l, &s.nqn));
        }
    }
    let first = target.listeners.span() as u16 + 1;
    for (i, r) in target.discovery.referrals().iter().enumerate() {
        let mut e = entry(first + i as u16, *r, nvme::DISCOVERY_NQN);
        e.subtype = subtype::REFERRAL;
        entries.push(e);
    }
    entries
}

/// What the entries say, in a number: a change of any changes it.
/// Everything of the page but its generation counter (its first 8 bytes).
fn digest_of(page: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    page.get(8..).hash(&mut h);
    h.finish()
}

/// The digest of the log `hostnqn` would read now.
pub fn digest(target: &Target, hostnqn: &str) -> u64 {
    log_page(target, hostnqn).1
}

/// The whole discovery log page as `hostnqn` sees it, and its digest.
pub fn log_page(target: &Target, hostnqn: &str) -> (Vec<u8>, u64) {
    let page = encode_log(target.discovery.genctr(), &entries(target, hostnqn));
    let digest = digest_of(&page);
    (page, digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::subsystem::{NewController, Subsystem, SubsystemKind};
    use nvme::discovery::DiscoveryHeader;
    use std::sync::Arc;

    #[test]
    fn only_visible_subsystems() {
        let mk = |nqn: &str, any: bool| {
            Arc::new(Subsystem::new(
                nqn.into(),
                SubsystemKind::Nvm,
                any,
                vec!["nqn.h:ok".into()],
                None,
                "m".into(),
                vec![],
            ))
        };
        let t = Target::new(
            vec![mk("nqn.s:open", true), mk("nqn.s:closed", false)],
            vec!["10.0.2.15:4420".parse().unwrap()],
            0,
        );
        let (p, _) = log_page(&t, "nqn.h:other");
        let h = DiscoveryHeader::parse(&p).unwrap();
        assert_eq!(h.numrec, 1);
        let e = DiscoveryEntry::parse(&p[1024..]).unwrap();
        assert_eq!(e.subnqn, "nqn.s:open");
        assert_eq!(e.traddr, "10.0.2.15");
        assert_eq!(e.trsvcid, "4420");
        let (p, _) = log_page(&t, "nqn.h:ok");
        assert_eq!(DiscoveryHeader::parse(&p).unwrap().numrec, 2);
        assert_eq!(p.len(), 3 * 1024);
    }

    #[test]
    fn a_subsystem_is_listed_only_at_its_listeners() {
        use crate::model::port::PortName;
        use crate::model::subsystem::HostAccess;
        let mk = |nqn: &str| {
            Arc::new(Subsystem::new(
                nqn.into(),
                SubsystemKind::Nvm,
                true,
                vec![],
                None,
                "m".into(),
                vec![],
            ))
        };
        let (a, b) = (mk("nqn.s:a"), mk("nqn.s:b"));
        let rdma: Port = "10.0.2.15:4420"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into();
        let tcp = Port { tcp: true, ..rdma };
        let t = Target::with_ports(vec![a.clone(), b.clone()], vec![rdma, tcp], 0);
        let listed = |t: &Target| {
            let (p, _) = log_page(t, "nqn.h:x");
            let n = DiscoveryHeader::parse(&p).unwrap().numrec as usize;
            (1..=n)
                .map(|i| {
                    let e = DiscoveryEntry::parse(&p[1024 * i..]).unwrap();
                    (e.subnqn, e.trtype)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(listed(&t).len(), 4, "every subsystem at every listener");
        b.set_access(HostAccess {
            allow_any_host: true,
            hosts: vec![],
            listeners: Some(vec![PortName::parse("tcp:10.0.2.15:4420").unwrap()]),
        });
        assert_eq!(
            listed(&t),
            vec![
                ("nqn.s:a".into(), trtype::RDMA),
                ("nqn.s:a".into(), trtype::TCP),
                ("nqn.s:b".into(), trtype::TCP),
            ]
        );
        // Without a transport: every listener at the address.
        b.set_access(HostAccess {
            allow_any_host: true,
            hosts: vec![],
            listeners: Some(vec![PortName::parse("10.0.2.15:4420").unwrap()]),
        });
        assert_eq!(listed(&t).len(), 4);
        b.set_access(HostAccess {
            allow_any_host: true,
            hosts: vec![],
            listeners: Some(vec![]),
        });
        assert_eq!(listed(&t).len(), 2, "on no listener");
        assert!(t
            .subsystem(nvme::DISCOVERY_NQN)
            .unwrap()
            .reachable_via(&rdma));
    }

    #[test]
    fn a_tls_listener_says_what_it_requires() {
        use crate::model::port::Secure;
        let port = |tcp, secure| Port {
            addr: "10.0.2.15:4420".parse().unwrap(),
            tcp,
            secure,
        };
        let e = entry(1, port(true, Secure::Required), "nqn.s");
        assert_eq!((e.treq, e.rdma_qptype), (1, 2), "required, TLS 1.3");
        let e = entry(1, port(true, Secure::Optional), "nqn.s");
        assert_eq!((e.treq, e.rdma_qptype), (2, 2), "not required, TLS 1.3");
        let e = entry(1, port(true, Secure::None), "nqn.s");
        assert_eq!((e.treq, e.rdma_qptype), (0, 0));
        let e = entry(1, port(false, Secure::None), "nqn.s");
        assert_eq!((e.treq, e.rdma_qptype, e.rdma_cms), (0, 1, 1), "RDMA");
        let b = e.encode();
        assert_eq!((b[3], b[768]), (0, 1));
    }

    fn target() -> (Target, Arc<Subsystem>) {
        let s = Arc::new(Subsystem::new(
            "nqn.s:a".into(),
            SubsystemKind::Nvm,
            false,
            vec!["nqn.h:a".into()],
            None,
            "m".into(),
            vec![],
        ));
        let t = Target::new(vec![s.clone()], vec!["10.0.2.15:4420".parse().unwrap()], 0);
        (t, s)
    }

    #[test]
    fn referrals_follow_the_subsystems_for_every_host() {
        let (t, _) = target();
        let tcp = crate::model::subsystem::Port {
            addr: "10.0.2.16:8009".parse().unwrap(),
            tcp: true,
            secure: Default::default(),
        };
        let g0 = t.discovery.genctr();
        assert!(t.discovery.set_referrals(vec![tcp]));
        assert!(!t.discovery.set_referrals(vec![tcp]), "unchanged");
        assert_eq!(t.discovery.genctr(), g0 + 1);
        for host in ["nqn.h:a", "nqn.h:stranger"] {
            let (p, _) = log_page(&t, host);
            let n = DiscoveryHeader::parse(&p).unwrap().numrec as usize;
            let last = DiscoveryEntry::parse(&p[1024 * n..]).unwrap();
            assert_eq!(last.subtype, subtype::REFERRAL);
            assert_eq!(last.subnqn, nvme::DISCOVERY_NQN);
            assert_eq!(last.trtype, trtype::TCP);
            assert_eq!(
                (last.traddr.as_str(), last.trsvcid.as_str()),
                ("10.0.2.16", "8009")
            );
            assert_eq!(last.portid, 2, "after the listeners' port ids");
            assert_eq!(n, if host == "nqn.h:a" { 2 } else { 1 });
        }
    }

    #[test]
    fn a_persistent_discovery_controller_is_told_once_what_it_read_changed() {
        use nvme::identify::oaes;
        let (t, s) = target();
        let d = t
            .discovery
            .subsystem
            .add_controller(NewController::of("nqn.h:a", [1; 16], 30_000), 16)
            .unwrap();
        let read = |t: &Target| {
            let (_, digest) = log_page(t, "nqn.h:a");
            let mut st = d.state();
            st.disc_seen = Some(digest);
            st.disc_event_masked = false;
        };
        // Never read the log: nothing to tell.
        assert_eq!(t.notify_discovery(), 0);
        read(&t);
        d.state().aen_config = oaes::DISC_CHANGE;
        // Nothing it sees changed (another host's access, the counter).
        t.discovery.bump_genctr();
        assert_eq!(t.notify_discovery(), 0);
        // Its subsystem is gone from its view: one notice, then none until
        // it reads the log again.
        s.set_access(crate::model::subsystem::HostAccess {
            allow_any_host: false,
            hosts: vec![],
            listeners: None,
        });
        assert_eq!(t.notify_discovery(), 1);
        assert_eq!(t.notify_discovery(), 0);
        let ev = d.state().events.pop_front().unwrap();
        assert_eq!(
            ev, 0x0070_f002,
            "notice, discovery log changed, log page 0x70"
        );
        read(&t);
        assert_eq!(t.notify_discovery(), 0);
        t.discovery.set_referrals(vec!["10.0.2.16:4420"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into()]);
        assert_eq!(t.notify_discovery(), 1);
        // A host that did not enable the notice is not told.
        d.state().events.clear();
        read(&t);
        d.state().aen_config = 0;
        t.discovery.set_referrals(vec![]);
        assert_eq!(t.notify_discovery(), 0);
        assert!(d.state().events.is_empty());
    }
}
