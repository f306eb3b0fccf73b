//! A reservation state several gateways share (an RBD image's, kept in its
//! cluster): what the core asks of it, and where a newer state another
//! gateway wrote arrives. The store itself is the backend's.

use std::sync::Arc;

use super::state::{HostId, Notice, NqnTag, Reservations};

/// The local copy and its object version.
#[derive(Debug, Default)]
pub struct Versioned {
    /// The state.
    pub state: Reservations,
    /// The object version it is (0: no object yet).
    pub version: u64,
}

/// Where the copy goes when a newer state arrives, and notices for this
/// gateway's controllers.
pub trait Sink: Send + Sync {
    /// Installs `state` (object version `version`) if it is newer than the
    /// copy.
    fn install(&self, state: Reservations, version: u64);
    /// Installs `state` of a Preempt and Abort made elsewhere, once the
    /// writes in flight here completed; false if they did not in time.
    fn install_draining(&self, state: Reservations, version: u64) -> bool {
        self.install(state, version);
        true
    }
    /// Notices from a change another gateway made, with the host NQN tags
    /// they are bound to.
    fn notices(&self, notices: &[Notice], bindings: &[(HostId, NqnTag)]);
}

/// A state kept outside this process and shared with other gateways: read,
/// written only over the version read, and published to the others.
pub trait SharedState: std::fmt::Debug + Send + Sync {
    /// Where it is, for logs and status (`pool/object`).
    fn spec(&self) -> String;
    /// Whether this gateway's copy is known to be current (its lease holds).
    fn sure(&self) -> bool;
    /// The state as stored, with its version.
    fn read(&self) -> Result<Versioned, String>;
    /// Writes `state` if the stored version is still `version` (0: none
    /// yet): its new version, or `None` if another gateway wrote meanwhile.
    fn write(&self, state: &Reservations, version: u64) -> Result<Option<u64>, String>;
    /// Tells every gateway (this one included) the new state and waits for
    /// them: whether every one acknowledged.
    fn publish(
        &self,
        state: &Reservations,
        version: u64,
        notices: &[Notice],
        bindings: &[(HostId, NqnTag)],
        aborted: &[HostId],
    ) -> bool;
    /// Reads the state into `sink` (blocking) and keeps it current for as
    /// long as `sink` and the store live.
    fn start(self: Arc<Self>, sink: &Arc<dyn Sink>) -> Result<(), String>;
    /// Changes published that not every gateway acknowledged.
    fn unacknowledged(&self) -> u64;
}
