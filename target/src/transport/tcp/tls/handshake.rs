//! The server side of an NVMe/TCP TLS 1.3 handshake with an external PSK,
//! through OpenSSL (libssl3): TLS 1.3 only, the two cipher suites NVMe/TCP
//! names, no certificate, no session tickets (the Linux host's TLS layer
//! takes nothing but application data once the handshake is done), the
//! PSK chosen by the identity the host offers ([`tlspsk`]). It runs on a
//! blocking socket on a thread of its own, never on a worker; what it gives
//! back is the identity and the record keys of both directions, for the
//! kernel's TLS layer to carry the connection on.
//!
//! The openssl crate wraps only OpenSSL's TLS 1.2 PSK callback, which fixes
//! TLS 1.3 PSKs to SHA-256; the find-session callback that takes either
//! hash is declared here.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::raw::{c_int, c_uchar};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    HandshakeError, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslRef, SslVersion,
};
use openssl_sys::{SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};
use tlspsk::{Identity, PskError, PskHash};
use zeroize::Zeroizing;

use super::keys::{Secrets, TrafficKeys};

type FindSession = unsafe extern "C" fn(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int;

extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSession>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_free(s: *mut SSL_SESSION);
    fn SSL_SESSION_set1_master_key(s: *mut SSL_SESSION, key: *const c_uchar, len: usize) -> c_int;
    fn SSL_SESSION_set_cipher(s: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
}

const TLS1_3_VERSION: c_int = 0x0304;

/// The TLS PSK for an identity a host offers (or why there is none).
pub type Resolve = dyn Fn(&Identity) -> Result<Zeroizing<Vec<u8>>, PskError> + Send + Sync;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeFailed {
    /// OpenSSL refused to set the context up.
    #[error("TLS setup: {0}")]
    Setup(#[from] ErrorStack),
    /// The socket failed (or the deadline passed).
    #[error("TLS handshake: {0}")]
    Io(#[from] std::io::Error),
    /// The host offered no identity with a key here (or a bad one).
    #[error("TLS handshake: no PSK for the host's identity ({0})")]
    NoKey(String),
    /// The handshake failed otherwise (a wrong key shows as a bad binder).
    #[error("TLS handshake: {0}")]
    Tls(String),
}

/// What one handshake found out, kept with its `Ssl` while it runs.
#[derive(Default)]
struct Found {
    /// The hash of the host's first PSK binder (its length says it).
    binder: Option<PskHash>,
    identity: Option<Identity>,
    refused: Option<String>,
    secrets: Secrets,
}

/// A finished handshake: who the host is and the record keys.
#[derive(Debug)]
pub struct Session {
    /// The PSK identity the host authenticated with.
    pub identity: Identity,
    /// What the host sends (its next record's sequence number is 0).
    pub rx: TrafficKeys,
    /// What the target sends.
    pub tx: TrafficKeys,
    /// The cipher suite's hash.
    pub hash: PskHash,
}

/// The TLS server: one OpenSSL context, shared by every handshake.
pub struct Acceptor {
    ctx: SslContext,
    found: Index<Ssl, Arc<Mutex<Found>>>,
}

/// The context's resolver, where the find-session callback finds it.
struct Shared {
    resolve: Box<Resolve>,
    found: Index<Ssl, Arc<Mutex<Found>>>,
}

impl Acceptor {
    /// A server that takes the PSKs `resolve` gives.
    pub fn new(resolve: Box<Resolve>) -> Result<Acceptor, ErrorStack> {
        let found = match FOUND_INDEX.get() {
            Some(i) => *i,
            None => {
                let i = Ssl::new_ex_index::<Arc<Mutex<Found>>>()?;
                *FOUND_INDEX.get_or_init(|| i)
            }
        };
        let shared_idx = match SHARED_INDEX.get() {
            Some(i) => *i,
            None => {
                let i = SslContext::new_ex_index::<Shared>()?;
                *SHARED_INDEX.get_or_init(|| i)
            }
        };
        let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384")?;
        b.set_num_tickets(0)?;
        b.set_options(SslOptions::NO_TICKET);
        b.set_keylog_callback(move |ssl, line| {
            if let Some(f) = ssl.ex_data(found) {
                f.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .secrets
                    .take_line(line);
            }
        });
        // The hash the host's binder was made with must be its identity's
        // (TP 8011: the PSK's hash is the suite's). tlshd 1.0 (GnuTLS) makes
        // a SHA-384 PSK's binder with SHA-256 and offers no suite but
        // TLS_CHACHA20_POLY1305_SHA256 to go with it, which nvmet (tlshd on
        // its side too) takes: said plainly here rather than as a bad
        // extension.
        b.set_client_hello_callback(move |ssl, _alert| {
            let hash = binder_hash(ssl);
            tracing::debug!(
                binder = ?hash,
                suites = ?ssl.client_hello_ciphers().map(|c| c.to_vec()),
                "TLS: ClientHello"
            );
            if let Some(f) = ssl.ex_data(found) {
                f.lock().unwrap_or_else(|p| p.into_inner()).binder = hash;
            }
            Ok(openssl::ssl::ClientHelloResponse::SUCCESS)
        });
        b.set_ex_data(shared_idx, Shared { resolve, found });
        // SAFETY: the context is live; the callback only reads what the
        // context holds (its ex data, set above, lives as long as it).
        unsafe {
            SSL_CTX_set_psk_find_session_callback(b.as_ptr(), Some(find_session));
        }
        Ok(Acceptor {
            ctx: b.build(),
            found,
        })
    }

    /// Runs the server side of the handshake on `stream` (blocking; all of
    /// it within `deadline`, however the peer trickles its bytes). Nothing
    /// is left in OpenSSL's buffers: the connection goes on with the keys
    /// returned, from sequence number 0 both ways.
    pub fn accept(
        &self,
        stream: &TcpStream,
        deadline: Duration,
    ) -> Result<Session, HandshakeFailed> {
        let until = Instant::now() + deadline;
        let found = Arc::new(Mutex::new(Found::default()));
        let mut ssl = Ssl::new(&self.ctx)?;
        ssl.set_ex_data(self.found, found.clone());
        // OpenSSL owns a duplicate of the socket; dropping it closes only
        // the duplicate and sends nothing (no close_notify without a
        // shutdown).
        let io = Exact(stream.try_clone()?, until);
        let r = ssl.accept(io);
        let f = std::mem::take(&mut *found.lock().unwrap_or_else(|p| p.into_inner()));
        let tls = match r {
            Ok(s) => s,
            Err(e) => {
                if let Some(why) = f.refused {
                    return Err(HandshakeFailed::NoKey(why));
                }
                return Err(match e {
                    HandshakeError::Failure(m) | HandshakeError::WouldBlock(m) => {
                        match m.into_error().into_io_error() {
                            Ok(io) => HandshakeFailed::Io(io),
                            Err(e) => HandshakeFailed::Tls(e.to_string()),
                        }
                    }
                    HandshakeError::SetupFailure(e) => HandshakeFailed::Setup(e),
                });
            }
        };
        let ssl_ref = tls.ssl();
        if ssl_ref.pending() != 0 {
            return Err(HandshakeFailed::Tls(
                "data past the handshake in OpenSSL's buffer".into(),
            ));
        }
        let hash = match ssl_ref.current_cipher().map(|c| c.name()) {
            Some("TLS_AES_256_GCM_SHA384") => PskHash::Sha384,
            Some("TLS_AES_128_GCM_SHA256") => PskHash::Sha256,
            other => {
                return Err(HandshakeFailed::Tls(format!(
                    "unexpected cipher suite {other:?}"
                )))
            }
        };
        // Without a certificate only a PSK finishes a handshake; said
        // again here, not assumed.
        let identity = f
            .identity
            .filter(|_| ssl_ref.session_reused())
            .ok_or_else(|| HandshakeFailed::Tls("no PSK was used".into()))?;
        let keys = |s: &Option<Zeroizing<Vec<u8>>>| {
            s.as_ref()
                .and_then(|s| TrafficKeys::from_secret(hash, s))
                .ok_or_else(|| HandshakeFailed::Tls("no traffic secret logged".into()))
        };
        Ok(Session {
            rx: keys(&f.secrets.client)?,
            tx: keys(&f.secrets.server)?,
            identity,
            hash,
        })
    }
}

/// The index of a handshake's [`Found`] (one per process).
static FOUND_INDEX: std::sync::OnceLock<Index<Ssl, Arc<Mutex<Found>>>> = std::sync::OnceLock::new();

/// The index of the context's [`Shared`] (one per process: contexts are
/// made with the same index).
static SHARED_INDEX: std::sync::OnceLock<Index<SslContext, Shared>> = std::sync::OnceLock::new();

/// OpenSSL's find-session callback: the host's identity, to a session that
/// holds its TLS PSK and the cipher suite of its hash. Returns 1 with no
/// session when there is no key (the handshake then fails for want of a
/// PSK: this server has no certificate).
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL calls this with a live SSL, the identity's bytes and
    // a place for the session; nothing here keeps them.
    unsafe {
        *sess = std::ptr::null_mut();
        let ssl_ref = SslRef::from_ptr(ssl);
        let (Some(idx), true) = (SHARED_INDEX.get(), !identity.is_null()) else {
            return 1;
        };
        let Some(shared) = ssl_ref.ssl_context().ex_data(*idx) else {
            return 1;
        };
        let Some(found) = ssl_ref.ex_data(shared.found).cloned() else {
            return 1;
        };
        let bytes = std::slice::from_raw_parts(identity, identity_len);
        let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
        let id = match Identity::parse(bytes) {
            Ok(id) => id,
            Err(e) => {
                f.refused = Some(e.to_string());
                return 1;
            }
        };
        let key = match (shared.resolve)(&id) {
            Ok(k) => k,
            Err(e) => {
                f.refused = Some(format!("{id}: {e}"));
                return 1;
            }
        };
        if f.binder.is_some_and(|h| h != id.hash) {
            f.refused = Some(format!(
                "{id}: the host's binder is not made with its identity's hash ({}), TP 8011's suites cannot carry it",
                id.hash.cipher_suite()
            ));
            return 1;
        }
        let suite: [c_uchar; 2] = match id.hash {
            PskHash::Sha256 => [0x13, 0x01],
            PskHash::Sha384 => [0x13, 0x02],
        };
        let cipher = SSL_CIPHER_find(ssl, suite.as_ptr());
        if cipher.is_null() {
            return 0;
        }
        let s = SSL_SESSION_new();
        if s.is_null() {
            return 0;
        }
        if SSL_SESSION_set1_master_key(s, key.as_ptr(), key.len()) != 1
            || SSL_SESSION_set_cipher(s, cipher) != 1
            || SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1
        {
            SSL_SESSION_free(s);
            return 0;
        }
        f.identity = Some(id);
        *sess = s;
        1
    }
}

/// The hash of the first binder of the ClientHello's `pre_shared_key`
/// extension, by its length (None: no such extension, or not 32 or 48).
fn binder_hash(ssl: &mut SslRef) -> Option<PskHash> {
    let mut p: *const c_uchar = std::ptr::null();
    let mut len = 0usize;
    // SAFETY: called from the client hello callback, with a live SSL; the
    // extension's bytes stay valid during the callback and are only read
    // here.
    let ext = unsafe {
        if openssl_sys::SSL_client_hello_get0_ext(ssl.as_ptr(), PRE_SHARED_KEY, &mut p, &mut len)
            != 1
            || p.is_null()
        {
            return None;
        }
        std::slice::from_raw_parts(p, len)
    };
    match first_binder_len(ext)? {
        32 => Some(PskHash::Sha256),
        48 => Some(PskHash::Sha384),
        _ => None,
    }
}

/// The `pre_shared_key` extension's type (RFC 8446 4.2).
const PRE_SHARED_KEY: std::os::raw::c_uint = 41;

/// The length of the first binder in a ClientHello's `pre_shared_key`
/// extension body (RFC 8446 4.2.11: identities, then binders).
pub(super) fn first_binder_len(ext: &[u8]) -> Option<usize> {
    let u16_at = |i: usize| Some(u16::from_be_bytes([*ext.get(i)?, *ext.get(i + 1)?]) as usize);
    let ids = u16_at(0)?;
    let binders = 2 + ids;
    let total = u16_at(binders)?;
    let first = *ext.get(binders + 2)? as usize;
    (total > first && ext.len() >= binders + 2 + total).then_some(first)
}

/// A socket OpenSSL reads exactly what it asks for from (no read-ahead
/// past the handshake's last record), each read and write within what is
/// left until the deadline.
struct Exact(TcpStream, Instant);

impl Exact {
    fn left(&self) -> std::io::Result<Duration> {
        match self.1.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

impl Read for Exact {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.0.set_read_timeout(Some(left))?;
        self.0.read(b)
    }
}

impl Write for Exact {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.0.set_write_timeout(Some(left))?;
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
