//! The life of one request, as a sans-IO state machine:
//!
//! ```text
//! capsule in ─▶ [wait for a data buffer] ─▶ [fetch host data] ─▶ execute ─▶ respond ─▶ release
//! ```
//!
//! The transport drives it: it reports what happened (a buffer was granted, an
//! RDMA READ completed, backend operations completed, the response SEND
//! completed, the queue is going away) and does what the returned [`Step`]
//! says. The machine keeps the rules that make a request safe to free:
//! - a request is released exactly once, and only when nothing still uses
//!   its memory: no work request in flight (the NIC may still write into its
//!   buffer) and no backend operation in flight (the kernel may still read or
//!   write it);
//! - once its queue is going away a request never responds;
//! - each use of a request slot has its own generation, so a completion that
//!   arrives after the slot was released and reused is recognised as stale
//!   (the transport puts the generation into work-request ids and io_uring
//!   user data, and drops completions whose generation is not current).

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Not in use.
    Free,
    /// Waiting its turn for a data buffer (FIFO per size class).
    WaitBuffer,
    /// Host data being fetched by RDMA READ.
    Fetching,
    /// Executing: backend operations, the command core, or parked (an
    /// Asynchronous Event Request, or a command held during shutdown).
    Executing,
    /// The response (after any read data) was posted; waiting for its SEND to
    /// complete.
    Responding,
}

/// What the transport must do next for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Take a data buffer: call [`Lifecycle::buffer_granted`] when it has one
    /// (at once, or when one is given back).
    NeedBuffer,
    /// Post the RDMA READ of the host's data, then [`Lifecycle::fetch_posted`].
    Fetch,
    /// Execute the command. Backend operations it starts are announced with
    /// [`Lifecycle::backend_started`]; a command that is done without them
    /// (or whose submission failed) calls [`Lifecycle::executed`].
    Execute,
    /// Post the response (after the RDMA WRITE of read data, if any), then
    /// [`Lifecycle::response_posted`].
    Respond,
    /// Give back what the request holds ([`Lifecycle::release`]).
    Release,
    /// Nothing now: an operation in flight will report back.
    Wait,
}

/// What a released request held, to give back exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// A data buffer from the pool.
    pub buffer: bool,
    /// The receive buffer its capsule arrived in (in-capsule data used in place).
    pub recv: bool,
}

/// The state of one request slot.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    stage: Stage,
    gen: u16,
    /// The command's data comes from the host by RDMA READ.
    fetch: bool,
    /// A signaled work request (READ or the response SEND) is in flight.
    wr: bool,
    /// Backend operations in flight.
    backend: u16,
    /// The queue is going away: never respond.
    dead: bool,
    held: Held,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::new()
    }
}

impl Lifecycle {
    /// A free slot.
    pub const fn new() -> Lifecycle {
        Lifecycle {
            stage: Stage::Free,
            gen: 0,
            fetch: false,
            wr: false,
            backend: 0,
            dead: false,
            held: Held {
                buffer: false,
                recv: false,
            },
        }
    }

    /// The current stage.
    pub fn stage(&self) -> Stage {
        self.stage
    }
    /// The generation of the current (or last) use of this slot.
    pub fn generation(&self) -> u16 {
        self.gen
    }
    /// Whether the slot is in use.
    pub fn in_use(&self) -> bool {
        self.stage != Stage::Free
    }
    /// Whether the queue is going away for this request.
    pub fn is_dead(&self) -> bool {
        self.dead
    }
    /// Backend operations in flight.
    pub fn backend_in_flight(&self) -> u16 {
        self.backend
    }
    /// What the request holds now.
    pub fn held(&self) -> Held {
        self.held
    }

    /// Whether a backend completion issued for use `gen` of this slot belongs
    /// to the request there now: the slot is in that use and has operations
    /// in flight. A completion that arrives after its request was released
    /// (and maybe the slot reused) is stale and must touch nothing.
    pub fn owns_backend_completion(&self, gen: u16) -> bool {
        self.in_use() && self.gen == gen && self.backend > 0
    }

    /// Whether a work completion (READ, WRITE or SEND) issued for use `gen`
    /// of this slot belongs to the request there now.
    pub fn owns_work_completion(&self, gen: u16) -> bool {
        self.in_use() && self.gen == gen
    }

    /// A capsule arrived in this free slot. `buffer`: the command needs a data
    /// buffer from the pool; `fetch`: its data comes by RDMA READ (implies
    /// `buffer`); `recv`: it keeps its receive buffer (in-capsule data used in
    /// place). Starts a new generation.
    pub fn arrive(&mut self, buffer: bool, fetch: bool, recv: bool) -> Step {
        debug_assert_eq!(self.stage, Stage::Free, "arrive on a used slot");
        if self.stage != Stage::Free {
            return Step::Wait;
        }
        self.gen = self.gen.wrapping_add(1);
        self.fetch = fetch;
        self.wr = false;
        self.backend = 0;
        self.dead = false;
        self.held = Held {
            buffer: false,
            recv,
        };
        if buffer || fetch {
            self.stage = Stage::WaitBuffer;
            Step::NeedBuffer
        } else {
            self.stage = Stage::Executing;
            Step::Execute
        }
    }

    /// The receive buffer was given back early (its data copied, or not needed).
    pub fn recv_returned(&mut self) {
        self.held.recv = false;
    }

    /// A data buffer was granted.
    pub fn buffer_granted(&mut self) -> Step {
        if self.stage != Stage::WaitBuffer {
            return Step::Wait;
        }
        self.held.buffer = true;
        if self.dead {
            return Step::Release;
        }
        if self.fetch {
            self.stage = Stage::Fetching;
            Step::Fetch
        } else {
            self.stage = Stage::Executing;
            Step::Execute
        }
    }

    /// The RDMA READ was posted.
    pub fn fetch_posted(&mut self) {
        if self.stage == Stage::Fetching {
            self.wr = true;
        }
    }

    /// The RDMA READ completed (`ok`), or failed or was flushed.
    pub fn fetched(&mut self, ok: bool) -> Step {
        if self.stage != Stage::Fetching || !self.wr {
            return Step::Wait;
        }
        self.wr = false;
        if !ok {
            // The queue pair broke: the queue goes away.
            self.dead = true;
        }
        if self.dead {
            return Step::Release;
        }
        self.stage = Stage::Executing;
        Step::Execute
    }

    /// The host's data arrived damaged (an NVMe/TCP data digest error): the
    /// command is answered without executing, and the queue goes on.
    pub fn fetch_corrupt(&mut self) -> Step {
        if self.stage != Stage::Fetching || !self.wr {
            return Step::Wait;
        }
        self.wr = false;
        self.stage = Stage::Executing;
        self.finish_execution()
    }

    /// `n` more backend operations were submitted for this request.
    pub fn backend_started(&mut self, n: u16) {
        if self.stage == Stage::Executing {
            self.backend += n;
        }
    }

    /// One backend operation completed. When it was the last: respond (or
    /// release, if the queue is going away).
    pub fn backend_done(&mut self) -> Step {
        if self.stage != Stage::Executing || self.backend == 0 {
            return Step::Wait;
        }
        self.backend -= 1;
        if self.backend > 0 {
            return Step::Wait;
        }
        self.finish_execution()
    }

    /// Execution finished without (more) backend operations in flight: the
    /// command was done by the core, failed, or its backend submission failed
    /// part way (then the operations already submitted must complete first).
    pub fn executed(&mut self) -> Step {
        if self.stage != Stage::Executing || self.backend > 0 {
            return Step::Wait;
        }
        self.finish_execution()
    }

    fn finish_execution(&mut self) -> Step {
        if self.dead {
            Step::Release
        } else {
            Step::Respond
        }
    }

    /// The command cannot run now (no buffer needed) and is answered at once
    /// with an error: same as [`Lifecycle::executed`] from any live stage but
    /// `Responding`.
    pub fn fail_early(&mut self) -> Step {
        match self.stage {
            Stage::WaitBuffer if !self.dead => {
                self.stage = Stage::Executing;
                self.finish_execution()
            }
            Stage::Executing => self.executed(),
            _ => Step::Wait,
        }
    }

    /// The response was posted.
    pub fn response_posted(&mut self) {
        if self.stage == Stage::Executing && self.backend == 0 && !self.dead {
            self.stage = Stage::Responding;
            self.wr = true;
        }
    }

    /// The response SEND completed (or failed, or was flushed).
    pub fn response_done(&mut self, ok: bool) -> Step {
        if self.stage != Stage::Responding || !self.wr {
            return Step::Wait;
        }
        self.wr = false;
        if !ok {
            self.dead = true;
        }
        Step::Release
    }

    /// The queue is going away. A request with nothing in flight is released
    /// at once; one with a work request or backend operation in flight waits
    /// for it (a flushed work request still completes).
    pub fn disconnect(&mut self) -> Step {
        if self.stage == Stage::Free {
            return Step::Wait;
        }
        self.dead = true;
        self.releasable()
    }

    /// The queue pair is destroyed: its work requests will not complete any
    /// more (and no longer touch memory). Backend operations still must.
    pub fn qp_destroyed(&mut self) -> Step {
        if self.stage == Stage::Free {
            return Step::Wait;
        }
        self.dead = true;
        self.wr = false;
        self.releasable()
    }

    fn releasable(&self) -> Step {
        if self.wr || self.backend > 0 {
            Step::Wait
        } else {
            Step::Release
        }
    }

    /// Frees the slot and says what to give back. Returns `None` (and changes
    /// nothing) if the slot is free or something is still in flight.
    pub fn release(&mut self) -> Option<Held> {
        if self.stage == Stage::Free || self.wr || self.backend > 0 {
            return None;
        }
        self.stage = Stage::Free;
        self.dead = false;
        Some(std::mem::take(&mut self.held))
    }
}

/// A reference check of the lifecycle's rules against a model of what a
/// driver (or a misbehaving device) can deliver, in any order. Used by the
/// property tests and by the fuzz target `lifecycle`.
pub mod model {
    use super::{Lifecycle, Stage, Step};

    /// One event.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Ev {
        /// A data buffer is granted.
        Grant,
        /// The driver posted the RDMA READ.
        FetchPosted,
        /// The RDMA READ completed (ok or not).
        Fetched(bool),
        /// The driver started this many backend operations.
        Started(u16),
        /// One backend operation completed.
        BackendDone,
        /// The command executed without (more) backend operations.
        Executed,
        /// The command failed before executing.
        FailEarly,
        /// The driver posted the response.
        Posted,
        /// The response SEND completed (ok or not).
        SendDone(bool),
        /// The queue is going away.
        Disconnect,
        /// The queue pair was destroyed (work requests will never complete).
        QpDestroyed,
        /// The driver asks to release.
        Release,
        /// A completion of the slot's previous use arrives (late).
        Stale,
    }

    impl Ev {
        /// The event a byte stands for (fuzzing input).
        pub fn from_byte(b: u8) -> Ev {
            match b % 13 {
                0 => Ev::Grant,
                1 => Ev::FetchPosted,
                2 => Ev::Fetched(b & 0x80 == 0),
                3 => Ev::Started(1 + (b as u16 >> 4) % 3),
                4 => Ev::BackendDone,
                5 => Ev::Executed,
                6 => Ev::FailEarly,
                7 => Ev::Posted,
                8 => Ev::SendDone(b & 0x80 == 0),
                9 => Ev::Disconnect,
                10 => Ev::QpDestroyed,
                11 => Ev::Release,
                _ => Ev::Stale,
            }
        }
    }

    /// Replays `evs` on a request that arrived needing a buffer, a fetch and
    /// its receive buffer as given, skipping events the model says cannot
    /// happen (a completion of nothing in flight). Checks: a release happens
    /// only with nothing in flight and at most once per use; no response is
    /// asked for once the queue went away; the backend count matches; and a
    /// request that went away is released once what it waits for completed.
    pub fn replay(buffer: bool, fetch: bool, recv: bool, evs: &[Ev]) -> Result<(), String> {
        let mut l = Lifecycle::new();
        l.arrive(buffer, fetch, recv);
        let mut wr_in_flight = false; // a signaled WR the driver posted
        let mut ops = 0u16; // backend ops in flight
        let mut released = 0;
        let mut dead = false;
        for &e in evs {
            let before = l.stage();
            let step = match e {
                Ev::Grant => l.buffer_granted(),
                Ev::FetchPosted => {
                    l.fetch_posted();
                    if l.stage() == Stage::Fetching {
                        wr_in_flight = true;
                    }
                    Step::Wait
                }
                Ev::Fetched(ok) => {
                    if !(wr_in_flight && before == Stage::Fetching) {
                        continue;
                    }
                    wr_in_flight = false;
                    dead |= !ok;
                    l.fetched(ok)
                }
                Ev::Started(n) => {
                    l.backend_started(n);
                    if before == Stage::Executing {
                        ops += n;
                    }
                    Step::Wait
                }
                Ev::BackendDone => {
                    if l.owns_backend_completion(l.generation()) != (ops > 0) {
                        return Err(format!("a completion with {ops} in flight misjudged"));
                    }
                    if ops == 0 {
                        continue;
                    }
                    ops -= 1;
                    l.backend_done()
                }
                Ev::Stale => {
                    let old = l.generation().wrapping_sub(1);
                    if l.owns_backend_completion(old) || l.owns_work_completion(old) {
                        return Err("a completion of the previous use was taken".into());
                    }
                    continue;
                }
                Ev::Executed => l.executed(),
                Ev::FailEarly => l.fail_early(),
                Ev::Posted => {
                    l.response_posted();
                    if l.stage() == Stage::Responding && before == Stage::Executing {
                        wr_in_flight = true;
                    }
                    Step::Wait
                }
                Ev::SendDone(ok) => {
                    if !(wr_in_flight && before == Stage::Responding) {
                        continue;
                    }
                    wr_in_flight = false;
                    dead |= !ok;
                    l.response_done(ok)
                }
                Ev::Disconnect => {
                    dead |= l.in_use();
                    l.disconnect()
                }
                Ev::QpDestroyed => {
                    if l.in_use() {
                        dead = true;
                        wr_in_flight = false;
                    }
                    l.qp_destroyed()
                }
                Ev::Release => {
                    if l.release().is_some() {
                        if wr_in_flight || ops != 0 {
                            return Err(format!("released with work in flight after {e:?}"));
                        }
                        released += 1;
                        dead = false;
                    }
                    if !l.in_use() {
                        break;
                    }
                    Step::Wait
                }
            };
            if l.backend_in_flight() != ops {
                return Err(format!(
                    "backend count {} where the model has {ops}",
                    l.backend_in_flight()
                ));
            }
            if dead && step == Step::Respond {
                return Err(format!("respond after the queue went away ({e:?})"));
            }
            if dead && (step == Step::Fetch || step == Step::Execute) && before != Stage::Free {
                return Err(format!("{step:?} after the queue went away ({e:?})"));
            }
            if step == Step::Release && (wr_in_flight || ops != 0) {
                return Err(format!("release asked with work in flight ({e:?})"));
            }
        }
        if released > 1 {
            return Err(format!("released {released} times"));
        }
        // Drain: deliver what is in flight, then the queue goes away.
        if l.in_use() {
            l.disconnect();
            while ops > 0 {
                ops -= 1;
                l.backend_done();
            }
            if wr_in_flight {
                match l.stage() {
                    Stage::Fetching => {
                        l.fetched(false);
                    }
                    Stage::Responding => {
                        l.response_done(false);
                    }
                    _ => {}
                }
            }
            if l.release().is_none() {
                return Err("a dead request with nothing in flight did not release".into());
            }
        }
        if l.in_use() {
            return Err("still in use after the drain".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn read_from_host_then_write_to_disk() {
        let mut l = Lifecycle::new();
        assert_eq!(l.arrive(true, true, false), Step::NeedBuffer);
        assert_eq!(l.stage(), Stage::WaitBuffer);
        assert_eq!(l.buffer_granted(), Step::Fetch);
        l.fetch_posted();
        assert_eq!(l.disconnect(), Step::Wait, "READ in flight");
        // Re-arm: a fresh life without disconnect.
        let mut l = Lifecycle::new();
        l.arrive(true, true, false);
        l.buffer_granted();
        l.fetch_posted();
        assert_eq!(l.fetched(true), Step::Execute);
        l.backend_started(1);
        assert_eq!(l.release(), None, "backend in flight");
        assert_eq!(l.backend_done(), Step::Respond);
        l.response_posted();
        assert_eq!(l.stage(), Stage::Responding);
        assert_eq!(l.release(), None, "SEND in flight");
        assert_eq!(l.response_done(true), Step::Release);
        assert_eq!(
            l.release(),
            Some(Held {
                buffer: true,
                recv: false
            })
        );
        assert_eq!(l.release(), None, "released once");
        assert!(!l.in_use());
    }

    #[test]
    fn damaged_host_data_is_answered_without_executing() {
        let mut l = Lifecycle::new();
        l.arrive(true, true, false);
        l.buffer_granted();
        assert_eq!(l.fetch_corrupt(), Step::Wait, "no data asked for yet");
        l.fetch_posted();
        assert_eq!(l.fetch_corrupt(), Step::Respond);
        assert_eq!(l.executed(), Step::Respond, "answered as executed");
        l.response_posted();
        assert_eq!(l.response_done(true), Step::Release);
        assert_eq!(l.release().map(|h| h.buffer), Some(true));
        // Once its queue is going away it answers nothing.
        let mut l = Lifecycle::new();
        l.arrive(true, true, false);
        l.buffer_granted();
        l.fetch_posted();
        assert_eq!(l.disconnect(), Step::Wait, "data on its way");
        assert_eq!(l.fetch_corrupt(), Step::Release);
    }

    #[test]
    fn no_data_command() {
        let mut l = Lifecycle::new();
        assert_eq!(l.arrive(false, false, false), Step::Execute);
        assert_eq!(l.executed(), Step::Respond);
        l.response_posted();
        assert_eq!(l.response_done(true), Step::Release);
        assert_eq!(l.release(), Some(Held::default()));
    }

    #[test]
    fn in_capsule_keeps_its_receive_until_release() {
        let mut l = Lifecycle::new();
        assert_eq!(l.arrive(false, false, true), Step::Execute);
        l.backend_started(1);
        assert_eq!(l.backend_done(), Step::Respond);
        l.response_posted();
        l.response_done(true);
        assert_eq!(
            l.release(),
            Some(Held {
                buffer: false,
                recv: true
            })
        );
    }

    #[test]
    fn generations_advance_per_use() {
        let mut l = Lifecycle::new();
        let g0 = l.generation();
        l.arrive(false, false, false);
        let g1 = l.generation();
        assert_ne!(g0, g1);
        l.executed();
        l.response_posted();
        l.response_done(true);
        l.release();
        assert_eq!(l.generation(), g1, "release keeps the generation");
        l.arrive(false, false, false);
        assert_ne!(l.generation(), g1);
    }

    #[test]
    fn partial_submit_failure_waits_for_the_submitted_ops() {
        // A DSM of three ranges: two fallocates were queued, the third failed.
        let mut l = Lifecycle::new();
        l.arrive(true, true, false);
        l.buffer_granted();
        l.fetch_posted();
        l.fetched(true);
        l.backend_started(2);
        assert_eq!(l.executed(), Step::Wait, "two still in flight");
        assert_eq!(l.backend_done(), Step::Wait);
        assert_eq!(l.backend_done(), Step::Respond);
        assert_eq!(
            l.backend_done(),
            Step::Wait,
            "a third completion is ignored"
        );
    }

    #[test]
    fn disconnect_while_waiting_for_a_buffer_releases_now() {
        let mut l = Lifecycle::new();
        l.arrive(true, false, false);
        assert_eq!(l.disconnect(), Step::Release);
        assert_eq!(l.release(), Some(Held::default()));
        // A late grant for the old wait is ignored.
        assert_eq!(l.buffer_granted(), Step::Wait);
    }

    #[test]
    fn disconnect_during_backend_io_waits_then_releases_without_response() {
        let mut l = Lifecycle::new();
        l.arrive(true, false, false);
        l.buffer_granted();
        l.backend_started(1);
        assert_eq!(l.disconnect(), Step::Wait);
        assert_eq!(l.backend_done(), Step::Release);
        assert_eq!(l.executed(), Step::Release, "never responds once dead");
        assert!(l.release().is_some());
    }

    #[test]
    fn failed_read_kills_the_request() {
        let mut l = Lifecycle::new();
        l.arrive(true, true, false);
        l.buffer_granted();
        l.fetch_posted();
        assert_eq!(l.fetched(false), Step::Release);
        assert!(l.is_dead());
        assert!(l.release().is_some());
    }

    #[test]
    fn destroyed_qp_frees_requests_with_lost_work_requests() {
        let mut l = Lifecycle::new();
        l.arrive(false, false, false);
        l.executed();
        l.response_posted();
        assert_eq!(l.disconnect(), Step::Wait);
        assert_eq!(l.qp_destroyed(), Step::Release);
        assert!(l.release().is_some());
    }

    #[test]
    fn parked_command_is_released_on_disconnect() {
        let mut l = Lifecycle::new();
        l.arrive(false, false, false); // an AER, parked in Executing
        assert_eq!(l.disconnect(), Step::Release);
        assert_eq!(l.executed(), Step::Release, "never responds once dead");
        assert!(l.release().is_some());
    }

    /// A DSM whose submission failed part way: two of its operations were
    /// queued. Their completions arrive after the response, after the release,
    /// and after the slot was reused: each is matched to its own use only.
    #[test]
    fn late_backend_completions_touch_only_their_own_request() {
        let mut l = Lifecycle::new();
        l.arrive(false, false, false);
        let g1 = l.generation();
        l.backend_started(2);
        assert_eq!(l.executed(), Step::Wait, "the queued operations are owed");
        assert!(l.owns_backend_completion(g1));
        assert_eq!(l.backend_done(), Step::Wait);
        assert!(l.owns_backend_completion(g1));
        assert_eq!(l.backend_done(), Step::Respond);
        // Nothing more in flight: a third (duplicate or late) completion of
        // the same use is not the request's.
        assert!(!l.owns_backend_completion(g1));
        l.response_posted();
        assert_eq!(l.response_done(true), Step::Release);
        assert!(l.release().is_some());
        assert!(!l.owns_backend_completion(g1), "released slot");
        assert!(!l.owns_work_completion(g1), "released slot");
        // The slot is reused by a read with one operation in flight.
        l.arrive(true, false, false);
        let g2 = l.generation();
        assert_ne!(g1, g2);
        assert_eq!(l.buffer_granted(), Step::Execute);
        l.backend_started(1);
        assert!(!l.owns_backend_completion(g1), "the old use's completion");
        assert!(!l.owns_work_completion(g1));
        assert!(l.owns_backend_completion(g2));
        assert_eq!(l.backend_in_flight(), 1, "untouched by the stale one");
        assert_eq!(l.backend_done(), Step::Respond);
    }

    #[test]
    fn early_failure_from_a_buffer_wait() {
        let mut l = Lifecycle::new();
        l.arrive(true, false, false);
        assert_eq!(l.fail_early(), Step::Respond);
        l.response_posted();
        assert_eq!(l.response_done(true), Step::Release);
    }

    use super::model::{self, Ev};

    fn ev() -> impl Strategy<Value = Ev> {
        any::<u8>().prop_map(Ev::from_byte)
    }

    proptest! {
        /// Whatever arrives in whatever order, the rules hold (see
        /// [`model::replay`]).
        #[test]
        fn invariants(buffer in any::<bool>(), fetch in any::<bool>(), recv in any::<bool>(),
                      evs in proptest::collection::vec(ev(), 0..40)) {
            if let Err(e) = model::replay(buffer, fetch, recv, &evs) {
                prop_assert!(false, "{}", e);
            }
        }
    }
}
