//! caw-race: fused Compare and Write against a target, as clustered hosts
//! use it for locks (VMware ATS). Usage:
//! `caw-race IP PORT SUBNQN ROUNDS [IP2 PORT2]`; namespace 1, blocks 0-2.
//! With a second address, host B goes through it (another gateway of the
//! same namespace); otherwise both hosts reach the one target.
//! `NVMF_TRANSPORT=tcp` runs it over NVMe/TCP; `NVMF_TRANSPORT_B` sets host
//! B's apart (one host through RDMA, the other through TCP).
//!
//! 1. Compare alone: equal, and different (Compare Failure).
//! 2. Broken pairs: a first command followed by a Read (the Compare is
//!    aborted, Missing Fused Command; the Read runs), a second alone
//!    (Missing Fused Command), a pair over different blocks (Invalid Field
//!    for the Write, Failed Fused Command for the Compare), a miscompare
//!    (Compare Failure, Failed Fused Command, nothing written).
//! 3. The race: hosts A and B (distinct host NQNs and IDs, one controller
//!    each) both read block 0, then each swaps it for its own data with a
//!    Compare and Write, ROUNDS times; meanwhile host C writes block 1 over
//!    and over (writes the target must hold back, not lose, while a Compare
//!    and Write runs). Each round exactly one host wins, and block 0 holds
//!    the winner's data; block 1 holds C's last write.
//!
//! Prints `CAW PASS` and the winners' counts; exits 1 on any failure.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use nvme::Status;
use nvmf_initiator::controller::{ConnectOptions, Controller, IoQueue};
use nvmf_initiator::host::HostIdentity;
use nvmf_initiator::{commands, HostQueue, Kind, Xfer};

fn fail(msg: String) -> ! {
    eprintln!("FAIL: {msg}");
    std::process::exit(1)
}

/// The fabric named by environment variable `var` (rdma by default).
fn transport(var: &str) -> Kind {
    std::env::var(var)
        .ok()
        .map_or(Kind::Rdma, |t| t.parse().expect("a transport: rdma or tcp"))
}

fn host(n: u8, addr: SocketAddr, sub: &str, fabric: Kind) -> (Controller, IoQueue) {
    let mut o = ConnectOptions::new(addr, sub);
    o.host = HostIdentity {
        nqn: format!("nqn.2014-08.org.nvmexpress:uuid:caaa000{n}-2026-4000-8000-00000000000{n}"),
        id: [n; 16],
    };
    o.io_queues = 1;
    o.kato = Duration::from_secs(30);
    o.transport = fabric;
    let c = Controller::connect(&o).unwrap_or_else(|e| fail(format!("host {n}: connect: {e}")));
    let q = c
        .connect_io_queue(1)
        .unwrap_or_else(|e| fail(format!("host {n}: I/O queue: {e}")));
    (c, q)
}

fn pattern(tag: u8, round: u64, bs: usize) -> Vec<u8> {
    let mut v = vec![tag; bs];
    v[..8].copy_from_slice(&round.to_le_bytes());
    v
}

fn expect(what: &str, got: Status, want: Status) {
    if got != want {
        fail(format!("{what}: {got}, not {want}"));
    }
    println!("    {what}: {got}");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        fail("usage: caw-race IP PORT SUBNQN ROUNDS [IP2 PORT2]".into());
    }
    let addr: SocketAddr = format!("{}:{}", a[1], a[2])
        .parse()
        .unwrap_or_else(|e| fail(format!("address: {e}")));
    let sub = a[3].clone();
    let rounds: u64 = a[4]
        .parse()
        .unwrap_or_else(|e| fail(format!("rounds: {e}")));
    let addr_b = match (a.get(5), a.get(6)) {
        (Some(ip), Some(port)) => format!("{ip}:{port}")
            .parse()
            .unwrap_or_else(|e| fail(format!("address 2: {e}"))),
        _ => addr,
    };
    let fabric = transport("NVMF_TRANSPORT");
    let fabric_b = match std::env::var("NVMF_TRANSPORT_B") {
        Ok(_) => transport("NVMF_TRANSPORT_B"),
        Err(_) => fabric,
    };
    let (ca, mut qa) = host(1, addr, &sub, fabric);
    let (_cb, qb) = host(2, addr_b, &sub, fabric_b);
    let (_cc, mut qc) = host(3, addr, &sub, fabric);
    let id = ca
        .identify_namespace(1)
        .unwrap_or_else(|e| fail(format!("identify: {e}")));
    let bs = id.block_size() as usize;
    println!("    block size {bs}; host B through {addr_b}");

    // 1. Compare alone.
    let p = pattern(0x11, 0, bs);
    qa.write(1, 0, 1, &p, false)
        .unwrap_or_else(|e| fail(format!("write: {e}")));
    let run1 = |q: &mut IoQueue, cmd, data: &[u8]| {
        q.execute(
            cmd,
            Xfer::ToTarget(data.len() as u32),
            data,
            &mut [],
            Duration::from_secs(30),
            &mut |q, d| q.release(d.tag),
        )
        .unwrap_or_else(|e| fail(format!("compare: {e}")))
        .status
    };
    expect(
        "compare, equal",
        run1(&mut qa, commands::compare(1, 0, 1), &p),
        Status::SUCCESS,
    );
    expect(
        "compare, different",
        run1(&mut qa, commands::compare(1, 0, 1), &pattern(0x22, 0, bs)),
        Status::COMPARE_FAILURE,
    );

    // 2. Broken pairs.
    let [first, second] = commands::compare_and_write(1, 0, 1);
    let st = |r: nvmf_initiator::Result<[nvme::Completion; 2]>| {
        let [x, y] = r.unwrap_or_else(|e| fail(format!("pair: {e}")));
        (x.status, y.status)
    };
    let to = Xfer::ToTarget(bs as u32);
    let read = (
        commands::read(1, 0, 1),
        Xfer::FromTarget(bs as u32),
        &[][..],
    );
    let (x, y) = st(qa.run_pair([(first, to, &p), read]));
    expect("first then a read: the first", x, Status::FUSED_MISSING);
    expect("first then a read: the read", y, Status::SUCCESS);
    expect(
        "a second alone",
        run1(&mut qa, second, &p),
        Status::FUSED_MISSING,
    );
    let mut other = second;
    other.set_cdw(10, 2);
    let (x, y) = st(qa.run_pair([(first, to, &p), (other, to, &p)]));
    expect(
        "a pair over different blocks: the compare",
        x,
        Status::FUSED_FAILED,
    );
    expect(
        "a pair over different blocks: the write",
        y,
        Status::INVALID_FIELD,
    );
    let (c3, c4) = (pattern(0x33, 0, bs), pattern(0x44, 0, bs));
    let (x, y) = st(qa.run_pair([(first, to, &c3), (second, to, &c4)]));
    expect("a miscompare: the compare", x, Status::COMPARE_FAILURE);
    expect("a miscompare: the write", y, Status::FUSED_FAILED);
    let mut now = vec![0u8; bs];
    qa.read(1, 0, 1, &mut now)
        .unwrap_or_else(|e| fail(format!("read: {e}")));
    if now != p {
        fail("a miscompare wrote".into());
    }
    println!("    a miscompare wrote nothing");

    // 3. The race, with host C writing block 1 meanwhile.
    let barrier = Arc::new(Barrier::new(2));
    let wins = Arc::new(Mutex::new(Vec::<(u64, u8)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                qc.write(1, 1, 1, &pattern(0xCC, n, bs), false)
                    .unwrap_or_else(|e| fail(format!("host C write: {e}")));
            }
            (qc, n)
        })
    };
    let t0 = Instant::now();
    let racer =
        |tag: u8, mut q: IoQueue, barrier: Arc<Barrier>, wins: Arc<Mutex<Vec<(u64, u8)>>>| {
            std::thread::spawn(move || {
                let mut cur = vec![0u8; bs];
                for r in 0..rounds {
                    q.read(1, 0, 1, &mut cur)
                        .unwrap_or_else(|e| fail(format!("host {tag:#x} read: {e}")));
                    barrier.wait();
                    let won = q
                        .compare_and_write(1, 0, 1, &cur, &pattern(tag, r, bs))
                        .unwrap_or_else(|e| fail(format!("host {tag:#x} compare and write: {e}")));
                    if won {
                        wins.lock().unwrap().push((r, tag));
                    }
                    barrier.wait();
                }
                q
            })
        };
    let ta = racer(0xAA, qa, barrier.clone(), wins.clone());
    let tb = racer(0xBB, qb, barrier.clone(), wins.clone());
    let mut qa = ta.join().unwrap_or_else(|_| fail("host A panicked".into()));
    tb.join().unwrap_or_else(|_| fail("host B panicked".into()));
    stop.store(true, Ordering::Relaxed);
    let (mut qc, writes) = writer
        .join()
        .unwrap_or_else(|_| fail("host C panicked".into()));
    let wins = wins.lock().unwrap().clone();
    for r in 0..rounds {
        let n = wins.iter().filter(|w| w.0 == r).count();
        if n != 1 {
            fail(format!("round {r}: {n} winners"));
        }
    }
    let last = wins.iter().max_by_key(|w| w.0).copied().unwrap_or((0, 0));
    qa.read(1, 0, 1, &mut now)
        .unwrap_or_else(|e| fail(format!("read: {e}")));
    if rounds > 0 && now != pattern(last.1, last.0, bs) {
        fail(format!(
            "block 0 does not hold the last winner's data (round {}, host {:#x})",
            last.0, last.1
        ));
    }
    qc.read(1, 1, 1, &mut now)
        .unwrap_or_else(|e| fail(format!("read: {e}")));
    if now != pattern(0xCC, writes, bs) {
        fail("block 1 does not hold host C's last write".into());
    }
    let a_wins = wins.iter().filter(|w| w.1 == 0xAA).count();
    println!(
        "    {rounds} rounds in {:.1} s: exactly one winner each (host A {a_wins}, host B {}); block 0 holds the last winner's data; host C's {writes} writes to block 1 meanwhile: its last one is there",
        t0.elapsed().as_secs_f64(),
        rounds as usize - a_wins
    );
    println!("CAW PASS");
}
