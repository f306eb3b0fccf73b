//! Admin commands: Identify, Get Log Page, Set/Get Features, Asynchronous
//! Event Request, Keep Alive, Abort — for NVM and discovery controllers.

use std::time::Instant;

use nvme::identify::{self, cmic, cntrltype, oaes, oncs, sgls, IdentifyController};
use nvme::log::{copy_window, GetLogPage, SmartLog};
use nvme::opcode::{admin as op, cns, fid, lid};
use nvme::{Command, Status};

use std::sync::Arc;

use crate::model::controller::{Controller, ERROR_LOG_ENTRIES, VERSION};
use crate::model::namespace::Namespace;
use crate::model::subsystem::{SubsystemKind, Target};

/// Outcome of an admin command.
pub enum AdminOutcome {
    /// Answer now with this status and result; `data_len` bytes of the data
    /// buffer go back to the host (controller-to-host commands).
    Done {
        /// Status.
        status: Status,
        /// CQE result.
        result: u64,
        /// Bytes of data to return.
        data_len: u32,
    },
    /// An Asynchronous Event Request was parked; it completes later.
    Parked,
    /// The command blocks (it syncs a file or waits for the cluster): `work`
    /// runs on the namespace's lane, never on the worker, and its status is
    /// the answer.
    Blocking {
        /// The namespace whose lane runs it.
        ns: Arc<Namespace>,
        /// What it does.
        work: Box<dyn FnOnce() -> Status + Send>,
    },
}

/// How often one controller may ask for a blocking Set Features
/// (Reservation Persistence, which syncs a file or a RADOS object): one
/// more arriving within this long after the last gets Command Interrupted,
/// which the host retries.
pub const BLOCKING_FEATURE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Outcomes compare by what the host gets; blocking work never compares equal.
impl PartialEq for AdminOutcome {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                AdminOutcome::Done {
                    status: a,
                    result: b,
                    data_len: c,
                },
                AdminOutcome::Done {
                    status: x,
                    result: y,
                    data_len: z,
                },
            ) => (a, b, c) == (x, y, z),
            (AdminOutcome::Parked, AdminOutcome::Parked) => true,
            _ => false,
        }
    }
}

impl std::fmt::Debug for AdminOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminOutcome::Done {
                status,
                result,
                data_len,
            } => write!(f, "Done({status}, {result:#x}, {data_len})"),
            AdminOutcome::Parked => f.write_str("Parked"),
            AdminOutcome::Blocking { ns, .. } => write!(f, "Blocking(nsid {})", ns.nsid),
        }
    }
}

fn done(status: Status) -> AdminOutcome {
    AdminOutcome::Done {
        status,
        result: 0,
        data_len: 0,
    }
}

fn data(n: usize) -> AdminOutcome {
    AdminOutcome::Done {
        status: Status::SUCCESS,
        result: 0,
        data_len: n as u32,
    }
}

/// Firmware revision reported by Identify.
pub const FIRMWARE_REV: &str = env!("CARGO_PKG_VERSION");

/// Command Retry Delay Time 1 (100 ms units): 5 s, so the host's retries of
/// a command to a store that stopped answering span its outage.
pub const CRDT1_100MS: u16 = 50;

/// ANA Transition Time: how long (seconds) a group may stay in the change
/// state, as nvmet.
const ANATT_S: u8 = 10;

/// Identify Controller data of `ctrl`.
pub fn identify_controller(ctrl: &Controller) -> IdentifyController {
    let s = &ctrl.subsys;
    let disc = s.kind == SubsystemKind::Discovery;
    IdentifyController {
        vid: 0,
        ssvid: 0,
        sn: s.serial.clone(),
        mn: s.model.clone(),
        fr: FIRMWARE_REV.into(),
        rab: 6,
        ieee: [0; 3],
        // Several ports and controllers (gateways), reporting ANA, as nvmet.
        cmic: if disc {
            0
        } else {
            cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA
        },
        mdts: crate::MDTS,
        cntlid: ctrl.cntlid,
        ver: VERSION,
        oaes: if disc {
            0
        } else {
            oaes::NS_ATTR | oaes::ANA_CHANGE
        },
        ctratt: 1, // 128-bit host identifier
        // A store that does not answer (Namespace Not Ready) asks the host to
        // wait this long before a retry, when it enabled ACRE.
        crdt: if disc { [0; 3] } else { [CRDT1_100MS, 0, 0] },
        cntrltype: if disc {
            cntrltype::DISCOVERY
        } else {
            cntrltype::IO
        },
        oacs: 0,
        acl: 3,
        aerl: (crate::MAX_AERS - 1) as u8,
        frmw: 0x3,
        // Extended data for Get Log Page; the Commands Supported and Effects
        // log where it is served (not on discovery: hosts read what is
        // advertised, and a discovery controller has no commands to list).
        lpa: if disc { 1 << 2 } else { (1 << 2) | (1 << 1) },
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        npss: 0,
        anatt: if disc { 0 } else { ANATT_S },
        anacap: if disc {
            0
        } else {
            nvme::ana::ANACAP_ALL_STATES
        },
        anagrpmax: if disc { 0 } else { nvme::ana::MAX_GROUPS },
        nanagrpid: if disc { 0 } else { nvme::ana::MAX_GROUPS },
        kas: 10,
        sqes: 0x66,
        cqes: 0x44,
        maxcmd: if disc {
            crate::ADMIN_QUEUE_SIZE
        } else {
            crate::MAX_QUEUE_SIZE
        },
        nn: if disc { 0 } else { crate::MAX_NSID },
        oncs: if disc {
            0
        } else {
            oncs::COMPARE | oncs::DSM | oncs::WRITE_ZEROES | oncs::RESERVATIONS
        },
        // Compare and Write, atomic against every other write of this target
        // to the namespace (and across gateways on RBD) whatever its length;
        // guaranteed (ACWU) for one block, as hosts' locks (VMware ATS) use.
        fuses: if disc { 0 } else { 1 },
        acwu: 0,
        vwc: if disc { 0 } else { 1 },
        awun: 0,
        awupf: 0,
        sgls: if disc {
            sgls::SUPPORTED | sgls::KEYED
        } else {
            sgls::SUPPORTED | sgls::KEYED | sgls::OFFSET
        },
        mnan: if disc { 0 } else { crate::MAX_NSID },
        subnqn: s.nqn.clone(),
        ioccsz: if disc {
            4
        } else {
            (64 + crate::INLINE_DATA_SIZE) / 16
        },
        iorcsz: 1,
        icdoff: 0,
        fcatt: 0,
        msdbd: 1,
    }
}

fn put(out: &mut [u8], src: &[u8]) -> usize {
    let n = out.len().min(src.len());
    out[..n].copy_from_slice(&src[..n]);
    out[n..].fill(0);
    out.len()
}

fn identify(ctrl: &Controller, cmd: &Command, out: &mut [u8]) -> AdminOutcome {
    if out.len() != identify::IDENTIFY_SIZE {
        return done(Status::SGL_INVALID_DATA);
    }
    let c = (cmd.cdw(10) & 0xFF) as u8;
    let nsid = cmd.nsid();
    let s = &ctrl.subsys;
    if s.kind == SubsystemKind::Discovery && c != cns::CONTROLLER {
        return done(Status::INVALID_FIELD);
    }
    match c {
        cns::CONTROLLER => data(put(out, &identify_controller(ctrl).encode())),
        cns::NAMESPACE => {
            if nsid == 0 || nsid > crate::MAX_NSID {
                return done(Status::INVALID_NS);
            }
            match s.namespace(nsid) {
                Some(ns) => data(put(out, &ns.identify().encode())),
                None => data(put(out, &[])), // inactive: all zeroes
            }
        }
        cns::ACTIVE_NS_LIST => {
            if nsid >= 0xFFFF_FFFE {
                return done(Status::INVALID_NS);
            }
            data(put(
                out,
                &identify::encode_ns_list(s.namespaces().iter().map(|n| n.nsid), nsid),
            ))
        }
        cns::NS_DESC_LIST => match s.namespace(nsid) {
            Some(ns) => data(put(
                out,
                &identify::encode_ns_descriptors(&ns.descriptors()),
            )),
            None => done(Status::INVALID_NS),
        },
        // The NVM command set's own structures, which Linux 7.x hosts read
        // (6.1 does not): nothing here is in use (no protection
        // information, no extended LBA formats, no reported limits), so
        // they are zeroes, as nvmet's.
        cns::CS_NAMESPACE if csi(cmd) == nvme::opcode::CSI_NVM => match s.namespace(nsid) {
            Some(_) => data(put(out, &[])),
            None => done(Status::INVALID_NS),
        },
        cns::CS_CONTROLLER if csi(cmd) == nvme::opcode::CSI_NVM => data(put(out, &[])),
        _ => done(Status::INVALID_FIELD),
    }
}

/// The Command Set Identifier of an Identify (CDW11 bits 31:24).
fn csi(cmd: &Command) -> u8 {
    (cmd.cdw(11) >> 24) as u8
}

fn smart_log(ctrl: &Controller) -> SmartLog {
    let io = ctrl.io_totals();
    let st = ctrl.state();
    SmartLog {
        temperature: 298,
        avail_spare: 100,
        spare_thresh: 10,
        data_units_read: (io.units_read / 1000) as u128,
        data_units_written: (io.units_written / 1000) as u128,
        host_reads: io.reads as u128,
        host_writes: io.writes as u128,
        num_err_log_entries: st.error_count as u128,
        ..Default::default()
    }
}

fn get_log_page(target: &Target, ctrl: &Controller, cmd: &Command, out: &mut [u8]) -> AdminOutcome {
    let g = GetLogPage::from_command(cmd);
    if g.len != out.len() as u64 {
        return done(Status::SGL_INVALID_DATA);
    }
    if !g.offset.is_multiple_of(4) {
        return done(Status::INVALID_FIELD);
    }
    let disc = ctrl.subsys.kind == SubsystemKind::Discovery;
    let page: Vec<u8> = match g.lid {
        lid::DISCOVERY if disc => crate::command::discovery::log_page(target, &ctrl.hostnqn),
        lid::ERROR => {
            let st = ctrl.state();
            let mut v = vec![0u8; ERROR_LOG_ENTRIES * nvme::log::ERROR_ENTRY_SIZE];
            for (i, e) in st.errors.iter().enumerate() {
                v[i * 64..(i + 1) * 64].copy_from_slice(&e.encode());
            }
            v
        }
        lid::SMART if !disc => smart_log(ctrl).encode().to_vec(),
        lid::FIRMWARE if !disc => {
            let mut v = vec![0u8; 512];
            v[0] = 1; // active slot 1
            let fr = FIRMWARE_REV.as_bytes();
            let n = fr.len().min(8);
            v[8..8 + n].copy_from_slice(&fr[..n]);
            v
        }
        lid::CHANGED_NS if !disc => {
            let ids = ctrl.state().take_changed_ns(g.rae);
            nvme::log::encode_changed_ns(&ids).to_vec()
        }
        lid::CMD_EFFECTS if !disc => cmd_effects().to_vec(),
        lid::ANA if !disc => {
            // LSP bit 0: Return Groups Only. Reading it (without Retain
            // Asynchronous Event) re-arms the ANA change notice.
            if !g.rae {
                ctrl.state().ana_event_masked = false;
            }
            let rgo = g.lsp & 1 != 0;
            target
                .ana
                .log_page(ctrl.port(), &ctrl.subsys.namespaces(), rgo)
        }
        lid::RESV_NOTIFICATION if !disc => ctrl.state().take_resv_notice(g.rae).encode().to_vec(),
        _ => return done(Status::INVALID_LOG_PAGE),
    };
    if !copy_window(&page, g.offset, out) {
        return done(Status::INVALID_FIELD);
    }
    data(out.len())
}

fn features(
    ctrl: &Controller,
    cmd: &Command,
    out: &mut [u8],
    set: bool,
    now: Instant,
) -> AdminOutcome {
    let cdw10 = cmd.cdw(10);
    let f = (cdw10 & 0xFF) as u8;
    let cdw11 = cmd.cdw(11);
    if set && cdw10 & (1 << 31) != 0 {
        return done(Status::FEATURE_NOT_SAVEABLE);
    }
    let disc = ctrl.subsys.kind == SubsystemKind::Discovery;
    let ok = |result: u64| AdminOutcome::Done {
        status: Status::SUCCESS,
        result,
        data_len: 0,
    };
    let mut st = ctrl.state();
    match (f, set) {
        (fid::NUM_QUEUES, _) if disc => done(Status::INVALID_FIELD),
        (fid::NUM_QUEUES, true) => {
            let (nsqr, ncqr) = (cdw11 & 0xFFFF, cdw11 >> 16);
            if nsqr == 0xFFFF || ncqr == 0xFFFF {
                return done(Status::INVALID_FIELD);
            }
            let n = (nsqr.min(ncqr) + 1).min(crate::MAX_IO_QUEUES as u32) as u16;
            st.io_queues = n;
            let v = (n - 1) as u64;
            ok(v | v << 16)
        }
        (fid::NUM_QUEUES, false) => {
            let v = (st.io_queues - 1) as u64;
            ok(v | v << 16)
        }
        (fid::KEEP_ALIVE_TIMER, true) => {
            st.kato_ms = cdw11;
            st.last_keepalive = Instant::now();
            ok(0)
        }
        (fid::KEEP_ALIVE_TIMER, false) => ok(st.kato_ms as u64),
        (fid::ASYNC_EVENT_CONFIG, true) => {
            st.aen_config = cdw11 & (oaes::NS_ATTR | oaes::ANA_CHANGE | oaes::DISC_CHANGE);
            ok(0)
        }
        (fid::ASYNC_EVENT_CONFIG, false) => ok(st.aen_config as u64),
        (fid::VOLATILE_WC, false) if !disc => ok(1),
        (fid::HOST_BEHAVIOR, _) if disc => done(Status::INVALID_FIELD),
        (fid::HOST_BEHAVIOR, true) => {
            // 512 bytes from the host; byte 0 is ACRE.
            if out.len() < HOST_BEHAVIOR_SIZE {
                return done(Status::SGL_INVALID_DATA);
            }
            st.acre = out[0] & 1 != 0;
            ok(0)
        }
        (fid::HOST_BEHAVIOR, false) => {
            if out.len() < HOST_BEHAVIOR_SIZE {
                return done(Status::SGL_INVALID_DATA);
            }
            put(out, &[st.acre as u8]);
            data(out.len())
        }
        (fid::RESV_MASK | fid::RESV_PERSIST, _) if disc => done(Status::INVALID_FIELD),
        (fid::RESV_MASK | fid::RESV_PERSIST, _) => {
            drop(st);
            resv_feature(ctrl, cmd, f, set, now)
        }
        (fid::HOST_ID, false) => {
            if cdw11 & 1 == 0 {
                return done(Status::INVALID_FIELD);
            }
            if out.len() < 16 {
                return done(Status::SGL_INVALID_DATA);
            }
            put(out, &ctrl.hostid);
            data(out.len())
        }
        (
            fid::ARBITRATION
            | fid::POWER_MGMT
            | fid::TEMP_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::IRQ_COALESCE
            | fid::WRITE_ATOMICITY,
            false,
        ) if !disc => ok(0),
        (
            fid::VOLATILE_WC
            | fid::ARBITRATION
            | fid::POWER_MGMT
            | fid::TEMP_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::IRQ_COALESCE
            | fid::WRITE_ATOMICITY
            | fid::HOST_ID,
            true,
        ) if !disc => done(Status::FEATURE_NOT_CHANGEABLE),
        _ => done(Status::INVALID_FIELD),
    }
}

/// Reservation Notification Mask (0x82) and Reservation Persistence (0x83):
/// per namespace; the mask may be set for every namespace at once (NSID
/// FFFFFFFFh).
fn resv_feature(ctrl: &Controller, cmd: &Command, f: u8, set: bool, now: Instant) -> AdminOutcome {
    let nsid = cmd.nsid();
    let cdw11 = cmd.cdw(11);
    let ok = |result: u64| AdminOutcome::Done {
        status: Status::SUCCESS,
        result,
        data_len: 0,
    };
    if f == fid::RESV_MASK && set && cdw11 & !nvme::reservation::mask::ALL != 0 {
        return done(Status::INVALID_FIELD);
    }
    if f == fid::RESV_MASK && set && nsid == 0xFFFF_FFFF {
        let nsids: Vec<u32> = ctrl
            .subsys
            .namespaces()
            .iter()
            .filter(|n| n.resv.enabled())
            .map(|n| n.nsid)
            .collect();
        ctrl.state().resv_notices.set_mask(nsids, cdw11);
        return ok(0);
    }
    let Some(ns) = ctrl.subsys.namespace(nsid) else {
        return done(Status::INVALID_NS);
    };
    if !ns.resv.enabled() {
        return done(Status::INVALID_FIELD);
    }
    match (f, set) {
        (fid::RESV_MASK, true) => {
            ctrl.state().resv_notices.set_mask([nsid], cdw11);
            ok(0)
        }
        (fid::RESV_MASK, false) => ok(ctrl.state().resv_notices.mask(nsid) as u64),
        (_, true) if ns.resv.blocks() => {
            // Any connected host may ask, registered or not: at most so
            // often per controller, and never on the worker.
            {
                let mut st = ctrl.state();
                if st
                    .blocking_asked
                    .is_some_and(|t| now.saturating_duration_since(t) < BLOCKING_FEATURE_EVERY)
                {
                    drop(st);
                    return done(ctrl.retry_delay(Status::COMMAND_INTERRUPTED.with_crd(1)));
                }
                st.blocking_asked = Some(now);
            }
            let on = cdw11 & 1 != 0;
            let resv = ns.resv.clone();
            AdminOutcome::Blocking {
                ns,
                work: Box::new(move || match resv.set_ptpl(on) {
                    Ok(()) => Status::SUCCESS,
                    Err(st) => st,
                }),
            }
        }
        (_, true) => match ns.resv.set_ptpl(cdw11 & 1 != 0) {
            Ok(()) => ok(0),
            Err(st) => done(st),
        },
        (_, false) => ok(ns.resv.lock().ptpl as u64),
    }
}

/// Size of the Host Behavior Support data structure.
const HOST_BEHAVIOR_SIZE: usize = 512;

/// The admin commands this target implements.
const ADMIN_OPCODES: [u8; 7] = [
    op::IDENTIFY,
    op::GET_LOG_PAGE,
    op::SET_FEATURES,
    op::GET_FEATURES,
    op::KEEP_ALIVE,
    op::ASYNC_EVENT_REQUEST,
    op::ABORT,
];

/// Whether `opc` is an admin command this target implements (checked before
/// the SGL, as nvmet does, so an unknown opcode gets INVALID_OPCODE whatever
/// its SGL).
pub fn supported(opc: u8) -> bool {
    ADMIN_OPCODES.contains(&opc)
}

/// The Commands Supported and Effects log: the admin and I/O commands this
/// target implements; the I/O commands that write change block content.
fn cmd_effects() -> [u8; nvme::log::CMD_EFFECTS_SIZE] {
    use nvme::log::{EFFECT_CSUPP, EFFECT_LBCC};
    use nvme::opcode::io;
    let admin: Vec<(u8, u32)> = ADMIN_OPCODES.iter().map(|&o| (o, EFFECT_CSUPP)).collect();
    let io_cmds: Vec<(u8, u32)> = (0..=u8::MAX)
        .filter(|&o| crate::command::io::supported(o))
        .map(|o| {
            let writes = matches!(o, io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT);
            (o, EFFECT_CSUPP | if writes { EFFECT_LBCC } else { 0 })
        })
        .collect();
    nvme::log::encode_cmd_effects(&admin, &io_cmds)
}

/// Executes an admin command (not a fabrics command) for `ctrl`. `buf` holds
/// the command's data: the host's (host-to-controller) or room for the reply.
pub fn execute(
    target: &Target,
    ctrl: &Controller,
    cmd: &Command,
    buf: &mut [u8],
    now: Instant,
) -> AdminOutcome {
    {
        let mut st = ctrl.state();
        st.last_keepalive = now;
        if !st.ready() {
            return done(Status::CMD_SEQ_ERROR);
        }
    }
    match cmd.opcode() {
        op::IDENTIFY => identify(ctrl, cmd, buf),
        op::GET_LOG_PAGE => get_log_page(target, ctrl, cmd, buf),
        op::SET_FEATURES => features(ctrl, cmd, buf, true, now),
        op::GET_FEATURES => features(ctrl, cmd, buf, false, now),
        op::KEEP_ALIVE => done(Status::SUCCESS),
        op::ASYNC_EVENT_REQUEST => {
            let mut st = ctrl.state();
            if st.aers.len() >= crate::MAX_AERS {
                return done(Status::AER_LIMIT_EXCEEDED);
            }
            st.aers.push(cmd.cid());
            AdminOutcome::Parked
        }
        // Abort: the command was not aborted (result bit 0 set).
        op::ABORT if ctrl.subsys.kind == SubsystemKind::Nvm => AdminOutcome::Done {
            status: Status::SUCCESS,
            result: 1,
            data_len: 0,
        },
        _ => done(Status::INVALID_OPCODE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::namespace::Namespace;
    use crate::model::subsystem::Subsystem;
    use nvme::fabrics::{cc, prop};
    use nvme::identify::{IdentifyNamespace, IDENTIFY_SIZE};
    use std::sync::Arc;

    fn setup() -> (Target, Arc<Controller>, Arc<Controller>) {
        let ns = Arc::new(Namespace::new(
            "nqn.t:s",
            1,
            Box::new(crate::backend::null::Null),
            1 << 30,
            4096,
            false,
        ));
        let ns5 = Arc::new(Namespace::new(
            "nqn.t:s",
            5,
            Box::new(crate::backend::null::Null),
            1 << 20,
            512,
            false,
        ));
        let s = Arc::new(Subsystem::new(
            "nqn.t:s".into(),
            SubsystemKind::Nvm,
            true,
            vec![],
            None,
            "model".into(),
            vec![ns5, ns],
        ));
        let t = Target::new(vec![s.clone()], vec!["10.0.0.1:4420".parse().unwrap()], 0);
        let c = s.add_controller("nqn.h", [3; 16], 5000, 16, false).unwrap();
        let d = t
            .discovery
            .add_controller("nqn.h", [3; 16], 0, 16, false)
            .unwrap();
        for x in [&c, &d] {
            let v = (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64;
            x.state().property_set(prop::CC, false, v).unwrap();
        }
        (t, c, d)
    }

    fn cmd(opc: u8, nsid: u32, cdw10: u32, cdw11: u32) -> Command {
        let mut c = Command::new(opc, 7);
        c.set_nsid(nsid);
        c.set_cdw(10, cdw10);
        c.set_cdw(11, cdw11);
        c
    }

    fn run(t: &Target, c: &Controller, cmd: &Command, len: usize) -> (AdminOutcome, Vec<u8>) {
        let mut buf = vec![0xEEu8; len];
        let o = execute(t, c, cmd, &mut buf, Instant::now());
        (o, buf)
    }

    fn status(o: AdminOutcome) -> Status {
        match o {
            AdminOutcome::Done { status, .. } => status,
            AdminOutcome::Parked => panic!("parked"),
            // What the queue core does with it: the work's status.
            AdminOutcome::Blocking { work, .. } => work(),
        }
    }

    #[test]
    fn identify_controller_and_namespaces() {
        let (t, c, _) = setup();
        let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        let id = IdentifyController::parse(&b).unwrap();
        assert_eq!(id.cntlid, c.cntlid);
        assert_eq!(id.subnqn, "nqn.t:s");
        assert_eq!(id.ioccsz, (64 + crate::INLINE_DATA_SIZE) / 16);
        assert_ne!(id.sgls & (1 << 20), 0);
        assert_ne!(id.kas, 0);
        assert_eq!(id.oaes & (1 << 8), 1 << 8);
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 1, 0, 0), 4096);
        let n = IdentifyNamespace::parse(&b).unwrap();
        assert_eq!((n.nsze, n.block_size()), (262144, 4096));
        let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, 2, 0, 0), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        assert!(
            b.iter().all(|&x| x == 0),
            "inactive namespace is all zeroes"
        );
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 0, 0, 0), 4096).0),
            Status::INVALID_NS
        );
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 0xFFFF_FFFF, 0, 0), 4096).0),
            Status::INVALID_NS
        );
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 2, 0), 4096);
        assert_eq!(identify::parse_ns_list(&b), vec![1, 5]);
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 1, 2, 0), 4096);
        assert_eq!(identify::parse_ns_list(&b), vec![5]);
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 5, 3, 0), 4096);
        assert_eq!(identify::parse_ns_descriptors(&b).len(), 3);
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 4, 3, 0), 4096).0),
            Status::INVALID_NS
        );
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 0, 0x10, 0), 4096).0),
            Status::INVALID_FIELD
        );
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 512).0),
            Status::SGL_INVALID_DATA
        );
        // The NVM command set's Identify Namespace and Controller (CNS 5
        // and 6, CSI 0): zeroes, for an active namespace; other sets: no.
        for (nsid, cns) in [(1, 5), (0, 6)] {
            let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, nsid, cns, 0), 4096);
            assert_eq!(status(o), Status::SUCCESS);
            assert!(b.iter().all(|&x| x == 0), "CNS {cns}");
            let zns = cmd(op::IDENTIFY, nsid, cns, 2 << 24);
            assert_eq!(status(run(&t, &c, &zns, 4096).0), Status::INVALID_FIELD);
        }
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 4, 5, 0), 4096).0),
            Status::INVALID_NS
        );
    }

    #[test]
    fn log_pages() {
        let (t, c, d) = setup();
        let glp = |l: u8, len: u64, off: u64| {
            GetLogPage {
                lid: l,
                lsp: 0,
                rae: false,
                len,
                offset: off,
            }
            .to_command(1, 0xFFFF_FFFF)
        };
        // discovery: header, then entries at 1024, exact windows
        let (o, b) = run(&t, &d, &glp(lid::DISCOVERY, 20, 0), 20);
        assert_eq!(status(o), Status::SUCCESS);
        assert_eq!(
            nvme::discovery::DiscoveryHeader::parse(&b).unwrap().numrec,
            1
        );
        let (_, b) = run(&t, &d, &glp(lid::DISCOVERY, 1024, 1024), 1024);
        assert_eq!(
            nvme::discovery::DiscoveryEntry::parse(&b).unwrap().subnqn,
            "nqn.t:s"
        );
        let (o, b) = run(&t, &d, &glp(lid::DISCOVERY, 4096, 1024), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        assert!(b[1024..].iter().all(|&x| x == 0));
        assert_eq!(
            status(run(&t, &d, &glp(lid::DISCOVERY, 4, 4096), 4).0),
            Status::INVALID_FIELD
        );
        assert_eq!(
            status(run(&t, &d, &glp(lid::DISCOVERY, 4, 2), 4).0),
            Status::INVALID_FIELD
        );
        assert_eq!(
            status(run(&t, &d, &glp(lid::DISCOVERY, 8, 0), 4).0),
            Status::SGL_INVALID_DATA
        );
        assert_eq!(
            status(run(&t, &c, &glp(lid::DISCOVERY, 4, 0), 4).0),
            Status::INVALID_LOG_PAGE
        );
        assert_eq!(
            status(run(&t, &d, &glp(lid::SMART, 512, 0), 512).0),
            Status::INVALID_LOG_PAGE
        );
        // Each controller advertises (LPA bit 1) the effects log exactly
        // where it serves it: Linux hosts read what is advertised.
        for (ctrl, serves) in [(&c, true), (&d, false)] {
            let lpa = identify_controller(ctrl).lpa;
            let st = status(run(&t, ctrl, &glp(lid::CMD_EFFECTS, 4096, 0), 4096).0);
            assert_eq!(lpa & 2 != 0, serves);
            assert_eq!(st == Status::SUCCESS, serves);
        }
        // smart, error, changed ns
        let (o, b) = run(&t, &c, &glp(lid::SMART, 512, 0), 512);
        assert_eq!(status(o), Status::SUCCESS);
        assert_eq!(SmartLog::parse(&b).unwrap().avail_spare, 100);
        c.state().log_error(1, 9, Status::LBA_RANGE, 1);
        let (_, b) = run(&t, &c, &glp(lid::ERROR, 64, 0), 64);
        assert_eq!(nvme::log::ErrorLogEntry::parse(&b).unwrap().cid, 9);
        c.state().changed_ns.push(5);
        let (_, b) = run(&t, &c, &glp(lid::CHANGED_NS, 4096, 0), 4096);
        assert_eq!(&b[..4], &[5, 0, 0, 0]);
        assert!(c.state().changed_ns.is_empty());
        assert_eq!(
            status(run(&t, &c, &glp(0x81, 512, 0), 512).0),
            Status::INVALID_LOG_PAGE
        );
        // reservation notifications: one page per read, an empty one at the end
        let (o, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
        assert_eq!(status(o), Status::SUCCESS);
        assert_eq!(b, vec![0; 64]);
        c.notify_reservation(5, nvme::reservation::notice::RESERVATION_RELEASED);
        c.notify_reservation(1, nvme::reservation::notice::REGISTRATION_PREEMPTED);
        assert_eq!(c.state().events.len(), 1, "one event until the log is read");
        let (_, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
        let n = nvme::reservation::Notification::parse(&b).unwrap();
        assert_eq!((n.count, n.kind, n.available, n.nsid), (1, 2, 1, 5));
        let (_, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
        assert_eq!(nvme::reservation::Notification::parse(&b).unwrap().nsid, 1);
        // commands supported and effects: admin at 0, I/O at 1024, writes change content
        let (o, b) = run(&t, &c, &glp(lid::CMD_EFFECTS, 4096, 0), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        let at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        assert_eq!(at(op::IDENTIFY as usize * 4), 1);
        assert_eq!(at(0x80 * 4), 0, "Format NVM is not supported");
        assert_eq!(at(1024 + 0x02 * 4), 1, "read: supported");
        assert_eq!(
            at(1024 + 4),
            3,
            "write (opcode 1): supported, changes content"
        );
        assert_eq!(at(1024 + 0x09 * 4), 3, "dataset management");
        assert_eq!(
            at(1024 + 0x05 * 4),
            1,
            "compare: supported, changes nothing"
        );
        assert_eq!(at(1024 + 0x0D * 4), 1, "reservation register");
        assert_eq!(
            status(run(&t, &d, &glp(lid::CMD_EFFECTS, 4096, 0), 4096).0),
            Status::INVALID_LOG_PAGE
        );
        // a log page may be read in part
        let (o, _) = run(&t, &c, &glp(lid::SMART, 128, 0), 128);
        assert_eq!(status(o), Status::SUCCESS);
    }

    #[test]
    fn ana_identify_log_and_event() {
        use nvme::ana::{parse_log, AnaState};
        let (t, c, d) = setup();
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
        let id = IdentifyController::parse(&b).unwrap();
        assert_eq!(id.cmic & 0x0A, 0x0A, "multi-controller, ANA");
        assert_eq!((id.anacap, id.anagrpmax, id.nanagrpid), (0x1F, 128, 128));
        assert_ne!(id.anatt, 0);
        assert_ne!(id.oaes & oaes::ANA_CHANGE, 0);
        let (_, b) = run(&t, &d, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
        assert_eq!(IdentifyController::parse(&b).unwrap().cmic, 0, "discovery");
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 5, 0, 0), 4096);
        assert_eq!(IdentifyNamespace::parse(&b).unwrap().anagrpid, 1);
        // The log page: group 1 with both namespaces, optimized.
        let glp = |lsp: u8, rae: bool| {
            GetLogPage {
                lid: lid::ANA,
                lsp,
                rae,
                len: 4096,
                offset: 0,
            }
            .to_command(1, 0xFFFF_FFFF)
        };
        let (o, b) = run(&t, &c, &glp(0, false), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        let (count, groups) = parse_log(&b).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(
            (groups[0].id, groups[0].state, &groups[0].nsids[..]),
            (1, AnaState::Optimized, &[1, 5][..])
        );
        let (_, b) = run(&t, &c, &glp(1, false), 4096);
        assert!(parse_log(&b).unwrap().1[0].nsids.is_empty(), "RGO");
        assert_eq!(
            status(run(&t, &d, &glp(0, false), 4096).0),
            Status::INVALID_LOG_PAGE
        );
        // A change at the controller's listener: the state, the count, one
        // notice until the log is read (with RAE it stays masked).
        let mut l = crate::config::ListenerConfig {
            addr: "10.0.0.1:4420".parse().unwrap(),
            transport: Default::default(),
            ana: [(1, AnaState::Inaccessible)].into_iter().collect(),
        };
        assert!(
            !c.notify_ana_changed(),
            "the host did not enable the notice"
        );
        let aec = cmd(
            op::SET_FEATURES,
            0,
            fid::ASYNC_EVENT_CONFIG as u32,
            oaes::ANA_CHANGE,
        );
        assert_eq!(status(run(&t, &c, &aec, 0).0), Status::SUCCESS);
        assert_eq!(t.ana.update(std::slice::from_ref(&l)), vec![0]);
        assert!(c.notify_ana_changed());
        assert!(!c.notify_ana_changed(), "masked until the log is read");
        assert_eq!(
            c.state().events.front().copied(),
            Some(0x000C_0302),
            "notice, ANA change, log 0x0C"
        );
        let (_, b) = run(&t, &c, &glp(0, true), 4096);
        let (count2, groups) = parse_log(&b).unwrap();
        assert!(count2 > count);
        assert_eq!(groups[0].state, AnaState::Inaccessible);
        assert!(!c.notify_ana_changed(), "read with RAE: still masked");
        run(&t, &c, &glp(0, false), 4096);
        l.ana.clear();
        t.ana.update(std::slice::from_ref(&l));
        assert!(
            c.notify_ana_changed(),
            "read: the next change raises a notice"
        );
    }

    #[test]
    fn host_behavior_and_retry_delay() {
        let (t, c, d) = setup();
        let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
        assert_eq!(
            IdentifyController::parse(&b).unwrap().crdt,
            [CRDT1_100MS, 0, 0]
        );
        let hb = fid::HOST_BEHAVIOR as u32;
        let (o, b) = run(&t, &c, &cmd(op::GET_FEATURES, 0, hb, 0), 512);
        assert_eq!((status(o), b[0]), (Status::SUCCESS, 0), "ACRE off at first");
        let mut data = vec![0u8; 512];
        data[0] = 1;
        let o = execute(
            &t,
            &c,
            &cmd(op::SET_FEATURES, 0, hb, 0),
            &mut data,
            Instant::now(),
        );
        assert_eq!(status(o), Status::SUCCESS);
        assert!(c.state().acre);
        let (_, b) = run(&t, &c, &cmd(op::GET_FEATURES, 0, hb, 0), 512);
        assert_eq!(b[0], 1);
        assert_eq!(
            status(run(&t, &c, &cmd(op::SET_FEATURES, 0, hb, 0), 16).0),
            Status::SGL_INVALID_DATA
        );
        assert_eq!(
            status(run(&t, &d, &cmd(op::GET_FEATURES, 0, hb, 0), 512).0),
            Status::INVALID_FIELD
        );
    }

    #[test]
    fn reservation_features() {
        let (t, c, _) = setup();
        let set = |nsid, v| cmd(op::SET_FEATURES, nsid, fid::RESV_MASK as u32, v);
        let get = |nsid| cmd(op::GET_FEATURES, nsid, fid::RESV_MASK as u32, 0);
        assert_eq!(status(run(&t, &c, &set(1, 4), 0).0), Status::SUCCESS);
        assert_eq!(c.state().resv_notices.mask(1), 4);
        assert_eq!(status(run(&t, &c, &set(1, 1), 0).0), Status::INVALID_FIELD);
        assert_eq!(status(run(&t, &c, &set(9, 4), 0).0), Status::INVALID_NS);
        assert_eq!(
            status(run(&t, &c, &set(0xFFFF_FFFF, 8), 0).0),
            Status::SUCCESS
        );
        assert_eq!(c.state().resv_notices.mask(5), 8);
        match run(&t, &c, &get(1), 0).0 {
            AdminOutcome::Done { result, .. } => assert_eq!(result, 8),
            o => panic!("{o:?}"),
        }
        let ptpl = |set: bool, v| {
            let opc = if set {
                op::SET_FEATURES
            } else {
                op::GET_FEATURES
            };
            cmd(opc, 1, fid::RESV_PERSIST as u32, v)
        };
        assert_eq!(status(run(&t, &c, &ptpl(false, 0), 0).0), Status::SUCCESS);
        assert_eq!(status(run(&t, &c, &ptpl(true, 0), 0).0), Status::SUCCESS);
        assert_eq!(
            status(run(&t, &c, &ptpl(true, 1), 0).0),
            Status::INVALID_FIELD,
            "the null namespace cannot persist"
        );
    }

    #[test]
    fn features_and_aer() {
        let (t, c, d) = setup();
        let (o, _) = run(
            &t,
            &c,
            &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 3 | 3 << 16),
            0,
        );
        assert_eq!(
            o,
            AdminOutcome::Done {
                status: Status::SUCCESS,
                result: 3 | 3 << 16,
                data_len: 0
            }
        );
        assert_eq!(c.state().io_queues, 4);
        let (o, _) = run(
            &t,
            &c,
            &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 500 | 500 << 16),
            0,
        );
        let m = (crate::MAX_IO_QUEUES - 1) as u64;
        assert_eq!(
            o,
            AdminOutcome::Done {
                status: Status::SUCCESS,
                result: m | m << 16,
                data_len: 0
            }
        );
        assert_eq!(
            status(
                run(
                    &t,
                    &c,
                    &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 0xFFFF),
                    0
                )
                .0
            ),
            Status::INVALID_FIELD
        );
        assert_eq!(
            status(
                run(
                    &t,
                    &d,
                    &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 1),
                    0
                )
                .0
            ),
            Status::INVALID_FIELD
        );
        run(
            &t,
            &c,
            &cmd(op::SET_FEATURES, 0, fid::KEEP_ALIVE_TIMER as u32, 15000),
            0,
        );
        assert_eq!(c.state().kato_ms, 15000);
        assert_eq!(
            status(
                run(
                    &t,
                    &c,
                    &cmd(
                        op::SET_FEATURES,
                        0,
                        1 << 31 | fid::KEEP_ALIVE_TIMER as u32,
                        1
                    ),
                    0
                )
                .0
            ),
            Status::FEATURE_NOT_SAVEABLE
        );
        let (o, b) = run(
            &t,
            &c,
            &cmd(op::GET_FEATURES, 0, fid::HOST_ID as u32, 1),
            16,
        );
        assert_eq!(status(o), Status::SUCCESS);
        assert_eq!(b, vec![3; 16]);
        assert_eq!(
            status(run(&t, &c, &cmd(op::GET_FEATURES, 0, 0x77, 0), 0).0),
            Status::INVALID_FIELD
        );
        for _ in 0..crate::MAX_AERS {
            assert_eq!(
                run(&t, &c, &cmd(op::ASYNC_EVENT_REQUEST, 0, 0, 0), 0).0,
                AdminOutcome::Parked
            );
        }
        assert_eq!(
            status(run(&t, &c, &cmd(op::ASYNC_EVENT_REQUEST, 0, 0, 0), 0).0),
            Status::AER_LIMIT_EXCEEDED
        );
        assert_eq!(
            status(run(&t, &c, &cmd(0x80, 0, 0, 0), 0).0),
            Status::INVALID_OPCODE
        );
        assert_eq!(
            status(run(&t, &c, &cmd(op::KEEP_ALIVE, 0, 0, 0), 0).0),
            Status::SUCCESS
        );
    }

    #[test]
    fn not_ready_is_sequence_error() {
        let (t, c, _) = setup();
        c.state().property_set(prop::CC, false, 0).unwrap();
        assert_eq!(
            status(run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), IDENTIFY_SIZE).0),
            Status::CMD_SEQ_ERROR
        );
    }
}
