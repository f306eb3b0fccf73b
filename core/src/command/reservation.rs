//! The Reservation commands on an I/O queue: Register, Acquire and Release
//! change the namespace's state and notify the hosts they affect; Report
//! describes it.

use std::sync::Arc;

use nvme::opcode::io as op;
use nvme::reservation::{RegisteredController, Report, ReportCommand, ResvCommand};
use nvme::{Command, Status};
use tracing::info;

use crate::backend::exec::{Job, JobKind};
use crate::model::controller::Controller;
use crate::model::namespace::Namespace;
use crate::model::ns_cache::NsRef;
use crate::model::subsystem::Subsystem;
use crate::reservation::state::{HostId, NqnTag};
use crate::reservation::Access;

/// The controller id a report gives every registrant: controllers are
/// allocated dynamically, and a registrant is a host (any of its
/// controllers), not one controller.
pub const DYNAMIC_CNTLID: u16 = 0xFFFF;

/// The check of an I/O command's `access` to `ns` by `ctrl`'s host against
/// the reservation, wherever the I/O path makes it (at arrival, inside the
/// write gate, when a parked write goes on, with a Compare and Write's gate
/// closed): a conflict is counted, and the status carries the controller's
/// retry delay.
pub fn admit(ns: &Namespace, ctrl: &Controller, access: Access) -> Result<(), Status> {
    ns.resv
        .check(&ctrl.hostid, &ctrl.nqn_tag, access)
        .map_err(|st| {
            if st == Status::RESERVATION_CONFLICT {
                ns.metrics.reservation_conflict();
            }
            ctrl.retry_delay(st)
        })
}

/// Runs reservation command `cmd` of `ctrl` on `ns`; `buf` holds its data
/// (the keys, or room for the report). Returns the status and the bytes of
/// `buf` that go back to the host.
pub fn execute(ns: &Namespace, ctrl: &Controller, cmd: &Command, buf: &mut [u8]) -> (Status, u32) {
    // A gateway that lost touch with a shared state neither reports nor
    // changes it.
    if !ns.resv.sure() {
        return (ctrl.retry_delay(crate::reservation::not_sure()), 0);
    }
    // A registrant is named by its host identifier: a host without one
    // (all zero) cannot be told from another such host.
    if ctrl.hostid == [0; 16] {
        return (Status::HOST_ID_INCONSISTENT, 0);
    }
    if cmd.opcode() == op::RESV_REPORT {
        return report(ns, cmd, buf);
    }
    let req = match ResvCommand::parse(cmd, buf) {
        Ok(r) => r,
        Err(_) => return (Status::SGL_INVALID_DATA, 0),
    };
    // Preempt and Abort on a local store: the namespace's writes in flight
    // (the preempted hosts' among them) complete first, and those that
    // arrive meanwhile wait and are checked against the new state.
    let _closed = if aborts_writes(ns, &req) {
        match ns.gate.close_within(crate::reservation::DRAIN_WAIT) {
            Some(c) => Some(c),
            // A write the cluster has not answered: the host retries.
            None => return (ctrl.retry_delay(crate::reservation::not_sure()), 0),
        }
    } else {
        None
    };
    match ns.resv.apply(&ctrl.hostid, &ctrl.nqn_tag, &req) {
        Ok(fx) => {
            if fx.changed {
                info!(subsys = %ctrl.subsys.nqn, nsid = ns.nsid, cntlid = ctrl.cntlid,
                      host = %ctrl.hostnqn, opcode = req.opcode, action = req.action,
                      rtype = req.rtype, "reservation changed");
            }
            for (host, kind) in &fx.notices {
                notify(&ctrl.subsys, host, fx.binding(host), ns.nsid, *kind);
            }
            (Status::SUCCESS, 0)
        }
        Err(st) => {
            if st == Status::RESERVATION_CONFLICT {
                ns.metrics.reservation_conflict();
            }
            (ctrl.retry_delay(st), 0)
        }
    }
}

/// Whether a Preempt and Abort must close the namespace's write gate (its
/// writes go through the gate: a file, a block device, an RBD image; the
/// other gateways of an image drain theirs when the change reaches them).
fn aborts_writes(ns: &Namespace, req: &ResvCommand) -> bool {
    req.opcode == op::RESV_ACQUIRE
        && req.action == nvme::reservation::racqa::PREEMPT_ABORT
        && ns.backend.gated()
}

/// Whether command `cmd` blocks (runs on the namespace's lane): it changes a
/// state kept in a file, or is a Preempt and Abort that waits for writes.
pub fn blocks(ns: &Namespace, cmd: &Command) -> bool {
    let opc = cmd.opcode();
    if opc == op::RESV_REPORT {
        return false;
    }
    let abort = opc == op::RESV_ACQUIRE
        && (cmd.cdw(10) & 7) as u8 == nvme::reservation::racqa::PREEMPT_ABORT
        && ns.backend.gated();
    ns.resv.blocks() || abort
}

/// A reservation command that blocks ([`blocks`]), as the executor's named
/// job on the namespace's lane: its status is the result.
pub struct Change {
    ns: NsRef,
    ctrl: Arc<Controller>,
    cmd: Command,
    keys: Vec<u8>,
}

impl Change {
    /// `ctrl`'s command `cmd` on `ns`, with its data `keys` (copied out of
    /// the request: the job owns it).
    pub fn new(ns: NsRef, ctrl: Arc<Controller>, cmd: Command, keys: Vec<u8>) -> Change {
        Change {
            ns,
            ctrl,
            cmd,
            keys,
        }
    }
}

impl Job for Change {
    fn kind(&self) -> JobKind {
        JobKind::Reservation
    }

    fn run(mut self: Box<Self>) -> i32 {
        let (st, _) = execute(&self.ns, &self.ctrl, &self.cmd, &mut self.keys);
        st.to_field() as i32
    }
}

/// Reservation Report: the header and a Registered Controller structure per
/// registrant, as many as the host's buffer holds.
fn report(ns: &Namespace, cmd: &Command, buf: &mut [u8]) -> (Status, u32) {
    let rc = ReportCommand::from_command(cmd);
    // Host identifiers are 128 bits (CTRATT bit 0): the structure without
    // room for them cannot describe the registrants.
    if !rc.eds {
        return (Status::HOST_ID_INCONSISTENT, 0);
    }
    let rep = {
        let st = ns.resv.lock();
        Report {
            gen: st.generation,
            rtype: st.holder.map_or(0, |h| h.rtype),
            ptpls: st.ptpl,
            regctls: st
                .registrants
                .iter()
                .map(|r| RegisteredController {
                    cntlid: DYNAMIC_CNTLID,
                    holds: st.holds(&r.host),
                    hostid: r.host,
                    rkey: r.key,
                })
                .collect(),
        }
    };
    let out = rep.encode(rc.eds, buf.len());
    buf[..out.len()].copy_from_slice(&out);
    buf[out.len()..].fill(0);
    (Status::SUCCESS, buf.len() as u32)
}

/// Logs a notice for namespace `nsid` in every controller of `host` in the
/// subsystem (a host reaches a namespace through several controllers).
pub fn notify(subsys: &Subsystem, host: &HostId, nqn: Option<&NqnTag>, nsid: u32, kind: u8) {
    for c in subsys.controllers() {
        if &c.hostid == host && nqn.is_none_or(|t| *t == c.nqn_tag) {
            c.notify_reservation(nsid, kind);
        }
    }
}
