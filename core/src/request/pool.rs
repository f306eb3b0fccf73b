//! The data-buffer pool's bookkeeping (sans-IO): two size classes over one
//! registered memory area, free lists, and a FIFO of requests waiting for a
//! buffer. A request takes a buffer only when it needs one and gives it back
//! at completion; one that finds none waits its turn, it does not fail.
//!
//! Buffers are held by queues (owners), and a queue whose host stops taking
//! its responses holds them until the transport ends it. So while other
//! queues wait for a class, no queue takes more than its share of it (the
//! class over the queues holding or waiting for it): a returned buffer goes
//! to the first waiter under its share, a newcomer over its share waits.
//! A queue alone may use the whole pool.
//!
//! Queues whose peer has proven nothing that earns it I/O (no controller
//! yet, a discovery controller, one still to authenticate) take buffers
//! "limited": all of them together hold at most an eighth of each class
//! ([`Pool::limited_cap`]), so such peers, however many, leave the rest to
//! the hosts that serve data.
//!
//! The memory itself (registered as an RDMA memory region and as io_uring
//! fixed buffers) belongs to the transport; this type hands out offsets in it.

use std::collections::{HashMap, VecDeque};

use crate::PAGE;

/// A buffer size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Small transfers (4k I/O, admin data).
    Small = 0,
    /// Up to the largest transfer.
    Large = 1,
}

impl Class {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Class::Small => "small",
            Class::Large => "large",
        }
    }
}

/// Sizes and counts of the two classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolShape {
    /// Bytes per small buffer (a multiple of 4096).
    pub small_size: usize,
    /// Number of small buffers.
    pub small_count: usize,
    /// Bytes per large buffer (a multiple of 4096).
    pub large_size: usize,
    /// Number of large buffers.
    pub large_count: usize,
}

impl PoolShape {
    /// Total bytes of pool memory.
    pub fn bytes(&self) -> usize {
        self.small_size * self.small_count + self.large_size * self.large_count
    }

    /// The class that serves `len` bytes, or `None` if it is larger than a
    /// large buffer (or the class has no buffers at all).
    pub fn class_for(&self, len: usize) -> Option<Class> {
        if len <= self.small_size && self.small_count > 0 {
            Some(Class::Small)
        } else if len <= self.large_size && self.large_count > 0 {
            Some(Class::Large)
        } else {
            None
        }
    }

    fn count(&self, c: Class) -> usize {
        match c {
            Class::Small => self.small_count,
            Class::Large => self.large_count,
        }
    }
}

/// A buffer handed out by the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    /// Its class.
    pub class: Class,
    /// Its index within the class.
    pub index: u32,
    /// Byte offset in the pool memory.
    pub offset: usize,
    /// Its size in bytes.
    pub size: usize,
    /// The queue holding it.
    pub owner: u32,
    /// Taken under the cap of limited queues.
    pub limited: bool,
}

/// The pool: free lists and waiters. `W` names a waiting request.
#[derive(Debug)]
pub struct Pool<W> {
    shape: PoolShape,
    free: [Vec<u32>; 2],
    /// Waiting requests, their queues and whether they are limited.
    waiters: [VecDeque<Waiter<W>>; 2],
    /// Buffers each queue holds, per class.
    held: HashMap<u32, [u32; 2]>,
    /// Buffers limited queues hold, per class.
    limited_held: [u32; 2],
}

/// A request waiting for a buffer.
#[derive(Debug)]
struct Waiter<W> {
    owner: u32,
    limited: bool,
    who: W,
}

impl<W> Pool<W> {
    /// A pool of `shape`, all free. Shapes whose sizes are not page multiples
    /// are rounded up.
    pub fn new(mut shape: PoolShape) -> Pool<W> {
        shape.small_size = shape.small_size.next_multiple_of(PAGE);
        shape.large_size = shape.large_size.next_multiple_of(PAGE);
        Pool {
            free: [
                (0..shape.small_count as u32).rev().collect(),
                (0..shape.large_count as u32).rev().collect(),
            ],
            waiters: [VecDeque::new(), VecDeque::new()],
            held: HashMap::new(),
            limited_held: [0, 0],
            shape,
        }
    }

    /// The pool's shape.
    pub fn shape(&self) -> PoolShape {
        self.shape
    }

    /// Buffers handed out and not given back.
    pub fn in_use(&self) -> usize {
        self.shape.count(Class::Small) + self.shape.count(Class::Large)
            - self.free[0].len()
            - self.free[1].len()
    }

    /// Requests waiting for a buffer.
    pub fn waiting(&self) -> usize {
        self.waiters[0].len() + self.waiters[1].len()
    }

    fn held(&self, owner: u32, c: Class) -> u32 {
        self.held.get(&owner).map_or(0, |h| h[c as usize])
    }

    fn hold(&mut self, owner: u32, c: Class, n: i32) {
        let h = self.held.entry(owner).or_default();
        h[c as usize] = h[c as usize].saturating_add_signed(n);
        if *h == [0, 0] {
            self.held.remove(&owner);
        }
    }

    /// Buffers of `c` that limited queues may hold together: an eighth of
    /// the class, at least one.
    pub fn limited_cap(&self, c: Class) -> u32 {
        (self.shape.count(c) / 8).max(1) as u32
    }

    /// Buffers of `c` limited queues hold now.
    pub fn limited_held(&self, c: Class) -> u32 {
        self.limited_held[c as usize]
    }

    /// Whether a limited queue may take one more buffer of `c`.
    fn limited_room(&self, c: Class) -> bool {
        self.limited_held[c as usize] < self.limited_cap(c)
    }

    /// Whether waiter `w` of class `c` could take a buffer now (a limited
    /// one not while limited queues hold their cap).
    fn eligible(&self, w: &Waiter<W>, c: Class) -> bool {
        !w.limited || self.limited_room(c)
    }

    /// Whether `owner` may take one more buffer of `c` while others wait:
    /// it holds less than its share (the class over the queues that hold
    /// or wait for it), or no other queue waits that could take it.
    fn under_share(&self, owner: u32, c: Class) -> bool {
        let waiters = &self.waiters[c as usize];
        if waiters
            .iter()
            .all(|w| w.owner == owner || !self.eligible(w, c))
        {
            return true;
        }
        let mut owners: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h[c as usize] > 0)
            .map(|(o, _)| *o)
            .chain(waiters.iter().map(|w| w.owner))
            .chain(std::iter::once(owner))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        let share = (self.shape.count(c) / owners.len()).max(1);
        (self.held(owner, c) as usize) < share
    }

    /// Buffers of `class` queue `owner` holds.
    pub fn held_by(&self, owner: u32, class: Class) -> u32 {
        self.held(owner, class)
    }

    fn buf(&self, class: Class, index: u32) -> Buf {
        let (offset, size) = match class {
            Class::Small => (
                index as usize * self.shape.small_size,
                self.shape.small_size,
            ),
            Class::Large => (
                self.shape.small_size * self.shape.small_count
                    + index as usize * self.shape.large_size,
                self.shape.large_size,
            ),
        };
        Buf {
            class,
            index,
            offset,
            size,
            owner: 0,
            limited: false,
        }
    }

    /// Takes a buffer of `class` for request `who` of queue `owner`
    /// (`limited`: under the cap of limited queues). If none is free, or
    /// others wait for that class and `owner` has its share, or a limited
    /// queue finds the limited cap reached, `who` joins the wait queue and
    /// `None` is returned. (A free buffer with waiters left means every
    /// waiter that could take it has its share: a newcomer under its own
    /// takes it.)
    pub fn take(&mut self, class: Class, owner: u32, limited: bool, who: W) -> Option<Buf> {
        let c = class as usize;
        if !self.free[c].is_empty()
            && (!limited || self.limited_room(class))
            && (self.waiters[c].is_empty() || self.under_share(owner, class))
        {
            let i = self.free[c].pop().expect("checked");
            self.hold(owner, class, 1);
            if limited {
                self.limited_held[c] += 1;
            }
            return Some(Buf {
                owner,
                limited,
                ..self.buf(class, i)
            });
        }
        self.waiters[c].push_back(Waiter {
            owner,
            limited,
            who,
        });
        None
    }

    /// Gives a buffer back. If requests wait for its class, the buffer goes to
    /// the first of them under its queue's share (else to the first of the
    /// queue holding the fewest), returned with it (a waiter that went away
    /// meanwhile gives it back again). Limited waiters are passed over while
    /// limited queues hold their cap.
    pub fn give(&mut self, buf: Buf) -> Option<(W, Buf)> {
        let (class, c) = (buf.class, buf.class as usize);
        self.hold(buf.owner, class, -1);
        if buf.limited {
            self.limited_held[c] = self.limited_held[c].saturating_sub(1);
        }
        let ws = &self.waiters[c];
        let pick = (0..ws.len())
            .filter(|&i| self.eligible(&ws[i], class))
            .find(|&i| self.under_share(ws[i].owner, class))
            .or_else(|| {
                (0..ws.len())
                    .filter(|&i| self.eligible(&ws[i], class))
                    .min_by_key(|&i| self.held(ws[i].owner, class))
            });
        if let Some(w) = pick.and_then(|i| self.waiters[c].remove(i)) {
            self.hold(w.owner, class, 1);
            if w.limited {
                self.limited_held[c] += 1;
            }
            return Some((
                w.who,
                Buf {
                    owner: w.owner,
                    limited: w.limited,
                    ..buf
                },
            ));
        }
        self.free[c].push(buf.index);
        None
    }

    /// Whether every buffer is back.
    pub fn all_free(&self) -> bool {
        self.free[0].len() == self.shape.count(Class::Small)
            && self.free[1].len() == self.shape.count(Class::Large)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(s: usize, l: usize) -> PoolShape {
        PoolShape {
            small_size: 8192,
            small_count: s,
            large_size: 128 * 1024,
            large_count: l,
        }
    }

    #[test]
    fn classes_and_offsets() {
        let p: Pool<u32> = Pool::new(shape(2, 2));
        let sh = p.shape();
        assert_eq!(sh.bytes(), 2 * 8192 + 2 * 131072);
        assert_eq!(sh.class_for(0), Some(Class::Small));
        assert_eq!(sh.class_for(8192), Some(Class::Small));
        assert_eq!(sh.class_for(8193), Some(Class::Large));
        assert_eq!(sh.class_for(131072), Some(Class::Large));
        assert_eq!(sh.class_for(131073), None);
        assert_eq!(shape(0, 1).class_for(512), Some(Class::Large));
        let mut p: Pool<u32> = Pool::new(shape(2, 2));
        let a = p.take(Class::Small, 1, false, 1).unwrap();
        let b = p.take(Class::Small, 2, false, 2).unwrap();
        let c = p.take(Class::Large, 3, false, 3).unwrap();
        let d = p.take(Class::Large, 4, false, 4).unwrap();
        let mut offs = [a, b, c, d].map(|x| (x.offset, x.size));
        offs.sort();
        assert_eq!(
            offs,
            [
                (0, 8192),
                (8192, 8192),
                (16384, 131072),
                (16384 + 131072, 131072)
            ]
        );
        for x in [a, b, c, d] {
            assert_eq!(x.offset % 4096, 0);
        }
    }

    #[test]
    fn waiters_are_served_in_order() {
        let mut p: Pool<u32> = Pool::new(shape(1, 0));
        let a = p.take(Class::Small, 1, false, 1).unwrap();
        assert_eq!(p.take(Class::Small, 2, false, 2), None);
        assert_eq!(p.take(Class::Small, 3, false, 3), None);
        assert_eq!(p.waiting(), 2);
        assert_eq!(p.in_use(), 1);
        let (w, b) = p.give(a).unwrap();
        assert_eq!((w, b.index, b.owner), (2, a.index, 2));
        let (w, b) = p.give(b).unwrap();
        assert_eq!(w, 3);
        assert_eq!(p.give(b), None);
        assert!(p.all_free());
        assert_eq!((p.in_use(), p.waiting()), (0, 0));
    }

    #[test]
    fn a_newcomer_does_not_overtake_waiters() {
        let mut p: Pool<u32> = Pool::new(shape(1, 0));
        let a = p.take(Class::Small, 1, false, 1).unwrap();
        assert_eq!(p.take(Class::Small, 2, false, 2), None);
        // The buffer goes to 2, so 3 finds none and queues behind.
        let (w, a) = p.give(a).unwrap();
        assert_eq!(w, 2);
        assert_eq!(p.take(Class::Small, 3, false, 3), None);
        let (w, _) = p.give(a).unwrap();
        assert_eq!(w, 3);
    }

    /// Issue 38, 5: a queue whose responses never leave holds its buffers;
    /// while another queue waits, the hog gets none of those given back
    /// beyond its share, and a waiter behind it in line is served first.
    #[test]
    fn a_queue_over_its_share_waits_while_others_do() {
        let mut p: Pool<&str> = Pool::new(shape(0, 4));
        let hog: Vec<Buf> = (0..4)
            .map(|_| {
                p.take(Class::Large, 1, false, "hog")
                    .expect("alone, it may take all")
            })
            .collect();
        assert_eq!(p.take(Class::Large, 1, false, "hog-more"), None);
        assert_eq!(p.take(Class::Large, 2, false, "other"), None);
        // FIFO would serve the hog's second request first.
        let (w, b) = p.give(hog[0]).unwrap();
        assert_eq!((w, b.owner), ("other", 2));
        assert_eq!(p.held_by(1, Class::Large), 3);
        // Over its share (4 over 2 queues) while queue 2 held one and a
        // third waits: the third is served, not the hog.
        assert_eq!(p.take(Class::Large, 3, false, "third"), None);
        let (w, _) = p.give(hog[1]).unwrap();
        assert_eq!(w, "third");
        // Only the hog waits: it is served.
        let (w, b2) = p.give(hog[2]).unwrap();
        assert_eq!(w, "hog-more");
        assert_eq!(b2.owner, 1);
        assert_eq!(p.take(Class::Large, 1, false, "hog-again"), None);
        let (w, _) = p.give(b).unwrap();
        assert_eq!(w, "hog-again");
        assert_eq!(p.held_by(2, Class::Large), 0);
        assert_eq!(p.held_by(1, Class::Large), 3);
    }

    /// Issue 57, 1: peers that proved nothing (discovery, no Connect yet,
    /// not authenticated) hold at most an eighth of a class together; a
    /// host's request finds the rest, and a limited waiter is passed over
    /// while the cap is held, not served before a host.
    #[test]
    fn limited_queues_hold_an_eighth_of_a_class_together() {
        let mut p: Pool<&str> = Pool::new(shape(16, 16));
        assert_eq!(p.limited_cap(Class::Large), 2);
        let a = p.take(Class::Large, 1, true, "hog-a").unwrap();
        let b = p.take(Class::Large, 2, true, "hog-b").unwrap();
        assert!(a.limited && b.limited);
        assert_eq!(p.take(Class::Large, 3, true, "hog-c"), None, "cap held");
        assert_eq!(p.limited_held(Class::Large), 2);
        // A host takes all the rest, though a limited request waits.
        let host: Vec<Buf> = (0..14)
            .map(|_| {
                p.take(Class::Large, 9, false, "host")
                    .expect("free for hosts")
            })
            .collect();
        assert!(host.iter().all(|b| !b.limited));
        // A host's buffer back: not to the capped limited waiter.
        assert_eq!(p.give(host[0]), None);
        let h = p.take(Class::Large, 9, false, "host-again").unwrap();
        // A limited buffer back: the limited waiter gets it, limited.
        let (w, c) = p.give(a).unwrap();
        assert_eq!((w, c.owner, c.limited), ("hog-c", 3, true));
        assert_eq!(p.limited_held(Class::Large), 2);
        for x in host.into_iter().skip(1).chain([b, c, h]) {
            assert_eq!(p.give(x), None);
        }
        assert!(p.all_free());
        assert_eq!(p.limited_held(Class::Large), 0);
        // A class of fewer than 8 still lets one limited buffer out.
        let mut p: Pool<u32> = Pool::new(shape(0, 3));
        assert_eq!(p.limited_cap(Class::Large), 1);
        assert!(p.take(Class::Large, 1, true, 1).is_some());
        assert_eq!(p.take(Class::Large, 2, true, 2), None);
    }

    proptest! {
        /// No buffer is handed out twice, counts stay right, and every waiter
        /// is served once buffers come back.
        #[test]
        fn never_double_hands_out(ops in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 1..200)) {
            let mut p: Pool<u32> = Pool::new(shape(3, 2));
            let mut held: Vec<Buf> = Vec::new();
            let mut next = 0u32;
            let mut waiting = 0usize;
            for (take, small, limited) in ops {
                let class = if small { Class::Small } else { Class::Large };
                if take {
                    next += 1;
                    match p.take(class, next % 3, limited && next.is_multiple_of(3), next) {
                        Some(b) => held.push(b),
                        None => waiting += 1,
                    }
                } else if let Some(b) = held.pop() {
                    if let Some((_, b2)) = p.give(b) {
                        waiting -= 1;
                        held.push(b2);
                    }
                }
                let mut seen: Vec<(usize, usize)> = held.iter().map(|b| (b.offset, b.size)).collect();
                seen.sort();
                for w in seen.windows(2) {
                    prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlapping buffers handed out");
                }
                prop_assert_eq!(p.in_use(), held.len());
                for c in [Class::Small, Class::Large] {
                    let lim = held.iter().filter(|b| b.class == c && b.limited).count() as u32;
                    prop_assert_eq!(p.limited_held(c), lim);
                    prop_assert!(lim <= p.limited_cap(c));
                }
                prop_assert_eq!(p.waiting(), waiting);
            }
            while let Some(b) = held.pop() {
                if let Some((_, b2)) = p.give(b) {
                    waiting -= 1;
                    held.push(b2);
                }
            }
            prop_assert_eq!(waiting, 0);
            prop_assert!(p.all_free());
        }
    }
}
