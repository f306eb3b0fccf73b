//! The hosts' NVMe/TCP TLS PSKs (`[[host]] tls_key`), replaced as a whole by
//! a reload, and the TLS PSK a handshake uses for the identity a host
//! offers.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tlspsk::{ConfiguredPsk, Derivation, Identity, PskError};
use zeroize::Zeroizing;

use crate::config::HostConfig;

/// Host NQN -> its configured PSK and the derivation its host uses.
#[derive(Default)]
pub struct TlsKeys(ArcSwap<HashMap<String, (ConfiguredPsk, Derivation)>>);

impl std::fmt::Debug for TlsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsKeys({} hosts)", self.0.load().len())
    }
}

impl TlsKeys {
    /// Takes the PSKs of `hosts`; returns the host NQNs whose PSK was
    /// added, removed or replaced.
    pub fn set(&self, hosts: &[HostConfig]) -> Vec<String> {
        let m: HashMap<String, (ConfiguredPsk, Derivation)> = hosts
            .iter()
            .filter_map(|h| Some((h.nqn.clone(), (h.tls_key.clone()?, h.tls_derivation))))
            .collect();
        let old = self.0.swap(Arc::new(m));
        crate::model::auth::changed_hosts(&old, &self.0.load())
    }

    /// The TLS PSK for the identity a host offered: its host must have a
    /// PSK here. A version 1 identity's digest picks the derivation (the
    /// host's configured one first); otherwise the configured one.
    pub fn resolve(&self, id: &Identity) -> Result<Zeroizing<Vec<u8>>, PskError> {
        let keys = self.0.load();
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
        self.0.load().contains_key(hostnqn)
    }

    /// Whether any host has a PSK.
    pub fn is_empty(&self) -> bool {
        self.0.load().is_empty()
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
}
