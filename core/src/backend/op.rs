//! One request's backend work, from its submission to its outcome. What is
//! the backend's business stays here, out of the queue: a read or write the
//! kernel did short is continued where it stopped, a Write Zeroes with Force
//! Unit Access is followed by a flush, a deallocation the store does not
//! support is no error (it is advisory), and a transfer that moved fewer
//! bytes than asked fails. The caller names each operation by an opaque
//! user-data word and hands every completion back to [`Op::completed`].

use std::sync::Arc;

use nix::errno::Errno;

use super::{DataRef, Executor, Storage};
use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;

/// A request's backend work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    plan: IoPlan,
    /// Bytes a read or write moved so far.
    done: u32,
    /// The first error (0: none).
    errno: i32,
    /// The flush after a zeroing with FUA was issued.
    flush_issued: bool,
}

/// What a completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// The operation goes on with another submission under the same user
    /// data (still one in flight).
    Continued,
    /// The operation is over (its result recorded).
    Over,
}

impl Op {
    /// Work for `plan`, nothing submitted yet.
    pub fn new(plan: IoPlan) -> Op {
        Op {
            plan,
            done: 0,
            errno: 0,
            flush_issued: false,
        }
    }

    /// Submits the plan to `backend` (the ranges of a deallocation, the
    /// request's data at `data`), every operation named `ud`. Returns how
    /// many are in flight; a submission error is recorded.
    ///
    /// # Safety
    /// As [`Storage::submit`]: `data` stays valid, and the backend alive, until every
    /// operation submitted completed.
    pub unsafe fn start(
        &mut self,
        backend: &dyn Storage,
        gate: &Arc<WriteGate>,
        data: DataRef,
        ranges: &[(u64, u64)],
        io: &mut dyn Executor,
        ud: u64,
    ) -> u16 {
        // SAFETY: the caller's guarantees, passed on.
        let s = unsafe { backend.submit(gate, &self.plan, data, ranges, io, ud) };
        self.done += s.done;
        self.record(s.errno);
        s.in_flight
    }

    /// One operation completed with `res` (bytes moved, or a negative errno).
    /// A short transfer goes on from where it stopped and a zeroing with FUA
    /// gets its flush, if `go_on` (the request still has a host to answer)
    /// and the submission takes; `data` is where the request's data starts.
    ///
    /// # Safety
    /// As [`Op::start`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn completed(
        &mut self,
        res: i32,
        go_on: bool,
        backend: &dyn Storage,
        gate: &Arc<WriteGate>,
        data: DataRef,
        io: &mut dyn Executor,
        ud: u64,
    ) -> After {
        if res < 0 {
            let e = -res;
            let advisory = matches!(self.plan, IoPlan::Dsm { .. }) && e == Errno::EOPNOTSUPP as i32;
            if !advisory {
                self.record(e);
            }
            return After::Over;
        }
        let next = match self.plan {
            IoPlan::Read { len, .. } | IoPlan::Write { len, .. } => {
                self.done += res as u32;
                if res == 0 && self.done < len {
                    // No progress: the store ends there.
                    self.record(Errno::EIO as i32);
                    return After::Over;
                }
                let Some(rest) = rest_of(&self.plan, self.done) else {
                    return After::Over;
                };
                let at = DataRef {
                    ptr: data.ptr.wrapping_add(self.done as usize),
                    fixed: data.fixed,
                };
                (rest, at)
            }
            // Forced unit access: the zeroes are made durable before the
            // command completes.
            IoPlan::WriteZeroes { fua: true, .. } if !self.flush_issued => {
                self.flush_issued = true;
                (IoPlan::Flush, DataRef::NONE)
            }
            _ => return After::Over,
        };
        if !go_on {
            return After::Over;
        }
        // SAFETY: the rest lies in the request's data, which the caller keeps
        // valid as for the first submission.
        let s = unsafe { backend.submit(gate, &next.0, next.1, &[], io, ud) };
        if s.in_flight == 1 {
            return After::Continued;
        }
        self.record(s.errno);
        After::Over
    }

    /// Records a failure the caller learned of (an operation run for this
    /// one elsewhere, such as a comparison on the offload thread).
    pub fn fail(&mut self, errno: i32) {
        self.record(errno.max(1));
    }

    /// The error that failed a submission or completion so far (0: none);
    /// unlike [`Op::errno`], a transfer still under way is not short.
    pub fn failed(&self) -> i32 {
        self.errno
    }

    fn record(&mut self, errno: i32) {
        if errno != 0 && self.errno == 0 {
            self.errno = errno;
        }
    }

    /// Bytes a read or write moved.
    pub fn done(&self) -> u32 {
        self.done
    }

    /// Whether a read or write that met no error moved fewer bytes than
    /// asked (an answer with data would send what the buffer last held).
    pub fn short(&self) -> bool {
        match self.plan {
            IoPlan::Read { len, .. } | IoPlan::Write { len, .. } => {
                self.errno == 0 && self.done != len
            }
            _ => false,
        }
    }

    /// The outcome once nothing is in flight: the errno that failed it, or 0.
    pub fn errno(&self) -> i32 {
        if self.short() {
            Errno::EIO as i32
        } else {
            self.errno
        }
    }

    /// Whether its failure concerns durability (a flush, or a write or
    /// zeroing with FUA).
    pub fn durability(&self) -> bool {
        matches!(
            self.plan,
            IoPlan::Flush | IoPlan::Write { fua: true, .. } | IoPlan::WriteZeroes { fua: true, .. }
        )
    }
}

/// The rest of a read or write of which the backend transferred `done` bytes
/// (a short transfer): the same operation from where it stopped, with Force
/// Unit Access kept (an acknowledged FUA write is durable in every part).
/// None when nothing is left, or for other plans.
pub fn rest_of(plan: &IoPlan, done: u32) -> Option<IoPlan> {
    match *plan {
        IoPlan::Read { offset, len } if done < len => Some(IoPlan::Read {
            offset: offset + done as u64,
            len: len - done,
        }),
        IoPlan::Write { offset, len, fua } if done < len => Some(IoPlan::Write {
            offset: offset + done as u64,
            len: len - done,
            fua,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_transfers_continue_with_fua_kept() {
        let w = IoPlan::Write {
            offset: 4096,
            len: 12288,
            fua: true,
        };
        assert_eq!(
            rest_of(&w, 4096),
            Some(IoPlan::Write {
                offset: 8192,
                len: 8192,
                fua: true
            })
        );
        assert_eq!(rest_of(&w, 12288), None);
        let r = IoPlan::Read {
            offset: 0,
            len: 8192,
        };
        assert_eq!(
            rest_of(&r, 512),
            Some(IoPlan::Read {
                offset: 512,
                len: 7680
            })
        );
        assert_eq!(rest_of(&IoPlan::Flush, 0), None);
    }

    #[test]
    fn a_short_read_is_continued_and_a_stalled_one_fails() {
        // No backend is needed to decide: without `go_on` nothing is submitted.
        let mut op = Op::new(IoPlan::Read {
            offset: 0,
            len: 8192,
        });
        let mut io = crate::backend::exec::Inline::new(crate::base::wake::Mailbox::detached());
        let gate = Arc::new(WriteGate::default());
        let b = super::super::null::Null::default();
        // SAFETY: nothing is submitted (go_on is false).
        let after = unsafe { op.completed(4096, false, &b, &gate, DataRef::NONE, &mut io, 1) };
        assert_eq!(after, After::Over);
        assert!(op.short(), "4096 of 8192 bytes");
        assert_eq!(op.errno(), Errno::EIO as i32);
        let mut op = Op::new(IoPlan::Read {
            offset: 0,
            len: 8192,
        });
        // SAFETY: as above.
        let after = unsafe { op.completed(0, true, &b, &gate, DataRef::NONE, &mut io, 1) };
        assert_eq!(after, After::Over, "no progress: not continued");
        assert_eq!(op.errno(), Errno::EIO as i32);
        let mut dsm = Op::new(IoPlan::Dsm {
            nr: 1,
            deallocate: true,
        });
        // SAFETY: as above.
        unsafe {
            dsm.completed(
                -(Errno::EOPNOTSUPP as i32),
                true,
                &b,
                &gate,
                DataRef::NONE,
                &mut io,
                1,
            )
        };
        assert_eq!(dsm.errno(), 0, "an advisory deallocation");
    }
}
