//! The discovery service: its subsystem, the log's generation counter and
//! the referrals it lists (other discovery services: the peer gateways).
//! Each discovery controller remembers what its host last read, and is told
//! (Discovery Log Page Change notice) when that would read differently now.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::subsystem::{Port, Subsystem, SubsystemKind};

/// The discovery service of a target.
#[derive(Debug)]
pub struct DiscoveryService {
    /// The discovery subsystem (`nqn.2014-08.org.nvmexpress.discovery`).
    pub subsystem: Arc<Subsystem>,
    /// Discovery log generation counter.
    genctr: AtomicU64,
    /// Other discovery services the log refers hosts to.
    referrals: ArcSwap<Vec<Port>>,
}

impl Default for DiscoveryService {
    fn default() -> Self {
        DiscoveryService {
            subsystem: Arc::new(Subsystem::new(
                nvme::DISCOVERY_NQN.to_string(),
                SubsystemKind::Discovery,
                true,
                vec![],
                None,
                "nvmf-target discovery".into(),
                vec![],
            )),
            genctr: AtomicU64::new(1),
            referrals: ArcSwap::from_pointee(Vec::new()),
        }
    }
}

impl DiscoveryService {
    /// The log's generation counter.
    pub fn genctr(&self) -> u64 {
        self.genctr.load(Ordering::Acquire)
    }

    /// Marks the log changed.
    pub fn bump_genctr(&self) {
        self.genctr.fetch_add(1, Ordering::AcqRel);
    }

    /// The referrals listed.
    pub fn referrals(&self) -> Arc<Vec<Port>> {
        self.referrals.load_full()
    }

    /// Replaces the referrals; whether they changed.
    pub fn set_referrals(&self, referrals: Vec<Port>) -> bool {
        if **self.referrals.load() == referrals {
            return false;
        }
        self.referrals.store(Arc::new(referrals));
        self.bump_genctr();
        true
    }
}
