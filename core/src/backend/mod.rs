//! Backends: files and block devices (served through the workers' io_uring),
//! Ceph RBD images (librbd) and a null backend for fabric benchmarks, behind
//! one trait, [`Storage`]: [`Storage::submit`] starts an operation and says how many
//! completions will come back; each comes back as `(user data, result)`, from
//! the worker's ring or through the worker's completion [`crate::base::wake::Mailbox`]
//! (which wakes the worker by its eventfd): from the [`offload::Offload`]
//! thread for the few calls io_uring cannot make without blocking a worker,
//! and from librbd's own threads for RBD.

pub mod compare;
pub mod data_key;
pub mod exec;
pub mod fair;
pub mod file;
pub mod null;
pub mod offload;
pub mod op;
pub mod uring;

use std::sync::Arc;

use crate::request::plan::IoPlan;

use crate::request::write_gate::WriteGate;
pub use exec::Executor;

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

/// What backs a namespace: a file or block device ([`file::FileStore`]), an
/// RBD image (the daemon's `rbd` module) or nothing ([`null::Null`]). The kind is
/// chosen once, when the namespace opens (in the daemon); nothing outside this
/// module asks which kind it is: what differs is a method here.
pub trait Storage: std::fmt::Debug + Send + Sync {
    /// A short description for logs: the path, `null`, or `rbd:pool/image`.
    fn describe(&self) -> String;

    /// What the namespace's identifiers (NGUID, UUID) derive from: what
    /// identifies the data (the same on every gateway that serves the same
    /// store, whatever path or name it is given).
    fn identity(&self) -> String {
        self.describe()
    }

    /// What versions before saved identifiers derived them from (the path
    /// as written), kept over an upgrade ([`crate::model::identity`]).
    fn path_identity(&self) -> String {
        self.identity()
    }

    /// The kind as status names it (`file`, `block`, `null`, `rbd`) and
    /// where the store is (a path, `pool/image`).
    fn status(&self) -> (&'static str, Option<String>);

    /// The store's size in bytes as it is now (blocking), or `None` for a
    /// store of fixed size.
    fn size_now(&self) -> std::io::Result<Option<u64>>;

    /// Grows the store to `bytes` (`namespace resize --size`; the caller
    /// checked it is larger). A store whose size is its own (a block
    /// device, an image) says how to grow it instead.
    fn grow(&self, bytes: u64) -> Result<(), String> {
        let _ = bytes;
        Err(format!(
            "{} sets its own size: grow it there, then resize without --size",
            self.describe()
        ))
    }

    /// Whether writes pass the namespace's write gate (a local store's, for
    /// Compare and Write; an image's, which a Preempt and Abort drains on
    /// every gateway).
    fn gated(&self) -> bool;

    /// Whether a failed flush may have lost data for good: a file served
    /// through the page cache. The kernel reports a lost writeback to one
    /// fsync only, so a retried flush would succeed although the data is
    /// gone.
    fn flush_failure_is_sticky(&self) -> bool {
        false
    }

    /// Starts `plan`, whose writes passed `gate`. `data` is the request's
    /// data buffer (reads and writes); `ranges` the byte ranges of a
    /// deallocating Dataset Management command. Each operation in flight
    /// completes once, with `ud`, through `io`. A read or write completes
    /// with the bytes moved (a short one is continued by the caller,
    /// [`op::Op`]), everything else with 0 or more; errors are negative
    /// errnos.
    ///
    /// # Safety
    /// `data` must stay valid (and, for reads, unaliased) until every
    /// operation submitted completes; the store is kept alive by the caller
    /// as long.
    unsafe fn submit(
        &self,
        gate: &Arc<WriteGate>,
        plan: &IoPlan,
        data: DataRef,
        ranges: &[(u64, u64)],
        io: &mut dyn Executor,
        ud: u64,
    ) -> Submitted;

    /// Makes completed writes durable. Blocks.
    fn flush(&self) -> std::io::Result<()>;

    /// Reads `buf.len()` bytes at `offset` into `buf` (aligned for
    /// O_DIRECT): the read of a Compare. A negative errno on failure. Blocks.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), i32>;

    /// Compares `cmp` with the data at `offset` and, when equal, writes
    /// `data` there, atomically against every other write (see
    /// [`compare::compare_and_write`], which checks the lengths and
    /// documents the results). `allowed` checks the host's reservation
    /// access at the point where no Preempt and Abort can pass any more.
    /// Blocks.
    #[allow(clippy::too_many_arguments)]
    fn compare_and_write(
        &self,
        gate: &WriteGate,
        offset: u64,
        cmp: &[u8],
        data: &[u8],
        fua: bool,
        allowed: &dyn Fn() -> Result<(), nvme::Status>,
    ) -> i32;

    /// The store as `Any`, for what only its own kind has (an RBD image's
    /// ownership, fencing and shared reservation state, found by downcasting).
    fn as_any(&self) -> &dyn std::any::Any;

    /// What the store shares with the other gateways that serve it (an
    /// RBD image's); `None` for a store only this target serves (a file, a
    /// device, nothing).
    fn shared(&self) -> Option<&dyn Shared> {
        None
    }
}

/// A store several gateways serve: one of them writes (its ownership is the
/// namespace's write gate), they share the namespace's QoS caps and tell
/// each other how they serve its ANA group.
pub trait Shared: Send + Sync {
    /// The namespace's QoS caps changed (or were set when it opened): the
    /// other gateways share them, so that a cap holds for the store as a
    /// whole.
    fn qos_changed(&self, qos: &Arc<crate::model::qos::NsQos>);

    /// How this gateway serves the namespace's ANA group now, for the
    /// others.
    fn publish_state(&self, state: GatewayState);

    /// The other gateways, as last heard: `None` while they are not known
    /// yet (just opened, or the record cannot be read).
    fn peers(&self) -> Option<Vec<Peer>>;

    /// Whether this gateway is the store's writer.
    fn owned(&self) -> bool;

    /// Hands the store over to the next writer without fencing: no new
    /// writes here, those in flight completed first (returns at once).
    fn hand_over(&self);

    /// Another gateway fenced this one: the store refuses its writes until
    /// the namespace is reopened (and closing it may wait on the store).
    fn fenced(&self) -> bool;

    /// This gateway stops (at shutdown): it hands the store over if it
    /// writes it, once no write is in flight, waiting at most `within`, so
    /// that the next writer need not fence it.
    fn stop(&self, within: std::time::Duration);
}

/// How this gateway serves a namespace's ANA group, as it tells the other
/// gateways of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayState {
    /// Its best state at any listener.
    pub state: nvme::ana::AnaState,
    /// Configured non-optimized (not drained, not fenced): it would serve
    /// the group optimized if no other gateway did.
    pub candidate: bool,
    /// It serves the group optimized in another's stead.
    pub promoted: bool,
}

/// Another gateway that serves a store, as this one last heard of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its name for people (`host:pid`).
    pub gateway: String,
    /// Its best state for the group.
    pub state: nvme::ana::AnaState,
    /// It wrote lately (alive).
    pub fresh: bool,
    /// See [`GatewayState::candidate`].
    pub candidate: bool,
    /// See [`GatewayState::promoted`].
    pub promoted: bool,
    /// It comes before this gateway in the order that breaks ties (who
    /// takes a group over).
    pub first: bool,
}

/// A namespace's store.
pub type Backend = Box<dyn Storage>;

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
