//! Connection bring-up shared by the initiator and the probes: resolving a
//! peer's address and route (active side), and a queue pair on resources of
//! its own (protection domain, completion channel and queue).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cm::{CmEventKind, CmId, WaitError};
use crate::completion::{CompletionChannel, CompletionQueue};
use crate::error::{Error, Result};
use crate::memory::ProtectionDomain;
use crate::qp::QpCaps;

/// Why [`CmId::resolve`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The call that starts a step failed.
    #[error("{0}")]
    Call(#[from] Error),
    /// A step did not complete (an error event, or none in time).
    #[error("{step}: {source}")]
    Step {
        /// "address resolution" or "route resolution".
        step: &'static str,
        /// What came instead.
        source: WaitError,
    },
}

/// What [`CmId::create_own_qp`] made: the queue pair's protection domain and
/// completion queue (which the id also holds).
pub struct OwnQueue {
    /// The protection domain, for the caller's memory regions and windows.
    pub pd: Arc<ProtectionDomain>,
    /// The completion queue for sends and receives.
    pub cq: Arc<CompletionQueue>,
}

impl CmId {
    /// Resolves `dst` (from `src` if given) to a device and a route, waiting
    /// up to `timeout` for each step on the id's channel (active side).
    pub fn resolve(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> std::result::Result<(), ResolveError> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let ch = self.channel();
        self.resolve_addr(src, dst, ms)?;
        ch.wait_for(CmEventKind::AddrResolved, timeout)
            .map_err(|source| ResolveError::Step {
                step: "address resolution",
                source,
            })?;
        self.resolve_route(ms)?;
        ch.wait_for(CmEventKind::RouteResolved, timeout)
            .map_err(|source| ResolveError::Step {
                step: "route resolution",
                source,
            })?;
        Ok(())
    }

    /// Creates this id's RC queue pair on resources of its own: a protection
    /// domain, a completion channel and a completion queue of `cq_entries`
    /// on the id's device (resolved, or the device of a connect request).
    pub fn create_own_qp(&mut self, cq_entries: u32, caps: QpCaps) -> Result<OwnQueue> {
        let ctx = self.context().ok_or(Error::Invalid {
            call: "rdma_create_qp",
            reason: "the id has no RDMA device (its address is not resolved)",
        })?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cc = CompletionChannel::new(&ctx)?;
        let cq = CompletionQueue::new(&cc, cq_entries)?;
        self.create_qp(&pd, &cq, caps)?;
        Ok(OwnQueue { pd, cq })
    }
}
