//! Zero-copy sends of a host read's data (`MSG_ZEROCOPY`): the kernel sends
//! from the pool buffer itself instead of copying it into socket memory, and
//! says on the socket's error queue when it no longer reads it. Until then
//! the buffer must not go back to the pool: another request's data written
//! into it could still leave on this connection, to this host. So a buffer
//! the core releases while a send of it is outstanding is held here, and
//! given back when the kernel's notification covers that send; a connection
//! that closes keeps its socket until then (bounded: [`GIVE_UP`]).
//!
//! The kernel numbers a socket's zero-copy sends from 0, one number per
//! successful call, and notifies ranges of them, usually in order. Where the
//! data never leaves the machine (loopback, the lab) it copies anyway and
//! says so; a connection then sends as before ([`ZeroCopy::on`] turns off),
//! as copying late costs more than copying at once.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::request::pool::Buf;

/// The least data a send goes zero-copy for: below it, pinning pages and
/// the notification cost more than the copy.
pub const MIN_LEN: u32 = 16 * 1024;
/// How long a closed connection waits for the kernel's last notifications
/// before it gives up on them (its held buffers then stay out of the pool).
/// The kernel drops a dead peer's unacknowledged data after the socket's
/// user timeout, and notifies then.
pub const GIVE_UP: Duration = Duration::from_secs(90);

/// `SO_EE_ORIGIN_ZEROCOPY` (linux/errqueue.h): a notification of
/// zero-copy sends.
const ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data after all.
const CODE_COPIED: u8 = 1;

/// A connection's zero-copy sends and the buffers they pin.
#[derive(Debug, Default)]
pub struct ZeroCopy {
    /// New sends may go zero-copy.
    pub on: bool,
    /// The number the kernel gives the next zero-copy send.
    next: u32,
    /// Every send numbered before this one was notified.
    done: u32,
    /// Ranges (first, last) notified out of order, beyond `done`.
    early: Vec<(u32, u32)>,
    /// Pool buffers (by offset) a send read from, with that send's number.
    pinned: Vec<(usize, u32)>,
    /// Buffers released while a send of theirs was outstanding.
    held: Vec<(u32, Buf)>,
}

impl ZeroCopy {
    /// Bookkeeping for a socket where zero-copy sends are `on` (or not).
    pub fn new(on: bool) -> ZeroCopy {
        ZeroCopy {
            on,
            ..Default::default()
        }
    }

    /// Whether send `id` was notified.
    fn is_done(&self, id: u32) -> bool {
        // Outstanding sends are [done, next), in wrapping order.
        id.wrapping_sub(self.done) >= self.next.wrapping_sub(self.done)
    }

    /// Whether some send waits for its notification.
    pub fn outstanding(&self) -> bool {
        self.done != self.next
    }

    /// Buffers held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// A zero-copy send that read (part of) the pool buffer at `offset`
    /// was taken by the kernel: it gets the next number.
    pub fn sent(&mut self, offset: usize) {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        match self.pinned.iter_mut().find(|(o, _)| *o == offset) {
            Some(p) => p.1 = id,
            None => self.pinned.push((offset, id)),
        }
    }

    /// The core released `b`: given back (`Some`) unless a send of it is
    /// outstanding, then held until its notification.
    pub fn release(&mut self, b: Buf) -> Option<Buf> {
        let Some(i) = self.pinned.iter().position(|(o, _)| *o == b.offset) else {
            return Some(b);
        };
        let (_, id) = self.pinned.swap_remove(i);
        if self.is_done(id) {
            return Some(b);
        }
        self.held.push((id, b));
        None
    }

    /// The kernel notified sends `first..=last` (`copied`: it copied their
    /// data after all). Returns the buffers that may go back to the pool.
    pub fn notified(&mut self, first: u32, last: u32, copied: bool) -> Vec<Buf> {
        if copied {
            self.on = false;
        }
        if first == self.done {
            self.done = last.wrapping_add(1);
        } else {
            self.early.push((first, last));
        }
        while let Some(i) = self.early.iter().position(|&(f, _)| f == self.done) {
            self.done = self.early.swap_remove(i).1.wrapping_add(1);
        }
        let mut free = Vec::new();
        let mut i = 0;
        while i < self.held.len() {
            if self.is_done(self.held[i].0) {
                free.push(self.held.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        let (done, next) = (self.done, self.next);
        self.pinned
            .retain(|&(_, id)| id.wrapping_sub(done) < next.wrapping_sub(done));
        free
    }

    /// Reads the socket's error queue: the buffers whose sends the kernel
    /// notified. Other errors there are not ours to read (none are asked
    /// for: the socket does not set `IP_RECVERR`).
    pub fn drain(&mut self, fd: RawFd) -> Vec<Buf> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
        let mut free = Vec::new();
        let mut cmsg = nix::cmsg_space!(libc::sock_extended_err, libc::sockaddr_in6);
        loop {
            let r = recvmsg::<SockaddrStorage>(
                fd,
                &mut [],
                Some(&mut cmsg),
                MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
            );
            let Ok(msg) = r else {
                // EAGAIN: nothing more; anything else: the socket's own
                // error, which its reads and writes see.
                break;
            };
            let Ok(cmsgs) = msg.cmsgs() else {
                // Truncated (cannot be, at this size): the notification is
                // lost, and its buffers wait for the close's give-up.
                tracing::warn!("a zero-copy notification did not fit its buffer");
                break;
            };
            for c in cmsgs {
                let e = match c {
                    ControlMessageOwned::Ipv4RecvErr(e, _)
                    | ControlMessageOwned::Ipv6RecvErr(e, _) => e,
                    _ => continue,
                };
                if e.ee_errno == 0 && e.ee_origin == ORIGIN_ZEROCOPY {
                    let copied = e.ee_code & CODE_COPIED != 0;
                    free.extend(self.notified(e.ee_info, e.ee_data, copied));
                }
            }
        }
        free
    }
}

/// Lets `fd` send zero-copy (`SO_ZEROCOPY`). False where the kernel does
/// not offer it.
pub fn enable(fd: RawFd) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: a socket option of an int, given by address and size, on a
    // descriptor the caller owns.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(offset: usize) -> Buf {
        Buf {
            class: crate::request::pool::Class::Large,
            index: (offset / 4096) as u32,
            offset,
            size: 4096,
            owner: 0,
            limited: false,
        }
    }

    #[test]
    fn a_buffer_released_before_its_notification_is_held_until_it() {
        let mut z = ZeroCopy::new(true);
        z.sent(0);
        z.sent(4096);
        assert!(z.outstanding());
        assert!(z.release(buf(0)).is_none(), "send 0 outstanding");
        assert_eq!(
            z.release(buf(8192)).map(|b| b.offset),
            Some(8192),
            "never sent"
        );
        assert_eq!(
            z.notified(0, 0, false)
                .iter()
                .map(|b| b.offset)
                .collect::<Vec<_>>(),
            [0]
        );
        assert!(z.outstanding(), "send 1 still out");
        assert!(
            z.notified(1, 1, false).is_empty(),
            "its buffer was not released yet"
        );
        assert!(!z.outstanding());
        assert_eq!(
            z.release(buf(4096)).map(|b| b.offset),
            Some(4096),
            "notified before release"
        );
        assert_eq!(z.held(), 0);
        assert!(z.on);
    }

    #[test]
    fn a_buffer_sent_in_pieces_waits_for_the_last_piece() {
        let mut z = ZeroCopy::new(true);
        z.sent(0);
        z.sent(0);
        assert!(z.release(buf(0)).is_none());
        assert!(z.notified(0, 0, false).is_empty(), "piece 1 still out");
        assert_eq!(z.notified(1, 1, false).len(), 1);
    }

    #[test]
    fn notifications_out_of_order_and_in_ranges() {
        let mut z = ZeroCopy::new(true);
        for o in 0..4 {
            z.sent(o * 4096);
        }
        for o in 0..4 {
            assert!(z.release(buf(o * 4096)).is_none());
        }
        assert!(z.notified(2, 3, false).is_empty(), "0 and 1 still out");
        let mut free: Vec<_> = z.notified(0, 1, false).iter().map(|b| b.offset).collect();
        free.sort();
        assert_eq!(free, [0, 4096, 8192, 12288]);
        assert!(!z.outstanding());
    }

    #[test]
    fn numbers_wrap() {
        let mut z = ZeroCopy::new(true);
        z.next = u32::MAX;
        z.done = u32::MAX;
        z.sent(0);
        z.sent(4096);
        assert!(z.release(buf(0)).is_none());
        assert!(z.release(buf(4096)).is_none());
        assert_eq!(z.notified(u32::MAX, 0, false).len(), 2);
        assert!(!z.outstanding());
    }

    #[test]
    fn a_copy_turns_it_off() {
        let mut z = ZeroCopy::new(true);
        z.sent(0);
        let _ = z.notified(0, 0, true);
        assert!(!z.on);
    }
}
