//! One io_uring per worker. Each data-buffer pool of the worker (one per RDMA
//! device) is registered as a fixed buffer, the same memory its RDMA memory
//! region covers: data goes between the wire and the disk without a copy.
//! In-capsule data is written from the receive buffer it arrived in, without
//! a fixed buffer. The ring also waits for the worker's file descriptors
//! (poll), so one `io_uring_enter` sleeps on disk completions, the RDMA
//! completion channels, the RDMA-CM channel and the worker's eventfd at once.

use std::io;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use nix::errno::Errno;
use nix::poll::PollFlags;

/// Fixed-buffer slots a ring reserves (two per RDMA device a worker serves:
/// its data pool and its shared receive queue's buffers).
pub const FIXED_SLOTS: u32 = 16;

/// io-wq workers per ring for file and block I/O.
const IOWQ_BOUNDED: u32 = 4;

/// How a [`Ring::wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A completion arrived, or a signal or a full ring cut the sleep short.
    Event,
    /// The timeout passed with no completion.
    Timeout,
}

/// A worker's ring.
pub struct Ring {
    ring: IoUring,
    queued: usize,
    /// Operations submitted whose completion has not been reaped.
    pub inflight: usize,
}

impl Ring {
    /// Creates a ring of `entries` with [`FIXED_SLOTS`] empty fixed-buffer slots.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let ring = IoUring::builder().build(entries)?;
        ring.submitter().register_buffers_sparse(FIXED_SLOTS)?;
        // Operations a device cannot take without blocking go to the kernel's
        // io-wq threads (they show as iou-wrk-* threads of the process and
        // exit when idle): a few per ring, not one per operation in flight.
        ring.submitter()
            .register_iowq_max_workers(&mut [IOWQ_BOUNDED, 1])?;
        Ok(Ring {
            ring,
            queued: 0,
            inflight: 0,
        })
    }

    /// Registers `[base, base+len)` as fixed buffer `index`.
    ///
    /// # Safety
    /// The memory must stay mapped for the life of the ring.
    pub unsafe fn register_fixed(
        &mut self,
        index: u16,
        base: *mut u8,
        len: usize,
    ) -> io::Result<()> {
        // libc: io-uring's registration API takes libc's iovec type.
        let iov = libc::iovec {
            iov_base: base as *mut std::ffi::c_void,
            iov_len: len,
        };
        // SAFETY: the caller keeps the memory mapped while the ring lives.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(index as u32, &[iov], None)
        }
    }

    /// Empties fixed buffer `index` (the ring no longer refers to its memory
    /// once operations that used it completed).
    pub fn unregister_fixed(&mut self, index: u16) -> io::Result<()> {
        let iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: an empty entry names no memory.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(index as u32, &[iov], None)
        }
    }

    fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry built here names memory inside the registered
            // buffer or file descriptors that outlive the operation (the queue
            // waits for all in-flight operations before it frees anything).
            let r = unsafe { self.ring.submission().push(&e) };
            match r {
                Ok(()) => {
                    self.queued += 1;
                    self.inflight += 1;
                    return Ok(());
                }
                Err(_) => {
                    self.ring.submit()?;
                    self.queued = 0;
                }
            }
        }
    }

    /// Queues a read of `len` bytes at `offset` into `buf`, which lies in
    /// fixed buffer `fixed` if given.
    pub fn read(
        &mut self,
        fd: i32,
        buf: *mut u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        ud: u64,
    ) -> io::Result<()> {
        let e = match fixed {
            Some(i) => opcode::ReadFixed::new(types::Fd(fd), buf, len, i)
                .offset(offset)
                .build(),
            None => opcode::Read::new(types::Fd(fd), buf, len)
                .offset(offset)
                .build(),
        };
        self.push(e.user_data(ud))
    }

    /// Queues a write from `buf` (in fixed buffer `fixed` if given); `dsync`
    /// makes it durable before completion (FUA).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        fd: i32,
        buf: *const u8,
        len: u32,
        offset: u64,
        fixed: Option<u16>,
        dsync: bool,
        ud: u64,
    ) -> io::Result<()> {
        // libc: nix has no RWF_* (preadv2/pwritev2) flags.
        let flags = if dsync { libc::RWF_DSYNC } else { 0 };
        let e = match fixed {
            Some(i) => opcode::WriteFixed::new(types::Fd(fd), buf, len, i)
                .offset(offset)
                .rw_flags(flags)
                .build(),
            None => opcode::Write::new(types::Fd(fd), buf, len)
                .offset(offset)
                .rw_flags(flags)
                .build(),
        };
        self.push(e.user_data(ud))
    }

    /// Queues an fdatasync.
    pub fn fdatasync(&mut self, fd: i32, ud: u64) -> io::Result<()> {
        self.push(
            opcode::Fsync::new(types::Fd(fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(ud),
        )
    }

    /// Queues an fallocate (zero range, punch hole).
    pub fn fallocate(
        &mut self,
        fd: i32,
        offset: u64,
        len: u64,
        mode: i32,
        ud: u64,
    ) -> io::Result<()> {
        self.push(
            opcode::Fallocate::new(types::Fd(fd), len)
                .offset(offset)
                .mode(mode)
                .build()
                .user_data(ud),
        )
    }

    /// Queues a one-shot poll for readability of `fd`.
    pub fn poll_in(&mut self, fd: i32, ud: u64) -> io::Result<()> {
        self.push(
            opcode::PollAdd::new(types::Fd(fd), PollFlags::POLLIN.bits() as u32)
                .build()
                .user_data(ud),
        )
    }

    /// Queues a one-shot poll for writability of `fd`.
    pub fn poll_out(&mut self, fd: i32, ud: u64) -> io::Result<()> {
        self.push(
            opcode::PollAdd::new(types::Fd(fd), PollFlags::POLLOUT.bits() as u32)
                .build()
                .user_data(ud),
        )
    }

    /// Cancels the poll queued with user data `target`; the cancel completes
    /// with user data `ud` (and the poll, if it had not, with -ECANCELED).
    pub fn poll_cancel(&mut self, target: u64, ud: u64) -> io::Result<()> {
        self.push(opcode::PollRemove::new(target).build().user_data(ud))
    }

    /// Submits queued entries without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        if self.queued > 0 {
            self.ring.submit()?;
            self.queued = 0;
        }
        Ok(())
    }

    /// Submits and sleeps until a completion arrives or `timeout` passes.
    /// Returns how it ended: [`Wake::Timeout`] when the time passed with
    /// no completion.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Wake> {
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        let wake = match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Wake::Event,
            Err(e) => match e.raw_os_error().map(Errno::from_raw) {
                Some(Errno::ETIME) => Wake::Timeout,
                Some(Errno::EINTR | Errno::EBUSY) => Wake::Event,
                _ => return Err(e),
            },
        };
        self.queued = 0;
        Ok(wake)
    }

    /// Takes up to `out.len()` completions as (user_data, result).
    pub fn reap(&mut self, out: &mut [(u64, i32)]) -> usize {
        let mut n = 0;
        for c in self.ring.completion() {
            out[n] = (c.user_data(), c.result());
            n += 1;
            if n == out.len() {
                break;
            }
        }
        self.inflight -= n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_wait_says_whether_it_only_timed_out() {
        let mut ring = Ring::new(8).unwrap();
        assert_eq!(ring.wait(Duration::from_millis(1)).unwrap(), Wake::Timeout);
        let (mut a, b) = UnixStream::pair().unwrap();
        ring.poll_in(b.as_raw_fd(), 7).unwrap();
        a.write_all(b"x").unwrap();
        assert_eq!(ring.wait(Duration::from_secs(5)).unwrap(), Wake::Event);
        let mut out = [(0u64, 0i32); 4];
        assert_eq!(ring.reap(&mut out), 1);
        assert_eq!(out[0].0, 7);
    }
}
