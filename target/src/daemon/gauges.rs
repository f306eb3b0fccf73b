//! What dashboards and alerts read of the daemon's state, drawn at each
//! scrape from the same snapshot `nvmf-target status` shows
//! ([`super::status::Status::of`]): the ANA state of each group at each
//! listener, which listeners are drained, whether the daemon passes its
//! liveness check, and each namespace (backend, path, identity, size).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, Weak};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts};

use super::status::Status;
use crate::model::target::Target;
use crate::telemetry::metrics::{metrics, PREFIX};

/// The daemon the gauges describe, and when it started.
static DAEMON: Mutex<Option<(Weak<Target>, Instant)>> = Mutex::new(None);
/// The last liveness check passed.
static HEALTHY: AtomicBool = AtomicBool::new(true);

/// Makes the gauges describe `target` (registered with the process's
/// metrics on first use).
pub fn watch(target: &std::sync::Arc<Target>, started: Instant) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        if let Err(e) = metrics().registry.register(Box::new(Gauges::new())) {
            tracing::warn!(error = %e, "state gauges not registered");
        }
    });
    *DAEMON.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((std::sync::Arc::downgrade(target), started));
}

/// Records the outcome of the liveness check (`nvmf_target_healthy`).
pub fn set_healthy(ok: bool) {
    HEALTHY.store(ok, Ordering::Relaxed);
}

/// The names of the gauges (for checks of what dashboards query).
pub fn names() -> Vec<String> {
    Gauges::new()
        .descs
        .iter()
        .map(|d| d.fq_name.clone())
        .collect()
}

/// The gauges, made afresh at each scrape.
struct Gauges {
    descs: Vec<Desc>,
}

fn name(n: &str) -> String {
    format!("{PREFIX}_{n}")
}

/// The families, empty (their descriptions), or set from `status`.
struct Families {
    healthy: IntGauge,
    ana: IntGaugeVec,
    drained: IntGaugeVec,
    ns_info: IntGaugeVec,
    ns_size: IntGaugeVec,
}

impl Families {
    fn new() -> Families {
        let vec = |n: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name(n), help), labels).expect("valid metric")
        };
        Families {
            healthy: IntGauge::new(
                name("healthy"),
                "1 while the daemon passes its liveness check (listeners, workers and the metrics endpoint answer; the systemd watchdog is petted), else 0",
            )
            .expect("valid metric"),
            ana: vec(
                "ana_state",
                "1 for the ANA state each group has at each listener now (state: optimized, non_optimized, inaccessible, persistent_loss, change)",
                &["listener", "group", "state"],
            ),
            drained: vec(
                "listener_drained",
                "1 while the listener is drained (nvmf-target drain, or a stop that drains), else 0",
                &["listener"],
            ),
            ns_info: vec(
                "namespace_info",
                "1 for each namespace served, with its backend, path (or pool/image), NGUID and UUID",
                &["subsystem", "nsid", "backend", "path", "nguid", "uuid"],
            ),
            ns_size: vec(
                "namespace_size_bytes",
                "The size each namespace has now",
                &["subsystem", "nsid"],
            ),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 5] {
        [
            &self.healthy,
            &self.ana,
            &self.drained,
            &self.ns_info,
            &self.ns_size,
        ]
    }

    /// The families with a series (an empty one is not valid text).
    fn families(&self) -> Vec<MetricFamily> {
        self.collectors()
            .iter()
            .flat_map(|c| c.collect())
            .filter(|m| !m.get_metric().is_empty())
            .collect()
    }

    /// Sets the gauges from a snapshot; `drained`: the names of the
    /// listeners drained now.
    fn set(&self, st: &Status, drained: &[String], healthy: bool) {
        self.healthy.set(i64::from(healthy));
        for l in &st.listeners {
            let name = l.name();
            for (g, state) in &l.ana {
                let state = state.replace('-', "_");
                self.ana
                    .with_label_values(&[&name, &g.to_string(), &state])
                    .set(1);
            }
            self.drained
                .with_label_values(&[&name])
                .set(i64::from(drained.contains(&name)));
        }
        for s in &st.subsystems {
            for n in &s.namespaces {
                let nsid = n.nsid.to_string();
                self.ns_info
                    .with_label_values(&[
                        &s.nqn,
                        &nsid,
                        &n.backend,
                        n.path.as_deref().unwrap_or(""),
                        &n.nguid,
                        &n.uuid,
                    ])
                    .set(1);
                self.ns_size
                    .with_label_values(&[&s.nqn, &nsid])
                    .set(n.size_bytes as i64);
            }
        }
    }
}

impl Gauges {
    fn new() -> Gauges {
        let f = Families::new();
        let descs = f
            .collectors()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        Gauges { descs }
    }
}

impl Collector for Gauges {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let daemon = DAEMON.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some((target, started)) = daemon.and_then(|(t, s)| Some((t.upgrade()?, s))) else {
            return Vec::new();
        };
        let st = Status::of(&target, started);
        let live = target.listeners.live();
        let drained: Vec<String> = target
            .ana
            .drained()
            .iter()
            .filter_map(|(slot, _)| live.iter().find(|(s, _)| s == slot))
            .map(|(_, p)| crate::model::port::PortName::of(p).to_string())
            .collect();
        let f = Families::new();
        f.set(&st, &drained, HEALTHY.load(Ordering::Relaxed));
        f.families()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/metrics.md lists every metric `/metrics` may hold, as the
    /// collectors describe them. `UPDATE_DOCS=1 cargo test` rewrites it.
    #[test]
    fn the_metrics_reference_is_current() {
        use crate::telemetry::{host::HostCollector, namespace::NsCollector, reference};
        let m = metrics();
        let (ns, hosts, gauges) = (NsCollector::new(), HostCollector::new(), Gauges::new());
        let process = prometheus::process_collector::ProcessCollector::for_self();
        let mut all = m.collectors();
        all.extend([&ns as &dyn Collector, &hosts, &gauges, &process]);
        let table = reference::markdown(&all);
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let (begin, end) = ("<!-- reference -->\n", "<!-- /reference -->");
        let (Some(b), Some(e)) = (doc.find(begin), doc.find(end)) else {
            panic!("{path}: no {begin} ... {end} block");
        };
        let current = &doc[b + begin.len()..e];
        if current != table {
            if std::env::var_os("UPDATE_DOCS").is_some() {
                let new = format!("{}{table}{}", &doc[..b + begin.len()], &doc[e..]);
                std::fs::write(path, new).unwrap();
            } else {
                panic!("{path} is out of date: UPDATE_DOCS=1 cargo test -p nvmf-target --lib metrics_reference");
            }
        }
    }
    use crate::daemon::status::{DaemonInfo, ListenerInfo, Status};

    #[test]
    fn the_gauges_say_what_status_says() {
        let st = Status {
            format: 1,
            daemon: DaemonInfo {
                version: "0".into(),
                pid: 1,
                uptime_seconds: 1,
            },
            listeners: vec![
                ListenerInfo {
                    transport: "rdma".into(),
                    address: "10.0.0.1".into(),
                    port: 4420,
                    ana: [(1, "optimized".to_string()), (2, "non-optimized".into())].into(),
                },
                ListenerInfo {
                    transport: "tcp".into(),
                    address: "fd00::1".into(),
                    port: 4420,
                    ana: [(1, "inaccessible".to_string())].into(),
                },
            ],
            subsystems: vec![],
            discovery_controllers: vec![],
        };
        let f = Families::new();
        f.set(&st, &["tcp:[fd00::1]:4420".into()], false);
        let text = {
            let fams = f.families();
            let mut out = Vec::new();
            prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &fams, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        for want in [
            "nvmf_target_healthy 0",
            "nvmf_target_ana_state{group=\"1\",listener=\"rdma:10.0.0.1:4420\",state=\"optimized\"} 1",
            "nvmf_target_ana_state{group=\"2\",listener=\"rdma:10.0.0.1:4420\",state=\"non_optimized\"} 1",
            "nvmf_target_ana_state{group=\"1\",listener=\"tcp:[fd00::1]:4420\",state=\"inaccessible\"} 1",
            "nvmf_target_listener_drained{listener=\"rdma:10.0.0.1:4420\"} 0",
            "nvmf_target_listener_drained{listener=\"tcp:[fd00::1]:4420\"} 1",
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
    }
}
