//! The discovery, hosts and ports sections; ports become listeners.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::model::port::Secure;
use nvme::ana::{AnaState, MAX_GROUPS};

use super::json::{at, safe, Cx, Obj};
use super::subsystems::Subsystem;
use super::ImportError;

pub(super) fn check_discovery(
    cx: &Cx,
    root: &Obj,
    notes: &mut Vec<String>,
) -> Result<(), ImportError> {
    if let Some(d) = cx.opt_object(root, "", "discovery")? {
        if let Some(nqn) = cx.opt_text(d, "discovery", "nqn")? {
            if !nqn.is_empty() && nqn != nvme::DISCOVERY_NQN {
                notes.push(format!(
                    "the discovery NQN '{}' is not configurable: nvmf-target serves discovery \
                     as '{}'",
                    safe(&nqn),
                    nvme::DISCOVERY_NQN
                ));
            }
        }
    }
    Ok(())
}

/// A host with DH-HMAC-CHAP settings, as nvmet had them.
pub(super) struct Host {
    pub(super) nqn: String,
    pub(super) key: Option<String>,
    pub(super) ctrl_key: Option<String>,
    pub(super) hash: Option<String>,
    pub(super) dhgroup: Option<String>,
}

/// The hosts that have a DH-HMAC-CHAP key (nvmet's `dhchap` attributes:
/// `key`, `ctrl_key`, `hash`, `dhgroup`). A key nvmf-target cannot read is
/// an error naming its JSON path, never quoting it.
pub(super) fn parse_hosts(
    cx: &Cx,
    root: &Obj,
    notes: &mut Vec<String>,
) -> Result<Vec<Host>, ImportError> {
    let mut out = Vec::new();
    for (path, h) in cx.objects(root, "", "hosts")? {
        let nqn = cx.req_string(h, &path, "nqn")?;
        let Some(d) = cx.opt_object(h, &path, "dhchap")? else {
            continue;
        };
        let dpath = at(&path, "dhchap");
        let text = |k: &str| -> Result<Option<String>, ImportError> {
            Ok(cx.opt_text(d, &dpath, k)?.filter(|v| !v.is_empty()))
        };
        let (key, ctrl_key) = (text("key")?, text("ctrl_key")?);
        let (hash, dhgroup) = (text("hash")?, text("dhgroup")?);
        for (k, v) in [("key", &key), ("ctrl_key", &ctrl_key)] {
            if let Some(Err(e)) = v.as_deref().map(dhchap::Secret::parse) {
                return Err(cx.err(&at(&dpath, k), e.to_string()));
            }
        }
        if let Some(v) = hash
            .as_deref()
            .filter(|v| dhchap::HashId::from_name(v).is_none())
        {
            return Err(cx.err(
                &at(&dpath, "hash"),
                format!("'{}' is not a hash nvmf-target knows", safe(v)),
            ));
        }
        if let Some(v) = dhgroup
            .as_deref()
            .filter(|v| dhchap::GroupId::from_name(v).is_none())
        {
            return Err(cx.err(
                &at(&dpath, "dhgroup"),
                format!("'{}' is not a DH group nvmf-target knows", safe(v)),
            ));
        }
        if key.is_none() {
            if ctrl_key.is_some() {
                notes.push(format!(
                    "host '{}' has a controller key but no host key: nvmet does not authenticate it,                      so neither does nvmf-target (the controller key is dropped)",
                    safe(nqn)
                ));
            }
            continue;
        }
        out.push(Host {
            nqn: nqn.to_string(),
            key,
            ctrl_key,
            hash,
            dhgroup,
        });
    }
    if !out.is_empty() {
        notes.push(format!(
            "{} host(s) carry DH-HMAC-CHAP secrets into this file ([[host]]): keep it readable by root only",
            out.len()
        ));
    }
    Ok(out)
}

/// A port of the nvmet configuration.
pub(super) struct Port {
    /// `port 1` (or `ports[0]` without a portid).
    pub(super) label: String,
    pub(super) trtype: String,
    /// Where the port listens; `None` for ports that are skipped.
    pub(super) endpoint: Option<SocketAddr>,
    /// NVMe/TCP (else RDMA).
    pub(super) tcp: bool,
    /// TLS (NVMe/TCP with `tsas` tls1.3).
    pub(super) secure: Secure,
    /// NQNs of the linked subsystems.
    pub(super) subsystems: Vec<String>,
    /// The ANA groups it has, and their states.
    pub(super) ana: BTreeMap<u32, AnaState>,
}

pub(super) fn parse_ports(
    cx: &Cx,
    root: &Obj,
    notes: &mut Vec<String>,
) -> Result<Vec<Port>, ImportError> {
    let mut out = Vec::new();
    for (path, o) in cx.objects(root, "", "ports")? {
        let label = match cx.opt_int(o, &path, "portid")? {
            Some(id) => format!("port {id}"),
            None => path.clone(),
        };
        let apath = at(&path, "addr");
        let addr = cx
            .opt_object(o, &path, "addr")?
            .ok_or_else(|| cx.err(&apath, "is required"))?;
        let trtype = cx.req_string(addr, &apath, "trtype")?.trim().to_string();
        let traddr = cx.opt_text(addr, &apath, "traddr")?.unwrap_or_default();
        let trsvcid = cx.opt_text(addr, &apath, "trsvcid")?.unwrap_or_default();
        let treq = cx.opt_text(addr, &apath, "treq")?;
        let tsas = cx.opt_text(addr, &apath, "tsas")?;
        let subsystems: Vec<String> = cx
            .strings(o, &path, "subsystems")?
            .into_iter()
            .map(String::from)
            .collect();
        let referrals = cx.objects(o, &path, "referrals")?;
        let ana_groups = cx.objects(o, &path, "ana_groups")?;
        let param = cx.opt_object(o, &path, "param")?;
        let mut port = Port {
            label,
            tcp: trtype == "tcp",
            secure: Secure::None,
            trtype,
            endpoint: None,
            subsystems,
            ana: BTreeMap::new(),
        };
        let l = &port.label;
        if !matches!(port.trtype.as_str(), "rdma" | "tcp") {
            notes.push(format!(
                "{l}: transport '{}' is not supported (nvmf-target serves rdma and tcp); \
                 the port is skipped",
                safe(&port.trtype)
            ));
            out.push(port);
            continue;
        }
        if traddr.is_empty() {
            notes.push(format!(
                "{l}: {} port without an address (traddr); skipped",
                port.trtype
            ));
            out.push(port);
            continue;
        }
        let Ok(ip) = traddr.parse::<IpAddr>() else {
            notes.push(format!(
                "{l}: traddr '{}' is not an IPv4 or IPv6 address; the port is skipped",
                safe(&traddr)
            ));
            out.push(port);
            continue;
        };
        let tcp_port = if trsvcid.is_empty() {
            notes.push(format!(
                "{l}: no trsvcid; using the default port {}",
                nvme::DEFAULT_PORT
            ));
            nvme::DEFAULT_PORT
        } else {
            match trsvcid.parse::<u16>() {
                Ok(p) if p != 0 => p,
                _ => {
                    notes.push(format!(
                        "{l}: trsvcid '{}' is not a port number 1..=65535; the port is skipped",
                        safe(&trsvcid)
                    ));
                    out.push(port);
                    continue;
                }
            }
        };
        // nvmet speaks TLS on a TCP port whose tsas is tls1.3: only TLS when
        // treq says required, TLS or plain otherwise.
        let tls = port.tcp && tsas.as_deref() == Some("tls1.3");
        if tls {
            port.secure = if treq.as_deref() == Some("required") {
                Secure::Required
            } else {
                Secure::Optional
            };
        } else if treq.as_deref() == Some("required") {
            notes.push(format!(
                "{l}: treq 'required' (secure channel) is not supported; the listener \
                 accepts hosts without it"
            ));
        }
        if !referrals.is_empty() {
            notes.push(format!(
                "{l}: {} discovery referral(s) are not supported; dropped",
                referrals.len()
            ));
        }
        for (gpath, g) in &ana_groups {
            let Some(grpid) = cx.opt_int(g, gpath, "grpid")? else {
                notes.push(format!("{l}: {gpath} has no grpid; skipped"));
                continue;
            };
            let state = match cx.opt_object(g, gpath, "ana")? {
                Some(a) => cx.opt_text(a, &at(gpath, "ana"), "state")?,
                None => None,
            };
            let state = state.unwrap_or_else(|| "optimized".into());
            let group = u32::try_from(grpid)
                .ok()
                .filter(|g| (1..=MAX_GROUPS).contains(g));
            match (group, AnaState::from_name(&state)) {
                (Some(g), Some(st)) => {
                    port.ana.insert(g, st);
                }
                (None, _) => notes.push(format!(
                    "{l}: ANA group {grpid} is out of range 1..={MAX_GROUPS}; skipped"
                )),
                (_, None) => notes.push(format!(
                    "{l}: ANA group {grpid} has the unknown state '{}'; skipped",
                    safe(&state)
                )),
            }
        }
        if let Some(param) = param {
            let ppath = at(&path, "param");
            for (k, v) in param.iter().filter(|(_, v)| !v.is_null()) {
                let v = cx.text_of(v, &at(&ppath, k))?;
                let ours = match k.as_str() {
                    "inline_data_size" => {
                        let ours = crate::INLINE_DATA_SIZE.to_string();
                        if v == "-1" || v == ours {
                            continue;
                        }
                        format!("nvmf-target uses {ours} bytes")
                    }
                    "max_queue_size" => {
                        let ours = crate::MAX_QUEUE_SIZE.to_string();
                        if v == "-1" || v == ours {
                            continue;
                        }
                        format!("nvmf-target allows {ours} entries")
                    }
                    "pi_enable" => {
                        if v == "0" || v.is_empty() {
                            continue;
                        }
                        "protection information is not supported".into()
                    }
                    _ => "not supported".into(),
                };
                notes.push(format!(
                    "{l}: param.{k} = '{}' is ignored ({ours})",
                    safe(&v)
                ));
            }
        }
        port.endpoint = Some(SocketAddr::new(ip, tcp_port));
        out.push(port);
    }
    Ok(out)
}

/// A `[[listener]]`.
pub(super) struct Listener {
    pub(super) addr: SocketAddr,
    /// NVMe/TCP (else RDMA).
    pub(super) tcp: bool,
    /// TLS.
    pub(super) secure: Secure,
    /// Labels of the nvmet ports it comes from.
    pub(super) from: Vec<String>,
    /// The ANA states of its groups (of the first port it comes from).
    pub(super) ana: BTreeMap<u32, AnaState>,
}

pub(super) fn merge_listeners(ports: &[Port], notes: &mut Vec<String>) -> Vec<Listener> {
    let mut out: Vec<Listener> = Vec::new();
    for p in ports {
        let Some(addr) = p.endpoint else { continue };
        if let Some(l) = out.iter_mut().find(|l| l.addr == addr && l.tcp == p.tcp) {
            notes.push(format!(
                "{}: {addr} is also the address of {}; one listener is emitted",
                p.label, l.from[0]
            ));
            if p.secure != l.secure {
                notes.push(format!(
                    "{}: its TLS setting differs from that of {}; the listener has {}'s",
                    p.label, l.from[0], l.from[0]
                ));
            }
            if p.ana != l.ana {
                notes.push(format!(
                    "{}: its ANA states differ from those of {}; the listener has {}'s",
                    p.label, l.from[0], l.from[0]
                ));
            }
            l.from.push(p.label.clone());
        } else {
            out.push(Listener {
                addr,
                tcp: p.tcp,
                secure: p.secure,
                from: vec![p.label.clone()],
                ana: p.ana.clone(),
            });
        }
    }
    out
}

/// The groups the namespaces use that a listener's ports do not have: nvmet
/// reports those inaccessible on such a port (group 1 excepted, optimized
/// unless set), where nvmf-target's default is optimized, so they are
/// written out.
pub(super) fn complete_ana(
    listeners: &mut [Listener],
    subsystems: &[Subsystem],
    notes: &mut Vec<String>,
) {
    let used: std::collections::BTreeSet<u32> = subsystems
        .iter()
        .flat_map(|s| &s.namespaces)
        .filter(|n| n.enabled)
        .map(|n| n.ana_group)
        .filter(|&g| g != 1)
        .collect();
    for l in listeners {
        let missing: Vec<u32> = used
            .iter()
            .copied()
            .filter(|g| !l.ana.contains_key(g))
            .collect();
        if missing.is_empty() {
            continue;
        }
        for g in &missing {
            l.ana.insert(*g, AnaState::Inaccessible);
        }
        let ids: Vec<String> = missing.iter().map(u32::to_string).collect();
        notes.push(format!(
            "listener {}: nvmet {} has no ANA group {}, so nvmet reports it inaccessible \
             there; the listener says so",
            crate::model::port::PortName {
                tcp: Some(l.tcp),
                addr: l.addr
            },
            l.from.join(", "),
            ids.join(", ")
        ));
    }
}
