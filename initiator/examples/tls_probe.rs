//! tls-probe: NVMe/TCP's TLS 1.3 (TP 8011) as a well-behaved host uses
//! it, and as no well-behaved host would, against a target whose TCP port
//! requires TLS. Each case opens its own connection and prints one line,
//! `CASE <name> <outcome> [detail]`, where the outcome is one token:
//! `connected` (an admin queue over TLS, Connect done), `refused` (the
//! handshake failed: an alert or a close), `timeout` (no answer to it), `closed` (the target closed the
//! connection; `closed:Ns` after N seconds), `open` (still open after the
//! case's wait), `icresp` (a plain ICReq was answered), or a case's own.
//! The lab's TLS suite (integration/guest/tls.sh) runs it against nvmet-tcp
//! and against our target in one boot and compares the outcomes.
//!
//! Usage: `tls-probe IP PORT SUBNQN HOSTNQN KEY [VERSION DERIVATION]`:
//! KEY is the host's configured PSK (`NVMeTLSkey-1:...`), VERSION the
//! identity's (0 or 1, default 0: `NVMe0R01 HOSTNQN SUBNQN`, as the Linux
//! host looks it up first), DERIVATION `compat` (default, nvme-cli 2.13)
//! or `rfc`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::tcp::IcReq;
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::host::HostIdentity;
use nvmf_initiator::transport::tls::{self, HostPsk, Offer};
use nvmf_initiator::transport::Kind;
use tlspsk::{ConfiguredPsk, Derivation, PskHash};
use zeroize::Zeroizing;

const WAIT: Duration = Duration::from_secs(5);
/// How long a stalled handshake is watched.
const STALL_WAIT: Duration = Duration::from_secs(30);
/// Stalled handshakes opened at once from this one address.
const FLOOD: usize = 40;
/// The largest TLS 1.3 record a peer may send: 2^14 bytes of plaintext
/// and 256 of expansion (RFC 8446 5.2).
const MAX_CIPHERTEXT: usize = (1 << 14) + 256;
/// The first five bytes of a ClientHello record that never comes.
const HELLO_HEADER: [u8; 5] = [0x16, 0x03, 0x01, 0x01, 0x00];

const CASES: &[&str] = &[
    "psk",
    "wrong-key",
    "unknown-host",
    "foreign-identity",
    "plain-icreq",
    "oversized-record",
    "bad-record",
    "stall",
    "flood",
];

struct Probe {
    addr: SocketAddr,
    subnqn: String,
    hostnqn: String,
    psk: HostPsk,
}

impl Probe {
    fn offer(&self) -> Offer {
        self.psk
            .offer(&self.hostnqn, &self.subnqn)
            .unwrap_or_else(|e| {
                eprintln!("tls-probe: {e}");
                std::process::exit(2)
            })
    }

    fn tcp(&self) -> Result<TcpStream, String> {
        TcpStream::connect_timeout(&self.addr, WAIT).map_err(|e| format!("tcp:{e}"))
    }

    /// The handshake with `offer`: the stream, or the outcome.
    fn handshake(&self, offer: &Offer) -> Result<openssl::ssl::SslStream<TcpStream>, String> {
        let s = self.tcp()?;
        tls::handshake(s, offer, WAIT).map_err(|e| match e.contains("timed out") {
            true => format!("timeout ({e})"),
            false => format!("refused ({e})"),
        })
    }

    fn case(&self, name: &str) -> String {
        match name {
            "psk" => {
                let mut o = ConnectOptions::new(self.addr, &self.subnqn);
                o.transport = Kind::Tcp;
                o.host = HostIdentity::system(Some(self.hostnqn.clone()), None);
                o.io_queues = 0;
                o.kato = Duration::ZERO;
                o.timeout = WAIT;
                o.tls = Some(self.psk.clone());
                match Controller::connect(&o) {
                    Ok(c) => {
                        drop(c);
                        "connected".into()
                    }
                    Err(e) => format!("failed ({e})"),
                }
            }
            "wrong-key" => {
                let mut offer = self.offer();
                offer.psk = Zeroizing::new(vec![0x5A; offer.psk.len()]);
                self.refused(&offer)
            }
            "unknown-host" => {
                let stranger = "nqn.2026-11.io.nvmf-lab:tls-stranger";
                let offer = self.psk.offer(stranger, &self.subnqn).expect("an offer");
                self.refused(&offer)
            }
            "foreign-identity" => {
                let mut offer = self.offer();
                offer.identity = "Client_identity".into();
                self.refused(&offer)
            }
            "plain-icreq" => {
                let mut s = match self.tcp() {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                let req = IcReq {
                    pfv: 0,
                    hpda: 0,
                    digest: 0,
                    maxr2t: 0,
                }
                .encode();
                let _ = s.write_all(&req);
                match wait_close(&mut s, WAIT) {
                    Ok(_) => "closed".into(),
                    Err(0) => "open".into(),
                    Err(_) => "icresp".into(),
                }
            }
            // The header alone says too much: a target that waits for the
            // rest did not check it.
            "oversized-record" => self.after_handshake(&record(MAX_CIPHERTEXT + 1)[..5 + 64]),
            "bad-record" => self.after_handshake(&record(100)),
            "stall" => {
                let mut s = match self.tcp() {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                let _ = s.write_all(&HELLO_HEADER);
                match wait_close(&mut s, STALL_WAIT) {
                    Ok(t) => format!("closed:{}s", t.as_secs_f64().round()),
                    Err(_) => format!("open:{}s", STALL_WAIT.as_secs()),
                }
            }
            "flood" => {
                let mut held: Vec<TcpStream> = (0..FLOOD)
                    .filter_map(|_| {
                        let mut s = self.tcp().ok()?;
                        s.write_all(&HELLO_HEADER).ok()?;
                        Some(s)
                    })
                    .collect();
                std::thread::sleep(Duration::from_secs(1));
                let closed = held
                    .iter_mut()
                    .map(|s| wait_close(s, Duration::from_millis(50)))
                    .filter(Result::is_ok)
                    .count();
                format!("closed:{closed}/{FLOOD}")
            }
            _ => unreachable!("{name}"),
        }
    }

    /// A handshake that must fail.
    fn refused(&self, offer: &Offer) -> String {
        match self.handshake(offer) {
            Ok(_) => "accepted".into(),
            Err(e) => e,
        }
    }

    /// A handshake with the right key, then `raw` on the TCP connection
    /// under the TLS layer: the target's answer.
    fn after_handshake(&self, raw: &[u8]) -> String {
        let tls = match self.handshake(&self.offer()) {
            Ok(t) => t,
            Err(e) => return format!("handshake-{e}"),
        };
        let mut s = match tls.get_ref().try_clone() {
            Ok(s) => s,
            Err(e) => return format!("clone:{e}"),
        };
        let _ = s.write_all(raw);
        match wait_close(&mut s, WAIT) {
            Ok(_) => "closed".into(),
            Err(0) => "open".into(),
            Err(n) => format!("answered:{n}B"),
        }
    }
}

/// An application-data record header claiming `len` bytes, and `len` bytes
/// that no key sealed.
fn record(len: usize) -> Vec<u8> {
    let mut r = vec![0x17, 0x03, 0x03, (len >> 8) as u8, len as u8];
    r.extend((0..len).map(|i| (i * 7) as u8));
    r
}

/// Waits for the peer to close: `Ok(after)`, or `Err(bytes read)` when
/// still open after `wait` (bytes it sent meanwhile are counted).
fn wait_close(s: &mut TcpStream, wait: Duration) -> Result<Duration, usize> {
    let start = Instant::now();
    let mut got = 0;
    loop {
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(got);
        }
        let _ = s.set_read_timeout(Some(left));
        let mut b = [0u8; 4096];
        match s.read(&mut b) {
            Ok(0) => return Ok(start.elapsed()),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(got)
            }
            Err(_) => return Ok(start.elapsed()),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 6 {
        eprintln!("usage: tls-probe IP PORT SUBNQN HOSTNQN KEY [VERSION DERIVATION]");
        std::process::exit(2);
    }
    let addr = SocketAddr::new(
        args[1].parse().expect("an IP address"),
        args[2].parse().expect("a port"),
    );
    let key = ConfiguredPsk::parse(&args[5]).unwrap_or_else(|e| {
        eprintln!("tls-probe: the key: {e}");
        std::process::exit(2)
    });
    if key.hash() != PskHash::Sha256 {
        eprintln!("tls-probe: a SHA-256 key (NVMeTLSkey-1:01:...)");
        std::process::exit(2);
    }
    let version = args.get(6).map_or(0, |v| v.parse().expect("0 or 1"));
    let derivation = args.get(7).map_or(Derivation::Compat, |d| {
        Derivation::from_name(d).expect("compat or rfc")
    });
    let p = Probe {
        addr,
        subnqn: args[3].clone(),
        hostnqn: args[4].clone(),
        psk: HostPsk {
            key: Arc::new(key),
            version,
            derivation,
        },
    };
    for name in CASES {
        println!("CASE {name} {}", p.case(name));
    }
}
