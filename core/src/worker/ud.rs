//! The user data of a worker's operations (io_uring entries, mailbox
//! completions, and a transport's own work requests): a kind, the queue
//! (slot and generation in the worker's table) and the request (index and
//! generation), packed in 64 bits. A completion is matched to exactly the
//! request use it was issued for. The kinds below are the worker's; a
//! transport numbers its own ring operations from 0 and tags them with its
//! index ([`transport_kind`]), so the worker hands each completion to its
//! transport without a table of everyone's numbers.

use super::slots::QueueKey;
use crate::queue::Token;

/// A backend operation of a request (io_uring, a lane, the offload thread,
/// librbd, a write gate that opened).
pub const IO: u8 = 8;
/// The poll of the worker's eventfd.
pub const POLL_WAKE: u8 = 11;

/// The kind of transport `index`'s own ring operation `local` (under 64):
/// the worker hands its completion to that transport, which reads
/// [`Ud::local_kind`].
pub const fn transport_kind(index: usize, local: u8) -> u8 {
    ((index as u8 + 1) << 6) | (local & 0x3F)
}

/// User data, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ud {
    /// What the operation is.
    pub kind: u8,
    /// The queue it is for.
    pub queue: QueueKey,
    /// The request (or a transport's own number, such as a receive buffer).
    pub req: Token,
}

impl Ud {
    /// An operation of request `req` of queue `queue`.
    pub const fn of(kind: u8, queue: QueueKey, req: Token) -> Ud {
        Ud { kind, queue, req }
    }

    /// An operation of the worker or a transport, for no queue; `slot`
    /// numbers it among its kind (a device, say).
    pub const fn worker(kind: u8) -> Ud {
        Ud {
            kind,
            queue: QueueKey { slot: 0, gen: 0 },
            req: Token { slot: 0, gen: 0 },
        }
    }

    /// The transport whose own ring operation this is (`None`: the
    /// worker's, or a backend operation's).
    pub const fn transport(self) -> Option<usize> {
        match self.kind >> 6 {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    /// The kind as its transport numbers it ([`transport_kind`]).
    pub const fn local_kind(self) -> u8 {
        self.kind & 0x3F
    }

    /// Packed: kind (8 bits), queue slot (16), queue generation (8),
    /// request (16), request generation (16).
    pub const fn pack(self) -> u64 {
        (self.kind as u64) << 56
            | (self.queue.slot as u64) << 40
            | (self.queue.gen as u64) << 32
            | (self.req.slot as u64) << 16
            | self.req.gen as u64
    }

    /// Unpacks what [`Ud::pack`] made.
    pub const fn unpack(v: u64) -> Ud {
        Ud {
            kind: (v >> 56) as u8,
            queue: QueueKey {
                slot: (v >> 40) as u16,
                gen: (v >> 32) as u8,
            },
            req: Token {
                slot: (v >> 16) as u16,
                gen: v as u16,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_every_field_apart() {
        let u = Ud::of(
            IO,
            QueueKey {
                slot: 0xBEEF,
                gen: 0xA5,
            },
            Token {
                slot: 0x1234,
                gen: 0xFEDC,
            },
        );
        assert_eq!(u.pack(), 0x08BE_EFA5_1234_FEDC);
        assert_eq!(Ud::unpack(u.pack()), u);
        assert_eq!(u.transport(), None, "a backend operation");
    }

    #[test]
    fn a_transports_kind_names_it() {
        for index in 0..crate::worker::slots::MAX_TRANSPORTS {
            for local in [0, 9, 33, 63] {
                let u = Ud::worker(transport_kind(index, local));
                assert_eq!(u.transport(), Some(index));
                assert_eq!(u.local_kind(), local);
            }
        }
        assert_eq!(Ud::worker(POLL_WAKE).transport(), None);
    }
}
