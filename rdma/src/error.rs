use std::io;

/// Errors from verbs and RDMA-CM calls, with the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verbs or RDMA-CM call failed with an OS error.
    #[error("{call} failed: {source}")]
    Os {
        /// The failing call.
        call: &'static str,
        /// errno.
        source: io::Error,
    },
    /// An argument could not be represented (e.g. too many SGEs).
    #[error("invalid argument to {call}: {reason}")]
    Invalid {
        /// The call.
        call: &'static str,
        /// Why.
        reason: &'static str,
    },
}

impl Error {
    pub(crate) fn last(call: &'static str) -> Error {
        Error::Os {
            call,
            source: io::Error::last_os_error(),
        }
    }
    pub(crate) fn from_ret(call: &'static str, ret: i32) -> Error {
        // verbs post calls return the errno directly; CM calls return -1 and set errno.
        if ret > 0 {
            Error::Os {
                call,
                source: io::Error::from_raw_os_error(ret),
            }
        } else {
            Error::last(call)
        }
    }
    /// The OS error code, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Os { source, .. } => source.raw_os_error(),
            Error::Invalid { .. } => None,
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
