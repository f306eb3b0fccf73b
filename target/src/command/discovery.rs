//! The discovery subsystem's log page: one entry per (listener, subsystem) the
//! asking host may see.

use std::net::SocketAddr;

use nvme::discovery::{adrfam, encode_log, subtype, trtype, DiscoveryEntry};

use crate::model::subsystem::Target;

/// Builds the entry for one subsystem on one listener (NVMe/TCP's when
/// `tcp`: no RDMA fields, security type none).
pub fn entry(portid: u16, addr: SocketAddr, tcp: bool, nqn: &str) -> DiscoveryEntry {
    let rdma = u8::from(!tcp);
    DiscoveryEntry {
        trtype: if tcp { trtype::TCP } else { trtype::RDMA },
        adrfam: if addr.is_ipv4() {
            adrfam::IPV4
        } else {
            adrfam::IPV6
        },
        subtype: subtype::NVME,
        treq: 0,
        portid,
        cntlid: 0xFFFF,
        asqsz: crate::ADMIN_QUEUE_SIZE,
        eflags: 0,
        trsvcid: addr.port().to_string(),
        subnqn: nqn.to_string(),
        traddr: addr.ip().to_string(),
        rdma_qptype: rdma,
        rdma_prtype: rdma,
        rdma_cms: rdma,
        rdma_pkey: 0,
    }
}

/// The whole discovery log page as `hostnqn` sees it.
pub fn log_page(target: &Target, hostnqn: &str) -> Vec<u8> {
    let mut entries = Vec::new();
    for (i, l) in target.listeners.iter().enumerate() {
        for s in target
            .subsystems()
            .iter()
            .filter(|s| s.host_allowed(hostnqn))
        {
            entries.push(entry(i as u16 + 1, l.addr, l.tcp, &s.nqn));
        }
    }
    encode_log(target.genctr(), &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::subsystem::{Subsystem, SubsystemKind};
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
        let p = log_page(&t, "nqn.h:other");
        let h = DiscoveryHeader::parse(&p).unwrap();
        assert_eq!(h.numrec, 1);
        let e = DiscoveryEntry::parse(&p[1024..]).unwrap();
        assert_eq!(e.subnqn, "nqn.s:open");
        assert_eq!(e.traddr, "10.0.2.15");
        assert_eq!(e.trsvcid, "4420");
        let p = log_page(&t, "nqn.h:ok");
        assert_eq!(DiscoveryHeader::parse(&p).unwrap().numrec, 2);
        assert_eq!(p.len(), 3 * 1024);
    }
}
