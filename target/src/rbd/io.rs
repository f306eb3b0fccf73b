//! An RBD namespace's I/O commands as librbd calls. Each call takes what it
//! needs from its connection's [`Budget`] and starts on the worker, or,
//! when the budget is spent (or calls wait already), on the connection's
//! dispatcher thread once completions gave enough back. A discard or write
//! zeroes longer than [`PIECE_UNITS`] stripe units goes there in pieces,
//! one per turn. Every call's completion runs on a librbd thread and posts
//! `(ud, result)` to the submitting worker's mailbox.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;

use nix::errno::Errno;

use super::budget::{units, Budget, Deferred, Need};
use super::{Conn, RbdImage};
use crate::backend::{DataRef, Submitted};
use crate::base::wake::Mailbox;
use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;

/// The longest piece of a discard or write zeroes, in stripe units (with
/// 4 MiB objects: 32 MiB, eight operations).
pub const PIECE_UNITS: u64 = 8;

/// One librbd call.
#[derive(Clone, Copy)]
enum Call {
    Read { off: u64, len: u32, buf: *mut u8 },
    Write { off: u64, len: u32, buf: *const u8 },
    Flush,
    Discard { off: u64, len: u64 },
    Zeroes { off: u64, len: u64 },
}

/// A read's buffer, in its completion.
struct SendPtr(*mut u8);
// SAFETY: the buffer is the read's alone until its completion, which is the
// only user of the pointer, is posted.
unsafe impl Send for SendPtr {}

impl SendPtr {
    fn get(&self) -> *mut u8 {
        self.0
    }
}

/// A call handed to the dispatcher thread.
struct SendCall(Call);
// SAFETY: the only pointers in a call are the command's data buffer, which
// the caller of `submit` keeps valid and to this call alone until its
// completion is posted, whichever thread starts it.
unsafe impl Send for SendCall {}

impl Call {
    fn need(&self, unit: u64) -> Need {
        let (ops, bytes) = match *self {
            Call::Read { off, len, .. } | Call::Write { off, len, .. } => {
                (units(off, len as u64, unit), len as u64)
            }
            Call::Discard { off, len } | Call::Zeroes { off, len } => (units(off, len, unit), 0),
            Call::Flush => (0, 0),
        };
        Need { ops, bytes }
    }

    /// Starts the call; a refused one runs its completion with the error.
    ///
    /// # Safety
    /// A read's or write's buffer is valid, and the call's alone, until
    /// `done` runs.
    unsafe fn start(self, image: &ceph::Image, done: ceph::Done) {
        // SAFETY: the caller's guarantee, passed on.
        let r = match self {
            Call::Read { off, len, buf } => unsafe { image.aio_read(off, buf, len as usize, done) },
            Call::Write { off, len, buf } => unsafe {
                image.aio_write(off, buf, len as usize, done)
            },
            Call::Flush => image.aio_flush(done),
            Call::Discard { off, len } => image.aio_discard(off, len, done),
            Call::Zeroes { off, len } => image.aio_write_zeroes(off, len, done),
        };
        if let Err(refused) = r {
            refused.complete();
        }
    }

    /// The same call on `len` bytes at `off` (a piece of a range).
    fn piece(self, off: u64, len: u64) -> Call {
        match self {
            Call::Discard { .. } => Call::Discard { off, len },
            _ => Call::Zeroes { off, len },
        }
    }
}

/// Where a command's result goes, and what each of its results does first.
struct Reply {
    mailbox: Arc<Mailbox>,
    conn: Arc<Conn>,
    /// The write gate the command holds (writes of a gated image).
    held: Option<Arc<WriteGate>>,
    ud: u64,
}

impl Reply {
    /// What every librbd result does first: an EBLOCKLISTED (or timed out)
    /// result says this gateway may have been fenced (the monitors
    /// confirm it); a write that librados gave up waiting for may still
    /// land, so the image's ownership becomes uncertain.
    fn seen(&self, r: isize) {
        if [Errno::ESHUTDOWN, Errno::ETIMEDOUT, Errno::ENOTCONN]
            .contains(&Errno::from_raw(-r as i32))
        {
            self.conn.suspect();
        }
        if r == -(Errno::ETIMEDOUT as isize) {
            if let Some(g) = &self.held {
                g.mark_uncertain();
            }
        }
    }

    /// The command's answer: the gate is left, the result posted.
    fn finish(self, res: i32) {
        if let Some(g) = &self.held {
            g.leave();
        }
        self.mailbox.post(self.ud, res);
    }
}

/// The result to post for a librbd result `r` of an operation that moves
/// `len` bytes: the bytes moved (reads and writes), else 0; or the error.
pub(super) fn result(r: isize, len: u32) -> i32 {
    if r < 0 {
        i32::try_from(r).unwrap_or(-(Errno::EIO as i32))
    } else {
        len as i32
    }
}

/// Starts `plan` on `img` (see [`crate::backend::Storage::submit`]);
/// completions reach `mailbox`. With `gate`, each write holds it until
/// librbd completed it.
///
/// # Safety
/// As [`crate::backend::Storage::submit`].
pub(super) unsafe fn submit(
    img: &RbdImage,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    mailbox: &Arc<Mailbox>,
    gate: Option<&Arc<WriteGate>>,
    ud: u64,
) -> Submitted {
    let reply = |write: bool| Reply {
        mailbox: mailbox.clone(),
        conn: img.conn.clone(),
        held: gate.filter(|_| write).map(|g| {
            g.hold();
            g.clone()
        }),
        ud,
    };
    // SAFETY (each call): the caller keeps the buffer valid and to this
    // command alone until its completion is posted.
    match *plan {
        IoPlan::Read { offset, len } => unsafe {
            let call = Call::Read {
                off: offset,
                len,
                buf: data.ptr,
            };
            one(img, call, reply(false))
        },
        IoPlan::Write { offset, len, .. } => unsafe {
            let call = Call::Write {
                off: offset,
                len,
                buf: data.ptr,
            };
            one(img, call, reply(true))
        },
        IoPlan::Flush => unsafe { one(img, Call::Flush, reply(false)) },
        IoPlan::WriteZeroes { offset, len, .. } => {
            range(img, Call::Zeroes { off: offset, len }, reply(true))
        }
        IoPlan::Dsm { .. } => {
            let mut s = Submitted::default();
            for &(off, len) in ranges {
                s.in_flight += range(img, Call::Discard { off, len }, reply(true)).in_flight;
            }
            s
        }
        // Reservation commands run on the namespace's state, compares on
        // the offload thread (backend::compare): never here.
        IoPlan::Resv { .. } | IoPlan::Compare { .. } | IoPlan::Auth { .. } => Submitted {
            in_flight: 0,
            errno: nix::libc::EOPNOTSUPP,
            done: 0,
        },
    }
}

/// The completion of a whole command's one call.
fn done_one(call: Call, need: Need, budget: Arc<Budget>, reply: Reply) -> ceph::Done {
    let len = match call {
        Call::Read { len, .. } | Call::Write { len, .. } => len,
        _ => 0,
    };
    let read_buf = match call {
        Call::Read { buf, .. } => Some(SendPtr(buf)),
        _ => None,
    };
    Box::new(move |r| {
        budget.give_back(need);
        reply.seen(r);
        if let Some(buf) = read_buf.as_ref() {
            if r >= 0 && (r as usize) < len as usize {
                // A read that ends in a hole of a sparse image may come back
                // short: the rest is zeroes.
                // SAFETY: the buffer is valid for `len` bytes and still this
                // read's until its completion is posted below.
                unsafe {
                    buf.get()
                        .add(r as usize)
                        .write_bytes(0, len as usize - r as usize)
                };
            }
        }
        reply.finish(result(r, len));
    })
}

/// Starts `call`, the command's only one: now if the budget allows, else
/// through the dispatcher.
///
/// # Safety
/// As [`Call::start`].
unsafe fn one(img: &RbdImage, call: Call, reply: Reply) -> Submitted {
    let budget = &img.conn.budget;
    let need = call.need(img.unit);
    let done = done_one(call, need, budget.clone(), reply);
    if budget.take_now(need) {
        // SAFETY: the caller's guarantee.
        unsafe { call.start(&img.image, done) };
    } else {
        waited();
        let (image, call) = (img.image.clone(), SendCall(call));
        budget.defer(Deferred {
            need,
            run: Box::new(move || {
                let call = call;
                // SAFETY: the caller's guarantee: the buffer stays valid
                // until the completion is posted, which `done` does.
                unsafe { call.0.start(&image, done) };
                None
            }),
        });
    }
    Submitted::one(Ok(()))
}

/// A discard or write zeroes of a range: one call if it is short, else
/// pieces through the dispatcher, the command answered once every piece
/// completed (with the first error, if any).
fn range(img: &RbdImage, call: Call, reply: Reply) -> Submitted {
    let (off, len) = match call {
        Call::Discard { off, len } | Call::Zeroes { off, len } => (off, len),
        _ => unreachable!("ranges are discards and write zeroes"),
    };
    if units(off, len, img.unit) <= PIECE_UNITS {
        // SAFETY: no buffer.
        return unsafe { one(img, call, reply) };
    }
    waited();
    let pieces = Arc::new(Pieces {
        left: AtomicU32::new(1),
        err: AtomicI32::new(0),
        reply: std::sync::Mutex::new(Some(reply)),
    });
    img.conn.budget.defer(piece(
        img.image.clone(),
        img.conn.budget.clone(),
        img.unit,
        call,
        off,
        len,
        pieces,
    ));
    Submitted::one(Ok(()))
}

/// A long range's pieces in flight.
struct Pieces {
    /// Pieces started and not completed, and one while more are to start.
    left: AtomicU32,
    /// The first error (0: none).
    err: AtomicI32,
    /// Taken by whichever ends the command.
    reply: std::sync::Mutex<Option<Reply>>,
}

impl Pieces {
    /// One piece completed with `r` (or the last piece started): the last
    /// one answers the command.
    fn one_done(&self, r: isize) {
        if r < 0 {
            let _ = self
                .err
                .compare_exchange(0, result(r, 0), Ordering::AcqRel, Ordering::Acquire);
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let reply = self.reply.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(reply) = reply {
                reply.finish(self.err.load(Ordering::Acquire));
            }
        }
    }

    fn seen(&self, r: isize) {
        if let Some(reply) = &*self.reply.lock().unwrap_or_else(|p| p.into_inner()) {
            reply.seen(r);
        }
    }
}

/// The dispatcher's turn for the piece of `call`'s range that starts at
/// `off` (`len` bytes left). One piece of a range is in flight at a time:
/// its completion queues the next (none after an error), so a long range
/// neither fills the connection's budget nor keeps calls queued, which
/// would send every other call of the connection through the dispatcher.
fn piece(
    image: Arc<ceph::Image>,
    budget: Arc<Budget>,
    unit: u64,
    call: Call,
    off: u64,
    len: u64,
    pieces: Arc<Pieces>,
) -> Deferred {
    let unit = unit.max(1);
    let end = off.saturating_add(len);
    let piece_end = (off / unit)
        .saturating_add(PIECE_UNITS)
        .saturating_mul(unit)
        .min(end);
    let this = call.piece(off, piece_end - off);
    let need = this.need(unit);
    let (call, this) = (SendCall(call), SendCall(this));
    Deferred {
        need,
        run: Box::new(move || {
            let (call, this) = (call, this);
            let more = piece_end < end;
            pieces.left.fetch_add(1, Ordering::AcqRel);
            let (b, p, img) = (budget.clone(), pieces.clone(), image.clone());
            let done: ceph::Done = Box::new(move |r| {
                // The whole wrapper, which is Send (not its field).
                let call = call;
                b.give_back(need);
                p.seen(r);
                let next = more && r >= 0 && p.err.load(Ordering::Acquire) == 0;
                if next {
                    let rest = end - piece_end;
                    b.defer(piece(
                        img,
                        b.clone(),
                        unit,
                        call.0,
                        piece_end,
                        rest,
                        p.clone(),
                    ));
                }
                p.one_done(r);
                if more && !next {
                    // No piece follows: the token for them goes too.
                    p.one_done(0);
                }
            });
            if !more {
                // Every piece started once this one is: its completion answers.
                pieces.one_done(0);
            }
            // SAFETY: no buffer.
            unsafe { this.0.start(&image, done) };
            None
        }),
    }
}

/// A call waited for its connection's budget (or went in pieces).
fn waited() {
    crate::telemetry::metrics::metrics().rbd_budget_waits.inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results() {
        assert_eq!(result(4096, 4096), 4096);
        assert_eq!(result(0, 4096), 4096, "a write completes with 0");
        assert_eq!(result(0, 0), 0);
        assert_eq!(result(-110, 4096), -110);
        assert_eq!(result(isize::MIN, 8), -5);
    }

    #[test]
    fn what_calls_need() {
        let m = 4 << 20;
        let buf = std::ptr::null_mut();
        let read = Call::Read {
            off: m - 4096,
            len: 8192,
            buf,
        };
        assert_eq!(
            read.need(m),
            Need {
                ops: 2,
                bytes: 8192
            }
        );
        assert_eq!(Call::Flush.need(m), Need { ops: 0, bytes: 0 });
        let z = Call::Zeroes { off: 0, len: 3 * m };
        assert_eq!(z.need(m), Need { ops: 3, bytes: 0 });
        assert!(matches!(
            z.piece(m, 5),
            Call::Zeroes { off, len: 5 } if off == m
        ));
        assert!(matches!(
            Call::Discard { off: 0, len: 1 }.piece(7, 9),
            Call::Discard { off: 7, len: 9 }
        ));
    }
}
