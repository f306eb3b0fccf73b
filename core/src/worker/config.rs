//! The engine's settings: its workers, receive queues, pinned-memory budget
//! and the caps on peers not yet proven (read from `[target]` by the
//! daemon's configuration).

use serde::Deserialize;

pub use super::cpus::CpuList;

pub use crate::base::shard::MAX_WORKERS;

/// Whether queue pairs share a receive queue per worker and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrqMode {
    /// Use shared receive queues when the device has them.
    Auto,
    /// Require them (a device without is refused).
    On,
    /// Each queue pair posts its own receive buffers.
    Off,
}

/// Whether poster threads post the sends that carry a large RDMA WRITE
/// (see `transport::rdma::poster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendOffload {
    /// For software RDMA devices (soft-RoCE, soft-iWARP), whose post call
    /// runs the protocol; never for hardware, whose post call rings a doorbell.
    Auto,
    /// For every device.
    On,
    /// Never: workers post all their sends.
    Off,
}

/// The engine's settings, each spelled once: its name (the `[target]` key),
/// type, default and check make [`EngineConfig`], its `Default`, and
/// [`EngineSettings`] (as a file has them, each optional) with
/// [`EngineSettings::resolve`]. A type read otherwise from the file follows
/// `|` (a size: `"192M"` or a number of bytes).
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $ty:ty $(| $raw:ty)? = $default:expr, $check:expr;
    )*) => {
        /// The engine's settings (`[target]` in the daemon's configuration).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct EngineConfig {
            $($(#[doc = $doc])* pub $name: $ty,)*
        }

        impl Default for EngineConfig {
            fn default() -> Self {
                EngineConfig { $($name: $default,)* }
            }
        }

        /// The engine's settings as a configuration file has them: each
        /// optional (its default when absent), unchecked.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct EngineSettings {
            $($(#[doc = $doc])* pub $name: Option<settings!(@raw $ty $(, $raw)?)>,)*
        }

        impl EngineSettings {
            /// The settings' names.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Each setting given (or its default), checked on its own.
            fn each(self) -> (EngineConfig, Vec<(&'static str, String)>) {
                let d = EngineConfig::default();
                let mut errors = Vec::new();
                let e = EngineConfig {
                    $($name: {
                        let check: fn(&$ty) -> Result<(), String> = $check;
                        let v = match self.$name.map(FromSetting::from_setting) {
                            None => d.$name,
                            Some(Ok(v)) => v,
                            Some(Err(why)) => {
                                errors.push((stringify!($name), why));
                                d.$name
                            }
                        };
                        if let Err(why) = check(&v) {
                            errors.push((stringify!($name), why));
                        }
                        v
                    },)*
                };
                (e, errors)
            }
        }
    };
    (@raw $ty:ty) => { $ty };
    (@raw $ty:ty, $raw:ty) => { $raw };
}

/// A setting's value from what the file has.
trait FromSetting<R>: Sized {
    fn from_setting(r: R) -> Result<Self, String>;
}

/// CPUs as a file has them: `3`, `[2, 3]` or `"2-3,6"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a CPU number, a list of them, or text as \"2-3,6\""
)]
pub enum Cpus {
    /// One CPU.
    One(usize),
    /// Several.
    Many(Vec<usize>),
    /// A list as `taskset -c` takes it.
    Text(String),
}

impl FromSetting<Cpus> for CpuList {
    fn from_setting(r: Cpus) -> Result<CpuList, String> {
        match r {
            Cpus::One(c) => CpuList::of([c]),
            Cpus::Many(v) => CpuList::of(v),
            Cpus::Text(t) => CpuList::parse(&t),
        }
    }
}

impl<T> FromSetting<T> for T {
    fn from_setting(r: T) -> Result<T, String> {
        Ok(r)
    }
}

/// A size as a file has it: a number of bytes or text (`"192M"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// Bytes.
    Bytes(u64),
    /// As people write it (`sizes::parse`).
    Text(String),
}

impl Size {
    /// Its bytes, or why it is not a size.
    pub fn bytes(self) -> Result<u64, String> {
        match self {
            Size::Bytes(v) => Ok(v),
            Size::Text(t) => sizes::parse(&t),
        }
    }
}

impl FromSetting<Size> for u64 {
    fn from_setting(r: Size) -> Result<u64, String> {
        r.bytes()
    }
}

/// Any value.
fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// `v` within `r`; `unit` is said after the range.
fn within(v: u64, r: std::ops::RangeInclusive<u64>, unit: &str) -> Result<(), String> {
    if r.contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{v} is out of range {}..={}{unit}",
            r.start(),
            r.end()
        ))
    }
}

settings! {
    /// Worker (poll group) threads.
    workers: usize = affinity_cpus(), |v| within(*v as u64, 1..=MAX_WORKERS as u64, "");
    /// CPUs to pin the workers to, one worker each (`3`, `[2, 3]` or
    /// `"2-3,6"`); none: not pinned. Sets `workers` to their number.
    worker_cpus: CpuList | Cpus = CpuList::default(), |v| match v.len() {
        n if n > MAX_WORKERS => Err(format!("{n} CPUs listed, at most {MAX_WORKERS} (one worker each)")),
        _ => Ok(()),
    };
    /// Shared receive queues.
    srq: SrqMode = SrqMode::Auto, any;
    /// Receive buffers per shared receive queue (one per worker and device).
    srq_depth: u32 = DEFAULT_SRQ_DEPTH, |v| within((*v).into(), 16..=65536, "");
    /// Small (8 KiB) data buffers per worker and device.
    small_buffers: u32 = DEFAULT_SMALL_BUFFERS, any;
    /// Large (128 KiB) data buffers per worker and device.
    large_buffers: u32 = DEFAULT_LARGE_BUFFERS, |v| match v {
        0 => Err("must be at least 1 (a transfer of the largest size needs one)".into()),
        _ => Ok(()),
    };
    /// Bytes of memory the target may pin in all (registered for RDMA or
    /// io_uring).
    max_pinned_memory: u64 | Size = DEFAULT_MAX_PINNED, any;
    /// Large sends posted by poster threads.
    send_offload: SendOffload = SendOffload::Auto, any;
    /// The longest a worker polls (µs) after its last work while at most
    /// one I/O is in flight; it polls about as long as its hosts take to send
    /// the next command (see `worker::polling`); 0: off.
    light_load_spin_us: u64 = DEFAULT_LIGHT_LOAD_SPIN_US, |v| within(*v, 0..=100_000, " (µs)");
    /// Queues not yet connected (no successful Fabrics Connect) one peer
    /// address may hold (see `base::admission`).
    max_pending_queues_per_peer: u32 = DEFAULT_MAX_PENDING_PER_PEER,
        |v| within((*v).into(), 1..=65536, "");
    /// Queues not yet connected the target holds in all.
    max_pending_queues: u32 = DEFAULT_MAX_PENDING, |v| within((*v).into(), 1..=65536, "");
    /// Keep-alive timeouts above this (ms) are not waited out: a quiet host
    /// is probed at the transport's level, as one without keep-alive (see
    /// `queue::timers`).
    max_keep_alive_ms: u32 = DEFAULT_MAX_KEEP_ALIVE_MS,
        |v| within((*v).into(), 1000..=u32::MAX as u64, " (ms)");
    /// Controllers one host NQN may have in one subsystem (discovery
    /// controllers: one peer address).
    max_controllers_per_host: u32 = DEFAULT_MAX_CONTROLLERS_PER_HOST,
        |v| within((*v).into(), 1..=65519, "");
    /// Controllers of keyed hosts not yet authenticated that one peer
    /// address may hold (see `model::unproven`).
    max_unauthenticated_controllers_per_peer: u32 = crate::model::unproven::DEFAULT_PER_PEER,
        |v| within((*v).into(), 1..=65519, "");
    /// Controllers not yet authenticated the target holds in all.
    max_unauthenticated_controllers: u32 = crate::model::unproven::DEFAULT_TOTAL,
        |v| within((*v).into(), 1..=65519, "");
    /// How long (ms) a host's controllers keep serving after its
    /// DH-HMAC-CHAP key was replaced, for its queues to authenticate again
    /// with the new key; 0: they end at once.
    key_rotation_grace_ms: u32 = DEFAULT_KEY_ROTATION_GRACE_MS,
        |v| within((*v).into(), 0..=600_000, " (ms)");
}

impl EngineSettings {
    /// The settings given, or their defaults, checked: each error names the
    /// setting and why; then the pinned-memory budget against what the
    /// workers need before any host connects.
    pub fn resolve(self) -> Result<EngineConfig, Vec<(&'static str, String)>> {
        let workers_given = self.workers;
        let (mut e, errors) = self.each();
        if !errors.is_empty() {
            return Err(errors);
        }
        if !e.worker_cpus.is_empty() {
            match workers_given {
                Some(n) if n != e.worker_cpus.len() => {
                    return Err(vec![(
                        "workers",
                        format!(
                            "{n}, but worker_cpus lists {} CPU(s) ({}): one worker runs on each; \
                             leave workers out",
                            e.worker_cpus.len(),
                            e.worker_cpus
                        ),
                    )]);
                }
                _ => e.workers = e.worker_cpus.len(),
            }
        }
        let need = e.workers as u64 * e.per_worker_bytes(e.srq != SrqMode::Off);
        if need > e.max_pinned_memory {
            return Err(vec![(
                "max_pinned_memory",
                format!(
                    "{} MiB is less than the {} worker(s) need before any host connects ({} MiB: \
                     data and shared receive buffers, each counted twice, as RDMA and io_uring \
                     registrations); raise it, or lower workers, small_buffers, large_buffers or srq_depth",
                    e.max_pinned_memory >> 20,
                    e.workers,
                    need.div_ceil(1 << 20)
                ),
            )]);
        }
        Ok(e)
    }
}

/// Bytes of a small data buffer.
pub const SMALL_BUFFER: usize = 8 * 1024;
/// Default receive buffers per shared receive queue.
pub const DEFAULT_SRQ_DEPTH: u32 = 512;
/// Default small buffers per worker.
pub const DEFAULT_SMALL_BUFFERS: u32 = 256;
/// Default large buffers per worker.
pub const DEFAULT_LARGE_BUFFERS: u32 = 32;
/// Default polling window under light load (µs).
pub const DEFAULT_LIGHT_LOAD_SPIN_US: u64 = 2000;
/// Default cap of pending queues per peer address.
pub const DEFAULT_MAX_PENDING_PER_PEER: u32 = 16;
/// Default cap of pending queues in all.
pub const DEFAULT_MAX_PENDING: u32 = 64;
/// Default cap of controllers per host NQN and subsystem.
pub const DEFAULT_MAX_CONTROLLERS_PER_HOST: u32 = 16;
/// Default grace after a key rotation (ms).
pub const DEFAULT_KEY_ROTATION_GRACE_MS: u32 = 10_000;
/// Default keep-alive bound (ms).
pub const DEFAULT_MAX_KEEP_ALIVE_MS: u32 = 120_000;
/// Default pinned-memory budget.
pub const DEFAULT_MAX_PINNED: u64 = 192 << 20;

/// The CPUs this process may run on (its affinity mask), at least 1.
pub fn affinity_cpus() -> usize {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .count()
            .max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

impl EngineConfig {
    /// Pinned bytes one worker needs per RDMA device, before any connection:
    /// its data buffers and its shared receive queue's buffers, each counted
    /// twice (registered as a memory region and as io_uring fixed buffers,
    /// and the kernel counts both).
    pub fn per_worker_bytes(&self, srq: bool) -> u64 {
        let pool = self.small_buffers as u64 * SMALL_BUFFER as u64
            + self.large_buffers as u64 * crate::MAX_IO_SIZE as u64;
        let recv = if srq {
            self.srq_depth as u64 * crate::RECV_SLOT_BYTES as u64
        } else {
            0
        };
        2 * (pool + recv)
    }
}
