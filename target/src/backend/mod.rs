//! Backends: files and block devices (served through io_uring by the queue
//! threads) and a null backend for fabric benchmarks.

pub mod null;
pub mod uring;

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

const BLKGETSIZE64: libc::c_ulong = 0x80081272;
const BLKSSZGET: libc::c_ulong = 0x1268;
/// `BLKDISCARD` ioctl.
pub const BLKDISCARD: libc::c_ulong = 0x1277;

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
                    o.custom_flags(libc::O_DIRECT);
                }
                o.open(path)
            };
            let (file, direct) = match open(true) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!(path = %path.display(), "O_DIRECT not supported here; using buffered I/O");
                    (open(false).map_err(|e| io_err(path, "open", e))?, false)
                }
                Err(e) => return Err(io_err(path, "open", e)),
            };
            let meta = file.metadata().map_err(|e| io_err(path, "stat", e))?;
            let is_block = meta.file_type().is_block_device();
            let (size, native_bs) = if is_block {
                let mut size: u64 = 0;
                let mut ssz: libc::c_int = 0;
                // SAFETY: BLKGETSIZE64 writes a u64 and BLKSSZGET an int into valid locals.
                unsafe {
                    if libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) < 0 {
                        return Err(io_err(
                            path,
                            "BLKGETSIZE64",
                            std::io::Error::last_os_error(),
                        ));
                    }
                    if libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut ssz) < 0 {
                        return Err(io_err(path, "BLKSSZGET", std::io::Error::last_os_error()));
                    }
                }
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
