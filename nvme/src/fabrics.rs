//! Fabrics commands: Connect (command and 1024-byte data), Property Get/Set,
//! and the controller property (register) layouts.

use crate::bytes::*;
use crate::command::Command;
use crate::opcode;
use crate::{need, WireError};

/// Size of the Connect command data.
pub const CONNECT_DATA_SIZE: usize = 1024;
/// Lowest controller id a subsystem gives out.
pub const CNTLID_MIN: u16 = 1;
/// Highest controller id a subsystem gives out (0xFFF0..=0xFFFF are
/// reserved: 0xFFFF asks for a dynamic controller in a Connect).
pub const CNTLID_MAX: u16 = 0xFFEF;
/// Size of an NQN field.
pub const NQN_SIZE: usize = 256;

/// Byte offset of `subsysnqn` in the connect data (for IATTR reporting).
pub const CONNECT_DATA_SUBNQN_OFFSET: u16 = 256;
/// Byte offset of `hostnqn` in the connect data.
pub const CONNECT_DATA_HOSTNQN_OFFSET: u16 = 512;
/// Byte offset of `cntlid` in the connect data.
pub const CONNECT_DATA_CNTLID_OFFSET: u16 = 16;
/// Byte offset of `hostid` in the connect data.
pub const CONNECT_DATA_HOSTID_OFFSET: u16 = 0;

/// The Connect command's own fields (SQE bytes 40..52).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectCommand {
    /// Record format (must be 0).
    pub recfmt: u16,
    /// Queue identifier.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Connect attributes (bit 2: disable SQ flow control).
    pub cattr: u8,
    /// Keep-alive timeout in milliseconds (admin queue).
    pub kato: u32,
}

impl ConnectCommand {
    /// Reads the Connect fields from a command.
    pub fn from_command(c: &Command) -> ConnectCommand {
        let r = &c.raw;
        ConnectCommand {
            recfmt: u16_at(r, 40),
            qid: u16_at(r, 42),
            sqsize: u16_at(r, 44),
            cattr: r[46],
            kato: u32_at(r, 48),
        }
    }
    /// Builds a Connect command (fctype 1) with these fields.
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(opcode::FABRICS, cid);
        c.raw[4] = opcode::fctype::CONNECT;
        put_u16(&mut c.raw, 40, self.recfmt);
        put_u16(&mut c.raw, 42, self.qid);
        put_u16(&mut c.raw, 44, self.sqsize);
        c.raw[46] = self.cattr;
        put_u32(&mut c.raw, 48, self.kato);
        c
    }
    /// Whether the host disabled SQ flow control.
    pub fn sq_flow_control_disabled(&self) -> bool {
        self.cattr & (1 << 2) != 0
    }
}

/// Connect command data (1024 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Controller id (0xFFFF on the admin queue: dynamic controller model).
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subsysnqn: String,
    /// Host NQN.
    pub hostnqn: String,
}

impl ConnectData {
    /// Parses the 1024-byte connect data.
    pub fn parse(b: &[u8]) -> Result<ConnectData, WireError> {
        need("connect data", b, CONNECT_DATA_SIZE)?;
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        Ok(ConnectData {
            hostid,
            cntlid: u16_at(b, 16),
            subsysnqn: str_at(b, 256, NQN_SIZE),
            hostnqn: str_at(b, 512, NQN_SIZE),
        })
    }
    /// Encodes into 1024 bytes (NQNs NUL-terminated, truncated to 255 bytes).
    pub fn encode(&self) -> [u8; CONNECT_DATA_SIZE] {
        let mut b = [0u8; CONNECT_DATA_SIZE];
        b[0..16].copy_from_slice(&self.hostid);
        put_u16(&mut b, 16, self.cntlid);
        put_str(&mut b, 256, NQN_SIZE, &self.subsysnqn, true);
        put_str(&mut b, 512, NQN_SIZE, &self.hostnqn, true);
        b
    }
}

/// Property Get / Property Set fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyCommand {
    /// Size: `false` = 4 bytes, `true` = 8 bytes (attrib bit 0).
    pub eight_bytes: bool,
    /// Property offset.
    pub offset: u32,
    /// Value (Property Set only).
    pub value: u64,
}

impl PropertyCommand {
    /// Reads the property fields from a command.
    pub fn from_command(c: &Command) -> PropertyCommand {
        PropertyCommand {
            eight_bytes: c.raw[40] & 1 != 0,
            offset: u32_at(&c.raw, 44),
            value: u64_at(&c.raw, 48),
        }
    }
    /// Builds a Property Get (`set == false`) or Property Set command.
    pub fn to_command(&self, cid: u16, set: bool) -> Command {
        let mut c = Command::new(opcode::FABRICS, cid);
        c.raw[4] = if set {
            opcode::fctype::PROPERTY_SET
        } else {
            opcode::fctype::PROPERTY_GET
        };
        c.raw[40] = self.eight_bytes as u8;
        put_u32(&mut c.raw, 44, self.offset);
        put_u64(&mut c.raw, 48, self.value);
        c
    }
}

/// Controller property offsets.
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
    /// Controller Ready Timeouts.
    pub const CRTO: u32 = 0x68;
}

/// CC register fields.
pub mod cc {
    /// Enable.
    pub const EN: u32 = 1;
    /// Shutdown notification field shift (bits 15:14).
    pub const SHN_SHIFT: u32 = 14;
    /// Shutdown notification mask.
    pub const SHN_MASK: u32 = 3 << SHN_SHIFT;
    /// I/O command set selected (bits 6:4).
    pub const CSS_SHIFT: u32 = 4;
    /// Memory page size (bits 10:7).
    pub const MPS_SHIFT: u32 = 7;
    /// Arbitration mechanism (bits 13:11).
    pub const AMS_SHIFT: u32 = 11;
    /// I/O SQ entry size (bits 19:16).
    pub const IOSQES_SHIFT: u32 = 16;
    /// I/O CQ entry size (bits 23:20).
    pub const IOCQES_SHIFT: u32 = 20;
}

/// CSTS register fields.
pub mod csts {
    /// Ready.
    pub const RDY: u32 = 1;
    /// Controller fatal status.
    pub const CFS: u32 = 1 << 1;
    /// Shutdown status: processing occurring.
    pub const SHST_OCCURRING: u32 = 1 << 2;
    /// Shutdown status: complete.
    pub const SHST_COMPLETE: u32 = 2 << 2;
    /// Shutdown status mask.
    pub const SHST_MASK: u32 = 3 << 2;
}

/// Parses a textual UUID (`8-4-4-4-12` hex digits).
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.trim().chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || s.trim().len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

/// Formats 16 bytes as a UUID.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_identifier_uuid_round_trip() {
        let s = "48ffc9b4-77a6-42da-9477-ef5ebf9e6038";
        let u = parse_uuid(s).unwrap();
        assert_eq!(u[0], 0x48);
        assert_eq!(format_uuid(&u), s);
        assert_eq!(parse_uuid("48ffc9b4"), None);
        assert_eq!(parse_uuid("48ffc9b4-77a6-42da-9477-ef5ebf9e60zz"), None);
    }
    use proptest::prelude::*;

    #[test]
    fn connect_layout() {
        let cc = ConnectCommand {
            recfmt: 0,
            qid: 2,
            sqsize: 127,
            cattr: 4,
            kato: 5000,
        };
        let c = cc.to_command(9);
        assert_eq!(c.opcode(), 0x7F);
        assert_eq!(c.fctype(), 1);
        assert_eq!(&c.raw[42..44], &[2, 0]);
        assert_eq!(&c.raw[44..46], &[127, 0]);
        assert_eq!(c.raw[46], 4);
        assert_eq!(&c.raw[48..52], &5000u32.to_le_bytes());
        assert_eq!(ConnectCommand::from_command(&c), cc);
        assert!(cc.sq_flow_control_disabled());

        let d = ConnectData {
            hostid: [7; 16],
            cntlid: 0xFFFF,
            subsysnqn: "nqn.2026-11.io.example:disk1".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1234".into(),
        };
        let b = d.encode();
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[256..256 + 28], d.subsysnqn.as_bytes());
        assert_eq!(b[256 + 28], 0);
        assert_eq!(&b[512..512 + 4], b"nqn.");
        assert_eq!(ConnectData::parse(&b).unwrap(), d);
        assert!(ConnectData::parse(&b[..1023]).is_err());
    }

    #[test]
    fn property_layout() {
        let p = PropertyCommand {
            eight_bytes: true,
            offset: super::prop::CAP,
            value: 0,
        };
        let c = p.to_command(1, false);
        assert_eq!(c.fctype(), 4);
        assert_eq!(c.raw[40], 1);
        assert_eq!(PropertyCommand::from_command(&c), p);
        let s = PropertyCommand {
            eight_bytes: false,
            offset: super::prop::CC,
            value: 0x460001,
        };
        let c = s.to_command(2, true);
        assert_eq!(c.fctype(), 0);
        assert_eq!(&c.raw[44..48], &0x14u32.to_le_bytes());
        assert_eq!(&c.raw[48..56], &0x460001u64.to_le_bytes());
    }

    proptest! {
        #[test]
        fn connect_data_roundtrip(hostid: [u8; 16], cntlid: u16,
                                  sub in "[a-z0-9.:-]{0,255}", host in "[a-z0-9.:-]{0,255}") {
            let d = ConnectData { hostid, cntlid, subsysnqn: sub, hostnqn: host };
            prop_assert_eq!(ConnectData::parse(&d.encode()).unwrap(), d);
        }
        #[test]
        fn connect_cmd_roundtrip(recfmt: u16, qid: u16, sqsize: u16, cattr: u8, kato: u32) {
            let c = ConnectCommand { recfmt, qid, sqsize, cattr, kato };
            prop_assert_eq!(ConnectCommand::from_command(&c.to_command(0)), c);
        }
        #[test]
        fn connect_data_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = ConnectData::parse(&b);
        }
    }
}
