//! A worker's table of queues: a slot per queue, reused, with a generation
//! so that a completion or a waiter naming a queue that went (and whose
//! slot another queue took) finds nothing.

/// A queue's place in its worker's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QueueKey {
    /// Slot in the table.
    pub slot: u16,
    /// Generation of the slot.
    pub gen: u8,
}

impl QueueKey {
    /// The index of its transport in its worker's list.
    pub fn transport(self) -> usize {
        (self.slot >> TRANSPORT_SHIFT) as usize
    }

    /// The queue as the buffer pool names its owners.
    pub fn owner(self) -> u32 {
        (self.slot as u32) << 8 | self.gen as u32
    }
}

struct Slot<Q> {
    gen: u8,
    queue: Option<Q>,
}

/// The queues of a transport in a worker. A worker serving several
/// transports gives each a part of the key space
/// ([`Slots::for_transport`]): a key names its transport by its high bits
/// ([`QueueKey::transport`]).
pub struct Slots<Q> {
    slots: Vec<Slot<Q>>,
    free: Vec<u16>,
    len: usize,
    /// The transport's index, shifted into place.
    base: u16,
}

impl<Q> Default for Slots<Q> {
    fn default() -> Self {
        Self::for_transport(0)
    }
}

/// Transports a worker serves at most: a queue key's high bits, and a ring
/// operation's kind, name the transport by its index. A transport has the
/// other 14 bits: 16384 queues per worker (a Connect past them is refused
/// as a table full).
pub const MAX_TRANSPORTS: usize = 3;
/// Where a key's transport index starts.
const TRANSPORT_SHIFT: u32 = 14;
/// The slot bits of a key.
const SLOT_MASK: u16 = (1 << TRANSPORT_SHIFT) - 1;

impl<Q> Slots<Q> {
    /// The table of the transport at `index` in its worker's list (0 for a
    /// worker of one transport).
    pub fn for_transport(index: usize) -> Slots<Q> {
        assert!(index < MAX_TRANSPORTS, "transport index {index}");
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            base: (index as u16) << TRANSPORT_SHIFT,
        }
    }

    fn index(&self, key: QueueKey) -> Option<usize> {
        (key.slot & !SLOT_MASK == self.base).then_some((key.slot & SLOT_MASK) as usize)
    }

    fn key(&self, i: usize, gen: u8) -> QueueKey {
        QueueKey {
            slot: i as u16 | self.base,
            gen,
        }
    }

    /// The key the next queue gets (None: the table is full), without
    /// taking it: a transport builds the queue under it, then
    /// [`Slots::insert`]s it.
    pub fn vacant(&mut self) -> Option<QueueKey> {
        let i = match self.free.last() {
            Some(&s) => s as usize,
            None if self.slots.len() <= SLOT_MASK as usize => {
                self.slots.push(Slot {
                    gen: 0,
                    queue: None,
                });
                self.free.push((self.slots.len() - 1) as u16);
                self.slots.len() - 1
            }
            None => return None,
        };
        let gen = self.slots[i].gen.wrapping_add(1);
        Some(self.key(i, gen))
    }

    /// Puts `q` in the slot [`Slots::vacant`] named `key`.
    pub fn insert(&mut self, key: QueueKey, q: Q) {
        let Some(i) = self.index(key) else { return };
        let Some(f) = self.free.iter().rposition(|&s| s as usize == i) else {
            return;
        };
        self.free.swap_remove(f);
        let s = &mut self.slots[i];
        s.gen = key.gen;
        s.queue = Some(q);
        self.len += 1;
    }

    /// The queue `key` names, if it is still there.
    pub fn get(&self, key: QueueKey) -> Option<&Q> {
        let s = self.slots.get(self.index(key)?)?;
        (s.gen == key.gen).then_some(s.queue.as_ref()?)
    }

    /// As [`Slots::get`], mutably.
    pub fn get_mut(&mut self, key: QueueKey) -> Option<&mut Q> {
        let i = self.index(key)?;
        let s = self.slots.get_mut(i)?;
        if s.gen != key.gen {
            return None;
        }
        s.queue.as_mut()
    }

    /// The key of the queue in slot `slot` now (with its transport's bits
    /// or not): how a transport that names its queues by slot alone finds
    /// the current one.
    pub fn key_of(&self, slot: u16) -> Option<QueueKey> {
        let i = (slot & SLOT_MASK) as usize;
        let s = self.slots.get(i)?;
        s.queue.as_ref().map(|_| self.key(i, s.gen))
    }

    /// Takes queue `key` out; its slot is free again.
    pub fn remove(&mut self, key: QueueKey) -> Option<Q> {
        let i = self.index(key)?;
        let s = self.slots.get_mut(i)?;
        if s.gen != key.gen {
            return None;
        }
        let q = s.queue.take()?;
        self.free.push(i as u16);
        self.len -= 1;
        Some(q)
    }

    /// How many slots there are: [`Slots::key_at`] takes `0..span()`, a
    /// walk over the queues that allocates nothing (the worker's loop makes
    /// one every pass).
    pub fn span(&self) -> usize {
        self.slots.len()
    }

    /// The key of the queue in slot `i` (of `0..span()`), if one is there.
    pub fn key_at(&self, i: usize) -> Option<QueueKey> {
        let s = self.slots.get(i)?;
        s.queue.as_ref().map(|_| self.key(i, s.gen))
    }

    /// The keys of every queue.
    pub fn keys(&self) -> Vec<QueueKey> {
        self.iter().map(|(k, _)| k).collect()
    }

    /// Every queue, with its key.
    pub fn iter(&self) -> impl Iterator<Item = (QueueKey, &Q)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let q = s.queue.as_ref()?;
            Some((self.key(i, s.gen), q))
        })
    }

    /// How many queues.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_its_old_key() {
        let mut t: Slots<&str> = Slots::default();
        let a = t.vacant().unwrap();
        assert_eq!(t.vacant(), Some(a), "vacant takes nothing");
        t.insert(a, "a");
        let b = t.vacant().unwrap();
        assert_ne!(a.slot, b.slot);
        t.insert(b, "b");
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.get(a), None);
        let c = t.vacant().unwrap();
        assert_eq!(c.slot, a.slot, "the slot is reused");
        assert_ne!(c.gen, a.gen);
        t.insert(c, "c");
        assert_eq!(t.get(a), None, "the old key names nothing");
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.key_of(a.slot), Some(c));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.keys(), vec![c, b]);
        assert_eq!(t.iter().count(), 2);
        let walked: Vec<_> = (0..t.span()).filter_map(|i| t.key_at(i)).collect();
        assert_eq!(walked, t.keys());
    }

    #[test]
    fn each_transports_keys_carry_its_index() {
        for index in 0..MAX_TRANSPORTS {
            let mut t: Slots<&str> = Slots::for_transport(index);
            let k = t.vacant().unwrap();
            assert_eq!(k.transport(), index);
            t.insert(k, "x");
            assert_eq!(t.get(k), Some(&"x"));
            assert_eq!(t.key_of(k.slot & SLOT_MASK), Some(k));
            assert_eq!(t.key_of(k.slot), Some(k));
            for other in (0..MAX_TRANSPORTS).filter(|&o| o != index) {
                let theirs = QueueKey {
                    slot: (k.slot & SLOT_MASK) | (other as u16) << TRANSPORT_SHIFT,
                    gen: k.gen,
                };
                assert_eq!(t.get(theirs), None, "transport {other}'s key");
            }
            assert_eq!(t.remove(k), Some("x"));
        }
    }
}
