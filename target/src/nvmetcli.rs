//! Import of a kernel target (nvmet) configuration: converts the JSON that
//! `nvmetcli save` writes (by default [`NVMETCLI_DEFAULT_FILE`]) into the TOML
//! of nvmf-target's configuration file, so nvmet users can migrate.
//!
//! The conversion is sans-IO: [`import`] takes the JSON text and returns the
//! TOML text and the notes, the things that could not be carried over. The
//! notes are also written as `# NOTE:` comments at the top of the TOML.
//!
//! What `nvmetcli save` writes (`json.dumps(root.dump(), sort_keys=True,
//! indent=2)` in `nvmet/nvme.py`): an object with `hosts` (`nqn`, `dhchap`),
//! `ports` (`portid`, `addr` {`trtype`, `adrfam`, `traddr`, `trsvcid`, `treq`,
//! `tsas`}, `param`, `subsystems` (NQNs), `referrals`, `ana_groups`),
//! `subsystems` (`nqn`, `attr` {`allow_any_host`, `serial`, `model`, ...},
//! `allowed_hosts` (NQNs), `namespaces` [{`nsid`, `enable`, `device` {`path`,
//! `nguid`, `uuid`}, `ana_grpid`, `ana`, `resv`}], `passthru`) and, on newer
//! kernels, `discovery` {`nqn`}. Attribute values (`attr`, `param`, `addr`,
//! `device`, ...) are strings; `portid`, `nsid`, `enable` and `ana_grpid` are
//! integers.
//!
//! Mapping:
//! - every port with `trtype` "rdma" becomes a `[[listener]]` (`traddr`,
//!   `trsvcid`, default 4420); other transports are skipped, ports with the
//!   same address and port are emitted once. nvmf-target exports every
//!   subsystem on every listener, so differing port/subsystem links are noted.
//! - every subsystem becomes a `[[subsystem]]` (`nqn`, `allow_any_host`,
//!   `hosts` from `allowed_hosts`, `serial`, `model`), whether or not an rdma
//!   port links it.
//! - every enabled namespace becomes a `[[subsystem.namespace]]` (`nsid`,
//!   `path`); a disabled one (`enable` 0 or absent: `nvmetcli restore` leaves
//!   it disabled) is written commented out.
//! - NGUID/UUID, ANA groups, reservations, passthru, referrals, DH-HMAC-CHAP
//!   keys, protection information and non-default tuning attributes are not
//!   supported: each is named in a note. The subsystem's `attr.firmware` is
//!   dropped silently (it defaults to the kernel release, so it says nothing
//!   about the setup).
//!
//! Missing optional fields are fine; a value of the wrong type, a missing NQN,
//! nsid or device path of an enabled namespace is an [`ImportError`] naming
//! its JSON path, e.g. `subsystems[0].namespaces[1].device.path`.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use serde_json::{Map, Value};

/// Where `nvmetcli save` writes the configuration by default.
pub const NVMETCLI_DEFAULT_FILE: &str = "/etc/nvmet/config.json";

/// Result of an import: the TOML text and the notes (things that could not be
/// carried over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The configuration in nvmf-target's TOML format, notes included as
    /// `# NOTE:` comments at the top.
    pub toml: String,
    /// What could not be carried over (or changes behavior), one sentence each.
    pub notes: Vec<String>,
}

/// Why an nvmetcli JSON file could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The text is not JSON.
    #[error("{source_name}: invalid JSON at line {line}, column {column}: {reason}")]
    Json {
        /// The file.
        source_name: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// A field is missing or has the wrong type or value.
    #[error("{source_name}: {path}: {reason}")]
    Field {
        /// The file.
        source_name: String,
        /// The JSON path, e.g. `subsystems[0].namespaces[1].device.path`
        /// (`top level` for the document itself).
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Converts the JSON written by `nvmetcli save` into nvmf-target's TOML.
/// `source_name` names the input in the errors and in the TOML header.
pub fn import(json: &str, source_name: &str) -> Result<Import, ImportError> {
    let cx = Cx { src: source_name };
    let value: Value = serde_json::from_str(json).map_err(|e| {
        let msg = e.to_string();
        let reason = msg
            .rsplit_once(" at line ")
            .map_or(msg.as_str(), |(m, _)| m)
            .to_string();
        ImportError::Json {
            source_name: source_name.to_string(),
            line: e.line(),
            column: e.column(),
            reason,
        }
    })?;
    let root = cx.object(&value, "")?;
    let mut notes = Vec::new();
    check_discovery(&cx, root, &mut notes)?;
    check_hosts(&cx, root, &mut notes)?;
    let ports = parse_ports(&cx, root, &mut notes)?;
    let listeners = merge_listeners(&ports, &mut notes);
    let subsystems = parse_subsystems(&cx, root, &mut notes)?;
    check_links(&ports, &subsystems, &mut notes);
    let toml = render(source_name, &listeners, &subsystems, &notes);
    Ok(Import { toml, notes })
}

// ---------------------------------------------------------------------------
// JSON access with paths
// ---------------------------------------------------------------------------

type Obj = Map<String, Value>;

struct Cx<'a> {
    src: &'a str,
}

/// `path.key`, or `key` at the top level.
fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field, `None` when missing or null.
fn get<'v>(o: &'v Obj, key: &str) -> Option<&'v Value> {
    o.get(key).filter(|v| !v.is_null())
}

impl Cx<'_> {
    fn err(&self, path: &str, reason: impl Into<String>) -> ImportError {
        ImportError::Field {
            source_name: self.src.to_string(),
            path: if path.is_empty() {
                "top level".into()
            } else {
                path.to_string()
            },
            reason: reason.into(),
        }
    }

    fn expected(&self, path: &str, what: &str, v: &Value) -> ImportError {
        self.err(path, format!("expected {what}, found {}", kind(v)))
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Obj, ImportError> {
        v.as_object()
            .ok_or_else(|| self.expected(path, "an object", v))
    }

    fn opt_object<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<&'v Obj>, ImportError> {
        get(o, key)
            .map(|v| self.object(v, &at(path, key)))
            .transpose()
    }

    /// An array; missing means empty.
    fn array<'v>(&self, o: &'v Obj, path: &str, key: &str) -> Result<&'v [Value], ImportError> {
        match get(o, key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(self.expected(&at(path, key), "an array", v)),
        }
    }

    /// An array of objects, each with its path.
    fn objects<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Vec<(String, &'v Obj)>, ImportError> {
        let base = at(path, key);
        self.array(o, path, key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let p = format!("{base}[{i}]");
                let obj = self.object(v, &p)?;
                Ok((p, obj))
            })
            .collect()
    }

    /// An array of strings; missing means empty.
    fn strings<'v>(&self, o: &'v Obj, path: &str, key: &str) -> Result<Vec<&'v str>, ImportError> {
        let base = at(path, key);
        self.array(o, path, key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .ok_or_else(|| self.expected(&format!("{base}[{i}]"), "a string", v))
            })
            .collect()
    }

    fn opt_string<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<&'v str>, ImportError> {
        match get(o, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.expected(&at(path, key), "a string", v)),
        }
    }

    fn req_string<'v>(&self, o: &'v Obj, path: &str, key: &str) -> Result<&'v str, ImportError> {
        self.opt_string(o, path, key)?
            .ok_or_else(|| self.err(&at(path, key), "is required"))
    }

    /// An attribute value: nvmetcli writes strings; numbers and booleans (as
    /// hand-written files may have) are taken as their text.
    fn text_of(&self, v: &Value, path: &str) -> Result<String, ImportError> {
        match v {
            Value::String(s) => Ok(s.trim().to_string()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(if *b { "1" } else { "0" }.to_string()),
            _ => Err(self.expected(path, "a string", v)),
        }
    }

    fn opt_text(&self, o: &Obj, path: &str, key: &str) -> Result<Option<String>, ImportError> {
        get(o, key)
            .map(|v| self.text_of(v, &at(path, key)))
            .transpose()
    }

    /// A non-negative integer, or a string holding one (`nvmetcli restore`
    /// applies `int()`).
    fn opt_int(&self, o: &Obj, path: &str, key: &str) -> Result<Option<u64>, ImportError> {
        let p = at(path, key);
        match get(o, key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.err(&p, format!("{n} is not a non-negative integer"))),
            Some(Value::String(s)) => {
                s.trim().parse().map(Some).map_err(|_| {
                    self.err(&p, format!("'{}' is not a non-negative integer", safe(s)))
                })
            }
            Some(v) => Err(self.expected(&p, "an integer", v)),
        }
    }

    /// A flag: 0/1 (integer or string, as nvmet writes them), a boolean, or
    /// what the kernel's `kstrtobool` accepts (y/n, on/off).
    fn opt_flag(&self, o: &Obj, path: &str, key: &str) -> Result<Option<bool>, ImportError> {
        let p = at(path, key);
        let Some(v) = get(o, key) else {
            return Ok(None);
        };
        let t = match v {
            Value::Bool(b) => return Ok(Some(*b)),
            Value::Number(n) => return Ok(Some(n.as_f64() != Some(0.0))),
            Value::String(s) => s.trim().to_ascii_lowercase(),
            _ => return Err(self.expected(&p, "0 or 1", v)),
        };
        match t.as_str() {
            "1" | "y" | "yes" | "on" | "true" => Ok(Some(true)),
            "0" | "n" | "no" | "off" | "false" => Ok(Some(false)),
            _ => Err(self.err(&p, format!("'{}' is not 0 or 1", safe(&t)))),
        }
    }
}

/// Control characters escaped, for notes (the text comes from the file).
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The sections
// ---------------------------------------------------------------------------

fn check_discovery(cx: &Cx, root: &Obj, notes: &mut Vec<String>) -> Result<(), ImportError> {
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

fn check_hosts(cx: &Cx, root: &Obj, notes: &mut Vec<String>) -> Result<(), ImportError> {
    for (path, h) in cx.objects(root, "", "hosts")? {
        let nqn = cx.req_string(h, &path, "nqn")?;
        if let Some(d) = cx.opt_object(h, &path, "dhchap")? {
            let dpath = at(&path, "dhchap");
            let mut keys = Vec::new();
            for k in ["key", "ctrl_key"] {
                if cx.opt_text(d, &dpath, k)?.is_some_and(|v| !v.is_empty()) {
                    keys.push(k);
                }
            }
            if !keys.is_empty() {
                notes.push(format!(
                    "host '{}' has DH-HMAC-CHAP secrets (dhchap.{}); nvmf-target does not \
                     support in-band authentication, so it is admitted by its NQN alone",
                    safe(nqn),
                    keys.join(", dhchap.")
                ));
            }
        }
    }
    Ok(())
}

/// A port of the nvmet configuration.
struct Port {
    /// `port 1` (or `ports[0]` without a portid).
    label: String,
    trtype: String,
    /// Where an rdma port listens; `None` for ports that are skipped.
    endpoint: Option<SocketAddr>,
    /// NQNs of the linked subsystems.
    subsystems: Vec<String>,
}

fn parse_ports(cx: &Cx, root: &Obj, notes: &mut Vec<String>) -> Result<Vec<Port>, ImportError> {
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
            trtype,
            endpoint: None,
            subsystems,
        };
        let l = &port.label;
        if port.trtype != "rdma" {
            notes.push(format!(
                "{l}: transport '{}' is not supported (nvmf-target serves rdma only); \
                 the port is skipped",
                safe(&port.trtype)
            ));
            out.push(port);
            continue;
        }
        if traddr.is_empty() {
            notes.push(format!(
                "{l}: rdma port without an address (traddr); skipped"
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
        if treq.as_deref() == Some("required") {
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
        let mut groups = Vec::new();
        for (gpath, g) in &ana_groups {
            let grpid = cx.opt_int(g, gpath, "grpid")?;
            let state = match cx.opt_object(g, gpath, "ana")? {
                Some(a) => cx.opt_text(a, &at(gpath, "ana"), "state")?,
                None => None,
            };
            let state = state.unwrap_or_else(|| "optimized".into());
            if grpid != Some(1) || state != "optimized" {
                let id = grpid.map_or_else(|| "?".to_string(), |g| g.to_string());
                groups.push(format!("group {id} '{}'", safe(&state)));
            }
        }
        if !groups.is_empty() {
            notes.push(format!(
                "{l}: ANA groups are not supported (every path is reported optimized): {}",
                groups.join(", ")
            ));
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
struct Listener {
    addr: SocketAddr,
    /// Labels of the nvmet ports it comes from.
    from: Vec<String>,
}

fn merge_listeners(ports: &[Port], notes: &mut Vec<String>) -> Vec<Listener> {
    let mut out: Vec<Listener> = Vec::new();
    for p in ports {
        let Some(addr) = p.endpoint else { continue };
        if let Some(l) = out.iter_mut().find(|l| l.addr == addr) {
            notes.push(format!(
                "{}: {addr} is also the address of {}; one listener is emitted",
                p.label, l.from[0]
            ));
            l.from.push(p.label.clone());
        } else {
            out.push(Listener {
                addr,
                from: vec![p.label.clone()],
            });
        }
    }
    out
}

/// A namespace of a subsystem.
struct Namespace {
    nsid: u64,
    path: Option<String>,
    enabled: bool,
}

/// A `[[subsystem]]`.
struct Subsystem {
    nqn: String,
    allow_any_host: bool,
    hosts: Vec<String>,
    serial: Option<String>,
    model: Option<String>,
    namespaces: Vec<Namespace>,
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

fn parse_subsystems(
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
                 nvmf-target refuses that: list hosts or set allow_any_host = true"
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
    let mut ids = false;
    if let Some(d) = device {
        for (k, v) in d {
            if k == "path" || v.is_null() {
                continue;
            }
            let v = cx.text_of(v, &at(&dpath, k))?;
            let unset = v.is_empty()
                || v == "0"
                || (k == "nguid" && v.chars().all(|c| c == '0' || c == '-'));
            if unset {
                continue;
            }
            if matches!(k.as_str(), "nguid" | "uuid") {
                ids = true;
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
    if let Some(g) = grpid.filter(|&g| g != 1) {
        dropped.push(format!("ANA group {g}"));
    }
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
        let mut note = format!("{l}: not carried over: {}", dropped.join(", "));
        if ids {
            note.push_str(
                " (nvmf-target derives its own NGUID and UUID: hosts that identify the \
                 namespace by them, e.g. multipath or /dev/disk/by-id, will see new ones)",
            );
        }
        notes.push(note);
    }
    Ok(Namespace {
        nsid,
        path: Some(dev_path),
        enabled: true,
    })
}

fn check_links(ports: &[Port], subsystems: &[Subsystem], notes: &mut Vec<String>) {
    let rdma: Vec<&Port> = ports.iter().filter(|p| p.endpoint.is_some()).collect();
    if rdma.is_empty() {
        notes.push(
            "no usable rdma port in the nvmet configuration: add a [[listener]] \
             (a commented example is included)"
                .into(),
        );
        return;
    }
    let defined: HashSet<&str> = subsystems.iter().map(|s| s.nqn.as_str()).collect();
    for p in &rdma {
        if p.subsystems.is_empty() {
            notes.push(format!(
                "{}: links no subsystem; it is still imported as a listener, and nvmf-target \
                 exports every subsystem on it",
                p.label
            ));
        }
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
    let sets: Vec<(&str, BTreeSet<&str>)> = rdma
        .iter()
        .filter(|p| !p.subsystems.is_empty())
        .map(|p| {
            let set = p.subsystems.iter().map(String::as_str).collect();
            (p.label.as_str(), set)
        })
        .collect();
    if sets.iter().any(|(_, s)| *s != sets[0].1) {
        let list: Vec<String> = sets
            .iter()
            .map(|(l, s)| {
                let names: Vec<String> = s.iter().map(|n| safe(n)).collect();
                format!("{l}: {}", names.join(", "))
            })
            .collect();
        notes.push(format!(
            "the rdma ports link different subsystems ({}); nvmf-target exports every \
             subsystem on every listener",
            list.join("; ")
        ));
    }
    for s in subsystems {
        if rdma.iter().any(|p| p.subsystems.contains(&s.nqn)) {
            continue;
        }
        let others: Vec<String> = ports
            .iter()
            .filter(|p| p.endpoint.is_none() && p.subsystems.contains(&s.nqn))
            .map(|p| format!("{} ({})", p.label, safe(&p.trtype)))
            .collect();
        let linked = if others.is_empty() {
            "is not linked to any port".to_string()
        } else {
            format!("is linked only to {}", others.join(", "))
        };
        notes.push(format!(
            "subsystem '{}' {linked} in nvmet; it is imported and will be exported on every \
             listener",
            safe(&s.nqn)
        ));
    }
}

// ---------------------------------------------------------------------------
// TOML output
// ---------------------------------------------------------------------------

/// A TOML basic string (quoted, escaped).
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Appends `text` as comment lines: `first` starts the first line,
/// continuation lines align under it; wrapped at about 100 columns.
fn push_comment(out: &mut String, first: &str, text: &str) {
    const WIDTH: usize = 100;
    let cont = format!("#{}", " ".repeat(first.len().saturating_sub(1)));
    let mut line = first.to_string();
    let mut words = 0;
    for word in safe(text).split(' ') {
        if words > 0 && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = cont.clone();
            words = 0;
        }
        line.push(' ');
        line.push_str(word);
        words += 1;
    }
    out.push_str(&line);
    out.push('\n');
}

fn render(
    source: &str,
    listeners: &[Listener],
    subsystems: &[Subsystem],
    notes: &[String],
) -> String {
    let mut t = String::new();
    push_comment(
        &mut t,
        "#",
        &format!("nvmf-target configuration imported from the nvmet configuration {source}"),
    );
    t.push_str(
        "# Generated by `nvmf-target import-nvmetcli`. Review it (and the notes below), then\n\
         # validate it with `nvmf-target check-config FILE`.\n",
    );
    if !notes.is_empty() {
        t.push_str("#\n");
        for n in notes {
            push_comment(&mut t, "# NOTE:", n);
        }
    }
    if listeners.is_empty() {
        t.push_str(
            "\n# No usable rdma port was found; add the address of an RDMA device, e.g.\n\
             # [[listener]]\n# transport = \"rdma\"\n# address = \"192.0.2.1\"\n# port = 4420\n",
        );
    }
    for l in listeners {
        let ports = format!("nvmet {}", l.from.join(", "));
        let _ = write!(
            t,
            "\n# {}\n[[listener]]\ntransport = \"rdma\"\naddress = {}\nport = {}\n",
            safe(&ports),
            toml_str(&l.addr.ip().to_string()),
            l.addr.port()
        );
    }
    for s in subsystems {
        let _ = write!(
            t,
            "\n[[subsystem]]\nnqn = {}\nallow_any_host = {}\n",
            toml_str(&s.nqn),
            s.allow_any_host
        );
        if !s.allow_any_host || !s.hosts.is_empty() {
            match s.hosts.as_slice() {
                [] => t.push_str("hosts = []\n"),
                [h] => {
                    let _ = writeln!(t, "hosts = [{}]", toml_str(h));
                }
                hs => {
                    t.push_str("hosts = [\n");
                    for h in hs {
                        let _ = writeln!(t, "    {},", toml_str(h));
                    }
                    t.push_str("]\n");
                }
            }
        }
        if let Some(sn) = &s.serial {
            let _ = writeln!(t, "serial = {}", toml_str(sn));
        }
        if let Some(mn) = &s.model {
            let _ = writeln!(t, "model = {}", toml_str(mn));
        }
        for n in &s.namespaces {
            let path = n.path.as_deref().map(toml_str);
            if n.enabled {
                let _ = write!(
                    t,
                    "\n[[subsystem.namespace]]\nnsid = {}\npath = {}\n",
                    n.nsid,
                    path.unwrap_or_default()
                );
            } else {
                let _ = write!(
                    t,
                    "\n# Disabled in nvmet; uncomment to export it:\n\
                     # [[subsystem.namespace]]\n# nsid = {}\n",
                    n.nsid
                );
                match path {
                    Some(p) => {
                        let _ = writeln!(t, "# path = {p}");
                    }
                    None => t.push_str("# path = \"\"  # nvmet had no device path\n"),
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendConfig, TargetConfig};
    use std::path::PathBuf;

    const H1: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31";
    const H2: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32";
    const OPEN: &str = "nqn.2026-01.io.example:open";
    const RESTRICTED: &str = "nqn.2026-01.io.example:restricted";
    const STAGING: &str = "nqn.2026-01.io.example:staging";

    /// What `nvmetcli save` writes on a recent kernel (Python 3
    /// `json.dumps(sort_keys=True, indent=2)` plus a newline): two rdma ports
    /// (IPv4 and IPv6), a tcp port, an open subsystem with a brd and a file
    /// namespace, a restricted one with two hosts (namespace in ANA group 2,
    /// with an NGUID) and one, linked to the tcp port only, with a disabled
    /// namespace.
    const SAMPLE: &str = r#"{
  "discovery": {
    "nqn": "nqn.2014-08.org.nvmexpress.discovery"
  },
  "hosts": [
    {
      "dhchap": {
        "ctrl_key": "",
        "dhgroup": "null",
        "hash": "hmac(sha256)",
        "key": ""
      },
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31"
    },
    {
      "dhchap": {
        "ctrl_key": "",
        "dhgroup": "null",
        "hash": "hmac(sha256)",
        "key": ""
      },
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32"
    }
  ],
  "ports": [
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "10.0.2.15",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "rdma",
        "tsas": "connected"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        },
        {
          "ana": {
            "state": "non-optimized"
          },
          "grpid": 2
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 1,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:open",
        "nqn.2026-01.io.example:restricted"
      ]
    },
    {
      "addr": {
        "adrfam": "ipv6",
        "traddr": "fd00:0:0:2::15",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "rdma",
        "tsas": "connected"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 2,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:open"
      ]
    },
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "10.0.2.15",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "tcp",
        "tsas": "none"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 3,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:staging"
      ]
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": [],
      "attr": {
        "allow_any_host": "1",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "a1b2c3d4e5f60718",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/dev/ram0",
            "uuid": "1f0ee7a2-5b35-4a8e-9e36-0c1b1c1d9a01"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        },
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/srv/nvmet/disk2.img",
            "uuid": "9c4b0c55-8d0a-4d7e-b0b4-54a1f0d2c7e2"
          },
          "enable": 1,
          "nsid": 2,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:open"
    },
    {
      "allowed_hosts": [
        "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31",
        "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32"
      ],
      "attr": {
        "allow_any_host": "0",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "0123456789abcdef",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "2"
          },
          "ana_grpid": 2,
          "device": {
            "nguid": "2c7f1e4a-09b3-4d56-8e1f-3a5b7c9d0e14",
            "path": "/dev/nvme1n1",
            "uuid": "5d3e2f10-7c1b-4f3a-8d2e-6b9a0c4e1f03"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:restricted"
    },
    {
      "allowed_hosts": [],
      "attr": {
        "allow_any_host": "1",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "5e6f708192a3b4c5",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/dev/ram1",
            "uuid": "0b8d6c2e-3f41-4a7b-9c5d-7e8f9a0b1c04"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        },
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/srv/nvmet/old.img",
            "uuid": "e2d4f6a8-1b3c-4d5e-8f70-9a1b2c3d4e05"
          },
          "enable": 0,
          "nsid": 5,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:staging"
    }
  ]
}
"#;

    /// The shape older nvmetcli releases wrote (Python 2 `json.dumps` with
    /// `indent=2` leaves a space before each newline), as in the examples
    /// shipped with nvmetcli: no `param`, `ana_groups` or `discovery`.
    const LEGACY: &str = "{\n  \"hosts\": [\n    {\n      \"nqn\": \"nqn.2026-01.io.example:h1\"\n    }\n  ], \n  \"ports\": [\n    {\n      \"addr\": {\n        \"adrfam\": \"ipv4\", \n        \"traddr\": \"192.0.2.7\", \n        \"treq\": \"not specified\", \n        \"trsvcid\": \"4420\", \n        \"trtype\": \"rdma\"\n      }, \n      \"portid\": 2, \n      \"referrals\": [], \n      \"subsystems\": [\n        \"nqn.2026-01.io.example:legacy\"\n      ]\n    }\n  ], \n  \"subsystems\": [\n    {\n      \"allowed_hosts\": [\n        \"nqn.2026-01.io.example:h1\"\n      ], \n      \"attr\": {\n        \"allow_any_host\": \"0\"\n      }, \n      \"namespaces\": [\n        {\n          \"device\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\", \n            \"path\": \"/dev/nvme0n1\"\n          }, \n          \"enable\": 1, \n          \"nsid\": 1\n        }\n      ], \n      \"nqn\": \"nqn.2026-01.io.example:legacy\"\n    }\n  ]\n}\n";

    fn has_note(imp: &Import, parts: &[&str]) -> bool {
        imp.notes
            .iter()
            .any(|n| parts.iter().all(|p| n.contains(p)))
    }

    fn assert_note(imp: &Import, parts: &[&str]) {
        assert!(
            has_note(imp, parts),
            "no note contains {parts:?}; notes:\n{}",
            imp.notes.join("\n")
        );
    }

    fn file(path: &str) -> BackendConfig {
        BackendConfig::File {
            path: PathBuf::from(path),
        }
    }

    #[test]
    fn sample_has_the_exact_shape_of_nvmetcli_save() {
        // nvmetcli: f.write(json.dumps(self.dump(), sort_keys=True, indent=2)); f.write("\n").
        // serde_json's pretty printer with a sorted map writes the same bytes.
        let v: Value = serde_json::from_str(SAMPLE).unwrap();
        assert_eq!(serde_json::to_string_pretty(&v).unwrap() + "\n", SAMPLE);
    }

    #[test]
    fn realistic_sample_converts_and_validates() {
        let imp = import(SAMPLE, "/etc/nvmet/config.json").unwrap();
        let t = &imp.toml;

        // Header and notes.
        assert!(t.starts_with("# nvmf-target configuration imported from the nvmet"));
        assert!(t.contains("/etc/nvmet/config.json"));
        assert!(t.contains("`nvmf-target import-nvmetcli`"));
        let note_lines = t.lines().filter(|l| l.starts_with("# NOTE: ")).count();
        assert_eq!(note_lines, imp.notes.len(), "{t}");
        let first_section = t.find("[[listener]]").unwrap();
        assert!(t.rfind("# NOTE:").unwrap() < first_section);

        // Listeners: the two rdma ports, not the tcp one.
        assert_eq!(t.matches("[[listener]]").count(), 2, "{t}");
        assert!(t.contains(
            "# nvmet port 1\n[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n"
        ));
        assert!(t.contains("address = \"fd00:0:0:2::15\"\nport = 4420\n"));

        // Subsystems.
        assert!(t.contains(&format!(
            "[[subsystem]]\nnqn = \"{OPEN}\"\nallow_any_host = true\nserial = \"a1b2c3d4e5f60718\"\nmodel = \"Linux\"\n"
        )));
        assert!(t.contains(&format!(
            "[[subsystem]]\nnqn = \"{RESTRICTED}\"\nallow_any_host = false\nhosts = [\n    \"{H1}\",\n    \"{H2}\",\n]\n"
        )));
        assert!(t.contains("[[subsystem.namespace]]\nnsid = 1\npath = \"/dev/ram0\"\n"));
        assert!(t.contains("[[subsystem.namespace]]\nnsid = 2\npath = \"/srv/nvmet/disk2.img\"\n"));
        assert!(
            t.contains("# [[subsystem.namespace]]\n# nsid = 5\n# path = \"/srv/nvmet/old.img\"\n")
        );
        // Nothing unsupported leaks into the sections.
        for word in ["uuid =", "nguid", "ana", "tcp\"", "firmware", "version ="] {
            let body = &t[first_section..];
            assert!(!body.contains(word), "'{word}' in\n{body}");
        }

        // Notes.
        assert_note(&imp, &["port 3", "transport 'tcp'", "skipped"]);
        assert_note(&imp, &["port 1", "ANA groups", "group 2 'non-optimized'"]);
        assert_note(
            &imp,
            &[
                "different subsystems",
                "port 1:",
                "port 2:",
                "every listener",
            ],
        );
        assert_note(&imp, &[STAGING, "linked only to port 3 (tcp)"]);
        assert_note(
            &imp,
            &[STAGING, "namespace 5", "/srv/nvmet/old.img", "disabled"],
        );
        assert_note(
            &imp,
            &[
                RESTRICTED,
                "namespace 1",
                "device.nguid 2c7f1e4a-09b3-4d56-8e1f-3a5b7c9d0e14",
                "device.uuid 5d3e2f10-7c1b-4f3a-8d2e-6b9a0c4e1f03",
                "ANA group 2",
                "new ones",
            ],
        );
        assert_note(&imp, &[OPEN, "namespace 1", "device.uuid 1f0ee7a2"]);
        // A zero NGUID is "unset", default attributes, the firmware revision,
        // the standard discovery NQN and default port params are not noted.
        assert!(!imp.notes.iter().any(|n| n.contains("nguid 0000")));
        for quiet in [
            "cntlid",
            "version",
            "firmware",
            "qid_max",
            "param.",
            "discovery NQN",
        ] {
            assert!(
                !imp.notes.iter().any(|n| n.contains(quiet)),
                "'{quiet}' noted: {:?}",
                imp.notes
            );
        }
        assert_eq!(imp.notes.len(), 9, "{:#?}", imp.notes);

        // And our target accepts it.
        let c = TargetConfig::from_toml(t, "import").unwrap();
        let addrs: Vec<String> = c.listeners.iter().map(|l| l.addr.to_string()).collect();
        assert_eq!(addrs, ["10.0.2.15:4420", "[fd00:0:0:2::15]:4420"]);
        let nqns: Vec<&str> = c.subsystems.iter().map(|s| s.nqn.as_str()).collect();
        assert_eq!(nqns, [OPEN, RESTRICTED, STAGING]);
        let open = &c.subsystems[0];
        assert!(open.allow_any_host);
        assert!(open.hosts.is_empty());
        assert_eq!(open.serial.as_deref(), Some("a1b2c3d4e5f60718"));
        assert_eq!(open.model, "Linux");
        let ns: Vec<(u32, &BackendConfig)> = open
            .namespaces
            .iter()
            .map(|n| (n.nsid, &n.backend))
            .collect();
        assert_eq!(
            ns,
            [(1, &file("/dev/ram0")), (2, &file("/srv/nvmet/disk2.img"))]
        );
        assert!(open
            .namespaces
            .iter()
            .all(|n| n.block_size.is_none() && !n.readonly));
        let restricted = &c.subsystems[1];
        assert!(!restricted.allow_any_host);
        assert_eq!(restricted.hosts, [H1, H2]);
        assert_eq!(restricted.serial.as_deref(), Some("0123456789abcdef"));
        assert_eq!(restricted.namespaces.len(), 1);
        assert_eq!(restricted.namespaces[0].backend, file("/dev/nvme1n1"));
        let staging = &c.subsystems[2];
        assert_eq!(
            staging.namespaces.len(),
            1,
            "the disabled namespace is commented out"
        );
        assert_eq!(staging.namespaces[0].nsid, 1);
        assert_eq!(staging.namespaces[0].backend, file("/dev/ram1"));
    }

    #[test]
    fn legacy_python2_dump_converts() {
        let imp = import(LEGACY, "old.json").unwrap();
        assert!(imp.notes.is_empty(), "{:?}", imp.notes);
        assert!(!imp.toml.contains("# NOTE:"));
        let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
        assert_eq!(c.listeners[0].addr, "192.0.2.7:4420".parse().unwrap());
        assert_eq!(c.subsystems[0].nqn, "nqn.2026-01.io.example:legacy");
        assert!(!c.subsystems[0].allow_any_host);
        assert_eq!(c.subsystems[0].hosts, ["nqn.2026-01.io.example:h1"]);
        assert_eq!(c.subsystems[0].serial, None);
        assert_eq!(c.subsystems[0].model, crate::config::DEFAULT_MODEL);
        assert_eq!(c.subsystems[0].namespaces[0].backend, file("/dev/nvme0n1"));
    }

    #[test]
    fn malformed_json_reports_line_and_column() {
        let e = import(
            "{\n  \"ports\": [\n    {\"portid\": 1,}\n  ]\n}\n",
            "bad.json",
        )
        .unwrap_err();
        match &e {
            ImportError::Json { line, column, .. } => {
                assert_eq!(*line, 3);
                assert!(*column > 0);
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.starts_with("bad.json: invalid JSON at line 3, column "),
            "{msg}"
        );
        assert!(
            !msg.contains(" at line 3 column "),
            "position given twice: {msg}"
        );

        let msg = import("", "empty.json").unwrap_err().to_string();
        assert!(msg.contains("empty.json: invalid JSON at line 1"), "{msg}");
        let msg = import("{} trailing", "t.json").unwrap_err().to_string();
        assert!(msg.contains("line 1"), "{msg}");
    }

    /// Replaces `from` (which must occur) in SAMPLE and imports the result.
    fn import_edited(from: &str, to: &str) -> Result<Import, ImportError> {
        assert!(SAMPLE.contains(from), "{from}");
        import(&SAMPLE.replacen(from, to, 1), "c.json")
    }

    fn bad_edit(from: &str, to: &str, expect: &str) {
        let e = import_edited(from, to).unwrap_err();
        assert!(matches!(e, ImportError::Field { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains(expect), "'{msg}' does not contain '{expect}'");
    }

    #[test]
    fn wrong_types_report_the_json_path() {
        let msg = import("[]", "a.json").unwrap_err().to_string();
        assert_eq!(msg, "a.json: top level: expected an object, found an array");
        let msg = import("{\"ports\": {}}", "a.json").unwrap_err().to_string();
        assert_eq!(msg, "a.json: ports: expected an array, found an object");
        bad_edit(
            "\"path\": \"/srv/nvmet/disk2.img\"",
            "\"path\": 7",
            "c.json: subsystems[0].namespaces[1].device.path: expected a string, found a number",
        );
        bad_edit(
            "\"nsid\": 2,",
            "\"nsid\": \"two\",",
            "subsystems[0].namespaces[1].nsid: 'two' is not a non-negative integer",
        );
        bad_edit(
            "\"nsid\": 2,",
            "\"nsid\": -2,",
            "subsystems[0].namespaces[1].nsid: -2 is not a non-negative integer",
        );
        bad_edit(
            "\"allow_any_host\": \"0\"",
            "\"allow_any_host\": \"maybe\"",
            "subsystems[1].attr.allow_any_host: 'maybe' is not 0 or 1",
        );
        bad_edit(
            &format!("\"{H2}\"\n      ],"),
            "42\n      ],",
            "subsystems[1].allowed_hosts[1]: expected a string, found a number",
        );
        bad_edit(
            "\"trsvcid\": \"4420\"",
            "\"trsvcid\": [4420]",
            "ports[0].addr.trsvcid: expected a string, found an array",
        );
        bad_edit(
            "\"trtype\": \"tcp\"",
            "\"trtype\": null",
            "ports[2].addr.trtype: is required",
        );
        bad_edit(
            "\"ana_groups\": [",
            "\"ana_groups\": \"none\", \"x\": [",
            "ports[0].ana_groups: expected an array, found a string",
        );
        bad_edit(
            "\"device\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\",\n            \"path\": \"/dev/ram0\",",
            "\"device\": [], \"x\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\",\n            \"path\": \"/dev/ram0\",",
            "subsystems[0].namespaces[0].device: expected an object, found an array",
        );
        bad_edit(
            "\"nqn\": \"nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034",
            "\"nqn\": false, \"x\": \"",
            "hosts[0].nqn: expected a string, found a boolean",
        );
    }

    #[test]
    fn missing_required_fields_report_the_json_path() {
        bad_edit(
            "\"path\": \"/srv/nvmet/disk2.img\",",
            "",
            "c.json: subsystems[0].namespaces[1].device.path: is required (the namespace is enabled)",
        );
        bad_edit(
            "\"path\": \"/srv/nvmet/disk2.img\",",
            "\"path\": \"\",",
            "subsystems[0].namespaces[1].device.path: is empty",
        );
        bad_edit(
            "\"nsid\": 2,",
            "",
            "subsystems[0].namespaces[1].nsid: is required",
        );
        bad_edit(
            &format!("\"nqn\": \"{RESTRICTED}\"\n"),
            "\"x\": 1\n",
            "subsystems[1].nqn: is required",
        );
        // A disabled namespace needs no path.
        let imp = import_edited("\"path\": \"/srv/nvmet/old.img\",", "\"path\": \"\",").unwrap();
        assert!(imp
            .toml
            .contains("# nsid = 5\n# path = \"\"  # nvmet had no device path\n"));
        TargetConfig::from_toml(&imp.toml, "import").unwrap();
    }

    #[test]
    fn strings_needing_toml_escaping_round_trip() {
        let nqn = "nqn.2026-01.io.example:q\"uo\\te'd#[x]";
        let path = "/srv/img/ünï \"q\"\\b\ttab\nnl\u{1}.img";
        let model = "Model \"7\" \\x";
        let json = serde_json::json!({
            "ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1",
                "trsvcid": "4420"}, "subsystems": [nqn]}],
            "subsystems": [{"nqn": nqn, "attr": {"allow_any_host": "1", "model": model},
                "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": path}}]}],
        })
        .to_string();
        let imp = import(&json, "/tmp/we\"ird\nname.json").unwrap();
        assert!(imp.notes.is_empty(), "{:?}", imp.notes);
        // The newline of the source name does not end the comment.
        assert!(
            imp.toml.contains("/tmp/we\"ird\\nname.json"),
            "{}",
            imp.toml
        );
        assert!(imp
            .toml
            .contains("path = \"/srv/img/ünï \\\"q\\\"\\\\b\\ttab\\nnl\\u0001.img\""));
        let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
        assert_eq!(c.subsystems[0].nqn, nqn);
        assert_eq!(c.subsystems[0].model, model);
        assert_eq!(c.subsystems[0].namespaces[0].backend, file(path));

        assert_eq!(toml_str("plain"), "\"plain\"");
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(toml_str("\r\u{8}\u{c}\u{7f}"), "\"\\r\\b\\f\\u007F\"");
    }

    #[test]
    fn ports_duplicates_empty_and_unusable() {
        let json = serde_json::json!({
            "ports": [
                {"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"},
                 "subsystems": ["nqn.2026-01.io.example:a"]},
                {"portid": 2, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": 4420},
                 "subsystems": ["nqn.2026-01.io.example:a"]},
                {"portid": 3, "addr": {"trtype": "rdma", "traddr": "2001:db8::1"}, "subsystems": []},
                {"portid": 4, "addr": {"trtype": "rdma", "adrfam": "ib", "traddr": "fe80:0000:0000:0000:0002:c903:0003:1a2b%ib0", "trsvcid": "4420"}},
                {"portid": 5, "addr": {"trtype": "rdma", "traddr": "192.0.2.2", "trsvcid": "70000"}},
                {"portid": 6, "addr": {"trtype": "loop", "traddr": "", "trsvcid": ""}},
                {"addr": {"trtype": "rdma", "traddr": "", "trsvcid": ""}},
                {"portid": 8, "addr": {"trtype": "rdma", "traddr": "192.0.2.3", "trsvcid": "4420"},
                 "subsystems": ["nqn.2026-01.io.example:gone"]},
            ],
            "subsystems": [{"nqn": "nqn.2026-01.io.example:a", "attr": {"allow_any_host": "1"},
                "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/ram0"}}]}],
        })
        .to_string();
        let imp = import(&json, "p.json").unwrap();
        assert_eq!(imp.toml.matches("[[listener]]").count(), 3, "{}", imp.toml);
        assert!(imp.toml.contains("# nvmet port 1, port 2\n[[listener]]"));
        assert_note(
            &imp,
            &["port 2", "192.0.2.1:4420", "port 1", "one listener"],
        );
        assert_note(&imp, &["port 3", "no trsvcid", "4420"]);
        assert_note(&imp, &["port 3", "links no subsystem", "still imported"]);
        assert_note(&imp, &["port 4", "not an IPv4 or IPv6 address", "skipped"]);
        assert_note(&imp, &["port 5", "'70000'", "skipped"]);
        assert_note(&imp, &["port 6", "'loop'", "skipped"]);
        assert_note(&imp, &["ports[6]", "without an address"]);
        assert_note(
            &imp,
            &["port 8", "nqn.2026-01.io.example:gone", "not defined"],
        );
        assert_note(&imp, &["different subsystems"]);
        let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
        let addrs: Vec<String> = c.listeners.iter().map(|l| l.addr.to_string()).collect();
        assert_eq!(
            addrs,
            ["192.0.2.1:4420", "[2001:db8::1]:4420", "192.0.2.3:4420"]
        );
    }

    #[test]
    fn unsupported_features_are_noted() {
        let json = serde_json::json!({
            "discovery": {"nqn": "nqn.2026-01.io.example:disc"},
            "hosts": [{"nqn": "nqn.2026-01.io.example:h", "dhchap": {
                "key": "DHHC-1:00:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0:", "ctrl_key": "",
                "hash": "hmac(sha256)", "dhgroup": "null"}}],
            "ports": [{"portid": 1,
                "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420",
                         "treq": "required"},
                "param": {"inline_data_size": "16384", "pi_enable": "1", "max_queue_size": "128"},
                "referrals": [{"name": "r1", "addr": {"trtype": "rdma", "traddr": "192.0.2.9"}}],
                "subsystems": ["nqn.2026-01.io.example:pt", "nqn.2026-01.io.example:x"]}],
            "subsystems": [
                {"nqn": "nqn.2026-01.io.example:pt", "attr": {"allow_any_host": "1"},
                 "passthru": [{"device": {"path": "/dev/nvme0"}, "enable": 1,
                               "admin_timeout": 0, "clear_ids": 1, "io_timeout": 0}]},
                {"nqn": "nqn.2026-01.io.example:x",
                 "attr": {"allow_any_host": "0", "cntlid_min": "5", "version": "2.0",
                          "pi_enable": "1"},
                 "allowed_hosts": ["nqn.2026-01.io.example:h"],
                 "namespaces": [
                     {"nsid": 3, "enable": 1, "device": {"path": "/dev/sdb", "p2pmem": "auto"},
                      "resv": {"enable": "1"}, "buffered_io": "1"},
                     {"nsid": 2000, "enable": 1, "device": {"path": "/dev/sdc"}},
                     {"nsid": 4, "device": {"path": "/dev/sdd"}},
                 ]},
                {"nqn": "nqn.2014-08.org.nvmexpress.discovery"},
            ],
        })
        .to_string();
        let imp = import(&json, "u.json").unwrap();
        assert_note(&imp, &["discovery NQN", "nqn.2026-01.io.example:disc"]);
        assert_note(
            &imp,
            &["nqn.2026-01.io.example:h", "DH-HMAC-CHAP", "dhchap.key"],
        );
        assert!(
            !imp.notes.iter().any(|n| n.contains("DHHC-1")) && !imp.toml.contains("DHHC-1"),
            "secret leaked"
        );
        assert_note(&imp, &["port 1", "treq 'required'"]);
        assert_note(
            &imp,
            &["port 1", "param.inline_data_size = '16384'", "8192"],
        );
        assert_note(&imp, &["port 1", "param.pi_enable = '1'"]);
        assert!(!has_note(&imp, &["max_queue_size"]), "128 is our value");
        assert_note(&imp, &["port 1", "1 discovery referral(s)"]);
        assert_note(&imp, &[":pt'", "passthru", "/dev/nvme0"]);
        assert_note(&imp, &[":pt'", "exports no (enabled) namespace"]);
        assert_note(&imp, &[":x'", "attr.cntlid_min = '5'"]);
        assert_note(&imp, &[":x'", "attr.version = '2.0'"]);
        assert_note(
            &imp,
            &[":x'", "attr.pi_enable = '1'", "protection information"],
        );
        assert_note(
            &imp,
            &[
                "namespace 3",
                "device.p2pmem auto",
                "reservations",
                "buffered_io 1",
            ],
        );
        assert!(
            !has_note(&imp, &["namespace 3", "new ones"]),
            "no NGUID/UUID"
        );
        assert_note(&imp, &["namespace 2000", "out of nvmf-target's range"]);
        assert_note(&imp, &["namespace 4", "/dev/sdd", "no 'enable'"]);
        assert_note(&imp, &["discovery subsystem", "skipped"]);
        assert!(!imp
            .toml
            .contains("nqn = \"nqn.2014-08.org.nvmexpress.discovery\""));
        assert!(imp.toml.contains("# nsid = 4\n# path = \"/dev/sdd\"\n"));
        // nsid 2000 is emitted as it was and validation names it.
        let e = TargetConfig::from_toml(&imp.toml, "import")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("subsystem[1].namespace[1].nsid: 2000 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn minimal_and_loosely_typed_input_is_accepted() {
        let json = r#"{"ports": [{"addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": 4421},
            "subsystems": ["nqn.2026-01.io.example:m"]}],
          "subsystems": [{"nqn": "nqn.2026-01.io.example:m",
            "attr": {"allow_any_host": true, "serial": 1234},
            "namespaces": [{"nsid": "7", "enable": "1", "device": {"path": "/dev/ram3", "uuid": null}},
                           {"nsid": 2, "enable": true, "device": {"path": "/dev/ram2"}}]}]}"#;
        let imp = import(json, "m.json").unwrap();
        assert!(imp.notes.is_empty(), "{:?}", imp.notes);
        let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
        assert_eq!(c.listeners[0].addr, "192.0.2.1:4421".parse().unwrap());
        let s = &c.subsystems[0];
        assert!(s.allow_any_host);
        assert_eq!(s.serial.as_deref(), Some("1234"));
        let nsids: Vec<u32> = s.namespaces.iter().map(|n| n.nsid).collect();
        assert_eq!(nsids, [2, 7], "sorted by nsid");
    }

    #[test]
    fn empty_configuration_is_converted_and_left_to_validation() {
        let imp = import("{}", "e.json").unwrap();
        assert_note(&imp, &["no usable rdma port"]);
        assert_note(&imp, &["defines no subsystem"]);
        assert!(imp.toml.contains("# [[listener]]\n# transport = \"rdma\""));
        assert!(!imp.toml.contains("\n[[listener]]"));
        let e = TargetConfig::from_toml(&imp.toml, "import")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listener: at least one"), "{e}");

        // Subsystems but no rdma port: one note, not one per subsystem.
        let imp = import(LEGACY.replace("\"rdma\"", "\"tcp\"").as_str(), "t.json").unwrap();
        assert_note(&imp, &["transport 'tcp'"]);
        assert_note(&imp, &["no usable rdma port"]);
        assert!(!has_note(&imp, &["linked only"]));
    }

    #[test]
    fn long_notes_are_wrapped_as_comments() {
        let mut out = String::new();
        let text = "word ".repeat(60);
        push_comment(&mut out, "# NOTE:", text.trim());
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 2);
        assert!(lines[0].starts_with("# NOTE: word"));
        let cont = format!("#{}word", " ".repeat(7));
        assert!(lines[1..].iter().all(|l| l.starts_with(&cont)), "{out}");
        assert!(lines.iter().all(|l| l.len() <= 100));
        assert_eq!(out.matches("word").count(), 60);
    }
}
