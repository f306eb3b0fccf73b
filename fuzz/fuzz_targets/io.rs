//! I/O command validation and planning, and Dataset Management ranges. Input: a
//! 64-byte command, 4 bytes (LE) of SGL data length, then the data. Against a
//! 1 GiB namespace of 4 KiB blocks and a 1 MiB one of 512-byte blocks (nsid 5).
//! A planned transfer always lies within the namespace and the transfer limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::command::Command;
use nvmf_target::command::io::{dsm_ranges, errno_status, prepare};
use nvmf_target::request::plan::IoPlan;

#[path = "common.rs"]
mod common;

fuzz_target!(|b: &[u8]| {
    if b.len() < 68 {
        return;
    }
    let cmd = Command::parse(&b[..64]).unwrap();
    let sgl_len = u32::from_le_bytes(b[64..68].try_into().unwrap());
    let data = &b[68..];
    let ns = if cmd.nsid() == 5 {
        common::namespace(5, 1 << 20, 512)
    } else {
        common::namespace(1, 1 << 30, 4096)
    };
    let size = ns.blocks() * ns.block_size as u64;
    let max = nvmf_target::MAX_IO_SIZE;
    let Ok(plan) = prepare(Some(&ns), &cmd, sgl_len, max) else {
        return;
    };
    match plan {
        IoPlan::Read { offset, len } | IoPlan::Write { offset, len, .. } => {
            assert!(len <= max && offset + len as u64 <= size, "{plan:?}");
        }
        IoPlan::WriteZeroes { offset, len, .. } => assert!(offset + len <= size, "{plan:?}"),
        IoPlan::Dsm { nr, .. } => {
            if let Ok(ranges) = dsm_ranges(&ns, data, nr) {
                assert!(ranges.len() <= nr as usize);
                for (o, l) in ranges {
                    assert!(l > 0 && o + l <= size, "range {o}+{l} of {size}");
                }
            }
        }
        IoPlan::Compare { offset, len } => {
            assert!(len <= max && offset + len as u64 <= size, "{plan:?}");
        }
        IoPlan::Resv { len, .. } => assert!(len <= max && len == sgl_len, "{plan:?}"),
        IoPlan::Flush => {}
        IoPlan::Auth { .. } => panic!("an I/O command prepared as authentication: {plan:?}"),
    }
    let errno = i32::from_le_bytes(b[64..68].try_into().unwrap());
    let _ = errno_status(&plan, errno);
});
