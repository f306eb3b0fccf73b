//! Get Log Page command fields and the log pages a fabrics target serves.

use crate::bytes::*;
use crate::command::Command;
use crate::opcode;
use crate::{need, WireError};

/// Get Log Page command fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetLogPage {
    /// Log page identifier.
    pub lid: u8,
    /// Log specific field (cdw10 bits 14:8 — includes LSP).
    pub lsp: u8,
    /// Retain asynchronous event (cdw10 bit 15).
    pub rae: bool,
    /// Number of bytes to return (from NUMDL/NUMDU, already converted from 0-based dwords).
    pub len: u64,
    /// Byte offset into the log page (cdw12..13).
    pub offset: u64,
}

impl GetLogPage {
    /// Reads the fields from a command.
    pub fn from_command(c: &Command) -> GetLogPage {
        let cdw10 = c.cdw(10);
        let numdl = cdw10 >> 16;
        let numdu = c.cdw(11) & 0xFFFF;
        GetLogPage {
            lid: (cdw10 & 0xFF) as u8,
            lsp: ((cdw10 >> 8) & 0x7F) as u8,
            rae: cdw10 & (1 << 15) != 0,
            len: (((numdu as u64) << 16 | numdl as u64) + 1) * 4,
            offset: (c.cdw(13) as u64) << 32 | c.cdw(12) as u64,
        }
    }

    /// Builds the command. `len` must be a non-zero multiple of 4.
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(opcode::admin::GET_LOG_PAGE, cid);
        c.set_nsid(nsid);
        let numd = (self.len / 4).saturating_sub(1) as u32;
        c.set_cdw(
            10,
            self.lid as u32
                | (self.lsp as u32 & 0x7F) << 8
                | (self.rae as u32) << 15
                | (numd & 0xFFFF) << 16,
        );
        c.set_cdw(11, numd >> 16);
        c.set_cdw(12, self.offset as u32);
        c.set_cdw(13, (self.offset >> 32) as u32);
        c
    }
}

/// Copies the window `[offset, offset+out.len())` of a whole log page into `out`,
/// zero-filling past the end of the page. Returns `false` if `offset` lies beyond
/// the page (the caller answers INVALID_FIELD).
pub fn copy_window(page: &[u8], offset: u64, out: &mut [u8]) -> bool {
    if offset > page.len() as u64 {
        return false;
    }
    let start = offset as usize;
    let n = (page.len() - start).min(out.len());
    out[..n].copy_from_slice(&page[start..start + n]);
    out[n..].fill(0);
    true
}

/// Size of one error information log entry.
pub const ERROR_ENTRY_SIZE: usize = 64;

/// Error information log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorLogEntry {
    /// Error count (unique, increasing; 0 = empty entry).
    pub error_count: u64,
    /// Submission queue id.
    pub sqid: u16,
    /// Command id.
    pub cid: u16,
    /// Status field (bit 0 = phase, as in the CQE).
    pub status: u16,
    /// Parameter error location.
    pub param_error_location: u16,
    /// LBA.
    pub lba: u64,
    /// Namespace.
    pub nsid: u32,
}

impl ErrorLogEntry {
    /// Encodes into 64 bytes.
    pub fn encode(&self) -> [u8; ERROR_ENTRY_SIZE] {
        let mut b = [0u8; ERROR_ENTRY_SIZE];
        put_u64(&mut b, 0, self.error_count);
        put_u16(&mut b, 8, self.sqid);
        put_u16(&mut b, 10, self.cid);
        put_u16(&mut b, 12, self.status);
        put_u16(&mut b, 14, self.param_error_location);
        put_u64(&mut b, 16, self.lba);
        put_u32(&mut b, 24, self.nsid);
        b
    }
    /// Parses 64 bytes.
    pub fn parse(b: &[u8]) -> Result<ErrorLogEntry, WireError> {
        need("error log entry", b, ERROR_ENTRY_SIZE)?;
        Ok(ErrorLogEntry {
            error_count: u64_at(b, 0),
            sqid: u16_at(b, 8),
            cid: u16_at(b, 10),
            status: u16_at(b, 12),
            param_error_location: u16_at(b, 14),
            lba: u64_at(b, 16),
            nsid: u32_at(b, 24),
        })
    }
}

/// Size of the SMART / health information log.
pub const SMART_SIZE: usize = 512;

/// SMART / Health Information log (the counters a target keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    /// Critical warning bits.
    pub critical_warning: u8,
    /// Composite temperature in kelvins.
    pub temperature: u16,
    /// Available spare (percent).
    pub avail_spare: u8,
    /// Available spare threshold (percent).
    pub spare_thresh: u8,
    /// Percentage used.
    pub percent_used: u8,
    /// Data units read (thousands of 512-byte units).
    pub data_units_read: u128,
    /// Data units written.
    pub data_units_written: u128,
    /// Host read commands.
    pub host_reads: u128,
    /// Host write commands.
    pub host_writes: u128,
    /// Power on hours.
    pub power_on_hours: u128,
    /// Media and data integrity errors.
    pub media_errors: u128,
    /// Number of error information log entries.
    pub num_err_log_entries: u128,
}

impl SmartLog {
    /// Encodes into 512 bytes.
    pub fn encode(&self) -> [u8; SMART_SIZE] {
        let mut b = [0u8; SMART_SIZE];
        b[0] = self.critical_warning;
        put_u16(&mut b, 1, self.temperature);
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        let p = |b: &mut [u8], o: usize, v: u128| b[o..o + 16].copy_from_slice(&v.to_le_bytes());
        p(&mut b, 32, self.data_units_read);
        p(&mut b, 48, self.data_units_written);
        p(&mut b, 64, self.host_reads);
        p(&mut b, 80, self.host_writes);
        p(&mut b, 128, self.power_on_hours);
        p(&mut b, 160, self.media_errors);
        p(&mut b, 176, self.num_err_log_entries);
        b
    }
    /// Parses 512 bytes.
    pub fn parse(b: &[u8]) -> Result<SmartLog, WireError> {
        need("SMART log", b, SMART_SIZE)?;
        let g = |o: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[o..o + 16]);
            u128::from_le_bytes(a)
        };
        Ok(SmartLog {
            critical_warning: b[0],
            temperature: u16_at(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            data_units_read: g(32),
            data_units_written: g(48),
            host_reads: g(64),
            host_writes: g(80),
            power_on_hours: g(128),
            media_errors: g(160),
            num_err_log_entries: g(176),
        })
    }
}

/// Size of the changed namespace list log.
pub const CHANGED_NS_SIZE: usize = 4096;

/// Encodes a changed namespace list (up to 1024 ids; more → 0xFFFFFFFF in entry 0).
pub fn encode_changed_ns(ids: &[u32]) -> [u8; CHANGED_NS_SIZE] {
    let mut b = [0u8; CHANGED_NS_SIZE];
    if ids.len() > CHANGED_NS_SIZE / 4 {
        put_u32(&mut b, 0, 0xFFFF_FFFF);
    } else {
        for (i, id) in ids.iter().enumerate() {
            put_u32(&mut b, i * 4, *id);
        }
    }
    b
}

/// Size of the Commands Supported and Effects log page.
pub const CMD_EFFECTS_SIZE: usize = 4096;
/// Commands Supported and Effects: the command is supported (CSUPP).
pub const EFFECT_CSUPP: u32 = 1 << 0;
/// Commands Supported and Effects: the command may change logical block content (LBCC).
pub const EFFECT_LBCC: u32 = 1 << 1;

/// Encodes the Commands Supported and Effects log page: one u32 per admin
/// opcode (bytes 0..1024), then one per I/O opcode (bytes 1024..2048).
pub fn encode_cmd_effects(admin: &[(u8, u32)], io: &[(u8, u32)]) -> [u8; CMD_EFFECTS_SIZE] {
    let mut b = [0u8; CMD_EFFECTS_SIZE];
    for &(opc, e) in admin {
        put_u32(&mut b, opc as usize * 4, e);
    }
    for &(opc, e) in io {
        put_u32(&mut b, 1024 + opc as usize * 4, e);
    }
    b
}

/// Asynchronous event types (CQE result bits 2:0).
pub mod aen {
    /// Error status.
    pub const TYPE_ERROR: u8 = 0;
    /// SMART / health status.
    pub const TYPE_SMART: u8 = 1;
    /// Notice.
    pub const TYPE_NOTICE: u8 = 2;
    /// Notice: namespace attribute changed.
    pub const INFO_NS_CHANGED: u8 = 0;
    /// Notice: Asymmetric Namespace Access change.
    pub const INFO_ANA_CHANGE: u8 = 0x03;
    /// Notice: discovery log page change.
    pub const INFO_DISC_CHANGE: u8 = 0xF0;

    /// The AER completion result: `type | info << 8 | log << 16`.
    pub fn result(kind: u8, info: u8, log: u8) -> u32 {
        kind as u32 | (info as u32) << 8 | (log as u32) << 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn get_log_page_fields() {
        let mut c = Command::new(0x02, 1);
        // lid 0x70, numdl = 1023 → 4096 bytes, offset 1024
        c.set_cdw(10, 0x70 | (1023 << 16));
        c.set_cdw(12, 1024);
        let g = GetLogPage::from_command(&c);
        assert_eq!(g.lid, 0x70);
        assert_eq!(g.len, 4096);
        assert_eq!(g.offset, 1024);
        // numdu
        c.set_cdw(10, 0x02 | (0xFFFF << 16));
        c.set_cdw(11, 1);
        assert_eq!(GetLogPage::from_command(&c).len, 0x20000 * 4);
    }

    #[test]
    fn window() {
        let page: Vec<u8> = (0..100u8).collect();
        let mut out = [0xAAu8; 16];
        assert!(copy_window(&page, 90, &mut out));
        assert_eq!(&out[..10], &page[90..]);
        assert!(out[10..].iter().all(|&x| x == 0));
        assert!(copy_window(&page, 100, &mut out));
        assert!(out.iter().all(|&x| x == 0));
        assert!(!copy_window(&page, 101, &mut out));
    }

    #[test]
    fn entries() {
        let e = ErrorLogEntry {
            error_count: 3,
            sqid: 1,
            cid: 7,
            status: 0x4002 << 1,
            nsid: 1,
            ..Default::default()
        };
        assert_eq!(ErrorLogEntry::parse(&e.encode()).unwrap(), e);
        let s = SmartLog {
            host_reads: 12,
            data_units_written: 5,
            temperature: 300,
            ..Default::default()
        };
        let b = s.encode();
        assert_eq!(&b[64..66], &[12, 0]);
        assert_eq!(SmartLog::parse(&b).unwrap(), s);
        let c = encode_changed_ns(&[1, 5]);
        assert_eq!(&c[..8], &[1, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(&encode_changed_ns(&[1; 1025])[..4], &[0xFF; 4]);
        assert_eq!(aen::result(2, 0, 4), 0x40002);
    }

    proptest! {
        #[test]
        fn glp_roundtrip(lid: u8, lsp in 0u8..0x80, rae: bool, numd in 0u64..(1 << 32), offset: u64) {
            let g = GetLogPage { lid, lsp, rae, len: (numd + 1) * 4, offset };
            prop_assert_eq!(GetLogPage::from_command(&g.to_command(1, 0xFFFFFFFF)), g);
        }
        #[test]
        fn window_never_panics(len in 0usize..200, off: u64, olen in 0usize..300) {
            let page = vec![1u8; len];
            let mut out = vec![0u8; olen];
            let ok = copy_window(&page, off, &mut out);
            prop_assert_eq!(ok, off <= len as u64);
        }
    }
}
