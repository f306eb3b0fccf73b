//! The record keys of a TLS 1.3 connection, from the traffic secrets its
//! handshake logged (RFC 8446 7.1 and 7.3): what the kernel's TLS layer
//! (kTLS) needs to carry the connection on after the handshake. Sans-IO.

use tlspsk::PskHash;
use zeroize::Zeroizing;

/// One direction's keys: AES-GCM key, IV, and the sequence number of its
/// next record.
#[derive(Clone, PartialEq, Eq)]
pub struct TrafficKeys {
    /// The AES key (16 bytes for AES-128, 32 for AES-256).
    pub key: Zeroizing<Vec<u8>>,
    /// The 12-byte IV (its first 4 bytes are kTLS's salt).
    pub iv: Zeroizing<[u8; 12]>,
    /// The next record's sequence number.
    pub seq: u64,
}

impl std::fmt::Debug for TrafficKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TrafficKeys({}-byte key, redacted, seq {})",
            self.key.len(),
            self.seq
        )
    }
}

impl TrafficKeys {
    /// The keys of a traffic secret of a connection with cipher suite
    /// `hash` (TLS_AES_128_GCM_SHA256 or TLS_AES_256_GCM_SHA384), from
    /// sequence number 0.
    pub fn from_secret(hash: PskHash, secret: &[u8]) -> Option<TrafficKeys> {
        let key_len = match hash {
            PskHash::Sha256 => 16,
            PskHash::Sha384 => 32,
        };
        let mut key = Zeroizing::new(vec![0u8; key_len]);
        let mut iv = Zeroizing::new([0u8; 12]);
        expand_label(hash, secret, b"key", &mut key)?;
        expand_label(hash, secret, b"iv", &mut iv[..])?;
        Some(TrafficKeys { key, iv, seq: 0 })
    }

    /// The nonce of record `seq`: the IV with the sequence number XORed
    /// into its last 8 bytes.
    pub fn nonce(&self, seq: u64) -> [u8; 12] {
        let mut n = *self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

/// HKDF-Expand-Label(secret, label, "", out.len()) of RFC 8446 7.1.
fn expand_label(hash: PskHash, secret: &[u8], label: &[u8], out: &mut [u8]) -> Option<()> {
    let mut info = Vec::with_capacity(4 + 6 + label.len());
    info.extend_from_slice(&(out.len() as u16).to_be_bytes());
    info.push((6 + label.len()) as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0);
    match hash {
        PskHash::Sha256 => hkdf::Hkdf::<sha2::Sha256>::from_prk(secret)
            .ok()?
            .expand(&info, out)
            .ok(),
        PskHash::Sha384 => hkdf::Hkdf::<sha2::Sha384>::from_prk(secret)
            .ok()?
            .expand(&info, out)
            .ok(),
    }
}

/// The two traffic secrets a handshake logs (NSS key log lines, as
/// OpenSSL's keylog callback gives them).
#[derive(Default)]
pub struct Secrets {
    /// CLIENT_TRAFFIC_SECRET_0: what the host sends.
    pub client: Option<Zeroizing<Vec<u8>>>,
    /// SERVER_TRAFFIC_SECRET_0: what the target sends.
    pub server: Option<Zeroizing<Vec<u8>>>,
}

impl Secrets {
    /// Takes a key log line (others are ignored).
    pub fn take_line(&mut self, line: &str) {
        let mut f = line.split(' ');
        let (Some(label), Some(_random), Some(hex)) = (f.next(), f.next(), f.next()) else {
            return;
        };
        let slot = match label {
            "CLIENT_TRAFFIC_SECRET_0" => &mut self.client,
            "SERVER_TRAFFIC_SECRET_0" => &mut self.server,
            _ => return,
        };
        *slot = unhex(hex);
    }
}

fn unhex(s: &str) -> Option<Zeroizing<Vec<u8>>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    let mut out = Zeroizing::new(Vec::with_capacity(s.len() / 2));
    for i in (0..s.len()).step_by(2) {
        out.push(u8::from_str_radix(s.get(i..i + 2)?, 16).ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8448 3 (simple 1-RTT handshake): the server's application
    /// traffic secret and the key and IV it gives.
    #[test]
    fn record_keys_as_rfc_8448_derives_them() {
        let mut s = Secrets::default();
        s.take_line("SERVER_TRAFFIC_SECRET_0 00 a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
        s.take_line("CLIENT_HANDSHAKE_TRAFFIC_SECRET 00 ff");
        s.take_line("garbage");
        let k = TrafficKeys::from_secret(PskHash::Sha256, s.server.as_ref().unwrap()).unwrap();
        assert_eq!(
            k.key.as_slice(),
            [
                0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef, 0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92,
                0xe3, 0x56
            ]
        );
        assert_eq!(
            *k.iv,
            [0xcf, 0x78, 0x2b, 0x88, 0xdd, 0x83, 0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84]
        );
        assert!(s.client.is_none());
        assert_eq!(k.nonce(0), *k.iv);
        assert_eq!(k.nonce(1)[11], 0x84 ^ 1);
        assert!(!format!("{k:?}").contains("9f"));
    }
}
