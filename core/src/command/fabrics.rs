//! Fabrics commands: Connect (controller creation and queue attachment with
//! host access control) and Property Get/Set.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use nvme::fabrics::{
    ConnectCommand, ConnectData, PropertyCommand, CONNECT_DATA_CNTLID_OFFSET,
    CONNECT_DATA_HOSTID_OFFSET, CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SIZE,
    CONNECT_DATA_SUBNQN_OFFSET,
};
use nvme::{Command, Status};
use tracing::warn;

use crate::model::controller::{Controller, PropertyEffect, DISCOVERY_KATO_MS};
use crate::model::hostid;
use crate::model::subsystem::{NewController, SubsystemKind};
use crate::model::target::Target;

/// Offsets of Connect command fields in the SQE (for IATTR reporting).
const SQE_QID_OFFSET: u64 = 42;
const SQE_SQSIZE_OFFSET: u64 = 44;

/// Connect result for an invalid connect-data field: IATTR bit 16 + byte offset.
fn iattr_data(offset: u16) -> u64 {
    (1 << 16) | offset as u64
}

/// A refused Connect: the status and the CQE result (IATTR/IPO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectError {
    /// Status.
    pub status: Status,
    /// Result dword: which parameter was wrong.
    pub result: u64,
    /// The reason, where the status does not tell it.
    why: Option<&'static str>,
}

impl ConnectError {
    /// A short reason, for the rejections metric.
    pub fn reason(&self) -> &'static str {
        let subnqn = iattr_data(CONNECT_DATA_SUBNQN_OFFSET);
        let cntlid = iattr_data(CONNECT_DATA_CNTLID_OFFSET);
        if let Some(w) = self.why {
            return w;
        }
        match (self.status, self.result) {
            (Status::CONNECT_INVALID_HOST, _) => "host_not_allowed",
            (Status::CONNECT_INVALID_PARAM, r) if r == subnqn => "unknown_subsystem",
            (Status::CONNECT_INVALID_PARAM, r) if r == cntlid => "unknown_controller",
            (Status::CONNECT_CTRL_BUSY, _) => "controller_busy",
            (Status::CMD_SEQ_ERROR, _) => "controller_not_ready",
            _ => "invalid_parameters",
        }
    }
}

fn refuse(status: Status, result: u64) -> ConnectError {
    ConnectError {
        status,
        result,
        why: None,
    }
}

/// What the transport knows of a queue whose Connect arrived, none of it
/// derived from another.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The queue id the host named in the transport's own handshake (the
    /// RDMA-CM private data, the TCP ICReq's queue).
    pub qid: u16,
    /// The submission queue size it named there (0's based).
    pub sqsize: u16,
    /// The address the queue comes from (none: served in-process).
    pub peer: Option<IpAddr>,
    /// The listener it came through (none: served in-process).
    pub via: Option<crate::model::port::Port>,
    /// The TLS identity its connection proved, if any.
    pub secured: Option<&'a crate::model::tls_keys::Proven>,
    /// When: a new controller's keep-alive timer starts here.
    pub now: Instant,
}

impl Arrival<'_> {
    /// A queue `qid` of `sqsize` from `peer`, through no listener and
    /// without TLS, now (the tests' and the fuzzer's Connects).
    pub fn plain(qid: u16, sqsize: u16, peer: Option<IpAddr>) -> Arrival<'static> {
        Arrival {
            qid,
            sqsize,
            peer,
            via: None,
            secured: None,
            now: Instant::now(),
        }
    }
}

/// Handles Connect on a queue not yet connected, arrived as `at` says. On
/// success the caller attaches the queue to the returned controller and
/// answers with `cntlid` as the result.
pub fn connect(
    target: &Target,
    at: &Arrival<'_>,
    cmd: &Command,
    data: &[u8],
) -> Result<(Arc<Controller>, ConnectData), ConnectError> {
    let (cm_qid, cm_sqsize, peer, via, secured) = (at.qid, at.sqsize, at.peer, at.via, at.secured);
    let c = ConnectCommand::from_command(cmd);
    if c.recfmt != 0 {
        return Err(refuse(Status::CONNECT_FORMAT, 0));
    }
    if data.len() < CONNECT_DATA_SIZE {
        return Err(refuse(Status::SGL_INVALID_DATA, 0));
    }
    let d = ConnectData::parse(data).map_err(|_| refuse(Status::SGL_INVALID_DATA, 0))?;
    if c.qid != cm_qid {
        return Err(refuse(Status::CONNECT_INVALID_PARAM, SQE_QID_OFFSET));
    }
    // A host without a name could not be told from another one (access
    // lists, controller ownership): an NQN has at least one character.
    if d.hostnqn.is_empty() {
        return Err(refuse(
            Status::CONNECT_INVALID_PARAM,
            iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
        ));
    }
    // Over TLS, the host is who its PSK says, to the subsystem it says:
    // a host holding one host's key does not connect as another, nor to
    // another subsystem.
    if let Some(p) = secured {
        let id = &p.identity;
        if id.hostnqn != d.hostnqn || id.subnqn != d.subsysnqn {
            return Err(refuse(
                Status::CONNECT_INVALID_HOST,
                iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
            ));
        }
        // Bound to the key it shook hands with: a queue whose host's PSK
        // changed since its handshake began connects no more, however
        // soon its Connect follows the change.
        if !target.tls_keys.unchanged_since(&id.hostnqn, p.keys_at) {
            return Err(ConnectError {
                why: Some("tls_key_changed"),
                ..refuse(
                    Status::CONNECT_INVALID_HOST,
                    iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
                )
            });
        }
    }
    let secured = secured.map(|p| &p.identity);
    let subsys = target.subsystem(&d.subsysnqn).ok_or_else(|| {
        refuse(
            Status::CONNECT_INVALID_PARAM,
            iattr_data(CONNECT_DATA_SUBNQN_OFFSET),
        )
    })?;
    // A subsystem not on this listener is not here, as nvmet answers for a
    // port not linked to it (asked before the host's access: a host learns
    // nothing of who may connect where the subsystem is not).
    if via.is_some_and(|p| !subsys.reachable_via(&p)) {
        return Err(ConnectError {
            why: Some("not_on_listener"),
            ..refuse(
                Status::CONNECT_INVALID_PARAM,
                iattr_data(CONNECT_DATA_SUBNQN_OFFSET),
            )
        });
    }
    if !subsys.host_allowed(&d.hostnqn) {
        return Err(refuse(
            Status::CONNECT_INVALID_HOST,
            iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
        ));
    }
    // A host with a TLS PSK reaches NVM subsystems over TLS only, on any
    // listener: its NQN, in clear, proves nothing (discovery stays open, as
    // with DH-HMAC-CHAP keys).
    if secured.is_none()
        && subsys.kind != SubsystemKind::Discovery
        && target.tls_keys.has(&d.hostnqn)
    {
        return Err(ConnectError {
            why: Some("tls_required"),
            ..refuse(
                Status::CONNECT_INVALID_HOST,
                iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
            )
        });
    }
    if c.qid == 0 {
        if c.sqsize == 0 || c.sqsize >= crate::ADMIN_QUEUE_SIZE || c.sqsize != cm_sqsize {
            return Err(refuse(Status::CONNECT_INVALID_PARAM, SQE_SQSIZE_OFFSET));
        }
        let kato = if c.kato == 0 && subsys.kind == SubsystemKind::Discovery {
            DISCOVERY_KATO_MS
        } else {
            c.kato
        };
        // The identifier's binding is checked and taken as one step, and
        // the keys read are those in effect until the controller exists.
        let _binding = target.binding_lock();
        let required =
            subsys.kind != SubsystemKind::Discovery && target.credentials.has_key(&d.hostnqn);
        if let Some(h) = hostid::holder(target, &d.hostid, &d.hostnqn, required) {
            return Err(ConnectError {
                why: Some(h.reason()),
                ..refuse(
                    Status::CONNECT_INVALID_PARAM,
                    iattr_data(CONNECT_DATA_HOSTID_OFFSET),
                )
            });
        }
        let ctrl = subsys
            .add_controller(
                NewController {
                    hostnqn: &d.hostnqn,
                    hostid: d.hostid,
                    kato_ms: kato,
                    auth_required: required,
                    peer,
                    now: at.now,
                },
                target.max_controllers_per_host.load(Ordering::Relaxed),
            )
            .map_err(|s| match s {
                // Access or the subsystem went while this Connect ran (a reload).
                Status::CONNECT_INVALID_HOST => refuse(s, iattr_data(CONNECT_DATA_HOSTNQN_OFFSET)),
                Status::CONNECT_INVALID_PARAM => refuse(s, iattr_data(CONNECT_DATA_SUBNQN_OFFSET)),
                s => refuse(s, 0),
            })?;
        ctrl.set_tls(secured);
        if required {
            admit_unproven(target, peer, &ctrl)?;
        }
        return Ok((ctrl, d));
    }
    if subsys.kind == SubsystemKind::Discovery {
        return Err(refuse(Status::CONNECT_INVALID_PARAM, SQE_QID_OFFSET));
    }
    let ctrl = subsys.controller(d.cntlid).ok_or_else(|| {
        refuse(
            Status::CONNECT_INVALID_PARAM,
            iattr_data(CONNECT_DATA_CNTLID_OFFSET),
        )
    })?;
    if ctrl.hostnqn != d.hostnqn {
        return Err(refuse(
            Status::CONNECT_INVALID_PARAM,
            iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
        ));
    }
    // Every queue of the association as secure as its admin queue, under
    // the same identity.
    if ctrl.tls() != secured {
        return Err(refuse(
            Status::CONNECT_INVALID_HOST,
            iattr_data(CONNECT_DATA_HOSTNQN_OFFSET),
        ));
    }
    // The same host identifier on every queue of the association.
    if ctrl.hostid != d.hostid {
        return Err(refuse(
            Status::CONNECT_INVALID_PARAM,
            iattr_data(CONNECT_DATA_HOSTID_OFFSET),
        ));
    }
    // The host NQN, host ID and controller ID travel in clear: an I/O queue
    // joins only a controller whose admin queue came from the same address,
    // so another peer cannot take a queue (and fail the controller with it).
    // To that peer the controller does not exist.
    if let (Some(p), Some((h, _))) = (peer, ctrl.addrs()) {
        if p != h.ip() {
            return Err(ConnectError {
                why: Some("other_peer"),
                ..refuse(
                    Status::CONNECT_INVALID_PARAM,
                    iattr_data(CONNECT_DATA_CNTLID_OFFSET),
                )
            });
        }
    }
    {
        let st = ctrl.state();
        if !st.ready() {
            return Err(refuse(Status::CMD_SEQ_ERROR, 0));
        }
        if c.qid > st.io_queues {
            return Err(refuse(Status::CONNECT_INVALID_PARAM, SQE_QID_OFFSET));
        }
    }
    // SQSIZE must be the queue's size as the host gave it in the RDMA-CM
    // private data (HSQSIZE): its receive buffers were posted for that many.
    if c.sqsize == 0 || c.sqsize >= crate::MAX_QUEUE_SIZE || c.sqsize != cm_sqsize {
        return Err(refuse(Status::CONNECT_INVALID_PARAM, SQE_SQSIZE_OFFSET));
    }
    Ok((ctrl, d))
}

/// Gives a controller whose host must still authenticate a place among the
/// unproven ones (per peer address and in total), revoking the one it
/// displaces; refused, the controller goes again.
fn admit_unproven(
    target: &Target,
    peer: Option<IpAddr>,
    ctrl: &Arc<Controller>,
) -> Result<(), ConnectError> {
    let addr = peer.unwrap_or(crate::model::unproven::NO_ADDRESS);
    match target.unproven.admit(addr, ctrl) {
        Ok((place, evicted)) => {
            ctrl.auth.hold_place(place);
            if let Some(old) = evicted {
                warn!(cntlid = old.cntlid, host = %old.hostnqn, subsys = %old.subsys.nqn,
                      peer = ?old.addrs().map(|a| a.0), "unauthenticated controllers at their cap: \
                      the oldest of the peer holding the most gives its place to a new one");
                crate::counters::meter().rejected("unauthenticated_displaced");
                old.revoke();
            }
            Ok(())
        }
        Err(r) => {
            ctrl.subsys.remove_controller(ctrl.cntlid);
            Err(ConnectError {
                why: Some(r.reason()),
                ..refuse(Status::CONNECT_CTRL_BUSY, 0)
            })
        }
    }
}

/// Handles Property Get / Set on the admin queue of `ctrl`.
pub fn property(ctrl: &Controller, cmd: &Command) -> (Status, u64, PropertyEffect) {
    let p = PropertyCommand::from_command(cmd);
    let mut st = ctrl.state();
    match cmd.fctype() {
        nvme::opcode::fctype::PROPERTY_GET => match st.property_get(p.offset, p.eight_bytes) {
            Ok(v) => (Status::SUCCESS, v, PropertyEffect::None),
            Err(s) => (s, 0, PropertyEffect::None),
        },
        _ => {
            let r = match st.property_set(p.offset, p.eight_bytes, p.value) {
                Ok(e) => (Status::SUCCESS, 0, e),
                Err(s) => (s, 0, PropertyEffect::None),
            };
            ctrl.sync_ready(&st);
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`connect`] with what a transport knows, as positional values.
    #[allow(clippy::too_many_arguments)]
    fn connect_via(
        t: &Target,
        qid: u16,
        sqsize: u16,
        peer: Option<IpAddr>,
        via: Option<crate::model::port::Port>,
        secured: Option<&crate::model::tls_keys::Proven>,
        c: &Command,
        d: &[u8],
    ) -> Result<(Arc<Controller>, ConnectData), ConnectError> {
        let at = Arrival {
            qid,
            sqsize,
            peer,
            via,
            secured,
            now: Instant::now(),
        };
        connect(t, &at, c, d)
    }
    use crate::model::subsystem::Subsystem;
    use nvme::fabrics::{cc, prop};

    fn target() -> Target {
        let open = Arc::new(Subsystem::new(
            "nqn.t:open".into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "m".into(),
            vec![],
        ));
        let closed = Arc::new(Subsystem::new(
            "nqn.t:closed".into(),
            SubsystemKind::Nvm,
            false,
            vec!["nqn.host:ok".into()],
            None,
            "m".into(),
            vec![],
        ));
        Target::new(vec![open, closed], vec![], 0)
    }

    fn conn(
        qid: u16,
        sqsize: u16,
        kato: u32,
        sub: &str,
        host: &str,
        cntlid: u16,
    ) -> (Command, Vec<u8>) {
        let c = ConnectCommand {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato,
        }
        .to_command(1);
        let d = ConnectData {
            hostid: crate::reservation::state::nqn_tag(host),
            cntlid,
            subsysnqn: sub.into(),
            hostnqn: host.into(),
        };
        (c, d.encode().to_vec())
    }

    /// The SQSIZE of a Connect, as a host that gives the same HSQSIZE sends it.
    fn sq(c: &Command) -> u16 {
        ConnectCommand::from_command(c).sqsize
    }

    fn enable(ctrl: &Controller) {
        let v = (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64;
        let c = PropertyCommand {
            eight_bytes: false,
            offset: prop::CC,
            value: v,
        }
        .to_command(2, true);
        assert_eq!(property(ctrl, &c).0, Status::SUCCESS);
    }

    #[test]
    fn a_connect_through_a_listener_the_subsystem_is_not_on_is_refused_as_nvmet_does() {
        use crate::model::port::{Port, PortName};
        let t = target();
        let rdma: Port = "10.0.2.15:4420"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into();
        let tcp = Port { tcp: true, ..rdma };
        let open = t.subsystem("nqn.t:open").unwrap();
        open.set_access(crate::model::subsystem::HostAccess {
            allow_any_host: true,
            hosts: vec![],
            listeners: Some(vec![PortName::parse("tcp:10.0.2.15:4420").unwrap()]),
        });
        let (c, d) = conn(0, 31, 5000, "nqn.t:open", "nqn.host:a", 0xFFFF);
        // As an unknown subsystem: Invalid Parameter, at the data's SUBNQN.
        let e = connect_via(&t, 0, sq(&c), None, Some(rdma), None, &c, &d).unwrap_err();
        assert_eq!(
            (e.status, e.result),
            (Status::CONNECT_INVALID_PARAM, (1 << 16) | 256)
        );
        assert_eq!(e.why, Some("not_on_listener"));
        let unknown = conn(0, 31, 5000, "nqn.t:nope", "nqn.host:a", 0xFFFF);
        let u = connect_via(
            &t,
            0,
            sq(&c),
            None,
            Some(rdma),
            None,
            &unknown.0,
            &unknown.1,
        )
        .unwrap_err();
        assert_eq!((u.status, u.result), (e.status, e.result));
        // Where it is, and in-process (no listener), it connects.
        let (ctrl, _) = connect_via(&t, 0, sq(&c), None, Some(tcp), None, &c, &d).unwrap();
        assert!(connect_via(&t, 0, sq(&c), None, None, None, &c, &d).is_ok());
        // An I/O queue through the other listener is refused too.
        enable(&ctrl);
        let (c1, d1) = conn(1, 31, 0, "nqn.t:open", "nqn.host:a", ctrl.cntlid);
        let e = connect_via(&t, 1, sq(&c1), None, Some(rdma), None, &c1, &d1).unwrap_err();
        assert_eq!(e.status, Status::CONNECT_INVALID_PARAM);
        assert!(connect_via(&t, 1, sq(&c1), None, Some(tcp), None, &c1, &d1).is_ok());
    }

    #[test]
    fn over_tls_a_host_connects_only_as_its_psk_identity_says() {
        let t = target();
        let id = |host: &str, sub: &str| crate::model::tls_keys::Proven {
            identity: tlspsk::Identity::parse(format!("NVMe0R01 {host} {sub}").as_bytes()).unwrap(),
            keys_at: 0,
        };
        let (c, d) = conn(0, 31, 5000, "nqn.t:open", "nqn.host:a", 0xFFFF);
        let mine = id("nqn.host:a", "nqn.t:open");
        assert!(connect_via(&t, 0, sq(&c), None, None, Some(&mine), &c, &d).is_ok());
        let host_mismatch = refuse(Status::CONNECT_INVALID_HOST, (1 << 16) | 512);
        for other in [
            id("nqn.host:b", "nqn.t:open"),
            id("nqn.host:a", "nqn.t:other"),
        ] {
            assert_eq!(
                connect_via(&t, 0, sq(&c), None, None, Some(&other), &c, &d).unwrap_err(),
                host_mismatch,
                "{}",
                other.identity
            );
        }
        // Its I/O queues: under the same identity only, never plain.
        let (ctrl, _) = connect_via(&t, 0, sq(&c), None, None, Some(&mine), &c, &d).unwrap();
        enable(&ctrl);
        let (c1, d1) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", ctrl.cntlid);
        assert_eq!(
            connect_via(&t, 1, sq(&c1), None, None, None, &c1, &d1).unwrap_err(),
            host_mismatch,
            "a plain I/O queue of a TLS association"
        );
        assert!(connect_via(&t, 1, sq(&c1), None, None, Some(&mine), &c1, &d1).is_ok());
        // A host with a PSK: TLS only (discovery stays open).
        t.tls_keys.set(&[crate::model::auth::HostConfig {
            nqn: "nqn.host:a".into(),
            dhchap_key: None,
            dhchap_ctrl_key: None,
            dhchap_hash: dhchap::HashId::Sha256,
            dhchap_dhgroup: dhchap::GroupId::Null,
            tls_key: Some(
                tlspsk::ConfiguredPsk::new(Some(tlspsk::PskHash::Sha256), &[1; 32]).unwrap(),
            ),
            tls_derivation: tlspsk::Derivation::Compat,
        }]);
        assert_eq!(
            connect_via(&t, 0, sq(&c), None, None, None, &c, &d)
                .unwrap_err()
                .status,
            Status::CONNECT_INVALID_HOST
        );
        let (c2, d2) = conn(0, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:a", 0xFFFF);
        assert!(connect_via(&t, 0, sq(&c2), None, None, None, &c2, &d2).is_ok());
        // Issue 57, 8: bound to the key it shook hands with. A handshake
        // that began before the host's key changed does not connect; one
        // that began after does.
        let before = id("nqn.host:a", "nqn.t:open");
        let e = connect_via(&t, 0, sq(&c), None, None, Some(&before), &c, &d).unwrap_err();
        assert_eq!(
            (e.status, e.reason()),
            (Status::CONNECT_INVALID_HOST, "tls_key_changed")
        );
        let after = crate::model::tls_keys::Proven {
            keys_at: t.tls_keys.generation(),
            ..before
        };
        assert!(connect_via(&t, 0, sq(&c), None, None, Some(&after), &c, &d).is_ok());
    }

    #[test]
    fn admin_then_io() {
        let t = target();
        let (c, d) = conn(0, 31, 5000, "nqn.t:open", "nqn.host:a", 0xFFFF);
        let (ctrl, _) = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap();
        assert_eq!(ctrl.cntlid, 1);
        assert_eq!(ctrl.state().kato_ms, 5000);
        // I/O queue before enable
        let (c, d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", 1);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d)
                .unwrap_err()
                .status,
            Status::CMD_SEQ_ERROR
        );
        enable(&ctrl);
        assert!(ctrl.is_ready());
        let (io_ctrl, _) = connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap();
        assert!(Arc::ptr_eq(&io_ctrl, &ctrl));
        // wrong host for the controller
        let (c, d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:b", 1);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, (1 << 16) | 512)
        );
        // unknown controller
        let (c, d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", 9);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, (1 << 16) | 16)
        );
        // sqsize too big, qid mismatch
        let (c, d) = conn(1, 128, 0, "nqn.t:open", "nqn.host:a", 1);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, 44)
        );
        let (c, d) = conn(2, 127, 0, "nqn.t:open", "nqn.host:a", 1);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, 42)
        );
        // SQSIZE other than the CM's HSQSIZE
        let (c, d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", 1);
        assert_eq!(
            connect_via(&t, 1, 63, None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, 44)
        );
        let (c, d) = conn(0, 31, 0, "nqn.t:open", "nqn.host:a", 0xFFFF);
        assert_eq!(
            connect_via(&t, 0, 15, None, None, None, &c, &d)
                .unwrap_err()
                .result,
            44
        );
        // another host identifier than the admin queue's
        let (c, mut d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", 1);
        d[0] ^= 0xFF;
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, 1 << 16)
        );
    }

    #[test]
    fn an_io_queue_joins_only_from_the_admin_queues_address() {
        let t = target();
        let (c, d) = conn(0, 31, 5000, "nqn.t:open", "nqn.host:a", 0xFFFF);
        let (ctrl, _) = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap();
        let host: std::net::SocketAddr = "10.0.0.1:5000".parse().unwrap();
        ctrl.set_addrs(host, "10.0.0.9:4420".parse().unwrap());
        enable(&ctrl);
        let (c, d) = conn(1, 127, 0, "nqn.t:open", "nqn.host:a", ctrl.cntlid);
        let other = Some("10.0.0.2".parse().unwrap());
        let e = connect_via(&t, 1, sq(&c), other, None, None, &c, &d).unwrap_err();
        assert_eq!(
            e,
            ConnectError {
                why: Some("other_peer"),
                ..refuse(Status::CONNECT_INVALID_PARAM, (1 << 16) | 16)
            }
        );
        assert_eq!(e.reason(), "other_peer");
        // Another port of the same address is the same host.
        let (io, _) = connect_via(&t, 1, sq(&c), Some(host.ip()), None, None, &c, &d).unwrap();
        assert!(Arc::ptr_eq(&io, &ctrl));
    }

    #[test]
    fn access_is_checked_again_when_the_controller_is_made() {
        let t = target();
        let open = t.subsystem("nqn.t:open").unwrap();
        // A reload took the host's access away (or removed the subsystem)
        // after the Connect's first check: the controller is not made.
        open.set_access(crate::model::subsystem::HostAccess {
            allow_any_host: false,
            hosts: vec!["nqn.host:other".into()],
            listeners: None,
        });
        assert_eq!(
            open.add_controller(NewController::of("nqn.host:a", [1; 16], 0), 16)
                .unwrap_err(),
            Status::CONNECT_INVALID_HOST
        );
        assert!(open
            .add_controller(NewController::of("nqn.host:other", [1; 16], 0), 16)
            .is_ok());
        assert_eq!(
            open.revoke_disallowed(true),
            vec!["nqn.host:other".to_string()]
        );
        assert_eq!(
            open.add_controller(NewController::of("nqn.host:other", [1; 16], 0), 16)
                .unwrap_err(),
            Status::CONNECT_INVALID_PARAM
        );
    }

    #[test]
    fn controllers_per_host_are_capped() {
        let t = target();
        t.max_controllers_per_host.store(2, Ordering::Relaxed);
        let (c, d) = conn(0, 31, 0, "nqn.t:open", "nqn.host:a", 0xFFFF);
        let a1 = connect_via(&t, 0, sq(&c), None, None, None, &c, &d)
            .unwrap()
            .0;
        let _a2 = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap();
        let e = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap_err();
        assert_eq!(e.status, Status::CONNECT_CTRL_BUSY);
        assert_eq!(e.reason(), "controller_busy");
        // Another host is not held up by it; a freed place is taken again.
        let (c2, d2) = conn(0, 31, 0, "nqn.t:open", "nqn.host:b", 0xFFFF);
        assert!(connect_via(&t, 0, sq(&c2), None, None, None, &c2, &d2).is_ok());
        a1.subsys.remove_controller(a1.cntlid);
        assert!(connect_via(&t, 0, sq(&c), None, None, None, &c, &d).is_ok());
    }

    #[test]
    fn refusals() {
        let t = target();
        let (c, d) = conn(0, 31, 0, "nqn.t:nope", "nqn.host:a", 0xFFFF);
        let e = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap_err();
        assert_eq!(e.status.code(), 0x182);
        assert_eq!(e.result, (1 << 16) | 256);
        let (c, d) = conn(0, 31, 0, "nqn.t:closed", "nqn.host:a", 0xFFFF);
        let e = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap_err();
        assert_eq!(e.status.code(), 0x184);
        assert_eq!(e.result, (1 << 16) | 512);
        let (c, d) = conn(0, 31, 0, "nqn.t:closed", "nqn.host:ok", 0xFFFF);
        assert!(connect_via(&t, 0, sq(&c), None, None, None, &c, &d).is_ok());
        let (c, d) = conn(0, 32, 0, "nqn.t:open", "nqn.host:a", 0xFFFF);
        assert_eq!(
            connect_via(&t, 0, sq(&c), None, None, None, &c, &d)
                .unwrap_err()
                .result,
            44
        );
        let (mut c, d) = conn(0, 31, 0, "nqn.t:open", "nqn.host:a", 0xFFFF);
        c.raw[40] = 1;
        assert_eq!(
            connect_via(&t, 0, sq(&c), None, None, None, &c, &d)
                .unwrap_err()
                .status,
            Status::CONNECT_FORMAT
        );
        let (c, d) = conn(0, 31, 0, "nqn.t:open", "nqn.host:a", 0xFFFF);
        assert_eq!(
            connect_via(&t, 0, sq(&c), None, None, None, &c, &d[..512])
                .unwrap_err()
                .status,
            Status::SGL_INVALID_DATA
        );
        // No host NQN at all, even where any host is allowed.
        let (c, d) = conn(0, 31, 0, "nqn.t:open", "", 0xFFFF);
        assert_eq!(
            connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap_err(),
            refuse(Status::CONNECT_INVALID_PARAM, (1 << 16) | 512)
        );
    }

    #[test]
    fn discovery_defaults() {
        let t = target();
        let (c, d) = conn(0, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:any", 0xFFFF);
        let (ctrl, _) = connect_via(&t, 0, sq(&c), None, None, None, &c, &d).unwrap();
        assert_eq!(ctrl.state().kato_ms, DISCOVERY_KATO_MS);
        let (c, d) = conn(1, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:any", ctrl.cntlid);
        assert_eq!(
            connect_via(&t, 1, sq(&c), None, None, None, &c, &d)
                .unwrap_err()
                .result,
            42
        );
    }

    /// Issue 57, 4: discovery controllers are counted by the address they
    /// came from, not by the host NQN they name: a peer naming a host's NQN
    /// as often as a host may have controllers keeps that host (from its own
    /// address) from nothing, and its own next one is busy.
    #[test]
    fn discovery_controllers_are_counted_per_address_not_per_host_nqn() {
        let t = target();
        let stranger: IpAddr = "10.0.0.66".parse().unwrap();
        let host: IpAddr = "10.0.0.7".parse().unwrap();
        let max = t.max_controllers_per_host.load(Ordering::Relaxed);
        let mut held = Vec::new();
        for _ in 0..max {
            let (c, d) = conn(0, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:a", 0xFFFF);
            held.push(connect_via(&t, 0, sq(&c), Some(stranger), None, None, &c, &d).unwrap());
        }
        let (c, d) = conn(0, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:b", 0xFFFF);
        assert_eq!(
            connect_via(&t, 0, sq(&c), Some(stranger), None, None, &c, &d)
                .unwrap_err()
                .status,
            Status::CONNECT_CTRL_BUSY,
            "the stranger's address has its share"
        );
        let (c, d) = conn(0, 31, 0, nvme::DISCOVERY_NQN, "nqn.host:a", 0xFFFF);
        assert!(
            connect_via(&t, 0, sq(&c), Some(host), None, None, &c, &d).is_ok(),
            "the host its NQN was named for still discovers"
        );
    }
}
