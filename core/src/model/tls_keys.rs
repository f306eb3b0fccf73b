//! The hosts' NVMe/TCP TLS PSKs (`[[host]] tls_key`), replaced as a whole by
//! a reload, and the TLS PSK a handshake uses for the identity a host
//! offers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tlspsk::{ConfiguredPsk, Derivation, Identity, PskError};
use zeroize::Zeroizing;

use crate::model::auth::HostConfig;

/// Host NQN -> its configured PSK and the derivation its host uses.
type Keys = HashMap<String, (ConfiguredPsk, Derivation)>;

/// The hosts' PSKs, and when each last changed.
#[derive(Default)]
pub struct TlsKeys {
    keys: ArcSwap<Keys>,
    /// Counts the changes of any key.
    generation: AtomicU64,
    /// Host NQN -> the generation its PSK last changed (added, replaced
    /// or removed) at. Written under `keys`' swap by one reload at a time.
    changed: std::sync::Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for TlsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsKeys({} hosts)", self.keys.load().len())
    }
}

/// The identity a host proved by its TLS handshake, and the generation of
/// the keys when the handshake began: a queue is bound to the key it shook
/// hands with, and one whose host's key changed since connects no more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The PSK identity.
    pub identity: Identity,
    /// [`TlsKeys::generation`] read before the handshake began.
    pub keys_at: u64,
}

impl TlsKeys {
    /// Takes the PSKs of `hosts`; returns the host NQNs whose PSK was
    /// added, removed or replaced.
    pub fn set(&self, hosts: &[HostConfig]) -> Vec<String> {
        let m: Keys = hosts
            .iter()
            .filter_map(|h| Some((h.nqn.clone(), (h.tls_key.clone()?, h.tls_derivation))))
            .collect();
        let mut changed = self.changed.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.keys.swap(Arc::new(m));
        let hosts = crate::model::auth::changed_hosts(&old, &self.keys.load());
        if !hosts.is_empty() {
            // Bumped after the swap: a handshake that read the old
            // generation may have used an old key, and is refused.
            let g = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            for h in &hosts {
                changed.insert(h.clone(), g);
            }
        }
        hosts
    }

    /// The generation of the keys now: read before a handshake begins.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether `hostnqn`'s key is still the one a handshake that began at
    /// generation `keys_at` used (it did not change since).
    pub fn unchanged_since(&self, hostnqn: &str, keys_at: u64) -> bool {
        let changed = self.changed.lock().unwrap_or_else(|p| p.into_inner());
        changed.get(hostnqn).is_none_or(|g| *g <= keys_at)
    }

    /// The TLS PSK for the identity a host offered: its host must have a
    /// PSK here. A version 1 identity's digest picks the derivation (the
    /// host's configured one first); otherwise the configured one.
    pub fn resolve(&self, id: &Identity) -> Result<Zeroizing<Vec<u8>>, PskError> {
        let keys = self.keys.load();
        let (psk, d) = keys.get(&id.hostnqn).ok_or(PskError::Digest)?;
        let order = match d {
            Derivation::Compat => [Derivation::Compat, Derivation::Rfc],
            Derivation::Rfc => [Derivation::Rfc, Derivation::Compat],
        };
        psk.server_psk(id, &order).map(|(k, _)| k)
    }

    /// Whether `hostnqn` has a PSK: it connects to NVM subsystems over TLS
    /// only.
    pub fn has(&self, hostnqn: &str) -> bool {
        self.keys.load().contains_key(hostnqn)
    }

    /// Whether any host has a PSK.
    pub fn is_empty(&self) -> bool {
        self.keys.load().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(nqn: &str, key: Option<&str>) -> HostConfig {
        HostConfig {
            nqn: nqn.into(),
            dhchap_key: None,
            dhchap_ctrl_key: None,
            dhchap_hash: dhchap::HashId::Sha256,
            dhchap_dhgroup: dhchap::GroupId::Null,
            tls_key: key.map(|k| ConfiguredPsk::parse(k).unwrap()),
            tls_derivation: Derivation::Compat,
        }
    }

    const K: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

    #[test]
    fn a_host_with_a_psk_resolves_and_others_do_not() {
        let t = TlsKeys::default();
        assert_eq!(
            t.set(&[host("nqn.h:a", Some(K)), host("nqn.h:b", None)]),
            vec!["nqn.h:a"]
        );
        assert!(t.set(&[host("nqn.h:a", Some(K))]).is_empty(), "unchanged");
        let psk = ConfiguredPsk::parse(K).unwrap();
        let (id, key) = psk
            .host_psk("nqn.h:a", "nqn.s", 0, Derivation::Compat)
            .unwrap();
        assert_eq!(t.resolve(&id).unwrap(), key);
        let (id1, key1) = psk
            .host_psk("nqn.h:a", "nqn.s", 1, Derivation::Rfc)
            .unwrap();
        assert_eq!(t.resolve(&id1).unwrap(), key1, "version 1: by its digest");
        let (other, _) = psk
            .host_psk("nqn.h:b", "nqn.s", 0, Derivation::Compat)
            .unwrap();
        assert!(t.resolve(&other).is_err(), "a host without a PSK");
        assert_eq!(t.set(&[]), vec!["nqn.h:a"]);
        assert!(t.resolve(&id).is_err());
        // A host that derives as the specification says (SPDK), version 0.
        let mut h = host("nqn.h:a", Some(K));
        h.tls_derivation = Derivation::Rfc;
        assert_eq!(t.set(&[h]), vec!["nqn.h:a"]);
        let (id, key) = psk
            .host_psk("nqn.h:a", "nqn.s", 0, Derivation::Rfc)
            .unwrap();
        assert_eq!(t.resolve(&id).unwrap(), key);
    }

    /// Issue 57, 8: a handshake that began before its host's key changed
    /// is stale; other hosts' keys changing does not touch it.
    #[test]
    fn a_key_change_makes_earlier_handshakes_stale() {
        let t = TlsKeys::default();
        t.set(&[host("nqn.h:a", Some(K)), host("nqn.h:b", Some(K))]);
        let g = t.generation();
        assert!(t.unchanged_since("nqn.h:a", g));
        const K2: &str = "NVMeTLSkey-1:01:VzmVQGjKG1mjGbvQpjeiCZf+qsIxvN2vRQFsmxo0GsG03oeo:";
        t.set(&[host("nqn.h:a", Some(K)), host("nqn.h:b", Some(K2))]);
        assert!(t.unchanged_since("nqn.h:a", g), "another host's key");
        assert!(!t.unchanged_since("nqn.h:b", g), "its own key");
        assert!(
            t.unchanged_since("nqn.h:b", t.generation()),
            "a handshake after"
        );
        t.set(&[host("nqn.h:b", Some(K2))]);
        assert!(!t.unchanged_since("nqn.h:a", g), "removed");
    }
}
