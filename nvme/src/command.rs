//! The 64-byte submission queue entry (command capsule header).

use crate::bytes::*;
use crate::opcode::{self, DataDirection};
use crate::sgl::Sgl;
use crate::{need, WireError, SQE_SIZE};

/// A submission queue entry. Field accessors read the exact wire offsets; the
/// raw bytes stay available so that nothing is lost between parse and encode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// The raw 64 bytes.
    pub raw: [u8; SQE_SIZE],
}

impl Default for Command {
    fn default() -> Self {
        Command { raw: [0; SQE_SIZE] }
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Command {{ opcode: {:#04x}, cid: {}, nsid: {}, cdw10: {:#x}, sgl: {:?} }}",
            self.opcode(),
            self.cid(),
            self.nsid(),
            self.cdw(10),
            self.sgl()
        )
    }
}

/// Fused operation values (flags bits 1:0).
pub mod fuse {
    /// A normal command.
    pub const NONE: u8 = 0;
    /// The first command of a fused operation (Compare of Compare and Write).
    pub const FIRST: u8 = 1;
    /// The second command of a fused operation (its Write).
    pub const SECOND: u8 = 2;
}

/// PSDT value for "SGLs used for this transfer" (the only one fabrics allow).
pub const PSDT_SGL: u8 = 1;

impl Command {
    /// Parses the first 64 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Command, WireError> {
        need("command", b, SQE_SIZE)?;
        let mut raw = [0u8; SQE_SIZE];
        raw.copy_from_slice(&b[..SQE_SIZE]);
        Ok(Command { raw })
    }

    /// A zeroed command with opcode and cid set, PSDT = SGL.
    pub fn new(opcode: u8, cid: u16) -> Command {
        let mut c = Command::default();
        c.raw[0] = opcode;
        c.raw[1] = PSDT_SGL << 6;
        c.set_cid(cid);
        c
    }

    /// Opcode (byte 0).
    pub fn opcode(&self) -> u8 {
        self.raw[0]
    }
    /// Flags (byte 1).
    pub fn flags(&self) -> u8 {
        self.raw[1]
    }
    /// Fused operation (flags bits 1:0).
    pub fn fuse(&self) -> u8 {
        self.raw[1] & 3
    }
    /// Sets the fused operation bits.
    pub fn set_fuse(&mut self, f: u8) {
        self.raw[1] = (self.raw[1] & !3) | (f & 3);
    }
    /// PRP or SGL for data transfer (flags bits 7:6).
    pub fn psdt(&self) -> u8 {
        self.raw[1] >> 6
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        u16_at(&self.raw, 2)
    }
    /// Sets the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        put_u16(&mut self.raw, 2, cid)
    }
    /// Namespace identifier (or, for fabrics commands, byte 4 is `fctype`).
    pub fn nsid(&self) -> u32 {
        u32_at(&self.raw, 4)
    }
    /// Sets the namespace identifier.
    pub fn set_nsid(&mut self, nsid: u32) {
        put_u32(&mut self.raw, 4, nsid)
    }
    /// Fabrics command type (byte 4).
    pub fn fctype(&self) -> u8 {
        self.raw[4]
    }
    /// Command dword `n` (0..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        u32_at(&self.raw, n * 4)
    }
    /// Sets command dword `n` (10..=15 are the command-specific ones).
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        put_u32(&mut self.raw, n * 4, v)
    }
    /// The SGL descriptor in DPTR (bytes 24..40).
    pub fn sgl(&self) -> Sgl {
        // 16 bytes are always there.
        match Sgl::parse(&self.raw[24..40]) {
            Ok(s) => s,
            Err(_) => unreachable!("DPTR is 16 bytes"),
        }
    }
    /// Sets the SGL descriptor in DPTR.
    pub fn set_sgl(&mut self, s: &Sgl) {
        self.raw[24..40].copy_from_slice(&s.encode());
    }
    /// Whether this is a fabrics command.
    pub fn is_fabrics(&self) -> bool {
        self.opcode() == opcode::FABRICS
    }
    /// Direction of data transfer implied by the opcode (or fctype for fabrics).
    pub fn data_direction(&self) -> DataDirection {
        if self.is_fabrics() {
            DataDirection::from_bits(self.fctype())
        } else {
            DataDirection::from_bits(self.opcode())
        }
    }
    /// Starting LBA of a Read/Write/Write Zeroes (cdw10..11).
    pub fn slba(&self) -> u64 {
        u64_at(&self.raw, 40)
    }
    /// Number of logical blocks (cdw12 bits 15:0, converted from 0-based).
    pub fn nlb(&self) -> u32 {
        (self.cdw(12) & 0xFFFF) + 1
    }
    /// Force Unit Access (cdw12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw(12) & (1 << 30) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offsets() {
        let mut c = Command::new(0x02, 0xBEEF);
        c.set_nsid(7);
        c.set_cdw(10, 0x1000);
        c.set_cdw(11, 0x2);
        c.set_cdw(12, (1 << 30) | 7);
        assert_eq!(c.raw[0], 2);
        assert_eq!(c.psdt(), 1);
        assert_eq!(&c.raw[2..4], &[0xEF, 0xBE]);
        assert_eq!(c.nsid(), 7);
        assert_eq!(c.slba(), 0x2_0000_1000);
        assert_eq!(c.nlb(), 8);
        assert!(c.fua());
        assert_eq!(c.data_direction(), DataDirection::ControllerToHost);
        let f = Command::new(0x7F, 1);
        let mut f2 = f;
        f2.raw[4] = 0x01;
        assert_eq!(f2.data_direction(), DataDirection::HostToController);
        f2.raw[4] = 0x04;
        assert_eq!(f2.data_direction(), DataDirection::None);
        assert!(Command::parse(&[0u8; 63]).is_err());
    }

    proptest! {
        #[test]
        fn parse_encode(raw in proptest::collection::vec(any::<u8>(), 64..=64)) {
            let c = Command::parse(&raw).unwrap();
            prop_assert_eq!(&c.raw[..], &raw[..]);
            let _ = c.sgl();
            let _ = format!("{c:?}");
        }
    }
}
