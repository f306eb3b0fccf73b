//! Admin command handling and the controller state machine. Input: a flags
//! byte (bit 0: leave the controller disabled; bit 1: the discovery
//! controller), then commands, each 64 bytes and a 2-byte data length (the
//! buffer is filled from the bytes that follow, as host data would be). Property
//! Get/Set go through the fabrics handler, as the transport routes them.
#![no_main]
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use nvme::command::Command;
use nvme::fabrics::{cc, prop};
use nvme::opcode::fctype;
use nvmf_target::command::admin::{execute, AdminOutcome};

#[path = "common.rs"]
mod common;

fuzz_target!(|b: &[u8]| {
    let Some((&flags, mut rest)) = b.split_first() else {
        return;
    };
    let t = common::target();
    let subsys = if flags & 2 != 0 {
        t.discovery.subsystem.clone()
    } else {
        t.subsystem(common::OPEN).unwrap()
    };
    let Ok(ctrl) = subsys.add_controller(nvmf_target::model::subsystem::NewController::of(common::HOST, [3; 16], 5000), 16) else {
        return;
    };
    if flags & 1 == 0 {
        let v = (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64;
        ctrl.state().property_set(prop::CC, false, v).unwrap();
    }
    let mut n = 0;
    while rest.len() >= 66 && n < 16 {
        n += 1;
        let cmd = Command::parse(&rest[..64]).unwrap();
        let len = u16::from_le_bytes([rest[64], rest[65]]) as usize % 16384;
        rest = &rest[66..];
        let mut buf = vec![0u8; len];
        let k = len.min(rest.len());
        buf[..k].copy_from_slice(&rest[..k]);
        rest = &rest[k..];
        if cmd.is_fabrics() {
            if matches!(cmd.fctype(), fctype::PROPERTY_GET | fctype::PROPERTY_SET) {
                let _ = nvmf_target::command::fabrics::property(&ctrl, &cmd);
            }
            continue;
        }
        match execute(&t, &ctrl, &cmd, &mut buf, Instant::now()) {
            AdminOutcome::Done { status, .. } => {
                let _ = status.to_field();
            }
            AdminOutcome::Parked => {}
            // What the worker runs on the namespace's lane, run here.
            AdminOutcome::Blocking { job, .. } => {
                let _ = job.run();
            }
        }
    }
    // As the transport does when the admin queue goes away (the subsystem and
    // its controller hold each other until then).
    subsys.remove_controller(ctrl.cntlid);
});
