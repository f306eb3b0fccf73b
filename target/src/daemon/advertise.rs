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
//! [`Advertiser`] publishes it through the mdns-sd responder (its own
//! thread, port 5353 shared with Avahi where it runs).

use std::collections::BTreeMap;
use std::net::IpAddr;

use tracing::{info, warn};

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

/// The responder and what it advertises now, by listener slot.
pub struct Advertiser {
    mdns: mdns_sd::ServiceDaemon,
    hostname: String,
    /// Slot -> (its port, the instance's full name).
    published: BTreeMap<usize, (Port, String)>,
}

impl Advertiser {
    /// Starts the responder.
    pub fn start() -> Result<Advertiser, String> {
        let mdns = mdns_sd::ServiceDaemon::new().map_err(|e| format!("mDNS responder: {e}"))?;
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        Ok(Advertiser {
            mdns,
            hostname,
            published: BTreeMap::new(),
        })
    }

    /// Advertises `live` (the listeners and their slots) and withdraws
    /// what is no longer among them; returns the withdrawals' answers.
    pub fn sync(
        &mut self,
        live: &[(usize, Port)],
    ) -> Vec<mdns_sd::Receiver<mdns_sd::UnregisterStatus>> {
        let gone: Vec<usize> = self
            .published
            .iter()
            .filter(|(s, (p, _))| !live.contains(&(**s, *p)))
            .map(|(s, _)| *s)
            .collect();
        let mut withdrawn = Vec::new();
        for s in gone {
            let Some((p, name)) = self.published.get(&s).cloned() else {
                continue;
            };
            match self.mdns.unregister(&name) {
                Ok(r) => {
                    withdrawn.push(r);
                    self.published.remove(&s);
                    info!(listener = %p.addr, instance = %name, "mDNS: discovery service withdrawn");
                }
                // Kept: tried again at the next change.
                Err(e) => {
                    warn!(listener = %p.addr, instance = %name, error = %e, "mDNS: not withdrawn yet")
                }
            }
        }
        for &(slot, p) in live {
            if self.published.contains_key(&slot) {
                continue;
            }
            let r = record(&self.hostname, slot, p);
            let txt: Vec<(&str, &str)> = r.txt.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let info = match r.addr {
                Some(ip) => mdns_sd::ServiceInfo::new(
                    r.service_type,
                    &r.instance,
                    &r.host,
                    ip,
                    r.port,
                    &txt[..],
                ),
                None => mdns_sd::ServiceInfo::new(
                    r.service_type,
                    &r.instance,
                    &r.host,
                    "",
                    r.port,
                    &txt[..],
                )
                .map(|i| i.enable_addr_auto()),
            };
            let registered = info.and_then(|i| {
                let name = i.get_fullname().to_string();
                self.mdns.register(i).map(|_| name)
            });
            match registered {
                Ok(name) => {
                    info!(listener = %p.addr, instance = %name, "mDNS: advertising the discovery service");
                    self.published.insert(slot, (p, name));
                }
                Err(e) => {
                    warn!(listener = %p.addr, error = %e, "mDNS: the discovery service cannot be advertised")
                }
            }
        }
        withdrawn
    }

    /// Withdraws everything (hosts are told the services are gone) and
    /// stops the responder.
    pub fn stop(mut self) {
        // The responder says goodbye twice, 120 ms apart: both go out
        // before it stops (a host that missed them keeps the records for
        // their TTL).
        for r in self.sync(&[]) {
            let _ = r.recv_timeout(std::time::Duration::from_millis(500));
        }
        std::thread::sleep(std::time::Duration::from_millis(150));
        if let Ok(done) = self.mdns.shutdown() {
            let _ = done.recv_timeout(std::time::Duration::from_secs(1));
        }
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
}
