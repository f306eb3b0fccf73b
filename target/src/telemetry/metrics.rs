//! Prometheus metrics: one process-wide registry, exported at `/metrics`
//! (see [`crate::telemetry::http`]).
//!
//! Labels stay low-cardinality: subsystem NQN, namespace id, operation, and
//! reason/status names — never hosts or queues. What every I/O counts is
//! kept per worker and summed when scraped: per namespace in
//! [`crate::counters::namespace`] (drawn by [`crate::telemetry::namespace`]),
//! the worker's in [`crate::counters::tally`] (published through
//! [`crate::telemetry::meter`]).

use std::sync::OnceLock;

use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Metric name prefix.
pub const PREFIX: &str = "nvmf_target";

/// All metrics of the process.
pub struct Metrics {
    /// The registry scraped at `/metrics`.
    pub registry: Registry,
    /// `backend_errors_total{subsystem,nsid}`.
    pub backend_errors: IntCounterVec,
    /// `reservation_conflicts_total{subsystem,nsid}`.
    pub reservation_conflicts: IntCounterVec,
    /// `failed_commands_total{subsystem,nsid,status}`.
    pub failed_commands: IntCounterVec,
    /// `qos_throttled_total{subsystem,nsid,host}`: I/Os that waited for a
    /// cap (host "" for the namespace's own).
    pub qos_throttled: IntCounterVec,
    /// `qos_throttled_seconds_total{subsystem,nsid,host}`: their waits.
    pub qos_throttled_seconds: prometheus::CounterVec,
    /// `controllers{subsystem,transport}`.
    pub controllers: IntGaugeVec,
    /// `queues{subsystem,type,transport}`.
    pub queues: IntGaugeVec,
    /// `connects_total{subsystem,type,transport}`.
    pub connects: IntCounterVec,
    /// `disconnects_total{reason,transport}`.
    pub disconnects: IntCounterVec,
    /// `connect_rejections_total{reason}`.
    pub rejections: IntCounterVec,
    /// `authentications_total{subsystem,result}`: "success" or the reason
    /// of a failure.
    pub authentications: IntCounterVec,
    /// `unauthenticated_controllers`: controllers of keyed hosts that have
    /// not authenticated yet (see [`crate::model::unproven`]).
    pub unauthenticated_controllers: IntGauge,
    /// `keep_alive_expirations_total{subsystem}`.
    pub keep_alive_expirations: IntCounterVec,
    /// `rdma_wc_errors_total{status}`.
    pub wc_errors: IntCounterVec,
    /// `rdma_operations_total{op}`.
    pub rdma_ops: IntCounterVec,
    /// `in_capsule_writes_total`.
    pub in_capsule_writes: IntCounter,
    /// `rbd_budget_waits_total`: librbd calls that waited for their
    /// cluster connection's operation budget (or went in pieces).
    pub rbd_budget_waits: IntCounter,
    /// `async_events_total{subsystem,type}`.
    pub async_events: IntCounterVec,
    /// `config_reloads_total{result}`.
    pub reloads: IntCounterVec,
    /// `control_changes_total{method,result}`: requests on the control
    /// socket that change something (result `ok` or `refused`).
    pub control_changes: IntCounterVec,
    /// `fencing_events_total{image,event}`: ownership of RBD images taken,
    /// handed over, taken by fencing another gateway, lost to fencing.
    pub fencing: IntCounterVec,
    /// `build_info{version}` (always 1).
    pub build_info: IntGaugeVec,
    /// `start_time_seconds`.
    pub start_time: IntGauge,
    /// The engine's workers, buffers and pinned memory.
    pub engine: EngineMetrics,
}

/// Metrics of the RDMA engine.
pub struct EngineMetrics {
    /// `pinned_bytes`: memory registered for RDMA or io_uring, as the kernel counts it.
    pub pinned_bytes: IntGauge,
    /// `pinned_budget_bytes`: the configured budget.
    pub pinned_budget: IntGauge,
    /// `buffer_pool_buffers{class}`: data buffers in all pools.
    pub pool_buffers: IntGaugeVec,
    /// `buffer_pool_in_use{class}`: data buffers held by requests.
    pub pool_in_use: IntGaugeVec,
    /// `buffer_pool_waits_total{class}`: requests that waited for a buffer.
    pub pool_waits: IntCounterVec,
    /// `worker_queues{worker}`: queue pairs served by each worker.
    pub worker_queues: IntGaugeVec,
    /// `worker_busy_seconds_total{worker}`: time a worker spent working (not
    /// sleeping nor idle-polling); its rate is the worker's busy ratio.
    pub worker_busy: prometheus::CounterVec,
    /// `worker_wakeups_total{worker}`: times a worker woke from sleep.
    pub worker_wakeups: IntCounterVec,
    /// `offloaded_send_batches_total`: batches of sends handed to a poster
    /// thread (each with a large RDMA WRITE, or behind one).
    pub offloaded_send_batches: prometheus::IntCounter,
    /// `zero_copy_sends_total{outcome}`: NVMe/TCP sends of a read's data
    /// from its pool buffer (`MSG_ZEROCOPY`): `sent`, `copied` (the kernel
    /// copied after all), `refused` (no socket memory to pin pages),
    /// `abandoned` (a closed connection's buffers the kernel never gave
    /// back, kept out of the pool).
    pub zero_copy: IntCounterVec,
}

impl Metrics {
    /// Every metric of this struct (the registry's collectors besides: the
    /// per-namespace, per-host and process ones), for the reference.
    pub fn collectors(&self) -> Vec<&dyn prometheus::core::Collector> {
        let e = &self.engine;
        vec![
            &self.backend_errors,
            &self.reservation_conflicts,
            &self.failed_commands,
            &self.qos_throttled,
            &self.qos_throttled_seconds,
            &self.controllers,
            &self.queues,
            &self.connects,
            &self.disconnects,
            &self.rejections,
            &self.authentications,
            &self.unauthenticated_controllers,
            &self.keep_alive_expirations,
            &self.wc_errors,
            &self.rdma_ops,
            &self.in_capsule_writes,
            &self.rbd_budget_waits,
            &self.async_events,
            &self.reloads,
            &self.control_changes,
            &self.fencing,
            &self.build_info,
            &self.start_time,
            &e.pinned_bytes,
            &e.pinned_budget,
            &e.pool_buffers,
            &e.pool_in_use,
            &e.pool_waits,
            &e.worker_queues,
            &e.worker_busy,
            &e.worker_wakeups,
            &e.offloaded_send_batches,
            &e.zero_copy,
        ]
    }

    /// Removes every series of subsystem `nqn`, which was removed: what a
    /// dashboard shows is what is served.
    pub fn forget_subsystem(&self, nqn: &str) {
        fn forget<T: prometheus::core::MetricVecBuilder>(
            v: &prometheus::core::MetricVec<T>,
            nqn: &str,
        ) {
            use prometheus::core::Collector;
            for family in v.collect() {
                for m in family.get_metric() {
                    let labels: std::collections::HashMap<&str, &str> = m
                        .get_label()
                        .iter()
                        .map(|l| (l.name(), l.value()))
                        .collect();
                    if labels.get("subsystem") == Some(&nqn) {
                        let _ = v.remove(&labels);
                    }
                }
            }
        }
        forget(&self.backend_errors, nqn);
        forget(&self.failed_commands, nqn);
        forget(&self.reservation_conflicts, nqn);
        forget(&self.controllers, nqn);
        forget(&self.queues, nqn);
        forget(&self.connects, nqn);
        forget(&self.authentications, nqn);
        forget(&self.keep_alive_expirations, nqn);
        forget(&self.async_events, nqn);
    }
}

fn name(n: &str) -> String {
    format!("{PREFIX}_{n}")
}

impl Metrics {
    fn new() -> Metrics {
        let registry = Registry::new();
        fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
            r.register(Box::new(c.clone()))
                .expect("metric names are unique constants");
            c
        }
        let counter = |n: &str, help: &str, labels: &[&str]| {
            reg(
                &registry,
                IntCounterVec::new(Opts::new(name(n), help), labels).expect("valid metric"),
            )
        };
        let gauge = |n: &str, help: &str, labels: &[&str]| {
            reg(
                &registry,
                IntGaugeVec::new(Opts::new(name(n), help), labels).expect("valid metric"),
            )
        };
        registry
            .register(Box::new(crate::telemetry::namespace::NsCollector::new()))
            .expect("metric names are unique constants");
        registry
            .register(Box::new(crate::telemetry::host::HostCollector::new()))
            .expect("metric names are unique constants");
        // process_cpu_seconds_total, process_resident_memory_bytes,
        // process_open_fds, ... as every Prometheus client exports them.
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("metric names are unique constants");
        let in_capsule_writes = reg(
            &registry,
            IntCounter::new(
                name("in_capsule_writes_total"),
                "Write commands whose data arrived in the command capsule",
            )
            .expect("valid metric"),
        );
        let rbd_budget_waits = reg(
            &registry,
            IntCounter::new(
                name("rbd_budget_waits_total"),
                "RBD calls started by their cluster connection's dispatcher thread, not the worker: the connection's operations in flight were at its budget (half of librados's objecter_inflight_ops and _op_bytes), or a long discard or write zeroes went in pieces",
            )
            .expect("valid metric"),
        );
        let unauthenticated_controllers = reg(
            &registry,
            IntGauge::new(
                name("unauthenticated_controllers"),
                "Controllers of hosts with a key that have not authenticated yet (they take none of the host's places)",
            )
            .expect("valid metric"),
        );
        let start_time = reg(
            &registry,
            IntGauge::new(
                name("start_time_seconds"),
                "Start time of the process since the Unix epoch",
            )
            .expect("valid metric"),
        );
        let m = Metrics {
            backend_errors: counter(
                "backend_errors_total",
                "I/O commands the backend failed",
                &["subsystem", "nsid"],
            ),
            reservation_conflicts: counter(
                "reservation_conflicts_total",
                "Commands refused with Reservation Conflict (I/O against another host's reservation, or a reservation command that conflicts)",
                &["subsystem", "nsid"],
            ),
            failed_commands: counter(
                "failed_commands_total",
                "Commands completed with an error status, by subsystem, namespace (\"\" for a command of none, or of a namespace the subsystem does not have) and status",
                &["subsystem", "nsid", "status"],
            ),
            qos_throttled: counter(
                "qos_throttled_total",
                "I/Os that waited for a QoS cap of their namespace (host \"\") or of their host on it",
                &["subsystem", "nsid", "host"],
            ),
            qos_throttled_seconds: reg(
                &registry,
                prometheus::CounterVec::new(
                    Opts::new(
                        name("qos_throttled_seconds_total"),
                        "Time I/Os waited for a QoS cap",
                    ),
                    &["subsystem", "nsid", "host"],
                )
                .expect("valid metric"),
            ),
            controllers: gauge(
                "controllers",
                "Connected controllers, by the transport of their admin queue",
                &["subsystem", "transport"],
            ),
            queues: gauge(
                "queues",
                "Connected queues (admin and I/O)",
                &["subsystem", "type", "transport"],
            ),
            connects: counter(
                "connects_total",
                "Queues connected (Fabrics Connect accepted)",
                &["subsystem", "type", "transport"],
            ),
            disconnects: counter(
                "disconnects_total",
                "Controllers disconnected, by reason",
                &["reason", "transport"],
            ),
            rejections: counter(
                "connect_rejections_total",
                "Connection attempts refused (RDMA-CM reject or Connect failure), by reason",
                &["reason"],
            ),
            authentications: counter(
                "authentications_total",
                "Queue authentications (DH-HMAC-CHAP), by subsystem and result (success or the failure reason)",
                &["subsystem", "result"],
            ),
            unauthenticated_controllers,
            keep_alive_expirations: counter(
                "keep_alive_expirations_total",
                "Controllers torn down because the keep-alive timer expired",
                &["subsystem"],
            ),
            wc_errors: counter(
                "rdma_wc_errors_total",
                "RDMA work completions with an error status (flushes excluded)",
                &["status"],
            ),
            rdma_ops: counter(
                "rdma_operations_total",
                "RDMA operations posted: read (host writes), write (host reads), send, send_with_invalidate",
                &["op"],
            ),
            in_capsule_writes,
            rbd_budget_waits,
            async_events: counter(
                "async_events_total",
                "Asynchronous events raised for controllers",
                &["subsystem", "type"],
            ),
            reloads: counter(
                "config_reloads_total",
                "Configuration reloads, by result",
                &["result"],
            ),
            control_changes: counter(
                "control_changes_total",
                "Live changes asked on the control socket, by method and result (ok, refused: nothing changed)",
                &["method", "result"],
            ),
            fencing: counter(
                "fencing_events_total",
                "Ownership of RBD images (pool/image): acquired, released (handed over), fenced_peer (taken from a gateway that did not answer, after blocklisting it), fenced (this gateway was blocklisted), recovered (reconnected after that)",
                &["image", "event"],
            ),
            build_info: gauge("build_info", "Build information (always 1)", &["version"]),
            start_time,
            engine: EngineMetrics {
                pinned_bytes: reg(
                    &registry,
                    IntGauge::new(
                        name("pinned_bytes"),
                        "Memory registered for RDMA or io_uring, as the kernel counts it (VmPin)",
                    )
                    .expect("valid metric"),
                ),
                pinned_budget: reg(
                    &registry,
                    IntGauge::new(
                        name("pinned_budget_bytes"),
                        "The pinned-memory budget ([target] max_pinned_memory)",
                    )
                    .expect("valid metric"),
                ),
                pool_buffers: gauge(
                    "buffer_pool_buffers",
                    "Data buffers in the workers' pools, by size class",
                    &["class"],
                ),
                pool_in_use: gauge(
                    "buffer_pool_in_use",
                    "Data buffers held by requests, by size class",
                    &["class"],
                ),
                pool_waits: counter(
                    "buffer_pool_waits_total",
                    "Requests that waited for a data buffer, by size class",
                    &["class"],
                ),
                worker_queues: gauge(
                    "worker_queues",
                    "Queue pairs served by each worker",
                    &["worker"],
                ),
                worker_busy: reg(
                    &registry,
                    prometheus::CounterVec::new(
                        Opts::new(
                            name("worker_busy_seconds_total"),
                            "Time each worker spent working (rate = busy ratio)",
                        ),
                        &["worker"],
                    )
                    .expect("valid metric"),
                ),
                zero_copy: counter(
                    "zero_copy_sends_total",
                    "NVMe/TCP sends of read data from its buffer (MSG_ZEROCOPY): sent, copied \
                     (the kernel copied after all: the connection stops), refused (no socket memory \
                     to pin pages: the connection stops), abandoned (buffers a \
                     closed connection's kernel never gave back, kept out of the pool)",
                    &["outcome"],
                ),
                worker_wakeups: counter(
                    "worker_wakeups_total",
                    "Times each worker woke from sleep",
                    &["worker"],
                ),
                offloaded_send_batches: reg(
                    &registry,
                    prometheus::IntCounter::new(
                        name("offloaded_send_batches_total"),
                        "Batches of sends handed to a poster thread (a large RDMA WRITE on a \
                         software RDMA device, [target] send_offload)",
                    )
                    .expect("valid metric"),
                ),
            },
            registry,
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        m.start_time.set(now.as_secs() as i64);
        m
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        // Writing to a Vec cannot fail; a metric that cannot encode is skipped.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        // The core's events count here from the first use on.
        super::meter::install();
        Metrics::new()
    })
}

/// The totals of the run, as the one line the daemon logs when it stops:
/// `STATS send_with_inv=N sends=N in_capsule_writes=N rdma_reads=N
/// rdma_writes=N wc_errors=N failed_commands=N connect_rejections=N
/// offloaded_batches=N` (the workers published their tallies by then).
pub fn summary_line() -> String {
    use prometheus::core::Collector;
    let m = metrics();
    let op = |o: &str| m.rdma_ops.with_label_values(&[o]).get();
    let sum = |v: &IntCounterVec| -> u64 {
        v.collect()
            .iter()
            .flat_map(|f| f.get_metric())
            .map(|x| x.get_counter().get_value() as u64)
            .sum()
    };
    format!(
        "STATS send_with_inv={} sends={} in_capsule_writes={} rdma_reads={} rdma_writes={} \
         wc_errors={} failed_commands={} connect_rejections={} offloaded_batches={}",
        op("send_with_invalidate"),
        op("send"),
        m.in_capsule_writes.get(),
        op("read"),
        op("write"),
        sum(&m.wc_errors),
        sum(&m.failed_commands),
        sum(&m.rejections),
        m.engine.offloaded_send_batches.get(),
    )
}

/// A short label for a Connect refusal or RDMA-CM reject.
pub fn reject(reason: &str) {
    metrics().rejections.with_label_values(&[reason]).inc();
}

/// Counts `n` NVMe/TCP zero-copy sends (or buffers) by `outcome`.
pub fn zero_copy(outcome: &str, n: u64) {
    metrics()
        .engine
        .zero_copy
        .with_label_values(&[outcome])
        .inc_by(n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::Collector;

    /// Every metric the shipped dashboard and alert rules query is one the
    /// target exports (checked against the collectors' descriptions, which
    /// exist before any series does).
    #[test]
    fn dashboard_and_alerts_query_real_metrics() {
        let m = metrics();
        let mut known = std::collections::BTreeSet::new();
        let collectors: [&dyn Collector; 3] = [
            &crate::telemetry::namespace::NsCollector::new(),
            &crate::telemetry::host::HostCollector::new(),
            &prometheus::process_collector::ProcessCollector::for_self(),
        ];
        for c in collectors {
            for d in c.desc() {
                known.insert(d.fq_name.clone());
            }
        }
        for f in m.registry.gather() {
            known.insert(f.name().to_string());
        }
        known.extend(crate::daemon::gauges::names());
        let vecs = m.collectors();
        for c in vecs {
            for d in c.desc() {
                known.insert(d.fq_name.clone());
            }
        }
        let files = [
            (
                "etc/grafana/nvmf-target.json",
                include_str!("../../../etc/grafana/nvmf-target.json"),
            ),
            (
                "etc/prometheus/nvmf-target-alerts.yml",
                include_str!("../../../etc/prometheus/nvmf-target-alerts.yml"),
            ),
        ];
        for (file, text) in files {
            let mut used = 0;
            for prefix in ["nvmf_target_", "process_"] {
                for (i, _) in text.match_indices(prefix) {
                    let name: String = text[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    // Prose names families (nvmf_target_buffer_pool_*).
                    if name.ends_with('_') {
                        continue;
                    }
                    let base = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s).filter(|b| known.contains(*b)))
                        .unwrap_or(&name);
                    assert!(
                        known.contains(base),
                        "{file} queries {name}, which is not exported"
                    );
                    used += 1;
                }
            }
            assert!(used > 5, "{file}: no metric found");
        }
    }

    #[test]
    fn a_removed_subsystem_leaves_no_series() {
        let m = metrics();
        let (gone, kept) = (
            "nqn.2026-11.io.test:forget-gone",
            "nqn.2026-11.io.test:forget-kept",
        );
        for s in [gone, kept] {
            m.controllers.with_label_values(&[s, "tcp"]).set(1);
            m.connects.with_label_values(&[s, "io", "rdma"]).inc();
            m.async_events.with_label_values(&[s, "ns_changed"]).inc();
        }
        m.forget_subsystem(gone);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&m.registry.gather())
            .unwrap();
        assert!(!text.contains(gone), "{text}");
        assert_eq!(text.matches(kept).count(), 3, "{text}");
        m.forget_subsystem(kept);
    }
}
