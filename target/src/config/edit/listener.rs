//! Listeners: added and removed (`listener add|del`), the ANA state of a
//! group at some of them (`listener ana`).

use std::net::{IpAddr, SocketAddr};

use toml_edit::{value, Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table};

use super::{EditError, ListenerAna, ListenerRef, SubsystemListener};
use crate::model::port::PortName;

/// The address a `[[listener]]` table says (none if it does not parse).
fn table_addr(t: &Table) -> Option<SocketAddr> {
    let ip = t
        .get("address")
        .and_then(|v| v.as_str())
        .and_then(|a| a.parse::<IpAddr>().ok())?;
    let port = t
        .get("port")
        .and_then(|v| v.as_integer())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(nvme::DEFAULT_PORT);
    Some(SocketAddr::new(ip, port))
}

/// The transport a `[[listener]]` table says.
fn table_transport(t: &Table) -> &str {
    t.get("transport")
        .and_then(|v| v.as_str())
        .unwrap_or("rdma")
}

/// The transport and address `l` names.
fn wanted(l: &ListenerRef) -> Result<(&str, SocketAddr), EditError> {
    let t = l.transport.as_deref().unwrap_or("rdma");
    if !matches!(t, "rdma" | "tcp") {
        return Err(EditError::Invalid(format!(
            "'{t}' is not a transport (rdma or tcp)"
        )));
    }
    let ip: IpAddr = l.address.parse().map_err(|_| {
        EditError::Invalid(format!("'{}' is not an IPv4 or IPv6 address", l.address))
    })?;
    let port = l.port.unwrap_or(nvme::DEFAULT_PORT);
    if port == 0 {
        return Err(EditError::Invalid("a port is 1..=65535".into()));
    }
    Ok((t, SocketAddr::new(ip, port)))
}

fn listeners(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    if !doc.contains_key("listener") {
        doc.insert("listener", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    doc["listener"].as_array_of_tables_mut().ok_or_else(|| {
        EditError::Unreadable("'listener' is not a list of [[listener]] tables".into())
    })
}

pub(super) fn add(doc: &mut DocumentMut, l: &ListenerRef) -> Result<String, EditError> {
    let (transport, addr) = wanted(l)?;
    let all = listeners(doc)?;
    if all
        .iter()
        .any(|t| table_transport(t) == transport && table_addr(t) == Some(addr))
    {
        return Err(EditError::Invalid(format!(
            "a {transport} listener at {addr} is there already"
        )));
    }
    let mut t = Table::new();
    t.insert("transport", value(transport));
    t.insert("address", value(addr.ip().to_string()));
    t.insert("port", value(i64::from(addr.port())));
    if let Some(s) = &l.secure {
        if crate::model::port::Secure::from_name(s).is_none() {
            return Err(EditError::Invalid(format!(
                "'{s}' is not one of none, optional, required"
            )));
        }
        t.insert("secure", value(s.as_str()));
    }
    all.push(t);
    Ok(format!("{transport} listener {addr} added"))
}

pub(super) fn del(doc: &mut DocumentMut, l: &ListenerRef) -> Result<String, EditError> {
    let (transport, addr) = wanted(l)?;
    let all = listeners(doc)?;
    let i = all
        .iter()
        .position(|t| table_transport(t) == transport && table_addr(t) == Some(addr))
        .ok_or_else(|| EditError::NoListener(format!("{addr} ({transport})")))?;
    if all.len() == 1 {
        return Err(EditError::Invalid(
            "the last listener cannot be removed (a target needs one)".into(),
        ));
    }
    all.remove(i);
    Ok(format!("{transport} listener {addr} removed"))
}

pub(super) fn ana(doc: &mut DocumentMut, a: &ListenerAna) -> Result<String, EditError> {
    if nvme::ana::AnaState::from_name(&a.state).is_none() {
        return Err(EditError::Invalid(format!(
            "'{}' is not an ANA state (optimized, non-optimized, inaccessible, persistent-loss, change)",
            a.state
        )));
    }
    if !(1..=nvme::ana::MAX_GROUPS).contains(&a.group) {
        return Err(EditError::Invalid(format!(
            "ANA group ids are 1..={}",
            nvme::ana::MAX_GROUPS
        )));
    }
    let want: Option<PortName> = match &a.listener {
        None => None,
        Some(l) => Some(PortName::parse(l).map_err(EditError::Invalid)?),
    };
    let listeners = doc
        .get_mut("listener")
        .and_then(|l| l.as_array_of_tables_mut())
        .ok_or_else(|| EditError::Unreadable("no [[listener]] tables".into()))?;
    let mut n = 0;
    for t in listeners.iter_mut() {
        let here = table_addr(t).map(|addr| PortName {
            tcp: Some(table_transport(t) == "tcp"),
            addr,
        });
        if want.is_some_and(|w| !here.is_some_and(|h| names(&w, &h))) {
            continue;
        }
        if !t.contains_key("ana") {
            t.insert("ana", value(InlineTable::new()));
        }
        let Some(map) = t.get_mut("ana").and_then(|v| v.as_inline_table_mut()) else {
            return Err(EditError::Unreadable(
                "a listener's 'ana' is not an inline table ({ 1 = \"optimized\" })".into(),
            ));
        };
        map.insert(a.group.to_string(), a.state.as_str().into());
        n += 1;
    }
    if n == 0 {
        return Err(EditError::NoListener(
            a.listener.clone().unwrap_or_else(|| "any address".into()),
        ));
    }
    Ok(format!(
        "ANA group {} {} at {}",
        a.group,
        a.state,
        match &a.listener {
            Some(l) => format!("{n} listener(s) of {l}"),
            None => format!("every listener ({n})"),
        }
    ))
}

/// Every `[[listener]]` of the file, by name (with its transport).
fn every(doc: &DocumentMut) -> Vec<PortName> {
    doc.get("listener")
        .and_then(|l| l.as_array_of_tables())
        .map(|all| {
            all.iter()
                .filter_map(|t| {
                    Some(PortName {
                        tcp: Some(table_transport(t) == "tcp"),
                        addr: table_addr(t)?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether name `a` names listener `l` (a name with its transport).
fn names(a: &PortName, l: &PortName) -> bool {
    a.addr == l.addr && (a.tcp.is_none() || a.tcp == l.tcp)
}

/// Puts subsystem `s.subsystem` on the listeners `s.listener` names
/// (`add`), or takes it off them. A subsystem without `listeners` is on
/// every listener: taking it off one lists the others.
pub(super) fn subsystem_listener(
    doc: &mut DocumentMut,
    s: &SubsystemListener,
    add: bool,
) -> Result<String, EditError> {
    let name = PortName::parse(&s.listener).map_err(EditError::Invalid)?;
    let every = every(doc);
    let named: Vec<PortName> = every.iter().filter(|l| names(&name, l)).copied().collect();
    if named.is_empty() {
        return Err(EditError::NoListener(name.to_string()));
    }
    let sub = super::subsystem(doc, &s.subsystem)?;
    let now: Option<Vec<PortName>> = match sub.get("listeners") {
        None => None,
        Some(v) => Some(
            v.as_array()
                .ok_or_else(|| {
                    EditError::Unreadable(format!("{}: 'listeners' is not a list", s.subsystem))
                })?
                .iter()
                .map(|x| {
                    x.as_str()
                        .and_then(|t| PortName::parse(t).ok())
                        .ok_or_else(|| {
                            EditError::Unreadable(format!(
                                "{}: 'listeners' holds something that is not a listener",
                                s.subsystem
                            ))
                        })
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    // The listeners it is on now, each by its full name.
    let on: Vec<PortName> = match &now {
        None => every.clone(),
        Some(v) => every
            .iter()
            .filter(|l| v.iter().any(|n| names(n, l)))
            .copied()
            .collect(),
    };
    let next: Vec<PortName> = if add {
        if now.is_none() {
            return Err(EditError::AlreadySo(format!(
                "subsystem '{}' is on every listener already (it has no 'listeners'); \
                 `subsystem listener del` takes it off one",
                s.subsystem
            )));
        }
        if named.iter().all(|l| on.contains(l)) {
            return Err(EditError::AlreadySo(format!(
                "subsystem '{}' is on {name} already",
                s.subsystem
            )));
        }
        let mut v = now.clone().unwrap_or_default();
        v.push(name);
        v
    } else {
        if !named.iter().any(|l| on.contains(l)) {
            return Err(EditError::AlreadySo(format!(
                "subsystem '{}' is not on {name}",
                s.subsystem
            )));
        }
        on.iter().filter(|l| !named.contains(l)).copied().collect()
    };
    sub.insert(
        "listeners",
        value(next.iter().map(|n| n.to_string()).collect::<Array>()),
    );
    Ok(format!(
        "subsystem {} {} {name}",
        s.subsystem,
        if add { "added to" } else { "taken off" }
    ))
}
