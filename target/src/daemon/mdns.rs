//! The wire side of an announce-only DNS-SD responder (RFC 6762, 6763),
//! no I/O: it reads the questions of an mDNS query and writes the answers
//! for the services it publishes, and the announcements and goodbyes.
//!
//! It keeps nothing a peer sends: responses on the link (other responders'
//! records, a flood of forged ones) are not read past their header, so no
//! cache grows with what the link carries. A general-purpose mDNS library
//! caches unsolicited records with the sender's TTL and no size cap; a
//! target only has to be found.

use std::net::IpAddr;

/// The class IN.
const CLASS_IN: u16 = 1;
/// The cache-flush bit of a unique record's class (RFC 6762, 10.2).
const CACHE_FLUSH: u16 = 0x8000;
/// The unicast-response bit of a question's class (RFC 6762, 5.4).
const UNICAST: u16 = 0x8000;
/// Record types.
pub mod rtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Pointer (service browsing).
    pub const PTR: u16 = 12;
    /// Text (key=value pairs).
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// Service location.
    pub const SRV: u16 = 33;
    /// Any type.
    pub const ANY: u16 = 255;
}
/// TTL of records naming a host (SRV, A, AAAA), RFC 6762 10.
pub const TTL_HOST: u32 = 120;
/// TTL of the other records (PTR, TXT).
pub const TTL_OTHER: u32 = 4500;
/// The questions of one query read, at most (a query asks few).
const MAX_QUESTIONS: usize = 16;
/// Compression pointers followed in one name, at most.
const MAX_JUMPS: usize = 16;
/// The service type enumeration name (RFC 6763, 9).
const SERVICES: [&str; 4] = ["_services", "_dns-sd", "_udp", "local"];

/// One published service instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The instance label (may hold spaces: one label).
    pub instance: String,
    /// The service type's labels (`_nvme-disc`, `_tcp`, `local`).
    pub service_type: Vec<String>,
    /// The host name's labels (`nvmf-gw-a-p1`, `local`).
    pub host: Vec<String>,
    /// The port.
    pub port: u16,
    /// TXT strings (`key=value`).
    pub txt: Vec<String>,
}

impl Service {
    fn instance_name(&self) -> Vec<&str> {
        std::iter::once(self.instance.as_str())
            .chain(self.service_type.iter().map(|s| s.as_str()))
            .collect()
    }
}

/// The labels of a dotted name (`a.b.local.`).
pub fn labels(name: &str) -> Vec<String> {
    name.trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A question of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// Its name's labels.
    pub name: Vec<String>,
    /// The type asked for.
    pub qtype: u16,
    /// Whether a unicast answer was asked for (the QU bit).
    pub unicast: bool,
}

/// A query read from the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The message id (echoed to legacy unicast queriers).
    pub id: u16,
    /// Its questions (the first [`MAX_QUESTIONS`]).
    pub questions: Vec<Question>,
}

/// Reads the questions of `packet`; `None` for a response (ignored, so
/// never kept) or a malformed message.
pub fn parse_query(packet: &[u8]) -> Option<Query> {
    if packet.len() < 12 {
        return None;
    }
    let word = |i: usize| u16::from_be_bytes([packet[i], packet[i + 1]]);
    let (id, flags, qdcount) = (word(0), word(2), word(4) as usize);
    // QR set: a response. Opcode other than a standard query: not ours.
    if flags & 0x8000 != 0 || (flags >> 11) & 0xF != 0 {
        return None;
    }
    let mut at = 12;
    let mut questions = Vec::new();
    for _ in 0..qdcount.min(MAX_QUESTIONS) {
        let (name, next) = read_name(packet, at)?;
        let fixed = packet.get(next..next + 4)?;
        let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
        at = next + 4;
        if qclass & !UNICAST == CLASS_IN || qclass & !UNICAST == rtype::ANY {
            questions.push(Question {
                name,
                qtype,
                unicast: qclass & UNICAST != 0,
            });
        }
    }
    Some(Query { id, questions })
}

/// Reads the name at `at`; returns its labels and where the name ends.
fn read_name(packet: &[u8], mut at: usize) -> Option<(Vec<String>, usize)> {
    let mut labels = Vec::new();
    let (mut end, mut jumps, mut total) = (None, 0, 0usize);
    loop {
        let len = *packet.get(at)? as usize;
        match len {
            0 => return Some((labels, end.unwrap_or(at + 1))),
            l if l & 0xC0 == 0xC0 => {
                let target = ((l & 0x3F) << 8) | *packet.get(at + 1)? as usize;
                jumps += 1;
                if jumps > MAX_JUMPS || target >= at {
                    return None;
                }
                end.get_or_insert(at + 2);
                at = target;
            }
            l if l & 0xC0 != 0 => return None,
            l => {
                let bytes = packet.get(at + 1..at + 1 + l)?;
                total += l + 1;
                if total > 255 {
                    return None;
                }
                labels.push(String::from_utf8_lossy(bytes).into_owned());
                at += 1 + l;
            }
        }
    }
}

fn same(a: &[String], b: &[&str]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y))
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

/// A DNS message being written: answers, then additional records.
#[derive(Debug, Default)]
pub struct Message {
    answers: Vec<Vec<u8>>,
    additionals: Vec<Vec<u8>>,
}

fn put_name(out: &mut Vec<u8>, name: &[&str]) {
    for l in name {
        let b = &l.as_bytes()[..l.len().min(63)];
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    }
    out.push(0);
}

fn record(name: &[&str], rtype: u16, unique: bool, ttl: u32, rdata: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(rdata.len() + 64);
    put_name(&mut r, name);
    r.extend_from_slice(&rtype.to_be_bytes());
    let class = CLASS_IN | if unique { CACHE_FLUSH } else { 0 };
    r.extend_from_slice(&class.to_be_bytes());
    r.extend_from_slice(&ttl.to_be_bytes());
    r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    r.extend_from_slice(rdata);
    r
}

impl Message {
    fn push(&mut self, additional: bool, r: Vec<u8>) {
        if self.answers.contains(&r) || self.additionals.contains(&r) {
            return;
        }
        match additional {
            false => self.answers.push(r),
            true => self.additionals.push(r),
        }
    }

    fn ptr(&mut self, s: &Service, ttl: u32, additional: bool) {
        let mut rdata = Vec::new();
        put_name(&mut rdata, &s.instance_name());
        self.push(
            additional,
            record(&strs(&s.service_type), rtype::PTR, false, ttl, &rdata),
        );
    }

    fn srv(&mut self, s: &Service, ttl: u32, additional: bool) {
        let mut rdata = vec![0, 0, 0, 0];
        rdata.extend_from_slice(&s.port.to_be_bytes());
        put_name(&mut rdata, &strs(&s.host));
        self.push(
            additional,
            record(&s.instance_name(), rtype::SRV, true, ttl, &rdata),
        );
    }

    fn txt(&mut self, s: &Service, ttl: u32, additional: bool) {
        let mut rdata = Vec::new();
        for t in &s.txt {
            let b = &t.as_bytes()[..t.len().min(255)];
            rdata.push(b.len() as u8);
            rdata.extend_from_slice(b);
        }
        if rdata.is_empty() {
            rdata.push(0);
        }
        self.push(
            additional,
            record(&s.instance_name(), rtype::TXT, true, ttl, &rdata),
        );
    }

    fn addrs(&mut self, s: &Service, addrs: &[IpAddr], ttl: u32, additional: bool, want: u16) {
        for a in addrs {
            let r = match a {
                IpAddr::V4(v4) if want != rtype::AAAA => {
                    record(&strs(&s.host), rtype::A, true, ttl, &v4.octets())
                }
                IpAddr::V6(v6) if want != rtype::A => {
                    record(&strs(&s.host), rtype::AAAA, true, ttl, &v6.octets())
                }
                _ => continue,
            };
            self.push(additional, r);
        }
    }

    /// Whether it answers nothing.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// The message's bytes (a response: QR and AA set; `id` 0 on the
    /// multicast group). `question`: echoed for a legacy unicast querier.
    pub fn encode(&self, id: u16, question: Option<&Question>) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&0x8400u16.to_be_bytes());
        out.extend_from_slice(&(question.is_some() as u16).to_be_bytes());
        out.extend_from_slice(&(self.answers.len() as u16).to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&(self.additionals.len() as u16).to_be_bytes());
        if let Some(q) = question {
            put_name(&mut out, &strs(&q.name));
            out.extend_from_slice(&q.qtype.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
        }
        for r in self.answers.iter().chain(&self.additionals) {
            out.extend_from_slice(r);
        }
        out
    }
}

/// The answers to `q` from `services`; `addrs(s)` gives the addresses of
/// service `s`'s host for this querier. `ttl_cap` lowers every TTL (10 s
/// for a legacy unicast querier, RFC 6762 6.7).
pub fn answer(
    services: &[Service],
    q: &Question,
    addrs: &dyn Fn(&Service) -> Vec<IpAddr>,
    ttl_cap: u32,
) -> Message {
    let (host_ttl, other_ttl) = (TTL_HOST.min(ttl_cap), TTL_OTHER.min(ttl_cap));
    let mut m = Message::default();
    let any = q.qtype == rtype::ANY;
    if same(&q.name, &SERVICES) && (any || q.qtype == rtype::PTR) {
        let mut types: Vec<&Vec<String>> = services.iter().map(|s| &s.service_type).collect();
        types.dedup();
        for t in types {
            let mut rdata = Vec::new();
            put_name(&mut rdata, &strs(t));
            m.push(
                false,
                record(&SERVICES, rtype::PTR, false, other_ttl, &rdata),
            );
        }
    }
    for s in services {
        if same(&q.name, &strs(&s.service_type)) && (any || q.qtype == rtype::PTR) {
            m.ptr(s, other_ttl, false);
            m.srv(s, host_ttl, true);
            m.txt(s, other_ttl, true);
            m.addrs(s, &addrs(s), host_ttl, true, rtype::ANY);
        }
        if same(&q.name, &s.instance_name()) {
            if any || q.qtype == rtype::SRV {
                m.srv(s, host_ttl, false);
                m.addrs(s, &addrs(s), host_ttl, true, rtype::ANY);
            }
            if any || q.qtype == rtype::TXT {
                m.txt(s, other_ttl, false);
            }
        }
        if same(&q.name, &strs(&s.host)) && matches!(q.qtype, rtype::A | rtype::AAAA | rtype::ANY) {
            m.addrs(s, &addrs(s), host_ttl, false, q.qtype);
        }
    }
    m
}

/// An unsolicited announcement of `s` at `addrs` (`ttl` 0: its goodbye).
pub fn announce(s: &Service, addrs: &[IpAddr], ttl: u32) -> Vec<u8> {
    let (host_ttl, other_ttl) = match ttl {
        0 => (0, 0),
        _ => (TTL_HOST, TTL_OTHER),
    };
    let mut m = Message::default();
    m.ptr(s, other_ttl, false);
    m.srv(s, host_ttl, false);
    m.txt(s, other_ttl, false);
    // A goodbye withdraws the service, not the addresses (another
    // service of the host name may still use them).
    if ttl != 0 {
        m.addrs(s, addrs, host_ttl, false, rtype::ANY);
    }
    m.encode(0, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Service {
        Service {
            instance: "nvmf-target gw-a port 1".into(),
            service_type: labels("_nvme-disc._tcp.local."),
            host: labels("nvmf-gw-a-p1.local."),
            port: 4420,
            txt: vec![
                "p=tcp".into(),
                "nqn=nqn.2014-08.org.nvmexpress.discovery".into(),
            ],
        }
    }

    fn query(name: &str, qtype: u16, class: u16) -> Vec<u8> {
        let mut p = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        put_name(
            &mut p,
            &name
                .split('.')
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>(),
        );
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&class.to_be_bytes());
        p
    }

    fn ip() -> Vec<IpAddr> {
        vec!["10.0.2.15".parse().unwrap()]
    }

    /// Counts the records of each type in a response's answer and
    /// additional sections.
    fn types(msg: &[u8]) -> (Vec<u16>, Vec<u16>) {
        let word = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
        let (qd, an, ar) = (word(4), word(6), word(10));
        let mut at = 12;
        for _ in 0..qd {
            at = read_name(msg, at).unwrap().1 + 4;
        }
        let mut read = |n: u16| {
            (0..n)
                .map(|_| {
                    let end = read_name(msg, at).unwrap().1;
                    let t = word(end);
                    at = end + 10 + word(end + 8) as usize;
                    t
                })
                .collect::<Vec<_>>()
        };
        let answers = read(an);
        (answers, read(ar))
    }

    #[test]
    fn a_browse_gets_the_pointer_and_what_resolves_it() {
        let q = parse_query(&query("_nvme-disc._tcp.local", rtype::PTR, 1)).unwrap();
        assert_eq!(q.id, 7);
        let m = answer(&[svc()], &q.questions[0], &|_| ip(), u32::MAX);
        let (an, ar) = types(&m.encode(0, None));
        assert_eq!(an, vec![rtype::PTR]);
        assert_eq!(ar, vec![rtype::SRV, rtype::TXT, rtype::A]);
        // Names compare without regard to case; other types and names
        // are not ours.
        let q = parse_query(&query("_NVMe-Disc._TCP.local", rtype::PTR, 0x8001)).unwrap();
        assert!(q.questions[0].unicast);
        assert!(!answer(&[svc()], &q.questions[0], &|_| ip(), u32::MAX).is_empty());
        let q = parse_query(&query("_http._tcp.local", rtype::PTR, 1)).unwrap();
        assert!(answer(&[svc()], &q.questions[0], &|_| ip(), u32::MAX).is_empty());
        let q = parse_query(&query("nvmf-gw-a-p1.local", rtype::AAAA, 1)).unwrap();
        assert!(answer(&[svc()], &q.questions[0], &|_| ip(), u32::MAX).is_empty());
    }

    #[test]
    fn the_instance_and_its_host_resolve() {
        let s = [svc()];
        let ask = |name: &str, t| {
            let q = parse_query(&query(name, t, 1)).unwrap();
            types(&answer(&s, &q.questions[0], &|_| ip(), u32::MAX).encode(0, None))
        };
        let inst = "nvmf-target gw-a port 1._nvme-disc._tcp.local";
        assert_eq!(ask(inst, rtype::SRV), (vec![rtype::SRV], vec![rtype::A]));
        assert_eq!(ask(inst, rtype::TXT), (vec![rtype::TXT], vec![]));
        assert_eq!(
            ask("nvmf-gw-a-p1.local", rtype::A),
            (vec![rtype::A], vec![])
        );
        assert_eq!(
            ask("_services._dns-sd._udp.local", rtype::PTR),
            (vec![rtype::PTR], vec![])
        );
        let bye = announce(&svc(), &ip(), 0);
        let (an, _) = types(&bye);
        assert_eq!(an, vec![rtype::PTR, rtype::SRV, rtype::TXT]);
        assert!(
            bye.windows(4).filter(|w| *w == [0, 0, 0, 0]).count() >= 3,
            "TTL 0"
        );
    }

    /// Issue 57, 7: responses on the link are not read; malformed queries
    /// (pointer loops, forward pointers, truncation, long names) are
    /// refused without panicking.
    #[test]
    fn responses_and_malformed_messages_are_not_read() {
        let resp = announce(&svc(), &ip(), 4500);
        assert_eq!(parse_query(&resp), None);
        let mut looped = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 12, 0, 1];
        assert_eq!(parse_query(&looped), None);
        looped[13] = 14;
        assert_eq!(parse_query(&looped), None, "a forward pointer");
        let mut long = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.extend_from_slice(&[0, 0, 12, 0, 1]);
        assert_eq!(parse_query(&long), None);
        let q = query("_nvme-disc._tcp.local", rtype::PTR, 1);
        for cut in 0..q.len() {
            let _ = parse_query(&q[..cut]);
        }
        assert!(parse_query(&q).is_some());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            if let Some(q) = parse_query(&bytes) {
                for question in &q.questions {
                    let _ = answer(&[svc()], question, &|_| ip(), 10).encode(q.id, Some(question));
                }
            }
        }
    }
}
