//! A connected controller: admin queue bring-up (Connect, Property Get/Set
//! enable sequence, Identify, Set Features), keep-alive at KATO/2,
//! asynchronous events, I/O queues, and clean shutdown (CC.SHN).

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme::command::Command;
use nvme::completion::Completion;
use nvme::fabrics::{cc, csts, prop, ConnectData, CONNECT_DATA_SIZE};
use nvme::identify::{oaes, parse_ns_list, IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use nvme::opcode::lid;

use crate::commands;
use crate::error::{status_ok, Error, Result};
use crate::host::HostIdentity;
use crate::transport::{Done, HostQueue, Kind, Queue, QueueConfig, WindowMode, Xfer};

/// Admin queue size (as the Linux host: NVME_AQ_DEPTH).
pub const ADMIN_DEPTH: u16 = 32;
/// Admin data slot size (Identify, log pages in chunks).
pub const ADMIN_SLOT: usize = 16 * 1024;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Target address and port.
    pub addr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host identity.
    pub host: HostIdentity,
    /// Keep-alive timeout (zero: none).
    pub kato: Duration,
    /// I/O queues to ask for.
    pub io_queues: u16,
    /// I/O queue size.
    pub queue_depth: u16,
    /// The fabric.
    pub transport: Kind,
    /// NVMe/TCP: header and data digests.
    pub digests: bool,
    /// Window mode for all queues (RDMA).
    pub windows: WindowMode,
    /// Send small writes as in-capsule data (I/O queues).
    pub inline: bool,
    /// Largest transfer per command (also capped by the controller's MDTS).
    pub max_io: usize,
    /// Timeout for connection steps and admin commands.
    pub timeout: Duration,
    /// Busy-poll time before sleeping for completions.
    pub spin: Duration,
    /// DH-HMAC-CHAP secrets, when the host authenticates.
    pub dhchap: Option<crate::auth::HostKeys>,
    /// NVMe/TCP: the TLS PSK every queue's handshake uses (none: plain TCP).
    pub tls: Option<crate::transport::tls::HostPsk>,
}

impl ConnectOptions {
    /// Defaults: the system's host identity, KATO 5 s, one I/O queue of 32,
    /// memory windows, in-capsule writes, 128 KiB transfers.
    pub fn new(addr: SocketAddr, subnqn: &str) -> ConnectOptions {
        ConnectOptions {
            addr,
            subnqn: subnqn.to_string(),
            host: HostIdentity::system(None, None),
            kato: Duration::from_secs(5),
            io_queues: 1,
            queue_depth: 32,
            transport: Kind::Rdma,
            digests: false,
            windows: WindowMode::Mw,
            inline: true,
            max_io: 128 * 1024,
            timeout: Duration::from_secs(10),
            spin: Duration::ZERO,
            dhchap: None,
            tls: None,
        }
    }

    /// The TLS PSK a queue offers, if TLS is asked for.
    fn tls_offer(&self) -> Result<Option<crate::transport::tls::Offer>> {
        if self.tls.is_some() && self.transport != Kind::Tcp {
            return Err(Error::Invalid("TLS is for NVMe/TCP only".into()));
        }
        self.tls
            .as_ref()
            .map(|p| p.offer(&self.host.nqn, &self.subnqn))
            .transpose()
            .map_err(Error::Invalid)
    }
}

/// What the controller told us at bring-up.
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    /// Controller id.
    pub cntlid: u16,
    /// CAP.
    pub cap: u64,
    /// VS.
    pub vs: u32,
    /// Identify Controller.
    pub id: IdentifyController,
    /// Largest transfer per command (MDTS and our limit).
    pub max_transfer: usize,
    /// I/O queues granted.
    pub io_queues: u16,
    /// I/O queue size used.
    pub queue_depth: u16,
    /// Whether this is a discovery controller.
    pub discovery: bool,
}

/// An asynchronous event, with the log page it pointed at already read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Event type (0 error, 1 SMART, 2 notice).
    pub kind: u8,
    /// Event information.
    pub info: u8,
    /// Log page to read.
    pub log: u8,
    /// For a namespace-attribute notice: the changed namespace list.
    pub changed_ns: Vec<u32>,
}

impl AsyncEvent {
    /// Decodes an AER completion's dword 0.
    pub fn from_result(r: u32) -> AsyncEvent {
        AsyncEvent {
            kind: (r & 7) as u8,
            info: (r >> 8) as u8,
            log: (r >> 16) as u8,
            changed_ns: Vec::new(),
        }
    }
}

struct Admin {
    q: Queue,
    aer_tag: Option<u16>,
    aer_enabled: bool,
    raw_results: Vec<u32>,
    events: Vec<AsyncEvent>,
    timeout: Duration,
}

fn on_other(aer_tag: &mut Option<u16>, results: &mut Vec<u32>, q: &mut Queue, d: Done) {
    if *aer_tag == Some(d.tag) {
        *aer_tag = None;
        if d.cqe.status.is_success() {
            results.push(d.cqe.result as u32);
        }
    }
    q.release(d.tag);
}

impl Admin {
    fn exec(
        &mut self,
        cmd: Command,
        xfer: Xfer,
        data_out: &[u8],
        data_in: &mut [u8],
    ) -> Result<Completion> {
        let Admin {
            q,
            aer_tag,
            raw_results,
            timeout,
            ..
        } = self;
        let cqe = q.execute(cmd, xfer, data_out, data_in, *timeout, &mut |q, d| {
            on_other(aer_tag, raw_results, q, d)
        })?;
        status_ok(commands::name(&cmd), cqe)
    }

    fn run(&mut self, cmd: Command) -> Result<Completion> {
        self.exec(cmd, Xfer::None, &[], &mut [])
    }

    fn read(&mut self, cmd: Command, out: &mut [u8]) -> Result<Completion> {
        let n = out.len() as u32;
        self.exec(cmd, Xfer::FromTarget(n), &[], out)
    }

    fn post_aer(&mut self) -> Result<()> {
        if !self.aer_enabled || self.aer_tag.is_some() {
            return Ok(());
        }
        if let Some(t) = self.q.alloc() {
            self.q
                .submit(t, commands::async_event_request(), Xfer::None)?;
            self.q.flush()?;
            self.aer_tag = Some(t);
        }
        Ok(())
    }

    /// Collects finished AERs, reads the log pages they name, re-arms.
    fn service_events(&mut self) -> Result<()> {
        let mut done = Vec::new();
        self.q.poll(&mut done, Duration::ZERO)?;
        for d in done {
            on_other(&mut self.aer_tag, &mut self.raw_results, &mut self.q, d);
        }
        let results = std::mem::take(&mut self.raw_results);
        for r in results {
            let mut ev = AsyncEvent::from_result(r);
            if ev.log == lid::CHANGED_NS {
                let mut page = vec![0u8; 4096];
                self.read(
                    commands::get_log_page(lid::CHANGED_NS, 0xFFFF_FFFF, 0, 4096, false),
                    &mut page,
                )?;
                ev.changed_ns = parse_ns_list(&page);
            } else if ev.log != 0 {
                let mut page = vec![0u8; 512];
                let _ = self.read(
                    commands::get_log_page(ev.log, 0xFFFF_FFFF, 0, 512, false),
                    &mut page,
                );
            }
            self.events.push(ev);
        }
        self.post_aer()
    }
}

/// A connected controller (admin queue).
pub struct Controller {
    admin: Arc<Mutex<Admin>>,
    info: ControllerInfo,
    opts: ConnectOptions,
    ka: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    keep_alives: Arc<AtomicU64>,
    lost: Arc<OnceLock<String>>,
    cc: u32,
}

fn lock(a: &Mutex<Admin>) -> std::sync::MutexGuard<'_, Admin> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

impl Controller {
    /// Connects the admin queue and brings the controller up: Connect,
    /// CAP/VS, CC.EN and CSTS.RDY, Identify Controller, Set Features Number of
    /// Queues (I/O controllers), asynchronous event configuration and one
    /// outstanding AER, and the keep-alive thread.
    pub fn connect(opts: &ConnectOptions) -> Result<Controller> {
        let discovery = opts.subnqn == nvme::DISCOVERY_NQN;
        let mut qc = QueueConfig::new(0, ADMIN_DEPTH, ADMIN_SLOT);
        qc.windows = opts.windows;
        qc.digests = opts.digests;
        qc.timeout = opts.timeout;
        qc.tls = opts.tls_offer()?;
        let q = Queue::connect(opts.transport, opts.addr, qc)?;
        let mut admin = Admin {
            q,
            aer_tag: None,
            aer_enabled: false,
            raw_results: Vec::new(),
            events: Vec::new(),
            timeout: opts.timeout,
        };
        let kato_ms = opts.kato.as_millis().min(u32::MAX as u128) as u32;
        let data = ConnectData {
            hostid: opts.host.id,
            cntlid: 0xFFFF,
            subsysnqn: opts.subnqn.clone(),
            hostnqn: opts.host.nqn.clone(),
        }
        .encode();
        let c = admin.exec(
            commands::connect(0, ADMIN_DEPTH, kato_ms),
            Xfer::ToTarget(CONNECT_DATA_SIZE as u32),
            &data,
            &mut [],
        )?;
        let cntlid = c.result as u16;
        crate::auth::after_connect(
            &mut |cmd, x, o, i| admin.exec(cmd, x, o, i),
            opts.dhchap.as_ref(),
            c.result,
            &opts.host.nqn,
            &opts.subnqn,
            0,
        )?;
        let cap = admin.run(commands::property_get(prop::CAP, true))?.result;
        let vs = admin.run(commands::property_get(prop::VS, false))?.result as u32;
        // CC: NVM command set, 4 KiB pages, round robin, 64/16-byte entries.
        let cc_val = (6 << cc::IOSQES_SHIFT) | (4 << cc::IOCQES_SHIFT);
        admin.run(commands::property_set(prop::CC, cc_val))?;
        admin.run(commands::property_set(prop::CC, cc_val | cc::EN))?;
        let to = Duration::from_millis(((cap >> 24) & 0xFF).max(2) * 500);
        wait_csts(&mut admin, to, "CSTS.RDY after enable", |v| {
            if v & csts::CFS != 0 {
                return Err(Error::Protocol("controller fatal status (CSTS.CFS)".into()));
            }
            Ok(v & csts::RDY != 0)
        })?;
        let mut page = vec![0u8; IDENTIFY_SIZE];
        admin.read(commands::identify_controller(), &mut page)?;
        let id = IdentifyController::parse(&page)
            .map_err(|e| Error::Protocol(format!("Identify Controller: {e}")))?;
        let mpsmin = 4096usize << ((cap >> 48) & 0xF);
        let mut max_transfer = opts.max_io.max(4096);
        if id.mdts != 0 {
            max_transfer = max_transfer.min(mpsmin << id.mdts.min(20));
        }
        let mqes = (cap & 0xFFFF) as u16;
        let mut io_queues = 0;
        if !discovery && opts.io_queues > 0 {
            let r = admin.run(commands::set_num_queues(opts.io_queues))?.result as u32;
            let nsq = (r & 0xFFFF) as u16 + 1;
            let ncq = (r >> 16) as u16 + 1;
            io_queues = opts.io_queues.min(nsq).min(ncq);
        }
        if !discovery {
            if id.oaes & oaes::NS_ATTR != 0 {
                let _ = admin.run(commands::set_features(
                    commands::fid::ASYNC_EVENT_CONFIG,
                    oaes::NS_ATTR,
                ));
            }
            admin.aer_enabled = true;
            admin.post_aer()?;
        }
        let info = ControllerInfo {
            cntlid,
            cap,
            vs,
            max_transfer,
            io_queues,
            queue_depth: opts.queue_depth.min(mqes.saturating_add(1)).max(2),
            discovery,
            id,
        };
        let admin = Arc::new(Mutex::new(admin));
        let keep_alives = Arc::new(AtomicU64::new(0));
        let lost = Arc::new(OnceLock::new());
        let ka = (kato_ms > 0).then(|| {
            let (tx, rx) = mpsc::channel::<()>();
            let a = admin.clone();
            let n = keep_alives.clone();
            let l = lost.clone();
            let period = opts.kato / 2;
            let h = std::thread::Builder::new()
                .name(format!("nvmf-ka-{cntlid}"))
                .spawn(move || keep_alive_loop(a, rx, period, n, l))
                .expect("spawn keep-alive thread");
            (tx, h)
        });
        Ok(Controller {
            admin,
            info,
            opts: opts.clone(),
            ka,
            keep_alives,
            lost,
            cc: cc_val | cc::EN,
        })
    }

    /// What the controller reported.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }

    /// Keep Alive commands sent so far.
    pub fn keep_alives(&self) -> u64 {
        self.keep_alives.load(Ordering::Relaxed)
    }

    /// Set (once) with the reason when a Keep Alive fails: the controller is
    /// then presumed gone, as a host does after its keep-alive timeout, and
    /// I/O loops should stop waiting for their commands. A clone of the handle
    /// can be read from other threads.
    pub fn lost(&self) -> &Arc<OnceLock<String>> {
        &self.lost
    }

    /// Runs an admin command without data.
    pub fn admin(&self, cmd: Command) -> Result<Completion> {
        lock(&self.admin).run(cmd)
    }

    /// Runs an admin command that returns `out.len()` bytes.
    pub fn admin_read(&self, cmd: Command, out: &mut [u8]) -> Result<Completion> {
        lock(&self.admin).read(cmd, out)
    }

    /// Reads `out.len()` bytes of log page `lid` from `offset`, in chunks the
    /// admin slots can carry.
    pub fn get_log_page(&self, lid: u8, nsid: u32, offset: u64, out: &mut [u8]) -> Result<()> {
        let mut a = lock(&self.admin);
        let chunk = ADMIN_SLOT.min(self.info.max_transfer);
        let mut done = 0usize;
        while done < out.len() {
            let n = (out.len() - done).min(chunk);
            let len = n.next_multiple_of(4);
            let mut buf = vec![0u8; len];
            a.read(
                commands::get_log_page(lid, nsid, offset + done as u64, len as u32, false),
                &mut buf,
            )?;
            out[done..done + n].copy_from_slice(&buf[..n]);
            done += n;
        }
        Ok(())
    }

    /// Active namespace ids.
    pub fn namespaces(&self) -> Result<Vec<u32>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let mut page = vec![0u8; IDENTIFY_SIZE];
            self.admin_read(commands::active_namespaces(after), &mut page)?;
            let ids = parse_ns_list(&page);
            let full = ids.len() == IDENTIFY_SIZE / 4;
            after = match ids.last() {
                Some(&l) => l,
                None => break,
            };
            all.extend(ids);
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// Identify Namespace.
    pub fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace> {
        let mut page = vec![0u8; IDENTIFY_SIZE];
        self.admin_read(commands::identify_namespace(nsid), &mut page)?;
        IdentifyNamespace::parse(&page)
            .map_err(|e| Error::Protocol(format!("Identify Namespace {nsid}: {e}")))
    }

    /// Collects asynchronous events that arrived (reading their log pages).
    pub fn poll_events(&self) -> Result<Vec<AsyncEvent>> {
        let mut a = lock(&self.admin);
        a.service_events()?;
        Ok(std::mem::take(&mut a.events))
    }

    /// Connects the granted I/O queues (qid 1..=n).
    pub fn connect_io_queues(&self) -> Result<Vec<IoQueue>> {
        (1..=self.info.io_queues)
            .map(|qid| self.connect_io_queue(qid))
            .collect()
    }

    /// Connects I/O queue `qid`.
    pub fn connect_io_queue(&self, qid: u16) -> Result<IoQueue> {
        let depth = self.info.queue_depth;
        let mut qc = QueueConfig::new(qid, depth, self.info.max_transfer);
        qc.windows = self.opts.windows;
        qc.digests = self.opts.digests;
        qc.timeout = self.opts.timeout;
        qc.spin = self.opts.spin;
        qc.tls = self.opts.tls_offer()?;
        let mut q = Queue::connect(self.opts.transport, self.opts.addr, qc)?;
        let data = ConnectData {
            hostid: self.opts.host.id,
            cntlid: self.info.cntlid,
            subsysnqn: self.opts.subnqn.clone(),
            hostnqn: self.opts.host.nqn.clone(),
        }
        .encode();
        let c = q.execute(
            commands::connect(qid, depth, 0),
            Xfer::ToTarget(CONNECT_DATA_SIZE as u32),
            &data,
            &mut [],
            self.opts.timeout,
            &mut |q, d| q.release(d.tag),
        )?;
        let c = status_ok("Connect (I/O queue)", c)?;
        let timeout = self.opts.timeout;
        crate::auth::after_connect(
            &mut |cmd, x, o, i| {
                let c = q.execute(cmd, x, o, i, timeout, &mut |q, d| q.release(d.tag))?;
                Ok(c)
            },
            self.opts.dhchap.as_ref(),
            c.result,
            &self.opts.host.nqn,
            &self.opts.subnqn,
            qid,
        )?;
        if self.opts.inline {
            // IOCCSZ counts 16-byte units of the whole capsule (SQE included).
            let ic = (self.info.id.ioccsz as usize * 16).saturating_sub(nvme::SQE_SIZE);
            q.set_inline_max(ic);
        }
        Ok(IoQueue { q })
    }

    fn stop_keep_alive(&mut self) {
        if let Some((tx, h)) = self.ka.take() {
            drop(tx);
            let _ = h.join();
        }
    }

    /// Shuts the controller down cleanly: stops keep-alive, sets CC.SHN
    /// (normal), waits for CSTS.SHST complete, and disconnects. Drop the I/O
    /// queues first.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_keep_alive();
        let mut a = lock(&self.admin);
        a.aer_enabled = false;
        a.run(commands::property_set(
            prop::CC,
            self.cc | (1 << cc::SHN_SHIFT),
        ))?;
        wait_csts(
            &mut a,
            Duration::from_secs(10),
            "CSTS.SHST after shutdown",
            |v| {
                if v & csts::CFS != 0 {
                    // The target could not finish shutdown processing (a
                    // flush failed): written data may not be durable.
                    return Err(Error::Protocol(
                        "controller fatal status during shutdown (CSTS.CFS): the target could not make written data durable".into(),
                    ));
                }
                Ok(v & csts::SHST_MASK == csts::SHST_COMPLETE)
            },
        )?;
        a.q.disconnect();
        Ok(())
    }

    /// The admin queue, for raw-mode tests (the keep-alive thread shares it).
    pub fn with_admin_queue<T>(&self, f: impl FnOnce(&mut Queue) -> T) -> T {
        f(&mut lock(&self.admin).q)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop_keep_alive();
    }
}

fn wait_csts(
    a: &mut Admin,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(u32) -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let v = a.run(commands::property_get(prop::CSTS, false))?.result as u32;
        if done(v)? {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn keep_alive_loop(
    admin: Arc<Mutex<Admin>>,
    stop: mpsc::Receiver<()>,
    period: Duration,
    count: Arc<AtomicU64>,
    lost: Arc<OnceLock<String>>,
) {
    loop {
        match stop.recv_timeout(period) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let mut a = lock(&admin);
        match a.run(commands::keep_alive()) {
            Ok(_) => {
                count.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!("keep-alive failed: {e}");
                let _ = lost.set(format!("keep-alive failed: {e}"));
                if a.q.failure().is_some() {
                    return;
                }
            }
        }
        if let Err(e) = a.service_events() {
            tracing::warn!("asynchronous event handling failed: {e}");
        }
    }
}

/// An I/O queue: a [`Queue`] with I/O helpers. Owned by one thread.
pub struct IoQueue {
    q: Queue,
}

impl Deref for IoQueue {
    type Target = Queue;
    fn deref(&self) -> &Queue {
        &self.q
    }
}

impl DerefMut for IoQueue {
    fn deref_mut(&mut self) -> &mut Queue {
        &mut self.q
    }
}

impl IoQueue {
    fn run(&mut self, cmd: Command, xfer: Xfer, out: &[u8], inp: &mut [u8]) -> Result<Completion> {
        let t = Duration::from_secs(30);
        let c = self
            .q
            .execute(cmd, xfer, out, inp, t, &mut |q, d| q.release(d.tag))?;
        status_ok(commands::io_name(&cmd), c)
    }

    /// Reads `nlb` blocks at `slba` into `buf` (its length is the byte count).
    pub fn read(&mut self, nsid: u32, slba: u64, nlb: u32, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u32;
        self.run(
            commands::read(nsid, slba, nlb),
            Xfer::FromTarget(n),
            &[],
            buf,
        )
        .map(|_| ())
    }

    /// Writes `data` (`nlb` blocks) at `slba`.
    pub fn write(&mut self, nsid: u32, slba: u64, nlb: u32, data: &[u8], fua: bool) -> Result<()> {
        let n = data.len() as u32;
        self.run(
            commands::write(nsid, slba, nlb, fua),
            Xfer::ToTarget(n),
            data,
            &mut [],
        )
        .map(|_| ())
    }

    /// Submits two commands back to back (one doorbell: a fused pair), each
    /// with its transfer (and the data of one to the target), and waits for
    /// both completions.
    pub fn run_pair(&mut self, cmds: [(Command, Xfer, &[u8]); 2]) -> Result<[Completion; 2]> {
        let mut tags = [0u16; 2];
        for i in 0..2 {
            let Some(t) = self.alloc() else {
                if i == 1 {
                    self.release(tags[0]);
                }
                return Err(Error::Invalid("no free command slot".into()));
            };
            tags[i] = t;
        }
        let mut out: [Option<Completion>; 2] = [None, None];
        let mut result = Ok(());
        for (i, &(cmd, xfer, data)) in cmds.iter().enumerate() {
            let n = data.len().min(self.slot_size());
            self.buffer_mut(tags[i])[..n].copy_from_slice(&data[..n]);
            if let Err(e) = self.submit(tags[i], cmd, xfer) {
                result = Err(e);
                break;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut done = Vec::new();
        while result.is_ok() && out.iter().any(|o| o.is_none()) && self.in_flight() > 0 {
            if Instant::now() > deadline {
                result = Err(Error::Timeout {
                    what: "a fused pair".into(),
                    after: Duration::from_secs(30),
                });
                break;
            }
            self.poll(&mut done, Duration::from_secs(1))?;
            for d in done.drain(..) {
                if let Some(i) = tags.iter().position(|&t| t == d.tag) {
                    out[i] = Some(d.cqe);
                }
            }
        }
        self.drain_all()?;
        for t in tags {
            self.release(t);
        }
        result?;
        match out {
            [Some(a), Some(b)] => Ok([a, b]),
            _ => Err(Error::Invalid("a fused pair did not complete".into())),
        }
    }

    /// Fused Compare and Write: `data` replaces `nlb` blocks at `slba` if
    /// they hold `cmp` (true), else nothing is written (false).
    pub fn compare_and_write(
        &mut self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        cmp: &[u8],
        data: &[u8],
    ) -> Result<bool> {
        let [c, w] = commands::compare_and_write(nsid, slba, nlb);
        let [c, w] = self.run_pair([
            (c, Xfer::ToTarget(cmp.len() as u32), cmp),
            (w, Xfer::ToTarget(data.len() as u32), data),
        ])?;
        if c.status == nvme::Status::COMPARE_FAILURE && w.status == nvme::Status::FUSED_FAILED {
            return Ok(false);
        }
        status_ok("Compare", c)?;
        status_ok("Write", w)?;
        Ok(true)
    }

    /// Flush.
    pub fn flush_ns(&mut self, nsid: u32) -> Result<()> {
        self.run(commands::flush(nsid), Xfer::None, &[], &mut [])
            .map(|_| ())
    }

    /// Write Zeroes.
    pub fn write_zeroes(&mut self, nsid: u32, slba: u64, nlb: u32) -> Result<()> {
        self.run(
            commands::write_zeroes(nsid, slba, nlb),
            Xfer::None,
            &[],
            &mut [],
        )
        .map(|_| ())
    }

    /// Deallocates (DSM) the given `(slba, nlb)` ranges (at most 256).
    pub fn deallocate(&mut self, nsid: u32, ranges: &[(u64, u32)]) -> Result<()> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(Error::Invalid("1 to 256 ranges".into()));
        }
        let data: Vec<u8> = ranges
            .iter()
            .flat_map(|&(s, n)| commands::dsm_range(s, n))
            .collect();
        self.run(
            commands::deallocate(nsid, ranges.len() as u32),
            Xfer::ToTarget(data.len() as u32),
            &data,
            &mut [],
        )
        .map(|_| ())
    }

    /// Reads `len` bytes from `slba` (blocks of `block_size`) into `out`, with
    /// up to the queue depth of commands in flight, writing in order.
    pub fn read_to(
        &mut self,
        nsid: u32,
        slba: u64,
        len: u64,
        block_size: u32,
        out: &mut dyn std::io::Write,
    ) -> Result<()> {
        let chunk = self.chunk_bytes(block_size);
        let mut order = std::collections::VecDeque::new();
        let mut ready = vec![false; self.depth() as usize];
        let mut done = Vec::new();
        let mut off = 0u64;
        let mut result = Ok(());
        while result.is_ok() && (off < len || !order.is_empty()) {
            while off < len {
                let Some(tag) = self.alloc() else { break };
                let n = (len - off).min(chunk as u64) as u32;
                let lba = slba + off / block_size as u64;
                let cmd = commands::read(nsid, lba, n.div_ceil(block_size));
                self.submit(tag, cmd, Xfer::FromTarget(n))?;
                ready[tag as usize] = false;
                order.push_back((tag, n));
                off += n as u64;
            }
            self.poll(&mut done, Duration::from_secs(30))?;
            for d in done.drain(..) {
                if result.is_ok() {
                    result = status_ok("Read", d.cqe).map(|_| ());
                }
                ready[d.tag as usize] = true;
            }
            while let Some(&(tag, n)) = order.front() {
                if !ready[tag as usize] {
                    break;
                }
                order.pop_front();
                if result.is_ok() {
                    if let Err(e) = out.write_all(&self.buffer(tag)[..n as usize]) {
                        result = Err(Error::File {
                            path: "output".into(),
                            source: e,
                        });
                    }
                }
                self.release(tag);
            }
        }
        self.drain_all()?;
        result
    }

    /// Writes `len` bytes read from `input` at `slba` (blocks of `block_size`;
    /// `len` must be a multiple of it), with up to the queue depth in flight.
    pub fn write_from(
        &mut self,
        nsid: u32,
        slba: u64,
        len: u64,
        block_size: u32,
        input: &mut dyn std::io::Read,
    ) -> Result<()> {
        if !len.is_multiple_of(block_size as u64) {
            return Err(Error::Invalid(format!(
                "data size {len} is not a multiple of the {block_size}-byte block size"
            )));
        }
        let chunk = self.chunk_bytes(block_size);
        let mut done = Vec::new();
        let mut off = 0u64;
        let mut result = Ok(());
        while result.is_ok() && (off < len || self.in_flight() > 0) {
            while off < len {
                let Some(tag) = self.alloc() else { break };
                let n = (len - off).min(chunk as u64) as u32;
                if let Err(e) = input.read_exact(&mut self.buffer_mut(tag)[..n as usize]) {
                    self.release(tag);
                    result = Err(Error::File {
                        path: "input".into(),
                        source: e,
                    });
                    break;
                }
                let lba = slba + off / block_size as u64;
                let cmd = commands::write(nsid, lba, n / block_size, false);
                self.submit(tag, cmd, Xfer::ToTarget(n))?;
                off += n as u64;
            }
            if self.in_flight() == 0 {
                break;
            }
            self.poll(&mut done, Duration::from_secs(30))?;
            for d in done.drain(..) {
                if result.is_ok() {
                    result = status_ok("Write", d.cqe).map(|_| ());
                }
                self.release(d.tag);
            }
        }
        self.drain_all()?;
        result
    }

    fn chunk_bytes(&self, block_size: u32) -> u32 {
        let s = self.slot_size() as u32;
        (s / block_size).max(1) * block_size
    }

    fn drain_all(&mut self) -> Result<()> {
        let mut done = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.in_flight() > 0 {
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: "outstanding I/O".into(),
                    after: Duration::from_secs(30),
                });
            }
            self.poll(&mut done, Duration::from_secs(1))?;
            for d in done.drain(..) {
                self.release(d.tag);
            }
        }
        Ok(())
    }
}
