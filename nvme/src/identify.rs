//! Identify data structures (4096 bytes each).

use crate::bytes::*;
use crate::{need, WireError};

/// Size of every Identify data structure.
pub const IDENTIFY_SIZE: usize = 4096;

/// Controller types (`cntrltype`).
pub mod cntrltype {
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
}

/// Identify Controller: the fields a fabrics target fills in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyController {
    /// PCI vendor id.
    pub vid: u16,
    /// PCI subsystem vendor id.
    pub ssvid: u16,
    /// Serial number (20 ASCII, space padded).
    pub sn: String,
    /// Model number (40 ASCII).
    pub mn: String,
    /// Firmware revision (8 ASCII).
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// IEEE OUI.
    pub ieee: [u8; 3],
    /// Multi-path I/O and namespace sharing capabilities.
    pub cmic: u8,
    /// Maximum data transfer size (power of two, in units of CAP.MPSMIN = 4 KiB).
    pub mdts: u8,
    /// Controller id.
    pub cntlid: u16,
    /// Version.
    pub ver: u32,
    /// Optional asynchronous events supported.
    pub oaes: u32,
    /// Controller attributes.
    pub ctratt: u32,
    /// Command Retry Delay Times 1..3 (units of 100 ms; bytes 128..134).
    pub crdt: [u16; 3],
    /// Controller type.
    pub cntrltype: u8,
    /// Optional admin command support.
    pub oacs: u16,
    /// Abort command limit (0-based).
    pub acl: u8,
    /// Asynchronous event request limit (0-based).
    pub aerl: u8,
    /// Firmware updates.
    pub frmw: u8,
    /// Log page attributes.
    pub lpa: u8,
    /// Error log page entries (0-based).
    pub elpe: u8,
    /// Number of power states supported (0-based).
    pub npss: u8,
    /// ANA transition time (seconds).
    pub anatt: u8,
    /// ANA capabilities (the states reported).
    pub anacap: u8,
    /// Highest ANA group id.
    pub anagrpmax: u32,
    /// Number of ANA group ids.
    pub nanagrpid: u32,
    /// Keep alive support (granularity in 100 ms units; 0 = not supported).
    pub kas: u16,
    /// SQ entry size (required 6 / max 6 → 0x66).
    pub sqes: u8,
    /// CQ entry size (0x44).
    pub cqes: u8,
    /// Maximum outstanding commands.
    pub maxcmd: u16,
    /// Number of namespaces (highest valid NSID).
    pub nn: u32,
    /// Optional NVM command support.
    pub oncs: u16,
    /// Fused operation support.
    pub fuses: u16,
    /// Atomic Compare & Write Unit (0-based, logical blocks).
    pub acwu: u16,
    /// Volatile write cache present.
    pub vwc: u8,
    /// Atomic write unit normal (0-based).
    pub awun: u16,
    /// Atomic write unit power fail (0-based).
    pub awupf: u16,
    /// SGL support.
    pub sgls: u32,
    /// Maximum number of allowed namespaces.
    pub mnan: u32,
    /// Subsystem NQN.
    pub subnqn: String,
    /// I/O queue command capsule supported size (16-byte units).
    pub ioccsz: u32,
    /// I/O queue response capsule supported size (16-byte units).
    pub iorcsz: u32,
    /// In-capsule data offset (16-byte units).
    pub icdoff: u16,
    /// Fabrics controller attributes.
    pub fcatt: u8,
    /// Maximum SGL data block descriptors.
    pub msdbd: u8,
}

/// SGLS bits.
pub mod sgls {
    /// SGLs supported (no alignment requirement).
    pub const SUPPORTED: u32 = 1;
    /// Keyed SGL data block descriptor supported.
    pub const KEYED: u32 = 1 << 2;
    /// Offset-addressed data block (in-capsule data) supported.
    pub const OFFSET: u32 = 1 << 20;
}

/// ONCS bits.
pub mod oncs {
    /// Compare.
    pub const COMPARE: u16 = 1;
    /// Write Uncorrectable.
    pub const WRITE_UNCOR: u16 = 1 << 1;
    /// Dataset Management.
    pub const DSM: u16 = 1 << 2;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u16 = 1 << 3;
    /// Reservations.
    pub const RESERVATIONS: u16 = 1 << 5;
}

/// CMIC bits (controller multi-path I/O and namespace sharing capabilities).
pub mod cmic {
    /// The subsystem may have two or more ports.
    pub const MULTI_PORT: u8 = 1 << 0;
    /// The subsystem may have two or more controllers.
    pub const MULTI_CTRL: u8 = 1 << 1;
    /// The controller reports Asymmetric Namespace Access.
    pub const ANA: u8 = 1 << 3;
}

/// OAES bits.
pub mod oaes {
    /// Namespace attribute notices.
    pub const NS_ATTR: u32 = 1 << 8;
    /// Asymmetric Namespace Access Change Notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Discovery log page change notices.
    pub const DISC_CHANGE: u32 = 1 << 31;
}

impl IdentifyController {
    /// Encodes into 4096 bytes.
    pub fn encode(&self) -> [u8; IDENTIFY_SIZE] {
        let mut b = [0u8; IDENTIFY_SIZE];
        put_u16(&mut b, 0, self.vid);
        put_u16(&mut b, 2, self.ssvid);
        put_str_space(&mut b, 4, 20, &self.sn);
        put_str_space(&mut b, 24, 40, &self.mn);
        put_str_space(&mut b, 64, 8, &self.fr);
        b[72] = self.rab;
        b[73..76].copy_from_slice(&self.ieee);
        b[76] = self.cmic;
        b[77] = self.mdts;
        put_u16(&mut b, 78, self.cntlid);
        put_u32(&mut b, 80, self.ver);
        put_u32(&mut b, 92, self.oaes);
        put_u32(&mut b, 96, self.ctratt);
        for (i, t) in self.crdt.iter().enumerate() {
            put_u16(&mut b, 128 + 2 * i, *t);
        }
        b[111] = self.cntrltype;
        put_u16(&mut b, 256, self.oacs);
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        b[263] = self.npss;
        b[343] = self.anatt;
        b[344] = self.anacap;
        put_u32(&mut b, 348, self.anagrpmax);
        put_u32(&mut b, 352, self.nanagrpid);
        put_u16(&mut b, 320, self.kas);
        b[512] = self.sqes;
        b[513] = self.cqes;
        put_u16(&mut b, 514, self.maxcmd);
        put_u32(&mut b, 516, self.nn);
        put_u16(&mut b, 520, self.oncs);
        put_u16(&mut b, 522, self.fuses);
        put_u16(&mut b, 534, self.acwu);
        b[525] = self.vwc;
        put_u16(&mut b, 526, self.awun);
        put_u16(&mut b, 528, self.awupf);
        put_u32(&mut b, 536, self.sgls);
        put_u32(&mut b, 540, self.mnan);
        put_str(&mut b, 768, 256, &self.subnqn, true);
        put_u32(&mut b, 1792, self.ioccsz);
        put_u32(&mut b, 1796, self.iorcsz);
        put_u16(&mut b, 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
        b
    }

    /// Parses 4096 bytes.
    pub fn parse(b: &[u8]) -> Result<IdentifyController, WireError> {
        need("identify controller", b, IDENTIFY_SIZE)?;
        let trim = |s: String| s.trim_end_matches(' ').to_string();
        Ok(IdentifyController {
            vid: u16_at(b, 0),
            ssvid: u16_at(b, 2),
            sn: trim(str_at(b, 4, 20)),
            mn: trim(str_at(b, 24, 40)),
            fr: trim(str_at(b, 64, 8)),
            rab: b[72],
            ieee: [b[73], b[74], b[75]],
            cmic: b[76],
            mdts: b[77],
            cntlid: u16_at(b, 78),
            ver: u32_at(b, 80),
            oaes: u32_at(b, 92),
            ctratt: u32_at(b, 96),
            crdt: [u16_at(b, 128), u16_at(b, 130), u16_at(b, 132)],
            cntrltype: b[111],
            oacs: u16_at(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            npss: b[263],
            anatt: b[343],
            anacap: b[344],
            anagrpmax: u32_at(b, 348),
            nanagrpid: u32_at(b, 352),
            kas: u16_at(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: u16_at(b, 514),
            nn: u32_at(b, 516),
            oncs: u16_at(b, 520),
            fuses: u16_at(b, 522),
            acwu: u16_at(b, 534),
            vwc: b[525],
            awun: u16_at(b, 526),
            awupf: u16_at(b, 528),
            sgls: u32_at(b, 536),
            mnan: u32_at(b, 540),
            subnqn: str_at(b, 768, 256),
            ioccsz: u32_at(b, 1792),
            iorcsz: u32_at(b, 1796),
            icdoff: u16_at(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
        })
    }
}

/// Identify Namespace: the fields a block target fills in (one LBA format).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    /// Namespace capacity.
    pub ncap: u64,
    /// Namespace utilization.
    pub nuse: u64,
    /// Namespace features.
    pub nsfeat: u8,
    /// Number of LBA formats (0-based).
    pub nlbaf: u8,
    /// Formatted LBA size (index into lbaf).
    pub flbas: u8,
    /// Data protection capabilities.
    pub dpc: u8,
    /// Namespace multi-path and sharing capabilities.
    pub nmic: u8,
    /// Reservation capabilities.
    pub rescap: u8,
    /// Namespace atomic write unit normal (0-based).
    pub nawun: u16,
    /// Namespace optimal I/O boundary (blocks).
    pub noiob: u16,
    /// ANA group id.
    pub anagrpid: u32,
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// LBA data size, log2 bytes, of format 0.
    pub lbads: u8,
    /// Metadata size of format 0.
    pub ms: u16,
}

impl IdentifyNamespace {
    /// Encodes into 4096 bytes.
    pub fn encode(&self) -> [u8; IDENTIFY_SIZE] {
        let mut b = [0u8; IDENTIFY_SIZE];
        put_u64(&mut b, 0, self.nsze);
        put_u64(&mut b, 8, self.ncap);
        put_u64(&mut b, 16, self.nuse);
        b[24] = self.nsfeat;
        b[25] = self.nlbaf;
        b[26] = self.flbas;
        b[28] = self.dpc;
        b[30] = self.nmic;
        b[31] = self.rescap;
        put_u16(&mut b, 40, self.nawun);
        put_u16(&mut b, 70, self.noiob);
        put_u32(&mut b, 92, self.anagrpid);
        b[104..120].copy_from_slice(&self.nguid);
        b[120..128].copy_from_slice(&self.eui64);
        put_u16(&mut b, 128, self.ms);
        b[130] = self.lbads;
        b
    }

    /// Parses 4096 bytes.
    pub fn parse(b: &[u8]) -> Result<IdentifyNamespace, WireError> {
        need("identify namespace", b, IDENTIFY_SIZE)?;
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[104..120]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&b[120..128]);
        Ok(IdentifyNamespace {
            nsze: u64_at(b, 0),
            ncap: u64_at(b, 8),
            nuse: u64_at(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            dpc: b[28],
            nmic: b[30],
            rescap: b[31],
            nawun: u16_at(b, 40),
            noiob: u16_at(b, 70),
            anagrpid: u32_at(b, 92),
            nguid,
            eui64,
            ms: u16_at(b, 128),
            lbads: b[130],
        })
    }

    /// Logical block size in bytes (of the formatted LBA format 0).
    pub fn block_size(&self) -> u64 {
        1u64.checked_shl(self.lbads as u32).unwrap_or(0)
    }
}

/// Namespace identification descriptor types (NIDT).
pub mod nidt {
    /// IEEE EUI-64 (8 bytes).
    pub const EUI64: u8 = 1;
    /// NGUID (16 bytes).
    pub const NGUID: u8 = 2;
    /// UUID (16 bytes).
    pub const UUID: u8 = 3;
    /// Command set identifier (1 byte).
    pub const CSI: u8 = 4;
}

/// A namespace identification descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsDescriptor {
    /// Descriptor type.
    pub nidt: u8,
    /// Identifier bytes (length per type).
    pub nid: Vec<u8>,
}

/// Encodes a namespace identification descriptor list, zero-padded to 4 KiB.
pub fn encode_ns_descriptors(list: &[NsDescriptor]) -> [u8; IDENTIFY_SIZE] {
    let mut b = [0u8; IDENTIFY_SIZE];
    let mut o = 0;
    for d in list {
        let n = d.nid.len();
        if o + 4 + n > IDENTIFY_SIZE - 4 {
            break;
        }
        b[o] = d.nidt;
        b[o + 1] = n as u8;
        b[o + 4..o + 4 + n].copy_from_slice(&d.nid);
        o += 4 + n;
    }
    b
}

/// Parses a namespace identification descriptor list (stops at NIDT 0).
pub fn parse_ns_descriptors(b: &[u8]) -> Vec<NsDescriptor> {
    let mut out = Vec::new();
    let mut o = 0;
    while o + 4 <= b.len() {
        let (t, n) = (b[o], b[o + 1] as usize);
        if t == 0 || o + 4 + n > b.len() {
            break;
        }
        out.push(NsDescriptor {
            nidt: t,
            nid: b[o + 4..o + 4 + n].to_vec(),
        });
        o += 4 + n;
    }
    out
}

/// Encodes an active namespace id list: the ids greater than `after`, ascending,
/// at most 1024, zero-terminated.
pub fn encode_ns_list(ids: impl IntoIterator<Item = u32>, after: u32) -> [u8; IDENTIFY_SIZE] {
    let mut b = [0u8; IDENTIFY_SIZE];
    let mut v: Vec<u32> = ids.into_iter().filter(|&i| i > after).collect();
    v.sort_unstable();
    v.dedup();
    for (i, id) in v.into_iter().take(IDENTIFY_SIZE / 4).enumerate() {
        put_u32(&mut b, i * 4, id);
    }
    b
}

/// Parses an active namespace id list (stops at the first 0).
pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&i| i != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> IdentifyController {
        IdentifyController {
            vid: 0x1b36,
            ssvid: 0x1b36,
            sn: "0123456789abcdef".into(),
            mn: "nvmf-target".into(),
            fr: "0.1.0".into(),
            rab: 6,
            ieee: [1, 2, 3],
            cmic: 0x0B,
            mdts: 5,
            cntlid: 7,
            ver: 0x10300,
            oaes: oaes::NS_ATTR,
            ctratt: 0,
            crdt: [50, 0, 0],
            cntrltype: cntrltype::IO,
            oacs: 0,
            acl: 3,
            aerl: 3,
            frmw: 3,
            lpa: 7,
            elpe: 63,
            npss: 0,
            anatt: 10,
            anacap: 0x1F,
            anagrpmax: 128,
            nanagrpid: 128,
            kas: 10,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 1024,
            oncs: oncs::DSM | oncs::WRITE_ZEROES,
            fuses: 0,
            acwu: 0,
            vwc: 1,
            awun: 0,
            awupf: 0,
            sgls: sgls::SUPPORTED | sgls::KEYED | sgls::OFFSET,
            mnan: 1024,
            subnqn: "nqn.2026-11.io.example:disk1".into(),
            ioccsz: 260,
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
        }
    }

    #[test]
    fn controller_offsets() {
        let c = sample();
        let b = c.encode();
        assert_eq!(&b[4..20], b"0123456789abcdef");
        assert_eq!(&b[20..24], b"    ");
        assert_eq!(b[76], 0x0B);
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[7, 0]);
        assert_eq!(&b[80..84], &0x10300u32.to_le_bytes());
        assert_eq!(&b[92..96], &0x100u32.to_le_bytes());
        assert_eq!(&b[128..130], &[50, 0], "CRDT1 at bytes 129:128");
        assert_eq!(b[111], 1);
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(b[512], 0x66);
        assert_eq!(b[513], 0x44);
        assert_eq!(&b[514..516], &[128, 0]);
        assert_eq!(&b[520..522], &[0x0C, 0]);
        assert_eq!(b[525], 1);
        assert_eq!(&b[536..540], &0x100005u32.to_le_bytes());
        assert_eq!(&b[768..768 + 4], b"nqn.");
        assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
        assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
        assert_eq!(b[1803], 1);
        assert_eq!(IdentifyController::parse(&b).unwrap(), c);
    }

    #[test]
    fn namespace_offsets() {
        let n = IdentifyNamespace {
            nsze: 262144,
            ncap: 262144,
            nuse: 262144,
            nlbaf: 0,
            lbads: 12,
            nguid: [9; 16],
            eui64: [8; 8],
            ..Default::default()
        };
        let b = n.encode();
        assert_eq!(&b[0..8], &262144u64.to_le_bytes());
        assert_eq!(b[130], 12);
        assert_eq!(&b[104..120], &[9; 16]);
        assert_eq!(&b[120..128], &[8; 8]);
        assert_eq!(IdentifyNamespace::parse(&b).unwrap(), n);
        assert_eq!(n.block_size(), 4096);
    }

    #[test]
    fn lists() {
        let b = encode_ns_list([3, 1, 2, 10], 1);
        assert_eq!(parse_ns_list(&b), vec![2, 3, 10]);
        let d = vec![
            NsDescriptor {
                nidt: nidt::NGUID,
                nid: vec![1; 16],
            },
            NsDescriptor {
                nidt: nidt::CSI,
                nid: vec![0],
            },
        ];
        let b = encode_ns_descriptors(&d);
        assert_eq!(&b[0..4], &[2, 16, 0, 0]);
        assert_eq!(&b[20..24], &[4, 1, 0, 0]);
        assert_eq!(parse_ns_descriptors(&b), d);
    }

    proptest! {
        #[test]
        fn ns_roundtrip(nsze: u64, ncap: u64, lbads in 9u8..16, nguid: [u8; 16], eui64: [u8; 8]) {
            let n = IdentifyNamespace { nsze, ncap, nuse: ncap, lbads, nguid, eui64, ..Default::default() };
            prop_assert_eq!(IdentifyNamespace::parse(&n.encode()).unwrap(), n);
        }
        #[test]
        fn ctrl_roundtrip(cntlid: u16, maxcmd: u16, mdts: u8, ioccsz: u32, nqn in "[a-z0-9.:]{1,200}") {
            let c = IdentifyController { cntlid, maxcmd, mdts, ioccsz, subnqn: nqn, ..sample() };
            prop_assert_eq!(IdentifyController::parse(&c.encode()).unwrap(), c);
        }
        #[test]
        fn desc_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_ns_descriptors(&b);
            let _ = parse_ns_list(&b);
            let _ = IdentifyController::parse(&b);
        }
    }
}
