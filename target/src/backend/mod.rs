//! Backends: files and block devices (served through the workers' io_uring)
//! and a null backend for fabric benchmarks, behind one small interface:
//! [`submit`] starts an operation and says how many completions will come
//! back; each comes back as `(user data, result)`, from the worker's ring or,
//! for the few calls io_uring cannot make without blocking a worker, from the
//! [`offload::Offload`] thread through the worker's completion mailbox. A
//! backend with a client library of its own (completing through an eventfd)
//! plugs into that same mailbox.

pub mod null;
pub mod offload;
pub mod uring;

use std::sync::Arc;

use crate::io::IoPlan;

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, OFlag};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::config::{BackendConfig, NamespaceConfig};
use crate::namespace::Namespace;

/// Errors opening a backing store.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// open/stat/ioctl failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The path.
        path: String,
        /// What was attempted.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The store is unusable.
    #[error("{path}: {reason}")]
    Invalid {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// What backs a namespace.
#[derive(Debug)]
pub enum Backend {
    /// A regular file or block device.
    File {
        /// The open file (O_DIRECT when `direct`).
        file: File,
        /// Its path.
        path: PathBuf,
        /// A block device (discard by ioctl) rather than a file (punch hole).
        is_block: bool,
        /// Opened with O_DIRECT.
        direct: bool,
    },
    /// Discards writes; reads return the buffer as it is.
    Null,
}

impl Backend {
    /// A short description for logs and identifiers.
    pub fn describe(&self) -> String {
        match self {
            Backend::File { path, .. } => path.display().to_string(),
            Backend::Null => "null".into(),
        }
    }
    /// The raw fd (-1 for null).
    pub fn fd(&self) -> i32 {
        match self {
            Backend::File { file, .. } => file.as_raw_fd(),
            Backend::Null => -1,
        }
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

/// Opens the store of a configured namespace and builds the [`Namespace`].
pub fn open_namespace(subnqn: &str, cfg: &NamespaceConfig) -> Result<Namespace, BackendError> {
    match &cfg.backend {
        BackendConfig::Null { size } => {
            let bs = cfg.block_size.unwrap_or(512);
            Ok(Namespace::new(
                subnqn,
                cfg.nsid,
                Backend::Null,
                *size,
                bs,
                cfg.readonly,
            ))
        }
        BackendConfig::File { path } => {
            let open = |direct: bool| {
                let mut o = OpenOptions::new();
                o.read(true).write(!cfg.readonly);
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
            let (size, native_bs) = if is_block {
                let mut size: u64 = 0;
                let mut ssz: std::ffi::c_int = 0;
                // SAFETY: BLKGETSIZE64 writes a u64 and BLKSSZGET an int into valid
                // locals; the descriptor is the open block device.
                unsafe { blkgetsize64(file.as_raw_fd(), &mut size) }
                    .map_err(|e| io_err(path, "BLKGETSIZE64", e.into()))?;
                // SAFETY: as above.
                unsafe { blksszget(file.as_raw_fd(), &mut ssz) }
                    .map_err(|e| io_err(path, "BLKSSZGET", e.into()))?;
                (size, ssz.max(512) as u32)
            } else {
                (meta.len(), 4096)
            };
            let bs = cfg.block_size.unwrap_or(native_bs);
            if bs < native_bs && is_block {
                return Err(BackendError::Invalid {
                    path: path.display().to_string(),
                    reason: format!("block_size {bs} is smaller than the device's logical block size {native_bs}"),
                });
            }
            if size < bs as u64 {
                return Err(BackendError::Invalid {
                    path: path.display().to_string(),
                    reason: format!("size {size} is smaller than one block ({bs} bytes)"),
                });
            }
            if size % bs as u64 != 0 {
                tracing::warn!(path = %path.display(), size, bs, "size is not a multiple of the block size; the tail is not exported");
            }
            let backend = Backend::File {
                file,
                path: path.clone(),
                is_block,
                direct,
            };
            Ok(Namespace::new(
                subnqn,
                cfg.nsid,
                backend,
                size,
                bs,
                cfg.readonly,
            ))
        }
    }
}

/// Where an operation's data is in memory.
#[derive(Debug, Clone, Copy)]
pub struct DataRef {
    /// Start of the data (the request's buffer).
    pub ptr: *mut u8,
    /// The io_uring fixed buffer that holds it, if any.
    pub fixed: Option<u16>,
}

/// How a submission went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Submitted {
    /// Operations now in flight, each of which completes once.
    pub in_flight: u16,
    /// An error that stopped the submission (0: none). With `in_flight` > 0
    /// the submitted ones must still complete before the request answers.
    pub errno: i32,
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

/// Starts `plan` on `ns`. `data` is the request's data buffer (reads and
/// writes); `ranges` the byte ranges of a deallocating Dataset Management
/// command. Completions carry `ud`.
///
/// # Safety
/// `data` must stay valid (and, for reads, unaliased) until every operation
/// submitted completes; `ns` (its file) is kept alive by the caller as long.
#[allow(clippy::too_many_arguments)]
pub unsafe fn submit(
    ns: &Arc<Namespace>,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    ring: &mut uring::Ring,
    offload: &offload::Offload,
    reply: &Arc<offload::Mailbox>,
    ud: u64,
) -> Submitted {
    let Backend::File { is_block, .. } = &ns.backend else {
        return Submitted::default();
    };
    let fd = ns.backend.fd();
    let one = |r: std::io::Result<()>| match r {
        Ok(()) => Submitted {
            in_flight: 1,
            errno: 0,
        },
        Err(e) => Submitted {
            in_flight: 0,
            errno: errno_of(&e),
        },
    };
    match *plan {
        IoPlan::Read { offset, len } => one(ring.read(fd, data.ptr, len, offset, data.fixed, ud)),
        IoPlan::Write { offset, len, fua } => {
            one(ring.write(fd, data.ptr, len, offset, data.fixed, fua, ud))
        }
        IoPlan::Flush => one(ring.fdatasync(fd, ud)),
        // With FUA the worker follows the zeroing with an fdatasync.
        IoPlan::WriteZeroes { offset, len, .. } => {
            one(ring.fallocate(fd, offset, len, FALLOC_ZERO, ud))
        }
        IoPlan::Dsm { .. } if ranges.is_empty() => Submitted::default(),
        IoPlan::Dsm { .. } if *is_block => {
            // BLKDISCARD blocks: it runs on the offload thread.
            let ns = ns.clone();
            let ranges = ranges.to_vec();
            offload.run(reply, ud, move || discard_block(&ns, &ranges));
            Submitted {
                in_flight: 1,
                errno: 0,
            }
        }
        IoPlan::Dsm { .. } => {
            let mut s = Submitted::default();
            for &(o, l) in ranges {
                match ring.fallocate(fd, o, l, FALLOC_PUNCH, ud) {
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
fn discard_block(ns: &Namespace, ranges: &[(u64, u64)]) -> i32 {
    for &(o, l) in ranges {
        let range = [o, l];
        // SAFETY: BLKDISCARD reads two u64s from a valid local array; the
        // descriptor is the namespace's open block device.
        if let Err(e) = unsafe { blkdiscard(ns.backend.fd(), &range) } {
            return -(e as i32);
        }
    }
    0
}
