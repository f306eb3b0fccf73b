//! mDNS (DNS-SD) advertisement of the discovery service, as NVMe TP 8009
//! binds it, so that hosts find the target with no address configured
//! (`[discovery] mdns = true`). One service instance per listener:
//! `_nvme-disc._tcp` with `p=tcp` for NVMe/TCP, `_nvme-disc._udp` with
//! `p=roce` for RDMA (RoCE v2 runs over UDP), each with
//! `nqn=nqn.2014-08.org.nvmexpress.discovery`, pointing at a host name of
//! its own (`nvmf-HOST-pPORTID.local`) that resolves to the listener's
//! address alone, so that a host that resolves it connects where that
//! transport listens. nvme-stas (stafd) and SPDK's mDNS discovery browse
//! `_nvme-disc._tcp`; SPDK advertises its TCP listeners only.
//!
//! [`record`] says what a listener is advertised as (no I/O); the
//! [`Advertiser`] publishes it through an announce-only responder
//! ([`super::mdns`] writes its messages): its own thread, UDP port 5353
//! shared with Avahi where it runs. It answers questions about its own
//! records and keeps nothing the link sends (a general mDNS library caches
//! every record it hears, with the sender's TTL and no cap).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::info;

use super::mdns::{self, Service};

use crate::model::subsystem::Port;

/// What one listener is advertised as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The DNS-SD service type, with the `.local.` domain.
    pub service_type: &'static str,
    /// The instance name (unique per service type on the network).
    pub instance: String,
    /// The host name the SRV record points at.
    pub host: String,
    /// Its address (none: every address of the machine, for a listener
    /// bound to the wildcard address).
    pub addr: Option<IpAddr>,
    /// The port.
    pub port: u16,
    /// The TXT record.
    pub txt: Vec<(&'static str, String)>,
}

/// A DNS label from a host name: letters, digits and hyphens.
fn label(host: &str) -> String {
    let l: String = host
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '-',
        })
        .take(40)
        .collect();
    match l.trim_matches('-') {
        "" => "target".into(),
        l => l.into(),
    }
}

/// The record of the listener in `slot` of the machine `hostname`.
pub fn record(hostname: &str, slot: usize, p: Port) -> Record {
    let (service_type, proto) = match p.tcp {
        true => ("_nvme-disc._tcp.local.", "tcp"),
        false => ("_nvme-disc._udp.local.", "roce"),
    };
    let host = label(hostname);
    let id = slot + 1;
    Record {
        service_type,
        instance: format!("nvmf-target {host} port {id}"),
        host: format!("nvmf-{host}-p{id}.local."),
        addr: Some(p.addr.ip()).filter(|ip| !ip.is_unspecified()),
        port: p.addr.port(),
        txt: vec![
            ("p", proto.to_string()),
            ("nqn", nvme::DISCOVERY_NQN.to_string()),
        ],
    }
}

impl Record {
    /// The service it publishes.
    pub fn service(&self) -> Service {
        Service {
            instance: self.instance.clone(),
            service_type: mdns::labels(self.service_type),
            host: mdns::labels(&self.host),
            port: self.port,
            txt: self.txt.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        }
    }
}

/// The mDNS port and group.
const MDNS_PORT: u16 = 5353;
const GROUP: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 251);
/// How often the interfaces are read again (new addresses, the group
/// joined on new interfaces).
const IFACES_EVERY: Duration = Duration::from_secs(5);
/// A record is multicast at most once a second (RFC 6762, 6).
const MULTICAST_EVERY: Duration = Duration::from_secs(1);
/// Unicast answers, at most, per second in all (each goes to whoever
/// the query's source address names).
const UNICAST_PER_SEC: u32 = 50;

/// What the responder thread shares with the [`Advertiser`].
#[derive(Default)]
struct Shared {
    /// The records it answers for.
    records: Mutex<Vec<Record>>,
    /// Announcements (and goodbyes: TTL 0) to send, and when.
    outbox: Mutex<Vec<(Instant, Record, u32)>>,
    stop: AtomicBool,
}

/// An IPv4 address of the machine and its netmask.
type Iface = (Ipv4Addr, Ipv4Addr);

/// The machine's IPv4 addresses (loopback left out), with their masks.
fn ifaces() -> Vec<Iface> {
    let Ok(all) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let v4 = |a: Option<nix::sys::socket::SockaddrStorage>| {
        a.and_then(|a| a.as_sockaddr_in().map(|s| s.ip()))
    };
    all.filter_map(|i| Some((v4(i.address)?, v4(i.netmask)?)))
        .filter(|(a, _)| !a.is_loopback())
        .collect()
}

/// The address of the machine on `peer`'s subnet, if any.
fn local_for(ifaces: &[Iface], peer: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V4(p) = peer else { return None };
    let net = |a: Ipv4Addr, m: Ipv4Addr| u32::from(a) & u32::from(m);
    ifaces
        .iter()
        .find(|(a, m)| *a == p || net(*a, *m) == net(p, *m))
        .map(|(a, _)| *a)
}

/// The addresses `r`'s host name resolves to for a querier at `peer`: the
/// listener's own, or for a wildcard listener the machine's address on the
/// querier's subnet only (the one that host can reach; not every address
/// the machine has).
fn addrs_for(r: &Record, ifaces: &[Iface], peer: IpAddr) -> Vec<IpAddr> {
    match r.addr {
        Some(a) => vec![a],
        None => local_for(ifaces, peer)
            .map(IpAddr::V4)
            .into_iter()
            .collect(),
    }
}

/// The responder: one UDP socket on the mDNS port (shared with Avahi
/// where it runs), one thread that answers queries and sends the
/// announcements; nothing a peer sends is kept.
struct Responder {
    socket: UdpSocket,
    shared: Arc<Shared>,
    ifaces: Vec<Iface>,
    ifaces_at: Instant,
    /// When each answer (by question) was last multicast: only questions
    /// about our own records are answered, so this stays small.
    multicast_at: HashMap<(Vec<String>, u16), Instant>,
    /// Unicast answers sent in the current second.
    unicast: (Instant, u32),
}

impl Responder {
    fn bind(port: u16) -> std::io::Result<UdpSocket> {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())?;
        s.set_multicast_ttl_v4(255)?;
        s.set_multicast_loop_v4(true)?;
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        Ok(s.into())
    }

    fn refresh(&mut self, now: Instant) {
        self.ifaces = ifaces();
        self.ifaces_at = now;
        // Joined already on most: the error says so.
        for (a, _) in &self.ifaces {
            let _ = self.socket.join_multicast_v4(&GROUP, a);
        }
        if self.ifaces.is_empty() {
            let _ = self
                .socket
                .join_multicast_v4(&GROUP, &Ipv4Addr::UNSPECIFIED);
        }
    }

    fn send_multicast(&self, via: Option<Ipv4Addr>, bytes: &[u8]) {
        if let Some(a) = via {
            let s = socket2::SockRef::from(&self.socket);
            let _ = s.set_multicast_if_v4(&a);
        }
        let _ = self.socket.send_to(bytes, (GROUP, MDNS_PORT));
    }

    fn send_unicast(&mut self, to: SocketAddr, bytes: &[u8], now: Instant) {
        if now.duration_since(self.unicast.0) >= Duration::from_secs(1) {
            self.unicast = (now, 0);
        }
        if self.unicast.1 < UNICAST_PER_SEC {
            self.unicast.1 += 1;
            let _ = self.socket.send_to(bytes, to);
        }
    }

    fn answer(&mut self, packet: &[u8], from: SocketAddr, now: Instant) {
        let Some(q) = mdns::parse_query(packet) else {
            return;
        };
        let records = self
            .shared
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let services: Vec<Service> = records.iter().map(Record::service).collect();
        // A querier not on the mDNS port is a legacy resolver: it gets a
        // unicast answer with its question and short TTLs (RFC 6762, 6.7).
        let legacy = from.port() != MDNS_PORT;
        let ifaces = self.ifaces.clone();
        let addrs = |s: &Service| {
            records
                .iter()
                .find(|r| {
                    r.instance == s.instance && mdns::labels(r.service_type) == s.service_type
                })
                .map(|r| addrs_for(r, &ifaces, from.ip()))
                .unwrap_or_default()
        };
        for question in &q.questions {
            let m = mdns::answer(
                &services,
                question,
                &addrs,
                if legacy { 10 } else { u32::MAX },
            );
            if m.is_empty() {
                continue;
            }
            if legacy {
                self.send_unicast(from, &m.encode(q.id, Some(question)), now);
            } else if question.unicast {
                self.send_unicast(from, &m.encode(0, None), now);
            } else {
                let key = (
                    question
                        .name
                        .iter()
                        .map(|l| l.to_ascii_lowercase())
                        .collect(),
                    question.qtype,
                );
                if self
                    .multicast_at
                    .get(&key)
                    .is_some_and(|t| now.duration_since(*t) < MULTICAST_EVERY)
                {
                    continue;
                }
                self.multicast_at.insert(key, now);
                self.send_multicast(local_for(&ifaces, from.ip()), &m.encode(0, None));
            }
        }
    }

    /// Sends the announcements and goodbyes that are due.
    fn announce(&mut self, now: Instant) {
        let due: Vec<(Record, u32)> = {
            let mut out = self.shared.outbox.lock().unwrap_or_else(|p| p.into_inner());
            let (due, later) = out.drain(..).partition(|(t, _, _)| *t <= now);
            *out = later;
            due.into_iter().map(|(_, r, ttl)| (r, ttl)).collect()
        };
        for (r, ttl) in due {
            let s = r.service();
            match r.addr {
                Some(IpAddr::V4(a)) => {
                    self.send_multicast(Some(a), &mdns::announce(&s, &[IpAddr::V4(a)], ttl))
                }
                Some(a) => self.send_multicast(None, &mdns::announce(&s, &[a], ttl)),
                // A wildcard listener: on each link, that link's address.
                None => {
                    for (a, _) in self.ifaces.clone() {
                        self.send_multicast(Some(a), &mdns::announce(&s, &[IpAddr::V4(a)], ttl));
                    }
                }
            }
        }
    }

    fn run(mut self) {
        let mut buf = vec![0u8; 9000];
        loop {
            let now = Instant::now();
            if now.duration_since(self.ifaces_at) >= IFACES_EVERY {
                self.refresh(now);
            }
            self.announce(now);
            if self.shared.stop.load(Ordering::Acquire) {
                return;
            }
            if let Ok((n, from)) = self.socket.recv_from(&mut buf) {
                self.answer(&buf[..n], from, Instant::now());
            }
        }
    }
}

/// The responder and what it advertises now, by listener slot.
pub struct Advertiser {
    hostname: String,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Slot -> (its port, its record).
    published: BTreeMap<usize, (Port, Record)>,
    /// The port it answers on.
    port: u16,
}

impl Advertiser {
    /// Starts the responder on the mDNS port.
    pub fn start() -> Result<Advertiser, String> {
        Advertiser::start_on(MDNS_PORT)
    }

    /// Starts the responder on `port` (0: any, for tests).
    pub fn start_on(port: u16) -> Result<Advertiser, String> {
        let socket =
            Responder::bind(port).map_err(|e| format!("mDNS responder on UDP port {port}: {e}"))?;
        let port = socket.local_addr().map(|a| a.port()).unwrap_or(port);
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let shared = Arc::new(Shared::default());
        let mut r = Responder {
            socket,
            shared: shared.clone(),
            ifaces: Vec::new(),
            ifaces_at: Instant::now(),
            multicast_at: HashMap::new(),
            unicast: (Instant::now(), 0),
        };
        r.refresh(Instant::now());
        let thread = std::thread::Builder::new()
            .name("mdns".into())
            .spawn(move || r.run())
            .map_err(|e| format!("mDNS responder thread: {e}"))?;
        Ok(Advertiser {
            hostname,
            shared,
            thread: Some(thread),
            published: BTreeMap::new(),
            port,
        })
    }

    /// The UDP port it answers on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Advertises `live` (the listeners and their slots) and withdraws
    /// what is no longer among them (a goodbye, TTL 0).
    pub fn sync(&mut self, live: &[(usize, Port)]) {
        let now = Instant::now();
        let mut outbox = Vec::new();
        self.published.retain(|s, (p, r)| {
            let keep = live.contains(&(*s, *p));
            if !keep {
                info!(listener = %p.addr, instance = %r.instance, "mDNS: discovery service withdrawn");
                outbox.push((now, r.clone(), 0));
            }
            keep
        });
        for &(slot, p) in live {
            if self.published.contains_key(&slot) {
                continue;
            }
            let r = record(&self.hostname, slot, p);
            info!(listener = %p.addr, instance = %r.instance, "mDNS: advertising the discovery service");
            // Announced twice, a second apart (RFC 6762, 8.3).
            outbox.push((now, r.clone(), mdns::TTL_OTHER));
            outbox.push((now + Duration::from_secs(1), r.clone(), mdns::TTL_OTHER));
            self.published.insert(slot, (p, r));
        }
        *self
            .shared
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner()) =
            self.published.values().map(|(_, r)| r.clone()).collect();
        self.shared
            .outbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(outbox);
    }

    /// Withdraws everything (hosts are told the services are gone) and
    /// stops the responder.
    pub fn stop(mut self) {
        self.sync(&[]);
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Advertiser {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(a: &str, tcp: bool) -> Port {
        Port {
            addr: a.parse().unwrap(),
            tcp,
            secure: Default::default(),
        }
    }

    #[test]
    fn each_transport_is_advertised_as_tp8009_says() {
        let r = record("gw-a.example.com", 0, port("10.0.2.15:4420", true));
        assert_eq!(r.service_type, "_nvme-disc._tcp.local.");
        assert_eq!(r.instance, "nvmf-target gw-a port 1");
        assert_eq!(r.host, "nvmf-gw-a-p1.local.");
        assert_eq!(r.addr, Some("10.0.2.15".parse().unwrap()));
        assert_eq!(r.port, 4420);
        assert_eq!(
            r.txt,
            vec![
                ("p", "tcp".to_string()),
                ("nqn", "nqn.2014-08.org.nvmexpress.discovery".to_string())
            ]
        );
        let r = record("GW_B", 2, port("[::]:4421", false));
        assert_eq!(r.service_type, "_nvme-disc._udp.local.");
        assert_eq!(r.txt[0], ("p", "roce".to_string()));
        assert_eq!(r.host, "nvmf-gw-b-p3.local.");
        assert_eq!(r.addr, None, "the wildcard: every address");
        assert_eq!(
            record("", 0, port("1.2.3.4:1", true)).host,
            "nvmf-target-p1.local."
        );
    }

    /// Issue 57, 8: a wildcard listener's host name resolves, for a
    /// querier, to the machine's address on its subnet only; a listener's
    /// own address is its address for everyone.
    #[test]
    fn a_wildcard_listener_resolves_to_the_queriers_link_only() {
        let ifaces: Vec<Iface> = vec![
            (
                "10.0.2.15".parse().unwrap(),
                "255.255.255.0".parse().unwrap(),
            ),
            (
                "172.17.0.1".parse().unwrap(),
                "255.255.0.0".parse().unwrap(),
            ),
            (
                "192.168.7.2".parse().unwrap(),
                "255.255.255.0".parse().unwrap(),
            ),
        ];
        let wild = record("gw", 0, port("0.0.0.0:4420", true));
        let peer = |a: &str| a.parse::<IpAddr>().unwrap();
        assert_eq!(
            addrs_for(&wild, &ifaces, peer("10.0.2.2")),
            vec![peer("10.0.2.15")]
        );
        assert_eq!(
            addrs_for(&wild, &ifaces, peer("192.168.7.9")),
            vec![peer("192.168.7.2")]
        );
        assert!(
            addrs_for(&wild, &ifaces, peer("8.8.8.8")).is_empty(),
            "no link of ours"
        );
        let own = record("gw", 1, port("192.168.7.2:4420", true));
        assert_eq!(
            addrs_for(&own, &ifaces, peer("10.0.2.2")),
            vec![peer("192.168.7.2")]
        );
    }
}
