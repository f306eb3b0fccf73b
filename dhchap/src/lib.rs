//! Sans-IO NVMe in-band authentication with DH-HMAC-CHAP (NVMe Base 2.x,
//! "Authentication"; TP 8006): the `DHHC-1` secrets, the hash functions and
//! Diffie-Hellman groups, and one authentication transaction as the
//! controller ([`controller::Transaction`]) and as the host
//! ([`host::Transaction`]) run it. Nothing here does I/O: message bytes in,
//! message bytes and events out. Secrets are zeroed when dropped, compared
//! in constant time and never printed.

pub mod controller;
mod ffdhe;
pub mod group;
pub mod hash;
pub mod host;
pub mod response;
pub mod secret;

pub use group::GroupId;
pub use hash::HashId;
pub use secret::{Secret, SecretError};

/// Fills `buf` from the operating system's random number generator.
pub(crate) fn random(buf: &mut [u8]) {
    // Without the OS generator no secret value can be made at all: there
    // is no safe way to go on.
    getrandom::getrandom(buf).expect("the OS random number generator");
}

/// A random non-zero sequence number.
pub(crate) fn seqnum() -> u32 {
    loop {
        let mut b = [0u8; 4];
        random(&mut b);
        let n = u32::from_le_bytes(b);
        if n != 0 {
            return n;
        }
    }
}

#[cfg(test)]
mod tests;
