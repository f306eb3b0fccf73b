//! Files and block devices, served through the worker's io_uring (O_DIRECT
//! where the file system allows it). A block device's discard (BLKDISCARD)
//! would block: it runs on the offload thread. A RAM disk's reads and
//! writes run on the worker itself (see [`runs_inline`]).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, OFlag};

use super::compare::{self, aligned, MISCOMPARE, WRITE_FAILED};
use super::exec::{Job, JobKind};
use super::{Backend, BackendError, DataRef, Executor, Storage, Submitted};
use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;

/// A regular file or block device.
#[derive(Debug)]
pub struct FileStore {
    /// The open file (O_DIRECT when `direct`); shared with the offload
    /// thread while it discards.
    file: Arc<File>,
    path: PathBuf,
    /// What identifies its data ([`super::data_key`]).
    key: String,
    /// A block device (discard by ioctl) rather than a file (punch hole).
    is_block: bool,
    /// Opened with O_DIRECT; without it, a failed flush is final (the page
    /// cache lost the data).
    direct: bool,
    /// Reads and writes run on the worker, synchronously ([`runs_inline`]:
    /// a RAM disk).
    inline: bool,
}

impl Storage for FileStore {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn identity(&self) -> String {
        self.key.clone()
    }

    fn path_identity(&self) -> String {
        self.describe()
    }

    fn status(&self) -> (&'static str, Option<String>) {
        let kind = if self.is_block { "block" } else { "file" };
        (kind, Some(self.describe()))
    }

    fn size_now(&self) -> std::io::Result<Option<u64>> {
        size(&self.file, self.is_block).map(Some)
    }

    fn grow(&self, bytes: u64) -> Result<(), String> {
        let path = self.path.display();
        if self.is_block {
            return Err(format!(
                "{path} is a block device: its size is the device's (grow it, with lvextend \
                 say, then resize without --size)"
            ));
        }
        // Sparse: the new blocks read as zeroes until written.
        self.file
            .set_len(bytes)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EBADF) | Some(libc::EINVAL) => format!("{path} is served read-only"),
                _ => format!("{path} cannot grow: {e}"),
            })
    }

    fn gated(&self) -> bool {
        true
    }

    fn flush_failure_is_sticky(&self) -> bool {
        !self.direct
    }

    unsafe fn submit(
        &self,
        _gate: &Arc<WriteGate>,
        plan: &IoPlan,
        data: DataRef,
        ranges: &[(u64, u64)],
        io: &mut dyn Executor,
        ud: u64,
    ) -> Submitted {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { submit(self, plan, data, ranges, io, ud) }
    }

    fn flush(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| compare::errno_of(&e))
    }

    fn compare_and_write(
        &self,
        gate: &WriteGate,
        offset: u64,
        cmp: &[u8],
        data: &[u8],
        fua: bool,
        allowed: &dyn Fn() -> Result<(), nvme::Status>,
    ) -> i32 {
        // The gate closed makes the pair atomic against every other write
        // of this target, and no Preempt and Abort passes between the
        // check of the host's access and the write.
        let _closed = gate.close();
        if let Err(st) = allowed() {
            return compare::refused(st);
        }
        let mut store = Vec::new();
        let have = aligned(&mut store, cmp.len());
        match self.read_at(offset, have) {
            Ok(()) if *have == *cmp => {}
            Ok(()) => return MISCOMPARE,
            Err(e) => return e,
        }
        let mut out = Vec::new();
        let buf = aligned(&mut out, data.len());
        buf.copy_from_slice(data);
        if let Err(e) = self.file.write_all_at(buf, offset) {
            return WRITE_FAILED + compare::errno_of(&e);
        }
        if fua {
            if let Err(e) = self.file.sync_data() {
                return WRITE_FAILED + compare::errno_of(&e);
            }
        }
        0
    }
}

// Block-device ioctls (linux/fs.h): BLKGETSIZE64 = _IOR(0x12, 114, u64); BLKSSZGET and
// BLKDISCARD are old-style numbers without a size encoding.
nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
nix::ioctl_read_bad!(blksszget, 0x1268, std::ffi::c_int);
nix::ioctl_write_ptr_bad!(blkdiscard, 0x1277, [u64; 2]);

fn io_err(path: &Path, what: &'static str, source: std::io::Error) -> BackendError {
    BackendError::Io {
        path: path.display().to_string(),
        what,
        source,
    }
}

/// The size in bytes of an open file or block device.
pub fn size(file: &std::fs::File, is_block: bool) -> std::io::Result<u64> {
    if is_block {
        let mut size: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes a u64 into a valid local; the
        // descriptor is the open block device.
        unsafe { blkgetsize64(file.as_raw_fd(), &mut size) }?;
        Ok(size)
    } else {
        Ok(file.metadata()?.len())
    }
}

/// Opens a file or block device: the backend, its size in bytes and the
/// block size to export (`block_size`, else the device's logical block size,
/// 4096 for a file).
pub fn open(
    path: &Path,
    block_size: Option<u32>,
    readonly: bool,
) -> Result<(Backend, u64, u32), BackendError> {
    let open = |direct: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(!readonly);
        if direct {
            o.custom_flags(OFlag::O_DIRECT.bits());
        }
        o.open(path)
    };
    let (file, direct) = match open(true) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(Errno::EINVAL as i32) => {
            tracing::warn!(path = %path.display(), "O_DIRECT not supported here; using buffered I/O");
            (open(false).map_err(|e| io_err(path, "open", e))?, false)
        }
        Err(e) => return Err(io_err(path, "open", e)),
    };
    let meta = file.metadata().map_err(|e| io_err(path, "stat", e))?;
    let is_block = meta.file_type().is_block_device();
    let size = size(&file, is_block).map_err(|e| io_err(path, "size", e))?;
    let native_bs = if is_block {
        let mut ssz: std::ffi::c_int = 0;
        // SAFETY: BLKSSZGET writes an int into a valid local; the descriptor
        // is the open block device.
        unsafe { blksszget(file.as_raw_fd(), &mut ssz) }
            .map_err(|e| io_err(path, "BLKSSZGET", e.into()))?;
        ssz.max(512) as u32
    } else {
        4096
    };
    let bs = block_size.unwrap_or(native_bs);
    if bs < native_bs && is_block {
        return Err(BackendError::Invalid {
            path: path.display().to_string(),
            reason: format!(
                "block_size {bs} is smaller than the device's logical block size {native_bs}"
            ),
        });
    }
    if size % bs as u64 != 0 {
        tracing::warn!(path = %path.display(), size, bs, "size is not a multiple of the block size; the tail is not exported");
    }
    let inline = runs_inline(&meta);
    if inline {
        tracing::debug!(path = %path.display(), "a RAM disk: reads and writes run on the worker");
    }
    let backend: Backend = Box::new(FileStore {
        file: Arc::new(file),
        path: path.to_path_buf(),
        key: super::data_key::data_key(path, &meta),
        is_block,
        direct,
        inline,
    });
    Ok((backend, size, bs))
}

/// The major number of brd's RAM disks (`RAMDISK_MAJOR`, linux/major.h).
const RAMDISK_MAJOR: u64 = 1;

/// Whether a store's reads and writes run synchronously on the worker rather
/// than through its ring: a RAM disk (brd). brd copies the data in the
/// context of whoever submits the I/O and, before Linux 6.4, cannot take
/// I/O without blocking (no NOWAIT), so io_uring hands each of its I/Os to
/// an io-wq thread: two thread switches per I/O to make the same copy on
/// another thread. Anything that may wait on a device stays on the ring.
pub fn runs_inline(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_block_device() && nix::sys::stat::major(meta.rdev()) == RAMDISK_MAJOR
}

/// Reads (or writes, `write`) `len` bytes at `offset` to (from) `ptr` on
/// the calling thread, until done or the first error or end of store: what
/// a completion would say, as the bytes moved or an errno.
///
/// # Safety
/// `ptr` must be valid for `len` bytes (for a read, writable and unaliased).
unsafe fn transfer_now(fd: i32, write: bool, ptr: *mut u8, len: u32, offset: u64) -> Submitted {
    // SAFETY: the descriptor is the namespace's open file, which outlives the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut done = 0u32;
    while done < len {
        let at = (offset + done as u64) as i64;
        // SAFETY: the caller's guarantee on `ptr`/`len`; `done < len`.
        let rest = unsafe { ptr.add(done as usize) };
        let n = (len - done) as usize;
        let r = if write {
            // SAFETY: as above, read-only here.
            nix::sys::uio::pwrite(fd, unsafe { std::slice::from_raw_parts(rest, n) }, at)
        } else {
            // SAFETY: as above; the caller keeps the buffer unaliased.
            nix::sys::uio::pread(fd, unsafe { std::slice::from_raw_parts_mut(rest, n) }, at)
        };
        match r {
            Ok(0) => break,
            Ok(n) => done += n as u32,
            Err(Errno::EINTR) => {}
            Err(e) => {
                return Submitted {
                    in_flight: 0,
                    errno: e as i32,
                    done,
                }
            }
        }
    }
    Submitted {
        in_flight: 0,
        errno: 0,
        done,
    }
}

const FALLOC_PUNCH: i32 = FallocateFlags::FALLOC_FL_PUNCH_HOLE
    .union(FallocateFlags::FALLOC_FL_KEEP_SIZE)
    .bits();
const FALLOC_ZERO: i32 = FallocateFlags::FALLOC_FL_ZERO_RANGE
    .union(FallocateFlags::FALLOC_FL_KEEP_SIZE)
    .bits();

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(Errno::EIO as i32)
}

/// Starts `plan` on `store` (see [`Storage::submit`]).
///
/// # Safety
/// As [`Storage::submit`].
unsafe fn submit(
    store: &FileStore,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    io: &mut dyn Executor,
    ud: u64,
) -> Submitted {
    let (file, is_block, inline) = (&store.file, store.is_block, store.inline);
    let fd = file.as_raw_fd();
    let one = |r: std::io::Result<()>| Submitted::one(r.map_err(|e| errno_of(&e)));
    match *plan {
        // SAFETY: the caller's guarantees on `data`, for the plan's length.
        IoPlan::Read { offset, len } if inline => unsafe {
            transfer_now(fd, false, data.ptr, len, offset)
        },
        // A write with FUA goes through the ring, which makes it durable.
        // SAFETY: as above.
        IoPlan::Write {
            offset,
            len,
            fua: false,
        } if inline => unsafe { transfer_now(fd, true, data.ptr, len, offset) },
        IoPlan::Read { offset, len } => {
            // SAFETY: the caller's guarantees on `data`, for the plan's length.
            one(unsafe { io.read(fd, data.ptr, len, offset, data.fixed, ud) })
        }
        // SAFETY: as above.
        IoPlan::Write { offset, len, fua } => {
            one(unsafe { io.write(fd, data.ptr, len, offset, data.fixed, fua, ud) })
        }
        // Reservation commands run on the namespace's state, compares on
        // the offload thread (backend::compare): never here.
        IoPlan::Resv { .. } | IoPlan::Compare { .. } | IoPlan::Auth { .. } => Submitted {
            in_flight: 0,
            errno: nix::libc::EOPNOTSUPP,
            done: 0,
        },
        IoPlan::Flush => one(io.fdatasync(fd, ud)),
        // With FUA the worker follows the zeroing with an fdatasync.
        IoPlan::WriteZeroes { offset, len, .. } => {
            one(io.fallocate(fd, offset, len, FALLOC_ZERO, ud))
        }
        IoPlan::Dsm { .. } if ranges.is_empty() => Submitted::default(),
        IoPlan::Dsm { .. } if is_block => {
            // BLKDISCARD blocks: it runs on the offload thread.
            let job = Discard {
                dev: file.clone(),
                ranges: ranges.to_vec(),
            };
            io.blocking(None, ud, Box::new(job));
            Submitted {
                in_flight: 1,
                errno: 0,
                done: 0,
            }
        }
        IoPlan::Dsm { .. } => {
            let mut s = Submitted::default();
            for &(o, l) in ranges {
                match io.fallocate(fd, o, l, FALLOC_PUNCH, ud) {
                    Ok(()) => s.in_flight += 1,
                    Err(e) => {
                        s.errno = errno_of(&e);
                        break;
                    }
                }
            }
            s
        }
    }
}

/// Discards byte ranges of a block device (blocking; on the offload thread).
/// Returns 0 or a negative errno, as io_uring does.
/// A block device's discard of `ranges` (bytes: offset, length), as the
/// executor's named job: BLKDISCARD blocks.
struct Discard {
    dev: Arc<File>,
    ranges: Vec<(u64, u64)>,
}

impl Job for Discard {
    fn kind(&self) -> JobKind {
        JobKind::Discard
    }

    fn run(self: Box<Self>) -> i32 {
        discard_block(&self.dev, &self.ranges)
    }
}

fn discard_block(dev: &File, ranges: &[(u64, u64)]) -> i32 {
    for &(o, l) in ranges {
        let range = [o, l];
        // SAFETY: BLKDISCARD reads two u64s from a valid local array; the
        // descriptor is an open block device.
        if let Err(e) = unsafe { blkdiscard(dev.as_raw_fd(), &range) } {
            return -(e as i32);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nvmf-file-{tag}-{}", std::process::id()))
    }

    #[test]
    fn a_regular_file_goes_through_the_ring() {
        let path = scratch("ring");
        std::fs::write(&path, [0u8; 512]).unwrap();
        assert!(!runs_inline(&std::fs::metadata(&path).unwrap()));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_transfer_on_the_worker_moves_every_byte_or_says_how_many() {
        let path = scratch("now");
        std::fs::write(&path, [7u8; 6000]).unwrap();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let fd = f.as_raw_fd();
        let mut data = vec![0xA5u8; 4096];
        // SAFETY: `data` holds 4096 bytes, used by nothing else meanwhile.
        let w = unsafe { transfer_now(fd, true, data.as_mut_ptr(), 4096, 1024) };
        assert_eq!(
            w,
            Submitted {
                in_flight: 0,
                errno: 0,
                done: 4096
            }
        );
        let mut back = vec![0u8; 4096];
        // SAFETY: as above.
        let r = unsafe { transfer_now(fd, false, back.as_mut_ptr(), 4096, 1024) };
        assert_eq!(r.done, 4096);
        assert_eq!(back, data);
        // The store ends at 6000: a read past it is short, without an error
        // (the request fails as a short transfer).
        // SAFETY: as above.
        let short = unsafe { transfer_now(fd, false, back.as_mut_ptr(), 4096, 4096) };
        assert_eq!((short.done, short.errno), (1904, 0));
        // A descriptor that is not open for writing: the errno.
        let ro = File::open(&path).unwrap();
        // SAFETY: as above.
        let e = unsafe { transfer_now(ro.as_raw_fd(), true, data.as_mut_ptr(), 512, 0) };
        assert_eq!((e.done, e.errno), (0, Errno::EBADF as i32));
        std::fs::remove_file(&path).unwrap();
    }
}
