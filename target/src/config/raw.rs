//! The configuration as read, before validation. Each section and each
//! `[[listener]]`, `[[subsystem]]` and `[[subsystem.namespace]]` entry is read
//! on its own, so one wrong type or unknown key does not hide the errors of
//! the other entries.

use serde::Deserialize;

use super::Ctx;

/// Top-level sections, in the order they are read.
const SECTIONS: &[&str] = &[
    "listener",
    "subsystem",
    "host",
    "referral",
    "discovery",
    "target",
    "metrics",
    "control",
    "log",
];

/// The whole file, as read.
#[derive(Default)]
pub(super) struct RawConfig {
    pub listener: Vec<(usize, RawListener)>,
    pub subsystem: Vec<(usize, RawSubsystem)>,
    pub host: Vec<(usize, RawHost)>,
    pub referral: Vec<(usize, RawReferral)>,
    pub discovery: Option<RawDiscovery>,
    pub target: Option<RawTarget>,
    pub metrics: Option<RawMetrics>,
    pub control: Option<RawControl>,
    pub log: Option<RawLog>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub enabled: Option<bool>,
    pub address: Option<String>,
    pub per_host: Option<bool>,
    pub per_host_max: Option<u32>,
    pub per_host_idle_secs: Option<u64>,
    pub latency_buckets: Option<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDiscovery {
    pub mdns: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawControl {
    pub enabled: Option<bool>,
    pub socket: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub level: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub poll_spin_us: Option<u64>,
    pub state_dir: Option<String>,
    pub drain_on_stop_s: Option<u64>,
    /// The engine's settings (the core's `worker::config`).
    #[serde(skip)]
    pub engine: super::EngineSettings,
}

impl RawTarget {
    /// Its own keys (the engine's are `EngineSettings::NAMES`).
    const OWN: &'static [&'static str] = &["poll_spin_us", "state_dir", "drain_on_stop_s"];
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub transport: Option<String>,
    pub address: Option<String>,
    pub port: Option<u16>,
    /// ANA group id -> state name.
    pub ana: Option<std::collections::BTreeMap<String, String>>,
    pub secure: Option<String>,
}

/// A `[[referral]]`: another discovery service the log lists.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReferral {
    pub transport: Option<String>,
    pub address: Option<String>,
    pub port: Option<u16>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubsystem {
    pub nqn: Option<String>,
    pub allow_any_host: Option<bool>,
    #[serde(default)]
    pub hosts: Vec<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub cntlid_min: Option<u32>,
    pub cntlid_max: Option<u32>,
    pub listeners: Option<Vec<String>>,
    /// The entries as read; each is checked on its own into `namespaces`.
    #[serde(default, rename = "namespace")]
    pub namespace_values: Vec<config::Value>,
    #[serde(skip)]
    pub namespaces: Vec<(usize, RawNamespace)>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNamespace {
    pub nsid: Option<u32>,
    pub path: Option<String>,
    pub backend: Option<String>,
    pub size: Option<super::Size>,
    pub block_size: Option<u32>,
    pub readonly: Option<bool>,
    pub pool: Option<String>,
    pub image: Option<String>,
    pub ceph_conf: Option<String>,
    pub client: Option<String>,
    pub fencing: Option<bool>,
    pub ana_group: Option<u32>,
    pub reservations: Option<bool>,
    pub hosts: Option<Vec<String>>,
    pub qos: Option<crate::model::qos::QosCaps>,
    pub host_qos: Option<Vec<RawHostQos>>,
    pub nguid: Option<String>,
    pub uuid: Option<String>,
    pub eui64: Option<String>,
}

/// A `[[subsystem.namespace.host_qos]]`: one host's caps on the namespace.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostQos {
    pub host: Option<String>,
    #[serde(default)]
    pub rw_iops: u64,
    #[serde(default)]
    pub rw_mbps: u64,
    #[serde(default)]
    pub r_mbps: u64,
    #[serde(default)]
    pub w_mbps: u64,
}

/// A `[[host]]`: a host's DH-HMAC-CHAP settings, with nvmet's names.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub nqn: Option<String>,
    pub dhchap_key: Option<String>,
    pub dhchap_key_file: Option<String>,
    pub dhchap_ctrl_key: Option<String>,
    pub dhchap_ctrl_key_file: Option<String>,
    pub dhchap_hash: Option<String>,
    pub dhchap_dhgroup: Option<String>,
    pub tls_key: Option<String>,
    pub tls_key_file: Option<String>,
    pub tls_derivation: Option<String>,
}

/// A list section (`[[name]]`): each entry read on its own, with its index in
/// the file; a wrong one is reported and left out.
fn entries<T: for<'de> Deserialize<'de>>(
    cx: &mut Ctx,
    name: &str,
    v: config::Value,
) -> Vec<(usize, T)> {
    let items = match v.into_array() {
        Ok(items) => items,
        Err(_) => {
            cx.err(name, format!("must be a list of tables ([[{name}]])"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        match item.try_deserialize::<T>() {
            Ok(t) => out.push((i, t)),
            Err(e) => cx.err(format!("{name}[{i}]"), e.to_string()),
        }
    }
    out
}

/// A table section (`[name]`).
fn table<T: for<'de> Deserialize<'de>>(cx: &mut Ctx, name: &str, v: config::Value) -> Option<T> {
    match v.try_deserialize::<T>() {
        Ok(t) => Some(t),
        Err(e) => {
            cx.err(name, e.to_string());
            None
        }
    }
}

/// `[target]`: its own keys and the engine's, each part read on its own
/// (an unknown key named with every key the section takes).
fn target(cx: &mut Ctx, v: config::Value) -> Option<RawTarget> {
    let Ok(mut all) = v.clone().into_table() else {
        return table(cx, "target", v);
    };
    let engine: config::Map<String, config::Value> = super::EngineSettings::NAMES
        .iter()
        .filter_map(|&k| all.remove_entry(k))
        .collect();
    let unknown: Vec<String> = all
        .keys()
        .filter(|k| !RawTarget::OWN.contains(&k.as_str()))
        .cloned()
        .collect();
    for k in unknown {
        all.remove(&k);
        let mut known: Vec<&str> = RawTarget::OWN.to_vec();
        known.extend(super::EngineSettings::NAMES);
        cx.err(
            "target",
            format!("unknown field `{k}`, expected one of {}", known.join(", ")),
        );
    }
    let mut t: RawTarget = table(cx, "target", config::Value::new(None, all))?;
    t.engine = table(cx, "target", config::Value::new(None, engine))?;
    Some(t)
}

/// Reads every section of a loaded configuration, reporting each entry that
/// does not have the right shape to `cx`.
pub(super) fn read(cx: &mut Ctx, c: config::Config) -> RawConfig {
    let top = match c.try_deserialize::<config::Map<String, config::Value>>() {
        Ok(t) => t,
        Err(e) => {
            cx.err("(file)", e.to_string());
            return RawConfig::default();
        }
    };
    let mut raw = RawConfig::default();
    let mut keys: Vec<_> = top.keys().cloned().collect();
    keys.sort();
    for k in keys {
        if !SECTIONS.contains(&k.as_str()) {
            cx.err(
                k.clone(),
                format!("unknown section (expected one of: {})", SECTIONS.join(", ")),
            );
        }
    }
    let mut top = top;
    for &s in SECTIONS {
        let Some(v) = top.remove(s) else { continue };
        match s {
            "listener" => raw.listener = entries(cx, s, v),
            "subsystem" => {
                raw.subsystem = entries::<RawSubsystem>(cx, s, v);
                for (i, sub) in raw.subsystem.iter_mut() {
                    let values = std::mem::take(&mut sub.namespace_values);
                    sub.namespaces = entries(
                        cx,
                        &format!("subsystem[{i}].namespace"),
                        config::Value::new(None, values),
                    );
                }
            }
            "host" => raw.host = entries(cx, s, v),
            "referral" => raw.referral = entries(cx, s, v),
            "discovery" => raw.discovery = table(cx, s, v),
            "target" => raw.target = target(cx, v),
            "metrics" => raw.metrics = table(cx, s, v),
            "control" => raw.control = table(cx, s, v),
            "log" => raw.log = table(cx, s, v),
            _ => unreachable!("every section is listed in SECTIONS"),
        }
    }
    raw
}
