//! `nvmf-initiator`: discover, connect/identify, read, write, flush and perf
//! against an NVMe-oF/RDMA target.

use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nvme::discovery::DiscoveryEntry;
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::host::{format_uuid, parse_uuid, HostIdentity};
use nvmf_initiator::perf::{self, Pattern, PerfOptions, PerfReport};
use nvmf_initiator::{discovery, Error, HostQueue, Kind, Result, WindowMode};

#[derive(Parser)]
#[command(
    name = "nvmf-initiator",
    version,
    about = "NVMe-over-Fabrics initiator over RDMA"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log filter (error, warn, info, debug, trace, or e.g. nvmf_initiator=debug);
    /// RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "warn")]
    log_level: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Windows {
    /// A type-2 memory window per I/O, invalidated by the target (SGL 0x4F).
    Mw,
    /// A memory region per buffer, registered once (SGL 0x40).
    Mr,
}

#[derive(Args, Clone)]
struct Conn {
    /// Target address (IPv4 or IPv6).
    #[arg(short = 'a', long)]
    traddr: IpAddr,
    /// Target port.
    #[arg(short = 's', long, default_value_t = nvme::DEFAULT_PORT)]
    trsvcid: u16,
    /// Host NQN (default: /etc/nvme/hostnqn, or one made from the host id).
    #[arg(short = 'q', long)]
    hostnqn: Option<String>,
    /// Host identifier, a UUID (default: /etc/nvme/hostid; for a host NQN
    /// other than the system's, the UUID its NQN names, else one derived
    /// from it: a target binds an ID to one host NQN).
    #[arg(short = 'I', long)]
    hostid: Option<String>,
    /// Transport: rdma or tcp.
    #[arg(short = 't', long, default_value = "rdma")]
    transport: Kind,
    /// NVMe/TCP: header and data digests (CRC32C).
    #[arg(long)]
    digests: bool,
    /// How I/O buffers are exposed to the target (RDMA).
    #[arg(long, value_enum, default_value = "mw")]
    windows: Windows,
    /// Keep-alive timeout in seconds (0: none).
    #[arg(short = 'k', long = "keep-alive-tmo", default_value_t = 5)]
    kato: u64,
    /// Timeout in seconds for connecting and admin commands.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// DH-HMAC-CHAP secret of the host (DHHC-1:...), as nvme-cli.
    #[arg(short = 'S', long)]
    dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP secret the controller must prove it holds
    /// (bidirectional authentication), as nvme-cli.
    #[arg(short = 'C', long, requires = "dhchap_secret")]
    dhchap_ctrl_secret: Option<String>,
    /// NVMe/TCP: TLS 1.3 with this pre-shared key (NVMeTLSkey-1:..., as
    /// `nvme gen-tls-key` prints it; '-': a line from stdin).
    #[arg(long, value_name = "KEY")]
    tls_key: Option<String>,
    /// The PSK identity's version: 0 (NVMe0R0x HOST SUBSYSTEM) or 1 (with
    /// the PSK's digest).
    #[arg(long, default_value_t = 1, requires = "tls_key", value_parser = clap::value_parser!(u8).range(0..=1))]
    tls_identity: u8,
    /// How the TLS PSK is derived: compat (libnvme 1.15 and older, nvme-cli
    /// 2.13) or rfc (RFC 8446 labels, SPDK, libnvme 1.16).
    #[arg(long, default_value = "compat", requires = "tls_key")]
    tls_derivation: String,
}

#[derive(Args, Clone)]
struct Subsys {
    #[command(flatten)]
    conn: Conn,
    /// Subsystem NQN.
    #[arg(short = 'n', long)]
    nqn: String,
}

#[derive(Args, Clone)]
struct Io {
    #[command(flatten)]
    sub: Subsys,
    /// Namespace id.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// First logical block.
    #[arg(long, default_value_t = 0)]
    start_block: u64,
    /// Bytes to transfer (suffixes k, M, G); for write, defaults to the file size.
    #[arg(short = 'z', long, value_parser = sizes::parse)]
    data_size: Option<u64>,
    /// File to read from (write) or write to (read); "-" is stdin/stdout.
    #[arg(short = 'd', long, default_value = "-")]
    data: String,
    /// Queue depth for the transfer.
    #[arg(long, default_value_t = 32)]
    qd: u16,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write the man pages and shell completions into DIR (for packaging).
    #[command(hide = true, name = "generate-docs")]
    GenerateDocs {
        /// Where.
        dir: std::path::PathBuf,
    },
    /// Read the discovery log.
    Discover {
        #[command(flatten)]
        conn: Conn,
    },
    /// Connect, print the controller and its namespaces, disconnect.
    #[command(alias = "identify")]
    Connect {
        #[command(flatten)]
        sub: Subsys,
        /// Stay connected this many seconds and print asynchronous events
        /// (with the namespaces they changed) as they arrive.
        #[arg(long, default_value_t = 0)]
        watch: u64,
    },
    /// Read from a namespace to a file or stdout.
    Read(Io),
    /// Write a file or stdin to a namespace.
    Write(Io),
    /// Flush a namespace.
    Flush {
        #[command(flatten)]
        sub: Subsys,
        /// Namespace id.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
    },
    /// Send one hand-made command on an I/O queue and print the response
    /// (raw mode, for malformed-input tests).
    Raw {
        #[command(flatten)]
        sub: Subsys,
        /// Opcode.
        #[arg(long, value_parser = parse_num)]
        opcode: u64,
        /// Command identifier.
        #[arg(long, default_value = "0x1234", value_parser = parse_num)]
        cid: u64,
        /// Namespace id.
        #[arg(long, default_value = "1", value_parser = parse_num)]
        nsid: u64,
        /// Command dwords 10..15 as N=VALUE (e.g. 10=0x1000); repeatable.
        #[arg(long = "cdw", value_parser = parse_cdw)]
        cdws: Vec<(usize, u32)>,
        /// The 16 SGL bytes, hex (default: in-capsule data if any, else a
        /// zero-length keyed SGL).
        #[arg(long)]
        sgl: Option<String>,
        /// Replace the SGL by a window for a transfer: read:BYTES or write:BYTES.
        #[arg(long)]
        window: Option<String>,
        /// Append this many bytes of in-capsule data (pattern 0x5A).
        #[arg(long, default_value_t = 0)]
        in_capsule: usize,
        /// Seconds to wait for the response.
        #[arg(long, default_value_t = 5)]
        wait: u64,
    },
    /// Generate load and report IOPS, bandwidth and latency percentiles.
    Perf {
        #[command(flatten)]
        sub: Subsys,
        /// Namespace id.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// Pattern: randread, randwrite, read, write, randrw.
        #[arg(long, default_value = "randread")]
        rw: Pattern,
        /// Bytes per I/O (suffixes k, M).
        #[arg(long, default_value = "4k", value_parser = sizes::parse)]
        bs: u64,
        /// Commands in flight per queue.
        #[arg(long, default_value_t = 32)]
        qd: u16,
        /// I/O queues (one thread each).
        #[arg(long, default_value_t = 1)]
        queues: u16,
        /// Seconds to run.
        #[arg(long, default_value_t = 10)]
        time: u64,
        /// Reads in percent for randrw.
        #[arg(long, default_value_t = 50)]
        rwmixread: u8,
        /// Limit the I/O to the first SIZE bytes of the namespace.
        #[arg(long, value_parser = sizes::parse)]
        size: Option<u64>,
        /// Never send writes as in-capsule data.
        #[arg(long)]
        no_inline: bool,
        /// Busy-poll this many microseconds before sleeping for completions.
        #[arg(long, default_value_t = 0)]
        spin_us: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_num(s: &str) -> std::result::Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("not a number: {s:?}"))
}

fn parse_cdw(s: &str) -> std::result::Result<(usize, u32), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected N=VALUE, got {s:?}"))?;
    let n: usize = n.parse().map_err(|_| format!("bad dword index {n:?}"))?;
    if !(2..=15).contains(&n) {
        return Err(format!("dword index {n} (2..=15)"));
    }
    let v = parse_num(v)?;
    u32::try_from(v)
        .map(|v| (n, v))
        .map_err(|_| format!("{v:#x} does not fit a dword"))
}

fn hex_bytes(s: &str) -> Result<Vec<u8>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err(Error::Invalid(format!("odd number of hex digits in {s:?}")));
    }
    (0..s.len() / 2)
        .map(|i| {
            u8::from_str_radix(&s[i * 2..i * 2 + 2], 16)
                .map_err(|_| Error::Invalid(format!("not hex: {s:?}")))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn raw_cmd(
    sub: &Subsys,
    opcode: u64,
    cid: u64,
    nsid: u64,
    cdws: &[(usize, u32)],
    sgl: Option<&str>,
    window: Option<&str>,
    in_capsule: usize,
    wait: u64,
) -> Result<bool> {
    use nvmf_initiator::transport::{RawRequest, Xfer};
    let mut sqe = nvme::command::Command::new(opcode as u8, cid as u16);
    sqe.set_nsid(nsid as u32);
    for &(n, v) in cdws {
        sqe.set_cdw(n, v);
    }
    // Default SGL: in-capsule data when there is some, else a zero-length keyed one.
    let default_sgl = if in_capsule > 0 {
        nvme::sgl::Sgl::InCapsule {
            offset: 0,
            len: in_capsule as u32,
        }
    } else {
        nvme::sgl::Sgl::Keyed {
            addr: 0,
            len: 0,
            key: 0,
            invalidate: false,
        }
    };
    sqe.set_sgl(&default_sgl);
    if let Some(h) = sgl {
        let b = hex_bytes(h)?;
        if b.len() != 16 {
            return Err(Error::Invalid(format!(
                "--sgl needs 16 bytes, got {}",
                b.len()
            )));
        }
        sqe.raw[24..40].copy_from_slice(&b);
    }
    let window = match window {
        None => None,
        Some(w) => {
            let (dir, n) = w
                .split_once(':')
                .ok_or_else(|| Error::Invalid(format!("--window {w:?}: read:N or write:N")))?;
            let n = sizes::parse(n).map_err(Error::Invalid)? as u32;
            Some(match dir {
                "read" => Xfer::FromTarget(n),
                "write" => Xfer::ToTarget(n),
                _ => return Err(Error::Invalid(format!("--window {w:?}: read:N or write:N"))),
            })
        }
    };
    let data = vec![0x5Au8; in_capsule.max(1 << 17)];
    let mut o = options(&sub.conn, &sub.nqn)?;
    o.io_queues = 1;
    o.queue_depth = 4;
    let c = Controller::connect(&o)?;
    let mut qs = c.connect_io_queues()?;
    let q = qs
        .first_mut()
        .ok_or_else(|| Error::Protocol("no I/O queue granted".into()))?;
    let out = q.raw(
        &RawRequest {
            sqe: sqe.raw,
            in_capsule: &data[..in_capsule],
            window,
            write_data: &data,
        },
        Duration::from_secs(wait),
    )?;
    let healthy = q.failure().is_none();
    match out.cqe {
        Some(cqe) => println!(
            "cid {:#06x} status {} result {:#x} sqhd {}",
            cqe.cid, cqe.status, cqe.result, cqe.sq_head
        ),
        None => println!("no response: {}", out.error.as_deref().unwrap_or("unknown")),
    }
    if !out.data.is_empty() {
        println!("read {} bytes", out.data.len());
    }
    drop(qs);
    if healthy {
        c.shutdown()?;
    }
    Ok(true)
}

fn options(conn: &Conn, nqn: &str) -> Result<ConnectOptions> {
    let id = match &conn.hostid {
        Some(s) => Some(
            parse_uuid(s).ok_or_else(|| Error::Invalid(format!("host id {s:?} is not a UUID")))?,
        ),
        None => None,
    };
    let mut o = ConnectOptions::new(SocketAddr::new(conn.traddr, conn.trsvcid), nqn);
    o.host = HostIdentity::system(conn.hostnqn.clone(), id);
    o.transport = conn.transport;
    o.digests = conn.digests;
    o.windows = match conn.windows {
        Windows::Mw => WindowMode::Mw,
        Windows::Mr => WindowMode::Mr,
    };
    o.kato = Duration::from_secs(conn.kato);
    o.timeout = Duration::from_secs(conn.timeout.max(1));
    let secret = |s: &str, what: &str| {
        dhchap::Secret::parse(s).map_err(|e| Error::Invalid(format!("{what}: {e}")))
    };
    if let Some(s) = &conn.dhchap_secret {
        o.dhchap = Some(nvmf_initiator::auth::HostKeys {
            secret: secret(s, "--dhchap-secret")?,
            ctrl_secret: conn
                .dhchap_ctrl_secret
                .as_deref()
                .map(|c| secret(c, "--dhchap-ctrl-secret"))
                .transpose()?,
        });
    }
    if let Some(k) = &conn.tls_key {
        let k = match k.as_str() {
            "-" => {
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .map_err(|e| Error::Invalid(format!("--tls-key from stdin: {e}")))?;
                line.trim().to_string()
            }
            k => k.to_string(),
        };
        let key = tlspsk::ConfiguredPsk::parse(&k)
            .map_err(|e| Error::Invalid(format!("--tls-key: {e}")))?;
        let derivation = tlspsk::Derivation::from_name(&conn.tls_derivation).ok_or_else(|| {
            Error::Invalid(format!(
                "--tls-derivation {:?}: compat or rfc",
                conn.tls_derivation
            ))
        })?;
        o.tls = Some(nvmf_initiator::transport::tls::HostPsk {
            key: std::sync::Arc::new(key),
            version: conn.tls_identity,
            derivation,
        });
    }
    Ok(o)
}

fn adrfam(a: u8) -> &'static str {
    match a {
        1 => "ipv4",
        2 => "ipv6",
        3 => "ib",
        _ => "unrecognized",
    }
}

fn print_entry(i: usize, e: &DiscoveryEntry) {
    let subtype = match e.subtype {
        1 => "referral",
        2 => "nvme subsystem",
        3 => "current discovery subsystem",
        _ => "unrecognized",
    };
    let trtype = match e.trtype {
        1 => "rdma",
        2 => "fc",
        3 => "tcp",
        _ => "unrecognized",
    };
    println!("=====Discovery Log Entry {i}======");
    println!("trtype:  {trtype}");
    println!("adrfam:  {}", adrfam(e.adrfam));
    println!("subtype: {subtype}");
    println!("portid:  {}", e.portid);
    println!("trsvcid: {}", e.trsvcid);
    println!("subnqn:  {}", e.subnqn);
    println!("traddr:  {}", e.traddr);
    println!("asqsz:   {}", e.asqsz);
}

fn identify(sub: &Subsys, watch: u64) -> Result<()> {
    let mut o = options(&sub.conn, &sub.nqn)?;
    o.io_queues = 0;
    let c = Controller::connect(&o)?;
    let i = c.info();
    let id = &i.id;
    println!("controller {} of {}", i.cntlid, id.subnqn);
    println!("  model:     {}", id.mn.trim());
    println!("  serial:    {}", id.sn.trim());
    println!("  firmware:  {}", id.fr.trim());
    println!(
        "  version:   {}.{}.{}",
        i.vs >> 16,
        (i.vs >> 8) & 0xFF,
        i.vs & 0xFF
    );
    println!(
        "  mdts:      {} (largest transfer {})",
        id.mdts,
        sizes::format(i.max_transfer as u64)
    );
    println!("  maxcmd:    {}  mqes: {}", id.maxcmd, (i.cap & 0xFFFF) + 1);
    println!(
        "  ioccsz:    {} ({} B in-capsule data)  iorcsz: {}",
        id.ioccsz,
        (id.ioccsz as usize * 16).saturating_sub(64),
        id.iorcsz
    );
    println!(
        "  sgls:      {:#010x}  kas: {}  oaes: {:#x}",
        id.sgls, id.kas, id.oaes
    );
    println!("  nn:        {}  host: {}", id.nn, o.host.nqn);
    print_namespaces(&c)?;
    let end = std::time::Instant::now() + Duration::from_secs(watch);
    if watch > 0 {
        println!("watching for asynchronous events for {watch} s");
    }
    let _ = std::io::stdout().flush();
    while std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        for ev in c.poll_events()? {
            let kind = match ev.kind {
                0 => "error",
                1 => "SMART/health",
                2 => "notice",
                _ => "other",
            };
            println!(
                "event: {kind}, info {:#04x}, log page {:#04x}, changed namespaces {:?}",
                ev.info, ev.log, ev.changed_ns
            );
            if ev.log == nvme::opcode::lid::CHANGED_NS {
                print_namespaces(&c)?;
            }
            let _ = std::io::stdout().flush();
        }
    }
    c.shutdown()
}

fn print_namespaces(c: &Controller) -> Result<()> {
    for nsid in c.namespaces()? {
        let ns = c.identify_namespace(nsid)?;
        let bs = ns.block_size();
        println!(
            "namespace {nsid}: {} blocks of {bs} B ({}), nguid {}",
            ns.nsze,
            sizes::format(ns.nsze * bs),
            format_uuid(&ns.nguid).replace('-', "")
        );
    }
    Ok(())
}

fn open_io(io: &Io) -> Result<(Controller, nvmf_initiator::IoQueue, u32, u64)> {
    let mut o = options(&io.sub.conn, &io.sub.nqn)?;
    o.io_queues = 1;
    o.queue_depth = io.qd.max(2);
    let c = Controller::connect(&o)?;
    let ns = c.identify_namespace(io.nsid)?;
    if ns.nsze == 0 {
        return Err(Error::Invalid(format!(
            "namespace {} is not active",
            io.nsid
        )));
    }
    let mut qs = c.connect_io_queues()?;
    let q = qs
        .pop()
        .ok_or_else(|| Error::Protocol("the controller granted no I/O queue".into()))?;
    Ok((c, q, ns.block_size() as u32, ns.nsze))
}

fn file_err(path: &str, e: std::io::Error) -> Error {
    Error::File {
        path: path.to_string(),
        source: e,
    }
}

fn read_cmd(io: &Io) -> Result<()> {
    let (c, mut q, bs, nsze) = open_io(io)?;
    let len = io
        .data_size
        .ok_or_else(|| Error::Invalid("--data-size is required for read".into()))?;
    check_range(io.start_block, len, bs, nsze)?;
    let r = if io.data == "-" {
        let mut out = std::io::stdout().lock();
        q.read_to(io.nsid, io.start_block, len, bs, &mut out)
            .and_then(|_| out.flush().map_err(|e| file_err("stdout", e)))
    } else {
        let f = std::fs::File::create(&io.data).map_err(|e| file_err(&io.data, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        q.read_to(io.nsid, io.start_block, len, bs, &mut w)
            .and_then(|_| w.flush().map_err(|e| file_err(&io.data, e)))
    };
    drop(q);
    let s = c.shutdown();
    r.and(s)
}

fn check_range(slba: u64, len: u64, bs: u32, nsze: u64) -> Result<()> {
    let blocks = len.div_ceil(bs as u64);
    if slba.checked_add(blocks).is_none_or(|e| e > nsze) {
        return Err(Error::Invalid(format!(
            "blocks {slba}..{} are beyond the namespace's {nsze} blocks",
            slba.saturating_add(blocks)
        )));
    }
    Ok(())
}

fn write_cmd(io: &Io) -> Result<()> {
    if io.data == "-" && io.sub.conn.tls_key.as_deref() == Some("-") {
        return Err(Error::Invalid(
            "--tls-key - and data from stdin: give one of them as a file".into(),
        ));
    }
    let (mut input, size): (Box<dyn std::io::Read>, Option<u64>) = if io.data == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(&io.data).map_err(|e| file_err(&io.data, e))?;
        let n = f.metadata().map_err(|e| file_err(&io.data, e))?.len();
        (
            Box::new(std::io::BufReader::with_capacity(1 << 20, f)),
            Some(n),
        )
    };
    let len = io
        .data_size
        .or(size)
        .ok_or_else(|| Error::Invalid("--data-size is required when writing from stdin".into()))?;
    let (c, mut q, bs, nsze) = open_io(io)?;
    check_range(io.start_block, len, bs, nsze)?;
    let r = q.write_from(io.nsid, io.start_block, len, bs, &mut input);
    drop(q);
    let s = c.shutdown();
    r.and(s)
}

fn print_report(r: &PerfReport) {
    println!(
        "{:?} bs={} qd={} queues={} windows={}: {:.0} IOPS, {:.1} MiB/s, {} I/Os in {:.1} s, {} errors",
        r.pattern, r.bs, r.qd, r.queues, r.windows, r.iops, r.mib_s, r.ios, r.seconds, r.errors
    );
    println!(
        "  latency (us): mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        r.lat_mean_us, r.lat_p50_us, r.lat_p99_us, r.lat_p999_us, r.lat_max_us
    );
    println!(
        "  windows: {} bound, {} invalidated by the target, {} locally; {} in-capsule writes",
        r.binds, r.remote_invalidations, r.local_invalidations, r.in_capsule
    );
    if let Some(e) = &r.first_error {
        println!("  first error: {e}");
    }
}

#[allow(clippy::too_many_arguments)]
fn perf_cmd(
    sub: &Subsys,
    nsid: u32,
    rw: Pattern,
    bs: u64,
    qd: u16,
    queues: u16,
    time: u64,
    rwmixread: u8,
    size: Option<u64>,
    no_inline: bool,
    spin_us: u64,
    json: bool,
) -> Result<bool> {
    let mut o = options(&sub.conn, &sub.nqn)?;
    o.io_queues = queues.max(1);
    o.queue_depth = qd.max(2);
    o.inline = !no_inline;
    o.spin = Duration::from_micros(spin_us);
    o.max_io = o.max_io.max(bs as usize);
    let c = Controller::connect(&o)?;
    let ns = c.identify_namespace(nsid)?;
    if ns.nsze == 0 {
        return Err(Error::Invalid(format!("namespace {nsid} is not active")));
    }
    let block = ns.block_size();
    let mut blocks = ns.nsze;
    if let Some(s) = size {
        blocks = blocks.min(s / block);
    }
    let qs = c.connect_io_queues()?;
    if (qs.len() as u16) < o.io_queues {
        eprintln!(
            "note: the controller granted {} of {} I/O queues",
            qs.len(),
            o.io_queues
        );
    }
    let opts = PerfOptions {
        pattern: rw,
        bs: bs as usize,
        qd,
        time: Duration::from_secs(time),
        read_pct: rwmixread.min(100),
    };
    let tty = std::io::stderr().is_terminal();
    let mut last = 0u64;
    let rep = perf::run(
        qs,
        perf::Target {
            nsid,
            block_size: block as u32,
            blocks,
        },
        &opts,
        c.lost(),
        |e, p| {
            let ios = p.ios.load(std::sync::atomic::Ordering::Relaxed);
            let d = ios - last;
            last = ios;
            let line = format!(
                "[{:>3}s] {} IOPS, {:.1} MiB/s",
                e.as_secs(),
                d,
                d as f64 * bs as f64 / 1048576.0
            );
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
        },
    );
    if tty {
        eprintln!();
    }
    let kas = c.keep_alives();
    let ok = match &rep {
        Ok(r) => r.errors == 0,
        Err(_) => false,
    };
    let s = c.shutdown();
    let rep = rep?;
    s?;
    if json {
        let mut v = serde_json::to_value(&rep).map_err(|e| Error::Protocol(e.to_string()))?;
        v["keep_alives"] = kas.into();
        println!("{v}");
    } else {
        print_report(&rep);
    }
    Ok(ok)
}

fn run(cli: Cli) -> Result<bool> {
    match cli.cmd {
        // Answered in main, before logging starts.
        Cmd::GenerateDocs { .. } => Ok(true),
        Cmd::Discover { conn } => {
            let o = options(&conn, nvme::DISCOVERY_NQN)?;
            let log = discovery::discover(&o)?;
            println!(
                "Discovery Log Number of Records {}, Generation counter {}",
                log.entries.len(),
                log.genctr
            );
            for (i, e) in log.entries.iter().enumerate() {
                print_entry(i, e);
            }
            Ok(true)
        }
        Cmd::Connect { sub, watch } => identify(&sub, watch).map(|_| true),
        Cmd::Read(io) => read_cmd(&io).map(|_| true),
        Cmd::Write(io) => write_cmd(&io).map(|_| true),
        Cmd::Flush { sub, nsid } => {
            let mut o = options(&sub.conn, &sub.nqn)?;
            o.io_queues = 1;
            let c = Controller::connect(&o)?;
            let mut qs = c.connect_io_queues()?;
            let r = match qs.first_mut() {
                Some(q) => q.flush_ns(nsid),
                None => Err(Error::Protocol("no I/O queue granted".into())),
            };
            drop(qs);
            let s = c.shutdown();
            r.and(s).map(|_| true)
        }
        Cmd::Raw {
            sub,
            opcode,
            cid,
            nsid,
            cdws,
            sgl,
            window,
            in_capsule,
            wait,
        } => raw_cmd(
            &sub,
            opcode,
            cid,
            nsid,
            &cdws,
            sgl.as_deref(),
            window.as_deref(),
            in_capsule,
            wait,
        ),
        Cmd::Perf {
            sub,
            nsid,
            rw,
            bs,
            qd,
            queues,
            time,
            rwmixread,
            size,
            no_inline,
            spin_us,
            json,
        } => perf_cmd(
            &sub, nsid, rw, bs, qd, queues, time, rwmixread, size, no_inline, spin_us, json,
        ),
    }
}

fn main() -> ExitCode {
    // Before any thread: librdmacm's device list must survive a device
    // added back after a removal (see the function).
    rdma::one_malloc_arena();
    let cli = Cli::parse();
    if let Cmd::GenerateDocs { dir } = &cli.cmd {
        use clap::CommandFactory;
        return match clidoc::write_all(Cli::command(), "8", dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nvmf-initiator generate-docs: {}: {e}", dir.display());
                ExitCode::from(1)
            }
        };
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cli.log_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("nvmf-initiator: {e}");
            ExitCode::from(1)
        }
    }
}
