//! Backends: files and block devices (served through the workers' io_uring),
//! Ceph RBD images (librbd) and a null backend for fabric benchmarks, behind
//! one small interface: [`submit`] starts an operation and says how many
//! completions will come back; each comes back as `(user data, result)`, from
//! the worker's ring or through the worker's completion [`crate::core::wake::Mailbox`]
//! (which wakes the worker by its eventfd): from the [`offload::Offload`]
//! thread for the few calls io_uring cannot make without blocking a worker,
//! and from librbd's own threads for RBD.

pub mod compare;
pub mod file;
pub mod null;
pub mod offload;
pub mod op;
pub mod rbd;
pub mod uring;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::core::plan::IoPlan;

use crate::config::{BackendConfig, NamespaceConfig};
use crate::core::write_gate::WriteGate;

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
        /// The open file (O_DIRECT when `direct`); shared with the offload
        /// thread while it discards.
        file: Arc<File>,
        /// Its path.
        path: PathBuf,
        /// A block device (discard by ioctl) rather than a file (punch hole).
        is_block: bool,
        /// Opened with O_DIRECT; without it, a failed flush is final
        /// (the page cache lost the data).
        direct: bool,
        /// Reads and writes run on the worker, synchronously
        /// ([`file::runs_inline`]: a RAM disk).
        inline: bool,
    },
    /// Discards writes; reads return zeroes.
    Null,
    /// A Ceph RBD image.
    Rbd(rbd::RbdImage),
}

impl Backend {
    /// A short description for logs and status: the path, `null`, or
    /// `rbd:pool/image`.
    pub fn describe(&self) -> String {
        match self {
            Backend::File { path, .. } => path.display().to_string(),
            Backend::Null => "null".into(),
            Backend::Rbd(img) => format!("rbd:{}", img.spec()),
        }
    }

    /// What the namespace's identifiers (NGUID, UUID) derive from: the same
    /// on every gateway that serves the same store (an RBD image by its
    /// cluster and image id, which survive renames).
    pub fn identity(&self) -> String {
        match self {
            Backend::Rbd(img) => img.identity(),
            _ => self.describe(),
        }
    }

    /// The store's size in bytes as it is now (blocking), or `None` for a
    /// store of fixed size (null).
    pub fn size_now(&self) -> std::io::Result<Option<u64>> {
        match self {
            Backend::File { file, is_block, .. } => file::size(file, *is_block).map(Some),
            Backend::Rbd(img) => Ok(Some(img.size()?)),
            Backend::Null => Ok(None),
        }
    }

    /// Whether writes pass the namespace's write gate: a local store's (for
    /// Compare and Write), an RBD image's that needs ownership.
    pub fn gated(&self) -> bool {
        match self {
            Backend::File { .. } => true,
            // Every write of an image is counted, owned or not: a Preempt
            // and Abort drains them (on every gateway of the image).
            Backend::Rbd(_) => true,
            Backend::Null => false,
        }
    }

    /// The raw fd (-1 when there is none).
    pub fn fd(&self) -> i32 {
        match self {
            Backend::File { file, .. } => file.as_raw_fd(),
            Backend::Null | Backend::Rbd(_) => -1,
        }
    }
}

/// Opens the store a namespace's configuration names: the backend, its
/// size in bytes and its block size.
pub fn open(cfg: &NamespaceConfig) -> Result<(Backend, u64, u32), BackendError> {
    let (backend, size, bs) = match &cfg.backend {
        BackendConfig::Null { size } => (Backend::Null, *size, cfg.block_size.unwrap_or(512)),
        BackendConfig::File { path } => file::open(path, cfg.block_size, cfg.readonly)?,
        BackendConfig::Rbd(rbd) => {
            let (backend, size) = rbd::open(rbd, cfg.ana_group)?;
            (backend, size, cfg.block_size.unwrap_or(512))
        }
    };
    if size < bs as u64 {
        return Err(BackendError::Invalid {
            path: backend.describe(),
            reason: format!("size {size} is smaller than one block ({bs} bytes)"),
        });
    }
    Ok((backend, size, bs))
}

/// How a worker runs backend operations and hears of their completion.
pub struct Io<'a> {
    /// The worker's ring (files and block devices).
    pub ring: &'a mut uring::Ring,
    /// The offload thread (blocking calls).
    pub offload: &'a offload::Offload,
    /// The worker's mailbox (completions from other threads).
    pub mailbox: &'a Arc<crate::core::wake::Mailbox>,
}

/// Where an operation's data is in memory.
#[derive(Debug, Clone, Copy)]
pub struct DataRef {
    /// Start of the data (the request's buffer).
    pub ptr: *mut u8,
    /// The io_uring fixed buffer that holds it, if any.
    pub fixed: Option<u16>,
}

impl DataRef {
    /// No data (flushes, zeroing, discards).
    pub const NONE: DataRef = DataRef {
        ptr: std::ptr::null_mut(),
        fixed: None,
    };
}

/// How a submission went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Submitted {
    /// Operations now in flight, each of which completes once.
    pub in_flight: u16,
    /// An error that stopped the submission (0: none). With `in_flight` > 0
    /// the submitted ones must still complete before the request answers.
    pub errno: i32,
    /// Bytes a read or write moved at once, during the submission (the null
    /// backend); counted like a completion's result.
    pub done: u32,
}

impl Submitted {
    /// One operation submitted (`Ok`), or none, stopped by a positive errno.
    pub fn one(r: Result<(), i32>) -> Submitted {
        match r {
            Ok(()) => Submitted {
                in_flight: 1,
                ..Submitted::default()
            },
            Err(errno) => Submitted {
                errno,
                ..Submitted::default()
            },
        }
    }
}

/// Starts `plan` on `backend`, whose writes pass `gate`. `data` is the request's data buffer (reads and
/// writes); `ranges` the byte ranges of a deallocating Dataset Management
/// command. Each operation in flight completes once, with `ud`, through
/// `io`. A read or write completes with the bytes moved (a short one is
/// continued by the caller), everything else with 0 or more; errors are
/// negative errnos.
///
/// # Safety
/// `data` must stay valid (and, for reads, unaliased) until every operation
/// submitted completes; `backend` is kept alive by the caller as long.
pub unsafe fn submit(
    backend: &Backend,
    gate: &Arc<WriteGate>,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    io: &mut Io<'_>,
    ud: u64,
) -> Submitted {
    match backend {
        // SAFETY: the caller's guarantees, passed on.
        Backend::File {
            file,
            is_block,
            inline,
            ..
        } => unsafe { file::submit(file, *is_block, *inline, plan, data, ranges, io, ud) },
        // SAFETY: as above.
        Backend::Rbd(img) => unsafe {
            rbd::submit(img, plan, data, ranges, io.mailbox, Some(gate), ud)
        },
        // SAFETY: the caller's guarantees, passed on.
        Backend::Null => unsafe { null::execute(plan, data) },
    }
}
