//! The Prometheus endpoint: `GET /metrics` over HTTP/1.1 on its own thread
//! (a single-threaded tokio runtime with hyper).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tracing::{debug, info, warn};

use crate::base::admission::Admission;
use crate::base::clock::monotonic_ms;
use crate::telemetry::metrics::metrics;

/// The running metrics server.
#[derive(Debug)]
pub struct MetricsServer {
    /// The bound address.
    pub addr: SocketAddr,
    heartbeat: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl MetricsServer {
    /// Whether the server thread runs and its runtime ticked within `max_ms`.
    pub fn alive(&self, max_ms: u64) -> bool {
        !self.thread.is_finished()
            && monotonic_ms().saturating_sub(self.heartbeat.load(Ordering::Relaxed)) <= max_ms
    }
}

async fn serve(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let resp = |code: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = code;
        r
    };
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let mut r = Response::new(Full::new(Bytes::from(metrics().render())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        (&Method::GET, "/") => resp(
            StatusCode::OK,
            "nvmf-target: Prometheus metrics at /metrics\n",
        ),
        (_, "/metrics") => {
            let mut r = resp(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        _ => resp(StatusCode::NOT_FOUND, "not found; try /metrics\n"),
    })
}

/// Connections served at once; a connection beyond them is closed at accept,
/// so a client cannot run the daemon out of file descriptors.
pub const MAX_CONNECTIONS: usize = 32;
/// The longest a connection stays open (a keep-alive scraper reconnects).
pub const MAX_CONNECTION_LIFE: Duration = Duration::from_secs(60);
/// Connections served at once from one address: idle connections from one
/// client cannot take every place and keep the scraper out.
pub const MAX_PER_PEER: usize = 4;

/// Binds `addr` and serves `/metrics` on a thread of its own. Fails (before
/// the daemon reports ready) if the address cannot be bound.
pub fn start(addr: SocketAddr) -> std::io::Result<MetricsServer> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(addr))?;
    let addr = listener.local_addr()?;
    let heartbeat = Arc::new(AtomicU64::new(monotonic_ms()));
    let hb = heartbeat.clone();
    let thread = std::thread::Builder::new()
        .name("nvmf-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    loop {
                        tick.tick().await;
                        hb.store(monotonic_ms(), Ordering::Relaxed);
                    }
                });
                let places = Admission::refusing(MAX_PER_PEER as u32, MAX_CONNECTIONS as u32);
                loop {
                    let (stream, peer) = match listener.accept().await {
                        Ok(x) => x,
                        Err(e) => {
                            warn!(error = %e, "metrics endpoint: accept");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let place = match places.admit(peer.ip()) {
                        Ok(p) => p.pending,
                        Err(why) => {
                            debug!(%peer, ?why, "metrics endpoint: {MAX_PER_PEER} connections open from this address or {MAX_CONNECTIONS} in all, closing this one");
                            drop(stream);
                            continue;
                        }
                    };
                    tokio::spawn(async move {
                        let _place = place;
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(10))
                            .serve_connection(
                                TokioIo::new(stream),
                                hyper::service::service_fn(serve),
                            );
                        match tokio::time::timeout(MAX_CONNECTION_LIFE, conn).await {
                            Ok(Err(e)) => debug!(%peer, "metrics connection: {e}"),
                            Err(_) => debug!(%peer, "metrics connection open too long, closed"),
                            Ok(Ok(())) => {}
                        }
                    });
                }
            })
        })?;
    info!(%addr, "serving Prometheus metrics at http://{addr}/metrics");
    Ok(MetricsServer {
        addr,
        heartbeat,
        thread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_metrics_over_http() {
        let srv = start("127.0.0.1:0".parse().unwrap()).unwrap();
        let r = get(
            srv.addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("content-type: text/plain; version=0.0.4"), "{r}");
        assert!(r.contains("nvmf_target_build_info{version="), "{r}");
        let r = get(
            srv.addr,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        let r = get(
            srv.addr,
            "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        assert!(srv.alive(5000));
    }

    /// A TCP connection to `dst` from local address `src`.
    fn connect_from(src: &str, dst: SocketAddr) -> std::net::TcpStream {
        use nix::sys::socket::{
            bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
        };
        use std::os::fd::{FromRawFd, IntoRawFd};
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        let src: std::net::SocketAddrV4 = format!("{src}:0").parse().unwrap();
        bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(src)).unwrap();
        let SocketAddr::V4(dst) = dst else {
            panic!("IPv4 only")
        };
        connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(dst)).unwrap();
        // SAFETY: a connected stream socket this function owns.
        unsafe { std::net::TcpStream::from_raw_fd(fd.into_raw_fd()) }
    }

    #[test]
    fn idle_connections_from_one_address_do_not_keep_the_scraper_out() {
        let srv = start("127.0.0.1:0".parse().unwrap()).unwrap();
        // Another loopback address (all of 127/8 is local on Linux).
        let idle: Vec<_> = (0..MAX_CONNECTIONS + 8)
            .map(|_| connect_from("127.0.0.2", srv.addr))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let r = get(
            srv.addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 OK"), "scrape refused: {r:?}");
        drop(idle);
    }

    #[test]
    fn idle_connections_cannot_run_the_daemon_out_of_descriptors() {
        let _one = crate::MANY_DESCRIPTORS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let srv = start("127.0.0.1:0".parse().unwrap()).unwrap();
        let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = fds();
        let idle: Vec<_> = (0..200)
            .map(|_| std::net::TcpStream::connect(srv.addr).unwrap())
            .collect();
        // Let the server accept them all (and close those beyond the cap).
        std::thread::sleep(Duration::from_millis(500));
        let during = fds();
        // Our 200 client sockets, at most MAX_CONNECTIONS server sockets, and
        // slack for the other tests of this process (without the cap: +400).
        assert!(
            during <= before + 200 + MAX_CONNECTIONS + 64,
            "{before} descriptors before, {during} with 200 idle connections"
        );
        drop(idle);
        let mut ok = false;
        for _ in 0..50 {
            let mut s = std::net::TcpStream::connect(srv.addr).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.starts_with("HTTP/1.1 200") {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(ok, "no scrape served once the idle connections closed");
        assert!(srv.alive(5000));
    }
}
