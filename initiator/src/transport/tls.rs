//! The host side of NVMe/TCP's TLS 1.3 with a pre-shared key (TP 8011):
//! the PSK a host holds ([`HostPsk`]: a configured key in the
//! `NVMeTLSkey-1` interchange format, the identity version and the
//! derivation its target expects), what one connection offers
//! ([`Offer`]: an identity and its TLS PSK, derived for one subsystem),
//! and the handshake through OpenSSL, TLS 1.3 only, no certificate. The
//! queue then reads and writes through OpenSSL's record layer ([`Stream`]).
//!
//! OpenSSL's client PSK callback, the one the openssl crate wraps, offers
//! an identity of at most 256 bytes and fixes the suite to
//! TLS_AES_128_GCM_SHA256: a SHA-384 PSK or longer NQNs are refused here
//! with that said.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use openssl::ssl::{
    HandshakeError, Ssl, SslContextBuilder, SslMethod, SslMode, SslOptions, SslStream,
    SslVerifyMode, SslVersion,
};
use tlspsk::{ConfiguredPsk, Derivation, PskHash};
use zeroize::Zeroizing;

/// The longest identity OpenSSL's client callback takes.
const MAX_IDENTITY: usize = 256;

/// A host's configured TLS PSK and how it offers it.
#[derive(Clone)]
pub struct HostPsk {
    /// The configured PSK (`NVMeTLSkey-1:...`).
    pub key: Arc<ConfiguredPsk>,
    /// Identity version: 0 (`NVMe0R0x host subsystem`) or 1 (with the PSK digest).
    pub version: u8,
    /// How the TLS PSK is derived from the retained one.
    pub derivation: Derivation,
}

impl std::fmt::Debug for HostPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPsk")
            .field("hash", &self.key.hash())
            .field("version", &self.version)
            .field("derivation", &self.derivation.name())
            .finish_non_exhaustive()
    }
}

impl HostPsk {
    /// What a connection from `hostnqn` to `subnqn` offers.
    pub fn offer(&self, hostnqn: &str, subnqn: &str) -> Result<Offer, String> {
        let (identity, psk) = self
            .key
            .host_psk(hostnqn, subnqn, self.version, self.derivation)
            .map_err(|e| format!("TLS PSK for {hostnqn} -> {subnqn}: {e}"))?;
        Ok(Offer {
            identity: identity.to_string(),
            psk,
            hash: self.key.hash(),
        })
    }
}

/// One connection's PSK: the identity sent in the ClientHello and the TLS
/// PSK behind it. Any identity and key may be offered (malformed-input
/// tests offer ones no target holds).
#[derive(Clone)]
pub struct Offer {
    /// The PSK identity, as sent.
    pub identity: String,
    /// The TLS PSK.
    pub psk: Zeroizing<Vec<u8>>,
    /// Its hash (the cipher suite's).
    pub hash: PskHash,
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offer")
            .field("identity", &self.identity)
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// Runs the client side of the handshake on `s` (blocking, each step
/// within `timeout`). The socket is left blocking without timeouts.
pub fn handshake(
    s: TcpStream,
    offer: &Offer,
    timeout: Duration,
) -> Result<SslStream<TcpStream>, String> {
    if offer.hash != PskHash::Sha256 {
        return Err(
            "TLS: only SHA-256 PSKs (TLS_AES_128_GCM_SHA256) are offered by this host".into(),
        );
    }
    if offer.identity.len() > MAX_IDENTITY || offer.identity.contains('\0') {
        return Err(format!(
            "TLS: an identity of {} bytes (at most {MAX_IDENTITY}, no NUL)",
            offer.identity.len()
        ));
    }
    let setup = |e: openssl::error::ErrorStack| format!("TLS setup: {e}");
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).map_err(setup)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_ciphersuites("TLS_AES_128_GCM_SHA256")
        .map_err(setup)?;
    b.set_options(SslOptions::NO_TICKET);
    b.set_verify(SslVerifyMode::NONE);
    // The queue writes what a non-blocking socket takes and retries the
    // rest from a buffer that may have moved.
    b.set_mode(SslMode::ENABLE_PARTIAL_WRITE | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    let (id, key) = (offer.identity.clone(), offer.psk.clone());
    b.set_psk_client_callback(move |_, _, id_out, key_out| {
        let idb = id.as_bytes();
        if idb.len() >= id_out.len() || key.len() > key_out.len() {
            return Ok(0);
        }
        id_out[..idb.len()].copy_from_slice(idb);
        id_out[idb.len()] = 0;
        key_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    let ssl = Ssl::new(&b.build()).map_err(setup)?;
    s.set_read_timeout(Some(timeout))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("TLS: {e}"))?;
    let tls = ssl.connect(s).map_err(|e| match e {
        HandshakeError::SetupFailure(e) => setup(e),
        // A read that timed out.
        HandshakeError::WouldBlock(_) => "TLS handshake timed out".to_string(),
        HandshakeError::Failure(m) => format!("TLS handshake refused or failed: {}", m.error()),
    })?;
    // Nothing is verified but the PSK: a server that ignored it (and
    // showed a certificate instead) proved nothing.
    if !tls.ssl().session_reused() || tls.ssl().peer_certificate().is_some() {
        return Err("TLS: the target did not take the PSK".into());
    }
    let tcp = tls.get_ref();
    tcp.set_read_timeout(None)
        .and_then(|_| tcp.set_write_timeout(None))
        .map_err(|e| format!("TLS: {e}"))?;
    Ok(tls)
}

/// A queue's byte stream: plain TCP, or TLS records over it.
pub enum Stream {
    /// NVMe/TCP in the clear.
    Plain(TcpStream),
    /// NVMe/TCP in TLS records (OpenSSL's record layer).
    Tls(Box<SslStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }

    /// Whether records are protected.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}
