//! Errors of the initiator, with the context an operator needs.

use std::net::SocketAddr;
use std::time::Duration;

use nvme::status::Status;

/// An initiator error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verbs or RDMA-CM call failed.
    #[error(transparent)]
    Rdma(#[from] rdma::Error),
    /// Address or route resolution failed.
    #[error("cannot reach {addr}: {what} ({detail})")]
    Resolve {
        /// Target address.
        addr: SocketAddr,
        /// Which step.
        what: &'static str,
        /// Event or status.
        detail: String,
    },
    /// The target refused the RDMA-CM connection.
    #[error("target {addr} refused queue {qid}: {reason}")]
    Rejected {
        /// Target address.
        addr: SocketAddr,
        /// Queue id.
        qid: u16,
        /// The NVMe/RDMA reject status (`nvme::cm::RejectStatus` codes), when
        /// the target gave one.
        status: Option<u16>,
        /// The reject status, named.
        reason: String,
    },
    /// The RDMA-CM connection failed for another reason.
    #[error("connecting queue {qid} to {addr} failed: {what}")]
    Connect {
        /// Target address.
        addr: SocketAddr,
        /// Queue id.
        qid: u16,
        /// What happened.
        what: String,
    },
    /// Memory windows were asked for but the device has none.
    #[error("the RDMA device does not support type-2 memory windows (use --windows mr)")]
    NoWindows,
    /// In-band authentication failed or was refused.
    #[error("authentication on queue {qid}: {reason}")]
    Auth {
        /// Queue id.
        qid: u16,
        /// What happened (never key material).
        reason: String,
    },
    /// A command completed with an error status.
    #[error("{cmd} failed: {status}")]
    Status {
        /// Command name.
        cmd: &'static str,
        /// Status.
        status: Status,
    },
    /// A queue failed (work-request error, disconnect, protocol violation).
    #[error("queue {qid}: {reason}")]
    Queue {
        /// Queue id.
        qid: u16,
        /// Why.
        reason: String,
    },
    /// Something did not happen in time.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What.
        what: String,
        /// How long we waited.
        after: Duration,
    },
    /// The target answered with something the initiator cannot use.
    #[error("controller lost: {0}")]
    ControllerLost(String),
    #[error("target protocol error: {0}")]
    Protocol(String),
    /// Bad arguments from the caller.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A local file error (CLI).
    #[error("{path}: {source}")]
    File {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl Error {
    /// The NVMe status, if this error is a failed command.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `c` if it succeeded, else [`Error::Status`] naming `cmd`.
pub(crate) fn status_ok(
    cmd: &'static str,
    c: nvme::completion::Completion,
) -> Result<nvme::completion::Completion> {
    if c.status.is_success() {
        Ok(c)
    } else {
        Err(Error::Status {
            cmd,
            status: c.status,
        })
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
