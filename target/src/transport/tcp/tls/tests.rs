//! A handshake with an OpenSSL client over loopback TCP, then records
//! sealed and opened with the keys it gave, as the kernel's TLS layer would
//! (AES-GCM, RFC 8446 5.2): the client reads what the target sealed, the
//! target opens what the client sent.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
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
    let s = TcpStream::connect(addr)?;
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
