//! Ceph RBD images through librbd. Each operation is a librbd asynchronous
//! call whose completion runs on a librbd thread and posts `(ud, result)` to
//! the submitting worker's mailbox, which wakes the worker through its
//! eventfd: no thread per I/O, nothing blocking on a worker.
//!
//! Namespaces on the same cluster (same configuration file and client)
//! share one connection. The connection runs without librbd's writeback
//! cache: several gateways serve one image to a multipath host, and a write
//! acknowledged by one must be read back by the other, and survive the death
//! of the first. Writes are durable when librbd completes them, so FUA asks
//! for nothing more and a flush is cheap.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use nix::errno::Errno;

use super::offload::Mailbox;
use super::{Backend, BackendError, DataRef, Submitted};
use crate::config::RbdConfig;
use crate::io::IoPlan;
use crate::reservation::cluster::{ClusterError, ClusterStore};

/// How long a librados operation may wait for an unavailable cluster before
/// it fails (the host then gets a retryable status), unless the Ceph
/// configuration sets its own: below the Linux host's 30 s I/O timeout.
const OP_TIMEOUT_S: &str = "20";
/// How long connecting (at start or reload) waits for the monitors.
const MOUNT_TIMEOUT_S: &str = "15";

/// An open image and what identifies it.
#[derive(Debug)]
pub struct RbdImage {
    image: ceph::Image,
    fsid: String,
    id: String,
}

impl RbdImage {
    /// `pool/image`.
    pub fn spec(&self) -> String {
        self.image.spec()
    }

    /// The cluster fsid and the image id: equal on every gateway.
    pub fn identity(&self) -> String {
        format!("rbd:{}/{}/{}", self.fsid, self.image.pool().name(), self.id)
    }

    /// The image's size in bytes, as the cluster says now.
    pub fn size(&self) -> Result<u64, ceph::Error> {
        self.image.size()
    }

    /// Flushes (blocking).
    pub fn flush(&self) -> std::io::Result<()> {
        Ok(self.image.flush()?)
    }

    /// The image itself.
    pub fn image(&self) -> &ceph::Image {
        &self.image
    }

    /// The image's reservation state in the cluster (not yet read).
    pub fn reservation_store(&self) -> Result<ClusterStore, ClusterError> {
        let pool = self.image.pool();
        ClusterStore::open(pool.cluster(), pool.name(), &self.id)
    }
}

type ClusterKey = (Option<PathBuf>, String);

/// The connections in use, by configuration file and client: a namespace
/// opened while another on the same cluster is served shares its connection.
fn clusters() -> &'static Mutex<HashMap<ClusterKey, Weak<ceph::Cluster>>> {
    static CLUSTERS: std::sync::OnceLock<Mutex<HashMap<ClusterKey, Weak<ceph::Cluster>>>> =
        std::sync::OnceLock::new();
    CLUSTERS.get_or_init(Default::default)
}

fn connect(cfg: &RbdConfig) -> Result<Arc<ceph::Cluster>, ceph::Error> {
    let key = (cfg.ceph_conf.clone(), cfg.client.clone());
    let mut map = clusters().lock().unwrap_or_else(|p| p.into_inner());
    map.retain(|_, w| w.strong_count() > 0);
    if let Some(c) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(c);
    }
    let c = ceph::Cluster::connect(
        cfg.ceph_conf.as_deref(),
        &cfg.client,
        // The watch of a reservation state is confirmed on every tick
        // (5 s by default): once a second keeps its lease short.
        &[
            ("client_mount_timeout", MOUNT_TIMEOUT_S),
            ("objecter_tick_interval", "1"),
        ],
    )?;
    if c.get("rbd_cache").is_ok_and(|v| v == "true") {
        tracing::info!(client = %cfg.client, "librbd's writeback cache is turned off for this target (gateways must not cache writes)");
    }
    c.set("rbd_cache", "false")?;
    for k in ["rados_osd_op_timeout", "rados_mon_op_timeout"] {
        if c.get(k).is_ok_and(|v| v.parse::<f64>() == Ok(0.0)) {
            c.set(k, OP_TIMEOUT_S)?;
        }
    }
    map.insert(key, Arc::downgrade(&c));
    Ok(c)
}

/// Opens the image of `cfg` (blocking: at start or reload, never on a
/// worker): the backend and its size in bytes.
pub fn open(cfg: &RbdConfig) -> Result<(Backend, u64), BackendError> {
    let spec = format!("rbd:{}/{}", cfg.pool, cfg.image);
    let fail = |e: ceph::Error| {
        let hint = match e.errno().map(Errno::from_raw) {
            Some(Errno::ENOENT) => " (does it exist? `rbd ls <pool>`, `ceph osd pool ls`)",
            Some(Errno::ETIMEDOUT) | Some(Errno::ECONNREFUSED) => {
                " (are the monitors of the Ceph configuration reachable?)"
            }
            Some(Errno::EACCES) | Some(Errno::EPERM) => " (the client's key and capabilities)",
            _ => "",
        };
        BackendError::Invalid {
            path: spec.clone(),
            reason: format!("{e}{hint}"),
        }
    };
    let cluster = connect(cfg).map_err(fail)?;
    let fsid = cluster.fsid().map_err(fail)?;
    let image = cluster
        .pool(&cfg.pool)
        .map_err(fail)?
        .image(&cfg.image)
        .map_err(fail)?;
    // A pool or image override (`rbd config image set IMG rbd_cache true`)
    // would turn the writeback cache on again for this image.
    if image.config("rbd_cache").map_err(fail)?.as_deref() == Some("true") {
        return Err(BackendError::Invalid {
            path: spec.clone(),
            reason: format!(
                "librbd's writeback cache is on for this image (a pool or image override of rbd_cache): a gateway must not cache writes; remove it with `rbd config image remove {0}/{1} rbd_cache` (or `rbd config pool remove {0} rbd_cache`)",
                cfg.pool, cfg.image
            ),
        });
    }
    let id = image.id().map_err(fail)?;
    let size = image.size().map_err(fail)?;
    Ok((Backend::Rbd(RbdImage { image, fsid, id }), size))
}

/// The result to post for a librbd result `r` of an operation that moves
/// `len` bytes: the bytes moved (reads and writes), else 0; or the error.
fn result(r: isize, len: u32) -> i32 {
    if r < 0 {
        i32::try_from(r).unwrap_or(-(Errno::EIO as i32))
    } else {
        len as i32
    }
}

/// A raw data pointer handed to a librbd thread.
struct SendPtr(*mut u8);
// SAFETY: the pointer is only used to zero the tail of a short read, in the
// completion of the read that owns the buffer (see `submit`).
unsafe impl Send for SendPtr {}

/// Starts `plan` on `img` (see [`super::submit`]); completions reach
/// `mailbox`.
///
/// # Safety
/// As [`super::submit`].
pub(super) unsafe fn submit(
    img: &RbdImage,
    plan: &IoPlan,
    data: DataRef,
    ranges: &[(u64, u64)],
    mailbox: &Arc<Mailbox>,
    ud: u64,
) -> Submitted {
    let post = |len: u32| -> ceph::Done {
        let m = mailbox.clone();
        Box::new(move |r| m.post(ud, result(r, len)))
    };
    let one = |r: Result<(), i32>| match r {
        Ok(()) => Submitted {
            in_flight: 1,
            errno: 0,
            done: 0,
        },
        Err(e) => Submitted {
            in_flight: 0,
            errno: -e,
            done: 0,
        },
    };
    let image = &img.image;
    match *plan {
        IoPlan::Read { offset, len } => {
            let m = mailbox.clone();
            let buf = SendPtr(data.ptr);
            let done: ceph::Done = Box::new(move |r| {
                if r >= 0 && (r as usize) < len as usize {
                    // A read that ends in a hole of a sparse image may come
                    // back short: the rest is zeroes.
                    let b = &buf;
                    // SAFETY: the buffer is valid for `len` bytes and still
                    // this read's until its completion is posted below.
                    unsafe {
                        b.0.add(r as usize)
                            .write_bytes(0, len as usize - r as usize)
                    };
                }
                m.post(ud, result(r, len));
            });
            // SAFETY: the caller keeps the buffer valid and unaliased until
            // the completion is posted.
            one(unsafe { image.aio_read(offset, data.ptr, len as usize, done) })
        }
        IoPlan::Write { offset, len, .. } => {
            // SAFETY: the caller keeps the buffer valid until the completion.
            one(unsafe { image.aio_write(offset, data.ptr, len as usize, post(len)) })
        }
        // Reservation commands run on the namespace's state, compares on
        // the offload thread (backend::compare): never here.
        IoPlan::Resv { .. } | IoPlan::Compare { .. } => Submitted {
            in_flight: 0,
            errno: nix::libc::EOPNOTSUPP,
            done: 0,
        },
        IoPlan::Flush => one(image.aio_flush(post(0))),
        IoPlan::WriteZeroes { offset, len, .. } => {
            one(image.aio_write_zeroes(offset, len, post(0)))
        }
        IoPlan::Dsm { .. } => {
            let mut s = Submitted::default();
            for &(o, l) in ranges {
                match image.aio_discard(o, l, post(0)) {
                    Ok(()) => s.in_flight += 1,
                    Err(e) => {
                        s.errno = -e;
                        break;
                    }
                }
            }
            s
        }
    }
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
}
