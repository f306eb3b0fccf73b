//! Work-request ids (and io_uring user data) that name exactly what they were
//! issued for: an operation kind, a connection and a slot in it, each with a
//! generation. A completion that arrives after its connection or slot was
//! reused carries an old generation and can be told apart.

/// A packed 64-bit id: `kind:8 | conn:16 | conn_gen:8 | slot:16 | slot_gen:16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WrId {
    /// What the operation is (the user's own numbering).
    pub kind: u8,
    /// Which connection (an index in the user's table).
    pub conn: u16,
    /// The connection's generation when the operation was issued.
    pub conn_gen: u8,
    /// Which slot of the connection (request, receive buffer, ...).
    pub slot: u16,
    /// The slot's generation when the operation was issued.
    pub slot_gen: u16,
}

impl WrId {
    /// Packs the id into 64 bits.
    pub const fn pack(self) -> u64 {
        (self.kind as u64) << 56
            | (self.conn as u64) << 40
            | (self.conn_gen as u64) << 32
            | (self.slot as u64) << 16
            | self.slot_gen as u64
    }

    /// Unpacks an id made by [`WrId::pack`].
    pub const fn unpack(v: u64) -> WrId {
        WrId {
            kind: (v >> 56) as u8,
            conn: (v >> 40) as u16,
            conn_gen: (v >> 32) as u8,
            slot: (v >> 16) as u16,
            slot_gen: v as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ids = [
            WrId::default(),
            WrId {
                kind: 0xFF,
                conn: 0xFFFF,
                conn_gen: 0xFF,
                slot: 0xFFFF,
                slot_gen: 0xFFFF,
            },
            WrId {
                kind: 3,
                conn: 0x1234,
                conn_gen: 7,
                slot: 0xBEEF,
                slot_gen: 42,
            },
        ];
        for id in ids {
            assert_eq!(WrId::unpack(id.pack()), id);
        }
        // Each field lands in its own bits.
        let one = |id: WrId| id.pack().count_ones();
        assert_eq!(
            one(WrId {
                kind: 1,
                ..Default::default()
            }),
            1
        );
        assert_eq!(
            WrId {
                kind: 1,
                ..Default::default()
            }
            .pack(),
            1 << 56
        );
        assert_eq!(
            WrId {
                conn: 1,
                ..Default::default()
            }
            .pack(),
            1 << 40
        );
        assert_eq!(
            WrId {
                conn_gen: 1,
                ..Default::default()
            }
            .pack(),
            1 << 32
        );
        assert_eq!(
            WrId {
                slot: 1,
                ..Default::default()
            }
            .pack(),
            1 << 16
        );
        assert_eq!(
            WrId {
                slot_gen: 1,
                ..Default::default()
            }
            .pack(),
            1
        );
    }
}
