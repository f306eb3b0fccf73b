//! Which gateway writes a shared store (an RBD image): one at a time, and
//! never one that was cut off after another took over (docs/fencing.md).
//! The record naming the owner, and what a gateway that wants the store
//! does next given the record as it read it ([`decide`]), sans-IO;
//! `rbd::owner` keeps it in the RADOS object `nvmf_owner.<image id>`.
//!
//! A gateway that wants the store takes it when nobody owns it or its
//! owner released it; otherwise asks the owner to hand over (the owner
//! stops writing, waits until each of its writes completed, and marks the
//! record released); and if the owner has not released it within
//! [`HANDOVER`], fences the owner before it takes the record.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long an owner has to hand the image over when asked, before the
/// gateway that asked fences it.
pub const HANDOVER: Duration = Duration::from_secs(8);
/// How often a gateway that waits for the image asks again (a request the
/// owner got while it was still taking the image is not lost).
pub const ASK_AGAIN: Duration = Duration::from_secs(1);
/// The record in the object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Record {
    /// The owner's cluster address (`ip:port/nonce`).
    pub owner: String,
    /// Which of the owner's namespaces on that connection (random per
    /// ownership: a namespace reopened on the same connection is another).
    #[serde(default)]
    pub id: u64,
    /// The owner's name for people (`host:pid`).
    pub gateway: String,
    /// The owner handed the image over: its writes are all done.
    pub released: bool,
    /// The gateway it was handed to (its address), which takes it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// The record as read.
#[derive(Debug)]
pub enum Read {
    /// Nobody owns the image: no object (None) or the empty one the first
    /// watch created, at that version.
    Free(Option<u64>),
    /// Found, at that version.
    Found(Record, u64),
}

/// Where an attempt to take the image stands.
#[derive(Debug, Default)]
pub struct Attempt {
    /// The owner asked (address, id), when first and when last.
    asked: Option<((String, u64), Instant, Instant)>,
    /// A record handed to another gateway (its version), first seen when.
    reserved: Option<(u64, Instant)>,
}

/// The next step of an attempt to take the image.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Write this gateway's record over the version (None: create it).
    Take(Option<u64>),
    /// Ask the owner to hand the image over.
    Ask,
    /// Read the record again in a moment.
    Wait,
    /// Blocklist the owner, then write this gateway's record over the
    /// version.
    Fence(u64),
}

/// Who wants the image: a connection's address and an ownership's id.
#[derive(Debug, Clone, Copy)]
pub struct Me<'a> {
    /// Its connection's address.
    pub addr: &'a str,
    /// Its ownership's id.
    pub id: u64,
}

/// What a gateway (address `me`) that wants the image does next, given the
/// record as `seen` at `now`.
/// - Nobody owns it, it is ours (not released), or it was released to
///   nobody or to us: take it.
/// - It was handed to another gateway, which takes it first: wait; if that
///   gateway has not taken it within [`HANDOVER`], it never wrote with it:
///   take it.
/// - Another gateway owns it: ask (again every [`ASK_AGAIN`]); once it has
///   had [`HANDOVER`] since the first request, fence it.
pub fn decide(me: Me<'_>, seen: &Read, now: Instant, at: &mut Attempt) -> Step {
    let (r, v) = match seen {
        Read::Free(v) => return Step::Take(*v),
        Read::Found(r, v) => (r, *v),
    };
    let ours = r.owner == me.addr && r.id == me.id;
    if (ours && !r.released) || (r.released && r.to.as_deref().is_none_or(|t| t == me.addr)) {
        return Step::Take(Some(v));
    }
    if r.released {
        let since = match at.reserved {
            Some((rv, t)) if rv == v => t,
            _ => at.reserved.insert((v, now)).1,
        };
        return if now.duration_since(since) < HANDOVER {
            Step::Wait
        } else {
            Step::Take(Some(v))
        };
    }
    let owner = (r.owner.clone(), r.id);
    match &at.asked {
        Some((o, first, _)) if *o == owner && now.duration_since(*first) >= HANDOVER => {
            // Another ownership on this gateway's own connection (a
            // namespace reopened over the same image): its writes go
            // through the same client, in order; never blocklist ourselves.
            if r.owner == me.addr {
                Step::Take(Some(v))
            } else {
                Step::Fence(v)
            }
        }
        Some((o, first, last)) if *o == owner && now.duration_since(*last) >= ASK_AGAIN => {
            at.asked = Some((owner, *first, now));
            Step::Ask
        }
        Some((o, _, _)) if *o == owner => Step::Wait,
        // Not asked yet, or the image changed hands meanwhile: the new owner
        // gets its own HANDOVER.
        _ => {
            at.asked = Some((owner, now, now));
            Step::Ask
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway's pause between reads of the record.
    const POLL: Duration = Duration::from_millis(20);

    const B: Me<'static> = Me { addr: "b", id: 2 };

    fn rec(owner: &str, released: bool, to: Option<&str>) -> Read {
        Read::Found(
            Record {
                owner: owner.into(),
                id: if owner == "b" { 2 } else { 1 },
                gateway: format!("gw-{owner}"),
                released,
                to: to.map(Into::into),
            },
            7,
        )
    }

    #[test]
    fn free_ours_or_released_to_us_is_taken_at_once() {
        let t = Instant::now();
        let mut a = Attempt::default();
        assert_eq!(decide(B, &Read::Free(None), t, &mut a), Step::Take(None));
        assert_eq!(
            decide(B, &Read::Free(Some(3)), t, &mut a),
            Step::Take(Some(3))
        );
        assert_eq!(
            decide(B, &rec("b", false, None), t, &mut a),
            Step::Take(Some(7))
        );
        assert_eq!(
            decide(B, &rec("a", true, None), t, &mut a),
            Step::Take(Some(7))
        );
        assert_eq!(
            decide(B, &rec("a", true, Some("b")), t, &mut a),
            Step::Take(Some(7))
        );
        assert_eq!(a.asked, None, "nobody was asked");
    }

    #[test]
    fn an_owner_is_asked_again_and_fenced_after_the_handover_time() {
        let t = Instant::now();
        let mut a = Attempt::default();
        let owned = rec("a", false, None);
        assert_eq!(decide(B, &owned, t, &mut a), Step::Ask);
        assert_eq!(decide(B, &owned, t + POLL, &mut a), Step::Wait);
        assert_eq!(decide(B, &owned, t + ASK_AGAIN, &mut a), Step::Ask);
        assert_eq!(decide(B, &owned, t + ASK_AGAIN + POLL, &mut a), Step::Wait);
        assert_eq!(decide(B, &owned, t + HANDOVER, &mut a), Step::Fence(7));
        // Released meanwhile: taken without fencing.
        assert_eq!(
            decide(B, &rec("a", true, Some("b")), t + HANDOVER, &mut a),
            Step::Take(Some(7))
        );
    }

    #[test]
    fn a_record_handed_to_another_waits_for_it_then_is_taken_without_fencing() {
        let t = Instant::now();
        let mut a = Attempt::default();
        let handed = rec("a", true, Some("c"));
        assert_eq!(decide(B, &handed, t, &mut a), Step::Wait);
        assert_eq!(decide(B, &handed, t + HANDOVER - POLL, &mut a), Step::Wait);
        assert_eq!(
            decide(B, &handed, t + HANDOVER, &mut a),
            Step::Take(Some(7))
        );
        // A new version (handed again) starts the wait again.
        let again = Read::Found(
            Record {
                owner: "c".into(),
                id: 3,
                gateway: "gw-c".into(),
                released: true,
                to: Some("d".into()),
            },
            9,
        );
        assert_eq!(decide(B, &again, t + HANDOVER, &mut a), Step::Wait);
        // The old owner itself waits for the one it handed the image to.
        let mut a = Attempt::default();
        assert_eq!(
            decide(
                Me { addr: "a", id: 1 },
                &rec("a", true, Some("c")),
                t,
                &mut a
            ),
            Step::Wait
        );
    }

    #[test]
    fn a_new_owner_gets_its_own_handover_time_and_we_never_fence_ourselves() {
        let t = Instant::now();
        let mut a = Attempt::default();
        assert_eq!(decide(B, &rec("a", false, None), t, &mut a), Step::Ask);
        // Handed from a to c meanwhile: c is asked, and has HANDOVER.
        let c = Read::Found(
            Record {
                owner: "c".into(),
                id: 3,
                gateway: "gw-c".into(),
                released: false,
                to: None,
            },
            8,
        );
        assert_eq!(decide(B, &c, t + HANDOVER - POLL, &mut a), Step::Ask);
        assert_eq!(decide(B, &c, t + HANDOVER, &mut a), Step::Wait);
        assert_eq!(decide(B, &c, t + 2 * HANDOVER, &mut a), Step::Fence(8));
        // Another ownership on our own connection: taken, not fenced.
        let mut a = Attempt::default();
        let twin = Read::Found(
            Record {
                owner: "b".into(),
                id: 99,
                gateway: "gw-b".into(),
                released: false,
                to: None,
            },
            4,
        );
        assert_eq!(decide(B, &twin, t, &mut a), Step::Ask);
        assert_eq!(decide(B, &twin, t + HANDOVER, &mut a), Step::Take(Some(4)));
    }
}
