//! Reservations (NVMe Base, "Reservations"): the fields of Reservation
//! Register, Acquire, Release and Report, the report's data structures, the
//! Reservation Notification log page, and RESCAP.

use crate::bytes::*;
use crate::command::Command;
use crate::opcode;
use crate::{need, WireError};

/// A reservation type (RTYPE). Values outside 1..=6 are kept raw by the
/// command parsers, so the caller can answer Invalid Field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResvType {
    /// Write Exclusive.
    WriteExclusive = 1,
    /// Exclusive Access.
    ExclusiveAccess = 2,
    /// Write Exclusive - Registrants Only.
    WriteExclusiveRegOnly = 3,
    /// Exclusive Access - Registrants Only.
    ExclusiveAccessRegOnly = 4,
    /// Write Exclusive - All Registrants.
    WriteExclusiveAllRegs = 5,
    /// Exclusive Access - All Registrants.
    ExclusiveAccessAllRegs = 6,
}

impl ResvType {
    /// Every type, by value.
    pub const ALL: [ResvType; 6] = [
        ResvType::WriteExclusive,
        ResvType::ExclusiveAccess,
        ResvType::WriteExclusiveRegOnly,
        ResvType::ExclusiveAccessRegOnly,
        ResvType::WriteExclusiveAllRegs,
        ResvType::ExclusiveAccessAllRegs,
    ];

    /// The type of an RTYPE value, if it names one.
    pub fn from_u8(v: u8) -> Option<ResvType> {
        Self::ALL.get((v as usize).wrapping_sub(1)).copied()
    }

    /// Whether every registrant is a reservation holder (All Registrants).
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveAllRegs | ResvType::ExclusiveAccessAllRegs
        )
    }

    /// Whether registrants (not only the holder) may write (and read).
    pub fn registrants_allowed(self) -> bool {
        !matches!(self, ResvType::WriteExclusive | ResvType::ExclusiveAccess)
    }

    /// Whether reads by those not allowed are refused too (Exclusive Access).
    pub fn excludes_reads(self) -> bool {
        matches!(
            self,
            ResvType::ExclusiveAccess
                | ResvType::ExclusiveAccessRegOnly
                | ResvType::ExclusiveAccessAllRegs
        )
    }
}

/// Reservation Register action (RREGA).
pub mod rrega {
    /// Register a key.
    pub const REGISTER: u8 = 0;
    /// Unregister.
    pub const UNREGISTER: u8 = 1;
    /// Replace the key.
    pub const REPLACE: u8 = 2;
}

/// Reservation Acquire action (RACQA).
pub mod racqa {
    /// Acquire.
    pub const ACQUIRE: u8 = 0;
    /// Preempt.
    pub const PREEMPT: u8 = 1;
    /// Preempt and abort.
    pub const PREEMPT_ABORT: u8 = 2;
}

/// Reservation Release action (RRELA).
pub mod rrela {
    /// Release.
    pub const RELEASE: u8 = 0;
    /// Clear.
    pub const CLEAR: u8 = 1;
}

/// Change Persist Through Power Loss State (CPTPL) of a Register.
pub mod cptpl {
    /// No change.
    pub const NO_CHANGE: u8 = 0;
    /// Reserved.
    pub const RESERVED: u8 = 1;
    /// Clear PTPL (state is lost at power loss).
    pub const CLEAR: u8 = 2;
    /// Set PTPL (state persists through power loss).
    pub const SET: u8 = 3;
}

/// The data of Register (CRKEY, NRKEY) and Acquire (CRKEY, PRKEY).
pub const KEYS_DATA_SIZE: usize = 16;
/// The data of Release (CRKEY).
pub const RELEASE_DATA_SIZE: usize = 8;

/// The fields of a reservation command that are common to the three that
/// change state: the action (bits 2:0), IEKEY (bit 3), RTYPE (bits 15:8,
/// Acquire and Release) and CPTPL (bits 31:30, Register) of CDW10, and the
/// keys from its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResvCommand {
    /// The opcode: Register, Acquire or Release.
    pub opcode: u8,
    /// RREGA, RACQA or RRELA.
    pub action: u8,
    /// Ignore Existing Key.
    pub iekey: bool,
    /// RTYPE (raw; 0 for Register).
    pub rtype: u8,
    /// CPTPL (Register only).
    pub cptpl: u8,
    /// Current Reservation Key.
    pub crkey: u64,
    /// New key (Register) or the key to preempt (Acquire); 0 for Release.
    pub key2: u64,
}

impl ResvCommand {
    /// The data length the command's opcode carries.
    pub fn data_len(opcode: u8) -> usize {
        if opcode == opcode::io::RESV_RELEASE {
            RELEASE_DATA_SIZE
        } else {
            KEYS_DATA_SIZE
        }
    }

    /// Reads the fields of `cmd` and its `data`.
    pub fn parse(cmd: &Command, data: &[u8]) -> Result<ResvCommand, WireError> {
        let opc = cmd.opcode();
        need("reservation data", data, Self::data_len(opc))?;
        let cdw10 = cmd.cdw(10);
        let takes_type = opc != opcode::io::RESV_REGISTER;
        Ok(ResvCommand {
            opcode: opc,
            action: (cdw10 & 7) as u8,
            iekey: cdw10 & 8 != 0,
            rtype: if takes_type { (cdw10 >> 8) as u8 } else { 0 },
            cptpl: if takes_type { 0 } else { (cdw10 >> 30) as u8 },
            crkey: u64_at(data, 0),
            key2: if opc == opcode::io::RESV_RELEASE {
                0
            } else {
                u64_at(data, 8)
            },
        })
    }

    /// Builds the command and its data (an initiator's view).
    pub fn to_command(&self, cid: u16, nsid: u32) -> (Command, Vec<u8>) {
        let mut c = Command::new(self.opcode, cid);
        c.set_nsid(nsid);
        let mut cdw10 = (self.action as u32 & 7) | (self.iekey as u32) << 3;
        if self.opcode == opcode::io::RESV_REGISTER {
            cdw10 |= (self.cptpl as u32 & 3) << 30;
        } else {
            cdw10 |= (self.rtype as u32) << 8;
        }
        c.set_cdw(10, cdw10);
        let mut d = vec![0u8; Self::data_len(self.opcode)];
        put_u64(&mut d, 0, self.crkey);
        if d.len() == KEYS_DATA_SIZE {
            put_u64(&mut d, 8, self.key2);
        }
        (c, d)
    }
}

/// Reservation Report fields: the data size (NUMD, 0-based dwords in CDW10)
/// and the Extended Data Structure flag (CDW11 bit 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportCommand {
    /// Bytes of data the host takes.
    pub len: u64,
    /// The extended data structure (128-bit host identifiers).
    pub eds: bool,
}

impl ReportCommand {
    /// Reads the fields of `cmd`.
    pub fn from_command(cmd: &Command) -> ReportCommand {
        ReportCommand {
            len: (cmd.cdw(10) as u64 + 1) * 4,
            eds: cmd.cdw(11) & 1 != 0,
        }
    }
}

/// Size of the report's header (Reservation Status data structure).
pub const REPORT_HEADER_SIZE: usize = 24;
/// Size of the extended report's header.
pub const REPORT_EXT_HEADER_SIZE: usize = 64;
/// Size of one Registered Controller data structure.
pub const REGCTL_SIZE: usize = 24;
/// Size of one Registered Controller extended data structure.
pub const REGCTL_EXT_SIZE: usize = 64;

/// The reservation status a report carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// Generation.
    pub gen: u32,
    /// The reservation's type (0: none).
    pub rtype: u8,
    /// Persist Through Power Loss State.
    pub ptpls: bool,
    /// The registered controllers.
    pub regctls: Vec<RegisteredController>,
}

/// One Registered Controller (data structure or extended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegisteredController {
    /// Controller id (0xFFFF: the host has no controller it can name).
    pub cntlid: u16,
    /// Holds the reservation (RCSTS bit 0).
    pub holds: bool,
    /// Host identifier (the extended structure's 128 bits; the other takes
    /// the first 64).
    pub hostid: [u8; 16],
    /// Reservation key.
    pub rkey: u64,
}

impl Report {
    /// Encodes the report as the host reads it: the header and as many
    /// registered controller structures as `len` bytes hold (REGCTL counts
    /// them all).
    pub fn encode(&self, eds: bool, len: usize) -> Vec<u8> {
        let (head, each) = if eds {
            (REPORT_EXT_HEADER_SIZE, REGCTL_EXT_SIZE)
        } else {
            (REPORT_HEADER_SIZE, REGCTL_SIZE)
        };
        let mut b = vec![0u8; head + each * self.regctls.len()];
        put_u32(&mut b, 0, self.gen);
        b[4] = self.rtype;
        put_u16(&mut b, 5, self.regctls.len().min(u16::MAX as usize) as u16);
        b[9] = self.ptpls as u8;
        for (i, r) in self.regctls.iter().enumerate() {
            let o = head + i * each;
            put_u16(&mut b, o, r.cntlid);
            b[o + 2] = r.holds as u8;
            if eds {
                put_u64(&mut b, o + 8, r.rkey);
                b[o + 16..o + 32].copy_from_slice(&r.hostid);
            } else {
                b[o + 8..o + 16].copy_from_slice(&r.hostid[..8]);
                put_u64(&mut b, o + 16, r.rkey);
            }
        }
        b.truncate(len);
        b
    }

    /// Parses a report (as many structures as `b` holds of those REGCTL names).
    pub fn parse(b: &[u8], eds: bool) -> Result<Report, WireError> {
        let (head, each) = if eds {
            (REPORT_EXT_HEADER_SIZE, REGCTL_EXT_SIZE)
        } else {
            (REPORT_HEADER_SIZE, REGCTL_SIZE)
        };
        need("reservation report", b, head)?;
        let n = u16_at(b, 5) as usize;
        let mut regctls = Vec::new();
        for i in 0..n {
            let o = head + i * each;
            if b.len() < o + each {
                break;
            }
            let mut hostid = [0u8; 16];
            let rkey = if eds {
                hostid.copy_from_slice(&b[o + 16..o + 32]);
                u64_at(b, o + 8)
            } else {
                hostid[..8].copy_from_slice(&b[o + 8..o + 16]);
                u64_at(b, o + 16)
            };
            regctls.push(RegisteredController {
                cntlid: u16_at(b, o),
                holds: b[o + 2] & 1 != 0,
                hostid,
                rkey,
            });
        }
        Ok(Report {
            gen: u32_at(b, 0),
            rtype: b[4],
            ptpls: b[9] & 1 != 0,
            regctls,
        })
    }
}

/// Reservation Notification log page types.
pub mod notice {
    /// Empty log page.
    pub const EMPTY: u8 = 0;
    /// Registration preempted.
    pub const REGISTRATION_PREEMPTED: u8 = 1;
    /// Reservation released.
    pub const RESERVATION_RELEASED: u8 = 2;
    /// Reservation preempted.
    pub const RESERVATION_PREEMPTED: u8 = 3;
}

/// Size of the Reservation Notification log page.
pub const NOTIFICATION_LOG_SIZE: usize = 64;

/// One Reservation Notification log page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Notification {
    /// Log Page Count (0: empty; wraps from u64::MAX to 1).
    pub count: u64,
    /// Its type ([`notice`]).
    pub kind: u8,
    /// Number of Available Log Pages after this one (saturating at 255).
    pub available: u8,
    /// The namespace.
    pub nsid: u32,
}

impl Notification {
    /// Encodes the log page.
    pub fn encode(&self) -> [u8; NOTIFICATION_LOG_SIZE] {
        let mut b = [0u8; NOTIFICATION_LOG_SIZE];
        put_u64(&mut b, 0, self.count);
        b[8] = self.kind;
        b[9] = self.available;
        put_u32(&mut b, 12, self.nsid);
        b
    }

    /// Parses the log page.
    pub fn parse(b: &[u8]) -> Result<Notification, WireError> {
        need("reservation notification", b, NOTIFICATION_LOG_SIZE)?;
        Ok(Notification {
            count: u64_at(b, 0),
            kind: b[8],
            available: b[9],
            nsid: u32_at(b, 12),
        })
    }
}

/// Reservation Notification Mask feature (0x82) bits: masked notices are
/// not logged.
pub mod mask {
    /// Mask Registration Preempted notices.
    pub const REGPRE: u32 = 1 << 1;
    /// Mask Reservation Released notices.
    pub const RESREL: u32 = 1 << 2;
    /// Mask Reservation Preempted notices.
    pub const RESPRE: u32 = 1 << 3;
    /// Every mask bit.
    pub const ALL: u32 = REGPRE | RESREL | RESPRE;

    /// The mask bit of a notice type.
    pub fn of(kind: u8) -> u32 {
        1u32.checked_shl(kind as u32).unwrap_or(0) & ALL
    }
}

/// Reservation Capabilities (Identify Namespace RESCAP) bits.
pub mod rescap {
    /// Persist Through Power Loss.
    pub const PTPL: u8 = 1 << 0;
    /// Every reservation type (bits 1..=6).
    pub const ALL_TYPES: u8 = 0x7E;
    /// Ignore Existing Key: the behaviour of NVMe 1.3 and later.
    pub const IEKEY13: u8 = 1 << 7;
}

/// The Asynchronous Event type of I/O command specific status, and its
/// information value for a Reservation Notification log page available.
pub mod aen {
    /// I/O command specific status.
    pub const TYPE_IO_SPECIFIC: u8 = 6;
    /// Reservation log page available.
    pub const INFO_RESV_LOG: u8 = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn types() {
        assert_eq!(ResvType::from_u8(0), None);
        assert_eq!(ResvType::from_u8(7), None);
        for t in ResvType::ALL {
            assert_eq!(ResvType::from_u8(t as u8), Some(t));
        }
        assert!(ResvType::WriteExclusiveAllRegs.all_registrants());
        assert!(!ResvType::WriteExclusiveRegOnly.all_registrants());
        assert!(!ResvType::ExclusiveAccess.registrants_allowed());
        assert!(ResvType::ExclusiveAccessRegOnly.excludes_reads());
        assert!(!ResvType::WriteExclusiveAllRegs.excludes_reads());
    }

    #[test]
    fn register_fields_as_nvme_cli_sends_them() {
        // nvme resv-register --rrega=2 --iekey --cptpl=3 --crkey=5 --nrkey=6
        let mut c = Command::new(opcode::io::RESV_REGISTER, 1);
        c.set_cdw(10, 2 | 8 | 3 << 30);
        let mut d = [0u8; 16];
        d[0] = 5;
        d[8] = 6;
        let r = ResvCommand::parse(&c, &d).unwrap();
        assert_eq!(
            r,
            ResvCommand {
                opcode: opcode::io::RESV_REGISTER,
                action: 2,
                iekey: true,
                rtype: 0,
                cptpl: 3,
                crkey: 5,
                key2: 6
            }
        );
        let (c2, d2) = r.to_command(1, 0);
        assert_eq!(c2.cdw(10), c.cdw(10));
        assert_eq!(d2, d);
        assert!(ResvCommand::parse(&c, &d[..15]).is_err());
    }

    #[test]
    fn acquire_and_release_fields() {
        let mut c = Command::new(opcode::io::RESV_ACQUIRE, 1);
        c.set_cdw(10, 1 | 4 << 8);
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&0xAAu64.to_le_bytes());
        d[8..16].copy_from_slice(&0xBBu64.to_le_bytes());
        let r = ResvCommand::parse(&c, &d).unwrap();
        assert_eq!((r.action, r.rtype, r.crkey, r.key2), (1, 4, 0xAA, 0xBB));
        let mut c = Command::new(opcode::io::RESV_RELEASE, 1);
        c.set_cdw(10, 1 | 8 | 2 << 8);
        let r = ResvCommand::parse(&c, &d[..8]).unwrap();
        assert_eq!((r.action, r.iekey, r.rtype, r.key2), (1, true, 2, 0));
        let (c2, d2) = r.to_command(1, 1);
        assert_eq!(c2.cdw(10), c.cdw(10));
        assert_eq!(d2.len(), 8);
    }

    #[test]
    fn report_layouts() {
        let rep = Report {
            gen: 7,
            rtype: 5,
            ptpls: true,
            regctls: vec![
                RegisteredController {
                    cntlid: 3,
                    holds: true,
                    hostid: [0x11; 16],
                    rkey: 0xDEAD,
                },
                RegisteredController {
                    cntlid: 0xFFFF,
                    holds: false,
                    hostid: [0x22; 16],
                    rkey: 9,
                },
            ],
        };
        let b = rep.encode(false, 4096);
        assert_eq!(b.len(), 24 + 48);
        assert_eq!(u16_at(&b, 5), 2);
        assert_eq!(b[24 + 2], 1);
        assert_eq!(&b[24 + 8..24 + 16], &[0x11; 8]);
        assert_eq!(u64_at(&b, 24 + 16), 0xDEAD);
        let mut short = Report::parse(&b, false).unwrap();
        for r in &mut short.regctls {
            let first = r.hostid[0];
            r.hostid[8..].fill(first);
        }
        assert_eq!(short, rep);
        let e = rep.encode(true, 4096);
        assert_eq!(e.len(), 64 + 128);
        assert_eq!(u64_at(&e, 64 + 8), 0xDEAD);
        assert_eq!(&e[64 + 16..64 + 32], &[0x11; 16]);
        assert_eq!(Report::parse(&e, true).unwrap(), rep);
        // A short buffer: the header still counts every registrant.
        let t = rep.encode(false, 30);
        assert_eq!(t.len(), 30);
        assert_eq!(u16_at(&t, 5), 2);
        assert!(Report::parse(&t, false).unwrap().regctls.is_empty());
    }

    #[test]
    fn notification_page() {
        let n = Notification {
            count: 3,
            kind: notice::RESERVATION_RELEASED,
            available: 1,
            nsid: 9,
        };
        let b = n.encode();
        assert_eq!(b[8], 2);
        assert_eq!(Notification::parse(&b).unwrap(), n);
        assert_eq!(mask::of(notice::REGISTRATION_PREEMPTED), mask::REGPRE);
        assert_eq!(mask::of(notice::EMPTY), 0);
        assert_eq!(mask::of(200), 0);
    }

    proptest! {
        #[test]
        fn parsers_take_anything(cdw10: u32, cdw11: u32, opc in prop::sample::select(vec![0x0Du8, 0x11, 0x15]), data in prop::collection::vec(any::<u8>(), 0..80)) {
            let mut c = Command::new(opc, 1);
            c.set_cdw(10, cdw10);
            c.set_cdw(11, cdw11);
            let _ = ResvCommand::parse(&c, &data);
            let _ = Report::parse(&data, cdw11 & 1 != 0);
            let _ = Notification::parse(&data);
            let r = ReportCommand::from_command(&c);
            prop_assert!(r.len >= 4);
        }
    }
}
