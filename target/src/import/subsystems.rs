//! The subsystems section (namespaces, attributes) and the port links.

use std::collections::HashSet;

use super::json::{at, safe, Cx, Obj};
use super::ports::{Listener, Port};
use super::ImportError;
use crate::model::port::PortName;

/// A namespace of a subsystem.
pub(super) struct Namespace {
    pub(super) nsid: u64,
    pub(super) path: Option<String>,
    pub(super) enabled: bool,
    /// Its ANA group (1 unless nvmet says).
    pub(super) ana_group: u32,
    /// nvmet's `device_nguid` and `device_uuid` (hosts identify the
    /// namespace by them), as nvmet prints them.
    pub(super) nguid: Option<String>,
    pub(super) uuid: Option<String>,
}

/// A `[[subsystem]]`.
pub(super) struct Subsystem {
    pub(super) nqn: String,
    pub(super) allow_any_host: bool,
    pub(super) hosts: Vec<String>,
    pub(super) serial: Option<String>,
    pub(super) model: Option<String>,
    pub(super) namespaces: Vec<Namespace>,
    /// The listeners it is on (`None`: every listener, as nvmet's ports
    /// that link it are all of them).
    pub(super) listeners: Option<Vec<String>>,
}

/// Subsystem attributes nvmf-target does not configure, with the kernel's
/// default (a non-default value gets a note); `None`: never noted.
const SUBSYSTEM_ATTR_DEFAULTS: &[(&str, Option<&str>)] = &[
    ("cntlid_max", Some("65519")),
    ("cntlid_min", Some("1")),
    ("firmware", None),
    ("ieee_oui", Some("0x000000")),
    ("pi_enable", Some("0")),
    ("qid_max", Some("128")),
    ("version", Some("1.3")),
];

pub(super) fn parse_subsystems(
    cx: &Cx,
    root: &Obj,
    notes: &mut Vec<String>,
) -> Result<Vec<Subsystem>, ImportError> {
    let mut out = Vec::new();
    let list = cx.objects(root, "", "subsystems")?;
    if list.is_empty() {
        notes.push("the nvmet configuration defines no subsystem; add a [[subsystem]]".into());
    }
    for (path, o) in list {
        let nqn = cx.req_string(o, &path, "nqn")?.to_string();
        let l = format!("subsystem '{}'", safe(&nqn));
        if nqn == nvme::DISCOVERY_NQN {
            notes.push(format!(
                "{l}: the discovery subsystem is served by nvmf-target itself; skipped"
            ));
            continue;
        }
        let mut allow_any_host = false;
        let mut serial = None;
        let mut model = None;
        if let Some(attr) = cx.opt_object(o, &path, "attr")? {
            let apath = at(&path, "attr");
            allow_any_host = cx
                .opt_flag(attr, &apath, "allow_any_host")?
                .unwrap_or(false);
            serial = cx
                .opt_text(attr, &apath, "serial")?
                .filter(|s| !s.is_empty());
            model = cx
                .opt_text(attr, &apath, "model")?
                .filter(|s| !s.is_empty());
            for (k, v) in attr {
                if v.is_null() || matches!(k.as_str(), "allow_any_host" | "serial" | "model") {
                    continue;
                }
                let v = cx.text_of(v, &at(&apath, k))?;
                let default = SUBSYSTEM_ATTR_DEFAULTS
                    .iter()
                    .find(|(n, _)| *n == k.as_str());
                match default {
                    Some((_, None)) => continue,
                    Some((_, Some(d))) if v == *d => continue,
                    _ => {}
                }
                if k == "pi_enable" {
                    notes.push(format!(
                        "{l}: attr.pi_enable = '{}' is ignored (protection information is \
                         not supported)",
                        safe(&v)
                    ));
                } else {
                    notes.push(format!(
                        "{l}: attr.{k} = '{}' is not supported; ignored",
                        safe(&v)
                    ));
                }
            }
        }
        let hosts: Vec<String> = cx
            .strings(o, &path, "allowed_hosts")?
            .into_iter()
            .map(String::from)
            .collect();
        if !allow_any_host && hosts.is_empty() {
            notes.push(format!(
                "{l}: no host may connect (allow_any_host is 0 and allowed_hosts is empty); \
                 carried over as such (nvmf-target warns of it)"
            ));
        }
        for (ppath, pt) in cx.objects(o, &path, "passthru")? {
            let dev = match cx.opt_object(pt, &ppath, "device")? {
                Some(d) => cx.opt_text(d, &at(&ppath, "device"), "path")?,
                None => None,
            };
            let enabled = cx.opt_flag(pt, &ppath, "enable")?.unwrap_or(false);
            if enabled || dev.as_deref().is_some_and(|d| !d.is_empty()) {
                notes.push(format!(
                    "{l}: passthru of controller '{}' is not supported; dropped",
                    safe(dev.as_deref().unwrap_or("?"))
                ));
            }
        }
        let mut namespaces = Vec::new();
        for (npath, n) in cx.objects(o, &path, "namespaces")? {
            namespaces.push(parse_namespace(cx, &npath, n, &l, notes)?);
        }
        namespaces.sort_by_key(|n| n.nsid);
        if !namespaces.iter().any(|n| n.enabled) {
            notes.push(format!("{l}: exports no (enabled) namespace"));
        }
        out.push(Subsystem {
            nqn,
            allow_any_host,
            hosts,
            serial,
            model,
            namespaces,
            listeners: None,
        });
    }
    Ok(out)
}

fn parse_namespace(
    cx: &Cx,
    path: &str,
    n: &Obj,
    subsys: &str,
    notes: &mut Vec<String>,
) -> Result<Namespace, ImportError> {
    let nsid = cx
        .opt_int(n, path, "nsid")?
        .ok_or_else(|| cx.err(&at(path, "nsid"), "is required"))?;
    if nsid > u64::from(u32::MAX) {
        return Err(cx.err(&at(path, "nsid"), format!("{nsid} is out of range")));
    }
    let l = format!("{subsys} namespace {nsid}");
    if nsid == 0 || nsid > u64::from(crate::MAX_NSID) {
        notes.push(format!(
            "{l}: nsid {nsid} is out of nvmf-target's range 1..={}; renumber it",
            crate::MAX_NSID
        ));
    }
    let enable = cx.opt_flag(n, path, "enable")?;
    let dpath = at(path, "device");
    let device = cx.opt_object(n, path, "device")?;
    let dev_path = match device {
        Some(d) => cx.opt_string(d, &dpath, "path")?.map(String::from),
        None => None,
    };
    if enable != Some(true) {
        let why = if enable.is_none() {
            "has no 'enable' (nvmetcli restore leaves it disabled)"
        } else {
            "is disabled"
        };
        notes.push(format!(
            "{l} ({}) {why}; written commented out",
            safe(dev_path.as_deref().unwrap_or("no device path"))
        ));
        return Ok(Namespace {
            nsid,
            path: dev_path.filter(|p| !p.is_empty()),
            enabled: false,
            ana_group: 1,
            nguid: None,
            uuid: None,
        });
    }
    let dev_path = match dev_path {
        Some(p) if !p.trim().is_empty() => p,
        Some(_) => {
            return Err(cx.err(
                &at(&dpath, "path"),
                "is empty, but the namespace is enabled",
            ))
        }
        None => {
            return Err(cx.err(
                &at(&dpath, "path"),
                "is required (the namespace is enabled)",
            ))
        }
    };
    let mut dropped = Vec::new();
    let (mut nguid, mut uuid) = (None, None);
    if let Some(d) = device {
        for (k, v) in d {
            if k == "path" || v.is_null() {
                continue;
            }
            let v = cx.text_of(v, &at(&dpath, k))?;
            // nvmet's NGUID is zero unless set, and then hosts see none:
            // kept so (`nguid = "none"`).
            if k == "nguid" && v.chars().all(|c| c == '0' || c == '-') {
                nguid = Some("none".into());
                continue;
            }
            if v.is_empty() || v == "0" {
                continue;
            }
            if matches!(k.as_str(), "nguid" | "uuid")
                && crate::model::identity::parse_hex::<16>(&v).is_ok()
            {
                *(if k == "nguid" { &mut nguid } else { &mut uuid }) = Some(v);
                continue;
            }
            dropped.push(format!("device.{k} {}", safe(&v)));
        }
    }
    let mut grpid = cx.opt_int(n, path, "ana_grpid")?;
    if let Some(ana) = cx.opt_object(n, path, "ana")? {
        let apath = at(path, "ana");
        if grpid.is_none() {
            grpid = cx.opt_int(ana, &apath, "grpid")?;
        }
    }
    let ana_group = match grpid {
        None => 1,
        Some(g) => match u32::try_from(g) {
            Ok(g) if (1..=nvme::ana::MAX_GROUPS).contains(&g) => g,
            _ => {
                dropped.push(format!(
                    "ANA group {g} (out of range 1..={}; the namespace is in group 1)",
                    nvme::ana::MAX_GROUPS
                ));
                1
            }
        },
    };
    if let Some(resv) = cx.opt_object(n, path, "resv")? {
        if cx.opt_flag(resv, &at(path, "resv"), "enable")? == Some(true) {
            dropped.push("reservations (resv.enable)".into());
        }
    }
    for k in ["buffered_io", "p2pmem"] {
        if let Some(v) = cx.opt_text(n, path, k)? {
            if !v.is_empty() && v != "0" {
                dropped.push(format!("{k} {}", safe(&v)));
            }
        }
    }
    if !dropped.is_empty() {
        notes.push(format!("{l}: not carried over: {}", dropped.join(", ")));
    }
    Ok(Namespace {
        nsid,
        path: Some(dev_path),
        enabled: true,
        ana_group,
        nguid,
        uuid,
    })
}

/// Puts each subsystem on the listeners of the nvmet ports that link it
/// (nvmet serves a subsystem only at those), and notes what nvmet links that
/// is not carried over.
pub(super) fn link_listeners(
    ports: &[Port],
    listeners: &[Listener],
    subsystems: &mut [Subsystem],
    notes: &mut Vec<String>,
) {
    if listeners.is_empty() {
        notes.push(
            "no usable port in the nvmet configuration: add a [[listener]] \
             (a commented example is included)"
                .into(),
        );
    }
    let defined: HashSet<&str> = subsystems.iter().map(|s| s.nqn.as_str()).collect();
    for p in ports.iter().filter(|p| p.endpoint.is_some()) {
        for s in &p.subsystems {
            if !defined.contains(s.as_str()) {
                notes.push(format!(
                    "{}: links subsystem '{}', which is not defined; ignored",
                    p.label,
                    safe(s)
                ));
            }
        }
    }
    let name = |l: &Listener| {
        PortName {
            tcp: Some(l.tcp),
            addr: l.addr,
        }
        .to_string()
    };
    for s in subsystems.iter_mut() {
        let on: Vec<&Listener> = listeners
            .iter()
            .filter(|l| {
                ports.iter().any(|p| {
                    p.endpoint == Some(l.addr) && p.tcp == l.tcp && p.subsystems.contains(&s.nqn)
                })
            })
            .collect();
        if !listeners.is_empty() && on.len() == listeners.len() {
            continue;
        }
        s.listeners = Some(on.iter().map(|l| name(l)).collect());
        if on.is_empty() {
            let others: Vec<String> = ports
                .iter()
                .filter(|p| p.endpoint.is_none() && p.subsystems.contains(&s.nqn))
                .map(|p| format!("{} ({})", p.label, safe(&p.trtype)))
                .collect();
            let linked = if others.is_empty() {
                "is not linked to any port".to_string()
            } else {
                format!(
                    "is linked only to {}, which is not imported",
                    others.join(", ")
                )
            };
            notes.push(format!(
                "subsystem '{}' {linked} in nvmet; it is imported on no listener \
                 (listeners = []) until one is added",
                safe(&s.nqn)
            ));
        }
    }
}
