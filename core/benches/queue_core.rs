//! The queue core's own cost per I/O (issue 43): capsules go in through the
//! loopback transport (no wire, no verbs), through the whole command path
//! (the capsule's arrival, the request lifecycle, the command, the null
//! backend through the inline executor: a fake completion source), and
//! the responses come out. What a real NIC adds is not here; what is here
//! is the software cost a NIC cannot hide.
//!
//! Each iteration sends a batch (queue depth 1 or 32) on one I/O queue,
//! runs the target until it is idle and takes the completions. The
//! throughput is reported per I/O.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nvme::opcode::io;
use nvme::{Command, Sgl};
use nvmf_core::loopback::Loopback;
use nvmf_core::request::pool::PoolShape;

const SUB: &str = "nqn.2026-11.io.bench:core";
const BLOCK: u32 = 4096;

/// Buffers for every command of a 32-deep queue of the largest I/O here.
const SHAPE: PoolShape = PoolShape {
    small_size: 8192,
    small_count: 64,
    large_size: 128 * 1024,
    large_count: 32,
};

/// One connected I/O queue in front of a null namespace.
struct Rig {
    lb: Loopback,
    q: usize,
    window: u32,
    data: Vec<u8>,
}

fn rig() -> Rig {
    let (mut lb, q) = Loopback::null_io_queue(SUB, SHAPE, 64);
    let window = lb.window(vec![0; 64 * 1024]);
    Rig {
        lb,
        q,
        window,
        data: vec![0xA5; 4096],
    }
}

/// What one I/O of a pattern is.
#[derive(Clone, Copy)]
enum Pattern {
    /// A read of this many bytes into the host's window (keyed SGL).
    Read(u32),
    /// A 4k write with its data in the capsule.
    WriteInCapsule,
}

impl Rig {
    fn command(&self, p: Pattern, cid: u16) -> Command {
        let mut c = Command::new(
            match p {
                Pattern::Read(_) => io::READ,
                Pattern::WriteInCapsule => io::WRITE,
            },
            cid,
        );
        c.set_nsid(1);
        let len = match p {
            Pattern::Read(n) => n,
            Pattern::WriteInCapsule => 4096,
        };
        c.set_cdw(10, u32::from(cid) * 16);
        c.set_cdw(12, len / BLOCK - 1);
        c.set_sgl(&match p {
            Pattern::Read(n) => Sgl::Keyed {
                addr: 0,
                len: n,
                key: self.window,
                invalidate: false,
            },
            Pattern::WriteInCapsule => Sgl::InCapsule { offset: 0, len },
        });
        c
    }

    /// Sends `depth` I/Os, runs until they all completed.
    fn batch(&mut self, cmds: &[Command], p: Pattern) {
        let data: &[u8] = match p {
            Pattern::Read(_) => &[],
            Pattern::WriteInCapsule => &self.data,
        };
        for c in cmds {
            self.lb
                .send(self.q, c, data)
                .expect("a receive for the capsule");
        }
        self.lb.run();
        let (n, failed) = self.lb.drain_cqes(self.q);
        assert_eq!(
            (n, failed),
            (cmds.len(), 0),
            "every I/O completes and succeeds"
        );
    }
}

fn per_io(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue_core");
    for (name, p) in [
        ("read_4k", Pattern::Read(4096)),
        ("write_4k_in_capsule", Pattern::WriteInCapsule),
        ("read_64k", Pattern::Read(64 * 1024)),
    ] {
        for depth in [1u16, 32] {
            let mut r = rig();
            let cmds: Vec<Command> = (1..=depth).map(|cid| r.command(p, cid)).collect();
            g.throughput(Throughput::Elements(u64::from(depth)));
            g.bench_with_input(BenchmarkId::new(name, format!("qd{depth}")), &p, |b, &p| {
                b.iter(|| r.batch(&cmds, p))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, per_io);
criterion_main!(benches);
