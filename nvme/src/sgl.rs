//! SGL descriptors as carried in the command's DPTR (16 bytes).
//!
//! The RDMA transport uses keyed data block descriptors (type 4) that name a
//! remote window `(addr, len, key)`, and data block descriptors with subtype
//! "offset" (type 0, subtype 1) for in-capsule data.

use crate::bytes::*;
use crate::{need, WireError};

/// Size of an SGL descriptor.
pub const SGL_SIZE: usize = 16;

/// SGL descriptor type (upper nibble of byte 15).
pub mod kind {
    /// Data block.
    pub const DATA_BLOCK: u8 = 0x0;
    /// Bit bucket.
    pub const BIT_BUCKET: u8 = 0x1;
    /// Segment.
    pub const SEGMENT: u8 = 0x2;
    /// Last segment.
    pub const LAST_SEGMENT: u8 = 0x3;
    /// Keyed data block.
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    /// Transport SGL data block (NVMe/TCP: data by R2T and C2HData).
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}

/// SGL descriptor subtype (lower nibble of byte 15).
pub mod subtype {
    /// Address.
    pub const ADDRESS: u8 = 0x0;
    /// Offset (in-capsule data).
    pub const OFFSET: u8 = 0x1;
    /// Keyed: address, and the target invalidates the key with its response.
    pub const INVALIDATE: u8 = 0xF;
    /// Transport specific (NVMe/TCP's transport data block).
    pub const TRANSPORT_A: u8 = 0xA;
}

/// A parsed SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sgl {
    /// Keyed data block: a remote memory window (type 4, subtype 0 or 0xF).
    Keyed {
        /// Remote virtual address.
        addr: u64,
        /// Length in bytes (24 bits on the wire).
        len: u32,
        /// Remote key.
        key: u32,
        /// Subtype 0xF: answer with SEND_WITH_INVALIDATE of `key`.
        invalidate: bool,
    },
    /// In-capsule data at `offset` from the start of the capsule's data area
    /// (type 0, subtype 1).
    InCapsule {
        /// Offset into the in-capsule data.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Data the transport carries apart from the capsule (NVMe/TCP: R2T and
    /// H2CData to the controller, C2HData to the host; type 5, subtype 0xA).
    Transport {
        /// Length in bytes.
        len: u32,
    },
    /// Any other type/subtype combination, kept raw so the target can name the
    /// precise error.
    Other {
        /// Descriptor type (upper nibble of byte 15).
        kind: u8,
        /// Descriptor subtype (lower nibble of byte 15).
        subtype: u8,
        /// Raw 16 bytes.
        raw: [u8; 16],
    },
}

impl Sgl {
    /// Parses a 16-byte descriptor.
    pub fn parse(b: &[u8]) -> Result<Sgl, WireError> {
        need("SGL descriptor", b, SGL_SIZE)?;
        let id = b[15];
        let (k, st) = (id >> 4, id & 0xF);
        Ok(match (k, st) {
            (kind::KEYED_DATA_BLOCK, subtype::ADDRESS | subtype::INVALIDATE) => Sgl::Keyed {
                addr: u64_at(b, 0),
                len: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                key: u32_at(b, 11),
                invalidate: st == subtype::INVALIDATE,
            },
            (kind::DATA_BLOCK, subtype::OFFSET) => Sgl::InCapsule {
                offset: u64_at(b, 0),
                len: u32_at(b, 8),
            },
            (kind::TRANSPORT_DATA_BLOCK, subtype::TRANSPORT_A) => {
                Sgl::Transport { len: u32_at(b, 8) }
            }
            _ => {
                let mut raw = [0u8; 16];
                raw.copy_from_slice(&b[..16]);
                Sgl::Other {
                    kind: k,
                    subtype: st,
                    raw,
                }
            }
        })
    }

    /// Encodes the descriptor. Keyed lengths above 24 bits are truncated, as on the wire.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        match *self {
            Sgl::Keyed {
                addr,
                len,
                key,
                invalidate,
            } => {
                put_u64(&mut b, 0, addr);
                b[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
                put_u32(&mut b, 11, key);
                b[15] = (kind::KEYED_DATA_BLOCK << 4)
                    | if invalidate {
                        subtype::INVALIDATE
                    } else {
                        subtype::ADDRESS
                    };
            }
            Sgl::InCapsule { offset, len } => {
                put_u64(&mut b, 0, offset);
                put_u32(&mut b, 8, len);
                b[15] = (kind::DATA_BLOCK << 4) | subtype::OFFSET;
            }
            Sgl::Transport { len } => {
                put_u32(&mut b, 8, len);
                b[15] = (kind::TRANSPORT_DATA_BLOCK << 4) | subtype::TRANSPORT_A;
            }
            Sgl::Other { raw, .. } => b = raw,
        }
        b
    }

    /// Data length named by the descriptor (0 for unknown kinds).
    pub fn len(&self) -> u32 {
        match *self {
            Sgl::Keyed { len, .. } | Sgl::InCapsule { len, .. } | Sgl::Transport { len } => len,
            Sgl::Other { .. } => 0,
        }
    }

    /// Whether the descriptor names no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keyed_layout() {
        let s = Sgl::Keyed {
            addr: 0x1122334455667788,
            len: 0x00ABCDEF,
            key: 0xDEADBEEF,
            invalidate: true,
        };
        let b = s.encode();
        assert_eq!(&b[0..8], &0x1122334455667788u64.to_le_bytes());
        assert_eq!(&b[8..11], &[0xEF, 0xCD, 0xAB]);
        assert_eq!(&b[11..15], &0xDEADBEEFu32.to_le_bytes());
        assert_eq!(b[15], 0x4F);
        assert_eq!(Sgl::parse(&b).unwrap(), s);
    }

    #[test]
    fn in_capsule_layout() {
        let s = Sgl::InCapsule {
            offset: 0,
            len: 4096,
        };
        let b = s.encode();
        assert_eq!(b[15], 0x01);
        assert_eq!(&b[8..12], &4096u32.to_le_bytes());
        assert_eq!(Sgl::parse(&b).unwrap(), s);
    }

    #[test]
    fn other_kinds_kept_raw() {
        let mut b = [0u8; 16];
        b[15] = 0x45; // keyed, bad subtype
        assert!(matches!(
            Sgl::parse(&b).unwrap(),
            Sgl::Other {
                kind: 4,
                subtype: 5,
                ..
            }
        ));
        b[15] = 0x00; // data block, address subtype
        assert!(matches!(
            Sgl::parse(&b).unwrap(),
            Sgl::Other {
                kind: 0,
                subtype: 0,
                ..
            }
        ));
        assert!(Sgl::parse(&b[..15]).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Sgl::parse(&b);
        }

        #[test]
        fn keyed_roundtrip(addr: u64, len in 0u32..(1 << 24), key: u32, invalidate: bool) {
            let s = Sgl::Keyed { addr, len, key, invalidate };
            prop_assert_eq!(Sgl::parse(&s.encode()).unwrap(), s);
        }

        #[test]
        fn raw_roundtrip(raw: [u8; 16]) {
            let s = Sgl::parse(&raw).unwrap();
            // Reserved bytes of known kinds are not kept; unknown kinds are byte-exact.
            if let Sgl::Other { .. } = s { prop_assert_eq!(s.encode(), raw); }
            prop_assert_eq!(Sgl::parse(&s.encode()).unwrap(), s);
        }
    }
}
