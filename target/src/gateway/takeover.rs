//! Taking over an ANA group: a gateway configured non-optimized for a
//! group (a candidate) serves it optimized while no other gateway of the
//! group's stores does (drained, fenced, stopped, dead), and gives it back
//! when one does again. Decided from the gateways' record
//! ([`super::roster`]) on every pass of the daemon's loop.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvme::ana::AnaState;

use crate::backend::{GatewayState, Peer};
use crate::model::ana::Ana;
use crate::model::namespace::Namespace;

/// Whether a gateway that would serve a group optimized if no other did
/// (a candidate, `promoted` now) does so, given the other gateways of one
/// of the group's images: not while a live gateway serves it optimized as
/// configured, or promoted and before this one in the order; not while a
/// live candidate before this one could take it instead.
pub fn takes_over(promoted: bool, peers: &[Peer]) -> bool {
    let live = || peers.iter().filter(|p| p.fresh);
    if live().any(|p| p.state == AnaState::Optimized && (!p.promoted || p.first)) {
        return false;
    }
    if promoted {
        return true;
    }
    // Only in the stead of a gateway it knows that served the group
    // (optimized as configured, not a candidate) and no longer does:
    // drained, fenced, stopped, dead. One it never heard of (not in the
    // record: an older version, or one that cannot write it) may serve it
    // still.
    peers
        .iter()
        .any(|p| !(p.candidate || p.fresh && p.state == AnaState::Optimized))
        && !live().any(|p| p.candidate && p.first)
}

/// One pass over the NVM namespaces `nss`: each shared store hears how
/// this gateway serves its group, and each group this gateway is a
/// candidate for is served optimized or given back. Returns the groups
/// that changed, and whether each is served optimized here now.
pub fn pass(ana: &Ana, nss: &[Arc<Namespace>]) -> Vec<(u32, bool)> {
    for ns in nss {
        let g = ns.ana_group;
        let Some(shared) = ns.backend.shared() else {
            continue;
        };
        shared.publish_state(GatewayState {
            state: ana.best(g),
            candidate: ana.candidate(g),
            promoted: ana.promoted(g),
        });
    }
    let mut groups: BTreeMap<u32, Vec<&Arc<Namespace>>> = BTreeMap::new();
    for ns in nss {
        groups.entry(ns.ana_group).or_default().push(ns);
    }
    let mut changed = Vec::new();
    for g in 1..=nvme::ana::MAX_GROUPS {
        let members = groups.get(&g).map_or(&[][..], |m| &m[..]);
        let now = ana.promoted(g);
        if !now && members.is_empty() {
            continue;
        }
        // Unknown peers (just opened, the record unreadable for a while):
        // not taken over.
        let want = ana.candidate(g)
            && !members.is_empty()
            && members
                .iter()
                .all(|ns| match ns.backend.shared().map(|s| s.peers()) {
                    Some(Some(peers)) => takes_over(now, &peers),
                    _ => false,
                });
        if ana.promote(g, want) {
            changed.push((g, want));
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(state: AnaState, fresh: bool, candidate: bool, promoted: bool, first: bool) -> Peer {
        Peer {
            gateway: "gw".into(),
            state,
            fresh,
            candidate,
            promoted,
            first,
        }
    }

    #[test]
    fn a_candidate_takes_a_group_over_only_while_nobody_serves_it_optimized() {
        use AnaState::*;
        // The optimized gateway is alive: no.
        assert!(!takes_over(
            false,
            &[peer(Optimized, true, false, false, true)]
        ));
        assert!(!takes_over(
            true,
            &[peer(Optimized, true, false, false, false)]
        ));
        // It drained (inaccessible) or died (not heard from): yes.
        assert!(takes_over(
            false,
            &[peer(Inaccessible, true, false, false, true)]
        ));
        assert!(takes_over(
            false,
            &[peer(Optimized, false, false, false, true)]
        ));
        assert!(!takes_over(false, &[]), "nobody known served it");
        assert!(
            takes_over(true, &[]),
            "kept once taken (the dead one forgotten)"
        );
        // Another candidate before this one takes it; one after does not.
        let drained = peer(Inaccessible, true, false, false, true);
        assert!(!takes_over(
            false,
            &[drained.clone(), peer(NonOptimized, true, true, false, true)]
        ));
        assert!(takes_over(
            false,
            &[
                drained.clone(),
                peer(NonOptimized, true, true, false, false)
            ]
        ));
        // Two took it at once: the later one gives it back.
        assert!(!takes_over(
            true,
            &[peer(Optimized, true, true, true, true)]
        ));
        assert!(takes_over(
            true,
            &[peer(Optimized, true, true, true, false)]
        ));
        // A dead candidate before this one does not hold it back.
        assert!(takes_over(
            false,
            &[drained, peer(NonOptimized, false, true, false, true)]
        ));
        // Only other candidates known: none of them served it.
        assert!(!takes_over(
            false,
            &[peer(NonOptimized, true, true, false, false)]
        ));
    }
}
