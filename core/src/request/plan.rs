//! What an I/O command asks of its namespace, once validated
//! ([`crate::command::io::prepare`]): the vocabulary between the command set
//! and the backends.

use nvme::opcode::io as op;

/// What the backend must do for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoPlan {
    /// Read `len` bytes at byte `offset` into the data buffer.
    Read {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Write `len` bytes from the data buffer at byte `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u32,
        /// Force unit access: stable before completion.
        fua: bool,
    },
    /// Make completed writes stable.
    Flush,
    /// Zero `len` bytes at `offset`.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Force unit access: stable before completion.
        fua: bool,
    },
    /// Dataset management: `nr` ranges arrive as data (16 bytes each).
    Dsm {
        /// Number of ranges.
        nr: u32,
        /// Deallocate attribute.
        deallocate: bool,
    },
    /// Compare `len` bytes at byte `offset` with the data buffer (alone, or
    /// the first command of a fused Compare and Write).
    Compare {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// An Authentication Send (`send`) or Receive, run on the target's
    /// authentication lane.
    Auth {
        /// An Authentication Send.
        send: bool,
    },
    /// A reservation command (Register, Report, Acquire, Release), run
    /// against the namespace's reservation state, not the backend.
    Resv {
        /// Its opcode.
        opcode: u8,
        /// Bytes of its data (the keys, or the report's room).
        len: u32,
    },
}

impl IoPlan {
    /// Whether it changes the store (a write, zeroes, a deallocation).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            IoPlan::Write { .. }
                | IoPlan::WriteZeroes { .. }
                | IoPlan::Dsm {
                    deallocate: true,
                    ..
                }
        )
    }

    /// Bytes the host must send (H2C) for this plan.
    pub fn data_in_len(&self) -> u32 {
        match *self {
            IoPlan::Write { len, .. } => len,
            IoPlan::Dsm { nr, .. } => nr * 16,
            IoPlan::Compare { len, .. } => len,
            IoPlan::Resv { opcode, len } if opcode != op::RESV_REPORT => len,
            _ => 0,
        }
    }
}
