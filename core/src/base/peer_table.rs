//! Places held by peers not yet proven, counted per peer address and in
//! all, oldest first: what queues not yet connected
//! ([`crate::base::admission`]) and controllers not yet authenticated
//! ([`crate::model::unproven`]) are capped by. Each decides its own policy
//! at a cap (refuse, or make room by evicting the oldest place of the peer
//! that holds the most); the counting and the choice of that peer are here.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Places in the order they were taken, each with its peer and what its
/// user keeps with it.
#[derive(Debug)]
pub struct PeerTable<T> {
    entries: VecDeque<(u64, IpAddr, T)>,
    by_peer: HashMap<IpAddr, u32>,
    next_id: u64,
}

impl<T> Default for PeerTable<T> {
    fn default() -> Self {
        PeerTable {
            entries: VecDeque::new(),
            by_peer: HashMap::new(),
            next_id: 0,
        }
    }
}

impl<T> PeerTable<T> {
    /// Places `peer` holds.
    pub fn count(&self, peer: IpAddr) -> u32 {
        self.by_peer.get(&peer).copied().unwrap_or(0)
    }

    /// Places held in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no place is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Peers that hold a place.
    pub fn peers(&self) -> usize {
        self.by_peer.len()
    }

    /// Takes a place for `peer`, the newest; its id.
    pub fn push(&mut self, peer: IpAddr, item: T) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back((id, peer, item));
        *self.by_peer.entry(peer).or_default() += 1;
        id
    }

    fn remove_at(&mut self, i: usize) -> Option<(IpAddr, T)> {
        let (_, peer, item) = self.entries.remove(i)?;
        if let Some(n) = self.by_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&peer);
            }
        }
        Some((peer, item))
    }

    /// Gives place `id` back (none if it went already); what it kept.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.entries.iter().position(|e| e.0 == id)?;
        self.remove_at(i).map(|(_, item)| item)
    }

    /// What place `id` keeps, if it is still held.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.entries
            .iter_mut()
            .find(|e| e.0 == id)
            .map(|(_, _, item)| item)
    }

    /// Keeps the places whose item `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut i = 0;
        while i < self.entries.len() {
            if keep(&self.entries[i].2) {
                i += 1;
            } else {
                self.remove_at(i);
            }
        }
    }

    /// The peer holding the most places and how many: among equals, the
    /// one whose oldest place is oldest.
    pub fn fullest(&self) -> Option<(IpAddr, u32)> {
        let mut best: Option<(IpAddr, u32)> = None;
        for (_, p, _) in &self.entries {
            let n = self.count(*p);
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((*p, n));
            }
        }
        best
    }

    /// Takes `peer`'s oldest place away; what it kept.
    pub fn evict_oldest_of(&mut self, peer: IpAddr) -> Option<T> {
        let i = self.entries.iter().position(|e| e.1 == peer)?;
        self.remove_at(i).map(|(_, item)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn counts_follow_places_and_the_fullest_is_the_oldest_among_equals() {
        let mut t = PeerTable::default();
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let b1 = t.push(b, "b1");
        let a1 = t.push(a, "a1");
        t.push(a, "a2");
        t.push(b, "b2");
        assert_eq!((t.count(a), t.count(b), t.len(), t.peers()), (2, 2, 4, 2));
        assert_eq!(t.fullest(), Some((b, 2)), "b's oldest is older");
        assert_eq!(t.evict_oldest_of(a), Some("a1"));
        assert_eq!(t.remove(a1), None, "gone already");
        assert_eq!(t.fullest(), Some((b, 2)));
        assert_eq!(t.remove(b1), Some("b1"));
        t.retain(|x| *x != "b2");
        assert_eq!((t.count(a), t.count(b), t.peers()), (1, 0, 1));
        *t.get_mut(t.entries[0].0).unwrap() = "a2'";
        assert_eq!(t.evict_oldest_of(a), Some("a2'"));
        assert!(t.is_empty() && t.by_peer.is_empty());
        assert_eq!(t.fullest(), None);
    }
}
