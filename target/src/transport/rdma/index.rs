//! How a worker finds the queue a completion or a connection event is for.
//!
//! A shared receive queue's completion names its queue pair only by number,
//! and every RDMA device numbers its queue pairs on its own: one worker
//! serving two devices (a dual-port adapter) sees the same number on both.
//! So queue pairs are looked up by device and number. A number (or a
//! connection id's key) can be reused once its queue pair is destroyed, which
//! may happen before its queue is gone (a queue that did not drain): a queue
//! leaving the index removes only entries that still name it.

use std::collections::HashMap;

/// Queue slots by (device, queue pair number) and by RDMA-CM id key.
#[derive(Debug, Default)]
pub struct QueueIndex {
    by_qpn: HashMap<(usize, u32), u16>,
    by_cm: HashMap<usize, u16>,
}

impl QueueIndex {
    /// Queue `slot` has queue pair `qp_num` on device `dev` and CM id `cm_key`.
    pub fn insert(&mut self, dev: usize, qp_num: u32, cm_key: usize, slot: u16) {
        self.by_qpn.insert((dev, qp_num), slot);
        self.by_cm.insert(cm_key, slot);
    }

    /// Queue `slot` is gone: its entries go, unless a newer queue took them.
    pub fn remove(&mut self, dev: usize, qp_num: u32, cm_key: usize, slot: u16) {
        if self.by_qpn.get(&(dev, qp_num)) == Some(&slot) {
            self.by_qpn.remove(&(dev, qp_num));
        }
        if self.by_cm.get(&cm_key) == Some(&slot) {
            self.by_cm.remove(&cm_key);
        }
    }

    /// The queue whose queue pair `qp_num` on device `dev` is.
    pub fn by_qp(&self, dev: usize, qp_num: u32) -> Option<u16> {
        self.by_qpn.get(&(dev, qp_num)).copied()
    }

    /// The queue of CM id `cm_key`.
    pub fn by_cm(&self, cm_key: usize) -> Option<u16> {
        self.by_cm.get(&cm_key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_number_on_two_devices_names_two_queues() {
        let mut ix = QueueIndex::default();
        ix.insert(0, 17, 0x1000, 1);
        ix.insert(1, 17, 0x2000, 2);
        assert_eq!(ix.by_qp(0, 17), Some(1));
        assert_eq!(ix.by_qp(1, 17), Some(2));
        ix.remove(1, 17, 0x2000, 2);
        assert_eq!(
            ix.by_qp(0, 17),
            Some(1),
            "removing one device's queue kept the other"
        );
        assert_eq!(ix.by_qp(1, 17), None);
        assert_eq!(ix.by_cm(0x1000), Some(1));
        assert_eq!(ix.by_cm(0x2000), None);
    }

    #[test]
    fn a_reused_number_stays_with_the_newer_queue() {
        let mut ix = QueueIndex::default();
        ix.insert(0, 17, 0x1000, 1);
        // Queue 1's queue pair was destroyed (the queue waits for its backend
        // operations); the device gives number 17 and the id's memory to queue 3.
        ix.insert(0, 17, 0x1000, 3);
        ix.remove(0, 17, 0x1000, 1);
        assert_eq!(ix.by_qp(0, 17), Some(3));
        assert_eq!(ix.by_cm(0x1000), Some(3));
        ix.remove(0, 17, 0x1000, 3);
        assert_eq!(ix.by_qp(0, 17), None);
        assert_eq!(ix.by_cm(0x1000), None);
    }
}
