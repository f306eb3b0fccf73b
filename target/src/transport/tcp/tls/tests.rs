//! A handshake with an OpenSSL client over loopback TCP, then records
//! sealed and opened with the keys it gave, as the kernel's TLS layer would
//! (AES-GCM, RFC 8446 5.2): the client reads what the target sealed, the
//! target opens what the client sent.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::Aes128Gcm;
use openssl::ssl::{SslConnector, SslMethod, SslVersion};
use tlspsk::{ConfiguredPsk, Derivation, PskError, PskHash};

use super::handshake::*;
use super::keys::TrafficKeys;
use tlspsk::Identity;

const KEY: [u8; 32] = [7; 32];
const HOST: &str = "nqn.2026-11.io.test:host";
const SUB: &str = "nqn.2026-11.io.test:sub";

fn acceptor() -> Acceptor {
    let psk = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY).unwrap();
    Acceptor::new(Box::new(move |id: &Identity| {
        if id.hostnqn != HOST {
            return Err(PskError::Digest);
        }
        psk.server_psk(id, &Derivation::ALL).map(|(k, _)| k)
    }))
    .unwrap()
}

/// A client offering `identity` with `key` (TLS 1.3, SHA-256: the openssl
/// crate's PSK callback).
fn client(
    addr: std::net::SocketAddr,
    identity: String,
    key: Vec<u8>,
) -> std::io::Result<openssl::ssl::SslStream<TcpStream>> {
    client_from(addr, None, identity, key)
}

/// A TCP connection to `dst` from source address `src` (any of 127/8 on
/// the loopback).
fn connect_from(src: std::net::Ipv4Addr, dst: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(std::net::SocketAddrV4::new(src, 0)),
    )?;
    let std::net::SocketAddr::V4(d) = dst else {
        return Err(std::io::ErrorKind::Unsupported.into());
    };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(d))?;
    Ok(TcpStream::from(fd))
}

/// As [`client`], from source address `src`.
fn client_from(
    addr: std::net::SocketAddr,
    src: Option<std::net::Ipv4Addr>,
    identity: String,
    key: Vec<u8>,
) -> std::io::Result<openssl::ssl::SslStream<TcpStream>> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
    b.set_ciphersuites("TLS_AES_128_GCM_SHA256").unwrap();
    b.set_psk_client_callback(move |_, _, id_out, key_out| {
        let id = identity.as_bytes();
        id_out[..id.len()].copy_from_slice(id);
        id_out[id.len()] = 0;
        key_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    let c = b.build();
    let mut cfg = c.configure().unwrap();
    cfg.set_verify_hostname(false);
    cfg.set_verify(openssl::ssl::SslVerifyMode::NONE);
    let s = match src {
        Some(src) => connect_from(src, addr)?,
        None => TcpStream::connect(addr)?,
    };
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    cfg.connect("target", s)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

fn seal(k: &mut TrafficKeys, data: &[u8]) -> Vec<u8> {
    let mut inner = data.to_vec();
    inner.push(23); // application data
    let len = inner.len() + 16;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let aead = Aes128Gcm::new_from_slice(&k.key).unwrap();
    let nonce = k.nonce(k.seq);
    k.seq += 1;
    let ct = aead
        .encrypt(
            (&nonce).into(),
            Payload {
                msg: &inner,
                aad: &header,
            },
        )
        .unwrap();
    [header.to_vec(), ct].concat()
}

fn open(k: &mut TrafficKeys, record: &[u8]) -> Vec<u8> {
    let (header, ct) = record.split_at(5);
    let aead = Aes128Gcm::new_from_slice(&k.key).unwrap();
    let nonce = k.nonce(k.seq);
    k.seq += 1;
    let mut pt = aead
        .decrypt(
            (&nonce).into(),
            Payload {
                msg: ct,
                aad: header,
            },
        )
        .unwrap();
    assert_eq!(pt.pop(), Some(23), "application data");
    pt
}

#[test]
fn a_host_with_the_key_gets_a_session_whose_keys_carry_records_both_ways() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let psk = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY).unwrap();
    let (id, tls_key) = psk.host_psk(HOST, SUB, 1, Derivation::Compat).unwrap();
    let host = std::thread::spawn(move || {
        let mut c = client(addr, id.to_string(), tls_key.to_vec()).unwrap();
        let mut got = [0u8; 5];
        c.read_exact(&mut got).unwrap();
        c.write_all(b"icreq").unwrap();
        got
    });
    let (s, _) = l.accept().unwrap();
    let mut session = acceptor().accept(&s, Duration::from_secs(5)).unwrap();
    assert_eq!(session.identity.hostnqn, HOST);
    assert_eq!(session.identity.version, 1);
    assert_eq!(session.hash, PskHash::Sha256);
    assert_eq!((session.rx.seq, session.tx.seq), (0, 0));
    // The target's first record, sealed here, reads as data at the host.
    let mut raw = &s;
    raw.write_all(&seal(&mut session.tx, b"hello")).unwrap();
    assert_eq!(&host.join().unwrap(), b"hello");
    // And the host's, opened here: nothing else came first (no ticket,
    // no key update).
    let mut header = [0u8; 5];
    raw.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 23);
    let mut body = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
    raw.read_exact(&mut body).unwrap();
    let record = [header.to_vec(), body].concat();
    assert_eq!(open(&mut session.rx, &record), b"icreq");
}

#[test]
fn a_host_without_the_key_or_with_another_is_refused() {
    for (id, key, want) in [
        // An unknown host: no PSK offered back.
        (
            format!("NVMe0R01 nqn.2026-11.io.test:stranger {SUB}"),
            vec![1; 32],
            "no PSK",
        ),
        // The right identity, a wrong key: the binder fails.
        (format!("NVMe0R01 {HOST} {SUB}"), vec![9; 32], "handshake"),
        // Not an NVMe identity.
        ("admin".to_string(), vec![1; 32], "no PSK"),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let host = std::thread::spawn(move || client(addr, id, key).is_err());
        let (s, _) = l.accept().unwrap();
        let e = acceptor().accept(&s, Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
        drop(s);
        assert!(host.join().unwrap(), "the host's handshake failed too");
    }
}

#[test]
fn a_silent_peer_meets_the_deadline() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let _quiet = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    let t = std::time::Instant::now();
    let e = acceptor()
        .accept(&s, Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(e, HandshakeFailed::Io(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// A TLS listener on a free loopback port, its workers' one inbox, and the
/// target whose PSKs it takes.
fn tls_listener(
    secure: crate::model::port::Secure,
) -> (
    crate::transport::listener::Listener,
    std::net::SocketAddr,
    Arc<crate::transport::tcp::Inbox>,
) {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let waker = crate::base::wake::Waker::new().unwrap();
    let inbox = crate::transport::tcp::Inbox::new(waker);
    let shared = crate::transport::tcp::TcpShared::new(
        crate::base::admission::Admission::evicting(8, 64),
        vec![inbox.clone()],
    );
    let t = Arc::new(crate::model::target::Target::new(vec![], vec![], 0));
    let host = [crate::config::HostConfig {
        nqn: HOST.into(),
        dhchap_key: None,
        dhchap_ctrl_key: None,
        dhchap_hash: dhchap::HashId::Sha256,
        dhchap_dhgroup: dhchap::GroupId::Null,
        tls_key: Some(ConfiguredPsk::new(Some(PskHash::Sha256), &KEY).unwrap()),
        tls_derivation: tlspsk::Derivation::Compat,
    }];
    t.tls_keys.set(&host);
    let l = crate::transport::tcp::listener::listen(shared, t, addr, secure).unwrap();
    (l, addr, inbox)
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..100 {
        if let Some(x) = f() {
            return Some(x);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// What a plain host sends first: an ICReq's common header.
const ICREQ_HEAD: [u8; 8] = [0x00, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00];

#[test]
fn a_required_listener_closes_on_plain_nvme_tcp_an_optional_one_serves_it() {
    use crate::model::port::Secure;
    let (l, addr, inbox) = tls_listener(Secure::Required);
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(&ICREQ_HEAD).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(plain.read(&mut b), Ok(0) | Err(_)),
        "closed with nothing sent"
    );
    assert!(inbox.take().is_empty(), "no worker got it");
    l.stop();
    let (l, addr, inbox) = tls_listener(Secure::Optional);
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(&ICREQ_HEAD).unwrap();
    let got = wait_for(|| inbox.take().pop()).expect("a worker gets the plain host");
    assert!(got.tls.is_none());
    l.stop();
}

#[test]
fn a_host_with_its_psk_reaches_a_worker_under_ktls_with_its_identity() {
    use crate::model::port::Secure;
    let ktls = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|u| u.split_whitespace().any(|x| x == "tls"));
    let (l, addr, inbox) = tls_listener(Secure::Required);
    let psk = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY).unwrap();
    let (id, key) = psk.host_psk(HOST, SUB, 0, Derivation::Compat).unwrap();
    let c = client(addr, id.to_string(), key.to_vec());
    assert!(c.is_ok(), "the handshake: {:?}", c.err());
    let got = wait_for(|| inbox.take().pop());
    match ktls {
        // Without the kernel's TLS layer the connection cannot go on.
        false => assert!(got.is_none()),
        true => {
            let s = got.expect("a worker gets the TLS host");
            assert_eq!(s.tls.as_deref().map(|p| &p.identity), Some(&id));
        }
    }
    l.stop();
}

#[test]
fn the_first_binders_length_is_read_within_the_extension() {
    // identities: one of 3 bytes + 4 bytes of age; binders: 32 bytes.
    let mut ext = vec![0, 9, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0];
    ext.extend([0, 33, 32]);
    ext.extend([7u8; 32]);
    assert_eq!(first_binder_len(&ext), Some(32));
    // Truncated binders, an identities length past the end, nothing.
    assert_eq!(first_binder_len(&ext[..ext.len() - 1]), None);
    assert_eq!(first_binder_len(&[0xFF, 0xFF, 0]), None);
    assert_eq!(first_binder_len(&[]), None);
}

/// Issue 57, 2: 16 addresses each hold stalled connections at their cap (a
/// TLS handshake never begun; plain NVMe/TCP never initialized), twice the
/// total between them; a host from a new address is served within 1 s every
/// time, and the flood's oldest connections are shut down to make room.
#[test]
fn a_flood_of_stalled_connections_keeps_no_new_address_out() {
    let _one = crate::MANY_DESCRIPTORS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    use crate::model::port::Secure;
    use std::net::Ipv4Addr;
    let psk = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY).unwrap();
    let (id, key) = psk.host_psk(HOST, SUB, 0, Derivation::Compat).unwrap();
    for secure in [Secure::Required, Secure::None] {
        let (l, addr, inbox) = tls_listener(secure);
        let mut flood = Vec::new();
        let mut workers_hold = Vec::new();
        for round in 0..3u8 {
            for i in 0..16u8 {
                for _ in 0..8 {
                    let s = connect_from(Ipv4Addr::new(127, 1, round, i + 1), addr).unwrap();
                    flood.push(s);
                }
            }
            let host = Ipv4Addr::new(127, 2, 0, round + 1);
            let t = std::time::Instant::now();
            match secure {
                Secure::None => {
                    let mut s = connect_from(host, addr).unwrap();
                    s.write_all(&ICREQ_HEAD).unwrap();
                    let got = wait_for(|| {
                        let mut v = inbox.take();
                        let i = v
                            .iter()
                            .position(|c| c.peer.ip() == std::net::IpAddr::V4(host));
                        let mine = i.map(|i| v.remove(i));
                        // The flood's, a worker holds (its Connect deadline
                        // is the worker's, not run here).
                        workers_hold.extend(v);
                        mine
                    });
                    assert!(
                        got.is_some(),
                        "round {round}: the host's connection reached no worker"
                    );
                    workers_hold.extend(got);
                }
                _ => {
                    let c = client_from(addr, Some(host), id.to_string(), key.to_vec());
                    assert!(c.is_ok(), "round {round}: the handshake: {:?}", c.err());
                }
            }
            let took = t.elapsed();
            assert!(
                took < Duration::from_secs(1),
                "round {round} ({secure:?}): {took:?}"
            );
        }
        // The flood holds no more than the total: the rest were shut down.
        let open = flood
            .iter_mut()
            .map(|s| {
                s.set_nonblocking(true).unwrap();
                let mut b = [0u8; 1];
                !matches!(s.read(&mut b), Ok(0))
            })
            .filter(|&open| open)
            .count();
        assert!(
            open <= 64,
            "{secure:?}: {open} of the flood's connections still open"
        );
        assert!(
            open >= 40,
            "{secure:?}: only {open} left open: evicted more than needed"
        );
        l.stop();
    }
}
