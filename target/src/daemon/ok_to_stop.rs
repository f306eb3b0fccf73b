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

/// Why stopping now is not safe: one line per namespace that would lose
/// its last optimized path (none: it is safe).
pub fn reasons(paths: &[NsPaths]) -> Vec<String> {
    paths
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
                Some(None) => return Some(format!("{what}: the other gateways that serve it are not known yet (just opened, or their record in the cluster cannot be read); {hosts}")),
                Some(Some(o)) => o,
            };
            if others
                .iter()
                .any(|o| o.fresh && o.state == AnaState::Optimized)
            {
                return None;
            }
            let seen: Vec<String> = others
                .iter()
                .map(|o| match o.fresh {
                    true => format!("{} {}", o.gateway, state_name(o.state)),
                    false => format!("{} not heard from", o.gateway),
                })
                .collect();
            Some(match seen.is_empty() {
                true => format!("{what}: no other gateway serves it; {hosts}"),
                false => format!(
                    "{what}: no other gateway serves it optimized ({}); {hosts}",
                    seen.join(", ")
                ),
            })
        })
        .collect()
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
    }
}
