//! The values DH-HMAC-CHAP computes: the augmented challenge and the host's
//! and the controller's responses.

use zeroize::Zeroizing;

use crate::hash::HashId;

/// The challenge a response is computed over: with a Diffie-Hellman
/// exchange, HMAC(H(shared secret), challenge); without, the challenge.
pub fn challenge(hash: HashId, shared: Option<&[u8]>, c: &[u8]) -> Zeroizing<Vec<u8>> {
    match shared {
        Some(s) => hash.hmac(&hash.digest(s), &[c]),
        None => Zeroizing::new(c.to_vec()),
    }
}

/// What one response covers besides the key.
pub struct Transcript<'a> {
    /// The (augmented) challenge.
    pub challenge: &'a [u8],
    /// The sequence number that came with it.
    pub seqnum: u32,
    /// Transaction identifier.
    pub t_id: u16,
    /// Secure channel concatenation (0 on RDMA).
    pub sc_c: u8,
    /// Host NQN.
    pub hostnqn: &'a str,
    /// Subsystem NQN.
    pub subnqn: &'a str,
}

impl Transcript<'_> {
    /// The host's response R1, under the host key transformed with the host NQN.
    pub fn host(&self, hash: HashId, key: &[u8]) -> Zeroizing<Vec<u8>> {
        self.mac(hash, key, b"HostHost", self.hostnqn, self.subnqn)
    }

    /// The controller's response R2, under the controller key transformed
    /// with the subsystem NQN.
    pub fn controller(&self, hash: HashId, key: &[u8]) -> Zeroizing<Vec<u8>> {
        self.mac(hash, key, b"Controller", self.subnqn, self.hostnqn)
    }

    fn mac(
        &self,
        hash: HashId,
        key: &[u8],
        who: &[u8],
        first: &str,
        second: &str,
    ) -> Zeroizing<Vec<u8>> {
        hash.hmac(
            key,
            &[
                self.challenge,
                &self.seqnum.to_le_bytes(),
                &self.t_id.to_le_bytes(),
                &[self.sc_c],
                who,
                first.as_bytes(),
                &[0],
                second.as_bytes(),
            ],
        )
    }
}
