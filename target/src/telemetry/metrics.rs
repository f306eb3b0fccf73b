//! Prometheus metrics: one process-wide registry, exported at `/metrics`
//! (see [`crate::telemetry::http`]).
//!
//! Labels stay low-cardinality: subsystem NQN, namespace id, operation, and
//! reason/status names — never hosts or queues. What every I/O counts is
//! kept per worker and summed when scraped: per namespace in
//! [`crate::telemetry::namespace`], the transport's in [`crate::telemetry::tally`].

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
    /// `failed_commands_total{status}`.
    pub failed_commands: IntCounterVec,
    /// `controllers{subsystem}`.
    pub controllers: IntGaugeVec,
    /// `queues{subsystem,type}`.
    pub queues: IntGaugeVec,
    /// `connects_total{subsystem,type}`.
    pub connects: IntCounterVec,
    /// `disconnects_total{reason}`.
    pub disconnects: IntCounterVec,
    /// `connect_rejections_total{reason}`.
    pub rejections: IntCounterVec,
    /// `authentications_total{subsystem,result}`: "success" or the reason
    /// of a failure.
    pub authentications: IntCounterVec,
    /// `keep_alive_expirations_total{subsystem}`.
    pub keep_alive_expirations: IntCounterVec,
    /// `rdma_wc_errors_total{status}`.
    pub wc_errors: IntCounterVec,
    /// `rdma_operations_total{op}`.
    pub rdma_ops: IntCounterVec,
    /// `in_capsule_writes_total`.
    pub in_capsule_writes: IntCounter,
    /// `async_events_total{subsystem,type}`.
    pub async_events: IntCounterVec,
    /// `config_reloads_total{result}`.
    pub reloads: IntCounterVec,
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
        let in_capsule_writes = reg(
            &registry,
            IntCounter::new(
                name("in_capsule_writes_total"),
                "Write commands whose data arrived in the command capsule",
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
                "Commands completed with an error status, by status",
                &["status"],
            ),
            controllers: gauge(
                "controllers",
                "Connected controllers",
                &["subsystem"],
            ),
            queues: gauge(
                "queues",
                "Connected queues (admin and I/O)",
                &["subsystem", "type"],
            ),
            connects: counter(
                "connects_total",
                "Queues connected (Fabrics Connect accepted)",
                &["subsystem", "type"],
            ),
            disconnects: counter(
                "disconnects_total",
                "Controllers disconnected, by reason",
                &["reason"],
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
    M.get_or_init(Metrics::new)
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
