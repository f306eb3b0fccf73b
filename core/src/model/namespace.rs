//! Namespaces: size, block size, identifiers, and what backs them.

use std::sync::atomic::{AtomicU64, Ordering};

use nvme::identify::{nidt, IdentifyNamespace, NsDescriptor};

use std::sync::Arc;

use crate::backend::Backend;
use crate::counters::namespace::NsMetrics;

/// A namespace exported by a subsystem.
#[derive(Debug)]
pub struct Namespace {
    /// Namespace id.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// log2(block_size).
    pub block_shift: u32,
    /// Size in logical blocks (the store may grow or shrink: see
    /// [`Namespace::refresh_size`]).
    blocks: AtomicU64,
    /// Writes are refused.
    pub readonly: bool,
    /// Its ANA group.
    pub ana_group: u32,
    /// NGUID.
    pub nguid: [u8; 16],
    /// UUID (RFC 4122 version 4 layout when derived).
    pub uuid: [u8; 16],
    /// EUI-64 (zero: none).
    pub eui64: [u8; 8],
    /// What backs it.
    pub backend: Backend,
    /// Its metrics series.
    pub metrics: NsMetrics,
    /// A flush of its page cache failed: see [`Namespace::writeback_lost`].
    writeback_lost: std::sync::atomic::AtomicBool,
    /// Its reservations (shared with the namespace it replaces over the same
    /// store, on a reload).
    pub resv: std::sync::Arc<crate::reservation::NsReservations>,
    /// What makes Compare and Write atomic against this target's writes
    /// (shared as above).
    pub gate: std::sync::Arc<crate::request::write_gate::WriteGate>,
    /// Where its blocking work runs, in order (shared as above).
    pub lane: std::sync::Arc<crate::backend::offload::Lane>,
    /// Its failed I/O, logged at most once per [`ERROR_LOG_EVERY`] (a
    /// failing store fails every I/O; the metrics count each).
    pub error_log: crate::base::log_limit::Repeats,
    /// The hosts that see it (`None`: every host of the subsystem); changed
    /// live by attach and detach.
    hosts: arc_swap::ArcSwapOption<Vec<String>>,
    /// Its QoS caps (changed live).
    qos: arc_swap::ArcSwap<crate::model::qos::NsQos>,
    /// Whether it has any cap (the data path's first look).
    qos_on: std::sync::atomic::AtomicBool,
}

/// How often a namespace's failing I/O is logged, at most.
pub const ERROR_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// 64-bit FNV-1a with a seed, for stable identifiers.
pub fn fnv64(seed: u64, data: &[u8]) -> u64 {
    let mut h = 0xcbf29ce484222325u64 ^ seed;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Stable 16 identifier bytes from a key.
pub fn id128(key: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv64(0x5eed_0001, key.as_bytes()).to_be_bytes());
    out[8..].copy_from_slice(&fnv64(0x5eed_0002, key.as_bytes()).to_be_bytes());
    out
}

impl Namespace {
    /// Builds a namespace of `size_bytes` over `backend`.
    pub fn new(
        subnqn: &str,
        nsid: u32,
        backend: Backend,
        size_bytes: u64,
        block_size: u32,
        readonly: bool,
    ) -> Namespace {
        let ids = crate::model::identity::Ids::derived(subnqn, nsid, &backend.identity());
        Namespace {
            nsid,
            block_size,
            block_shift: block_size.trailing_zeros(),
            blocks: AtomicU64::new(size_bytes / block_size as u64),
            readonly,
            ana_group: 1,
            nguid: ids.nguid,
            uuid: ids.uuid,
            eui64: ids.eui64,
            backend,
            metrics: NsMetrics::new(subnqn, nsid),
            writeback_lost: std::sync::atomic::AtomicBool::new(false),
            resv: std::sync::Arc::new(crate::reservation::NsReservations::in_memory(true)),
            gate: Default::default(),
            lane: Default::default(),
            error_log: crate::base::log_limit::Repeats::new(ERROR_LOG_EVERY),
            hosts: arc_swap::ArcSwapOption::empty(),
            qos: Default::default(),
            qos_on: Default::default(),
        }
    }

    /// What names its state on disk (its reservations): its NGUID, or its
    /// UUID when it has none.
    pub fn store_id(&self) -> [u8; 16] {
        if self.nguid != [0; 16] {
            self.nguid
        } else {
            self.uuid
        }
    }

    /// Its QoS caps, if it has any.
    #[inline]
    pub fn qos(&self) -> Option<Arc<crate::model::qos::NsQos>> {
        if !self.qos_on.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.qos.load_full())
    }

    /// Takes new QoS caps, at once (a cap that stays keeps its limit: the
    /// workers' buckets go on).
    pub fn set_qos(
        &self,
        subsystem: &str,
        all: crate::model::qos::QosCaps,
        hosts: &[crate::model::qos::HostCaps],
    ) {
        let q = Arc::new(self.qos.load().with(subsystem, self.nsid, all, hosts));
        self.qos_on.store(!q.is_empty(), Ordering::Relaxed);
        self.qos.store(q.clone());
        if let Some(s) = self.backend.shared() {
            s.qos_changed(&q);
        }
    }

    /// Whether the host `hostnqn` sees it: to any other host it does not
    /// exist (Identify leaves it out, commands to it fail as to a
    /// namespace that does not exist).
    pub fn visible_to(&self, hostnqn: &str) -> bool {
        match &*self.hosts.load() {
            None => true,
            Some(v) => v.iter().any(|h| h == hostnqn),
        }
    }

    /// The hosts that see it (`None`: every host).
    pub fn hosts(&self) -> Option<Arc<Vec<String>>> {
        self.hosts.load_full()
    }

    /// Shows it to `hosts` only (`None`: to every host), at once. Once the
    /// namespace is in a subsystem, through [`Subsystem::show_namespace`]
    /// (which tells the queues that remember it).
    ///
    /// [`Subsystem::show_namespace`]: crate::model::subsystem::Subsystem::show_namespace
    pub fn set_hosts(&self, hosts: Option<Vec<String>>) {
        self.hosts.store(hosts.map(Arc::new));
    }

    /// Whether a failed flush may have lost data for good: a file served
    /// through the page cache (opened without O_DIRECT). The kernel reports
    /// a lost writeback to one fsync only, so a retried flush would succeed
    /// although the data is gone.
    pub fn flush_failure_is_sticky(&self) -> bool {
        self.backend.flush_failure_is_sticky()
    }

    /// A flush failed on a namespace whose failures are sticky: every later
    /// flush fails too (until the namespace is opened again).
    pub fn lose_writeback(&self) {
        self.writeback_lost.store(true, Ordering::Release);
    }

    /// Whether a flush failed for good (see [`Namespace::lose_writeback`]).
    pub fn writeback_lost(&self) -> bool {
        self.writeback_lost.load(Ordering::Acquire)
    }

    /// Size in logical blocks.
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    /// Reads the size of the store again (blocking: on the daemon thread);
    /// when it changed, takes it and returns (old, new) in blocks.
    pub fn refresh_size(&self) -> std::io::Result<Option<(u64, u64)>> {
        let Some(bytes) = self.backend.size_now()? else {
            return Ok(None);
        };
        let new = bytes >> self.block_shift;
        let old = self.blocks.swap(new, Ordering::AcqRel);
        Ok((old != new).then_some((old, new)))
    }

    /// Identify Namespace data.
    pub fn identify(&self) -> IdentifyNamespace {
        let blocks = self.blocks();
        IdentifyNamespace {
            nsze: blocks,
            ncap: blocks,
            nuse: blocks,
            // bit 0: thin provisioning (deallocate supported); bit 3: NGUID/EUI64 never reused
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            nmic: 1, // may be shared by several controllers
            anagrpid: self.ana_group,
            rescap: match (self.resv.enabled(), self.resv.ptpl_capable()) {
                (false, _) => 0,
                (true, ptpl) => {
                    use nvme::reservation::rescap;
                    rescap::ALL_TYPES | rescap::IEKEY13 | if ptpl { rescap::PTPL } else { 0 }
                }
            },
            nguid: self.nguid,
            eui64: self.eui64,
            lbads: self.block_shift as u8,
            ..Default::default()
        }
    }

    /// Namespace identification descriptors.
    pub fn descriptors(&self) -> Vec<NsDescriptor> {
        let id = |nidt: u8, v: &[u8]| {
            v.iter().any(|&b| b != 0).then(|| NsDescriptor {
                nidt,
                nid: v.to_vec(),
            })
        };
        [
            id(nidt::EUI64, &self.eui64),
            id(nidt::NGUID, &self.nguid),
            id(nidt::UUID, &self.uuid),
        ]
        .into_iter()
        .flatten()
        .chain([NsDescriptor {
            nidt: nidt::CSI,
            nid: vec![0],
        }])
        .collect()
    }
}

impl Namespace {
    /// Makes completed writes durable (fdatasync of a file or block device,
    /// a flush of an RBD image; nothing for the null backend). Blocks.
    pub fn flush(&self) -> std::io::Result<()> {
        self.backend.flush()
    }
}

impl Drop for Namespace {
    /// A namespace removed by a reload (or at exit) is flushed once its last
    /// command completed: the controller advertises a volatile write cache.
    fn drop(&mut self) {
        self.qos.load().retire_all();
        if let Err(e) = self.flush() {
            tracing::warn!(nsid = self.nsid, error = %e, "flush of a closing namespace");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_file_is_taken_on_refresh() {
        let path = std::env::temp_dir().join(format!("nvmf-ns-size-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(1 << 20).unwrap();
        let (backend, size, bs) = crate::backend::file::open(&path, Some(4096), false).unwrap();
        let ns = Namespace::new("nqn.t", 1, backend, size, bs, false);
        assert_eq!(ns.blocks(), 256);
        assert_eq!(ns.refresh_size().unwrap(), None, "unchanged");
        f.set_len(3 << 20).unwrap();
        assert_eq!(ns.refresh_size().unwrap(), Some((256, 768)));
        assert_eq!(ns.identify().nsze, 768);
        let null = Namespace::new(
            "nqn.t",
            2,
            Box::new(crate::backend::null::Null::default()),
            1 << 20,
            512,
            false,
        );
        assert_eq!(null.refresh_size().unwrap(), None, "null: fixed size");
        drop(ns);
        std::fs::remove_file(&path).unwrap();
    }
}
