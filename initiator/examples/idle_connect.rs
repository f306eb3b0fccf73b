//! idle-connect: opens RDMA-CM connections to a target with valid NVMe/RDMA
//! private data and never sends a Fabrics Connect, then checks that the target
//! hangs up on each (a queue that does not connect must not hold resources).
//!
//! Usage: `idle-connect IP [PORT] [COUNT] [DEADLINE_S]` (4420, 8, 15).
//! Prints one line per connection and `IDLE PASS` when every one was
//! disconnected by the target within the deadline; exits 1 otherwise.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::cm::CmRequest;
use rdma::{
    CmEventKind, CmId, CompletionChannel, CompletionQueue, ConnParams, EventChannel,
    ProtectionDomain, QpCaps,
};

type R<T> = Result<T, String>;

fn wait(ch: &Arc<EventChannel>, want: CmEventKind, timeout: Duration) -> R<()> {
    ch.wait_for(want, timeout)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// One connection: the id with its queue pair, and what the QP holds.
struct Conn {
    ch: Arc<EventChannel>,
    _id: CmId,
    connected: Instant,
}

fn connect(dst: SocketAddr, qid: u16) -> R<Conn> {
    let t = Duration::from_secs(10);
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    let mut id = CmId::new(&ch).map_err(|e| e.to_string())?;
    id.resolve_addr(None, dst, 5000)
        .map_err(|e| e.to_string())?;
    wait(&ch, CmEventKind::AddrResolved, t)?;
    id.resolve_route(5000).map_err(|e| e.to_string())?;
    wait(&ch, CmEventKind::RouteResolved, t)?;
    let ctx = id.context().ok_or("no RDMA device for that address")?;
    let pd = ProtectionDomain::new(&ctx).map_err(|e| e.to_string())?;
    let cc = CompletionChannel::new(&ctx).map_err(|e| e.to_string())?;
    let cq = CompletionQueue::new(&cc, 16).map_err(|e| e.to_string())?;
    id.create_qp(
        &pd,
        &cq,
        QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
    )
    .map_err(|e| e.to_string())?;
    let req = CmRequest {
        recfmt: 0,
        qid,
        hrqsize: 32,
        hsqsize: 31,
    }
    .encode();
    id.connect(&ConnParams {
        private_data: &req,
        responder_resources: 0,
        initiator_depth: 0,
        rnr_retry_count: 7,
        retry_count: 7,
    })
    .map_err(|e| e.to_string())?;
    wait(&ch, CmEventKind::Established, t)?;
    Ok(Conn {
        ch,
        _id: id,
        connected: Instant::now(),
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(ip) = args.get(1).and_then(|a| a.parse::<IpAddr>().ok()) else {
        eprintln!("usage: idle-connect IP [PORT] [COUNT] [DEADLINE_S]");
        std::process::exit(2);
    };
    let port = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4420);
    let count: u16 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(8);
    let deadline = Duration::from_secs(args.get(4).and_then(|a| a.parse().ok()).unwrap_or(15));
    let dst = SocketAddr::new(ip, port);
    let mut conns = Vec::new();
    for i in 0..count {
        // Admin queues and I/O queue ids alike: every worker gets some.
        match connect(dst, i % 4) {
            Ok(c) => conns.push(c),
            Err(e) => {
                println!("FAIL connection {i}: {e}");
                std::process::exit(1);
            }
        }
    }
    println!("{count} connections established; no Fabrics Connect will be sent");
    let mut ok = true;
    for (i, c) in conns.iter().enumerate() {
        let left = deadline.saturating_sub(c.connected.elapsed());
        match wait(&c.ch, CmEventKind::Disconnected, left) {
            Ok(()) => println!(
                "ok   connection {i}: disconnected by the target after {:.1} s",
                c.connected.elapsed().as_secs_f64()
            ),
            Err(e) => {
                println!("FAIL connection {i}: {e}");
                ok = false;
            }
        }
    }
    if ok {
        println!("IDLE PASS");
    } else {
        std::process::exit(1);
    }
}
