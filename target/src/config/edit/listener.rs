//! Listeners: the ANA state of a group at some of them (`listener ana`).

use toml_edit::{value, DocumentMut, InlineTable};

use super::{EditError, ListenerAna};

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
    let want: Option<std::net::SocketAddr> = match &a.listener {
        None => None,
        Some(l) => Some(l.parse().map_err(|_| {
            EditError::Invalid(format!(
                "'{l}' is not a listener address (ADDRESS:PORT, as nvmf-target status shows)"
            ))
        })?),
    };
    let listeners = doc
        .get_mut("listener")
        .and_then(|l| l.as_array_of_tables_mut())
        .ok_or_else(|| EditError::Unreadable("no [[listener]] tables".into()))?;
    let mut n = 0;
    for t in listeners.iter_mut() {
        let ip = t
            .get("address")
            .and_then(|v| v.as_str())
            .and_then(|a| a.parse::<std::net::IpAddr>().ok());
        let port = t
            .get("port")
            .and_then(|v| v.as_integer())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(nvme::DEFAULT_PORT);
        let here = ip.map(|ip| std::net::SocketAddr::new(ip, port));
        if want.is_some_and(|w| here != Some(w)) {
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
