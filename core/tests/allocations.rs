//! No heap allocation per I/O in steady state (issue 43): a counting
//! allocator around the system's, and I/Os through the whole command path
//! on the loopback transport (the null backend, the inline executor). After
//! a warm-up (queues, slabs and buffers reach their size), a run of I/Os of
//! each pattern must allocate nothing at all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nvme::opcode::io;
use nvme::{Command, Sgl};
use nvmf_core::loopback::Loopback;
use nvmf_core::request::pool::PoolShape;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// `ALLOC_TRACE=N`: the backtraces of the first N allocations counted.
static TRACES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static IN_TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn counted() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if TRACES.load(Ordering::Relaxed) == 0 || IN_TRACE.with(|t| t.replace(true)) {
        return;
    }
    TRACES.fetch_sub(1, Ordering::Relaxed);
    eprintln!(
        "allocation:\n{}",
        std::backtrace::Backtrace::force_capture()
    );
    IN_TRACE.with(|t| t.set(false));
}

// SAFETY: every call goes to the system allocator unchanged; the counter
// is an atomic that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            counted();
        }
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            counted();
        }
        // SAFETY: `p` came from `alloc` with `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const SUB: &str = "nqn.2026-11.io.test:alloc";

fn loopback() -> (Loopback, usize, u32) {
    let shape = PoolShape {
        small_size: 8192,
        small_count: 64,
        large_size: 128 * 1024,
        large_count: 32,
    };
    let (mut lb, q) = Loopback::null_io_queue(SUB, shape, 64);
    let w = lb.window(vec![0; 64 * 1024]);
    (lb, q, w)
}

fn command(opc: u8, cid: u16, len: u32, sgl: Sgl) -> Command {
    let mut c = Command::new(opc, cid);
    c.set_nsid(1);
    c.set_cdw(10, u32::from(cid) * 16);
    c.set_cdw(12, len / 4096 - 1);
    c.set_sgl(&sgl);
    c
}

/// Allocations during `rounds` batches of `cmds` (after as many to warm up).
fn allocations(lb: &mut Loopback, q: usize, cmds: &[Command], data: &[u8], rounds: usize) -> usize {
    let batch = |lb: &mut Loopback| {
        for c in cmds {
            lb.send(q, c, data).expect("a receive");
        }
        lb.run();
        let (n, failed) = lb.drain_cqes(q);
        assert_eq!((n, failed), (cmds.len(), 0));
    };
    for _ in 0..rounds {
        batch(lb);
    }
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    for _ in 0..rounds {
        batch(lb);
    }
    COUNTING.store(false, Ordering::Relaxed);
    ALLOCATIONS.load(Ordering::Relaxed)
}

#[test]
fn no_allocation_per_io_in_steady_state() {
    if let Some(n) = std::env::var("ALLOC_TRACE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        TRACES.store(n, Ordering::Relaxed);
    }
    let (mut lb, q, w) = loopback();
    let keyed = |len| Sgl::Keyed {
        addr: 0,
        len,
        key: w,
        invalidate: false,
    };
    let data = vec![0x5A; 4096];
    let mut found = Vec::new();
    for (name, opc, len, in_capsule) in [
        ("4k read", io::READ, 4096, false),
        ("4k in-capsule write", io::WRITE, 4096, true),
        ("64k read", io::READ, 65536, false),
        ("64k write (fetched)", io::WRITE, 65536, false),
    ] {
        for depth in [1u16, 32] {
            let cmds: Vec<Command> = (1..=depth)
                .map(|cid| {
                    let sgl = match in_capsule {
                        true => Sgl::InCapsule { offset: 0, len },
                        false => keyed(len),
                    };
                    command(opc, cid, len, sgl)
                })
                .collect();
            let d: &[u8] = if in_capsule { &data } else { &[] };
            let n = allocations(&mut lb, q, &cmds, d, 200);
            let ios = 200 * depth as usize;
            if n != 0 {
                found.push(format!(
                    "{name} QD{depth}: {n} allocations in {ios} I/Os ({:.2} per I/O)",
                    n as f64 / ios as f64
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "allocations in steady state:\n{}",
        found.join("\n")
    );
    // The instrument sees an allocation where there is one.
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let b = std::hint::black_box(Box::new([0u8; 64]));
    COUNTING.store(false, Ordering::Relaxed);
    drop(b);
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        1,
        "the counting allocator counts"
    );
}
