//! The queue core through the loopback transport: any sequence of capsules
//! (valid Connects and property sets to get deep, raw commands with in-capsule
//! data or keyed SGLs into the host's windows), runs, clock steps and
//! disconnects, on an admin and an I/O queue. Nothing panics, and once every
//! queue was disconnected and the loopback ran, every request, pool buffer
//! and receive is given back.
//! Input: one byte per operation, followed by what it needs.
#![no_main]
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nvme::fabrics::{cc, prop, ConnectCommand, ConnectData, PropertyCommand};
use nvme::Sgl;
use nvmf_target::loopback::{no_data, Loopback, POOL};

#[path = "common.rs"]
mod common;

fn connect(lb: &mut Loopback, q: usize, qid: u16, cntlid: u16, cid: u16) {
    let mut c = no_data(
        ConnectCommand {
            recfmt: 0,
            qid,
            sqsize: if qid == 0 { 31 } else { 7 },
            cattr: 0,
            kato: 5000,
        }
        .to_command(cid),
    );
    let data = ConnectData {
        hostid: [1; 16],
        cntlid,
        subsysnqn: common::OPEN.into(),
        hostnqn: common::HOST.into(),
    }
    .encode();
    c.set_sgl(&Sgl::InCapsule {
        offset: 0,
        len: 1024,
    });
    let _ = lb.send(q, &c, &data);
}

fuzz_target!(|b: &[u8]| {
    let Ok(mut lb) = Loopback::new(Arc::new(common::target()), POOL) else {
        return;
    };
    // The host's memory: windows 1..=3 that keyed SGLs may name.
    for _ in 0..3 {
        lb.window(vec![0x5A; 256 << 10]);
    }
    let queues = [lb.accept(0, 32), lb.accept(1, 8)];
    let mut cntlid = 0xFFFF;
    let mut i = 0;
    let mut cid = 0u16;
    while i < b.len() {
        let op = b[i];
        i += 1;
        let q = queues[(op >> 7) as usize];
        cid = cid.wrapping_add(1);
        match op & 0x7 {
            0 => {
                connect(&mut lb, queues[0], 0, 0xFFFF, cid);
                lb.run();
                if let Some(c) = lb.cqes(queues[0]).iter().find(|c| c.cid == cid) {
                    cntlid = c.result as u16;
                }
            }
            1 => connect(&mut lb, queues[1], 1, cntlid, cid),
            2 => {
                let v = cc::EN | 6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT;
                let c = PropertyCommand {
                    eight_bytes: false,
                    offset: prop::CC,
                    value: v as u64,
                }
                .to_command(cid, true);
                let _ = lb.send(queues[0], &no_data(c), &[]);
            }
            3 | 4 => {
                let Some(sqe) = b.get(i..i + 64) else { return };
                i += 64;
                let n = b.get(i).map_or(0, |&n| n as usize * 32);
                i += 1;
                let data = b.get(i..(i + n).min(b.len())).unwrap_or(&[]);
                i += data.len();
                let _ = lb.send_raw(q, sqe, data);
            }
            5 => lb.run(),
            6 => lb.advance(Duration::from_millis(100 * (op >> 3) as u64)),
            _ => lb.host_disconnect(q),
        }
    }
    for q in queues {
        lb.host_disconnect(q);
    }
    lb.run();
    for q in queues {
        assert!(!lb.queue_busy(q), "queue {q} holds a request after its disconnect");
        assert_eq!(lb.receives_in_use(q), 0, "queue {q} holds a receive");
    }
    assert_eq!(lb.buffers_in_use(), 0, "a pool buffer was not given back");
});
