//! Diffie-Hellman groups: null and the RFC 7919 FFDHE groups, with
//! constant-time modular exponentiation (crypto-bigint).

use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::Zeroizing;

use crate::ffdhe;

/// A DH-HMAC-CHAP Diffie-Hellman group (its identifier on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupId {
    /// No Diffie-Hellman exchange (identifier 0).
    Null = 0,
    /// ffdhe2048 (1).
    Ffdhe2048 = 1,
    /// ffdhe3072 (2).
    Ffdhe3072 = 2,
    /// ffdhe4096 (3).
    Ffdhe4096 = 3,
    /// ffdhe6144 (4).
    Ffdhe6144 = 4,
    /// ffdhe8192 (5).
    Ffdhe8192 = 5,
}

/// A public value the group cannot use (out of range, wrong length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unusable Diffie-Hellman public value")]
pub struct BadPublic;

impl GroupId {
    /// Every group, in the order Linux hosts offer them.
    pub const ALL: [GroupId; 6] = [
        GroupId::Null,
        GroupId::Ffdhe2048,
        GroupId::Ffdhe3072,
        GroupId::Ffdhe4096,
        GroupId::Ffdhe6144,
        GroupId::Ffdhe8192,
    ];

    /// The group a wire identifier names.
    pub fn from_id(id: u8) -> Option<GroupId> {
        GroupId::ALL.into_iter().find(|g| *g as u8 == id)
    }

    /// The group nvmet's configfs name (`null`, `ffdhe2048`, ...) names.
    pub fn from_name(name: &str) -> Option<GroupId> {
        GroupId::ALL.into_iter().find(|g| g.name() == name)
    }

    /// nvmet's name.
    pub fn name(self) -> &'static str {
        match self {
            GroupId::Null => "null",
            GroupId::Ffdhe2048 => "ffdhe2048",
            GroupId::Ffdhe3072 => "ffdhe3072",
            GroupId::Ffdhe4096 => "ffdhe4096",
            GroupId::Ffdhe6144 => "ffdhe6144",
            GroupId::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Size of a public value in bytes (0 for null).
    pub fn value_len(self) -> usize {
        self.bits() as usize / 8
    }

    fn bits(self) -> u32 {
        match self {
            GroupId::Null => 0,
            GroupId::Ffdhe2048 => 2048,
            GroupId::Ffdhe3072 => 3072,
            GroupId::Ffdhe4096 => 4096,
            GroupId::Ffdhe6144 => 6144,
            GroupId::Ffdhe8192 => 8192,
        }
    }

    /// Bits of a private exponent: twice the group's security strength
    /// (RFC 7919 §5.2; the lengths OpenSSL uses for these groups).
    fn exponent_bits(self) -> u32 {
        match self {
            GroupId::Null => 0,
            GroupId::Ffdhe2048 => 225,
            GroupId::Ffdhe3072 => 275,
            GroupId::Ffdhe4096 => 325,
            GroupId::Ffdhe6144 => 375,
            GroupId::Ffdhe8192 => 400,
        }
    }

    fn params(self) -> Option<&'static Params> {
        static P: [OnceLock<Params>; 5] = [const { OnceLock::new() }; 5];
        let hex = match self {
            GroupId::Null => return None,
            GroupId::Ffdhe2048 => ffdhe::FFDHE2048,
            GroupId::Ffdhe3072 => ffdhe::FFDHE3072,
            GroupId::Ffdhe4096 => ffdhe::FFDHE4096,
            GroupId::Ffdhe6144 => ffdhe::FFDHE6144,
            GroupId::Ffdhe8192 => ffdhe::FFDHE8192,
        };
        Some(P[self as usize - 1].get_or_init(|| {
            let p = BoxedUint::from_be_hex(hex, self.bits()).expect("a valid prime constant");
            let odd = Odd::new(p.clone()).expect("the prime is odd");
            Params {
                p,
                monty: BoxedMontyParams::new(odd),
            }
        }))
    }

    /// A new key pair (`None` for the null group).
    pub fn generate(self) -> Option<KeyPair> {
        let params = self.params()?;
        let n = self.exponent_bits().div_ceil(8) as usize;
        let mut bytes = Zeroizing::new(vec![0u8; n]);
        crate::random(&mut bytes);
        // Exactly `exponent_bits` wide, the top bit set.
        let extra = n as u32 * 8 - self.exponent_bits();
        bytes[0] &= 0xFF >> extra;
        bytes[0] |= 0x80 >> extra;
        let x = BoxedUint::from_be_slice(&bytes, n as u32 * 8).expect("exponent width");
        let public = params.pow(
            &BoxedUint::from(2u32).widen(self.bits()),
            &x,
            self.exponent_bits(),
        );
        Some(KeyPair {
            group: self,
            private: Zeroizing::new(x),
            public: public.to_be_bytes().to_vec(),
        })
    }
}

impl std::fmt::Display for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

struct Params {
    p: BoxedUint,
    monty: BoxedMontyParams,
}

impl Params {
    /// base^exp mod p, in time that depends only on `exp_bits`.
    fn pow(&self, base: &BoxedUint, exp: &BoxedUint, exp_bits: u32) -> BoxedUint {
        BoxedMontyForm::new(base.clone(), self.monty.clone())
            .pow_bounded_exp(exp, exp_bits)
            .retrieve()
    }
}

/// One side's ephemeral Diffie-Hellman key pair.
pub struct KeyPair {
    group: GroupId,
    private: Zeroizing<BoxedUint>,
    /// The public value g^x mod p, big-endian, the group's size.
    pub public: Vec<u8>,
}

impl KeyPair {
    /// The shared secret with the peer's public value, big-endian, the
    /// group's size. Values outside 2..p-2 are refused (they would force
    /// a secret of 1 or ±1).
    pub fn shared(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, BadPublic> {
        let params = self.group.params().ok_or(BadPublic)?;
        if peer.len() != self.group.value_len() {
            return Err(BadPublic);
        }
        let bits = self.group.bits();
        let y = BoxedUint::from_be_slice(peer, bits).map_err(|_| BadPublic)?;
        let one = BoxedUint::one_with_precision(bits);
        let p_minus_1 = params.p.wrapping_sub(&one);
        if y <= one || y >= p_minus_1 {
            return Err(BadPublic);
        }
        let s = params.pow(&y, &self.private, self.group.exponent_bits());
        Ok(Zeroizing::new(s.to_be_bytes().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes_have_the_rfc_7919_form() {
        for g in &GroupId::ALL[1..] {
            let p = &g.params().unwrap().p;
            let b = p.to_be_bytes();
            assert_eq!(b.len() * 8, g.bits() as usize);
            // The top and bottom 64 bits are ones.
            assert!(b[..8].iter().all(|&x| x == 0xFF), "{g}");
            assert!(b[b.len() - 8..].iter().all(|&x| x == 0xFF), "{g}");
        }
    }

    #[test]
    fn two_generates_the_prime_order_subgroup() {
        // p is a safe prime 2q+1 and 2 has order q: 2^q = 1 mod p. A wrong
        // digit anywhere in a constant breaks this.
        for g in [GroupId::Ffdhe2048, GroupId::Ffdhe3072] {
            let params = g.params().unwrap();
            let q = params.p.shr_vartime(1).unwrap();
            let r = params.pow(&BoxedUint::from(2u32).widen(g.bits()), &q, g.bits());
            assert_eq!(r, BoxedUint::one_with_precision(g.bits()), "{g}");
        }
    }

    #[test]
    fn both_sides_agree() {
        for g in &GroupId::ALL[1..] {
            let a = g.generate().unwrap();
            let b = g.generate().unwrap();
            assert_eq!(a.public.len(), g.value_len());
            let s1 = a.shared(&b.public).unwrap();
            let s2 = b.shared(&a.public).unwrap();
            assert_eq!(s1, s2, "{g}");
            assert_eq!(s1.len(), g.value_len());
            assert_ne!(a.public, b.public);
        }
        assert!(GroupId::Null.generate().is_none());
    }

    #[test]
    fn bad_public_values() {
        let g = GroupId::Ffdhe2048;
        let a = g.generate().unwrap();
        let n = g.value_len();
        let mut one = vec![0u8; n];
        one[n - 1] = 1;
        assert_eq!(a.shared(&one), Err(BadPublic));
        assert_eq!(a.shared(&vec![0u8; n]), Err(BadPublic));
        let p = g.params().unwrap().p.to_be_bytes().to_vec();
        assert_eq!(a.shared(&p), Err(BadPublic));
        let mut pm1 = p.clone();
        pm1[n - 1] -= 1;
        assert_eq!(a.shared(&pm1), Err(BadPublic));
        assert_eq!(a.shared(&[0xFF; 255]), Err(BadPublic));
        assert_eq!(a.shared(&[0xFF; 256]), Err(BadPublic));
    }
}
