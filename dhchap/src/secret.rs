//! DH-HMAC-CHAP secrets in the `DHHC-1:<hmac>:<base64 of key + CRC-32>:`
//! representation (nvme-cli's `gen-dhchap-key`, nvmet's configfs), and the
//! NQN-based key transformation.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::hash::HashId;

/// Why a secret string was refused. It never quotes the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Not `DHHC-1:XX:...:`.
    #[error("not a DHHC-1 secret (expected DHHC-1:<00|01|02|03>:<base64>:)")]
    Format,
    /// The transformation field is not 00, 01, 02 or 03.
    #[error("unknown key transformation {0:?} (expected 00, 01, 02 or 03)")]
    Transform(String),
    /// The base64 part does not decode.
    #[error("the key is not valid base64")]
    Base64,
    /// The key is not 32, 48 or 64 bytes.
    #[error("the key is {0} bytes; it must be 32, 48 or 64")]
    Length(usize),
    /// The CRC-32 after the key does not match it.
    #[error("the key's CRC-32 does not match (mistyped or truncated secret)")]
    Crc,
}

/// The key of a secret's representation, `base64(key || CRC-32(key))` (the
/// CRC little-endian), as DH-HMAC-CHAP secrets and NVMe/TCP TLS PSKs
/// (`NVMeTLSkey-1`) write it; the key must be one of `lengths` bytes.
pub fn key_from_base64(b64: &str, lengths: &[usize]) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| SecretError::Base64)?);
    if raw.len() < 4 {
        return Err(SecretError::Length(0));
    }
    let n = raw.len() - 4;
    if !lengths.contains(&n) {
        return Err(SecretError::Length(n));
    }
    let crc = u32::from_le_bytes([raw[n], raw[n + 1], raw[n + 2], raw[n + 3]]);
    if crc32fast::hash(&raw[..n]) != crc {
        return Err(SecretError::Crc);
    }
    Ok(Zeroizing::new(raw[..n].to_vec()))
}

/// `base64(key || CRC-32(key))`, as [`key_from_base64`] reads it.
pub fn key_to_base64(key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(key.to_vec());
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    Zeroizing::new(STANDARD.encode(raw.as_slice()))
}

/// A DH-HMAC-CHAP secret: the key and how it is transformed before use.
/// Its bytes are zeroed when it is dropped and never printed.
#[derive(Clone)]
pub struct Secret {
    /// The hash of the NQN-based transformation (`None`: used as it is).
    pub transform: Option<HashId>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes, redacted)", self.key.len())
    }
}

impl PartialEq for Secret {
    fn eq(&self, o: &Secret) -> bool {
        self.transform == o.transform && bool::from(self.key.as_slice().ct_eq(o.key.as_slice()))
    }
}

impl Eq for Secret {}

impl std::str::FromStr for Secret {
    type Err = SecretError;
    fn from_str(s: &str) -> Result<Secret, SecretError> {
        Secret::parse(s)
    }
}

impl Secret {
    /// Reads a `DHHC-1:` secret (surrounding whitespace ignored).
    pub fn parse(s: &str) -> Result<Secret, SecretError> {
        let s = s.trim();
        let rest = s.strip_prefix("DHHC-1:").ok_or(SecretError::Format)?;
        let (hmac, rest) = rest.split_once(':').ok_or(SecretError::Format)?;
        let b64 = rest.strip_suffix(':').ok_or(SecretError::Format)?;
        let transform = match hmac {
            "00" => None,
            "01" => Some(HashId::Sha256),
            "02" => Some(HashId::Sha384),
            "03" => Some(HashId::Sha512),
            other => {
                // Only the two characters of the field, never key material.
                let shown: String = other.chars().take(2).collect();
                return Err(SecretError::Transform(shown));
            }
        };
        Ok(Secret {
            transform,
            key: key_from_base64(b64, &[32, 48, 64])?,
        })
    }

    /// A secret of these key bytes (32, 48 or 64 of them).
    pub fn new(transform: Option<HashId>, key: &[u8]) -> Result<Secret, SecretError> {
        if !matches!(key.len(), 32 | 48 | 64) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Secret {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// A new random secret of `len` bytes (`gen-dhchap-key`).
    pub fn generate(transform: Option<HashId>, len: usize) -> Result<Secret, SecretError> {
        let mut key = Zeroizing::new(vec![0u8; len]);
        crate::random(&mut key);
        Secret::new(transform, &key)
    }

    /// The `DHHC-1:` representation (it carries the key: handle it as one).
    pub fn to_dhhc(&self) -> Zeroizing<String> {
        let t = self.transform.map_or(0, |h| h as u8);
        Zeroizing::new(format!(
            "DHHC-1:{t:02}:{}:",
            key_to_base64(&self.key).as_str()
        ))
    }

    /// Key length in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Always false: a secret has 32 bytes or more.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The key an HMAC response is computed with, for the entity named
    /// `nqn`: the key itself, or HMAC(key, NQN || "NVMe-over-Fabrics") with
    /// the secret's transformation hash.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (t, len) in [
            (None, 32),
            (Some(HashId::Sha256), 32),
            (Some(HashId::Sha384), 48),
            (Some(HashId::Sha512), 64),
        ] {
            let s = Secret::generate(t, len).unwrap();
            let text = s.to_dhhc();
            assert!(text.starts_with(&format!("DHHC-1:0{}:", t.map_or(0, |h| h as u8))));
            assert_eq!(Secret::parse(&text).unwrap(), s);
            assert_eq!(Secret::parse(&format!(" {}\n", text.as_str())).unwrap(), s);
            assert!(!format!("{s:?}").contains(&text[10..20]));
        }
    }

    #[test]
    fn refusals() {
        let good = Secret::new(None, &[7; 32]).unwrap().to_dhhc();
        assert_eq!(Secret::parse("DHHC-2:00:abc:"), Err(SecretError::Format));
        assert_eq!(
            Secret::parse(&good[..good.len() - 1]),
            Err(SecretError::Format)
        );
        assert_eq!(
            Secret::parse(&good.replace("DHHC-1:00", "DHHC-1:04")),
            Err(SecretError::Transform("04".into()))
        );
        assert_eq!(Secret::parse("DHHC-1:00:!!!!:"), Err(SecretError::Base64));
        // A changed key byte: the CRC catches it.
        let mut raw = STANDARD.decode(&good[10..good.len() - 1]).unwrap();
        raw[0] ^= 1;
        let bad = format!("DHHC-1:00:{}:", STANDARD.encode(&raw));
        assert_eq!(Secret::parse(&bad), Err(SecretError::Crc));
        let short = format!("DHHC-1:00:{}:", STANDARD.encode([1u8; 20]));
        assert_eq!(Secret::parse(&short), Err(SecretError::Length(16)));
    }

    /// Known answers from nvme-cli 2.3's `gen-dhchap-key` (Debian 12), which
    /// prints the NQN-transformed key when it is given a secret, a
    /// transformation and an NQN.
    #[test]
    fn nvme_cli_known_answers() {
        const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:test";
        let k32: Vec<u8> = (0u8..32).collect();
        let k64: Vec<u8> = (0u8..64).collect();
        // --hmac=0 --secret=000102...1f
        let s =
            Secret::parse("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:").unwrap();
        assert_eq!(s, Secret::new(None, &k32).unwrap());
        // --hmac=1 --secret=000102...1f --nqn=NQN
        let t =
            Secret::parse("DHHC-1:01:WulleCBkG4oCs0iIC3Cit9gBDCLWiZ9PNXuhqytWkBIZkvGy:").unwrap();
        let s = Secret::new(Some(HashId::Sha256), &k32).unwrap();
        assert_eq!(s.transformed(NQN).as_slice(), t.key.as_slice());
        // --hmac=3 --key-length=64 --secret=000102...3f --nqn=NQN
        let t = Secret::parse("DHHC-1:03:d9FmVEvkZD5WUqUkzVMj3JFzwudZt1EtUNK4zK6+E9Dd42mroGA4ub4Yju0aNPtAr2w0xZFyCxz8d1Q12rImDko3x34=:").unwrap();
        let s = Secret::new(Some(HashId::Sha512), &k64).unwrap();
        assert_eq!(s.transformed(NQN).as_slice(), t.key.as_slice());
    }

    #[test]
    fn transformation() {
        let key: Vec<u8> = (0u8..32).collect();
        let plain = Secret::new(None, &key).unwrap();
        assert_eq!(plain.transformed("nqn.x").as_slice(), key.as_slice());
        let t = Secret::new(Some(HashId::Sha512), &key).unwrap();
        let k = t.transformed("nqn.x");
        assert_eq!(k.len(), 64);
        assert_eq!(k, HashId::Sha512.hmac(&key, &[b"nqn.xNVMe-over-Fabrics"]));
        assert_ne!(k, t.transformed("nqn.y"));
    }
}
