//! NVMe/TCP over TLS 1.3 with pre-shared keys (TP 8011): the handshake
//! ([`handshake`], OpenSSL, off the workers) and the record keys it gives
//! ([`keys`]), with which the kernel's TLS layer carries the connection on.

pub mod accept;
pub mod handshake;
pub mod keys;
pub mod ktls;

#[cfg(test)]
mod tests;
