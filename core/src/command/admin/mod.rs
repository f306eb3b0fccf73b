//! Admin commands: Identify, Get Log Page, Set/Get Features, Asynchronous
//! Event Request, Keep Alive, Abort — for NVM and discovery controllers.

use std::time::Instant;

use nvme::identify::{self, cmic, cntrltype, oaes, oncs, sgls, IdentifyController};
use nvme::log::{copy_window, GetLogPage, SmartLog};
use nvme::opcode::{admin as op, cns, fid, lid};
use nvme::{Command, Status};

use std::sync::Arc;

use crate::backend::exec::{Job, JobKind};
use crate::model::controller::{Controller, ERROR_LOG_ENTRIES, VERSION};
use crate::model::namespace::Namespace;
use crate::model::subsystem::SubsystemKind;
use crate::model::target::Target;

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
    /// The command blocks (it syncs a file or waits for the cluster): `job`
    /// runs on the namespace's lane, never on the worker, and its result is
    /// the answer's status field.
    Blocking {
        /// The namespace whose lane runs it.
        ns: Arc<Namespace>,
        /// What it does.
        job: Box<dyn Job>,
    },
}

/// Set Features Reservation Persistence where the reservation state is
/// kept in a file or the cluster: the executor's named job on the
/// namespace's lane, its status field the result.
pub struct SetPersistence {
    ns: Arc<Namespace>,
    on: bool,
}

impl Job for SetPersistence {
    fn kind(&self) -> JobKind {
        JobKind::Persistence
    }

    fn run(self: Box<Self>) -> i32 {
        match self.ns.resv.set_ptpl(self.on) {
            Ok(()) => Status::SUCCESS.to_field() as i32,
            Err(st) => st.to_field() as i32,
        }
    }
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
            oaes::DISC_CHANGE
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
            match ctrl.namespace(nsid) {
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
                &identify::encode_ns_list(ctrl.namespaces().iter().map(|n| n.nsid), nsid),
            ))
        }
        cns::NS_DESC_LIST => match ctrl.namespace(nsid) {
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
        cns::CS_NAMESPACE if csi(cmd) == nvme::opcode::CSI_NVM => match ctrl.namespace(nsid) {
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
        lid::DISCOVERY if disc => {
            let (page, digest) = crate::model::discovery_log::log_page(target, &ctrl.hostnqn);
            let mut st = ctrl.state();
            // Reading it (without Retain Asynchronous Event) re-arms the
            // change notice; what was read is what later changes are
            // measured against.
            if !g.rae {
                st.disc_event_masked = false;
            }
            st.disc_seen = Some(digest);
            page
        }
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
            target.ana.log_page(ctrl.port(), &ctrl.namespaces(), rgo)
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
            st.last_keepalive = now;
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
            .namespaces()
            .iter()
            .filter(|n| n.resv.enabled())
            .map(|n| n.nsid)
            .collect();
        ctrl.state().resv_notices.set_mask(nsids, cdw11);
        return ok(0);
    }
    let Some(ns) = ctrl.namespace(nsid) else {
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
            // often per host (its controllers together), and never on the
            // worker.
            if !ctrl
                .subsys
                .ask_blocking(&ctrl.hostnqn, now, BLOCKING_FEATURE_EVERY)
            {
                return done(ctrl.retry_delay(Status::COMMAND_INTERRUPTED.with_crd(1)));
            }
            let job = Box::new(SetPersistence {
                ns: ns.clone(),
                on: cdw11 & 1 != 0,
            });
            AdminOutcome::Blocking { ns, job }
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

/// The most data a Set or Get Features moves: a page (Host Behavior Support
/// is 512 bytes, the Host Identifier 16).
const FEATURE_DATA_MAX: u32 = 4096;

/// Checks an admin command's data length against what the command moves,
/// before any buffer is taken or data fetched, so no peer makes a Keep
/// Alive or a Set Features hold a 128 KiB buffer (NVMe Base: Data SGL
/// Length Invalid; nvmet checks the same lengths, when it executes).
pub fn check_transfer(cmd: &Command, len: u32) -> Result<(), Status> {
    let ok = match cmd.opcode() {
        op::IDENTIFY => len as usize == identify::IDENTIFY_SIZE,
        op::GET_LOG_PAGE => GetLogPage::from_command(cmd).len == len as u64,
        op::SET_FEATURES | op::GET_FEATURES => len <= FEATURE_DATA_MAX,
        // Keep Alive, Asynchronous Event Request, Abort: no data.
        _ => len == 0,
    };
    if ok {
        Ok(())
    } else {
        Err(Status::SGL_INVALID_DATA)
    }
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
mod tests;
