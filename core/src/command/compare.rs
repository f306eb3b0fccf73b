//! Compare, and fused Compare and Write, as the executor's named jobs: the
//! queue core describes them (the namespace, the range, the requests'
//! buffers) and an executor runs them off the worker, where the blocking
//! read and write may wait (`backend::compare` does them for every store).

use std::sync::Arc;

use nvme::Status;

use crate::backend::compare;
use crate::backend::exec::{Job, JobKind};
use crate::command::reservation::admit;
use crate::model::controller::Controller;
use crate::model::ns_cache::NsRef;
use crate::reservation::Access;

/// A request's data buffer, lent to a job: `len` bytes at `ptr`.
struct Lent {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the buffer is its request's and untouched by the worker while the
// job is in flight (the request counts it as a backend operation), so the
// job's thread is its only user; `Lent::new`'s caller promised as much.
unsafe impl Send for Lent {}

impl Lent {
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, and nothing may write
    /// them, until the job holding it completed (the request counts the job
    /// as a backend operation in flight).
    unsafe fn new(ptr: *const u8, len: u32) -> Lent {
        Lent {
            ptr,
            len: len as usize,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s promise.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A Compare: the namespace's data at `offset` read and compared with the
/// request's; 0, [`compare::MISCOMPARE`] or a negative errno.
pub struct CompareJob {
    ns: NsRef,
    offset: u64,
    cmp: Lent,
}

impl CompareJob {
    /// Compares `len` bytes at `cmp` with `ns`'s data at byte `offset`.
    ///
    /// # Safety
    /// `cmp` must be valid for reads of `len` bytes, unwritten, until the
    /// job completed.
    pub unsafe fn new(ns: NsRef, offset: u64, cmp: *const u8, len: u32) -> CompareJob {
        CompareJob {
            ns,
            offset,
            // SAFETY: the caller's promise.
            cmp: unsafe { Lent::new(cmp, len) },
        }
    }
}

impl Job for CompareJob {
    fn kind(&self) -> JobKind {
        JobKind::Compare
    }

    fn run(self: Box<Self>) -> i32 {
        compare::compare(&*self.ns.backend, self.offset, self.cmp.bytes())
    }
}

/// A fused Compare and Write: compared and, when equal, written, with no
/// other write between (`compare::compare_and_write`'s results). The host's
/// reservation access is checked where the store says (inside the closed
/// write gate on a local store).
pub struct CompareAndWriteJob {
    ns: NsRef,
    ctrl: Option<Arc<Controller>>,
    offset: u64,
    fua: bool,
    cmp: Lent,
    data: Lent,
}

impl CompareAndWriteJob {
    /// Compares `len` bytes at `cmp` with `ns`'s data at `offset` and
    /// writes `len` bytes at `data` there when equal, for `ctrl`'s host.
    ///
    /// # Safety
    /// Both buffers must be valid for reads of `len` bytes, unwritten,
    /// until the job completed.
    pub unsafe fn new(
        ns: NsRef,
        ctrl: Option<Arc<Controller>>,
        offset: u64,
        fua: bool,
        (cmp, data): (*const u8, *const u8),
        len: u32,
    ) -> CompareAndWriteJob {
        CompareAndWriteJob {
            ns,
            ctrl,
            offset,
            fua,
            // SAFETY: the caller's promise, for both.
            cmp: unsafe { Lent::new(cmp, len) },
            data: unsafe { Lent::new(data, len) },
        }
    }
}

impl Job for CompareAndWriteJob {
    fn kind(&self) -> JobKind {
        JobKind::CompareAndWrite
    }

    fn run(self: Box<Self>) -> i32 {
        let ns = &self.ns;
        let allowed = || match &self.ctrl {
            Some(c) => admit(ns, c, Access::Write),
            None => Err(Status::CMD_SEQ_ERROR),
        };
        compare::compare_and_write(
            &*ns.backend,
            &ns.gate,
            self.offset,
            self.cmp.bytes(),
            self.data.bytes(),
            self.fua,
            allowed,
        )
    }
}
