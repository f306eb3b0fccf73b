//! What the model keeps of in-band authentication (DH-HMAC-CHAP): the
//! hosts' keys, and per controller whether its queues must authenticate and
//! how they last did. The protocol itself is [`crate::command::auth`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use dhchap::controller::{Agreed, Policy};
use dhchap::{GroupId, HashId, Secret};

use crate::model::unproven::Place;

/// One host's authentication settings. A host with a key must authenticate
/// to every subsystem it reaches (but discovery); a host without one
/// connects as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Host NQN.
    pub nqn: String,
    /// The secret the host proves it holds.
    pub dhchap_key: Option<Secret>,
    /// The secret the target proves it holds, when the host asks
    /// (bidirectional authentication).
    pub dhchap_ctrl_key: Option<Secret>,
    /// The hash function the host must use.
    pub dhchap_hash: HashId,
    /// The Diffie-Hellman group the host must accept.
    pub dhchap_dhgroup: GroupId,
    /// The host's configured TLS PSK (NVMe/TCP listeners with `secure`).
    pub tls_key: Option<tlspsk::ConfiguredPsk>,
    /// How its host derives TLS PSKs from it (`tls_derivation`: `compat`,
    /// libnvme 1.15 and earlier, nvme-cli 2.13; `rfc`, the specification's,
    /// SPDK and libnvme 1.16 on). A version 1 identity of a transformed PSK
    /// says which by its digest; otherwise this one is taken.
    pub tls_derivation: tlspsk::Derivation,
}

/// Authentication transactions one peer address may start, at once and
/// per second after that: each may cost a Diffie-Hellman exponentiation or
/// two (58 ms for ffdhe8192), and a peer needs only a host NQN to ask.
pub const PEER_BURST: u32 = 32;
/// See [`PEER_BURST`].
pub const PEER_PER_SECOND: u32 = 4;
/// Authentication steps one peer address may have waiting for the
/// authentication threads (a host authenticates each of its queues, up to
/// 65 at once); beyond it, and beyond [`QUEUED`] in all, a step is answered
/// Command Interrupted with a retry delay. The threads take the addresses
/// in turn, so the bounds keep memory, not order.
pub const PEER_QUEUED: usize = 80;
/// See [`PEER_QUEUED`].
pub const QUEUED: usize = 1024;

/// Connect response: authentication transaction required (ATR).
pub const CONNECT_ATR: u64 = 1 << 17;

/// The hosts' keys, replaced as a whole by a reload: a transaction reads
/// them when it starts. A host whose keys changed loses its controllers
/// ([`crate::model::target::Target::set_credentials`]), so no association
/// outlives the key it was made with (or without), but for a key rotated:
/// its controllers' queues have a grace period to authenticate again with
/// the new one. Every change moves the epoch on; a queue knows the epoch
/// it last authenticated in.
#[derive(Default)]
pub struct Credentials {
    keys: ArcSwap<HashMap<String, Policy>>,
    epoch: AtomicU64,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} hosts with keys)", self.keys.load().len())
    }
}

impl Credentials {
    /// Takes the keys of `hosts`; returns the host NQNs whose keys or
    /// requirements changed (a key added, removed or replaced, another hash
    /// or group).
    pub fn set(&self, hosts: &[HostConfig]) -> Vec<String> {
        let m: HashMap<String, Policy> = hosts
            .iter()
            .filter_map(|h| {
                Some((
                    h.nqn.clone(),
                    Policy {
                        hash: h.dhchap_hash,
                        group: h.dhchap_dhgroup,
                        host_key: h.dhchap_key.clone()?,
                        ctrl_key: h.dhchap_ctrl_key.clone(),
                    },
                ))
            })
            .collect();
        let old = self.keys.swap(Arc::new(m));
        let changed = changed_hosts(&old, &self.keys.load());
        if !changed.is_empty() {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        changed
    }

    /// The host's requirements now (`None`: it has no key).
    pub fn policy(&self, hostnqn: &str) -> Option<Policy> {
        self.keys.load().get(hostnqn).cloned()
    }

    /// Whether `hostnqn` has a key: its controllers of NVM subsystems must
    /// authenticate their queues (discovery controllers never do, as with
    /// nvmet).
    pub fn has_key(&self, hostnqn: &str) -> bool {
        self.keys.load().contains_key(hostnqn)
    }

    /// The keys' epoch: moved on by every change.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
}

/// The hosts whose entry was added, removed or replaced from `old` to
/// `new`, sorted.
pub fn changed_hosts<V: PartialEq>(
    old: &HashMap<String, V>,
    new: &HashMap<String, V>,
) -> Vec<String> {
    let mut changed: Vec<String> = old
        .iter()
        .filter(|(n, p)| new.get(*n) != Some(*p))
        .map(|(n, _)| n.clone())
        .chain(new.keys().filter(|n| !old.contains_key(*n)).cloned())
        .collect();
    changed.sort();
    changed
}

/// A controller's authentication: whether its queues must authenticate
/// (fixed when it is created), whether its host proved who it is, and how
/// its admin queue last did.
#[derive(Debug, Default)]
pub struct CtrlAuth {
    required: AtomicBool,
    /// Its host authenticated, or needs not: the controller takes one of
    /// the host's places (`max_controllers_per_host`).
    proven: AtomicBool,
    /// Until then, its place among the unproven controllers.
    place: Mutex<Option<Place>>,
    last: Mutex<Option<Agreed>>,
    /// Its host's key was rotated: each queue is to authenticate in this
    /// key epoch (or a later one) by then, or the controller ends.
    rekey: Mutex<Option<(u64, Instant)>>,
}

impl CtrlAuth {
    /// Sets whether the controller's queues must authenticate; a controller
    /// that needs not is proven at once.
    pub fn set_required(&self, yes: bool) {
        self.required.store(yes, Ordering::Relaxed);
        self.proven.store(!yes, Ordering::Release);
    }

    /// Whether its host authenticated or needs not.
    pub fn proven(&self) -> bool {
        self.proven.load(Ordering::Acquire)
    }

    /// Whether its host authenticated (it had to, and did).
    pub fn authenticated(&self) -> bool {
        self.required() && self.proven()
    }

    /// Marks it proven (under its subsystem's controllers lock, which
    /// counts the host's places) and gives its unproven place back.
    pub(crate) fn set_proven(&self) {
        self.proven.store(true, Ordering::Release);
        self.release_place();
    }

    /// Holds `place` among the unproven controllers until it is proven or gone.
    pub fn hold_place(&self, place: Place) {
        *self.place.lock().unwrap_or_else(|p| p.into_inner()) = Some(place);
    }

    /// Gives its unproven place back (it went).
    pub fn release_place(&self) {
        let p = self.place.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(p);
    }

    /// Whether the controller's queues must authenticate.
    pub fn required(&self) -> bool {
        self.required.load(Ordering::Relaxed)
    }

    /// The admin queue authenticated with `agreed`.
    pub fn record(&self, agreed: Agreed) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(agreed);
    }

    /// Its host's key was rotated in `epoch`: its queues must authenticate
    /// again by `deadline`.
    pub fn rekey(&self, epoch: u64, deadline: Instant) {
        *self.rekey.lock().unwrap_or_else(|p| p.into_inner()) = Some((epoch, deadline));
    }

    /// The epoch its queues must have authenticated in, and by when.
    pub fn rekey_due(&self) -> Option<(u64, Instant)> {
        *self.rekey.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How the admin queue last authenticated (for `status`).
    pub fn last(&self) -> Option<Agreed> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Connect result bits this controller's queues get.
    pub fn connect_result(&self) -> u64 {
        if self.required() {
            CONNECT_ATR
        } else {
            0
        }
    }
}
