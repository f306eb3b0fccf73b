//! Sans-IO state of one queue's command slots.
//!
//! A slot is a command identifier together with the data buffer and memory
//! window that belong to it. A command completes only when three things have
//! happened, in any order: the send of its capsule completed (the capsule
//! buffer may be reused), its response arrived, and its window is closed —
//! either by the target's SEND_WITH_INVALIDATE (checked against the key we
//! gave) or, when the response came without one, by a LOCAL_INV the transport
//! posts when this state machine asks for it.

use nvme::completion::Completion;

/// What the transport must do after an event on a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing yet: more events are due.
    Wait,
    /// Post a LOCAL_INV of this key for the slot, then report its completion.
    LocalInv(u32),
    /// The command is complete with this response; the slot stays reserved for
    /// the caller (who reads its buffer and then reuses or releases it).
    Complete(Completion),
}

/// A protocol violation by the peer, or misuse of the slot API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// A response named a command identifier that is not in flight.
    #[error("response for command id {0}, which is not in flight")]
    UnknownCid(u16),
    /// A second response for the same command.
    #[error("duplicate response for command id {0}")]
    DuplicateResponse(u16),
    /// The target invalidated a key that is not the command's window key.
    #[error("response for command id {cid} invalidated key {got:#x}, but the command's window key is {expected:#x}")]
    WrongInvalidation {
        /// Command id.
        cid: u16,
        /// The key the target invalidated.
        got: u32,
        /// The window key of the command (0 if none).
        expected: u32,
    },
    /// The slot is not reserved by the caller (not allocated, or in flight).
    #[error("slot {0} is not reserved")]
    NotReserved(u16),
    /// A completion arrived for a slot whose state does not expect it.
    #[error("unexpected {what} completion for slot {slot}")]
    Unexpected {
        /// Slot.
        slot: u16,
        /// Which completion.
        what: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Reserved,
    InFlight,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    /// No window (no data, in-capsule data, or memory-region mode).
    None,
    /// Open with this key.
    Open(u32),
    /// LOCAL_INV of this key posted.
    Invalidating(u32),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: State,
    send_done: bool,
    resp: Option<Completion>,
    window: Window,
}

/// The slots of one queue.
pub struct Slots {
    slots: Vec<Slot>,
    free: Vec<u16>,
    in_flight: usize,
}

impl Slots {
    /// `n` free slots (command ids `0..n`).
    pub fn new(n: u16) -> Slots {
        Slots {
            slots: vec![
                Slot {
                    state: State::Free,
                    send_done: false,
                    resp: None,
                    window: Window::None,
                };
                n as usize
            ],
            free: (0..n).rev().collect(),
            in_flight: 0,
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no slots at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Commands in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Reserves a free slot.
    pub fn alloc(&mut self) -> Option<u16> {
        let t = self.free.pop()?;
        self.slots[t as usize].state = State::Reserved;
        Some(t)
    }

    /// Returns a reserved slot to the free list.
    pub fn release(&mut self, tag: u16) -> Result<(), SlotError> {
        let s = self.reserved(tag)?;
        s.state = State::Free;
        self.free.push(tag);
        Ok(())
    }

    /// Whether `tag` is reserved by the caller.
    pub fn is_reserved(&self, tag: u16) -> bool {
        self.slots
            .get(tag as usize)
            .is_some_and(|s| s.state == State::Reserved)
    }

    /// Whether `tag`'s command is in flight.
    pub fn is_in_flight(&self, tag: u16) -> bool {
        self.slots
            .get(tag as usize)
            .is_some_and(|s| s.state == State::InFlight)
    }

    fn reserved(&mut self, tag: u16) -> Result<&mut Slot, SlotError> {
        match self.slots.get_mut(tag as usize) {
            Some(s) if s.state == State::Reserved => Ok(s),
            _ => Err(SlotError::NotReserved(tag)),
        }
    }

    /// Marks a reserved slot in flight; `window` is the key of the window
    /// opened for it, if any.
    pub fn start(&mut self, tag: u16, window: Option<u32>) -> Result<(), SlotError> {
        let s = self.reserved(tag)?;
        s.state = State::InFlight;
        s.send_done = false;
        s.resp = None;
        s.window = window.map_or(Window::None, Window::Open);
        self.in_flight += 1;
        Ok(())
    }

    /// The send of the slot's capsule completed.
    pub fn on_send_done(&mut self, tag: u16) -> Result<Next, SlotError> {
        match self.slots.get_mut(tag as usize) {
            Some(s) if s.state == State::InFlight && !s.send_done => s.send_done = true,
            _ => {
                return Err(SlotError::Unexpected {
                    slot: tag,
                    what: "send",
                })
            }
        }
        Ok(self.advance(tag))
    }

    /// A response arrived; `invalidated` is the key the target invalidated with
    /// it (SEND_WITH_INVALIDATE), if any.
    pub fn on_response(
        &mut self,
        cqe: Completion,
        invalidated: Option<u32>,
    ) -> Result<Next, SlotError> {
        let tag = cqe.cid;
        let s = match self.slots.get_mut(tag as usize) {
            Some(s) if s.state == State::InFlight => s,
            _ => return Err(SlotError::UnknownCid(tag)),
        };
        if s.resp.is_some() {
            return Err(SlotError::DuplicateResponse(tag));
        }
        if let Some(k) = invalidated {
            match s.window {
                Window::Open(w) if w == k => s.window = Window::None,
                Window::Open(w) | Window::Invalidating(w) => {
                    return Err(SlotError::WrongInvalidation {
                        cid: tag,
                        got: k,
                        expected: w,
                    })
                }
                Window::None => {
                    return Err(SlotError::WrongInvalidation {
                        cid: tag,
                        got: k,
                        expected: 0,
                    })
                }
            }
        }
        s.resp = Some(cqe);
        Ok(self.advance(tag))
    }

    /// The LOCAL_INV posted for the slot completed.
    pub fn on_local_inv_done(&mut self, tag: u16) -> Result<Next, SlotError> {
        match self.slots.get_mut(tag as usize) {
            Some(s)
                if s.state == State::InFlight && matches!(s.window, Window::Invalidating(_)) =>
            {
                s.window = Window::None
            }
            _ => {
                return Err(SlotError::Unexpected {
                    slot: tag,
                    what: "local invalidate",
                })
            }
        }
        Ok(self.advance(tag))
    }

    fn advance(&mut self, tag: u16) -> Next {
        let s = &mut self.slots[tag as usize];
        let Some(resp) = s.resp else {
            return Next::Wait;
        };
        match s.window {
            Window::Open(k) => {
                s.window = Window::Invalidating(k);
                return Next::LocalInv(k);
            }
            Window::Invalidating(_) => return Next::Wait,
            Window::None => {}
        }
        if !s.send_done {
            return Next::Wait;
        }
        s.state = State::Reserved;
        s.resp = None;
        self.in_flight -= 1;
        Next::Complete(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::status::Status;
    use proptest::prelude::*;

    fn cqe(cid: u16) -> Completion {
        Completion::new(cid, Status::SUCCESS)
    }

    #[test]
    fn alloc_release() {
        let mut s = Slots::new(2);
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        assert_ne!(a, b);
        assert_eq!(s.alloc(), None);
        s.release(a).unwrap();
        assert_eq!(s.release(a), Err(SlotError::NotReserved(a)));
        assert_eq!(s.alloc(), Some(a));
        assert_eq!(s.release(9), Err(SlotError::NotReserved(9)));
    }

    #[test]
    fn remote_invalidate_completes() {
        let mut s = Slots::new(4);
        let t = s.alloc().unwrap();
        s.start(t, Some(0x1234_5601)).unwrap();
        assert_eq!(s.in_flight(), 1);
        assert_eq!(s.on_response(cqe(t), Some(0x1234_5601)), Ok(Next::Wait));
        assert_eq!(s.on_send_done(t), Ok(Next::Complete(cqe(t))));
        assert_eq!(s.in_flight(), 0);
        assert!(s.is_reserved(t));
    }

    #[test]
    fn missing_invalidate_asks_for_local_inv() {
        let mut s = Slots::new(4);
        let t = s.alloc().unwrap();
        s.start(t, Some(0x77)).unwrap();
        assert_eq!(s.on_send_done(t), Ok(Next::Wait));
        assert_eq!(s.on_response(cqe(t), None), Ok(Next::LocalInv(0x77)));
        assert_eq!(s.on_local_inv_done(t), Ok(Next::Complete(cqe(t))));
        // A stray local-inv completion is an error.
        assert!(s.on_local_inv_done(t).is_err());
    }

    #[test]
    fn local_inv_before_send_done() {
        let mut s = Slots::new(1);
        let t = s.alloc().unwrap();
        s.start(t, Some(5)).unwrap();
        assert_eq!(s.on_response(cqe(t), None), Ok(Next::LocalInv(5)));
        assert_eq!(s.on_local_inv_done(t), Ok(Next::Wait));
        assert_eq!(s.on_send_done(t), Ok(Next::Complete(cqe(t))));
    }

    #[test]
    fn protocol_violations() {
        let mut s = Slots::new(4);
        assert_eq!(s.on_response(cqe(1), None), Err(SlotError::UnknownCid(1)));
        assert_eq!(
            s.on_response(cqe(999), None),
            Err(SlotError::UnknownCid(999))
        );
        let t = s.alloc().unwrap();
        s.start(t, Some(0x10)).unwrap();
        assert_eq!(
            s.on_response(cqe(t), Some(0x11)),
            Err(SlotError::WrongInvalidation {
                cid: t,
                got: 0x11,
                expected: 0x10
            })
        );
        s.on_response(cqe(t), Some(0x10)).unwrap();
        assert_eq!(
            s.on_response(cqe(t), None),
            Err(SlotError::DuplicateResponse(t))
        );
        let u = s.alloc().unwrap();
        s.start(u, None).unwrap();
        assert!(matches!(
            s.on_response(cqe(u), Some(3)),
            Err(SlotError::WrongInvalidation { expected: 0, .. })
        ));
        assert!(s.on_send_done(t).is_ok());
        assert!(s.on_send_done(t).is_err(), "no second send completion");
    }

    #[test]
    fn no_window_completes_on_both() {
        let mut s = Slots::new(1);
        let t = s.alloc().unwrap();
        s.start(t, None).unwrap();
        assert_eq!(s.on_response(cqe(t), None), Ok(Next::Wait));
        assert_eq!(s.on_send_done(t), Ok(Next::Complete(cqe(t))));
        assert_eq!(s.start(t, None), Ok(()), "reserved slot can be reused");
    }

    proptest! {
        /// Whatever the order of the three events, the command completes
        /// exactly once, only after all of them, and never leaves a window open.
        #[test]
        fn any_order_completes_once(order in proptest::sample::select(vec![
            [0u8, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]),
            remote_inv in any::<bool>()) {
            let mut s = Slots::new(2);
            let t = s.alloc().unwrap();
            s.start(t, Some(42)).unwrap();
            let mut done = 0;
            let mut need_inv = false;
            let mut inv_done = false;
            for step in order {
                let r = match step {
                    0 => s.on_send_done(t).unwrap(),
                    1 => s.on_response(cqe(t), remote_inv.then_some(42)).unwrap(),
                    _ => {
                        if need_inv { inv_done = true; s.on_local_inv_done(t).unwrap() } else { Next::Wait }
                    }
                };
                match r {
                    Next::Complete(_) => done += 1,
                    Next::LocalInv(k) => { prop_assert_eq!(k, 42); need_inv = true; }
                    Next::Wait => {}
                }
            }
            if need_inv && !inv_done {
                if let Next::Complete(_) = s.on_local_inv_done(t).unwrap() { done += 1 }
            }
            prop_assert_eq!(done, 1);
            prop_assert_eq!(need_inv, !remote_inv);
            prop_assert_eq!(s.in_flight(), 0);
        }
    }
}
