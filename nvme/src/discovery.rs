//! Discovery log page (log id 0x70): header and 1024-byte entries.

use crate::bytes::*;
use crate::{need, WireError};

/// Size of the discovery log header (entries start at this offset).
pub const HEADER_SIZE: usize = 1024;
/// Size of one discovery log entry.
pub const ENTRY_SIZE: usize = 1024;

/// Transport types.
pub mod trtype {
    /// RDMA.
    pub const RDMA: u8 = 1;
    /// Fibre Channel.
    pub const FC: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 3;
}

/// Address families.
pub mod adrfam {
    /// IPv4.
    pub const IPV4: u8 = 1;
    /// IPv6.
    pub const IPV6: u8 = 2;
    /// InfiniBand.
    pub const IB: u8 = 3;
}

/// Subsystem types.
pub mod subtype {
    /// Referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// NVM subsystem.
    pub const NVME: u8 = 2;
    /// The current discovery subsystem.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Discovery log header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryHeader {
    /// Generation counter (changes whenever the log changes).
    pub genctr: u64,
    /// Number of records.
    pub numrec: u64,
    /// Record format (0).
    pub recfmt: u16,
}

impl DiscoveryHeader {
    /// Encodes the 1024-byte header.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        put_u64(&mut b, 0, self.genctr);
        put_u64(&mut b, 8, self.numrec);
        put_u16(&mut b, 16, self.recfmt);
        b
    }
    /// Parses a header (only the first 18 bytes are needed).
    pub fn parse(b: &[u8]) -> Result<DiscoveryHeader, WireError> {
        need("discovery log header", b, 18)?;
        Ok(DiscoveryHeader {
            genctr: u64_at(b, 0),
            numrec: u64_at(b, 8),
            recfmt: u16_at(b, 16),
        })
    }
}

/// Transport requirements (TREQ) bits 1:0: secure channel.
pub mod treq {
    /// A secure channel is required.
    pub const SECURE_CHANNEL_REQUIRED: u8 = 1;
    /// A secure channel is not required (TLS or plain).
    pub const SECURE_CHANNEL_NOT_REQUIRED: u8 = 2;
}

/// NVMe/TCP security types (TSAS byte 0 of a TCP entry).
pub mod sectype {
    /// No security.
    pub const NONE: u8 = 0;
    /// TLS 1.2.
    pub const TLS12: u8 = 1;
    /// TLS 1.3.
    pub const TLS13: u8 = 2;
}

/// One discovery log entry (RDMA transport specific address subtype included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport type.
    pub trtype: u8,
    /// Address family.
    pub adrfam: u8,
    /// Subsystem type.
    pub subtype: u8,
    /// Transport requirements.
    pub treq: u8,
    /// Port id.
    pub portid: u16,
    /// Controller id (0xFFFF: dynamic).
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    /// Entry flags.
    pub eflags: u16,
    /// Transport service id (port number as text).
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Transport address.
    pub traddr: String,
    /// RDMA QP service type (1 = reliable connected); for NVMe/TCP, TSAS
    /// byte 0 is the security type ([`sectype`]).
    pub rdma_qptype: u8,
    /// RDMA provider type (1 = none).
    pub rdma_prtype: u8,
    /// RDMA connection management service (1 = RDMA-CM).
    pub rdma_cms: u8,
    /// RDMA partition key.
    pub rdma_pkey: u16,
}

impl DiscoveryEntry {
    /// Encodes into 1024 bytes.
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(&mut b, 4, self.portid);
        put_u16(&mut b, 6, self.cntlid);
        put_u16(&mut b, 8, self.asqsz);
        put_u16(&mut b, 10, self.eflags);
        put_str(&mut b, 32, 32, &self.trsvcid, false);
        put_str(&mut b, 256, 256, &self.subnqn, true);
        put_str(&mut b, 512, 256, &self.traddr, false);
        b[768] = self.rdma_qptype;
        b[769] = self.rdma_prtype;
        b[770] = self.rdma_cms;
        put_u16(&mut b, 776, self.rdma_pkey);
        b
    }
    /// Parses 1024 bytes.
    pub fn parse(b: &[u8]) -> Result<DiscoveryEntry, WireError> {
        need("discovery log entry", b, ENTRY_SIZE)?;
        Ok(DiscoveryEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            eflags: u16_at(b, 10),
            trsvcid: str_at(b, 32, 32),
            subnqn: str_at(b, 256, 256),
            traddr: str_at(b, 512, 256),
            rdma_qptype: b[768],
            rdma_prtype: b[769],
            rdma_cms: b[770],
            rdma_pkey: u16_at(b, 776),
        })
    }
}

/// Builds a whole discovery log page: header followed by the entries.
pub fn encode_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_SIZE + entries.len() * ENTRY_SIZE);
    v.extend_from_slice(
        &DiscoveryHeader {
            genctr,
            numrec: entries.len() as u64,
            recfmt: 0,
        }
        .encode(),
    );
    for e in entries {
        v.extend_from_slice(&e.encode());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(nqn: &str) -> DiscoveryEntry {
        DiscoveryEntry {
            trtype: trtype::RDMA,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: 0,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: nqn.into(),
            traddr: "10.0.2.15".into(),
            rdma_qptype: 1,
            rdma_prtype: 1,
            rdma_cms: 1,
            rdma_pkey: 0,
        }
    }

    #[test]
    fn layout() {
        let e = entry("nqn.a");
        let b = e.encode();
        assert_eq!(&b[0..4], &[1, 1, 2, 0]);
        assert_eq!(&b[6..8], &[0xFF, 0xFF]);
        assert_eq!(&b[8..10], &[32, 0]);
        assert_eq!(&b[32..36], b"4420");
        assert_eq!(&b[256..261], b"nqn.a");
        assert_eq!(&b[512..521], b"10.0.2.15");
        assert_eq!(&b[768..771], &[1, 1, 1]);
        assert_eq!(DiscoveryEntry::parse(&b).unwrap(), e);
        let log = encode_log(5, &[e.clone(), entry("nqn.b")]);
        assert_eq!(log.len(), 3 * 1024);
        let h = DiscoveryHeader::parse(&log).unwrap();
        assert_eq!((h.genctr, h.numrec, h.recfmt), (5, 2, 0));
        assert_eq!(DiscoveryEntry::parse(&log[2048..]).unwrap().subnqn, "nqn.b");
    }

    proptest! {
        #[test]
        fn roundtrip(portid: u16, nqn in "[a-z0-9.:]{1,255}", addr in "[0-9.]{1,64}", svc in "[0-9]{1,5}") {
            let e = DiscoveryEntry { portid, subnqn: nqn, traddr: addr, trsvcid: svc, ..entry("x") };
            prop_assert_eq!(DiscoveryEntry::parse(&e.encode()).unwrap(), e);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = DiscoveryEntry::parse(&b);
            let _ = DiscoveryHeader::parse(&b);
        }
    }
}
