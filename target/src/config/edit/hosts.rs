//! Hosts: who may connect to a subsystem (`host add`/`del`), and the
//! DH-HMAC-CHAP keys and TLS PSKs of their `[[host]]` entries (`host key
//! set`/`del`).
//! Keys never appear in a summary or an error.

use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

use super::{subsystem, EditError, HostAdd, HostKey, HostRef, ANY_HOST};

fn hosts_of<'t>(sub: &'t mut Table, nqn: &str) -> Result<&'t mut Array, EditError> {
    if !sub.contains_key("hosts") {
        sub.insert("hosts", value(Array::new()));
    }
    sub["hosts"]
        .as_array_mut()
        .ok_or_else(|| EditError::Unreadable(format!("'hosts' of '{nqn}' is not a list")))
}

fn allow_any(sub: &Table) -> bool {
    sub.get("allow_any_host")
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

pub(super) fn host_add(doc: &mut DocumentMut, h: &HostAdd) -> Result<String, EditError> {
    let k = HostKey {
        host_nqn: h.host_nqn.clone(),
        dhchap_key: h.dhchap_key.clone(),
        dhchap_ctrl_key: h.dhchap_ctrl_key.clone(),
        tls_key: h.tls_key.clone(),
    };
    let given = names(&k);
    if !given.is_empty() {
        if h.host_nqn == ANY_HOST {
            return Err(EditError::Invalid(
                "keys belong to one host, not to '*'".into(),
            ));
        }
        key_set(doc, &k)?;
    }
    let keyed = match given.as_slice() {
        [] => String::new(),
        [one] => format!(" (its {one} set)"),
        many => format!(" (its {} set)", many.join(" and ")),
    };
    allow(doc, &h.subsystem, &h.host_nqn).map(|s| format!("{s}{keyed}"))
}

/// The names of the keys given.
fn names(k: &HostKey) -> Vec<&'static str> {
    KEYS.iter()
        .zip(given(k))
        .filter(|(_, key)| key.is_some())
        .map(|((_, _, name), _)| *name)
        .collect()
}

fn given(k: &HostKey) -> [&Option<String>; 3] {
    [&k.dhchap_key, &k.dhchap_ctrl_key, &k.tls_key]
}

fn allow(doc: &mut DocumentMut, subsys: &str, host: &str) -> Result<String, EditError> {
    let h = HostRef {
        subsystem: subsys.into(),
        host_nqn: host.into(),
    };
    let sub = subsystem(doc, &h.subsystem)?;
    let exists = EditError::HostExists {
        nqn: h.subsystem.clone(),
        host: h.host_nqn.clone(),
    };
    if h.host_nqn == ANY_HOST {
        if allow_any(sub) {
            return Err(exists);
        }
        sub.insert("allow_any_host", value(true));
        return Ok(format!("any host may connect to {}", h.subsystem));
    }
    let hosts = hosts_of(sub, &h.subsystem)?;
    if hosts.iter().any(|v| v.as_str() == Some(&h.host_nqn)) {
        return Err(exists);
    }
    hosts.push(&h.host_nqn);
    Ok(format!(
        "host {} may connect to {}",
        h.host_nqn, h.subsystem
    ))
}

pub(super) fn host_del(doc: &mut DocumentMut, h: &HostRef) -> Result<String, EditError> {
    let sub = subsystem(doc, &h.subsystem)?;
    let missing = EditError::NoHost {
        nqn: h.subsystem.clone(),
        host: h.host_nqn.clone(),
    };
    if h.host_nqn == ANY_HOST {
        if !allow_any(sub) {
            return Err(missing);
        }
        sub.insert("allow_any_host", value(false));
        return Ok(format!("only listed hosts may connect to {}", h.subsystem));
    }
    let hosts = hosts_of(sub, &h.subsystem)?;
    let Some(i) = hosts.iter().position(|v| v.as_str() == Some(&h.host_nqn)) else {
        return Err(missing);
    };
    hosts.remove(i);
    Ok(format!(
        "host {} may no longer connect to {}",
        h.host_nqn, h.subsystem
    ))
}

/// The `[[host]]` entries.
fn host_entries(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    if !doc.contains_key("host") {
        doc.insert("host", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    doc["host"]
        .as_array_of_tables_mut()
        .ok_or_else(|| EditError::Unreadable("'host' is not a list of [[host]] tables".into()))
}

fn position(hosts: &ArrayOfTables, nqn: &str) -> Option<usize> {
    hosts
        .iter()
        .position(|t| t.get("nqn").and_then(|v| v.as_str()) == Some(nqn))
}

/// The fields of a key: in the file, and in a file of its own.
const KEYS: [(&str, &str, &str); 3] = [
    ("dhchap_key", "dhchap_key_file", "key"),
    ("dhchap_ctrl_key", "dhchap_ctrl_key_file", "controller key"),
    ("tls_key", "tls_key_file", "TLS PSK"),
];

pub(super) fn key_set(doc: &mut DocumentMut, k: &HostKey) -> Result<String, EditError> {
    let given = given(k);
    if given.iter().all(|g| g.is_none()) {
        return Err(EditError::Invalid(
            "give a key (--dhchap-key), a controller key (--dhchap-ctrl-key) or a TLS PSK (--tls-key)"
                .into(),
        ));
    }
    let hosts = host_entries(doc)?;
    let i = match position(hosts, &k.host_nqn) {
        Some(i) => i,
        None => {
            let mut t = Table::new();
            t.insert("nqn", value(&k.host_nqn));
            hosts.push(t);
            hosts.len() - 1
        }
    };
    let Some(t) = hosts.get_mut(i) else {
        return Err(EditError::Unreadable("a [[host]] entry vanished".into()));
    };
    let mut set = Vec::new();
    for ((field, file, name), key) in KEYS.iter().zip(given) {
        let Some(key) = key else { continue };
        if let Some(path) = t.get(file).and_then(|v| v.as_str()) {
            return Err(EditError::KeyInFile {
                host: k.host_nqn.clone(),
                field,
                path: path.into(),
            });
        }
        t.insert(field, value(key.as_str()));
        set.push(*name);
    }
    let then = if k.tls_key.is_some() {
        "its controllers are disconnected and connect again with the new one"
    } else {
        "controllers that authenticated with the old one must authenticate again"
    };
    Ok(format!(
        "host {}: {} set ({then})",
        k.host_nqn,
        set.join(" and ")
    ))
}

pub(super) fn key_del(doc: &mut DocumentMut, host: &str) -> Result<String, EditError> {
    let hosts = host_entries(doc)?;
    let i = position(hosts, host).ok_or_else(|| EditError::NoKey(host.into()))?;
    let Some(t) = hosts.get_mut(i) else {
        return Err(EditError::NoKey(host.into()));
    };
    let mut removed = false;
    for (field, file, _) in KEYS {
        removed |= t.remove(field).is_some() | t.remove(file).is_some();
    }
    if !removed {
        return Err(EditError::NoKey(host.into()));
    }
    // Hash, group and derivation settings alone mean nothing without a key.
    t.remove("dhchap_hash");
    t.remove("dhchap_dhgroup");
    t.remove("tls_derivation");
    if t.iter().all(|(k, _)| k == "nqn") {
        hosts.remove(i);
    }
    if hosts.is_empty() {
        doc.remove("host");
    }
    Ok(format!(
        "host {host}: keys removed (it connects without authenticating or TLS)"
    ))
}

/// Whether a string is a key (a DH-HMAC-CHAP secret, a TLS PSK).
pub fn looks_secret(s: &str) -> bool {
    let s = s.trim_start();
    s.starts_with("DHHC-1:") || s.starts_with("NVMeTLSkey-")
}

/// What a host key is shown as.
pub const HIDDEN: &str = "(secret: not shown)";

/// The configuration's text with every key hidden (`config show`): the
/// values of `dhchap_key`, `dhchap_ctrl_key` and `tls_key` wherever they
/// are (tables, inline tables) and any string that looks like a secret
/// (`DHHC-1:`, `NVMeTLSkey-`); the rest as written. A text that does not parse is not shown at all.
pub fn without_secrets(text: &str) -> Option<String> {
    use toml_edit::visit_mut::{self, VisitMut};
    use toml_edit::{Formatted, KeyMut, Value};

    struct Hide;
    impl VisitMut for Hide {
        fn visit_table_like_kv_mut(&mut self, key: KeyMut<'_>, node: &mut Item) {
            if KEYS.iter().any(|(field, _, _)| key.get() == *field) {
                if let Some(v) = node.as_value_mut() {
                    let decor = v.decor().clone();
                    *v = Value::from(HIDDEN);
                    *v.decor_mut() = decor;
                    return;
                }
            }
            visit_mut::visit_table_like_kv_mut(self, key, node);
        }

        fn visit_string_mut(&mut self, node: &mut Formatted<String>) {
            if looks_secret(node.value()) {
                let decor = node.decor().clone();
                *node = Formatted::new(HIDDEN.to_string());
                *node.decor_mut() = decor;
            }
        }
    }

    let mut doc: DocumentMut = text.parse().ok()?;
    Hide.visit_document_mut(&mut doc);
    Some(doc.to_string())
}
