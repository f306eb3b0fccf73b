//! Fabrics Connect as the target handles it. Input: the CM's qid (1 byte) and
//! HSQSIZE (2 bytes), a 64-byte command, then the Connect data. Runs against a
//! target with an open subsystem, a closed one and the discovery subsystem; an
//! admin Connect that succeeds is followed by an I/O queue Connect with the same
//! data for the new controller, from the admin queue's address or (bit 7 of the
//! first byte) another one, which must be refused.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::command::Command;
use nvme::fabrics::{cc, prop, ConnectCommand, ConnectData, PropertyCommand};

#[path = "common.rs"]
mod common;

fuzz_target!(|b: &[u8]| {
    if b.len() < 67 {
        return;
    }
    let t = common::target();
    let cm_qid = b[0] as u16 % 4;
    let other_peer = b[0] & 0x80 != 0;
    let host: std::net::SocketAddr = "10.0.0.1:4000".parse().unwrap();
    let cm_sqsize = u16::from_le_bytes([b[1], b[2]]);
    let cmd = Command::parse(&b[3..67]).unwrap();
    let data = &b[67..];
    let at = nvmf_target::command::fabrics::Arrival::plain(cm_qid, cm_sqsize, Some(host.ip()));
    if let Ok((ctrl, d)) = nvmf_target::command::fabrics::connect(&t, &at, &cmd, data) {
        assert_eq!(ConnectCommand::from_command(&cmd).qid, cm_qid);
        assert!(ctrl.subsys.host_allowed(&d.hostnqn));
        if cm_qid == 0 {
            ctrl.set_addrs(host, "10.0.0.9:4420".parse().unwrap());
            // The host enables the controller (CC.EN) and brings up an I/O
            // queue of it.
            let en = PropertyCommand {
                eight_bytes: false,
                offset: prop::CC,
                value: (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64,
            };
            let _ = nvmf_target::command::fabrics::property(&ctrl, &en.to_command(2, true));
            let mut io = ConnectCommand::from_command(&cmd);
            io.qid = 1;
            let c = io.to_command(1);
            let mut d2 = ConnectData::parse(data).unwrap();
            d2.cntlid = ctrl.cntlid;
            let peer = if other_peer { "10.0.0.2".parse().unwrap() } else { host.ip() };
            let at = nvmf_target::command::fabrics::Arrival::plain(1, io.sqsize, Some(peer));
            let r = nvmf_target::command::fabrics::connect(&t, &at, &c, &d2.encode());
            assert!(!(other_peer && r.is_ok()), "an I/O queue joined from another address");
        }
        // As the transport does when the admin queue goes away.
        ctrl.subsys.remove_controller(ctrl.cntlid);
    }
});
