//! Builders for the commands the initiator sends. Pure functions: each returns
//! a 64-byte [`Command`] with cid 0 (the queue sets the cid and the SGL).

use nvme::command::Command;
use nvme::fabrics::{ConnectCommand, PropertyCommand};
use nvme::log::GetLogPage;
use nvme::opcode::{self, admin, cns, io};

/// Feature identifiers the initiator sets.
pub mod fid {
    /// Number of queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Asynchronous event configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep-alive timer.
    pub const KEEP_ALIVE: u8 = 0x0F;
}

/// Fabrics Connect for queue `qid` with `sqsize` entries (1-based count; the
/// command carries it 0-based) and keep-alive `kato_ms` (admin queue only).
pub fn connect(qid: u16, sqsize: u16, kato_ms: u32) -> Command {
    ConnectCommand {
        recfmt: 0,
        qid,
        sqsize: sqsize.saturating_sub(1),
        cattr: 0,
        kato: kato_ms,
    }
    .to_command(0)
}

/// Property Get of a 4-byte (`eight == false`) or 8-byte property.
pub fn property_get(offset: u32, eight: bool) -> Command {
    PropertyCommand {
        eight_bytes: eight,
        offset,
        value: 0,
    }
    .to_command(0, false)
}

/// Property Set of a 4-byte property.
pub fn property_set(offset: u32, value: u32) -> Command {
    PropertyCommand {
        eight_bytes: false,
        offset,
        value: value as u64,
    }
    .to_command(0, true)
}

/// Identify with `cns` for `nsid` (4096 bytes of data).
pub fn identify(cns: u8, nsid: u32) -> Command {
    let mut c = Command::new(admin::IDENTIFY, 0);
    c.set_nsid(nsid);
    c.set_cdw(10, cns as u32);
    c
}

/// Identify Controller.
pub fn identify_controller() -> Command {
    identify(cns::CONTROLLER, 0)
}

/// Identify Namespace `nsid`.
pub fn identify_namespace(nsid: u32) -> Command {
    identify(cns::NAMESPACE, nsid)
}

/// Identify Active Namespace List (NSIDs above `after`).
pub fn active_namespaces(after: u32) -> Command {
    identify(cns::ACTIVE_NS_LIST, after)
}

/// Get Log Page `lid` for `nsid`: `len` bytes (a non-zero multiple of 4) from
/// byte `offset`; `rae` retains the asynchronous event.
pub fn get_log_page(lid: u8, nsid: u32, offset: u64, len: u32, rae: bool) -> Command {
    GetLogPage {
        lid,
        lsp: 0,
        rae,
        len: len as u64,
        offset,
    }
    .to_command(0, nsid)
}

/// Set Features `fid` with cdw11 = `value`.
pub fn set_features(fid: u8, value: u32) -> Command {
    let mut c = Command::new(admin::SET_FEATURES, 0);
    c.set_cdw(10, fid as u32);
    c.set_cdw(11, value);
    c
}

/// Set Features Number of Queues: ask for `n` submission and completion queues.
pub fn set_num_queues(n: u16) -> Command {
    let v = n.saturating_sub(1) as u32;
    set_features(fid::NUM_QUEUES, v | v << 16)
}

/// Keep Alive.
pub fn keep_alive() -> Command {
    Command::new(admin::KEEP_ALIVE, 0)
}

/// Asynchronous Event Request.
pub fn async_event_request() -> Command {
    Command::new(admin::ASYNC_EVENT_REQUEST, 0)
}

fn rw(op: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Command {
    let mut c = Command::new(op, 0);
    c.set_nsid(nsid);
    c.set_cdw(10, slba as u32);
    c.set_cdw(11, (slba >> 32) as u32);
    c.set_cdw(12, (nlb.saturating_sub(1) & 0xFFFF) | (fua as u32) << 30);
    c
}

/// Read `nlb` blocks (1..=65536) from `slba`.
pub fn read(nsid: u32, slba: u64, nlb: u32) -> Command {
    rw(io::READ, nsid, slba, nlb, false)
}

/// Write `nlb` blocks (1..=65536) at `slba`, optionally with Force Unit Access.
pub fn write(nsid: u32, slba: u64, nlb: u32, fua: bool) -> Command {
    rw(io::WRITE, nsid, slba, nlb, fua)
}

/// Compare `nlb` blocks at `slba` with the command's data.
pub fn compare(nsid: u32, slba: u64, nlb: u32) -> Command {
    rw(io::COMPARE, nsid, slba, nlb, false)
}

/// A fused Compare and Write of `nlb` blocks at `slba`: the Compare (first)
/// and the Write (second), to submit back to back on one queue.
pub fn compare_and_write(nsid: u32, slba: u64, nlb: u32) -> [Command; 2] {
    let mut c = compare(nsid, slba, nlb);
    c.set_fuse(nvme::command::fuse::FIRST);
    let mut w = write(nsid, slba, nlb, false);
    w.set_fuse(nvme::command::fuse::SECOND);
    [c, w]
}

/// Write Zeroes of `nlb` blocks at `slba`.
pub fn write_zeroes(nsid: u32, slba: u64, nlb: u32) -> Command {
    rw(io::WRITE_ZEROES, nsid, slba, nlb, false)
}

/// Flush.
pub fn flush(nsid: u32) -> Command {
    let mut c = Command::new(io::FLUSH, 0);
    c.set_nsid(nsid);
    c
}

/// Dataset Management with the Deallocate attribute over `nr` ranges (the
/// 16-byte range entries travel as data, see [`dsm_range`]).
pub fn deallocate(nsid: u32, nr: u32) -> Command {
    let mut c = Command::new(io::DATASET_MANAGEMENT, 0);
    c.set_nsid(nsid);
    c.set_cdw(10, nr.saturating_sub(1) & 0xFF);
    c.set_cdw(11, 1 << 2);
    c
}

/// One 16-byte Dataset Management range: `nlb` blocks from `slba`.
pub fn dsm_range(slba: u64, nlb: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[4..8].copy_from_slice(&nlb.to_le_bytes());
    b[8..16].copy_from_slice(&slba.to_le_bytes());
    b
}

/// A readable name for a command, for error messages.
pub fn name(c: &Command) -> &'static str {
    if c.is_fabrics() {
        return match c.fctype() {
            opcode::fctype::CONNECT => "Connect",
            opcode::fctype::PROPERTY_GET => "Property Get",
            opcode::fctype::PROPERTY_SET => "Property Set",
            _ => "Fabrics command",
        };
    }
    match c.opcode() {
        admin::IDENTIFY => "Identify",
        admin::GET_LOG_PAGE => "Get Log Page",
        admin::SET_FEATURES => "Set Features",
        admin::GET_FEATURES => "Get Features",
        admin::KEEP_ALIVE => "Keep Alive",
        admin::ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
        _ => "command",
    }
}

/// A readable name for an I/O command.
pub fn io_name(c: &Command) -> &'static str {
    match c.opcode() {
        io::READ => "Read",
        io::WRITE => "Write",
        io::FLUSH => "Flush",
        io::WRITE_ZEROES => "Write Zeroes",
        io::DATASET_MANAGEMENT => "Dataset Management",
        _ => "I/O command",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::fabrics::prop;
    use nvme::opcode::DataDirection;

    #[test]
    fn read_write_fields() {
        let c = read(3, 0x1_2345_6789, 8);
        assert_eq!(c.opcode(), io::READ);
        assert_eq!(c.nsid(), 3);
        assert_eq!(c.slba(), 0x1_2345_6789);
        assert_eq!(c.nlb(), 8);
        assert!(!c.fua());
        assert_eq!(c.psdt(), 1, "SGL for data");
        assert_eq!(c.data_direction(), DataDirection::ControllerToHost);
        let w = write(1, 7, 65536, true);
        assert_eq!(w.nlb(), 65536);
        assert!(w.fua());
        assert_eq!(w.data_direction(), DataDirection::HostToController);
        assert_eq!(write_zeroes(1, 5, 1).opcode(), io::WRITE_ZEROES);
        assert_eq!(flush(9).nsid(), 9);
    }

    #[test]
    fn fabrics_fields() {
        let c = connect(2, 128, 0);
        let f = ConnectCommand::from_command(&c);
        assert_eq!((f.qid, f.sqsize, f.kato), (2, 127, 0));
        assert_eq!(c.fctype(), opcode::fctype::CONNECT);
        let a = connect(0, 32, 5000);
        assert_eq!(ConnectCommand::from_command(&a).kato, 5000);
        let g = property_get(prop::CAP, true);
        let p = PropertyCommand::from_command(&g);
        assert!(p.eight_bytes);
        assert_eq!(g.fctype(), opcode::fctype::PROPERTY_GET);
        let s = property_set(prop::CC, 0x460001);
        let p = PropertyCommand::from_command(&s);
        assert_eq!(
            (p.offset, p.value, p.eight_bytes),
            (prop::CC, 0x460001, false)
        );
    }

    #[test]
    fn admin_fields() {
        let q = set_num_queues(4);
        assert_eq!(q.cdw(10), 7);
        assert_eq!(q.cdw(11), 0x0003_0003);
        let l = get_log_page(0x70, 0, 2048, 1024, false);
        let g = GetLogPage::from_command(&l);
        assert_eq!((g.lid, g.offset, g.len, g.rae), (0x70, 2048, 1024, false));
        assert_eq!(identify_controller().cdw(10), 1);
        assert_eq!(active_namespaces(5).nsid(), 5);
        assert_eq!(name(&keep_alive()), "Keep Alive");
    }

    #[test]
    fn dsm() {
        let c = deallocate(1, 2);
        assert_eq!(c.cdw(10), 1);
        assert_eq!(c.cdw(11), 4);
        let r = dsm_range(0x10, 8);
        assert_eq!(u32::from_le_bytes(r[4..8].try_into().unwrap()), 8);
        assert_eq!(u64::from_le_bytes(r[8..16].try_into().unwrap()), 0x10);
    }
}
