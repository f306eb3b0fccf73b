//! `[target]`: the engine's workers, receive queues and pinned-memory budget.

use serde::Deserialize;

pub use crate::worker::config::*;

/// Fields of `[target]` that configure the engine, as read.
#[derive(Deserialize, Default)]
pub(super) struct RawEngine {
    pub workers: Option<usize>,
    pub srq: Option<SrqMode>,
    pub srq_depth: Option<u32>,
    pub small_buffers: Option<u32>,
    pub large_buffers: Option<u32>,
    pub max_pinned_memory: Option<super::SizeValue>,
    pub send_offload: Option<SendOffload>,
    pub light_load_spin_us: Option<u64>,
    pub max_pending_queues_per_peer: Option<u32>,
    pub max_pending_queues: Option<u32>,
    pub max_keep_alive_ms: Option<u32>,
    pub max_controllers_per_host: Option<u32>,
    pub max_unauthenticated_controllers_per_peer: Option<u32>,
    pub max_unauthenticated_controllers: Option<u32>,
    pub key_rotation_grace_ms: Option<u32>,
}

impl RawEngine {
    /// Validates; each error names the field (under `target.`) and the reason.
    pub(super) fn validate(self) -> Result<EngineConfig, Vec<(String, String)>> {
        let d = EngineConfig::default();
        let f = |n: &str| format!("target.{n}");
        let mut errors = Vec::new();
        // A value (or its default) checked against its range; `unit` is said
        // after the range.
        let mut ranged = |name: &str, v: u64, r: std::ops::RangeInclusive<u64>, unit: &str| {
            if !r.contains(&v) {
                errors.push((
                    f(name),
                    format!("{v} is out of range {}..={}{unit}", r.start(), r.end()),
                ));
            }
            v
        };
        let workers = ranged(
            "workers",
            self.workers.unwrap_or(d.workers) as u64,
            1..=MAX_WORKERS as u64,
            "",
        ) as usize;
        let srq_depth = ranged(
            "srq_depth",
            self.srq_depth.unwrap_or(d.srq_depth).into(),
            16..=65536,
            "",
        ) as u32;
        let light_load_spin_us = ranged(
            "light_load_spin_us",
            self.light_load_spin_us.unwrap_or(d.light_load_spin_us),
            0..=100_000,
            " (µs)",
        );
        let per_peer = self
            .max_pending_queues_per_peer
            .unwrap_or(d.max_pending_queues_per_peer);
        ranged(
            "max_pending_queues_per_peer",
            per_peer.into(),
            1..=65536,
            "",
        );
        let pending = self.max_pending_queues.unwrap_or(d.max_pending_queues);
        ranged("max_pending_queues", pending.into(), 1..=65536, "");
        let max_keep_alive_ms = self.max_keep_alive_ms.unwrap_or(d.max_keep_alive_ms);
        ranged(
            "max_keep_alive_ms",
            max_keep_alive_ms.into(),
            1000..=u32::MAX as u64,
            " (ms)",
        );
        let key_rotation_grace_ms = self
            .key_rotation_grace_ms
            .unwrap_or(d.key_rotation_grace_ms);
        ranged(
            "key_rotation_grace_ms",
            key_rotation_grace_ms.into(),
            0..=600_000,
            " (ms)",
        );
        let max_controllers_per_host = self
            .max_controllers_per_host
            .unwrap_or(d.max_controllers_per_host);
        ranged(
            "max_controllers_per_host",
            max_controllers_per_host.into(),
            1..=65519,
            "",
        );
        let unauth_per_peer = self
            .max_unauthenticated_controllers_per_peer
            .unwrap_or(d.max_unauthenticated_controllers_per_peer);
        ranged(
            "max_unauthenticated_controllers_per_peer",
            unauth_per_peer.into(),
            1..=65519,
            "",
        );
        let unauth = self
            .max_unauthenticated_controllers
            .unwrap_or(d.max_unauthenticated_controllers);
        ranged(
            "max_unauthenticated_controllers",
            unauth.into(),
            1..=65519,
            "",
        );
        let small_buffers = self.small_buffers.unwrap_or(d.small_buffers);
        let large_buffers = self.large_buffers.unwrap_or(d.large_buffers);
        if large_buffers == 0 {
            errors.push((
                f("large_buffers"),
                "must be at least 1 (a transfer of the largest size needs one)".into(),
            ));
        }
        let max_pinned_memory = match self.max_pinned_memory {
            None => Some(d.max_pinned_memory),
            Some(super::SizeValue::Int(v)) => Some(v),
            Some(super::SizeValue::Text(t)) => match sizes::parse(&t) {
                Ok(v) => Some(v),
                Err(r) => {
                    errors.push((f("max_pinned_memory"), r));
                    None
                }
            },
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let e = EngineConfig {
            workers,
            srq: self.srq.unwrap_or(d.srq),
            srq_depth,
            small_buffers,
            large_buffers,
            max_pinned_memory: max_pinned_memory.unwrap_or(d.max_pinned_memory),
            send_offload: self.send_offload.unwrap_or(d.send_offload),
            light_load_spin_us,
            max_pending_queues_per_peer: per_peer,
            max_pending_queues: pending,
            max_keep_alive_ms,
            max_controllers_per_host,
            max_unauthenticated_controllers_per_peer: unauth_per_peer,
            max_unauthenticated_controllers: unauth,
            key_rotation_grace_ms,
        };
        let need = e.workers as u64 * e.per_worker_bytes(e.srq != SrqMode::Off);
        if need > e.max_pinned_memory {
            errors.push((
                f("max_pinned_memory"),
                format!(
                    "{} MiB is less than the {} worker(s) need before any host connects ({} MiB: \
                     data and shared receive buffers, each counted twice, as RDMA and io_uring \
                     registrations); raise it, or lower workers, small_buffers, large_buffers or srq_depth",
                    e.max_pinned_memory >> 20,
                    e.workers,
                    need.div_ceil(1 << 20)
                ),
            ));
            return Err(errors);
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawEngine {
        RawEngine::default()
    }

    #[test]
    fn defaults_fit_the_default_budget_for_eight_workers() {
        let e = RawEngine {
            workers: Some(8),
            ..raw()
        }
        .validate()
        .unwrap();
        assert_eq!(e.srq, SrqMode::Auto);
        let need = 8 * e.per_worker_bytes(true);
        assert!(need <= e.max_pinned_memory, "{need}");
        assert!(e.max_pinned_memory < 256 << 20);
        // 2 x (256 x 8 KiB + 32 x 128 KiB + 512 x (64 B + 8 KiB))
        assert_eq!(
            e.per_worker_bytes(true),
            2 * (2 << 20) + 2 * (4 << 20) + 2 * 512 * 8256
        );
        assert_eq!(e.per_worker_bytes(false), 12 << 20);
    }

    #[test]
    fn bad_values_name_their_field() {
        let err = |r: RawEngine| r.validate().unwrap_err().remove(0);
        let (f, why) = err(RawEngine {
            workers: Some(0),
            ..raw()
        });
        assert_eq!(f, "target.workers");
        assert!(why.contains("1..=256"), "{why}");
        let (f, _) = err(RawEngine {
            srq_depth: Some(8),
            ..raw()
        });
        assert_eq!(f, "target.srq_depth");
        let (f, _) = err(RawEngine {
            large_buffers: Some(0),
            ..raw()
        });
        assert_eq!(f, "target.large_buffers");
        let (f, why) = err(RawEngine {
            light_load_spin_us: Some(200_000),
            ..raw()
        });
        assert_eq!(f, "target.light_load_spin_us");
        assert!(why.contains("0..=100000"), "{why}");
        let (f, _) = err(RawEngine {
            max_pending_queues_per_peer: Some(0),
            ..raw()
        });
        assert_eq!(f, "target.max_pending_queues_per_peer");
        let (f, _) = err(RawEngine {
            max_pending_queues: Some(0),
            ..raw()
        });
        assert_eq!(f, "target.max_pending_queues");
        let (f, why) = err(RawEngine {
            max_keep_alive_ms: Some(10),
            ..raw()
        });
        assert_eq!(f, "target.max_keep_alive_ms");
        assert!(why.contains("out of range 1000..="), "{why}");
        let (f, _) = err(RawEngine {
            max_controllers_per_host: Some(0),
            ..raw()
        });
        assert_eq!(f, "target.max_controllers_per_host");
        let (f, why) = err(RawEngine {
            workers: Some(8),
            max_pinned_memory: Some(crate::config::SizeValue::Text("64M".into())),
            ..raw()
        });
        assert_eq!(f, "target.max_pinned_memory");
        assert!(
            why.contains("64 MiB is less than the 8 worker(s) need"),
            "{why}"
        );
        let (f, why) = err(RawEngine {
            max_pinned_memory: Some(crate::config::SizeValue::Text("lots".into())),
            ..raw()
        });
        assert_eq!(f, "target.max_pinned_memory");
        assert!(why.contains("not a size"), "{why}");
    }

    #[test]
    fn srq_off_needs_less_per_worker() {
        let e = RawEngine {
            workers: Some(2),
            srq: Some(SrqMode::Off),
            max_pinned_memory: Some(crate::config::SizeValue::Int(24 << 20)),
            ..raw()
        }
        .validate()
        .unwrap();
        assert_eq!(e.workers, 2);
        assert!(RawEngine {
            workers: Some(2),
            max_pinned_memory: Some(crate::config::SizeValue::Int(24 << 20)),
            ..raw()
        }
        .validate()
        .is_err());
    }
}
