//! The edits of a namespace: add, QoS caps, shown to hosts, resize.

use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

use super::{
    namespaces, nsids, pin_nsids, subsystem, EditError, NamespaceAdd, NamespaceHost, NamespaceQos,
    NamespaceResize, MAX_NSID,
};

pub(super) fn namespace_add(doc: &mut DocumentMut, a: &NamespaceAdd) -> Result<u32, EditError> {
    let mut t = Table::new();
    let stores = [
        a.path.is_some(),
        a.rbd_pool.is_some() || a.rbd_image.is_some(),
        a.null_size.is_some(),
    ];
    match stores.iter().filter(|&&s| s).count() {
        1 => {}
        0 => {
            return Err(EditError::Invalid(
                "a namespace needs a store: a path, an RBD pool and image, or a null size".into(),
            ))
        }
        _ => {
            return Err(EditError::Invalid(
                "a namespace has one store: a path, an RBD pool and image, or a null size".into(),
            ))
        }
    }
    let sub = subsystem(doc, &a.subsystem)?;
    let nss = namespaces(sub, &a.subsystem)?;
    let taken = nsids(nss);
    let nsid = match a.nsid {
        Some(n) if taken.contains(&n) => {
            return Err(EditError::NsidInUse {
                nqn: a.subsystem.clone(),
                nsid: n,
            })
        }
        Some(n) => n,
        None => (1..=MAX_NSID)
            .find(|n| !taken.contains(n))
            .ok_or_else(|| EditError::NoFreeNsid(a.subsystem.clone()))?,
    };
    t.insert("nsid", value(i64::from(nsid)));
    if let Some(p) = &a.path {
        t.insert("path", value(p));
    } else if let Some(size) = &a.null_size {
        t.insert("backend", value("null"));
        t.insert("size", value(size));
    } else {
        let (Some(pool), Some(image)) = (&a.rbd_pool, &a.rbd_image) else {
            return Err(EditError::Invalid(
                "an RBD namespace needs both a pool and an image".into(),
            ));
        };
        t.insert("backend", value("rbd"));
        t.insert("pool", value(pool));
        t.insert("image", value(image));
    }
    if a.read_only {
        t.insert("readonly", value(true));
    }
    if let Some(g) = a.ana_group {
        t.insert("ana_group", value(i64::from(g)));
    }
    if let Some(h) = &a.hosts {
        t.insert("hosts", value(h.iter().collect::<Array>()));
    }
    // The file's validation checks them (as it would the operator's own).
    for (k, v) in [("nguid", &a.nguid), ("uuid", &a.uuid), ("eui64", &a.eui64)] {
        if let Some(v) = v {
            t.insert(k, value(v));
        }
    }
    // Entries numbered by position keep their numbers behind a new one.
    pin_nsids(nss);
    nss.push(t);
    Ok(nsid)
}

/// The namespace entry `nsid` of subsystem `nqn`.
fn namespace_entry<'d>(
    doc: &'d mut DocumentMut,
    nqn: &str,
    nsid: u32,
) -> Result<&'d mut Table, EditError> {
    let sub = subsystem(doc, nqn)?;
    let nss = namespaces(sub, nqn)?;
    let missing = || EditError::NoNamespace {
        nqn: nqn.into(),
        nsid,
    };
    let i = nsids(nss)
        .iter()
        .position(|&n| n == nsid)
        .ok_or_else(missing)?;
    nss.get_mut(i).ok_or_else(missing)
}

/// Sets the caps `q` gives in a table of caps (0 removes one).
fn set_caps(t: &mut dyn toml_edit::TableLike, q: &NamespaceQos) {
    for (k, v) in q.given() {
        match v {
            Some(0) => {
                t.remove(k);
            }
            Some(v) => {
                t.insert(k, value(v as i64));
            }
            None => {}
        }
    }
}

fn caps_left(t: &dyn toml_edit::TableLike) -> bool {
    ["rw_iops", "rw_mbps", "r_mbps", "w_mbps"]
        .iter()
        .any(|k| t.contains_key(k))
}

pub(super) fn namespace_qos(doc: &mut DocumentMut, q: &NamespaceQos) -> Result<String, EditError> {
    if q.given().iter().all(|(_, v)| v.is_none()) {
        return Err(EditError::Invalid(
            "no cap given (rw_iops, rw_mbps, r_mbps, w_mbps; 0 removes one)".into(),
        ));
    }
    if q.given()
        .iter()
        .any(|(_, v)| v.is_some_and(|v| v > i64::MAX as u64))
    {
        return Err(EditError::Invalid("a cap is too large".into()));
    }
    let t = namespace_entry(doc, &q.subsystem, q.nsid)?;
    let whose = match &q.host_nqn {
        None => {
            if !t.contains_key("qos") {
                t.insert("qos", value(toml_edit::InlineTable::new()));
            }
            let caps = t["qos"].as_table_like_mut().ok_or_else(|| {
                EditError::Unreadable(format!("'qos' of namespace {} is not a table", q.nsid))
            })?;
            set_caps(caps, q);
            if !caps_left(caps) {
                t.remove("qos");
            }
            "all hosts together".to_string()
        }
        Some(host) => {
            if !t.contains_key("host_qos") {
                t.insert("host_qos", Item::ArrayOfTables(ArrayOfTables::new()));
            }
            let list = t["host_qos"].as_array_of_tables_mut().ok_or_else(|| {
                EditError::Unreadable(format!(
                    "'host_qos' of namespace {} is not a list of [[subsystem.namespace.host_qos]] tables",
                    q.nsid
                ))
            })?;
            let at = list
                .iter()
                .position(|e| e.get("host").and_then(|v| v.as_str()) == Some(host));
            let i = match at {
                Some(i) => i,
                None => {
                    let mut e = Table::new();
                    e.insert("host", value(host));
                    list.push(e);
                    list.len() - 1
                }
            };
            if let Some(e) = list.get_mut(i) {
                set_caps(e, q);
                if !caps_left(e) {
                    list.remove(i);
                }
            }
            if list.is_empty() {
                t.remove("host_qos");
            }
            format!("host {host}")
        }
    };
    Ok(format!(
        "QoS caps of namespace {} of {} ({whose}) set",
        q.nsid, q.subsystem
    ))
}

/// Shows namespace `h.nsid` to host `h.host_nqn` (`attach`), or hides it.
/// Only a namespace with a hosts list: one without is shown to every host
/// of the subsystem, and which hosts those are is the subsystem's to say.
pub(super) fn namespace_show(
    doc: &mut DocumentMut,
    h: &NamespaceHost,
    attach: bool,
) -> Result<String, EditError> {
    let t = namespace_entry(doc, &h.subsystem, h.nsid)?;
    let Some(hosts) = t.get_mut("hosts") else {
        return Err(EditError::Invalid(format!(
            "namespace {} of '{}' is shown to every host of the subsystem (it has no hosts list): \
             give it one first (hosts = [...] in the file, or namespace add --host-nqn)",
            h.nsid, h.subsystem
        )));
    };
    let hosts = hosts.as_array_mut().ok_or_else(|| {
        EditError::Unreadable(format!(
            "'hosts' of namespace {} of '{}' is not a list",
            h.nsid, h.subsystem
        ))
    })?;
    let at = hosts.iter().position(|v| v.as_str() == Some(&h.host_nqn));
    match (attach, at) {
        (true, Some(_)) => Err(EditError::Invalid(format!(
            "namespace {} of '{}' is shown to host '{}' already",
            h.nsid, h.subsystem, h.host_nqn
        ))),
        (true, None) => {
            hosts.push(&h.host_nqn);
            Ok(format!(
                "namespace {} of {} shown to host {}",
                h.nsid, h.subsystem, h.host_nqn
            ))
        }
        (false, None) => Err(EditError::Invalid(format!(
            "namespace {} of '{}' is not shown to host '{}'",
            h.nsid, h.subsystem, h.host_nqn
        ))),
        (false, Some(i)) => {
            hosts.remove(i);
            Ok(format!(
                "namespace {} of {} hidden from host {}",
                h.nsid, h.subsystem, h.host_nqn
            ))
        }
    }
}

/// The subsystem's `hosts` list, made if missing.
/// Keys are never printed: a host's NQN and which keys are given.
/// Sets a null namespace's size (other stores set their own: the daemon
/// grows them, the file keeps no size).
pub(super) fn namespace_resize(
    doc: &mut DocumentMut,
    r: &NamespaceResize,
) -> Result<String, EditError> {
    let size = r
        .size
        .as_deref()
        .ok_or_else(|| EditError::Invalid("no size given".into()))?;
    let t = namespace_entry(doc, &r.subsystem, r.nsid)?;
    if t.get("backend").and_then(|v| v.as_str()) != Some("null") {
        return Err(EditError::Invalid(format!(
            "namespace {} of '{}' keeps its size in its store, not in the file",
            r.nsid, r.subsystem
        )));
    }
    t.insert("size", value(size));
    Ok(format!(
        "namespace {} of {} resized to {size}",
        r.nsid, r.subsystem
    ))
}
