use super::*;
use crate::model::namespace::Namespace;
use crate::model::subsystem::{NewController, Subsystem};
use nvme::fabrics::{cc, prop};
use nvme::identify::{IdentifyNamespace, IDENTIFY_SIZE};
use std::sync::Arc;

fn setup() -> (Target, Arc<Controller>, Arc<Controller>) {
    let ns = Arc::new(Namespace::new(
        "nqn.t:s",
        1,
        Box::new(crate::backend::null::Null::default()),
        1 << 30,
        4096,
        false,
    ));
    let ns5 = Arc::new(Namespace::new(
        "nqn.t:s",
        5,
        Box::new(crate::backend::null::Null::default()),
        1 << 20,
        512,
        false,
    ));
    let s = Arc::new(Subsystem::new(
        "nqn.t:s".into(),
        SubsystemKind::Nvm,
        true,
        vec![],
        None,
        "model".into(),
        vec![ns5, ns],
    ));
    let t = Target::new(vec![s.clone()], vec!["10.0.0.1:4420".parse().unwrap()], 0);
    let c = s
        .add_controller(NewController::of("nqn.h", [3; 16], 5000), 16)
        .unwrap();
    let d = t
        .discovery
        .subsystem
        .add_controller(NewController::of("nqn.h", [3; 16], 0), 16)
        .unwrap();
    for x in [&c, &d] {
        let v = (6 << cc::IOSQES_SHIFT | 4 << cc::IOCQES_SHIFT | cc::EN) as u64;
        x.state().property_set(prop::CC, false, v).unwrap();
    }
    (t, c, d)
}

fn cmd(opc: u8, nsid: u32, cdw10: u32, cdw11: u32) -> Command {
    let mut c = Command::new(opc, 7);
    c.set_nsid(nsid);
    c.set_cdw(10, cdw10);
    c.set_cdw(11, cdw11);
    c
}

fn run(t: &Target, c: &Controller, cmd: &Command, len: usize) -> (AdminOutcome, Vec<u8>) {
    let mut buf = vec![0xEEu8; len];
    let o = execute(t, c, cmd, &mut buf, Instant::now());
    (o, buf)
}

fn status(o: AdminOutcome) -> Status {
    match o {
        AdminOutcome::Done { status, .. } => status,
        AdminOutcome::Parked => panic!("parked"),
        // What the queue core does with it: the job's result is the status.
        AdminOutcome::Blocking { job, .. } => Status::from_field(job.run() as u16),
    }
}

#[test]
fn identify_controller_and_namespaces() {
    let (t, c, _) = setup();
    let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
    assert_eq!(status(o), Status::SUCCESS);
    let id = IdentifyController::parse(&b).unwrap();
    assert_eq!(id.cntlid, c.cntlid);
    assert_eq!(id.subnqn, "nqn.t:s");
    assert_eq!(id.ioccsz, (64 + crate::INLINE_DATA_SIZE) / 16);
    assert_ne!(id.sgls & (1 << 20), 0);
    assert_ne!(id.kas, 0);
    assert_eq!(id.oaes & (1 << 8), 1 << 8);
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 1, 0, 0), 4096);
    let n = IdentifyNamespace::parse(&b).unwrap();
    assert_eq!((n.nsze, n.block_size()), (262144, 4096));
    let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, 2, 0, 0), 4096);
    assert_eq!(status(o), Status::SUCCESS);
    assert!(
        b.iter().all(|&x| x == 0),
        "inactive namespace is all zeroes"
    );
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 0, 0, 0), 4096).0),
        Status::INVALID_NS
    );
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 0xFFFF_FFFF, 0, 0), 4096).0),
        Status::INVALID_NS
    );
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 2, 0), 4096);
    assert_eq!(identify::parse_ns_list(&b), vec![1, 5]);
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 1, 2, 0), 4096);
    assert_eq!(identify::parse_ns_list(&b), vec![5]);
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 5, 3, 0), 4096);
    assert_eq!(identify::parse_ns_descriptors(&b).len(), 3);
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 4, 3, 0), 4096).0),
        Status::INVALID_NS
    );
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 0, 0x10, 0), 4096).0),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 512).0),
        Status::SGL_INVALID_DATA
    );
    // The NVM command set's Identify Namespace and Controller (CNS 5
    // and 6, CSI 0): zeroes, for an active namespace; other sets: no.
    for (nsid, cns) in [(1, 5), (0, 6)] {
        let (o, b) = run(&t, &c, &cmd(op::IDENTIFY, nsid, cns, 0), 4096);
        assert_eq!(status(o), Status::SUCCESS);
        assert!(b.iter().all(|&x| x == 0), "CNS {cns}");
        let zns = cmd(op::IDENTIFY, nsid, cns, 2 << 24);
        assert_eq!(status(run(&t, &c, &zns, 4096).0), Status::INVALID_FIELD);
    }
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 4, 5, 0), 4096).0),
        Status::INVALID_NS
    );
}

#[test]
fn log_pages() {
    let (t, c, d) = setup();
    let glp = |l: u8, len: u64, off: u64| {
        GetLogPage {
            lid: l,
            lsp: 0,
            rae: false,
            len,
            offset: off,
        }
        .to_command(1, 0xFFFF_FFFF)
    };
    // discovery: header, then entries at 1024, exact windows
    let (o, b) = run(&t, &d, &glp(lid::DISCOVERY, 20, 0), 20);
    assert_eq!(status(o), Status::SUCCESS);
    assert_eq!(
        nvme::discovery::DiscoveryHeader::parse(&b).unwrap().numrec,
        1
    );
    let (_, b) = run(&t, &d, &glp(lid::DISCOVERY, 1024, 1024), 1024);
    assert_eq!(
        nvme::discovery::DiscoveryEntry::parse(&b).unwrap().subnqn,
        "nqn.t:s"
    );
    let (o, b) = run(&t, &d, &glp(lid::DISCOVERY, 4096, 1024), 4096);
    assert_eq!(status(o), Status::SUCCESS);
    assert!(b[1024..].iter().all(|&x| x == 0));
    assert_eq!(
        status(run(&t, &d, &glp(lid::DISCOVERY, 4, 4096), 4).0),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(run(&t, &d, &glp(lid::DISCOVERY, 4, 2), 4).0),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(run(&t, &d, &glp(lid::DISCOVERY, 8, 0), 4).0),
        Status::SGL_INVALID_DATA
    );
    assert_eq!(
        status(run(&t, &c, &glp(lid::DISCOVERY, 4, 0), 4).0),
        Status::INVALID_LOG_PAGE
    );
    assert_eq!(
        status(run(&t, &d, &glp(lid::SMART, 512, 0), 512).0),
        Status::INVALID_LOG_PAGE
    );
    // Each controller advertises (LPA bit 1) the effects log exactly
    // where it serves it: Linux hosts read what is advertised.
    for (ctrl, serves) in [(&c, true), (&d, false)] {
        let lpa = identify_controller(ctrl).lpa;
        let st = status(run(&t, ctrl, &glp(lid::CMD_EFFECTS, 4096, 0), 4096).0);
        assert_eq!(lpa & 2 != 0, serves);
        assert_eq!(st == Status::SUCCESS, serves);
    }
    // smart, error, changed ns
    let (o, b) = run(&t, &c, &glp(lid::SMART, 512, 0), 512);
    assert_eq!(status(o), Status::SUCCESS);
    assert_eq!(SmartLog::parse(&b).unwrap().avail_spare, 100);
    c.state().log_error(1, 9, Status::LBA_RANGE, 1);
    let (_, b) = run(&t, &c, &glp(lid::ERROR, 64, 0), 64);
    assert_eq!(nvme::log::ErrorLogEntry::parse(&b).unwrap().cid, 9);
    c.state().changed_ns.push(5);
    let (_, b) = run(&t, &c, &glp(lid::CHANGED_NS, 4096, 0), 4096);
    assert_eq!(&b[..4], &[5, 0, 0, 0]);
    assert!(c.state().changed_ns.is_empty());
    assert_eq!(
        status(run(&t, &c, &glp(0x81, 512, 0), 512).0),
        Status::INVALID_LOG_PAGE
    );
    // reservation notifications: one page per read, an empty one at the end
    let (o, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
    assert_eq!(status(o), Status::SUCCESS);
    assert_eq!(b, vec![0; 64]);
    c.notify_reservation(5, nvme::reservation::notice::RESERVATION_RELEASED);
    c.notify_reservation(1, nvme::reservation::notice::REGISTRATION_PREEMPTED);
    assert_eq!(c.state().events.len(), 1, "one event until the log is read");
    let (_, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
    let n = nvme::reservation::Notification::parse(&b).unwrap();
    assert_eq!((n.count, n.kind, n.available, n.nsid), (1, 2, 1, 5));
    let (_, b) = run(&t, &c, &glp(lid::RESV_NOTIFICATION, 64, 0), 64);
    assert_eq!(nvme::reservation::Notification::parse(&b).unwrap().nsid, 1);
    // commands supported and effects: admin at 0, I/O at 1024, writes change content
    let (o, b) = run(&t, &c, &glp(lid::CMD_EFFECTS, 4096, 0), 4096);
    assert_eq!(status(o), Status::SUCCESS);
    let at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    assert_eq!(at(op::IDENTIFY as usize * 4), 1);
    assert_eq!(at(0x80 * 4), 0, "Format NVM is not supported");
    assert_eq!(at(1024 + 0x02 * 4), 1, "read: supported");
    assert_eq!(
        at(1024 + 4),
        3,
        "write (opcode 1): supported, changes content"
    );
    assert_eq!(at(1024 + 0x09 * 4), 3, "dataset management");
    assert_eq!(
        at(1024 + 0x05 * 4),
        1,
        "compare: supported, changes nothing"
    );
    assert_eq!(at(1024 + 0x0D * 4), 1, "reservation register");
    assert_eq!(
        status(run(&t, &d, &glp(lid::CMD_EFFECTS, 4096, 0), 4096).0),
        Status::INVALID_LOG_PAGE
    );
    // a log page may be read in part
    let (o, _) = run(&t, &c, &glp(lid::SMART, 128, 0), 128);
    assert_eq!(status(o), Status::SUCCESS);
}

#[test]
fn ana_identify_log_and_event() {
    use nvme::ana::{parse_log, AnaState};
    let (t, c, d) = setup();
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
    let id = IdentifyController::parse(&b).unwrap();
    assert_eq!(id.cmic & 0x0A, 0x0A, "multi-controller, ANA");
    assert_eq!((id.anacap, id.anagrpmax, id.nanagrpid), (0x1F, 128, 128));
    assert_ne!(id.anatt, 0);
    assert_ne!(id.oaes & oaes::ANA_CHANGE, 0);
    let (_, b) = run(&t, &d, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
    assert_eq!(IdentifyController::parse(&b).unwrap().cmic, 0, "discovery");
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 5, 0, 0), 4096);
    assert_eq!(IdentifyNamespace::parse(&b).unwrap().anagrpid, 1);
    // The log page: group 1 with both namespaces, optimized.
    let glp = |lsp: u8, rae: bool| {
        GetLogPage {
            lid: lid::ANA,
            lsp,
            rae,
            len: 4096,
            offset: 0,
        }
        .to_command(1, 0xFFFF_FFFF)
    };
    let (o, b) = run(&t, &c, &glp(0, false), 4096);
    assert_eq!(status(o), Status::SUCCESS);
    let (count, groups) = parse_log(&b).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0].id, groups[0].state, &groups[0].nsids[..]),
        (1, AnaState::Optimized, &[1, 5][..])
    );
    let (_, b) = run(&t, &c, &glp(1, false), 4096);
    assert!(parse_log(&b).unwrap().1[0].nsids.is_empty(), "RGO");
    assert_eq!(
        status(run(&t, &d, &glp(0, false), 4096).0),
        Status::INVALID_LOG_PAGE
    );
    // A change at the controller's listener: the state, the count, one
    // notice until the log is read (with RAE it stays masked).
    let mut l: crate::model::ana::Configured = [(1, AnaState::Inaccessible)].into_iter().collect();
    assert!(
        !c.notify_ana_changed(),
        "the host did not enable the notice"
    );
    let aec = cmd(
        op::SET_FEATURES,
        0,
        fid::ASYNC_EVENT_CONFIG as u32,
        oaes::ANA_CHANGE,
    );
    assert_eq!(status(run(&t, &c, &aec, 0).0), Status::SUCCESS);
    assert_eq!(t.ana.update(&[(0, &l)]), vec![0]);
    assert!(c.notify_ana_changed());
    assert!(!c.notify_ana_changed(), "masked until the log is read");
    assert_eq!(
        c.state().events.front().copied(),
        Some(0x000C_0302),
        "notice, ANA change, log 0x0C"
    );
    let (_, b) = run(&t, &c, &glp(0, true), 4096);
    let (count2, groups) = parse_log(&b).unwrap();
    assert!(count2 > count);
    assert_eq!(groups[0].state, AnaState::Inaccessible);
    assert!(!c.notify_ana_changed(), "read with RAE: still masked");
    run(&t, &c, &glp(0, false), 4096);
    l.clear();
    t.ana.update(&[(0, &l)]);
    assert!(
        c.notify_ana_changed(),
        "read: the next change raises a notice"
    );
}

#[test]
fn host_behavior_and_retry_delay() {
    let (t, c, d) = setup();
    let (_, b) = run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), 4096);
    assert_eq!(
        IdentifyController::parse(&b).unwrap().crdt,
        [CRDT1_100MS, 0, 0]
    );
    let hb = fid::HOST_BEHAVIOR as u32;
    let (o, b) = run(&t, &c, &cmd(op::GET_FEATURES, 0, hb, 0), 512);
    assert_eq!((status(o), b[0]), (Status::SUCCESS, 0), "ACRE off at first");
    let mut data = vec![0u8; 512];
    data[0] = 1;
    let o = execute(
        &t,
        &c,
        &cmd(op::SET_FEATURES, 0, hb, 0),
        &mut data,
        Instant::now(),
    );
    assert_eq!(status(o), Status::SUCCESS);
    assert!(c.state().acre);
    let (_, b) = run(&t, &c, &cmd(op::GET_FEATURES, 0, hb, 0), 512);
    assert_eq!(b[0], 1);
    assert_eq!(
        status(run(&t, &c, &cmd(op::SET_FEATURES, 0, hb, 0), 16).0),
        Status::SGL_INVALID_DATA
    );
    assert_eq!(
        status(run(&t, &d, &cmd(op::GET_FEATURES, 0, hb, 0), 512).0),
        Status::INVALID_FIELD
    );
}

#[test]
fn reservation_features() {
    let (t, c, _) = setup();
    let set = |nsid, v| cmd(op::SET_FEATURES, nsid, fid::RESV_MASK as u32, v);
    let get = |nsid| cmd(op::GET_FEATURES, nsid, fid::RESV_MASK as u32, 0);
    assert_eq!(status(run(&t, &c, &set(1, 4), 0).0), Status::SUCCESS);
    assert_eq!(c.state().resv_notices.mask(1), 4);
    assert_eq!(status(run(&t, &c, &set(1, 1), 0).0), Status::INVALID_FIELD);
    assert_eq!(status(run(&t, &c, &set(9, 4), 0).0), Status::INVALID_NS);
    assert_eq!(
        status(run(&t, &c, &set(0xFFFF_FFFF, 8), 0).0),
        Status::SUCCESS
    );
    assert_eq!(c.state().resv_notices.mask(5), 8);
    match run(&t, &c, &get(1), 0).0 {
        AdminOutcome::Done { result, .. } => assert_eq!(result, 8),
        o => panic!("{o:?}"),
    }
    let ptpl = |set: bool, v| {
        let opc = if set {
            op::SET_FEATURES
        } else {
            op::GET_FEATURES
        };
        cmd(opc, 1, fid::RESV_PERSIST as u32, v)
    };
    assert_eq!(status(run(&t, &c, &ptpl(false, 0), 0).0), Status::SUCCESS);
    assert_eq!(status(run(&t, &c, &ptpl(true, 0), 0).0), Status::SUCCESS);
    assert_eq!(
        status(run(&t, &c, &ptpl(true, 1), 0).0),
        Status::INVALID_FIELD,
        "the null namespace cannot persist"
    );
}

#[test]
fn features_and_aer() {
    let (t, c, d) = setup();
    let (o, _) = run(
        &t,
        &c,
        &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 3 | 3 << 16),
        0,
    );
    assert_eq!(
        o,
        AdminOutcome::Done {
            status: Status::SUCCESS,
            result: 3 | 3 << 16,
            data_len: 0
        }
    );
    assert_eq!(c.state().io_queues, 4);
    let (o, _) = run(
        &t,
        &c,
        &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 500 | 500 << 16),
        0,
    );
    let m = (crate::MAX_IO_QUEUES - 1) as u64;
    assert_eq!(
        o,
        AdminOutcome::Done {
            status: Status::SUCCESS,
            result: m | m << 16,
            data_len: 0
        }
    );
    assert_eq!(
        status(
            run(
                &t,
                &c,
                &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 0xFFFF),
                0
            )
            .0
        ),
        Status::INVALID_FIELD
    );
    assert_eq!(
        status(
            run(
                &t,
                &d,
                &cmd(op::SET_FEATURES, 0, fid::NUM_QUEUES as u32, 1),
                0
            )
            .0
        ),
        Status::INVALID_FIELD
    );
    run(
        &t,
        &c,
        &cmd(op::SET_FEATURES, 0, fid::KEEP_ALIVE_TIMER as u32, 15000),
        0,
    );
    assert_eq!(c.state().kato_ms, 15000);
    assert_eq!(
        status(
            run(
                &t,
                &c,
                &cmd(
                    op::SET_FEATURES,
                    0,
                    1 << 31 | fid::KEEP_ALIVE_TIMER as u32,
                    1
                ),
                0
            )
            .0
        ),
        Status::FEATURE_NOT_SAVEABLE
    );
    let (o, b) = run(
        &t,
        &c,
        &cmd(op::GET_FEATURES, 0, fid::HOST_ID as u32, 1),
        16,
    );
    assert_eq!(status(o), Status::SUCCESS);
    assert_eq!(b, vec![3; 16]);
    assert_eq!(
        status(run(&t, &c, &cmd(op::GET_FEATURES, 0, 0x77, 0), 0).0),
        Status::INVALID_FIELD
    );
    for _ in 0..crate::MAX_AERS {
        assert_eq!(
            run(&t, &c, &cmd(op::ASYNC_EVENT_REQUEST, 0, 0, 0), 0).0,
            AdminOutcome::Parked
        );
    }
    assert_eq!(
        status(run(&t, &c, &cmd(op::ASYNC_EVENT_REQUEST, 0, 0, 0), 0).0),
        Status::AER_LIMIT_EXCEEDED
    );
    assert_eq!(
        status(run(&t, &c, &cmd(0x80, 0, 0, 0), 0).0),
        Status::INVALID_OPCODE
    );
    assert_eq!(
        status(run(&t, &c, &cmd(op::KEEP_ALIVE, 0, 0, 0), 0).0),
        Status::SUCCESS
    );
}

#[test]
fn not_ready_is_sequence_error() {
    let (t, c, _) = setup();
    c.state().property_set(prop::CC, false, 0).unwrap();
    assert_eq!(
        status(run(&t, &c, &cmd(op::IDENTIFY, 0, 1, 0), IDENTIFY_SIZE).0),
        Status::CMD_SEQ_ERROR
    );
}
