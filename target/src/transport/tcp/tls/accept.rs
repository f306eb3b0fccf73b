//! A connection to a listener that speaks TLS, before a worker takes it:
//! on a thread of its own (never a worker's), its first byte says whether
//! the host begins a TLS handshake (a TLS handshake record, 0x16) or plain
//! NVMe/TCP (an ICReq; taken only where TLS is optional); the handshake
//! runs with a deadline, and the socket goes to the kernel's TLS layer and
//! then to a worker with the identity its host proved. A peer without a
//! key costs a thread for at most the deadline, within the listener's
//! admission caps (per address and in all): a handshake holds its
//! connection's place among the queues not yet connected, and one that
//! loses its place (evicted for a newer connection) has its socket shut
//! down under its read, so its thread returns at once. [`MAX_HANDSHAKES`]
//! only backs that up.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tlspsk::Identity;

use crate::model::tls_keys::Proven;
use tracing::debug;

use super::handshake::Acceptor;
use crate::model::port::Secure;

/// How long a host has to begin and finish its handshake (nvmet's
/// default too).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Handshake threads at once, all listeners together: a backstop above
/// the admission's total (64 by default), which bounds handshakes first,
/// with room for the threads of evicted handshakes on their way out.
pub const MAX_HANDSHAKES: usize = 256;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// What a TLS listener shares with its handshake threads.
pub struct Secured {
    /// The TLS server.
    pub acceptor: Arc<Acceptor>,
    /// Plain hosts too, or TLS only.
    pub secure: Secure,
}

/// Handshakes under way, every listener's.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Why a connection did not reach a worker.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// [`MAX_HANDSHAKES`] under way.
    #[error("too many TLS handshakes under way")]
    Busy,
    /// Plain NVMe/TCP on a listener that requires TLS.
    #[error("plain NVMe/TCP where TLS is required")]
    Plaintext,
    /// Nothing came in time, or the socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The handshake failed.
    #[error("{0}")]
    Handshake(#[from] super::handshake::HandshakeFailed),
    /// The kernel's TLS layer did not take the connection.
    #[error("{0}")]
    Ktls(#[from] super::ktls::KtlsError),
}

impl Refused {
    /// Its name in `nvmf_target_rejections_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Busy => "tls_busy",
            Refused::Plaintext => "tls_plaintext",
            Refused::Io(_) => "tls_timeout",
            Refused::Handshake(_) => "tls_handshake",
            Refused::Ktls(_) => "tls_kernel",
        }
    }
}

/// Takes `stream` on a thread of its own; `give` gets the socket (blocking
/// mode, under kTLS when the host began TLS) and the identity its host
/// proved, once it may go to a worker.
pub fn spawn(
    s: &Secured,
    stream: TcpStream,
    peer: SocketAddr,
    keys_at: u64,
    give: impl FnOnce(TcpStream, Option<Arc<Proven>>) + Send + 'static,
) -> Result<(), Refused> {
    if RUNNING.fetch_add(1, Ordering::AcqRel) >= MAX_HANDSHAKES {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
        return Err(Refused::Busy);
    }
    let (acceptor, secure) = (s.acceptor.clone(), s.secure);
    let spawned = std::thread::Builder::new()
        .name("nvmf-tls".into())
        .spawn(move || {
            let r = secure_one(&acceptor, secure, &stream)
                .map(|id| id.map(|identity| Arc::new(Proven { identity, keys_at })));
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            match r {
                Ok(id) => give(stream, id),
                Err(e) => {
                    crate::telemetry::metrics::reject(e.reason());
                    debug!(%peer, error = %e, "TLS: connection refused");
                }
            }
        });
    spawned.map(|_| ()).map_err(|e| {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
        Refused::Io(e)
    })
}

fn secure_one(
    acceptor: &Acceptor,
    secure: Secure,
    stream: &TcpStream,
) -> Result<Option<Identity>, Refused> {
    let start = Instant::now();
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HANDSHAKE_DEADLINE))?;
    let mut first = [0u8; 1];
    if stream.peek(&mut first)? == 0 {
        return Err(Refused::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    if first[0] != TLS_HANDSHAKE {
        return match secure {
            Secure::Optional => Ok(None),
            _ => Err(Refused::Plaintext),
        };
    }
    let left = HANDSHAKE_DEADLINE.saturating_sub(start.elapsed());
    let session = acceptor.accept(stream, left)?;
    super::ktls::install(stream.as_fd(), session.hash, &session.tx, &session.rx)?;
    debug!(identity = %session.identity, cipher = session.hash.cipher_suite(), "TLS: host authenticated by its PSK");
    Ok(Some(session.identity))
}
