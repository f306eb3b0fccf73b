//! The hash functions of DH-HMAC-CHAP and the HMACs built on them.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A DH-HMAC-CHAP hash function (its identifier on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashId {
    /// SHA-256 (identifier 1).
    Sha256 = 1,
    /// SHA-384 (identifier 2).
    Sha384 = 2,
    /// SHA-512 (identifier 3).
    Sha512 = 3,
}

impl HashId {
    /// Every hash function, in the order Linux hosts offer them.
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    /// The function a wire identifier names.
    pub fn from_id(id: u8) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| *h as u8 == id)
    }

    /// The function nvmet's configfs name (`hmac(sha256)`, ...) names; the
    /// bare digest name is taken too.
    pub fn from_name(name: &str) -> Option<HashId> {
        HashId::ALL
            .into_iter()
            .find(|h| name == h.name() || name == h.digest_name())
    }

    /// nvmet's name: `hmac(sha256)`, `hmac(sha384)`, `hmac(sha512)`.
    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "hmac(sha256)",
            HashId::Sha384 => "hmac(sha384)",
            HashId::Sha512 => "hmac(sha512)",
        }
    }

    fn digest_name(self) -> &'static str {
        &self.name()[5..11]
    }

    /// Digest length in bytes (the messages' HL).
    pub fn len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    /// Always false: a digest has bytes (for clippy's `len` rule).
    pub fn is_empty(self) -> bool {
        false
    }

    /// The digest of `data`.
    pub fn digest(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashId::Sha256 => Sha256::digest(data).to_vec(),
            HashId::Sha384 => Sha384::digest(data).to_vec(),
            HashId::Sha512 => Sha512::digest(data).to_vec(),
        })
    }

    /// HMAC of the concatenation of `parts` under `key`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes keys of any length.
            let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("any key length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        Zeroizing::new(match self {
            HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
            HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
            HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
        })
    }
}

impl std::fmt::Display for HashId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ids_lengths() {
        for h in HashId::ALL {
            assert_eq!(HashId::from_id(h as u8), Some(h));
            assert_eq!(HashId::from_name(h.name()), Some(h));
            assert_eq!(h.digest(b"").len(), h.len());
            assert_eq!(h.hmac(b"k", &[b"a", b"b"]), h.hmac(b"k", &[b"ab"]));
        }
        assert_eq!(HashId::from_name("sha384"), Some(HashId::Sha384));
        assert_eq!(HashId::from_id(0), None);
        assert_eq!(HashId::from_id(4), None);
        assert_eq!(HashId::from_name("hmac(md5)"), None);
    }

    #[test]
    fn rfc4231_case_2() {
        // HMAC with key "Jefe" over "what do ya want for nothing?".
        let m = HashId::Sha256.hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
