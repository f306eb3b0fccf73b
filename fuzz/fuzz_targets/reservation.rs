//! The reservation state machine (target::reservation) fed the commands
//! hosts may send: the input is a sequence of 22-byte records
//! `[host][opcode pick][cdw10 (4, LE)][data (16)]` from four hosts, parsed
//! as the wire parser parses them. Checks: no panic, the state stays valid,
//! a failed command changes nothing, a notice never goes to the issuer,
//! the holder is never refused, and the report encodes at any length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::opcode::io as op;
use nvme::reservation::{Report, ResvCommand};
use nvme::Command;
use nvmf_target::reservation::state::{Access, Reservations};

const HOSTS: [[u8; 16]; 4] = [[1; 16], [2; 16], [3; 16], [4; 16]];

fuzz_target!(|data: &[u8]| {
    let Some((&ptpl, rest)) = data.split_first() else {
        return;
    };
    let mut s = Reservations::default();
    for rec in rest.chunks_exact(22) {
        let host = &HOSTS[rec[0] as usize % 4];
        let opcode = [op::RESV_REGISTER, op::RESV_ACQUIRE, op::RESV_RELEASE][rec[1] as usize % 3];
        let mut cmd = Command::new(opcode, 1);
        cmd.set_cdw(10, u32::from_le_bytes([rec[2], rec[3], rec[4], rec[5]]));
        let Ok(req) = ResvCommand::parse(&cmd, &rec[6..]) else {
            continue;
        };
        let before = s.clone();
        match s.apply(host, &req, ptpl & 1 != 0) {
            Ok(fx) => {
                assert!(s.valid());
                assert!(fx.notices.iter().all(|(h, _)| h != host));
            }
            Err(_) => assert_eq!(s, before),
        }
        for h in &HOSTS {
            if s.holds(h) {
                assert!(
                    s.allows(h, &[0; 16], Access::Write) && s.allows(h, &[0; 16], Access::Read)
                );
            }
        }
        let rep = Report {
            gen: s.generation,
            rtype: s.holder.map_or(0, |h| h.rtype),
            ptpls: s.ptpl,
            regctls: Vec::new(),
        };
        let len = rec[1] as usize * 4;
        assert!(rep.encode(rec[0] & 1 != 0, len).len() <= len);
    }
});
