//! mw-probe: checks that the initiator's memory windows grant exactly what an
//! I/O needs and nothing after it. Usage: `mw-probe <local RDMA IP> [port]`.
//!
//! It plays both sides in one process: the initiator's real queue code
//! ([`RdmaQueue`]) connects to a small verbs peer that acts as a hostile
//! target. Per scenario, on a fresh connection, the initiator submits an I/O;
//! the peer reads the keyed SGL from the capsule, performs RDMA operations
//! against the window and answers. Checks:
//! 1. a read window takes the target's RDMA WRITE of exactly its length; after
//!    the response with invalidate, the same key is refused;
//! 2. the next I/O on the same slot gets a new key (8-bit key advanced), and
//!    the old key is refused even while the new window is open;
//! 3. a write past the window is refused (or, on devices that check only the
//!    region behind a window, as soft-RoCE on 6.1 does, past the I/O's slot),
//!    and so is one byte before it;
//! 4. a read window refuses RDMA READ (access rights);
//! 5. a write window serves RDMA READ and refuses RDMA WRITE;
//! 6. a response without invalidation makes the initiator LOCAL_INV the
//!    window before completing, and the key is refused afterwards;
//! 7. control: in region mode (0x40) the key stays valid after completion, so
//!    the probe does see granted access when there is some.
//!
//! Prints one line per check and `PROBE PASS` at the end; exits 1 on failure.

use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nvme::cm::CmReply;
use nvme::command::Command;
use nvme::completion::Completion;
use nvme::sgl::Sgl;
use nvme::status::Status;
use nvmf_initiator::commands;
use nvmf_initiator::transport::{HostQueue, QueueConfig, RdmaQueue, WindowMode, Xfer};
use rdma::{
    Access, Buffer, CmEventKind, CmId, CompletionQueue, ConnParams, EventChannel, MemoryRegion,
    QpCaps, SendOp, SendRequest, WorkCompletion,
};

const LEN: u32 = 4096;
const T: Duration = Duration::from_secs(10);

/// The hostile target side of one connection.
struct Peer {
    id: CmId,
    cq: Arc<CompletionQueue>,
    recv: MemoryRegion,
    send: MemoryRegion,
    data: MemoryRegion,
}

type R<T> = Result<T, String>;

impl Peer {
    fn accept(ch: &Arc<EventChannel>) -> R<Peer> {
        let ev = wait_event(ch, CmEventKind::ConnectRequest)?;
        let mut id = ev.new_id.ok_or("connect request without id")?;
        let rdma::OwnQueue { pd, cq } = id
            .create_own_qp(
                64,
                QpCaps {
                    max_send_wr: 16,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
            )
            .map_err(|e| e.to_string())?;
        let mr = |n| {
            MemoryRegion::new(
                &pd,
                Buffer::new(n).map_err(|e| e.to_string())?,
                Access::LOCAL_WRITE,
            )
            .map_err(|e| e.to_string())
        };
        let p = Peer {
            recv: mr(8 * 64)?,
            send: mr(64)?,
            data: mr(4 * LEN as usize)?,
            cq,
            id,
        };
        for i in 0..8u16 {
            let sge = p.recv.sge(i as usize * 64, 64);
            // SAFETY: the receive buffers live in `p.recv` for the life of the QP.
            unsafe { p.id.qp().unwrap().post_recv(i as u64, &[sge]) }.map_err(|e| e.to_string())?;
        }
        let rep = CmReply {
            recfmt: 0,
            crqsize: 8,
        }
        .encode();
        p.id.accept(&ConnParams {
            private_data: &rep,
            responder_resources: 0,
            initiator_depth: ev.responder_resources.clamp(1, 16),
            rnr_retry_count: 7,
            retry_count: 7,
        })
        .map_err(|e| e.to_string())?;
        wait_event(ch, CmEventKind::Established)?;
        Ok(p)
    }

    /// Waits for the completion of `wr_id`; returns its status (Ok or the
    /// completion error). Other completions are ignored.
    fn wait(&self, wr_id: u64) -> R<Result<u32, WorkCompletion>> {
        let start = Instant::now();
        let mut wcs: Vec<WorkCompletion> = (0..8).map(|_| WorkCompletion::default()).collect();
        loop {
            let n = self.cq.poll(&mut wcs).map_err(|e| e.to_string())?;
            for w in wcs.iter_mut().take(n) {
                if w.wr_id() == wr_id {
                    let wc = std::mem::take(w);
                    return Ok(if wc.is_ok() {
                        Ok(wc.byte_len())
                    } else {
                        Err(wc)
                    });
                }
            }
            if start.elapsed() > T {
                return Err(format!("peer: no completion for work request {wr_id:#x}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Receives one capsule.
    fn capsule(&self) -> R<Command> {
        let start = Instant::now();
        let mut wcs: Vec<WorkCompletion> = (0..1).map(|_| WorkCompletion::default()).collect();
        loop {
            if self.cq.poll(&mut wcs).map_err(|e| e.to_string())? == 1 {
                let wc = &wcs[0];
                if !wc.is_ok() {
                    return Err(format!("peer receive failed: {}", wc.status_str()));
                }
                if wc.wr_id() < 8 {
                    let off = wc.wr_id() as usize * 64;
                    // SAFETY: this receive completed and is not reposted
                    // before the parse (which copies).
                    return Command::parse(unsafe { self.recv.bytes(off..off + 64) })
                        .map_err(|e| e.to_string());
                }
            }
            if start.elapsed() > T {
                return Err("peer: no capsule".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn rdma(&self, write: bool, addr: u64, key: u32, len: u32) -> R<Result<u32, WorkCompletion>> {
        let sge = self.data.sge(0, len);
        let op = if write {
            SendOp::RdmaWrite {
                remote_addr: addr,
                rkey: key,
            }
        } else {
            SendOp::RdmaRead {
                remote_addr: addr,
                rkey: key,
            }
        };
        let id = 0x100 + write as u64;
        // SAFETY: the SGE lies in `self.data`, alive until the WR completes (waited below).
        unsafe {
            self.id.qp().unwrap().post_send(&[SendRequest {
                wr_id: id,
                op,
                sges: &[sge],
                signaled: true,
            }])
        }
        .map_err(|e| e.to_string())?;
        self.wait(id)
    }

    fn respond(&mut self, cid: u16, invalidate: Option<u32>) -> R<()> {
        let c = Completion::new(cid, Status::SUCCESS);
        // SAFETY: the previous response's SEND was waited for: nothing reads it.
        c.encode_into(unsafe { self.send.bytes_mut(0..16) });
        let sge = self.send.sge(0, 16);
        let op = invalidate.map_or(SendOp::Send, SendOp::SendWithInv);
        // SAFETY: the SGE lies in `self.send`, alive until the WR completes (waited below).
        unsafe {
            self.id.qp().unwrap().post_send(&[SendRequest {
                wr_id: 0x200,
                op,
                sges: &[sge],
                signaled: true,
            }])
        }
        .map_err(|e| e.to_string())?;
        match self.wait(0x200)? {
            Ok(_) => Ok(()),
            Err(wc) => Err(format!("peer response send failed: {}", wc.status_str())),
        }
    }
}

/// Waits for an event of kind `want`, skipping the disconnect events of
/// earlier connections (they share the listener's channel).
fn wait_event(ch: &Arc<EventChannel>, want: CmEventKind) -> R<rdma::CmEvent> {
    let start = Instant::now();
    while start.elapsed() < T {
        match ch.wait_event(T).map_err(|e| e.to_string())? {
            Some(ev) if ev.kind == want => return Ok(ev),
            Some(ev)
                if matches!(
                    ev.kind,
                    CmEventKind::Disconnected | CmEventKind::TimewaitExit
                ) => {}
            Some(ev) => return Err(format!("expected {want:?}, got {:?}", ev.kind)),
            None => break,
        }
    }
    Err(format!("no {want:?} event"))
}

fn keyed(c: &Command) -> R<(u64, u32, u32, bool)> {
    match c.sgl() {
        Sgl::Keyed {
            addr,
            len,
            key,
            invalidate,
        } => Ok((addr, len, key, invalidate)),
        o => Err(format!("expected a keyed SGL, got {o:?}")),
    }
}

fn refused(what: &str, r: Result<u32, WorkCompletion>) -> R<()> {
    match r {
        Err(wc) if wc.is_remote_access_error() => {
            println!("ok   {what}: refused ({})", wc.status_str());
            Ok(())
        }
        Err(wc) => Err(format!(
            "{what}: failed, but not with a remote access error: {}",
            wc.status_str()
        )),
        Ok(_) => Err(format!("{what}: the target was ALLOWED")),
    }
}

fn granted(what: &str, r: Result<u32, WorkCompletion>) -> R<()> {
    match r {
        Ok(_) => {
            println!("ok   {what}: granted");
            Ok(())
        }
        Err(wc) => Err(format!("{what}: refused: {}", wc.status_str())),
    }
}

struct Lab {
    ch: Arc<EventChannel>,
    _listener: CmId,
    addr: SocketAddr,
}

impl Lab {
    /// Connects a fresh initiator queue to a fresh peer.
    fn pair(&self, mode: WindowMode) -> R<(RdmaQueue, Peer)> {
        self.pair_with(mode, LEN as usize)
    }

    /// As `pair`, with data slots of `slot` bytes.
    fn pair_with(&self, mode: WindowMode, slot: usize) -> R<(RdmaQueue, Peer)> {
        let ch = self.ch.clone();
        let (tx, rx) = mpsc::channel();
        let h = std::thread::spawn(move || {
            let r = Peer::accept(&ch);
            let _ = tx.send(());
            r
        });
        let mut cfg = QueueConfig::new(1, 4, slot);
        cfg.windows = mode;
        let q = RdmaQueue::connect(self.addr, cfg).map_err(|e| e.to_string());
        let _ = rx.recv_timeout(T);
        let p = h.join().map_err(|_| "peer thread panicked")??;
        eprintln!("   connected");
        Ok((q?, p))
    }
}

/// Submits `cmd` with `xfer` on a fresh slot and flushes; returns the tag.
fn start(q: &mut RdmaQueue, cmd: Command, xfer: Xfer, fill: u8) -> R<u16> {
    let tag = q.alloc().ok_or("no slot")?;
    q.buffer_mut(tag).fill(fill);
    q.submit(tag, cmd, xfer).map_err(|e| e.to_string())?;
    q.flush().map_err(|e| e.to_string())?;
    Ok(tag)
}

fn complete(q: &mut RdmaQueue, tag: u16) -> R<()> {
    let mut done = Vec::new();
    let start = Instant::now();
    while done.is_empty() {
        q.poll(&mut done, Duration::from_millis(100))
            .map_err(|e| e.to_string())?;
        if start.elapsed() > T {
            return Err("initiator: I/O did not complete".into());
        }
    }
    if done[0].tag != tag || !done[0].cqe.status.is_success() {
        return Err(format!("initiator: unexpected completion {:?}", done[0]));
    }
    Ok(())
}

fn read_cmd() -> (Command, Xfer) {
    (commands::read(1, 0, 8), Xfer::FromTarget(LEN))
}

fn want(n: usize) -> bool {
    match std::env::var("PROBE_ONLY") {
        Ok(v) => v.split(',').any(|x| x.trim() == n.to_string()),
        Err(_) => true,
    }
}

fn run(lab: &Lab) -> R<()> {
    // 1. Exact access during the I/O; refused after the response with invalidate.
    if want(1) {
        eprintln!("-- scenario 1: exact access, refused after remote invalidation");
        let (mut q, mut p) = lab.pair(WindowMode::Mw)?;
        let (c, x) = read_cmd();
        let tag = start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, len, key, inv) = keyed(&cap)?;
        if len != LEN || !inv {
            return Err(format!(
                "SGL: len {len}, invalidate {inv}; want {LEN}, true (0x4F)"
            ));
        }
        println!("ok   read capsule carries SGL 0x4F: {len} bytes, key {key:#010x}");
        // SAFETY: no work request of this peer uses its data buffer now.
        unsafe { p.data.bytes_mut(0..LEN as usize) }.fill(0xA5);
        granted(
            "RDMA WRITE of the I/O's 4096 bytes into its window",
            p.rdma(true, addr, key, LEN)?,
        )?;
        p.respond(cap.cid(), Some(key))?;
        complete(&mut q, tag)?;
        if q.buffer(tag)[..LEN as usize].iter().any(|&b| b != 0xA5) {
            return Err("the data written through the window did not arrive".into());
        }
        let s = q.stats();
        if s.remote_invalidations != 1 || s.local_invalidations != 0 {
            return Err(format!("invalidation counters {s:?}"));
        }
        println!(
            "ok   I/O completed with the data; window closed by the target's SEND_WITH_INVALIDATE"
        );
        refused(
            "RDMA WRITE with that key after completion",
            p.rdma(true, addr, key, LEN)?,
        )?;
    }
    // 2. The key advances per I/O; the old key is refused while the new window is open.
    if want(2) {
        eprintln!("-- scenario 2: key advances per I/O");
        let (mut q, mut p) = lab.pair(WindowMode::Mw)?;
        let (c, x) = read_cmd();
        let tag = start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (_, _, key1, _) = keyed(&cap)?;
        p.respond(cap.cid(), Some(key1))?;
        complete(&mut q, tag)?;
        q.release(tag);
        let tag2 = start(&mut q, c, x, 0)?;
        let cap2 = p.capsule()?;
        let (addr2, _, key2, _) = keyed(&cap2)?;
        if tag2 != tag || key2 == key1 || key2 >> 8 != key1 >> 8 {
            return Err(format!(
                "second I/O: slot {tag2} key {key2:#010x}; want slot {tag}, same window with a new 8-bit key than {key1:#010x}"
            ));
        }
        println!("ok   next I/O on the same slot: key {key1:#010x} -> {key2:#010x}");
        refused(
            "RDMA WRITE with the previous I/O's key while the new window is open",
            p.rdma(true, addr2, key1, LEN)?,
        )?;
    }
    // 3. Bounds. The slot is 8 KiB, the I/O 4 KiB: a device that checks the
    //    window's own bounds refuses one byte more; soft-RoCE (6.1) checks only
    //    the region behind the window, which is the slot, so it must at least
    //    refuse going past the slot and writing before the window.
    if want(3) {
        eprintln!("-- scenario 3: bounds");
        let (mut q, p) = lab.pair_with(WindowMode::Mw, 2 * LEN as usize)?;
        let (c, x) = read_cmd();
        start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, len, key, _) = keyed(&cap)?;
        if len != LEN {
            return Err(format!("window of {len} bytes for a {LEN}-byte I/O"));
        }
        match p.rdma(true, addr, key, LEN + 1)? {
            r @ Err(_) => refused("RDMA WRITE of 4097 bytes into a 4096-byte window", r)?,
            Ok(_) => {
                println!(
                    "NOTE the device did not enforce the window's length (4097 bytes accepted into a 4096-byte window): soft-RoCE checks only the region behind a window"
                );
                refused(
                    "RDMA WRITE past the end of the I/O's slot region (8193 bytes)",
                    p.rdma(true, addr, key, 2 * LEN + 1)?,
                )?;
            }
        }
    }
    if want(3) {
        let (mut q, p) = lab.pair_with(WindowMode::Mw, 2 * LEN as usize)?;
        let (c, x) = read_cmd();
        start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, _, key, _) = keyed(&cap)?;
        refused(
            "RDMA WRITE of 1 byte just before the window",
            p.rdma(true, addr - 1, key, 1)?,
        )?;
    }
    // 4. Rights: a read window is write-only for the target.
    if want(4) {
        eprintln!("-- scenario 4: rights on a read window");
        let (mut q, p) = lab.pair(WindowMode::Mw)?;
        let (c, x) = read_cmd();
        start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, _, key, _) = keyed(&cap)?;
        refused(
            "RDMA READ from a read I/O's window (remote write only)",
            p.rdma(false, addr, key, LEN)?,
        )?;
    }
    // 5. A write window is read-only for the target.
    if want(5) {
        eprintln!("-- scenario 5: rights on a write window");
        let (mut q, p) = lab.pair(WindowMode::Mw)?;
        start(
            &mut q,
            commands::write(1, 0, 8, false),
            Xfer::ToTarget(LEN),
            0x3C,
        )?;
        let cap = p.capsule()?;
        let (addr, len, key, inv) = keyed(&cap)?;
        if len != LEN || !inv {
            return Err(format!("write SGL: len {len}, invalidate {inv}"));
        }
        granted(
            "RDMA READ of a write I/O's 4096 bytes",
            p.rdma(false, addr, key, LEN)?,
        )?;
        // SAFETY: the RDMA READ into it completed (waited for above).
        if unsafe { p.data.bytes(0..LEN as usize) }
            .iter()
            .any(|&b| b != 0x3C)
        {
            return Err("RDMA READ through the window returned other data".into());
        }
        refused(
            "RDMA WRITE into a write I/O's window (remote read only)",
            p.rdma(true, addr, key, LEN)?,
        )?;
    }
    // 6. No invalidation from the target: the initiator invalidates locally.
    if want(6) {
        eprintln!("-- scenario 6: local invalidation");
        let (mut q, mut p) = lab.pair(WindowMode::Mw)?;
        let (c, x) = read_cmd();
        let tag = start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, _, key, _) = keyed(&cap)?;
        granted("RDMA WRITE into the window", p.rdma(true, addr, key, LEN)?)?;
        p.respond(cap.cid(), None)?;
        complete(&mut q, tag)?;
        let s = q.stats();
        if s.local_invalidations != 1 || s.remote_invalidations != 0 {
            return Err(format!("expected one LOCAL_INV, counters {s:?}"));
        }
        println!("ok   response without invalidate: initiator posted LOCAL_INV before completing");
        refused(
            "RDMA WRITE with that key after the local invalidation",
            p.rdma(true, addr, key, LEN)?,
        )?;
    }
    // 7. Control: region mode keeps the key valid (the probe detects granted access).
    if want(7) {
        eprintln!("-- scenario 7: control: region mode");
        let (mut q, mut p) = lab.pair(WindowMode::Mr)?;
        let (c, x) = read_cmd();
        let tag = start(&mut q, c, x, 0)?;
        let cap = p.capsule()?;
        let (addr, _, key, inv) = keyed(&cap)?;
        if inv {
            return Err("region mode must not ask for invalidation (0x40)".into());
        }
        p.respond(cap.cid(), None)?;
        complete(&mut q, tag)?;
        granted(
            "control, region mode (0x40): RDMA WRITE with the key after completion",
            p.rdma(true, addr, key, LEN)?,
        )?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ip: IpAddr = match args.get(1).and_then(|s| s.parse().ok()) {
        Some(ip) => ip,
        None => {
            eprintln!("usage: mw-probe <local RDMA IP> [port]");
            std::process::exit(2);
        }
    };
    let port: u16 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4430);
    let addr = SocketAddr::new(ip, port);
    let setup = || -> R<Lab> {
        let ch = EventChannel::new().map_err(|e| e.to_string())?;
        let l = CmId::new(&ch).map_err(|e| e.to_string())?;
        l.bind(addr).map_err(|e| e.to_string())?;
        l.listen(8).map_err(|e| e.to_string())?;
        Ok(Lab {
            ch,
            _listener: l,
            addr,
        })
    };
    match setup().and_then(|lab| run(&lab)) {
        Ok(()) => println!("PROBE PASS"),
        Err(e) => {
            println!("PROBE FAIL: {e}");
            std::process::exit(1);
        }
    }
}
