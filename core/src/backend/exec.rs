//! How the engine runs backend work, injected: the queue core and the
//! backends ask an [`Executor`] to start an operation on a file descriptor,
//! to run a blocking [`Job`] on a thread (a namespace's lane, the offload
//! thread, the authentication pool), and where other threads post
//! completions. Each operation
//! completes once, as `(user data, result)`: the result of a read or write
//! is the bytes moved, of the rest 0 or more; errors are negative errnos.
//!
//! A worker runs them for real ([`Uring`]: its io_uring, the offload thread
//! and lanes); tests run them on the calling thread, one at a time and in
//! order, when they ask ([`Inline`]: no ring, no thread).

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use super::fair::{FairPool, Full};
use super::offload::{Lane, Offload};
use super::uring::Ring;
use crate::base::wake::Mailbox;

/// An inline operation's work.
type Work = Box<dyn FnOnce() -> i32 + Send + 'static>;

/// What a blocking [`Job`] is: how an executor's records (tests, logs)
/// name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// A Compare: the data read and compared.
    Compare,
    /// A fused Compare and Write, atomic against every other write.
    CompareAndWrite,
    /// A reservation command that syncs the state or waits for writes.
    Reservation,
    /// Set Features Reservation Persistence (syncs the state).
    Persistence,
    /// One step of a DH-HMAC-CHAP transaction (the costly arithmetic).
    Authentication,
    /// A block device's discard (BLKDISCARD blocks).
    Discard,
}

impl JobKind {
    /// Its name in records.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Compare => "compare",
            JobKind::CompareAndWrite => "compare_and_write",
            JobKind::Reservation => "reservation",
            JobKind::Persistence => "persistence",
            JobKind::Authentication => "authentication",
            JobKind::Discard => "discard",
        }
    }
}

/// Blocking work handed to an executor by name: the queue core and the
/// backends describe it (a named type per kind, next to the command it
/// serves), the executor decides where and when it runs, and its result
/// completes the operation it was started for (as an operation's: 0 or
/// more, or a negative errno).
pub trait Job: Send + 'static {
    /// What it is.
    fn kind(&self) -> JobKind;
    /// Does it (blocking: never on a worker).
    fn run(self: Box<Self>) -> i32;
}

/// Where backend work runs.
pub trait Executor {
    /// Reads `len` bytes at `offset` of `fd` into `buf` (in fixed buffer
    /// `fixed` of the worker's ring, if given).
    ///
    /// # Safety
    /// `buf` must stay valid for writes of `len` bytes, unaliased, until the
    /// operation completed; `fd` open as long.
    unsafe fn read(
        &mut self,
        fd: i32,
        buf: *mut u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        ud: u64,
    ) -> io::Result<()>;

    /// Writes `len` bytes from `buf` at `offset` of `fd`; `dsync` makes
    /// them durable before the completion (FUA).
    ///
    /// # Safety
    /// `buf` must stay valid for reads of `len` bytes until the operation
    /// completed; `fd` open as long.
    #[allow(clippy::too_many_arguments)]
    unsafe fn write(
        &mut self,
        fd: i32,
        buf: *const u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        dsync: bool,
        ud: u64,
    ) -> io::Result<()>;

    /// Makes `fd`'s written data durable.
    fn fdatasync(&mut self, fd: i32, ud: u64) -> io::Result<()>;

    /// fallocate(2) of `len` bytes at `offset` with `mode` (zero a range,
    /// punch a hole).
    fn fallocate(&mut self, fd: i32, offset: u64, len: u64, mode: i32, ud: u64) -> io::Result<()>;

    /// Runs `job` on `lane` after its earlier jobs (`None`: on the offload
    /// thread); its result completes `ud`.
    fn blocking(&mut self, lane: Option<&Arc<Lane>>, ud: u64, job: Box<dyn Job>);

    /// Runs `job` on `pool` in `key`'s turn; its result completes `ud`.
    /// Says why not (the job dropped) when the pool holds its bound of work.
    fn fair(
        &mut self,
        pool: &Arc<FairPool>,
        key: std::net::IpAddr,
        ud: u64,
        job: Box<dyn Job>,
    ) -> Result<(), Full>;

    /// Where other threads post completions of this executor's operations
    /// (librbd's callbacks, a write gate that opens).
    fn mailbox(&self) -> &Arc<Mailbox>;

    /// The io_uring behind it, if any (a transport polls descriptors and
    /// registers memory there).
    fn ring(&mut self) -> Option<&mut Ring> {
        None
    }
}

/// A worker's executor: its io_uring, the offload thread, the lanes.
pub struct Uring<'a> {
    /// The worker's ring.
    pub ring: &'a mut Ring,
    /// The offload thread.
    pub offload: &'a Offload,
    /// The worker's mailbox.
    pub mailbox: &'a Arc<Mailbox>,
}

impl Executor for Uring<'_> {
    unsafe fn read(
        &mut self,
        fd: i32,
        buf: *mut u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        ud: u64,
    ) -> io::Result<()> {
        self.ring.read(fd, buf, len, offset, fixed, ud)
    }

    unsafe fn write(
        &mut self,
        fd: i32,
        buf: *const u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        dsync: bool,
        ud: u64,
    ) -> io::Result<()> {
        self.ring.write(fd, buf, len, offset, fixed, dsync, ud)
    }

    fn fdatasync(&mut self, fd: i32, ud: u64) -> io::Result<()> {
        self.ring.fdatasync(fd, ud)
    }

    fn fallocate(&mut self, fd: i32, offset: u64, len: u64, mode: i32, ud: u64) -> io::Result<()> {
        self.ring.fallocate(fd, offset, len, mode, ud)
    }

    fn blocking(&mut self, lane: Option<&Arc<Lane>>, ud: u64, job: Box<dyn Job>) {
        match lane {
            Some(l) => l.run(self.mailbox, ud, move || job.run()),
            None => self.offload.run(self.mailbox, ud, move || job.run()),
        }
    }

    fn fair(
        &mut self,
        pool: &Arc<FairPool>,
        key: std::net::IpAddr,
        ud: u64,
        job: Box<dyn Job>,
    ) -> Result<(), Full> {
        pool.run(self.mailbox, key, ud, move || job.run())
            .map_err(|(_, full)| full)
    }

    fn mailbox(&self) -> &Arc<Mailbox> {
        self.mailbox
    }

    fn ring(&mut self) -> Option<&mut Ring> {
        Some(self.ring)
    }
}

/// An executor for tests: every operation runs on the calling thread, in
/// the order it was started, when [`Inline::run_next`] asks for the next
/// completion; blocking work runs after every operation started before it
/// completed (so a job that closes a write gate finds the writes it waits
/// for done). A lane can be held ([`Inline::hold`]): its jobs wait, as
/// behind a job that does not end, while the others run. Deterministic: no
/// ring, no thread, no clock.
pub struct Inline {
    ops: VecDeque<Queued>,
    mailbox: Arc<Mailbox>,
    held: Vec<usize>,
    /// Operations started, by kind, for tests that check what ran.
    pub started: Vec<&'static str>,
}

struct Queued {
    ud: u64,
    /// The lane it runs on (its address), if any.
    lane: Option<usize>,
    work: Work,
}

fn lane_key<T>(lane: &Arc<T>) -> usize {
    Arc::as_ptr(lane) as *const u8 as usize
}

/// A raw pointer carried into an inline operation (run on the thread that
/// started it).
struct Ptr(*mut u8);
// SAFETY: an inline operation runs on the thread that started it (the
// closure only needs `Send` to share the lanes' job type).
unsafe impl Send for Ptr {}

fn errno_result(r: nix::Result<usize>) -> i32 {
    match r {
        Ok(n) => n.min(i32::MAX as usize) as i32,
        Err(e) => -(e as i32),
    }
}

impl Inline {
    /// An executor whose mailbox wakes nobody.
    pub fn new(mailbox: Arc<Mailbox>) -> Inline {
        Inline {
            ops: VecDeque::new(),
            mailbox,
            held: Vec::new(),
            started: Vec::new(),
        }
    }

    /// Holds `lane` (a [`Lane`] or a [`FairPool`]): its jobs wait until
    /// [`Inline::release`].
    pub fn hold<T>(&mut self, lane: &Arc<T>) {
        self.held.push(lane_key(lane));
    }

    /// Lets `lane`'s jobs run again.
    pub fn release<T>(&mut self, lane: &Arc<T>) {
        self.held.retain(|&k| k != lane_key(lane));
    }

    /// Runs the next operation (or takes a completion another thread or a
    /// write gate posted) and returns its completion; `None` when nothing
    /// is left.
    pub fn run_next(&mut self) -> Option<(u64, i32)> {
        let mut posted = Vec::new();
        self.mailbox.take(&mut posted);
        if let Some(&(ud, res)) = posted.first() {
            for &(ud, res) in posted[1..].iter().rev() {
                self.ops.push_front(Queued {
                    ud,
                    lane: None,
                    work: Box::new(move || res),
                });
            }
            return Some((ud, res));
        }
        let i = self
            .ops
            .iter()
            .position(|q| q.lane.is_none_or(|l| !self.held.contains(&l)))?;
        let q = self.ops.remove(i)?;
        Some((q.ud, (q.work)()))
    }

    /// Whether no operation can run (none is queued, or only on held lanes).
    pub fn idle(&self) -> bool {
        self.ops
            .iter()
            .all(|q| q.lane.is_some_and(|l| self.held.contains(&l)))
    }

    fn push(&mut self, what: &'static str, ud: u64, work: Work) -> io::Result<()> {
        self.started.push(what);
        self.ops.push_back(Queued {
            ud,
            lane: None,
            work,
        });
        Ok(())
    }
}

impl Executor for Inline {
    unsafe fn read(
        &mut self,
        fd: i32,
        buf: *mut u8,
        len: u32,
        offset: u64,
        _fixed: Option<u16>,
        ud: u64,
    ) -> io::Result<()> {
        let p = Ptr(buf);
        self.push(
            "read",
            ud,
            Box::new(move || {
                let p = p;
                // SAFETY: the caller's guarantees: `fd` open and `buf` valid
                // and the request's alone until this completes.
                let (fd, b) = unsafe {
                    (
                        BorrowedFd::borrow_raw(fd),
                        std::slice::from_raw_parts_mut(p.0, len as usize),
                    )
                };
                errno_result(nix::sys::uio::pread(fd, b, offset as i64))
            }),
        )
    }

    unsafe fn write(
        &mut self,
        fd: i32,
        buf: *const u8,
        len: u32,
        offset: u64,
        _fixed: Option<u16>,
        dsync: bool,
        ud: u64,
    ) -> io::Result<()> {
        let p = Ptr(buf as *mut u8);
        self.push(
            "write",
            ud,
            Box::new(move || {
                let p = p;
                // SAFETY: as in `read`, the buffer only read.
                let (bfd, b) = unsafe {
                    (
                        BorrowedFd::borrow_raw(fd),
                        std::slice::from_raw_parts(p.0, len as usize),
                    )
                };
                let n = nix::sys::uio::pwrite(bfd, b, offset as i64);
                match n {
                    Ok(n) if dsync => match nix::unistd::fdatasync(fd) {
                        Ok(()) => errno_result(Ok(n)),
                        Err(e) => -(e as i32),
                    },
                    r => errno_result(r),
                }
            }),
        )
    }

    fn fdatasync(&mut self, fd: i32, ud: u64) -> io::Result<()> {
        self.push(
            "fdatasync",
            ud,
            // The descriptor is the namespace's, open until the operation
            // completed (the request holds the namespace).
            Box::new(move || nix::unistd::fdatasync(fd).map_or_else(|e| -(e as i32), |()| 0)),
        )
    }

    fn fallocate(&mut self, fd: i32, offset: u64, len: u64, mode: i32, ud: u64) -> io::Result<()> {
        self.push(
            "fallocate",
            ud,
            Box::new(move || {
                // As in `fdatasync`.
                let mode = nix::fcntl::FallocateFlags::from_bits_retain(mode);
                nix::fcntl::fallocate(fd, mode, offset as i64, len as i64)
                    .map_or_else(|e| -(e as i32), |()| 0)
            }),
        )
    }

    fn blocking(&mut self, lane: Option<&Arc<Lane>>, ud: u64, job: Box<dyn Job>) {
        self.started.push(job.kind().name());
        self.ops.push_back(Queued {
            ud,
            lane: lane.map(lane_key),
            work: Box::new(move || job.run()),
        });
    }

    /// As a lane of its own (holdable); the pool's bounds and turns are
    /// the pool's own tests'.
    fn fair(
        &mut self,
        pool: &Arc<FairPool>,
        _key: std::net::IpAddr,
        ud: u64,
        job: Box<dyn Job>,
    ) -> Result<(), Full> {
        self.started.push(job.kind().name());
        self.ops.push_back(Queued {
            ud,
            lane: Some(lane_key(pool)),
            work: Box::new(move || job.run()),
        });
        Ok(())
    }

    fn mailbox(&self) -> &Arc<Mailbox> {
        &self.mailbox
    }
}
