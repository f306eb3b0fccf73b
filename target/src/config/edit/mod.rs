//! Live changes to the configuration file's text, sans-IO: a subsystem, a
//! namespace or a host added or removed, written into the TOML document so
//! that its comments, order and layout stay as the administrator left them
//! (`toml_edit`). The result is only text; the daemon validates it as a
//! whole file and applies it through the reload path.
//!
//! Each edit checks what it can name precisely (a subsystem that does not
//! exist, an nsid in use, a host listed twice); everything else (an NQN's
//! syntax, a path that does not exist, a subsystem no host may reach) is the
//! validation's, with the same words as for a file edited by hand.

use serde::{Deserialize, Serialize};
use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

mod hosts;
mod listener;
mod namespace;

pub use hosts::{without_secrets, HIDDEN};

/// The highest nsid the target serves (as the validation's limit).
const MAX_NSID: u32 = 1024;
/// The wildcard host of `host add`/`host del`: any host (`allow_any_host`).
pub const ANY_HOST: &str = "*";

/// `subsystem add`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemAdd {
    /// Its NQN.
    pub nqn: String,
    /// Any host may connect.
    #[serde(default)]
    pub allow_any_host: bool,
    /// Hosts that may connect.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Serial number (default: derived from the NQN).
    #[serde(default)]
    pub serial: Option<String>,
    /// Model number.
    #[serde(default)]
    pub model: Option<String>,
}

/// A subsystem, by NQN (`subsystem del`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemRef {
    /// Its NQN.
    pub nqn: String,
}

/// `namespace add`: exactly one of `path`, `rbd_pool` + `rbd_image` and
/// `null_size` names the store.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceAdd {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// Its nsid (default: the lowest free one).
    #[serde(default)]
    pub nsid: Option<u32>,
    /// A block device or a regular file.
    #[serde(default)]
    pub path: Option<String>,
    /// A Ceph pool (with `rbd_image`).
    #[serde(default)]
    pub rbd_pool: Option<String>,
    /// An RBD image in `rbd_pool`.
    #[serde(default)]
    pub rbd_image: Option<String>,
    /// A null namespace of this size (`1G`, `512M`, bytes).
    #[serde(default)]
    pub null_size: Option<String>,
    /// Refuse writes.
    #[serde(default)]
    pub read_only: bool,
    /// Its ANA group (default 1).
    #[serde(default)]
    pub ana_group: Option<u32>,
    /// The hosts that see it (`None`: every host of the subsystem; empty:
    /// none until one is attached).
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Its NGUID (default: derived, then kept).
    #[serde(default)]
    pub nguid: Option<String>,
    /// Its UUID (default: derived, then kept).
    #[serde(default)]
    pub uuid: Option<String>,
    /// Its EUI-64 (default: none).
    #[serde(default)]
    pub eui64: Option<String>,
}

/// A namespace, by subsystem and nsid (`namespace del`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRef {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The nsid.
    pub nsid: u32,
}

/// A namespace's new size (`namespace resize`); without one, its store's
/// size is read again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceResize {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The nsid.
    pub nsid: u32,
    /// The new size (`10G`, bytes); a namespace only grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
}

/// A host a namespace is shown to or hidden from (`namespace
/// attach`/`detach`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceHost {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The nsid.
    pub nsid: u32,
    /// The host's NQN.
    pub host_nqn: String,
}

/// QoS caps of a namespace, or of one host on it (`namespace qos`): the
/// caps given replace those set (0: no cap), the others stay.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQos {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The nsid.
    pub nsid: u32,
    /// The host whose caps these are (none: the namespace's, all hosts
    /// together).
    #[serde(default)]
    pub host_nqn: Option<String>,
    /// Reads and writes per second.
    #[serde(default)]
    pub rw_iops: Option<u64>,
    /// MB (2^20 bytes) read and written per second.
    #[serde(default)]
    pub rw_mbps: Option<u64>,
    /// MB read per second.
    #[serde(default)]
    pub r_mbps: Option<u64>,
    /// MB written per second.
    #[serde(default)]
    pub w_mbps: Option<u64>,
}

impl NamespaceQos {
    fn given(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("rw_iops", self.rw_iops),
            ("rw_mbps", self.rw_mbps),
            ("r_mbps", self.r_mbps),
            ("w_mbps", self.w_mbps),
        ]
    }
}

/// A host of a subsystem (`host add`/`host del`); [`ANY_HOST`] is any host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRef {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The host's NQN, or `*`.
    pub host_nqn: String,
}

/// `host add`: a host of a subsystem, with its DH-HMAC-CHAP keys and TLS PSK if given
/// (they go to its `[[host]]` entry, made if there is none).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostAdd {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The host's NQN, or `*`.
    pub host_nqn: String,
    /// The secret the host proves it holds (`DHHC-1:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<String>,
    /// The secret this target proves it holds, when the host asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<String>,
    /// The host's TLS pre-shared key (`NVMeTLSkey-1:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
}

/// `host key set`: a host's DH-HMAC-CHAP keys and TLS PSK; those given
/// replace those set, the others stay.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostKey {
    /// The host's NQN.
    pub host_nqn: String,
    /// The secret the host proves it holds (`DHHC-1:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<String>,
    /// The secret this target proves it holds, when the host asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<String>,
    /// The host's TLS pre-shared key (`NVMeTLSkey-1:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
}

/// A host by NQN (`host key del`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostNqn {
    /// The host's NQN.
    pub host_nqn: String,
}

/// `listener ana`: the state of an ANA group at the listeners of an address
/// (all listeners without one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerAna {
    /// `ADDRESS:PORT` (every transport there); none: every listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// The ANA group.
    pub group: u32,
    /// `optimized`, `non-optimized`, `inaccessible`.
    pub state: String,
}

/// A listener (`listener add|del`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerRef {
    /// `rdma` or `tcp` (default `rdma`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The IP address.
    pub address: String,
    /// The port (default 4420).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// TLS (`none`, `optional`, `required`; NVMe/TCP; `listener add`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<String>,
}

/// A subsystem and a listener (`subsystem listener add|del`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemListener {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The listener: `[rdma:|tcp:]ADDRESS:PORT` (without a transport: every
    /// listener at the address).
    pub listener: String,
}

/// A change to the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Add a subsystem.
    SubsystemAdd(SubsystemAdd),
    /// Remove a subsystem and its namespaces.
    SubsystemDel(SubsystemRef),
    /// Add a namespace to a subsystem.
    NamespaceAdd(NamespaceAdd),
    /// Remove a namespace.
    NamespaceDel(NamespaceRef),
    /// Show a namespace to a host.
    NamespaceAttach(NamespaceHost),
    /// Hide a namespace from a host.
    NamespaceDetach(NamespaceHost),
    /// Set a namespace's QoS caps, or a host's on it.
    NamespaceQos(NamespaceQos),
    /// Set a null namespace's size.
    NamespaceResize(NamespaceResize),
    /// Let a host connect to a subsystem (with its keys).
    HostAdd(HostAdd),
    /// Stop a host connecting to a subsystem.
    HostDel(HostRef),
    /// Set a host's keys.
    HostKeySet(HostKey),
    /// Remove a host's keys.
    HostKeyDel(HostNqn),
    /// Set an ANA group's state at listeners.
    ListenerAna(ListenerAna),
    /// Add a listener.
    ListenerAdd(ListenerRef),
    /// Remove a listener.
    ListenerDel(ListenerRef),
    /// Put a subsystem on a listener.
    SubsystemListenerAdd(SubsystemListener),
    /// Take a subsystem off a listener.
    SubsystemListenerDel(SubsystemListener),
}

/// The edited text and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The whole new file.
    pub text: String,
    /// What changed, in a few words ("namespace 3 added to nqn...").
    pub summary: String,
    /// The nsid a namespace was added under.
    pub nsid: Option<u32>,
}

/// Why an edit cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file is not TOML this edit can change.
    #[error("the configuration file cannot be edited: {0}")]
    Unreadable(String),
    /// No subsystem has the NQN.
    #[error("no subsystem '{0}' in the configuration")]
    NoSubsystem(String),
    /// A subsystem has the NQN already.
    #[error("subsystem '{0}' exists already")]
    SubsystemExists(String),
    /// The nsid is taken.
    #[error("subsystem '{nqn}' has a namespace {nsid} already")]
    NsidInUse {
        /// The subsystem.
        nqn: String,
        /// The nsid.
        nsid: u32,
    },
    /// The subsystem has no such namespace.
    #[error("subsystem '{nqn}' has no namespace {nsid}")]
    NoNamespace {
        /// The subsystem.
        nqn: String,
        /// The nsid.
        nsid: u32,
    },
    /// Every nsid is taken.
    #[error("subsystem '{0}' has no free nsid (1..={MAX_NSID})")]
    NoFreeNsid(String),
    /// The request is inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// The host may connect already.
    #[error("host '{host}' may connect to '{nqn}' already")]
    HostExists {
        /// The subsystem.
        nqn: String,
        /// The host.
        host: String,
    },
    /// The host is not listed.
    #[error("host '{host}' is not listed for '{nqn}'")]
    NoHost {
        /// The subsystem.
        nqn: String,
        /// The host.
        host: String,
    },
    /// The host's key is read from a file of its own.
    #[error("the {field} of host '{host}' is read from {path} ({field}_file): write the new key there and reload (systemctl reload nvmf-target)")]
    KeyInFile {
        /// The host.
        host: String,
        /// `dhchap_key`, `dhchap_ctrl_key` or `tls_key`.
        field: &'static str,
        /// The file.
        path: String,
    },
    /// The host has no key to remove.
    #[error("host '{0}' has no key in the configuration")]
    NoKey(String),
    /// No listener at the address.
    #[error("no listener at {0}")]
    NoListener(String),
    /// It is so already: nothing to change.
    #[error("{0}")]
    AlreadySo(String),
}

/// Makes `edit` in the configuration `text`.
pub fn apply(text: &str, edit: &Edit) -> Result<Edited, EditError> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Unreadable(e.to_string()))?;
    let (summary, nsid) = match edit {
        Edit::SubsystemAdd(a) => (subsystem_add(&mut doc, a)?, None),
        Edit::SubsystemDel(r) => {
            let subs = subsystems(&mut doc)?;
            let i = find(subs, &r.nqn)?;
            subs.remove(i);
            if subs.is_empty() {
                doc.remove("subsystem");
            }
            (format!("subsystem {} removed", r.nqn), None)
        }
        Edit::NamespaceAdd(a) => {
            let nsid = namespace::namespace_add(&mut doc, a)?;
            (
                format!("namespace {nsid} added to {}", a.subsystem),
                Some(nsid),
            )
        }
        Edit::NamespaceDel(r) => {
            let sub = subsystem(&mut doc, &r.subsystem)?;
            let nss = namespaces(sub, &r.subsystem)?;
            let i = nsids(nss)
                .iter()
                .position(|&n| n == r.nsid)
                .ok_or_else(|| EditError::NoNamespace {
                    nqn: r.subsystem.clone(),
                    nsid: r.nsid,
                })?;
            // The entries after it keep their numbers: a namespace without an
            // nsid key is numbered by its position.
            pin_nsids(nss);
            nss.remove(i);
            if nss.is_empty() {
                sub.remove("namespace");
            }
            (
                format!("namespace {} removed from {}", r.nsid, r.subsystem),
                None,
            )
        }
        Edit::NamespaceAttach(h) => (namespace::namespace_show(&mut doc, h, true)?, None),
        Edit::NamespaceDetach(h) => (namespace::namespace_show(&mut doc, h, false)?, None),
        Edit::NamespaceQos(q) => (namespace::namespace_qos(&mut doc, q)?, None),
        Edit::NamespaceResize(r) => (namespace::namespace_resize(&mut doc, r)?, None),
        Edit::HostAdd(h) => (hosts::host_add(&mut doc, h)?, None),
        Edit::HostDel(h) => (hosts::host_del(&mut doc, h)?, None),
        Edit::HostKeySet(k) => (hosts::key_set(&mut doc, k)?, None),
        Edit::HostKeyDel(h) => (hosts::key_del(&mut doc, &h.host_nqn)?, None),
        Edit::ListenerAna(a) => (listener::ana(&mut doc, a)?, None),
        Edit::ListenerAdd(l) => (listener::add(&mut doc, l)?, None),
        Edit::ListenerDel(l) => (listener::del(&mut doc, l)?, None),
        Edit::SubsystemListenerAdd(s) => (listener::subsystem_listener(&mut doc, s, true)?, None),
        Edit::SubsystemListenerDel(s) => (listener::subsystem_listener(&mut doc, s, false)?, None),
    };
    Ok(Edited {
        text: doc.to_string(),
        summary,
        nsid,
    })
}

fn subsystems(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    if !doc.contains_key("subsystem") {
        doc.insert("subsystem", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    doc["subsystem"].as_array_of_tables_mut().ok_or_else(|| {
        EditError::Unreadable("'subsystem' is not a list of [[subsystem]] tables".into())
    })
}

fn find(subs: &ArrayOfTables, nqn: &str) -> Result<usize, EditError> {
    subs.iter()
        .position(|t| t.get("nqn").and_then(|v| v.as_str()) == Some(nqn))
        .ok_or_else(|| EditError::NoSubsystem(nqn.into()))
}

fn subsystem<'d>(doc: &'d mut DocumentMut, nqn: &str) -> Result<&'d mut Table, EditError> {
    let subs = subsystems(doc)?;
    let i = find(subs, nqn)?;
    subs.get_mut(i)
        .ok_or_else(|| EditError::NoSubsystem(nqn.into()))
}

fn namespaces<'t>(sub: &'t mut Table, nqn: &str) -> Result<&'t mut ArrayOfTables, EditError> {
    if !sub.contains_key("namespace") {
        sub.insert("namespace", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    sub["namespace"].as_array_of_tables_mut().ok_or_else(|| {
        EditError::Unreadable(format!(
            "the namespaces of '{nqn}' are not [[subsystem.namespace]] tables"
        ))
    })
}

/// The nsid of each entry, as the validation numbers them (its `nsid`, else
/// its position + 1).
fn nsids(nss: &ArrayOfTables) -> Vec<u32> {
    nss.iter()
        .enumerate()
        .map(|(i, t)| {
            t.get("nsid")
                .and_then(|v| v.as_integer())
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(i as u32 + 1)
        })
        .collect()
}

/// Writes each entry's nsid into it, so removing one renumbers none.
fn pin_nsids(nss: &mut ArrayOfTables) {
    let ids = nsids(nss);
    for (t, id) in nss.iter_mut().zip(ids) {
        if !t.contains_key("nsid") {
            // First, as a hand-written entry would have it.
            t.insert("nsid", value(i64::from(id)));
            t.sort_values_by(|a, _, b, _| (a.get() != "nsid").cmp(&(b.get() != "nsid")));
        }
    }
}

fn subsystem_add(doc: &mut DocumentMut, a: &SubsystemAdd) -> Result<String, EditError> {
    let subs = subsystems(doc)?;
    if find(subs, &a.nqn).is_ok() {
        return Err(EditError::SubsystemExists(a.nqn.clone()));
    }
    let mut t = Table::new();
    t.insert("nqn", value(&a.nqn));
    if a.allow_any_host {
        t.insert("allow_any_host", value(true));
    }
    if !a.hosts.is_empty() {
        t.insert("hosts", value(a.hosts.iter().collect::<Array>()));
    }
    if let Some(s) = &a.serial {
        t.insert("serial", value(s));
    }
    if let Some(m) = &a.model {
        t.insert("model", value(m));
    }
    subs.push(t);
    Ok(format!("subsystem {} added", a.nqn))
}

fn redacted_keys(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    fields: &[(&str, &str)],
    keys: [&Option<String>; 3],
) -> std::fmt::Result {
    let mut d = f.debug_struct(name);
    for (k, v) in fields {
        d.field(k, v);
    }
    d.field("dhchap_key", &keys[0].as_ref().map(|_| "(secret)"))
        .field("dhchap_ctrl_key", &keys[1].as_ref().map(|_| "(secret)"))
        .field("tls_key", &keys[2].as_ref().map(|_| "(secret)"))
        .finish()
}

impl std::fmt::Debug for HostAdd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        redacted_keys(
            f,
            "HostAdd",
            &[("subsystem", &self.subsystem), ("host_nqn", &self.host_nqn)],
            [&self.dhchap_key, &self.dhchap_ctrl_key, &self.tls_key],
        )
    }
}

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        redacted_keys(
            f,
            "HostKey",
            &[("host_nqn", &self.host_nqn)],
            [&self.dhchap_key, &self.dhchap_ctrl_key, &self.tls_key],
        )
    }
}

#[cfg(test)]
mod tests;
