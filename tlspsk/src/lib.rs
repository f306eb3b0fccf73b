//! Sans-IO NVMe/TCP TLS pre-shared keys (NVMe/TCP transport specification,
//! TP 8011; identity version 1: TP 8018): the configured PSK in its
//! `NVMeTLSkey-1:HH:<base64>:` interchange format, the PSK identity a host
//! offers in its ClientHello, and the derivations from the configured PSK to
//! the retained PSK and from that to the TLS PSK the handshake uses.
//!
//! Two derivations are in the field and give different keys: the one the
//! specification means (RFC 8446 `HkdfLabel`: SPDK, libnvme 1.16 and
//! later, the kernel) and the one libnvme 1.15 and earlier computed (nvme-cli
//! 2.13 among them: the label's length little-endian, no length bytes
//! before label and context), called [`Derivation::Compat`]. A version 1
//! identity carries a digest of the retained PSK, which tells them apart;
//! for version 0 the target must be told which one its hosts use.
//!
//! Keys are zeroed when dropped and never printed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// The hash of a PSK: of its identity, its TLS cipher suite and its
/// derivations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PskHash {
    /// SHA-256: TLS_AES_128_GCM_SHA256, 32-byte keys (`01`).
    Sha256 = 1,
    /// SHA-384: TLS_AES_256_GCM_SHA384, 48-byte keys (`02`).
    Sha384 = 2,
}

impl PskHash {
    /// Its output (and key) length in bytes.
    pub fn len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }

    /// Never: a hash has an output.
    pub fn is_empty(self) -> bool {
        false
    }

    /// The two digits that name it (`01`, `02`).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The TLS 1.3 cipher suite PSKs of this hash are used with.
    pub fn cipher_suite(self) -> &'static str {
        match self {
            PskHash::Sha256 => "TLS_AES_128_GCM_SHA256",
            PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    fn from_code(c: &str) -> Option<PskHash> {
        match c {
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            _ => None,
        }
    }
}

/// How the retained and TLS PSKs are derived (see the crate's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Derivation {
    /// As the specification says (RFC 8446 `HKDF-Expand-Label`).
    Rfc,
    /// As libnvme 1.15 and earlier (nvme-cli 2.13) computed it.
    Compat,
}

impl Derivation {
    /// Both, the specification's first.
    pub const ALL: [Derivation; 2] = [Derivation::Rfc, Derivation::Compat];

    /// Its name in a configuration (`rfc`, `compat`).
    pub fn name(self) -> &'static str {
        match self {
            Derivation::Rfc => "rfc",
            Derivation::Compat => "compat",
        }
    }

    /// The derivation a configuration names.
    pub fn from_name(s: &str) -> Option<Derivation> {
        Derivation::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// Why a PSK, an identity or a derivation was refused. It never quotes key
/// material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    /// Not `NVMeTLSkey-1:HH:<base64>:`.
    #[error(
        "not a TLS PSK (expected NVMeTLSkey-1:<00|01|02>:<base64>:, as nvme gen-tls-key writes it)"
    )]
    Format,
    /// The hash field is not 00, 01 or 02.
    #[error("unknown PSK hash {0:?} (expected 00, 01 or 02)")]
    Hash(String),
    /// The base64 part does not decode.
    #[error("the key is not valid base64")]
    Base64,
    /// The key is not 32 or 48 bytes, or not as long as its hash says.
    #[error("the key is {0} bytes; it must be 32 (SHA-256) or 48 (SHA-384)")]
    Length(usize),
    /// The CRC-32 after the key does not match it.
    #[error("the key's CRC-32 does not match (mistyped or truncated key)")]
    Crc,
    /// Not `NVMe<0|1><R|G><01|02> <hostnqn> <subnqn>[ <digest>]`.
    #[error("not an NVMe TLS PSK identity")]
    Identity,
    /// A generated PSK (secure concatenation after DH-HMAC-CHAP).
    #[error("generated PSKs (secure concatenation) are not supported")]
    Generated,
    /// The identity's hash is not the configured PSK's.
    #[error("the identity asks for a {asked}-byte PSK; the configured one is {have} bytes")]
    HashMismatch {
        /// What the identity's hash needs.
        asked: usize,
        /// What the configured PSK has.
        have: usize,
    },
    /// No derivation of the configured PSK gives the identity's digest.
    #[error("the identity's digest matches no derivation of the configured PSK (another key)")]
    Digest,
    /// An NQN or identity too long for the derivation's label.
    #[error("an NQN too long for the PSK derivation")]
    TooLong,
}

impl From<dhchap::SecretError> for PskError {
    fn from(e: dhchap::SecretError) -> PskError {
        match e {
            dhchap::SecretError::Base64 => PskError::Base64,
            dhchap::SecretError::Length(n) => PskError::Length(n),
            dhchap::SecretError::Crc => PskError::Crc,
            _ => PskError::Format,
        }
    }
}

/// A configured PSK: the key and the hash that turns it into the retained
/// PSK (`None`: it is the retained PSK).
#[derive(Clone)]
pub struct ConfiguredPsk {
    transform: Option<PskHash>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfiguredPsk({} bytes, redacted)", self.key.len())
    }
}

impl PartialEq for ConfiguredPsk {
    fn eq(&self, o: &ConfiguredPsk) -> bool {
        self.transform == o.transform && bool::from(self.key.as_slice().ct_eq(o.key.as_slice()))
    }
}

impl Eq for ConfiguredPsk {}

impl std::str::FromStr for ConfiguredPsk {
    type Err = PskError;
    fn from_str(s: &str) -> Result<ConfiguredPsk, PskError> {
        ConfiguredPsk::parse(s)
    }
}

impl ConfiguredPsk {
    /// Reads `NVMeTLSkey-1:HH:<base64 of key + CRC-32>:` (surrounding
    /// whitespace ignored).
    pub fn parse(s: &str) -> Result<ConfiguredPsk, PskError> {
        let rest = s
            .trim()
            .strip_prefix("NVMeTLSkey-1:")
            .ok_or(PskError::Format)?;
        let (hh, rest) = rest.split_once(':').ok_or(PskError::Format)?;
        let b64 = rest.strip_suffix(':').ok_or(PskError::Format)?;
        let transform = match hh {
            "00" => None,
            h => Some(PskHash::from_code(h).ok_or_else(|| {
                // Only the field, never key material.
                PskError::Hash(h.chars().take(2).collect())
            })?),
        };
        let lengths = match transform {
            None => &[32, 48][..],
            Some(h) => &[h.len()][..],
        };
        let key = dhchap::secret::key_from_base64(b64, lengths)?;
        Ok(ConfiguredPsk { transform, key })
    }

    /// A PSK of these key bytes (32 or 48; as long as `transform` says).
    pub fn new(transform: Option<PskHash>, key: &[u8]) -> Result<ConfiguredPsk, PskError> {
        let ok = match transform {
            None => matches!(key.len(), 32 | 48),
            Some(h) => key.len() == h.len(),
        };
        if !ok {
            return Err(PskError::Length(key.len()));
        }
        Ok(ConfiguredPsk {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// The interchange format (it carries the key: handle it as one).
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let hh = self.transform.map_or(0, PskHash::code);
        Zeroizing::new(format!(
            "NVMeTLSkey-1:{hh:02}:{}:",
            dhchap::secret::key_to_base64(&self.key).as_str()
        ))
    }

    /// The hash of its identities and cipher suite: its transform's, else
    /// the one its length says.
    pub fn hash(&self) -> PskHash {
        self.transform.unwrap_or(match self.key.len() {
            48 => PskHash::Sha384,
            _ => PskHash::Sha256,
        })
    }

    /// The retained PSK for the host `hostnqn`.
    pub fn retained(&self, hostnqn: &str, d: Derivation) -> Result<Zeroizing<Vec<u8>>, PskError> {
        match self.transform {
            None => Ok(self.key.clone()),
            Some(h) => expand_label(h, &self.key, "HostNQN", hostnqn.as_bytes(), d),
        }
    }

    /// The identity and TLS PSK a host with this PSK uses towards `subnqn`
    /// (identity `version` 0 or 1).
    pub fn host_psk(
        &self,
        hostnqn: &str,
        subnqn: &str,
        version: u8,
        d: Derivation,
    ) -> Result<(Identity, Zeroizing<Vec<u8>>), PskError> {
        let retained = self.retained(hostnqn, d)?;
        let hash = self.hash();
        let id = Identity {
            version,
            hash,
            hostnqn: hostnqn.into(),
            subnqn: subnqn.into(),
            digest: match version {
                0 => None,
                1 => Some(digest(&retained, hash, hostnqn, subnqn)),
                _ => return Err(PskError::Identity),
            },
        };
        let psk = tls_psk(&retained, &id, d)?;
        Ok((id, psk))
    }

    /// The TLS PSK a target holding this PSK uses for the identity a host
    /// offered, and the derivation it took: for a version 1 identity, the
    /// one of `derivations` whose retained PSK gives the identity's digest;
    /// for version 0, the first of `derivations` (nothing tells them apart
    /// before the handshake's binder).
    pub fn server_psk(
        &self,
        id: &Identity,
        derivations: &[Derivation],
    ) -> Result<(Zeroizing<Vec<u8>>, Derivation), PskError> {
        let have = self.hash();
        if id.hash != have {
            return Err(PskError::HashMismatch {
                asked: id.hash.len(),
                have: self.key.len(),
            });
        }
        for &d in derivations {
            let retained = self.retained(&id.hostnqn, d)?;
            if let Some(want) = &id.digest {
                let got = digest(&retained, id.hash, &id.hostnqn, &id.subnqn);
                if !bool::from(got.as_bytes().ct_eq(want.as_bytes())) {
                    continue;
                }
            }
            return Ok((tls_psk(&retained, id, d)?, d));
        }
        Err(PskError::Digest)
    }
}

/// A PSK identity, as a host offers it in its ClientHello:
/// `NVMe<version>R<hash> <hostnqn> <subnqn>`, and for version 1 ` <digest>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// 0 or 1.
    pub version: u8,
    /// Its PSK's hash.
    pub hash: PskHash,
    /// The host's NQN.
    pub hostnqn: String,
    /// The subsystem's NQN.
    pub subnqn: String,
    /// Version 1: the base64 HMAC of the NQNs under the retained PSK.
    pub digest: Option<String>,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NVMe{}R{:02} {} {}",
            self.version,
            self.hash.code(),
            self.hostnqn,
            self.subnqn
        )?;
        match &self.digest {
            Some(d) => write!(f, " {d}"),
            None => Ok(()),
        }
    }
}

/// The longest identity read (two NQNs of 223 bytes, a SHA-384 digest).
pub const MAX_IDENTITY: usize = 8 + 1 + 223 + 1 + 223 + 1 + 64;

impl Identity {
    /// Reads an identity (bytes from a peer: bounded, ASCII only).
    pub fn parse(b: &[u8]) -> Result<Identity, PskError> {
        // Printable ASCII and the spaces between the fields: nothing that
        // would forge a log line when the identity is logged.
        let printable = |c: &u8| *c == b' ' || (0x21..=0x7e).contains(c);
        if b.len() > MAX_IDENTITY || !b.iter().all(printable) {
            return Err(PskError::Identity);
        }
        let s = std::str::from_utf8(b).map_err(|_| PskError::Identity)?;
        let mut parts = s.split(' ');
        let head = parts.next().unwrap_or_default();
        let h = head.strip_prefix("NVMe").ok_or(PskError::Identity)?;
        if h.len() != 4 {
            return Err(PskError::Identity);
        }
        let version = match &h[..1] {
            "0" => 0,
            "1" => 1,
            _ => return Err(PskError::Identity),
        };
        match &h[1..2] {
            "R" => {}
            "G" => return Err(PskError::Generated),
            _ => return Err(PskError::Identity),
        }
        let hash = PskHash::from_code(&h[2..]).ok_or(PskError::Identity)?;
        let nqn = |p: Option<&str>| match p {
            Some(n) if !n.is_empty() && n.len() <= 223 => Ok(n.to_string()),
            _ => Err(PskError::Identity),
        };
        let hostnqn = nqn(parts.next())?;
        let subnqn = nqn(parts.next())?;
        let digest = match (version, parts.next()) {
            (0, None) => None,
            (1, Some(d)) if d.len() == base64_len(hash.len()) => Some(d.to_string()),
            _ => return Err(PskError::Identity),
        };
        if parts.next().is_some() {
            return Err(PskError::Identity);
        }
        Ok(Identity {
            version,
            hash,
            hostnqn,
            subnqn,
            digest,
        })
    }
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// The digest of a version 1 identity: base64 of HMAC(retained PSK,
/// hostnqn " " subnqn " NVMe-over-Fabrics").
pub fn digest(retained: &[u8], hash: PskHash, hostnqn: &str, subnqn: &str) -> String {
    let msg = [
        hostnqn.as_bytes(),
        b" ",
        subnqn.as_bytes(),
        b" ",
        b"NVMe-over-Fabrics",
    ];
    let mac = match hash {
        PskHash::Sha256 => hmac_of::<Hmac<sha2::Sha256>>(retained, &msg),
        PskHash::Sha384 => hmac_of::<Hmac<sha2::Sha384>>(retained, &msg),
    };
    STANDARD.encode(mac.as_slice())
}

fn hmac_of<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    // HMAC takes a key of any length.
    let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    for p in parts {
        m.update(p);
    }
    Zeroizing::new(m.finalize().into_bytes().to_vec())
}

/// The TLS PSK of `id` from its retained PSK.
pub fn tls_psk(
    retained: &[u8],
    id: &Identity,
    d: Derivation,
) -> Result<Zeroizing<Vec<u8>>, PskError> {
    let ctx = match &id.digest {
        None => id.to_string(),
        Some(dg) => format!("{:02} {dg}", id.hash.code()),
    };
    expand_label(id.hash, retained, "nvme-tls-psk", ctx.as_bytes(), d)
}

/// HKDF-Extract(0, `key`), then HKDF-Expand with the `tls13 <label>` info
/// `d` builds, to the hash's length.
fn expand_label(
    hash: PskHash,
    key: &[u8],
    label: &str,
    ctx: &[u8],
    d: Derivation,
) -> Result<Zeroizing<Vec<u8>>, PskError> {
    let n = hash.len();
    let label = format!("tls13 {label}");
    let mut info = Zeroizing::new(Vec::with_capacity(2 + 2 + label.len() + ctx.len()));
    match d {
        Derivation::Rfc => {
            if ctx.len() > 255 {
                return Err(PskError::TooLong);
            }
            info.extend_from_slice(&(n as u16).to_be_bytes());
            info.push(label.len() as u8);
            info.extend_from_slice(label.as_bytes());
            info.push(ctx.len() as u8);
            info.extend_from_slice(ctx);
        }
        Derivation::Compat => {
            // libnvme's bounds: the label with the host NQN, or the
            // context alone, 256 bytes.
            let host = label == "tls13 HostNQN";
            if ctx.len() > 256 || host && label.len() + ctx.len() > 256 {
                return Err(PskError::TooLong);
            }
            info.extend_from_slice(&(n as u16).to_le_bytes());
            info.extend_from_slice(label.as_bytes());
            info.extend_from_slice(ctx);
        }
    }
    let mut out = Zeroizing::new(vec![0u8; n]);
    let ok = match hash {
        PskHash::Sha256 => hkdf::Hkdf::<sha2::Sha256>::new(None, key).expand(&info, &mut out),
        PskHash::Sha384 => hkdf::Hkdf::<sha2::Sha384>::new(None, key).expand(&info, &mut out),
    };
    // The output is the hash's length: within what HKDF can give.
    ok.map_err(|_| PskError::TooLong)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
