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
    /// The queue as the buffer pool names its owners.
    pub fn owner(self) -> u32 {
        (self.slot as u32) << 8 | self.gen as u32
    }
}

struct Slot<Q> {
    gen: u8,
    queue: Option<Q>,
}

/// The queues of a worker.
pub struct Slots<Q> {
    slots: Vec<Slot<Q>>,
    free: Vec<u16>,
    len: usize,
}

impl<Q> Default for Slots<Q> {
    fn default() -> Self {
        Slots {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<Q> Slots<Q> {
    /// The key the next queue gets (None: the table is full), without
    /// taking it: a transport builds the queue under it, then
    /// [`Slots::insert`]s it.
    pub fn vacant(&mut self) -> Option<QueueKey> {
        let slot = match self.free.last() {
            Some(&s) => s,
            None if self.slots.len() < u16::MAX as usize => {
                self.slots.push(Slot {
                    gen: 0,
                    queue: None,
                });
                self.free.push((self.slots.len() - 1) as u16);
                (self.slots.len() - 1) as u16
            }
            None => return None,
        };
        let gen = self.slots[slot as usize].gen.wrapping_add(1);
        Some(QueueKey { slot, gen })
    }

    /// Puts `q` in the slot [`Slots::vacant`] named `key`.
    pub fn insert(&mut self, key: QueueKey, q: Q) {
        let Some(i) = self.free.iter().rposition(|&s| s == key.slot) else {
            return;
        };
        self.free.swap_remove(i);
        let s = &mut self.slots[key.slot as usize];
        s.gen = key.gen;
        s.queue = Some(q);
        self.len += 1;
    }

    /// The queue `key` names, if it is still there.
    pub fn get(&self, key: QueueKey) -> Option<&Q> {
        let s = self.slots.get(key.slot as usize)?;
        (s.gen == key.gen).then_some(s.queue.as_ref()?)
    }

    /// As [`Slots::get`], mutably.
    pub fn get_mut(&mut self, key: QueueKey) -> Option<&mut Q> {
        let s = self.slots.get_mut(key.slot as usize)?;
        if s.gen != key.gen {
            return None;
        }
        s.queue.as_mut()
    }

    /// The key of the queue in `slot` now (how a transport that names its
    /// queues by slot alone finds the current one).
    pub fn key_of(&self, slot: u16) -> Option<QueueKey> {
        let s = self.slots.get(slot as usize)?;
        s.queue.as_ref().map(|_| QueueKey { slot, gen: s.gen })
    }

    /// Takes queue `key` out; its slot is free again.
    pub fn remove(&mut self, key: QueueKey) -> Option<Q> {
        let s = self.slots.get_mut(key.slot as usize)?;
        if s.gen != key.gen {
            return None;
        }
        let q = s.queue.take()?;
        self.free.push(key.slot);
        self.len -= 1;
        Some(q)
    }

    /// The keys of every queue.
    pub fn keys(&self) -> Vec<QueueKey> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.queue.is_some())
            .map(|(i, s)| QueueKey {
                slot: i as u16,
                gen: s.gen,
            })
            .collect()
    }

    /// Every queue, with its key.
    pub fn iter(&self) -> impl Iterator<Item = (QueueKey, &Q)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let q = s.queue.as_ref()?;
            Some((
                QueueKey {
                    slot: i as u16,
                    gen: s.gen,
                },
                q,
            ))
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
    }
}
