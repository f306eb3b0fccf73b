//! NVMe/TCP PDUs (NVMe over Fabrics TCP Transport specification): the
//! common header, connection initialization (ICReq/ICResp), command and
//! response capsules, data (H2CData, C2HData), ready-to-transfer (R2T) and
//! termination requests, header and data digests (CRC32C), and [`parse`],
//! which frames a byte stream into PDUs and checks every field a peer
//! controls before anything uses it.

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::completion::Completion;
use crate::{CQE_SIZE, SQE_SIZE};

/// PDU types.
pub mod pdu_type {
    /// Initialize Connection Request (host).
    pub const ICREQ: u8 = 0x0;
    /// Initialize Connection Response (controller).
    pub const ICRESP: u8 = 0x1;
    /// Host to controller termination request.
    pub const H2C_TERM: u8 = 0x2;
    /// Controller to host termination request.
    pub const C2H_TERM: u8 = 0x3;
    /// Command capsule (host).
    pub const CMD: u8 = 0x4;
    /// Response capsule (controller).
    pub const RSP: u8 = 0x5;
    /// Host to controller data.
    pub const H2C_DATA: u8 = 0x6;
    /// Controller to host data.
    pub const C2H_DATA: u8 = 0x7;
    /// Ready to transfer (controller).
    pub const R2T: u8 = 0x9;
}

/// Common header flags.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGST: u8 = 1 << 0;
    /// A data digest follows the data.
    pub const DDGST: u8 = 1 << 1;
    /// The last data PDU of a transfer.
    pub const DATA_LAST: u8 = 1 << 2;
    /// C2HData: the command succeeded; no response capsule follows.
    pub const DATA_SUCCESS: u8 = 1 << 3;
}

/// The digests a connection uses (ICReq/ICResp DGST bits).
pub mod digest {
    /// Header digests.
    pub const HEADER: u8 = 1 << 0;
    /// Data digests.
    pub const DATA: u8 = 1 << 1;
}

/// Fatal error status of a termination request.
pub mod fes {
    /// A header field is invalid (FEI: its byte offset).
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// A PDU arrived out of sequence.
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    /// The header digest did not match.
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    /// Data outside the range the command or the R2T allows.
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    /// More data than the PDU or R2T limits allow.
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    /// A parameter (PFV, digest, alignment) is not supported.
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// Bytes of the common header.
pub const CH_SIZE: usize = 8;
/// Bytes of a digest.
pub const DIGEST_SIZE: usize = 4;
/// Bytes of ICReq and ICResp.
pub const IC_SIZE: usize = 128;
/// Header bytes of a command capsule.
pub const CMD_HLEN: usize = CH_SIZE + SQE_SIZE;
/// Header bytes of a response capsule.
pub const RSP_HLEN: usize = CH_SIZE + CQE_SIZE;
/// Header bytes of H2CData, C2HData, R2T and the termination requests.
pub const DATA_HLEN: usize = 24;
/// The longest termination request: its header and the offending PDU's
/// header (at most 128 bytes).
pub const MAX_TERM_PLEN: usize = DATA_HLEN + 128;
/// The smallest MAXH2CDATA a controller may give.
pub const MIN_MAXH2CDATA: u32 = 4096;

/// CRC32C of `data`, as the digests carry it.
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// PDU type.
    pub pdu_type: u8,
    /// Flags.
    pub flags: u8,
    /// Header length.
    pub hlen: u8,
    /// Data offset (0: no data).
    pub pdo: u8,
    /// Length of the whole PDU.
    pub plen: u32,
}

impl Header {
    /// Parses the first 8 bytes of `b` (which must hold them).
    pub fn parse(b: &[u8]) -> Header {
        Header {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32_at(b, 4),
        }
    }

    /// Writes it into the first 8 bytes of `b`.
    pub fn encode_into(&self, b: &mut [u8]) {
        b[0] = self.pdu_type;
        b[1] = self.flags;
        b[2] = self.hlen;
        b[3] = self.pdo;
        put_u32(b, 4, self.plen);
    }
}

/// ICReq and ICResp share a layout: PFV, an alignment, the digests and a
/// 32-bit limit after the common header.
fn encode_ic(t: u8, pfv: u16, pda: u8, digest: u8, limit: u32) -> [u8; IC_SIZE] {
    let mut b = [0u8; IC_SIZE];
    Header {
        pdu_type: t,
        flags: 0,
        hlen: IC_SIZE as u8,
        pdo: 0,
        plen: IC_SIZE as u32,
    }
    .encode_into(&mut b);
    put_u16(&mut b, 8, pfv);
    b[10] = pda;
    b[11] = digest;
    put_u32(&mut b, 12, limit);
    b
}

/// What a host asks in its ICReq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment: data in PDUs to the host starts at a
    /// multiple of (hpda + 1) × 4 bytes.
    pub hpda: u8,
    /// Digests the host asks for ([`digest`]).
    pub digest: u8,
    /// Outstanding R2Ts per command the host takes (0's based).
    pub maxr2t: u32,
}

impl IcReq {
    /// Encodes the whole PDU.
    pub fn encode(&self) -> [u8; IC_SIZE] {
        encode_ic(
            pdu_type::ICREQ,
            self.pfv,
            self.hpda,
            self.digest,
            self.maxr2t,
        )
    }
}

/// What a controller answers in its ICResp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version (0).
    pub pfv: u16,
    /// Controller PDU data alignment (as `hpda`).
    pub cpda: u8,
    /// Digests the connection uses.
    pub digest: u8,
    /// The most data in one H2CData PDU.
    pub maxh2cdata: u32,
}

impl IcResp {
    /// Encodes the whole PDU.
    pub fn encode(&self) -> [u8; IC_SIZE] {
        encode_ic(
            pdu_type::ICRESP,
            self.pfv,
            self.cpda,
            self.digest,
            self.maxh2cdata,
        )
    }

    /// Parses a whole ICResp PDU (the initiator's side).
    pub fn parse(b: &[u8]) -> Option<IcResp> {
        if b.len() < IC_SIZE || b[0] != pdu_type::ICRESP {
            return None;
        }
        Some(IcResp {
            pfv: u16_at(b, 8),
            cpda: b[10],
            digest: b[11],
            maxh2cdata: u32_at(b, 12),
        })
    }
}

/// The fields of H2CData and C2HData after the common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// The command's identifier.
    pub cccid: u16,
    /// The transfer tag of the R2T it answers (H2CData).
    pub ttag: u16,
    /// Offset of the data in the command's data.
    pub datao: u32,
    /// Bytes of data.
    pub datal: u32,
}

impl DataHeader {
    /// The fields of the data PDU at the start of `pdu` (which holds its
    /// header).
    fn parse(pdu: &[u8]) -> DataHeader {
        DataHeader {
            cccid: u16_at(pdu, 8),
            ttag: u16_at(pdu, 10),
            datao: u32_at(pdu, 12),
            datal: u32_at(pdu, 16),
        }
    }
}

/// An R2T: the host may send `r2tl` bytes from `r2to` of command `cccid`'s
/// data, tagged `ttag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// The command's identifier.
    pub cccid: u16,
    /// Transfer tag.
    pub ttag: u16,
    /// Offset.
    pub r2to: u32,
    /// Length.
    pub r2tl: u32,
}

/// A PDU parsed from the stream; data borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// Initialize Connection Request.
    IcReq(IcReq),
    /// Initialize Connection Response.
    IcResp(IcResp),
    /// A command capsule and its in-capsule data.
    Cmd {
        /// The 64-byte command.
        sqe: &'a [u8],
        /// In-capsule data.
        data: &'a [u8],
        /// The data digest matched (or the connection uses none).
        data_ok: bool,
    },
    /// A response capsule.
    Rsp(Completion),
    /// Data for a command.
    Data {
        /// H2CData (true) or C2HData.
        h2c: bool,
        /// Its fields.
        hdr: DataHeader,
        /// Its flags (last, success).
        flags: u8,
        /// The data.
        data: &'a [u8],
        /// The data digest matched (or the connection uses none).
        data_ok: bool,
    },
    /// Ready to transfer.
    R2t(R2t),
    /// A termination request.
    Term {
        /// From the host (H2CTermReq).
        h2c: bool,
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
}

/// A fatal error of the stream: what a termination request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fatal {
    /// Fatal error status ([`fes`]).
    pub fes: u16,
    /// Fatal error information (for an invalid header field, its offset).
    pub fei: u32,
}

impl Fatal {
    fn field(offset: u32) -> Fatal {
        Fatal {
            fes: fes::INVALID_HEADER_FIELD,
            fei: offset,
        }
    }
}

/// What a receiving side allows and uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Receiving as the controller (the host's PDU types).
    pub controller: bool,
    /// The connection initialized (digests and alignment agreed); before
    /// that only ICReq (ICResp) may arrive, after it never again.
    pub initialized: bool,
    /// Header digests in use.
    pub hdgst: bool,
    /// Data digests in use.
    pub ddgst: bool,
    /// The alignment of data in the PDUs received ((x + 1) × 4 bytes).
    pub pda: u8,
    /// The most in-capsule data.
    pub max_capsule_data: u32,
    /// The most data in one data PDU.
    pub max_data: u32,
}

impl Rules {
    /// What a host receives by before the ICResp: only an ICResp (or a
    /// termination request), data PDUs of at most `max_data` later.
    pub fn host(max_data: u32) -> Rules {
        Rules {
            controller: false,
            initialized: false,
            hdgst: false,
            ddgst: false,
            pda: 0,
            max_capsule_data: 0,
            max_data,
        }
    }

    /// The connection initialized with the digests `digest` agreed (its
    /// [`digest`] bits): these rules take them, and the returned layout is
    /// how this side sends, aligning data as the peer asked (`peer_pda`).
    pub fn agree(&mut self, digest: u8, peer_pda: u8) -> Layout {
        self.initialized = true;
        self.hdgst = digest & digest::HEADER != 0;
        self.ddgst = digest & digest::DATA != 0;
        Layout {
            hdgst: self.hdgst,
            ddgst: self.ddgst,
            pda: peer_pda,
        }
    }

    /// The longest PDU these rules accept: what a receive buffer must hold.
    pub fn max_plen(&self) -> usize {
        let hd = if self.hdgst { DIGEST_SIZE } else { 0 };
        let dd = if self.ddgst { DIGEST_SIZE } else { 0 };
        let pad = (self.pda as usize + 1) * 4;
        let data = DATA_HLEN + hd + pad + self.max_data as usize + dd;
        self.max_buffered().max(data)
    }

    /// The longest a receive buffer must hold when the data of the peer's
    /// data PDUs is received straight into the commands' buffers once
    /// their header is in ([`data_start`]): the longest other PDU, or a
    /// data PDU's header with its digest and padding.
    pub fn max_buffered(&self) -> usize {
        let hd = if self.hdgst { DIGEST_SIZE } else { 0 };
        let dd = if self.ddgst { DIGEST_SIZE } else { 0 };
        let pad = (self.pda as usize + 1) * 4;
        let cmd = CMD_HLEN + hd + pad + self.max_capsule_data as usize + dd;
        let data_header = align_up(DATA_HLEN + hd, pad);
        cmd.max(data_header).max(IC_SIZE).max(MAX_TERM_PLEN)
    }
}

fn align_up(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// A PDU's common header, checked against the rules: its type, where its
/// data lies and how long it is.
#[derive(Debug, Clone, Copy)]
struct Framed {
    t: u8,
    flags: u8,
    hlen: usize,
    hdgst: bool,
    has_data: bool,
    data_at: usize,
    dd: usize,
    plen: usize,
}

/// Checks the common header at the start of `buf` (`None`: less than a
/// common header) against `rules`: every field but the header digest,
/// which needs the whole header.
fn frame(buf: &[u8], rules: &Rules) -> Result<Option<Framed>, Fatal> {
    if buf.len() < CH_SIZE {
        return Ok(None);
    }
    let h = Header::parse(buf);
    let t = h.pdu_type;
    let theirs = if rules.controller {
        matches!(
            t,
            pdu_type::ICREQ | pdu_type::H2C_TERM | pdu_type::CMD | pdu_type::H2C_DATA
        )
    } else {
        matches!(
            t,
            pdu_type::ICRESP
                | pdu_type::C2H_TERM
                | pdu_type::RSP
                | pdu_type::C2H_DATA
                | pdu_type::R2T
        )
    };
    if !theirs {
        return Err(Fatal::field(0));
    }
    let ic = matches!(t, pdu_type::ICREQ | pdu_type::ICRESP);
    let term = matches!(t, pdu_type::H2C_TERM | pdu_type::C2H_TERM);
    if ic == rules.initialized && !term {
        return Err(Fatal {
            fes: fes::PDU_SEQUENCE_ERROR,
            fei: 0,
        });
    }
    let hlen = match t {
        pdu_type::ICREQ | pdu_type::ICRESP => IC_SIZE,
        pdu_type::CMD => CMD_HLEN,
        pdu_type::RSP => RSP_HLEN,
        _ => DATA_HLEN,
    };
    if h.hlen as usize != hlen {
        return Err(Fatal::field(2));
    }
    // Digests: none on the initialization and termination PDUs; on the
    // others exactly as agreed.
    let hdgst = rules.hdgst && !ic && !term;
    if (h.flags & flags::HDGST != 0) != hdgst {
        return Err(Fatal::field(1));
    }
    let hd = if hdgst { DIGEST_SIZE } else { 0 };
    let has_data =
        matches!(t, pdu_type::CMD | pdu_type::H2C_DATA | pdu_type::C2H_DATA) && h.pdo != 0;
    let plen = h.plen as usize;
    let max_data = match t {
        pdu_type::CMD => rules.max_capsule_data as usize,
        pdu_type::H2C_DATA | pdu_type::C2H_DATA => rules.max_data as usize,
        _ => 0,
    };
    let dd = if rules.ddgst && has_data {
        DIGEST_SIZE
    } else {
        0
    };
    if (h.flags & flags::DDGST != 0) != (dd != 0) {
        return Err(Fatal::field(1));
    }
    let data_at = if has_data {
        let pdo = h.pdo as usize;
        if pdo != align_up(hlen + hd, (rules.pda as usize + 1) * 4) {
            return Err(Fatal::field(3));
        }
        pdo
    } else {
        // A termination request carries the offending header after its
        // own, whatever its PDO says.
        if h.pdo != 0 && !term {
            return Err(Fatal::field(3));
        }
        hlen + hd
    };
    let plen_ok = if term {
        (DATA_HLEN..=MAX_TERM_PLEN).contains(&plen)
    } else if has_data {
        plen > data_at + dd && plen - data_at - dd <= max_data
    } else {
        plen == hlen + hd
    };
    if !plen_ok {
        return Err(if has_data && plen > data_at + dd {
            Fatal {
                fes: fes::DATA_LIMIT_EXCEEDED,
                fei: 0,
            }
        } else {
            Fatal::field(4)
        });
    }
    Ok(Some(Framed {
        t,
        flags: h.flags,
        hlen,
        hdgst,
        has_data,
        data_at,
        dd,
        plen,
    }))
}

/// Checks the header digest (when `hdgst`) of the header of `hlen` bytes at
/// the start of `buf`, which holds the digest too: a mismatch is fatal.
fn header_digest(buf: &[u8], hdgst: bool, hlen: usize) -> Result<(), Fatal> {
    if hdgst && crc(&buf[..hlen]) != u32_at(buf, hlen) {
        return Err(Fatal {
            fes: fes::HEADER_DIGEST_ERROR,
            fei: 0,
        });
    }
    Ok(())
}

/// Frames the next PDU from the start of `buf` under `rules`: `Ok(None)`
/// while `buf` holds less than a whole PDU (once its common header is in,
/// only after its length was checked against the rules: the caller's
/// buffer never needs more than [`Rules::max_plen`]); otherwise the PDU
/// and its length. Every header field is checked; a data digest that does
/// not match is reported with the PDU (`data_ok`), a header digest that
/// does not match is fatal.
pub fn parse<'a>(buf: &'a [u8], rules: &Rules) -> Result<Option<(Pdu<'a>, usize)>, Fatal> {
    let Some(Framed {
        t,
        flags: hflags,
        hlen,
        hdgst,
        has_data,
        data_at,
        dd,
        plen,
    }) = frame(buf, rules)?
    else {
        return Ok(None);
    };
    if buf.len() < plen {
        return Ok(None);
    }
    let pdu = &buf[..plen];
    header_digest(pdu, hdgst, hlen)?;
    let data = if has_data {
        &pdu[data_at..plen - dd]
    } else {
        &pdu[..0]
    };
    let data_ok = dd == 0 || crc(data) == u32_at(pdu, plen - dd);
    let out = match t {
        pdu_type::ICREQ => {
            let r = IcReq {
                pfv: u16_at(pdu, 8),
                hpda: pdu[10],
                digest: pdu[11],
                maxr2t: u32_at(pdu, 12),
            };
            if r.pfv != 0 {
                return Err(Fatal {
                    fes: fes::UNSUPPORTED_PARAMETER,
                    fei: 8,
                });
            }
            if r.hpda > 31 {
                return Err(Fatal {
                    fes: fes::UNSUPPORTED_PARAMETER,
                    fei: 10,
                });
            }
            Pdu::IcReq(r)
        }
        pdu_type::ICRESP => Pdu::IcResp(IcResp::parse(pdu).ok_or(Fatal::field(0))?),
        pdu_type::CMD => Pdu::Cmd {
            sqe: &pdu[CH_SIZE..CMD_HLEN],
            data,
            data_ok,
        },
        pdu_type::RSP => {
            Pdu::Rsp(Completion::parse(&pdu[CH_SIZE..RSP_HLEN]).map_err(|_| Fatal::field(8))?)
        }
        pdu_type::H2C_DATA | pdu_type::C2H_DATA => Pdu::Data {
            h2c: t == pdu_type::H2C_DATA,
            hdr: DataHeader::parse(pdu),
            flags: hflags,
            data,
            data_ok,
        },
        pdu_type::R2T => Pdu::R2t(R2t {
            cccid: u16_at(pdu, 8),
            ttag: u16_at(pdu, 10),
            r2to: u32_at(pdu, 12),
            r2tl: u32_at(pdu, 16),
        }),
        _ => Pdu::Term {
            h2c: t == pdu_type::H2C_TERM,
            fes: u16_at(pdu, 8),
            fei: u32_at(pdu, 10),
        },
    };
    if let Pdu::Data { hdr, .. } = out {
        if hdr.datal as usize != data.len() {
            return Err(Fatal::field(16));
        }
    }
    Ok(Some((out, plen)))
}

/// The start of a data PDU whose header is in: what [`data_start`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataStart {
    /// H2CData (true) or C2HData.
    pub h2c: bool,
    /// Its fields.
    pub hdr: DataHeader,
    /// Its flags (last, success).
    pub flags: u8,
    /// Where its data starts (its PDO).
    pub data_at: usize,
    /// Its whole length: `data_at`, its data, then a data digest when
    /// `ddgst`.
    pub plen: usize,
    /// A data digest follows the data.
    pub ddgst: bool,
}

/// The start of the data PDU at the start of `buf` (the peer's: H2CData to
/// a controller, C2HData to a host) once its header, header digest and
/// padding are in, checked as [`parse`] checks them, so that its data can
/// be received straight into the command's buffer rather than through the
/// caller's. `None` for another PDU, a data PDU without data, or less than
/// its header: [`parse`] frames those.
pub fn data_start(buf: &[u8], rules: &Rules) -> Result<Option<DataStart>, Fatal> {
    let Some(f) = frame(buf, rules)? else {
        return Ok(None);
    };
    if !f.has_data
        || !matches!(f.t, pdu_type::H2C_DATA | pdu_type::C2H_DATA)
        || buf.len() < f.data_at
    {
        return Ok(None);
    }
    header_digest(buf, f.hdgst, f.hlen)?;
    let hdr = DataHeader::parse(buf);
    if hdr.datal as usize != f.plen - f.data_at - f.dd {
        return Err(Fatal::field(16));
    }
    Ok(Some(DataStart {
        h2c: f.t == pdu_type::H2C_DATA,
        hdr,
        flags: f.flags,
        data_at: f.data_at,
        plen: f.plen,
        ddgst: f.dd != 0,
    }))
}

/// How the PDUs a side sends are laid out: the digests agreed and the
/// alignment the receiver asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Header digests.
    pub hdgst: bool,
    /// Data digests.
    pub ddgst: bool,
    /// The receiver's data alignment ((x + 1) × 4 bytes).
    pub pda: u8,
}

impl Layout {
    fn flags(&self, data: bool) -> u8 {
        let mut f = 0;
        if self.hdgst {
            f |= flags::HDGST;
        }
        if self.ddgst && data {
            f |= flags::DDGST;
        }
        f
    }

    /// Header bytes (common header, fields, header digest, padding) of a
    /// PDU of `pdu_type` with header `fields` (after the common header) and
    /// `data_len` bytes of data; the data (and its digest, [`crc`]) follow.
    pub fn header(&self, pdu_type: u8, extra_flags: u8, fields: &[u8], data_len: u32) -> Vec<u8> {
        let hlen = CH_SIZE + fields.len();
        let hd = if self.hdgst { DIGEST_SIZE } else { 0 };
        let data = data_len > 0;
        let dd = if self.ddgst && data { DIGEST_SIZE } else { 0 };
        let pdo = if data {
            align_up(hlen + hd, (self.pda as usize + 1) * 4)
        } else {
            0
        };
        let head = if data { pdo } else { hlen + hd };
        let plen = head + data_len as usize + dd;
        let mut b = vec![0u8; head];
        Header {
            pdu_type,
            flags: self.flags(data) | extra_flags,
            hlen: hlen as u8,
            pdo: pdo as u8,
            plen: plen as u32,
        }
        .encode_into(&mut b);
        b[CH_SIZE..hlen].copy_from_slice(fields);
        if self.hdgst {
            let c = crc(&b[..hlen]);
            put_u32(&mut b, hlen, c);
        }
        b
    }

    /// A response capsule carrying `cqe`.
    pub fn rsp(&self, cqe: &Completion) -> Vec<u8> {
        let mut f = [0u8; CQE_SIZE];
        cqe.encode_into(&mut f);
        self.header(pdu_type::RSP, 0, &f, 0)
    }

    /// A command capsule carrying `sqe` and `data_len` bytes in-capsule.
    pub fn cmd(&self, sqe: &[u8; SQE_SIZE], data_len: u32) -> Vec<u8> {
        self.header(pdu_type::CMD, 0, sqe, data_len)
    }

    /// An R2T.
    pub fn r2t(&self, r: &R2t) -> Vec<u8> {
        let mut f = [0u8; DATA_HLEN - CH_SIZE];
        put_u16(&mut f, 0, r.cccid);
        put_u16(&mut f, 2, r.ttag);
        put_u32(&mut f, 4, r.r2to);
        put_u32(&mut f, 8, r.r2tl);
        self.header(pdu_type::R2T, 0, &f, 0)
    }

    /// The header of a data PDU (H2CData when `h2c`, else C2HData) with
    /// `extra_flags` ([`flags::DATA_LAST`], [`flags::DATA_SUCCESS`]).
    pub fn data(&self, h2c: bool, d: &DataHeader, extra_flags: u8) -> Vec<u8> {
        let mut f = [0u8; DATA_HLEN - CH_SIZE];
        put_u16(&mut f, 0, d.cccid);
        put_u16(&mut f, 2, d.ttag);
        put_u32(&mut f, 4, d.datao);
        put_u32(&mut f, 8, d.datal);
        let t = if h2c {
            pdu_type::H2C_DATA
        } else {
            pdu_type::C2H_DATA
        };
        self.header(t, extra_flags, &f, d.datal)
    }
}

/// A termination request (C2HTermReq when `c2h`) with `fatal`, carrying the
/// offending PDU's header (`offending`, cut to what the PDU may carry).
pub fn term(c2h: bool, fatal: Fatal, offending: &[u8]) -> Vec<u8> {
    let off = &offending[..offending.len().min(MAX_TERM_PLEN - DATA_HLEN)];
    let plen = DATA_HLEN + off.len();
    let mut b = vec![0u8; plen];
    Header {
        pdu_type: if c2h {
            pdu_type::C2H_TERM
        } else {
            pdu_type::H2C_TERM
        },
        flags: 0,
        hlen: DATA_HLEN as u8,
        pdo: if off.is_empty() { 0 } else { DATA_HLEN as u8 },
        plen: plen as u32,
    }
    .encode_into(&mut b);
    put_u16(&mut b, 8, fatal.fes);
    put_u32(&mut b, 10, fatal.fei);
    b[DATA_HLEN..].copy_from_slice(off);
    b
}

#[cfg(test)]
mod tests;
