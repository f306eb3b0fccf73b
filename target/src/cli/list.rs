//! `subsystem|namespace|host|listener|controller list`: one row per item,
//! as a table or (`--json`) as a list of objects, drawn from the daemon's
//! status.

use serde_json::{json, Value};

use crate::daemon::status::Status;

/// What is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Subsystems.
    Subsystems,
    /// Namespaces.
    Namespaces,
    /// The hosts that may connect, per subsystem.
    Hosts,
    /// Listeners.
    Listeners,
    /// Connected controllers.
    Controllers,
}

/// The rows of `kind` in `st` (of subsystem `only`, if given): the column
/// names and, per row, the cells and the row as JSON.
pub fn rows(
    st: &Status,
    kind: Kind,
    only: Option<&str>,
) -> (Vec<&'static str>, Vec<(Vec<String>, Value)>) {
    let subs = st
        .subsystems
        .iter()
        .filter(|s| only.is_none_or(|n| s.nqn == n));
    let mut out = Vec::new();
    let head = match kind {
        Kind::Subsystems => {
            for s in subs {
                let hosts = if s.allow_any_host {
                    "any".to_string()
                } else {
                    s.hosts.len().to_string()
                };
                let listeners = match &s.listeners {
                    None => "all".to_string(),
                    Some(l) if l.is_empty() => "none".to_string(),
                    Some(l) => l.join(","),
                };
                out.push((
                    vec![
                        s.nqn.clone(),
                        hosts,
                        s.namespaces.len().to_string(),
                        s.controllers.len().to_string(),
                        listeners,
                    ],
                    json!({
                        "nqn": s.nqn,
                        "allow_any_host": s.allow_any_host,
                        "hosts": s.hosts,
                        "namespaces": s.namespaces.len(),
                        "controllers": s.controllers.len(),
                        "listeners": s.listeners,
                        "serial": s.serial,
                        "model": s.model,
                    }),
                ));
            }
            vec!["NQN", "HOSTS", "NAMESPACES", "CONTROLLERS", "LISTENERS"]
        }
        Kind::Namespaces => {
            for s in subs {
                for n in &s.namespaces {
                    let v = with(n, "subsystem", json!(s.nqn));
                    out.push((
                        vec![
                            s.nqn.clone(),
                            n.nsid.to_string(),
                            n.backend.clone(),
                            n.path.clone().unwrap_or_else(|| "-".into()),
                            sizes::format(n.size_bytes),
                            n.ana_group.to_string(),
                            n.nguid.clone(),
                        ],
                        v,
                    ));
                }
            }
            vec![
                "SUBSYSTEM",
                "NSID",
                "BACKEND",
                "PATH",
                "SIZE",
                "ANA",
                "NGUID",
            ]
        }
        Kind::Hosts => {
            for s in subs {
                let connected = |h: &str| s.controllers.iter().filter(|c| c.host_nqn == h).count();
                if s.allow_any_host {
                    let n = s.controllers.len();
                    out.push((
                        vec![s.nqn.clone(), "(any host)".into(), n.to_string()],
                        json!({"subsystem": s.nqn, "host": null, "any": true, "controllers": n}),
                    ));
                }
                for h in &s.hosts {
                    let n = connected(h);
                    out.push((
                        vec![s.nqn.clone(), h.clone(), n.to_string()],
                        json!({"subsystem": s.nqn, "host": h, "any": false, "controllers": n}),
                    ));
                }
            }
            vec!["SUBSYSTEM", "HOST", "CONTROLLERS"]
        }
        Kind::Listeners => {
            for l in &st.listeners {
                let name = l.name();
                let ana: Vec<String> = l.ana.iter().map(|(g, s)| format!("{g}={s}")).collect();
                let v = with(l, "name", json!(name));
                out.push((vec![name, ana.join(",")], v));
            }
            vec!["LISTENER", "ANA"]
        }
        Kind::Controllers => {
            for s in subs {
                for c in &s.controllers {
                    let v = with(c, "subsystem", json!(s.nqn));
                    out.push((
                        vec![
                            s.nqn.clone(),
                            c.cntlid.to_string(),
                            c.host_nqn.clone(),
                            c.transport.clone(),
                            c.host_address.clone().unwrap_or_else(|| "-".into()),
                            c.queues.to_string(),
                            format!("{}s", c.connected_seconds),
                        ],
                        v,
                    ));
                }
            }
            vec![
                "SUBSYSTEM",
                "CNTLID",
                "HOST",
                "TRANSPORT",
                "FROM",
                "QUEUES",
                "UP",
            ]
        }
    };
    (head, out)
}

/// `item` as JSON with one more field.
fn with(item: &impl serde::Serialize, key: &str, value: Value) -> Value {
    let mut v = serde_json::to_value(item).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert(key.into(), value);
    }
    v
}

/// The rows as a table with aligned columns (the last one unpadded).
pub fn table(head: &[&str], rows: &[(Vec<String>, Value)]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for (cells, _) in rows {
        for (i, c) in cells.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for (cells, _) in rows {
        out.push_str(&line(cells));
    }
    out
}

/// The rows as one JSON list.
pub fn json(rows: &[(Vec<String>, Value)]) -> Value {
    Value::Array(rows.iter().map(|(_, v)| v.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_lists_its_rows_with_aligned_columns() {
        let st: Status = serde_json::from_value(json!({
            "format": 1,
            "daemon": {"version": "0", "pid": 1, "uptime_seconds": 5},
            "listeners": [{"transport": "rdma", "address": "192.0.2.1", "port": 4420,
                           "ana": {"1": "optimized"}},
                          {"transport": "tcp", "address": "fd00::1", "port": 4420, "ana": {}}],
            "subsystems": [
                {"nqn": "nqn.a", "configured": true, "serial": "s", "model": "m",
                 "allow_any_host": false, "hosts": ["nqn.h1", "nqn.h2"],
                 "listeners": ["tcp:[fd00::1]:4420"],
                 "namespaces": [{"nsid": 1, "backend": "null", "path": null, "size_bytes": 1048576,
                                 "block_size": 512, "readonly": false, "ana_group": 1,
                                 "nguid": "00112233445566778899aabbccddeeff", "uuid": "x"}],
                 "controllers": [{"cntlid": 3, "host_nqn": "nqn.h1", "host_id": "i",
                                  "transport": "tcp", "host_address": "192.0.2.9:5000",
                                  "local_address": null, "connected_seconds": 7, "ready": true,
                                  "queues": 3, "io_queues": [1, 2], "keep_alive_ms": 5000,
                                  "last_keep_alive_ms": 1, "reads": 0, "writes": 0,
                                  "bytes_read": 0, "bytes_written": 0}]},
                {"nqn": "nqn.b", "configured": true, "serial": "s", "model": "m",
                 "allow_any_host": true, "hosts": [], "namespaces": [], "controllers": []}
            ],
            "discovery_controllers": []
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let (h, r) = rows(&st, Kind::Subsystems, None);
        let t = table(&h, &r);
        assert_eq!(
            t,
            "NQN    HOSTS  NAMESPACES  CONTROLLERS  LISTENERS\n\
             nqn.a  2      1           1            tcp:[fd00::1]:4420\n\
             nqn.b  any    0           0            all\n"
        );
        let (_, r) = rows(&st, Kind::Hosts, None);
        assert_eq!(
            json(&r)[0],
            json!({"subsystem": "nqn.a", "host": "nqn.h1", "any": false, "controllers": 1})
        );
        assert_eq!(r.len(), 3, "two hosts of nqn.a, any host of nqn.b");
        let (_, r) = rows(&st, Kind::Namespaces, Some("nqn.b"));
        assert!(r.is_empty());
        let (_, r) = rows(&st, Kind::Namespaces, Some("nqn.a"));
        assert_eq!(r[0].0[4], "1.00 MiB");
        assert_eq!(r[0].1["subsystem"], "nqn.a");
        assert_eq!(r[0].1["nguid"], "00112233445566778899aabbccddeeff");
        let (_, r) = rows(&st, Kind::Listeners, None);
        assert_eq!(r[1].0[0], "tcp:[fd00::1]:4420");
        let (_, r) = rows(&st, Kind::Controllers, None);
        assert_eq!(r[0].0[..4], ["nqn.a", "3", "nqn.h1", "tcp"]);
        assert_eq!(r[0].1["subsystem"], "nqn.a");
    }
}
