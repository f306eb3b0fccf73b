//! SGL planning: where a command's data is, from its SGL and the in-capsule
//! bytes that arrived. Input: a 64-byte command, then 4 bytes (LE) of in-capsule
//! length (its top bit: the TCP transport's SGLs rather than RDMA's). An accepted plan never exceeds the transfer limit, and in-capsule
//! data always lies within what arrived.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::command::Command;
use nvmf_target::request::data::{data_plan, DataPlan, SglKind};

fuzz_target!(|b: &[u8]| {
    if b.len() < 68 {
        return;
    }
    let cmd = Command::parse(&b[..64]).unwrap();
    let raw = u32::from_le_bytes(b[64..68].try_into().unwrap());
    let in_capsule = raw % (1 << 20);
    let kind = if raw >> 31 == 1 { SglKind::Transport } else { SglKind::Keyed };
    let max = nvmf_target::MAX_IO_SIZE;
    if let Ok((plan, _inv)) = data_plan(&cmd, in_capsule, max, kind) {
        assert!(plan.len() <= max.max(in_capsule), "{plan:?}");
        if let DataPlan::InCapsule { offset, len } = plan {
            assert!(offset as u64 + len as u64 <= in_capsule as u64, "{plan:?} of {in_capsule}");
        }
    }
});
