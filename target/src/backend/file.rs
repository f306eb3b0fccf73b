//! Files and block devices, served through the worker's io_uring (O_DIRECT
//! where the file system allows it). A block device's discard (BLKDISCARD)
//! would block: it runs on the offload thread.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, OFlag};

use super::{Backend, BackendError, DataRef, Io, Submitted};
use crate::core::plan::IoPlan;

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
    let backend = Backend::File {
        file: Arc::new(file),
        path: path.to_path_buf(),
        is_block,
        direct,
    };
    Ok((backend, size, bs))
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

/// Starts `plan` on `file` (see [`super::submit`]).
///
/// # Safety
/// As [`super::submit`].
pub(super) unsafe fn submit(
    file: &Arc<File>,
    is_block: bool,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    io: &mut Io<'_>,
    ud: u64,
) -> Submitted {
    let fd = file.as_raw_fd();
    let one = |r: std::io::Result<()>| Submitted::one(r.map_err(|e| errno_of(&e)));
    match *plan {
        IoPlan::Read { offset, len } => {
            one(io.ring.read(fd, data.ptr, len, offset, data.fixed, ud))
        }
        IoPlan::Write { offset, len, fua } => one(io
            .ring
            .write(fd, data.ptr, len, offset, data.fixed, fua, ud)),
        // Reservation commands run on the namespace's state, compares on
        // the offload thread (backend::compare): never here.
        IoPlan::Resv { .. } | IoPlan::Compare { .. } => Submitted {
            in_flight: 0,
            errno: nix::libc::EOPNOTSUPP,
            done: 0,
        },
        IoPlan::Flush => one(io.ring.fdatasync(fd, ud)),
        // With FUA the worker follows the zeroing with an fdatasync.
        IoPlan::WriteZeroes { offset, len, .. } => {
            one(io.ring.fallocate(fd, offset, len, FALLOC_ZERO, ud))
        }
        IoPlan::Dsm { .. } if ranges.is_empty() => Submitted::default(),
        IoPlan::Dsm { .. } if is_block => {
            // BLKDISCARD blocks: it runs on the offload thread.
            let dev = file.clone();
            let ranges = ranges.to_vec();
            io.offload
                .run(io.mailbox, ud, move || discard_block(&dev, &ranges));
            Submitted {
                in_flight: 1,
                errno: 0,
                done: 0,
            }
        }
        IoPlan::Dsm { .. } => {
            let mut s = Submitted::default();
            for &(o, l) in ranges {
                match io.ring.fallocate(fd, o, l, FALLOC_PUNCH, ud) {
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
