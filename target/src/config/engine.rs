//! `[target]`: the engine's workers, receive queues and pinned-memory budget
//! (each setting's name, type, default and check are the core's
//! `worker::config`; the daemon reads them under `target.`).

pub use crate::worker::config::*;

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> EngineSettings {
        EngineSettings::default()
    }

    #[test]
    fn defaults_fit_the_default_budget_for_eight_workers() {
        let e = EngineSettings {
            workers: Some(8),
            ..raw()
        }
        .resolve()
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
        let err = |r: EngineSettings| r.resolve().unwrap_err().remove(0);
        let (f, why) = err(EngineSettings {
            workers: Some(0),
            ..raw()
        });
        assert_eq!(f, "workers");
        assert!(why.contains("1..=256"), "{why}");
        let (f, _) = err(EngineSettings {
            srq_depth: Some(8),
            ..raw()
        });
        assert_eq!(f, "srq_depth");
        let (f, _) = err(EngineSettings {
            large_buffers: Some(0),
            ..raw()
        });
        assert_eq!(f, "large_buffers");
        let (f, why) = err(EngineSettings {
            light_load_spin_us: Some(200_000),
            ..raw()
        });
        assert_eq!(f, "light_load_spin_us");
        assert!(why.contains("0..=100000"), "{why}");
        let (f, _) = err(EngineSettings {
            max_pending_queues_per_peer: Some(0),
            ..raw()
        });
        assert_eq!(f, "max_pending_queues_per_peer");
        let (f, _) = err(EngineSettings {
            max_pending_queues: Some(0),
            ..raw()
        });
        assert_eq!(f, "max_pending_queues");
        let (f, why) = err(EngineSettings {
            max_keep_alive_ms: Some(10),
            ..raw()
        });
        assert_eq!(f, "max_keep_alive_ms");
        assert!(why.contains("out of range 1000..="), "{why}");
        let (f, _) = err(EngineSettings {
            max_controllers_per_host: Some(0),
            ..raw()
        });
        assert_eq!(f, "max_controllers_per_host");
        let (f, why) = err(EngineSettings {
            workers: Some(8),
            max_pinned_memory: Some(Size::Text("64M".into())),
            ..raw()
        });
        assert_eq!(f, "max_pinned_memory");
        assert!(
            why.contains("64 MiB is less than the 8 worker(s) need"),
            "{why}"
        );
        let (f, why) = err(EngineSettings {
            max_pinned_memory: Some(Size::Text("lots".into())),
            ..raw()
        });
        assert_eq!(f, "max_pinned_memory");
        assert!(why.contains("not a size"), "{why}");
    }

    #[test]
    fn worker_cpus_set_the_workers() {
        let e = EngineSettings {
            worker_cpus: Some(Cpus::Text("2-3".into())),
            ..raw()
        }
        .resolve()
        .unwrap();
        assert_eq!((e.workers, e.worker_cpus.of_worker(1)), (2, Some(3)));
        let e = EngineSettings {
            workers: Some(1),
            worker_cpus: Some(Cpus::One(5)),
            ..raw()
        }
        .resolve()
        .unwrap();
        assert_eq!((e.workers, e.worker_cpus.of_worker(0)), (1, Some(5)));
        let e = EngineSettings {
            worker_cpus: Some(Cpus::Many(vec![])),
            ..raw()
        }
        .resolve()
        .unwrap();
        assert_eq!(
            (e.workers, e.worker_cpus.is_empty()),
            (affinity_cpus(), true)
        );
        let err = |r: EngineSettings| r.resolve().unwrap_err().remove(0);
        let (f, why) = err(EngineSettings {
            workers: Some(4),
            worker_cpus: Some(Cpus::Many(vec![0, 1])),
            ..raw()
        });
        assert_eq!(f, "workers");
        assert!(why.contains("worker_cpus lists 2 CPU(s) (0,1)"), "{why}");
        let (f, why) = err(EngineSettings {
            worker_cpus: Some(Cpus::Text("3-1".into())),
            ..raw()
        });
        assert_eq!(f, "worker_cpus");
        assert!(why.contains("low to high"), "{why}");
        let (f, why) = err(EngineSettings {
            worker_cpus: Some(Cpus::Text("0-256".into())),
            ..raw()
        });
        assert_eq!(f, "worker_cpus");
        assert!(why.contains("257 CPUs listed, at most 256"), "{why}");
    }

    #[test]
    fn srq_off_needs_less_per_worker() {
        let e = EngineSettings {
            workers: Some(2),
            srq: Some(SrqMode::Off),
            max_pinned_memory: Some(Size::Bytes(24 << 20)),
            ..raw()
        }
        .resolve()
        .unwrap();
        assert_eq!(e.workers, 2);
        assert!(EngineSettings {
            workers: Some(2),
            max_pinned_memory: Some(Size::Bytes(24 << 20)),
            ..raw()
        }
        .resolve()
        .is_err());
    }
}
