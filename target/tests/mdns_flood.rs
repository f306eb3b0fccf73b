//! Issue 57, 7: the mDNS responder keeps nothing the link sends. 10^5
//! records of other "responders", every one distinct (services, host
//! addresses without a pointer: what a caching library keeps as "for us"),
//! are sent to the responder's socket; it still answers for its own
//! service, answers nothing it heard, and the process's resident memory
//! stays where it was. Its own binary: the RSS is this test's alone.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use nvmf_target::daemon::advertise::Advertiser;
use nvmf_target::daemon::mdns::{self, Service};
use nvmf_target::model::port::Port;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A legacy (unicast) query for `name`'s PTR records.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut p = vec![(id >> 8) as u8, id as u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.').filter(|l| !l.is_empty()) {
        p.push(l.len() as u8);
        p.extend_from_slice(l.as_bytes());
    }
    p.extend_from_slice(&[0, 0, mdns::rtype::PTR as u8, 0, 1]);
    p
}

/// Asks for `name` until an answer with the id comes (the responder has
/// read everything sent before), or gives up: the answer's bytes.
fn ask(c: &UdpSocket, to: SocketAddr, id: u16, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 9000];
    for _ in 0..30 {
        c.send_to(&query(id, name), to).unwrap();
        while let Ok((n, _)) = c.recv_from(&mut buf) {
            if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                return Some(buf[..n].to_vec());
            }
        }
    }
    None
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_flood_of_records_is_not_kept() {
    let mut a = Advertiser::start_on(0).unwrap();
    a.sync(&[(
        0,
        Port {
            addr: "127.0.0.1:4420".parse().unwrap(),
            tcp: true,
            secure: Default::default(),
        },
    )]);
    let to: SocketAddr = ([127, 0, 0, 1], a.port()).into();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let ours = ask(&c, to, 1, "_nvme-disc._tcp.local").expect("no answer for our service");
    assert!(contains(&ours, b"nvmf-target"), "{ours:?}");

    let before = rss_kib();
    let addr: IpAddr = "192.0.2.7".parse().unwrap();
    let mut sent = 0u32;
    for batch in 0..50u32 {
        for i in 0..2000u32 {
            let n = batch * 2000 + i;
            let s = Service {
                instance: format!("flood {n}"),
                service_type: mdns::labels("_nvme-disc._tcp.local."),
                host: mdns::labels(&format!("flood-{n}.local.")),
                port: 4420,
                txt: vec![format!("n={n}")],
            };
            c.send_to(&mdns::announce(&s, &[addr], 4500), to).unwrap();
            sent += 1;
        }
        // Each batch read before the next is sent (few dropped).
        assert!(
            ask(&c, to, 2 + batch as u16, "_nvme-disc._tcp.local").is_some(),
            "the responder stopped answering after {sent} records"
        );
    }
    let after = rss_kib();
    eprintln!("mDNS flood: {sent} records sent, RSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 2048,
        "RSS grew by {} KiB over {sent} records",
        after - before
    );
    // What it heard, it does not serve.
    let ours = ask(&c, to, 100, "_nvme-disc._tcp.local").unwrap();
    assert!(
        !contains(&ours, b"flood"),
        "it answered with a record it heard"
    );
    a.stop();
}
