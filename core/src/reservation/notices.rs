//! A controller's Reservation Notification log: the notices of its host's
//! namespaces, read one per Get Log Page (0x80), with the Reservation
//! Notification Mask (feature 0x82) that keeps some out.

use std::collections::{BTreeMap, VecDeque};

use nvme::reservation::{mask, Notification};

/// Notices a controller keeps at most; more are counted (the host sees the
/// gap in the Log Page Count) but dropped.
pub const MAX_NOTICES: usize = 64;

/// The log and the masks of one controller.
#[derive(Debug, Default)]
pub struct NoticeLog {
    /// (Log Page Count, type, nsid) of each notice waiting.
    queue: VecDeque<(u64, u8, u32)>,
    /// Log Page Count of the last notice (0: none yet).
    count: u64,
    /// Masks by namespace (absent: nothing masked).
    masks: BTreeMap<u32, u32>,
}

impl NoticeLog {
    /// Records a notice of `kind` for namespace `nsid` unless masked;
    /// returns whether it was logged.
    pub fn push(&mut self, nsid: u32, kind: u8) -> bool {
        if self.mask(nsid) & mask::of(kind) != 0 {
            return false;
        }
        // The count goes from u64::MAX to 1: 0 means an empty page.
        self.count = self.count.checked_add(1).unwrap_or(1);
        if self.queue.len() >= MAX_NOTICES {
            return false;
        }
        self.queue.push_back((self.count, kind, nsid));
        true
    }

    /// Takes the oldest notice: the log page to return (empty when none).
    pub fn take(&mut self) -> Notification {
        match self.queue.pop_front() {
            None => Notification::default(),
            Some((count, kind, nsid)) => Notification {
                count,
                kind,
                available: self.queue.len().min(255) as u8,
                nsid,
            },
        }
    }

    /// The oldest notice as [`NoticeLog::take`] returns it, left in place.
    pub fn peek(&self) -> Notification {
        let mut copy = NoticeLog {
            queue: self.queue.iter().take(1).copied().collect(),
            count: self.count,
            masks: BTreeMap::new(),
        };
        let mut n = copy.take();
        n.available = self.queue.len().saturating_sub(1).min(255) as u8;
        n
    }

    /// Notices waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no notice waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The mask of namespace `nsid`.
    pub fn mask(&self, nsid: u32) -> u32 {
        self.masks.get(&nsid).copied().unwrap_or(0)
    }

    /// Sets the mask of the namespaces `nsids`.
    pub fn set_mask(&mut self, nsids: impl IntoIterator<Item = u32>, value: u32) {
        for n in nsids {
            self.masks.insert(n, value & mask::ALL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::reservation::notice;

    #[test]
    fn read_one_at_a_time_with_counts() {
        let mut l = NoticeLog::default();
        assert_eq!(l.take(), Notification::default());
        assert!(l.push(1, notice::RESERVATION_RELEASED));
        assert!(l.push(2, notice::REGISTRATION_PREEMPTED));
        let a = l.take();
        assert_eq!((a.count, a.kind, a.available, a.nsid), (1, 2, 1, 1));
        let b = l.take();
        assert_eq!((b.count, b.kind, b.available, b.nsid), (2, 1, 0, 2));
        assert_eq!(l.take().count, 0);
    }

    #[test]
    fn masked_notices_are_not_logged() {
        let mut l = NoticeLog::default();
        l.set_mask([3], mask::RESREL | 1);
        assert_eq!(l.mask(3), mask::RESREL);
        assert!(!l.push(3, notice::RESERVATION_RELEASED));
        assert!(l.push(3, notice::RESERVATION_PREEMPTED));
        assert!(l.push(4, notice::RESERVATION_RELEASED));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn overflow_is_a_gap_in_the_count() {
        let mut l = NoticeLog::default();
        for _ in 0..MAX_NOTICES + 3 {
            l.push(1, notice::RESERVATION_RELEASED);
        }
        assert_eq!(l.len(), MAX_NOTICES);
        let first = l.take();
        assert_eq!(first.count, 1);
        assert_eq!(first.available as usize, MAX_NOTICES - 1);
        for _ in 1..MAX_NOTICES {
            l.take();
        }
        assert!(l.push(1, notice::RESERVATION_RELEASED));
        assert_eq!(
            l.take().count,
            MAX_NOTICES as u64 + 4,
            "the host sees that 3 were lost"
        );
    }
}
