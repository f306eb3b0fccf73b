//! Sans-IO NVMe / NVMe-oF (RDMA and TCP transports) wire formats.
//!
//! Every type here encodes to and parses from the exact little-endian byte layout
//! of the NVMe Base, NVMe over Fabrics and NVMe/RDMA transport specifications.
//! Parsing never panics: short buffers yield [`WireError`], unknown values are kept
//! as raw numbers so that the caller can answer with a precise status.

pub mod ana;
pub mod auth;
pub mod cm;
pub mod command;
pub mod completion;
pub mod discovery;
pub mod fabrics;
pub mod identify;
pub mod log;
pub mod opcode;
pub mod reservation;
pub mod sgl;
pub mod status;
pub mod tcp;

mod bytes;

pub use command::Command;
pub use completion::Completion;
pub use sgl::Sgl;
pub use status::Status;

/// A wire buffer was too short or held an impossible value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The buffer holds fewer bytes than the structure needs.
    Short {
        /// What was being parsed.
        what: &'static str,
        /// Bytes the structure needs.
        need: usize,
        /// Bytes the buffer had.
        got: usize,
    },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Short { what, need, got } => {
                write!(f, "{what}: need {need} bytes, got {got}")
            }
        }
    }
}

impl std::error::Error for WireError {}

pub(crate) fn need(what: &'static str, buf: &[u8], n: usize) -> Result<(), WireError> {
    if buf.len() < n {
        Err(WireError::Short {
            what,
            need: n,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Size of a submission queue entry (command capsule without data).
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry (response capsule).
pub const CQE_SIZE: usize = 16;
/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Default NVMe-oF service port (RDMA and TCP).
pub const DEFAULT_PORT: u16 = 4420;
