//! Data a host sends for its writes. Each R2T opens a transfer (the
//! request's pool buffer and its length), and each H2CData PDU is checked
//! against its transfer (tag, command, offset, length, last flag) before its
//! data goes to that buffer. A PDU whose header is in while its data is not
//! yet is received straight into the buffer ([`Transfers::start`],
//! [`Transfers::receive`]), as nvmet receives into the command's pages: data
//! is not copied through the connection's receive buffer, which holds at
//! most a capsule, and one PDU may carry a whole transfer (MAXH2CDATA is the
//! largest transfer).

use nvme::tcp::{self, fes, flags, DataHeader, DataStart, Fatal};

use crate::queue::Token;
use crate::request::pool::Buf;

/// Data a request waits for: its R2T went out.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transfer {
    /// The request.
    pub req: Token,
    /// Its command's identifier.
    pub cid: u16,
    buf: Buf,
    len: u32,
    got: u32,
    /// Every PDU's data digest matched (or the connection uses none).
    pub ok: bool,
}

/// The PDU whose data arrives straight in its transfer's buffer.
#[derive(Debug)]
struct Direct {
    /// Its transfer (the R2T's tag).
    tag: usize,
    /// Where its data goes in the transfer, and how much.
    datao: u32,
    datal: u32,
    /// Bytes of its data received.
    filled: u32,
    last: bool,
    /// Its data digest (the bytes received of it), when the connection
    /// uses data digests.
    digest: Option<([u8; 4], usize)>,
}

/// A connection's open transfers, by tag, and the PDU received directly.
#[derive(Debug, Default)]
pub(super) struct Transfers {
    open: Vec<Option<Transfer>>,
    direct: Option<Direct>,
}

impl Transfers {
    /// The R2T for request `req` (command `cid`), `len` bytes into `buf`,
    /// went out tagged `tag`.
    pub fn open(&mut self, tag: u16, req: Token, cid: u16, buf: Buf, len: u32) {
        let t = tag as usize;
        if self.open.len() <= t {
            self.open.resize(t + 1, None);
        }
        self.open[t] = Some(Transfer {
            req,
            cid,
            buf,
            len,
            got: 0,
            ok: true,
        });
    }

    /// The transfers still open (the connection ends: their data never
    /// comes); none stays.
    pub fn take_all(&mut self) -> Vec<Transfer> {
        self.direct = None;
        std::mem::take(&mut self.open)
            .into_iter()
            .flatten()
            .collect()
    }

    /// A PDU's data is being received straight into its buffer.
    pub fn receiving(&self) -> bool {
        self.direct.is_some()
    }

    /// Checks a data PDU's header against its transfer: its tag, command,
    /// offset (the next byte the transfer waits for), length (within the
    /// R2T's) and last flag (on the PDU that ends it, only there).
    fn check(&self, hdr: &DataHeader, f: u8) -> Result<usize, Fatal> {
        let t = hdr.ttag as usize;
        let Some(h) = self.open.get(t).and_then(|h| h.as_ref()) else {
            return Err(field(10));
        };
        if h.cid != hdr.cccid {
            return Err(field(8));
        }
        let end = hdr.datao as u64 + hdr.datal as u64;
        if hdr.datao != h.got || end > h.len as u64 {
            return Err(Fatal {
                fes: fes::DATA_OUT_OF_RANGE,
                fei: 0,
            });
        }
        if (end == h.len as u64) != (f & flags::DATA_LAST != 0) {
            return Err(field(1));
        }
        Ok(t)
    }

    /// A whole PDU from the receive buffer: `data` goes to its transfer's
    /// buffer in `pool` (`data_ok`: its digest matched). The transfer, once
    /// its last data came.
    pub fn whole(
        &mut self,
        pool: *mut u8,
        hdr: &DataHeader,
        f: u8,
        data: &[u8],
        data_ok: bool,
    ) -> Result<Option<Transfer>, Fatal> {
        let t = self.check(hdr, f)?;
        let Some(h) = self.open[t].as_mut() else {
            return Err(field(10));
        };
        let dst = pool.wrapping_add(h.buf.offset + hdr.datao as usize);
        // SAFETY: within the request's pool buffer (`check` bounded the
        // range by the R2T's length, which the buffer holds); the request
        // waits for this data and nothing else uses the buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        h.got += hdr.datal;
        h.ok &= data_ok;
        Ok(self.end(t, f & flags::DATA_LAST != 0))
    }

    /// A data PDU whose header is in (`s`): the rest of it is received
    /// straight into its transfer's buffer. `have`: the bytes of it already
    /// received after its header (never all of it), placed at once.
    pub fn start(
        &mut self,
        pool: *mut u8,
        s: &DataStart,
        have: &[u8],
    ) -> Result<Option<Transfer>, Fatal> {
        let tag = self.check(&s.hdr, s.flags)?;
        self.direct = Some(Direct {
            tag,
            datao: s.hdr.datao,
            datal: s.hdr.datal,
            filled: 0,
            last: s.flags & flags::DATA_LAST != 0,
            digest: s.ddgst.then_some(([0; 4], 0)),
        });
        let mut have = have;
        let mut done = None;
        while !have.is_empty() {
            let Some((dst, room)) = self.next(pool) else {
                break;
            };
            let n = room.min(have.len());
            // SAFETY: `next` gave `room` writable bytes at `dst` (the
            // transfer's buffer, or the digest's array); `have` is the
            // receive buffer, another allocation.
            unsafe { std::ptr::copy_nonoverlapping(have.as_ptr(), dst, n) };
            have = &have[n..];
            done = self.advance(pool, n);
        }
        Ok(done.flatten())
    }

    /// Receives more of the PDU being received directly: `read` reads the
    /// socket into the slice it is given. The bytes read, and the transfer
    /// when this ended its last PDU.
    pub fn receive(
        &mut self,
        pool: *mut u8,
        read: impl FnOnce(&mut [u8]) -> std::io::Result<usize>,
    ) -> std::io::Result<(usize, Option<Transfer>)> {
        let Some((dst, room)) = self.next(pool) else {
            // Not reached: a PDU received directly keeps its transfer open.
            self.direct = None;
            return Err(std::io::Error::other("a data PDU without its transfer"));
        };
        // SAFETY: `next` gave `room` writable bytes at `dst`, which nothing
        // else uses while the PDU is received (the request waits for its
        // data; the digest's array is this struct's).
        let buf = unsafe { std::slice::from_raw_parts_mut(dst, room) };
        let n = read(buf)?;
        if n == 0 {
            return Ok((0, None));
        }
        Ok((n, self.advance(pool, n).flatten()))
    }

    /// Where the next bytes of the PDU received directly go (its data in
    /// the transfer's buffer, then its digest), and how many may.
    fn next(&mut self, pool: *mut u8) -> Option<(*mut u8, usize)> {
        let d = self.direct.as_mut()?;
        if d.filled < d.datal {
            let h = self.open.get(d.tag)?.as_ref()?;
            let at = h.buf.offset + (d.datao + d.filled) as usize;
            return Some((pool.wrapping_add(at), (d.datal - d.filled) as usize));
        }
        let (bytes, got) = d.digest.as_mut()?;
        (*got < 4).then(|| (bytes[*got..].as_mut_ptr(), 4 - *got))
    }

    /// `n` bytes arrived where [`Transfers::next`] said. `Some` once the
    /// PDU is whole: its transfer, if the PDU was its last.
    fn advance(&mut self, pool: *mut u8, n: usize) -> Option<Option<Transfer>> {
        let d = self.direct.as_mut()?;
        if d.filled < d.datal {
            d.filled += n as u32;
        } else if let Some((_, got)) = d.digest.as_mut() {
            *got += n;
        }
        let whole = d.filled == d.datal && d.digest.is_none_or(|(_, got)| got == 4);
        if !whole {
            return None;
        }
        let d = self.direct.take()?;
        let h = self.open.get_mut(d.tag)?.as_mut()?;
        if let Some((bytes, _)) = d.digest {
            let at = pool.wrapping_add(h.buf.offset + d.datao as usize);
            // SAFETY: the PDU's data, just received into the request's
            // buffer (within it: checked at `start`).
            let data = unsafe { std::slice::from_raw_parts(at, d.datal as usize) };
            h.ok &= tcp::crc(data) == u32::from_le_bytes(bytes);
        }
        h.got += d.datal;
        Some(self.end(d.tag, d.last))
    }

    /// The transfer tagged `t`, taken if `last` ended it.
    fn end(&mut self, t: usize, last: bool) -> Option<Transfer> {
        match last {
            true => self.open.get_mut(t)?.take(),
            false => None,
        }
    }
}

fn field(offset: u32) -> Fatal {
    Fatal {
        fes: fes::INVALID_HEADER_FIELD,
        fei: offset,
    }
}
