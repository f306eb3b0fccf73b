//! Whether stopping this target now would leave a host without an
//! optimized path to a namespace it uses (`nvmf-target ok-to-stop`),
//! sans-IO over what the daemon sees: for each namespace, the controllers
//! connected here that see it and the other gateways that serve its store
//! (an RBD image's, from the record they share; a file or device has none).

use nvme::ana::AnaState;

use crate::backend::Peer;

/// One namespace's paths, as this target sees them.
#[derive(Debug, Clone)]
pub struct NsPaths {
    /// Its subsystem's NQN.
    pub subsystem: String,
    /// Its nsid.
    pub nsid: u32,
    /// Its store, for people (`rbd:pool/image`, a path).
    pub store: String,
    /// Host controllers connected here that see it.
    pub controllers: usize,
    /// The other gateways that serve its store (`None`: only this target
    /// can; `Some(None)`: not known yet).
    pub others: Option<Option<Vec<Peer>>>,
}

/// Why stopping would not be safe, and whether anything else could make it so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// One line per namespace that would lose its last optimized path
    /// (none: it is safe).
    pub reasons: Vec<String>,
    /// Each of those namespaces is served by this target alone (a file, a
    /// device, an RBD image no other gateway serves): no drain or wait
    /// helps, a restart pauses their I/O (the hosts hold it, within their
    /// ctrl-loss-tmo).
    pub alone: bool,
}

/// Whether stopping leaves every host an optimized path: now, or once
/// this target drained (`after_drain`: a live gateway configured
/// non-optimized takes a drained group over, so it counts as well).
pub fn verdict(paths: &[NsPaths], after_drain: bool) -> Verdict {
    let mut alone = true;
    let reasons: Vec<String> = paths
        .iter()
        .filter(|p| p.controllers > 0)
        .filter_map(|p| {
            let what = format!("{} nsid {} ({})", p.subsystem, p.nsid, p.store);
            let hosts = format!(
                "{} controller{} connected here",
                p.controllers,
                if p.controllers == 1 { "" } else { "s" }
            );
            let others = match &p.others {
                None => return Some(format!("{what}: served by this target alone; {hosts}")),
                Some(None) => {
                    alone = false;
                    return Some(format!("{what}: the other gateways that serve it are not known yet (just opened, or their record in the cluster cannot be read); {hosts}"));
                }
                Some(Some(o)) => o,
            };
            let serves = |o: &Peer| {
                o.fresh
                    && (o.state == AnaState::Optimized
                        || after_drain && o.candidate && o.state != AnaState::Inaccessible)
            };
            if others.iter().any(serves) {
                return None;
            }
            // No other gateway in the record (none ever, or the dead ones
            // forgotten): as alone as a file.
            if others.is_empty() {
                return Some(format!("{what}: no other gateway serves it; {hosts}"));
            }
            alone = false;
            let seen: Vec<String> = others
                .iter()
                .map(|o| match o.fresh {
                    true => format!("{} {}", o.gateway, state_name(o.state)),
                    false => format!("{} not heard from", o.gateway),
                })
                .collect();
            let would = match after_drain {
                true => " or would take it over",
                false => "",
            };
            Some(match seen.is_empty() {
                true => format!("{what}: no other gateway serves it; {hosts}"),
                false => format!(
                    "{what}: no other gateway serves it optimized{would} ({}); {hosts}",
                    seen.join(", ")
                ),
            })
        })
        .collect();
    Verdict {
        alone: alone && !reasons.is_empty(),
        reasons,
    }
}

/// Whether a drain would move some host's I/O to another gateway: a
/// namespace with controllers here has a live gateway beside this one that
/// serves it optimized or would take it over.
pub fn drain_helps(paths: &[NsPaths]) -> bool {
    paths
        .iter()
        .filter(|p| p.controllers > 0 && matches!(p.others, Some(Some(_))))
        .any(|p| verdict(std::slice::from_ref(p), true).reasons.is_empty())
}

/// A state as configuration files name it.
pub fn state_name(s: AnaState) -> &'static str {
    match s {
        AnaState::Optimized => "optimized",
        AnaState::NonOptimized => "non-optimized",
        AnaState::Inaccessible => "inaccessible",
        AnaState::PersistentLoss => "persistent-loss",
        AnaState::Change => "change",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(controllers: usize, others: Option<Vec<Peer>>) -> NsPaths {
        let others = others.map(Some);
        NsPaths {
            subsystem: "nqn.s".into(),
            nsid: 1,
            store: "rbd:rbd/img".into(),
            controllers,
            others,
        }
    }

    fn peer(gateway: &str, state: AnaState, fresh: bool) -> Peer {
        Peer {
            gateway: gateway.into(),
            state,
            fresh,
            candidate: false,
            promoted: false,
            first: false,
        }
    }

    fn reasons(paths: &[NsPaths]) -> Vec<String> {
        verdict(paths, false).reasons
    }

    #[test]
    fn safe_only_where_another_gateway_serves_optimized_or_nobody_is_connected() {
        assert!(reasons(&[]).is_empty());
        assert!(reasons(&[ns(0, None)]).is_empty(), "no host here");
        let alone = reasons(&[ns(2, None)]);
        assert_eq!(
            alone,
            ["nqn.s nsid 1 (rbd:rbd/img): served by this target alone; 2 controllers connected here"]
        );
        let ok = ns(1, Some(vec![peer("b:1", AnaState::Optimized, true)]));
        assert!(reasons(&[ok]).is_empty());
        let no = ns(
            1,
            Some(vec![
                peer("b:1", AnaState::NonOptimized, true),
                peer("c:2", AnaState::Optimized, false),
            ]),
        );
        assert_eq!(
            reasons(&[no]),
            ["nqn.s nsid 1 (rbd:rbd/img): no other gateway serves it optimized (b:1 non-optimized, c:2 not heard from); 1 controller connected here"]
        );
        let mut unknown = ns(1, None);
        unknown.others = Some(None);
        assert!(reasons(&[unknown])[0].contains("not known yet"));
        assert_eq!(
            reasons(&[ns(1, Some(vec![]))]),
            ["nqn.s nsid 1 (rbd:rbd/img): no other gateway serves it; 1 controller connected here"]
        );
        assert!(
            verdict(&[ns(1, Some(vec![]))], true).alone,
            "an image no other gateway serves: alone"
        );
    }

    #[test]
    fn after_a_drain_a_live_candidate_counts_and_alone_says_nothing_would_help() {
        let mut candidate = peer("b:1", AnaState::NonOptimized, true);
        candidate.candidate = true;
        let paired = ns(1, Some(vec![candidate.clone()]));
        assert!(!verdict(std::slice::from_ref(&paired), false)
            .reasons
            .is_empty());
        assert_eq!(
            verdict(std::slice::from_ref(&paired), true),
            Verdict::default()
        );
        assert!(drain_helps(std::slice::from_ref(&paired)));
        // A drained or silent candidate takes nothing over.
        let mut drained = candidate.clone();
        drained.state = AnaState::Inaccessible;
        let mut dead = candidate;
        dead.fresh = false;
        for o in [drained, dead] {
            let p = ns(1, Some(vec![o]));
            let v = verdict(std::slice::from_ref(&p), true);
            assert!(v.reasons[0].contains("or would take it over"), "{v:?}");
            assert!(!v.alone);
            assert!(!drain_helps(&[p]));
        }
        // Served here alone: nothing helps; with a paired one beside it,
        // the drain still helps that one.
        let single = ns(3, None);
        let v = verdict(std::slice::from_ref(&single), true);
        assert!(v.alone && v.reasons.len() == 1);
        assert!(!drain_helps(std::slice::from_ref(&single)));
        let both = [single, paired];
        assert!(drain_helps(&both));
        assert!(verdict(&both, true).alone);
        // No host here: nothing to say, nothing to drain.
        let idle = ns(0, Some(vec![]));
        assert_eq!(
            verdict(std::slice::from_ref(&idle), false),
            Verdict::default()
        );
        assert!(!drain_helps(&[idle]));
    }
}
