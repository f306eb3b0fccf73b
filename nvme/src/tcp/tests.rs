use proptest::prelude::*;

use super::*;
use crate::Status;

fn ctrl_rules() -> Rules {
    Rules {
        controller: true,
        initialized: true,
        hdgst: false,
        ddgst: false,
        pda: 0,
        max_capsule_data: 8192,
        max_data: 32768,
    }
}

fn sqe(cid: u16) -> [u8; SQE_SIZE] {
    let mut s = [0u8; SQE_SIZE];
    s[0] = 0x01; // write
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s
}

/// A command capsule with `data`, laid out by `l`.
fn capsule(l: &Layout, cid: u16, data: &[u8]) -> Vec<u8> {
    let mut b = l.cmd(&sqe(cid), data.len() as u32);
    b.extend_from_slice(data);
    if l.ddgst && !data.is_empty() {
        b.extend_from_slice(&crc(data).to_le_bytes());
    }
    b
}

fn h2c(l: &Layout, d: &DataHeader, data: &[u8], last: bool) -> Vec<u8> {
    let f = if last { flags::DATA_LAST } else { 0 };
    let mut b = l.data(true, d, f);
    b.extend_from_slice(data);
    if l.ddgst {
        b.extend_from_slice(&crc(data).to_le_bytes());
    }
    b
}

#[test]
fn crc32c_is_the_castagnoli_polynomial() {
    // The check value of CRC-32C.
    assert_eq!(crc(b"123456789"), 0xE306_9283);
}

#[test]
fn icreq_before_anything_else_and_never_again() {
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        digest: digest::HEADER | digest::DATA,
        maxr2t: 0,
    }
    .encode();
    let mut r = ctrl_rules();
    r.initialized = false;
    let (p, n) = parse(&req, &r).unwrap().unwrap();
    assert_eq!(n, IC_SIZE);
    assert!(matches!(p, Pdu::IcReq(IcReq { digest: 3, .. })));
    // A capsule before the connection initialized; an ICReq after.
    let c = capsule(&Layout::default(), 1, &[]);
    assert_eq!(parse(&c, &r).unwrap_err().fes, fes::PDU_SEQUENCE_ERROR);
    assert_eq!(
        parse(&req, &ctrl_rules()).unwrap_err().fes,
        fes::PDU_SEQUENCE_ERROR
    );
    // An unknown format version.
    let mut v = req;
    v[8] = 1;
    assert_eq!(
        parse(&v, &r).unwrap_err(),
        Fatal {
            fes: fes::UNSUPPORTED_PARAMETER,
            fei: 8
        }
    );
}

#[test]
fn capsules_with_and_without_data_digests_and_alignment() {
    for (hdgst, ddgst, pda) in [
        (false, false, 0),
        (true, true, 0),
        (true, false, 3),
        (false, true, 7),
    ] {
        let l = Layout { hdgst, ddgst, pda };
        let mut r = ctrl_rules();
        (r.hdgst, r.ddgst, r.pda) = (hdgst, ddgst, pda);
        let data = vec![0xA5u8; 4096];
        let b = capsule(&l, 7, &data);
        let (p, n) = parse(&b, &r).unwrap().unwrap();
        assert_eq!(n, b.len());
        let Pdu::Cmd {
            sqe: s,
            data: d,
            data_ok,
        } = p
        else {
            panic!("{p:?}")
        };
        assert_eq!(s, &sqe(7)[..]);
        assert_eq!(d, &data[..]);
        assert!(data_ok);
        if pda > 0 {
            assert_eq!(b[3] as usize % ((pda as usize + 1) * 4), 0, "aligned data");
        }
        // Without data.
        let b = capsule(&l, 8, &[]);
        let (p, _) = parse(&b, &r).unwrap().unwrap();
        assert!(matches!(p, Pdu::Cmd { data: [], .. }));
        // Every prefix is incomplete, never an error.
        let b = capsule(&l, 9, &data);
        for cut in [0, 7, 8, 71, 72, b.len() - 1] {
            assert_eq!(parse(&b[..cut], &r), Ok(None), "cut at {cut}");
        }
    }
}

#[test]
fn every_peer_controlled_header_field_is_checked() {
    let r = ctrl_rules();
    let l = Layout::default();
    let good = capsule(&l, 1, &[1, 2, 3, 4]);
    let bad = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        parse(&b, &r).unwrap_err()
    };
    // A PDU type the host never sends, an unknown one.
    assert_eq!(bad(&|b| b[0] = pdu_type::RSP), Fatal::field(0));
    assert_eq!(bad(&|b| b[0] = 0x42), Fatal::field(0));
    // Header length.
    assert_eq!(bad(&|b| b[2] = 24), Fatal::field(2));
    // Digest flags not as agreed.
    assert_eq!(bad(&|b| b[1] |= flags::HDGST), Fatal::field(1));
    assert_eq!(bad(&|b| b[1] |= flags::DDGST), Fatal::field(1));
    // Data offset inside the header, or past the alignment.
    assert_eq!(bad(&|b| b[3] = 70), Fatal::field(3));
    assert_eq!(bad(&|b| b[3] = 76), Fatal::field(3));
    // More in-capsule data than allowed; a length with no data.
    assert_eq!(
        bad(&|b| b[4..8].copy_from_slice(&(72u32 + 8193).to_le_bytes())).fes,
        fes::DATA_LIMIT_EXCEEDED
    );
    assert_eq!(
        bad(&|b| b[4..8].copy_from_slice(&72u32.to_le_bytes())),
        Fatal::field(4)
    );
    // A PDU longer than any allowed is refused from its header alone.
    let mut huge = good.clone();
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(parse(&huge[..8], &r).is_err());
}

#[test]
fn digests_are_checked() {
    let l = Layout {
        hdgst: true,
        ddgst: true,
        pda: 0,
    };
    let mut r = ctrl_rules();
    (r.hdgst, r.ddgst) = (true, true);
    let data = vec![9u8; 512];
    let mut b = capsule(&l, 3, &data);
    b[10] ^= 1; // the command, under the header digest
    assert_eq!(parse(&b, &r).unwrap_err().fes, fes::HEADER_DIGEST_ERROR);
    let mut b = capsule(&l, 3, &data);
    let at = b.len() - 10;
    b[at] ^= 1; // the data, under the data digest
    let (p, _) = parse(&b, &r).unwrap().unwrap();
    assert!(matches!(p, Pdu::Cmd { data_ok: false, .. }));
}

#[test]
fn data_pdus_and_their_lengths() {
    let l = Layout::default();
    let r = ctrl_rules();
    let d = DataHeader {
        cccid: 5,
        ttag: 9,
        datao: 4096,
        datal: 4096,
    };
    let b = h2c(&l, &d, &[7u8; 4096], true);
    let (p, _) = parse(&b, &r).unwrap().unwrap();
    let Pdu::Data {
        h2c: true,
        hdr,
        flags: f,
        data,
        data_ok: true,
    } = p
    else {
        panic!("{p:?}")
    };
    assert_eq!(hdr, d);
    assert_eq!(f & flags::DATA_LAST, flags::DATA_LAST);
    assert_eq!(data.len(), 4096);
    // DATAL that is not the data's length.
    let mut b2 = b.clone();
    b2[16..20].copy_from_slice(&4000u32.to_le_bytes());
    assert_eq!(parse(&b2, &r).unwrap_err(), Fatal::field(16));
    // More than MAXH2CDATA in one PDU.
    let big = DataHeader { datal: 32769, ..d };
    let b3 = h2c(&l, &big, &vec![0u8; 32769], true);
    assert_eq!(parse(&b3, &r).unwrap_err().fes, fes::DATA_LIMIT_EXCEEDED);
}

/// A data PDU's start is known from its header alone (its data then goes
/// straight to the command's buffer), checked as a whole PDU is.
#[test]
fn a_data_pdus_start_from_its_header_alone() {
    for (hdgst, ddgst, pda) in [(false, false, 0), (true, true, 0), (true, false, 3)] {
        let mut r = ctrl_rules();
        r.hdgst = hdgst;
        r.ddgst = ddgst;
        r.pda = pda;
        let l = Layout { hdgst, ddgst, pda };
        let d = DataHeader {
            cccid: 5,
            ttag: 9,
            datao: 8192,
            datal: 4096,
        };
        let b = h2c(&l, &d, &[7u8; 4096], true);
        let s = data_start(&b, &r).unwrap().expect("a data PDU");
        assert_eq!((s.h2c, s.hdr, s.plen, s.ddgst), (true, d, b.len(), ddgst));
        assert_eq!(s.flags & flags::DATA_LAST, flags::DATA_LAST);
        assert_eq!(s.data_at, b[3] as usize, "its PDO");
        // The header, its digest and padding suffice; one byte less does not.
        assert_eq!(data_start(&b[..s.data_at], &r).unwrap(), Some(s));
        assert_eq!(data_start(&b[..s.data_at - 1], &r).unwrap(), None);
        // The same as the whole PDU parsed.
        let (Pdu::Data { hdr, data, .. }, n) = parse(&b, &r).unwrap().unwrap() else {
            panic!()
        };
        assert_eq!((hdr, n), (d, s.plen));
        assert_eq!(data, &b[s.data_at..s.data_at + 4096]);
        if hdgst {
            let mut bad = b.clone();
            bad[12] ^= 1;
            assert_eq!(
                data_start(&bad[..s.data_at], &r).unwrap_err().fes,
                fes::HEADER_DIGEST_ERROR
            );
        }
        // DATAL that is not the data's length.
        let mut b2 = b.clone();
        b2[16..20].copy_from_slice(&4000u32.to_le_bytes());
        if hdgst {
            let c = crc(&b2[..DATA_HLEN]).to_le_bytes();
            b2[DATA_HLEN..DATA_HLEN + 4].copy_from_slice(&c);
        }
        assert_eq!(data_start(&b2, &r).unwrap_err(), Fatal::field(16));
    }
    // Not a data PDU, or a host's data PDU to a host: parse frames it.
    let r = ctrl_rules();
    let c = capsule(&Layout::default(), 1, &[1u8; 512]);
    assert_eq!(data_start(&c, &r).unwrap(), None);
    assert_eq!(data_start(&c[..4], &r).unwrap(), None);
    let d = DataHeader {
        cccid: 5,
        ttag: 9,
        datao: 0,
        datal: 32769,
    };
    let big = h2c(&Layout::default(), &d, &[0u8; 64], true);
    assert_eq!(
        data_start(&big[..DATA_HLEN], &r).unwrap_err().fes,
        fes::DATA_LIMIT_EXCEEDED
    );
}

#[test]
fn the_controllers_pdus_parse_on_the_hosts_side() {
    let l = Layout {
        hdgst: true,
        ddgst: false,
        pda: 0,
    };
    let r = Rules {
        controller: false,
        hdgst: true,
        ..ctrl_rules()
    };
    let cqe = Completion {
        result: 1,
        sq_head: 2,
        sq_id: 1,
        cid: 44,
        status: Status::SUCCESS,
        phase: false,
    };
    let b = l.rsp(&cqe);
    let (p, _) = parse(&b, &r).unwrap().unwrap();
    assert_eq!(p, Pdu::Rsp(cqe));
    let t = R2t {
        cccid: 44,
        ttag: 3,
        r2to: 0,
        r2tl: 8192,
    };
    let b = l.r2t(&t);
    let (p, _) = parse(&b, &r).unwrap().unwrap();
    assert_eq!(p, Pdu::R2t(t));
    let mut init = r;
    init.initialized = false;
    let resp = IcResp {
        pfv: 0,
        cpda: 0,
        digest: digest::HEADER,
        maxh2cdata: 32768,
    };
    let b = resp.encode();
    let (p, _) = parse(&b, &init).unwrap().unwrap();
    assert_eq!(p, Pdu::IcResp(resp));
    let offending = capsule(&Layout::default(), 1, &[]);
    let tr = term(true, Fatal::field(2), &offending);
    let (p, n) = parse(&tr, &r).unwrap().unwrap();
    assert_eq!(n, DATA_HLEN + CMD_HLEN);
    assert_eq!(
        p,
        Pdu::Term {
            h2c: false,
            fes: fes::INVALID_HEADER_FIELD,
            fei: 2
        }
    );
}

proptest! {
    /// Whatever a peer sends: no panic, and a PDU is never longer than
    /// the rules allow (what bounds the receive buffer).
    #[test]
    fn parsing_never_panics_and_stays_within_the_rules(
        b in proptest::collection::vec(any::<u8>(), 0..300),
        hdgst in any::<bool>(), ddgst in any::<bool>(), init in any::<bool>(), ctrl in any::<bool>(),
    ) {
        let r = Rules { controller: ctrl, initialized: init, hdgst, ddgst, pda: 0, max_capsule_data: 64, max_data: 64 };
        if let Ok(Some((_, n))) = parse(&b, &r) {
            prop_assert!(n <= r.max_plen());
            prop_assert!(n <= b.len());
        }
        if let Ok(Some(s)) = data_start(&b, &r) {
            prop_assert!(s.data_at <= b.len() && s.data_at < s.plen);
            prop_assert!(s.plen <= r.max_plen());
            prop_assert_eq!(s.hdr.datal as usize + s.data_at + if s.ddgst { 4 } else { 0 }, s.plen);
        }
        if b.len() >= CH_SIZE {
            if let Ok(None) = parse(&b[..CH_SIZE], &r) {
                let plen = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
                prop_assert!(plen <= r.max_plen());
            }
        }
    }
}
