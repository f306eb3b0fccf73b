//! A queue's own hold on the namespaces its commands name.
//!
//! A namespace is shared by every queue of every host that sees it, so its
//! `Arc` count sits on a cache line that every worker serving it would write
//! if each command cloned it. A queue instead finds a namespace once, holds
//! it in an [`NsRef`] (an `Arc` of its own, on a line only its worker
//! writes), and its commands clone that. What the queue found stays good
//! while the subsystem's namespace epoch holds (a reload that replaces
//! namespaces, or a change of who sees one, advances it): then the queue
//! looks again, and a namespace that is gone closes once its last command
//! ended and the queue let it go ([`NsCache::expire`], from the queue's
//! timer, for a queue that sends nothing more).

use std::ops::Deref;
use std::sync::Arc;

use super::namespace::Namespace;

/// A namespace held by one queue: cloning it writes only the queue's count.
#[derive(Debug, Clone)]
// The outer `Arc` is the point: a count of the queue's own.
#[allow(clippy::redundant_allocation)]
pub struct NsRef(Arc<Arc<Namespace>>);

impl NsRef {
    /// A hold on `ns` of its own (one allocation: a queue makes one per
    /// namespace it finds, not one per command).
    pub fn new(ns: Arc<Namespace>) -> NsRef {
        NsRef(Arc::new(ns))
    }
}

impl Deref for NsRef {
    type Target = Arc<Namespace>;

    fn deref(&self) -> &Arc<Namespace> {
        &self.0
    }
}

/// The namespaces a queue found while the subsystem's epoch was `epoch`,
/// ordered by nsid (at most those its host sees).
#[derive(Debug, Default)]
pub struct NsCache {
    epoch: u64,
    held: Vec<NsRef>,
}

impl NsCache {
    /// The namespace `nsid` found at `epoch`, if this cache holds it.
    pub(super) fn get(&self, nsid: u32, epoch: u64) -> Option<NsRef> {
        if self.epoch != epoch {
            return None;
        }
        let i = self.held.binary_search_by_key(&nsid, |n| n.nsid).ok()?;
        Some(self.held[i].clone())
    }

    /// Remembers `ns`, found at `epoch` (forgetting what an older epoch
    /// found).
    pub(super) fn put(&mut self, ns: Arc<Namespace>, epoch: u64) -> NsRef {
        self.expire(epoch);
        let held = NsRef::new(ns);
        match self.held.binary_search_by_key(&held.nsid, |n| n.nsid) {
            Ok(i) => self.held[i] = held.clone(),
            Err(i) => self.held.insert(i, held.clone()),
        }
        held
    }

    /// Forgets what was found before `epoch` (its namespaces close once
    /// the commands that use them ended).
    pub fn expire(&mut self, epoch: u64) {
        if self.epoch != epoch {
            self.held.clear();
            self.epoch = epoch;
        }
    }
}
