//! The 16-byte completion queue entry (response capsule).

use crate::bytes::*;
use crate::status::Status;
use crate::{need, WireError, CQE_SIZE};

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Command specific result (dwords 0-1).
    pub result: u64,
    /// Submission queue head pointer.
    pub sq_head: u16,
    /// Submission queue identifier.
    pub sq_id: u16,
    /// Command identifier.
    pub cid: u16,
    /// Status.
    pub status: Status,
    /// Phase tag (unused on fabrics; kept for exact round trips).
    pub phase: bool,
}

impl Completion {
    /// A completion for `cid` with `status` and a zero result.
    pub fn new(cid: u16, status: Status) -> Completion {
        Completion {
            result: 0,
            sq_head: 0,
            sq_id: 0,
            cid,
            status,
            phase: false,
        }
    }

    /// Encodes into 16 bytes.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        self.encode_into(&mut b);
        b
    }

    /// Encodes into the first 16 bytes of `b` (which must hold 16 bytes).
    pub fn encode_into(&self, b: &mut [u8]) {
        put_u64(b, 0, self.result);
        put_u16(b, 8, self.sq_head);
        put_u16(b, 10, self.sq_id);
        put_u16(b, 12, self.cid);
        put_u16(b, 14, (self.status.to_field() << 1) | self.phase as u16);
    }

    /// Parses 16 bytes.
    pub fn parse(b: &[u8]) -> Result<Completion, WireError> {
        need("completion", b, CQE_SIZE)?;
        let sf = u16_at(b, 14);
        Ok(Completion {
            result: u64_at(b, 0),
            sq_head: u16_at(b, 8),
            sq_id: u16_at(b, 10),
            cid: u16_at(b, 12),
            status: Status::from_field(sf >> 1),
            phase: sf & 1 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let c = Completion {
            result: 0x0102030405060708,
            sq_head: 5,
            sq_id: 1,
            cid: 0x1234,
            status: Status::CONNECT_INVALID_HOST,
            phase: false,
        };
        let b = c.encode();
        assert_eq!(&b[0..8], &0x0102030405060708u64.to_le_bytes());
        assert_eq!(&b[8..10], &[5, 0]);
        assert_eq!(&b[10..12], &[1, 0]);
        assert_eq!(&b[12..14], &[0x34, 0x12]);
        assert_eq!(u16::from_le_bytes([b[14], b[15]]), (0x4184) << 1);
        assert_eq!(Completion::parse(&b).unwrap(), c);
        assert!(Completion::parse(&b[..15]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(raw in proptest::collection::vec(any::<u8>(), 16..=16)) {
            let mut raw = raw;
            raw[15] &= !(3 << 4); // CRD bits not modelled
            let c = Completion::parse(&raw).unwrap();
            prop_assert_eq!(&c.encode()[..], &raw[..]);
        }
    }
}
