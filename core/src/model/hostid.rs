//! A host identifier belongs to the host NQN that uses it. Reservations
//! name a registrant by its host identifier (HOSTID), which a host chooses
//! itself and sends in clear, and every registrant may read the others'
//! in a Reservation Report: taken on the host's word, one host could
//! connect with another's identifier and act as that host. So an
//! identifier is bound to the host NQN that first used it, for as long as
//! a controller of that NQN uses it or a registration it made lasts (on
//! every gateway that shares the registrations), and a Connect that pairs
//! it with another NQN is refused, as the Linux host itself refuses to
//! pair one identifier with two NQNs.
//!
//! Where the host NQN authenticated, the binding is to the proven NQN: a
//! controller of a host with a key may connect beside a controller that
//! uses the identifier under another NQN and never authenticated; once it
//! authenticates, that controller loses the identifier (it is revoked).

use std::sync::Arc;

use crate::model::controller::Controller;
use crate::model::target::Target;
use crate::reservation::state::{nqn_tag, HostId};

/// What holds an identifier under another NQN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A controller of that NQN.
    Controller,
    /// A registration that NQN made.
    Registration,
}

impl Holder {
    /// The reason a refused Connect is counted and logged under.
    pub fn reason(&self) -> &'static str {
        match self {
            Holder::Controller => "hostid_used_by_another_hostnqn",
            Holder::Registration => "hostid_registered_by_another_hostnqn",
        }
    }
}

/// Whether an identifier is no host's in particular (all zero): such a
/// host takes no part in reservations and binds nothing.
pub fn anonymous(hostid: &HostId) -> bool {
    *hostid == [0; 16]
}

/// What keeps `hostnqn` from using `hostid` now, if anything.
/// `will_authenticate`: its controller must authenticate before it runs a
/// command, and so may take the identifier from controllers that never did.
pub fn holder(
    target: &Target,
    hostid: &HostId,
    hostnqn: &str,
    will_authenticate: bool,
) -> Option<Holder> {
    if anonymous(hostid) {
        return None;
    }
    let other = |c: &Controller| &c.hostid == hostid && c.hostnqn != hostnqn && !c.is_revoked();
    let subsystems = target.all_subsystems();
    for c in subsystems.iter().flat_map(|s| s.controllers()) {
        if other(&c) && (c.auth.authenticated() || !will_authenticate) {
            return Some(Holder::Controller);
        }
    }
    let tag = nqn_tag(hostnqn);
    let registered = subsystems
        .iter()
        .flat_map(|s| s.namespaces().iter().cloned().collect::<Vec<_>>())
        .any(|ns| ns.resv.bound_elsewhere(hostid, &tag));
    registered.then_some(Holder::Registration)
}

/// `ctrl`'s host authenticated: controllers that use its identifier under
/// another NQN and never authenticated lose it. Returns them, revoked.
pub fn take_from_unproven(target: &Target, ctrl: &Controller) -> Vec<Arc<Controller>> {
    if anonymous(&ctrl.hostid) {
        return Vec::new();
    }
    let mut gone = Vec::new();
    for c in target.all_controllers() {
        if c.hostid == ctrl.hostid
            && c.hostnqn != ctrl.hostnqn
            && !c.auth.authenticated()
            && !c.is_revoked()
        {
            c.revoke();
            gone.push(c);
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::fabrics::{self, ConnectError};
    use crate::model::auth::HostConfig;
    use crate::model::namespace::Namespace;
    use crate::model::subsystem::{Subsystem, SubsystemKind};
    use nvme::fabrics::{ConnectCommand, ConnectData};
    use nvme::reservation::{rrega, ResvCommand};
    use nvme::Status;

    const SUB: &str = "nqn.2026-11.io.test:shared";
    const VICTIM: &str = "nqn.2026-11.io.test:victim";
    const IMPOSTOR: &str = "nqn.2026-11.io.test:impostor";
    const H: HostId = [0x5a; 16];

    fn target(victim_key: bool) -> Target {
        let ns = Arc::new(Namespace::new(
            SUB,
            1,
            Box::new(crate::backend::null::Null::default()),
            1 << 20,
            512,
            false,
        ));
        let s = Arc::new(Subsystem::new(
            SUB.into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "m".into(),
            vec![ns],
        ));
        let t = Target::new(vec![s], vec![], 0);
        if victim_key {
            t.credentials.set(&[HostConfig {
                nqn: VICTIM.into(),
                dhchap_key: Some(dhchap::Secret::new(None, &[5; 32]).unwrap()),
                dhchap_ctrl_key: None,
                dhchap_hash: dhchap::HashId::Sha256,
                dhchap_dhgroup: dhchap::GroupId::Null,
                tls_key: None,
                tls_derivation: tlspsk::Derivation::Compat,
            }]);
        }
        t
    }

    fn admin(t: &Target, host: &str, hostid: HostId) -> Result<Arc<Controller>, ConnectError> {
        let c = ConnectCommand {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 0,
        }
        .to_command(1);
        let d = ConnectData {
            hostid,
            cntlid: 0xFFFF,
            subsysnqn: SUB.into(),
            hostnqn: host.into(),
        }
        .encode();
        fabrics::connect(t, &fabrics::Arrival::plain(0, 31, None), &c, &d).map(|x| x.0)
    }

    fn refused_as(e: ConnectError, reason: &str) {
        assert_eq!(e.status, Status::CONNECT_INVALID_PARAM);
        assert_eq!(e.result, 1 << 16, "IATTR: the HOSTID field, offset 0");
        assert_eq!(e.reason(), reason);
    }

    /// Issue 38, 2: another allowed host connects with the victim's HOSTID.
    #[test]
    fn a_hostid_in_use_is_refused_to_another_nqn() {
        let t = target(false);
        let v = admin(&t, VICTIM, H).unwrap();
        refused_as(
            admin(&t, IMPOSTOR, H).unwrap_err(),
            "hostid_used_by_another_hostnqn",
        );
        // The victim's other paths, and other identifiers, connect.
        admin(&t, VICTIM, H).unwrap();
        admin(&t, IMPOSTOR, [0x5b; 16]).unwrap();
        // Hosts without an identifier bind nothing.
        admin(&t, VICTIM, [0; 16]).unwrap();
        admin(&t, IMPOSTOR, [0; 16]).unwrap();
        // Once the victim's controllers are gone, and it registered
        // nothing, the identifier is free.
        for c in t.all_controllers().iter().filter(|c| c.hostid == H) {
            c.subsys.remove_controller(c.cntlid);
        }
        drop(v);
        admin(&t, IMPOSTOR, H).unwrap();
    }

    /// The binding lasts as long as the victim's registration, and holds
    /// in the shared state (what another gateway reads).
    #[test]
    fn a_registration_keeps_the_binding() {
        let t = target(false);
        let v = admin(&t, VICTIM, H).unwrap();
        let ns = v.subsys.namespace(1).unwrap();
        let reg = ResvCommand {
            opcode: nvme::opcode::io::RESV_REGISTER,
            action: rrega::REGISTER,
            iekey: false,
            rtype: 0,
            cptpl: 0,
            crkey: 0,
            key2: 0x77,
        };
        ns.resv.apply(&H, &nqn_tag(VICTIM), &reg).unwrap();
        v.subsys.remove_controller(v.cntlid);
        refused_as(
            admin(&t, IMPOSTOR, H).unwrap_err(),
            "hostid_registered_by_another_hostnqn",
        );
        // Had it connected before (another gateway's Connect), it still
        // cannot act as the registrant.
        let unreg = ResvCommand {
            action: rrega::UNREGISTER,
            iekey: true,
            ..reg
        };
        assert_eq!(
            ns.resv.apply(&H, &nqn_tag(IMPOSTOR), &unreg).unwrap_err(),
            Status::RESERVATION_CONFLICT
        );
        let st = serde_json::to_string(&*ns.resv.lock()).unwrap();
        assert!(st.contains("\"nqn\""), "{st}");
        // The victim itself reconnects and unregisters.
        admin(&t, VICTIM, H).unwrap();
        ns.resv.apply(&H, &nqn_tag(VICTIM), &unreg).unwrap();
        admin(&t, IMPOSTOR, H).unwrap_err();
    }

    /// Issue 57, 3: a peer took the victim's identifier on this gateway
    /// before the victim registered through another one. The registration
    /// and a Write Exclusive reservation arrive in the shared state: the
    /// peer is no registrant here (its writes conflict, its reads pass as
    /// any non-registrant's) and the notices for the victim's identifier
    /// do not reach it; the victim's controllers get both.
    #[test]
    fn a_hostid_squatted_before_the_registration_is_not_the_registrant() {
        use crate::reservation::shared::Sink;
        use crate::reservation::state::{Holder as ResvHolder, Registrant, Reservations};
        use crate::reservation::Access;
        let t = target(false);
        let imp = admin(&t, IMPOSTOR, H).unwrap();
        let ns = imp.subsys.namespace(1).unwrap();
        let shared = Reservations {
            registrants: vec![Registrant {
                host: H,
                key: 0x77,
                nqn: nqn_tag(VICTIM),
            }],
            holder: Some(ResvHolder {
                rtype: nvme::reservation::ResvType::WriteExclusive as u8,
                host: H,
            }),
            generation: 1,
            ptpl: false,
        };
        ns.resv.install(shared, 5);
        let admit = |c: &Controller, a| crate::command::reservation::admit(&ns, c, a);
        assert_eq!(
            admit(&imp, Access::Write).unwrap_err().code(),
            Status::RESERVATION_CONFLICT.code()
        );
        admit(&imp, Access::Read).unwrap();
        let notice = nvme::reservation::notice::REGISTRATION_PREEMPTED;
        let bound = nqn_tag(VICTIM);
        crate::command::reservation::notify(&imp.subsys, &H, Some(&bound), 1, notice);
        assert!(imp.state().resv_notices.is_empty(), "the victim's notice");
        // The victim itself, once its controller is here (the impostor's
        // gone), is the registrant and gets its notices.
        imp.subsys.remove_controller(imp.cntlid);
        let v = admin(&t, VICTIM, H).unwrap();
        admit(&v, Access::Write).unwrap();
        crate::command::reservation::notify(&v.subsys, &H, Some(&bound), 1, notice);
        assert!(!v.state().resv_notices.is_empty());
    }

    /// A keyed host is not kept out of its identifier by a controller that
    /// never authenticated; once it authenticates, that one goes.
    #[test]
    fn a_proven_host_takes_its_identifier_back() {
        let t = target(true);
        let imp = admin(&t, IMPOSTOR, H).unwrap();
        let v = admin(&t, VICTIM, H).expect("will authenticate: may connect");
        assert!(v.auth.required());
        // Not yet proven: the impostor keeps it, and a third NQN is refused.
        refused_as(
            admin(&t, "nqn.2026-11.io.test:third", H).unwrap_err(),
            "hostid_used_by_another_hostnqn",
        );
        v.subsys.prove(&v, 16).unwrap();
        let gone = take_from_unproven(&t, &v);
        assert_eq!(gone.len(), 1);
        assert!(imp.is_revoked() && !v.is_revoked());
        imp.subsys.remove_controller(imp.cntlid);
        // Now bound to the proven NQN, even for a host that would
        // authenticate.
        refused_as(
            admin(&t, IMPOSTOR, H).unwrap_err(),
            "hostid_used_by_another_hostnqn",
        );
    }

    /// Registrants are named by their identifier: a host without one gets
    /// Host Identifier Inconsistent Format for every reservation command.
    #[test]
    fn a_host_without_an_identifier_takes_no_part_in_reservations() {
        use crate::command::reservation::execute;
        let t = target(false);
        let anon = admin(&t, VICTIM, [0; 16]).unwrap();
        let ns = anon.subsys.namespace(1).unwrap();
        let mut reg = nvme::Command::new(nvme::opcode::io::RESV_REGISTER, 1);
        reg.set_nsid(1);
        let mut keys = [0u8; 16];
        keys[8..].copy_from_slice(&7u64.to_le_bytes());
        let mut report = nvme::Command::new(nvme::opcode::io::RESV_REPORT, 2);
        report.set_cdw(11, 1);
        for cmd in [&reg, &report] {
            let mut buf = keys.to_vec();
            assert_eq!(
                execute(&ns, &anon, cmd, &mut buf).0,
                Status::HOST_ID_INCONSISTENT
            );
        }
        let named = admin(&t, VICTIM, H).unwrap();
        assert_eq!(execute(&ns, &named, &reg, &mut keys).0, Status::SUCCESS);
    }
}
