//! NVM command set (I/O queue) commands: validation and planning, without I/O.
//!
//! [`prepare`] runs when a capsule arrives, before any data moves, so that a bad
//! command is answered without touching host memory or the backend.

use nix::errno::Errno;
use nvme::opcode::io as op;
use nvme::{Command, Status};

use crate::model::namespace::Namespace;
use crate::request::plan::IoPlan;

fn lba_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok((slba << ns.block_shift, nlb << ns.block_shift)),
        _ => Err(Status::LBA_RANGE),
    }
}

/// Whether `opc` is an I/O command this target implements.
pub fn supported(opc: u8) -> bool {
    matches!(
        opc,
        op::FLUSH
            | op::WRITE
            | op::READ
            | op::COMPARE
            | op::WRITE_ZEROES
            | op::DATASET_MANAGEMENT
            | op::RESV_REGISTER
            | op::RESV_REPORT
            | op::RESV_ACQUIRE
            | op::RESV_RELEASE
    )
}

/// Validates an I/O command against its namespace and the data length its SGL
/// names, and returns what to do.
pub fn prepare(
    ns: Option<&Namespace>,
    cmd: &Command,
    sgl_len: u32,
    max_io: u32,
) -> Result<IoPlan, Status> {
    let opc = cmd.opcode();
    if !supported(opc) {
        return Err(Status::INVALID_OPCODE);
    }
    // Only Compare and Write fuse: the Compare first, the Write second.
    match (cmd.fuse(), opc) {
        (nvme::command::fuse::NONE, _)
        | (nvme::command::fuse::FIRST, op::COMPARE)
        | (nvme::command::fuse::SECOND, op::WRITE) => {}
        _ => return Err(Status::INVALID_FIELD),
    }
    let ns = ns.ok_or(Status::INVALID_NS)?;
    if let op::RESV_REGISTER | op::RESV_REPORT | op::RESV_ACQUIRE | op::RESV_RELEASE = opc {
        return prepare_resv(ns, cmd, sgl_len, max_io);
    }
    let writes = matches!(opc, op::WRITE | op::WRITE_ZEROES)
        || (opc == op::DATASET_MANAGEMENT && cmd.cdw(11) & 4 != 0);
    if writes && ns.readonly {
        return Err(Status::NS_WRITE_PROTECTED);
    }
    match opc {
        op::READ | op::WRITE | op::COMPARE => {
            let (offset, len) = lba_range(ns, cmd.slba(), cmd.nlb() as u64)?;
            if len > max_io as u64 {
                return Err(Status::INVALID_FIELD);
            }
            if len != sgl_len as u64 {
                return Err(Status::SGL_INVALID_DATA);
            }
            let len = len as u32;
            Ok(if opc == op::READ {
                IoPlan::Read { offset, len }
            } else if opc == op::COMPARE {
                IoPlan::Compare { offset, len }
            } else {
                IoPlan::Write {
                    offset,
                    len,
                    fua: cmd.fua(),
                }
            })
        }
        // Data this namespace's page cache held was lost (a flush failed):
        // no later flush may report it durable, and a retry would not help.
        op::FLUSH if ns.writeback_lost() => Err(Status::INTERNAL.no_retry()),
        op::FLUSH => Ok(IoPlan::Flush),
        op::WRITE_ZEROES => {
            let (offset, len) = lba_range(ns, cmd.slba(), cmd.nlb() as u64)?;
            Ok(IoPlan::WriteZeroes {
                offset,
                len,
                fua: cmd.fua(),
            })
        }
        _ => {
            let nr = (cmd.cdw(10) & 0xFF) + 1;
            // The ranges must fit the data; more data is allowed: the Linux host
            // always sends a 4 KiB buffer (room for 256 ranges, "some devices
            // ignore NR"), and nvmet checks only that the ranges fit.
            if sgl_len < nr * 16 {
                return Err(Status::SGL_INVALID_DATA);
            }
            Ok(IoPlan::Dsm {
                nr,
                deallocate: cmd.cdw(11) & 4 != 0,
            })
        }
    }
}

/// A reservation command: its data must be exactly what it carries (the
/// keys) or asks for (the report), as nvmet checks.
fn prepare_resv(
    ns: &Namespace,
    cmd: &Command,
    sgl_len: u32,
    max_io: u32,
) -> Result<IoPlan, Status> {
    use nvme::reservation::{ReportCommand, ResvCommand};
    if !ns.resv.enabled() {
        return Err(Status::INVALID_OPCODE);
    }
    let opcode = cmd.opcode();
    let len = if opcode == op::RESV_REPORT {
        ReportCommand::from_command(cmd).len
    } else {
        ResvCommand::data_len(opcode) as u64
    };
    if len > max_io as u64 {
        return Err(Status::INVALID_FIELD);
    }
    if len != sgl_len as u64 {
        return Err(Status::SGL_INVALID_DATA);
    }
    Ok(IoPlan::Resv {
        opcode,
        len: len as u32,
    })
}

/// Parses and checks Dataset Management ranges; returns byte (offset, len) pairs,
/// skipping empty ranges.
pub fn dsm_ranges(ns: &Namespace, data: &[u8], nr: u32) -> Result<Vec<(u64, u64)>, Status> {
    let mut out = Vec::with_capacity(nr as usize);
    for r in data.chunks_exact(16).take(nr as usize) {
        let nlb = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as u64;
        let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
        let (o, l) = lba_range(ns, slba, nlb)?;
        if l > 0 {
            out.push((o, l));
        }
    }
    Ok(out)
}

/// Maps a backend errno to an NVMe status for the given plan.
pub fn errno_status(plan: &IoPlan, errno: i32) -> Status {
    match Errno::from_raw(errno) {
        Errno::ENOSPC => Status::CAPACITY_EXCEEDED.retryable(),
        Errno::EROFS | Errno::EPERM | Errno::EACCES => Status::NS_WRITE_PROTECTED,
        Errno::EOPNOTSUPP => Status::INVALID_OPCODE,
        Errno::EINVAL => Status::INVALID_FIELD,
        // This gateway was fenced (EBLOCKLISTED): nothing it sends the
        // cluster lands any more, so the host retries through another
        // gateway, which owns the image now.
        Errno::ESHUTDOWN => Status::ANA_INACCESSIBLE,
        // A write the cluster did not answer in time may still land later:
        // retried elsewhere, it could be overwritten by itself, older, after
        // newer writes. Not retryable.
        Errno::ETIMEDOUT if plan.writes() => Status::WRITE_FAULT.no_retry(),
        // A store that cannot be reached now (a Ceph cluster whose OSDs do
        // not answer; a gateway still waiting to own its image): the host
        // retries, after CRDT1 if it enabled ACRE.
        Errno::ETIMEDOUT | Errno::EAGAIN | Errno::ENOTCONN | Errno::ECONNREFUSED => {
            Status::NS_NOT_READY.with_crd(1)
        }
        _ => match plan {
            IoPlan::Read { .. } | IoPlan::Compare { .. } => Status::UNRECOVERED_READ_ERROR,
            IoPlan::Write { .. } | IoPlan::WriteZeroes { .. } => Status::WRITE_FAULT,
            _ => Status::INTERNAL,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(blocks: u64, ro: bool) -> Namespace {
        Namespace::new(
            "nqn.test",
            1,
            Box::new(crate::backend::null::Null::default()),
            blocks * 512,
            512,
            ro,
        )
    }

    #[test]
    fn a_lost_writeback_fails_every_later_flush_for_good() {
        let n = ns(8, false);
        let flush = Command::new(op::FLUSH, 1);
        assert_eq!(prepare(Some(&n), &flush, 0, 4096), Ok(IoPlan::Flush));
        n.lose_writeback();
        let st = prepare(Some(&n), &flush, 0, 4096).unwrap_err();
        assert_eq!(st, Status::INTERNAL.no_retry());
        assert!(st.dnr, "a retry would be told the data is durable");
        // Reads and writes go on (the host learns of the loss by its flushes).
        assert!(prepare(Some(&n), &rw(op::READ, 0, 1), 512, 4096).is_ok());
    }

    fn rw(opc: u8, slba: u64, nlb: u32) -> Command {
        let mut c = Command::new(opc, 1);
        c.set_nsid(1);
        c.set_cdw(10, slba as u32);
        c.set_cdw(11, (slba >> 32) as u32);
        c.set_cdw(12, nlb - 1);
        c
    }

    #[test]
    fn read_write() {
        let n = ns(1000, false);
        assert_eq!(
            prepare(Some(&n), &rw(op::READ, 10, 8), 4096, 131072),
            Ok(IoPlan::Read {
                offset: 5120,
                len: 4096
            })
        );
        let mut w = rw(op::WRITE, 992, 8);
        w.set_cdw(12, w.cdw(12) | 1 << 30);
        assert_eq!(
            prepare(Some(&n), &w, 4096, 131072),
            Ok(IoPlan::Write {
                offset: 992 * 512,
                len: 4096,
                fua: true
            })
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::WRITE, 993, 8), 4096, 131072),
            Err(Status::LBA_RANGE)
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::READ, u64::MAX, 1), 512, 131072),
            Err(Status::LBA_RANGE)
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::READ, 0, 8), 512, 131072),
            Err(Status::SGL_INVALID_DATA)
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::READ, 0, 512), 262144, 131072),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            prepare(None, &rw(op::READ, 0, 1), 512, 131072),
            Err(Status::INVALID_NS)
        );
        assert_eq!(
            prepare(Some(&n), &rw(0x7E, 0, 1), 512, 131072),
            Err(Status::INVALID_OPCODE)
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::FLUSH, 0, 1), 0, 131072),
            Ok(IoPlan::Flush)
        );
    }

    #[test]
    fn readonly() {
        let n = ns(1000, true);
        assert_eq!(
            prepare(Some(&n), &rw(op::WRITE, 0, 1), 512, 131072),
            Err(Status::NS_WRITE_PROTECTED)
        );
        assert!(prepare(Some(&n), &rw(op::READ, 0, 1), 512, 131072).is_ok());
    }

    #[test]
    fn zeroes_and_dsm() {
        let n = ns(1000, false);
        assert_eq!(
            prepare(Some(&n), &rw(op::WRITE_ZEROES, 100, 100), 0, 131072),
            Ok(IoPlan::WriteZeroes {
                offset: 51200,
                len: 51200,
                fua: false
            })
        );
        let mut fua = rw(op::WRITE_ZEROES, 100, 100);
        fua.set_cdw(12, fua.cdw(12) | 1 << 30);
        assert_eq!(
            prepare(Some(&n), &fua, 0, 131072),
            Ok(IoPlan::WriteZeroes {
                offset: 51200,
                len: 51200,
                fua: true
            })
        );
        assert_eq!(
            prepare(Some(&n), &rw(op::WRITE_ZEROES, 901, 100), 0, 131072),
            Err(Status::LBA_RANGE)
        );
        let mut d = Command::new(op::DATASET_MANAGEMENT, 1);
        d.set_nsid(1);
        d.set_cdw(10, 1); // 2 ranges
        d.set_cdw(11, 4);
        let plan = prepare(Some(&n), &d, 32, 131072).unwrap();
        assert_eq!(
            plan,
            IoPlan::Dsm {
                nr: 2,
                deallocate: true
            }
        );
        assert_eq!(plan.data_in_len(), 32);
        assert_eq!(
            prepare(Some(&n), &d, 16, 131072),
            Err(Status::SGL_INVALID_DATA)
        );
        // What the Linux host sends: 4 KiB whatever the number of ranges.
        assert_eq!(prepare(Some(&n), &d, 4096, 131072), Ok(plan));
        let mut data = [0u8; 32];
        data[4..8].copy_from_slice(&8u32.to_le_bytes());
        data[8..16].copy_from_slice(&16u64.to_le_bytes());
        data[20..24].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(dsm_ranges(&n, &data, 2), Ok(vec![(8192, 4096)]));
        data[8..16].copy_from_slice(&999u64.to_le_bytes());
        assert_eq!(dsm_ranges(&n, &data, 2), Err(Status::LBA_RANGE));
    }

    #[test]
    fn errnos() {
        let w = IoPlan::Write {
            offset: 0,
            len: 1,
            fua: false,
        };
        assert_eq!(errno_status(&w, Errno::EIO as i32), Status::WRITE_FAULT);
        assert!(!errno_status(&w, Errno::EIO as i32).dnr);
        assert_eq!(
            errno_status(&IoPlan::Read { offset: 0, len: 1 }, Errno::EIO as i32),
            Status::UNRECOVERED_READ_ERROR
        );
        assert_eq!(
            errno_status(&w, Errno::ENOSPC as i32).code(),
            Status::CAPACITY_EXCEEDED.code()
        );
        let r = IoPlan::Read { offset: 0, len: 1 };
        for e in [Errno::ETIMEDOUT, Errno::EAGAIN] {
            let st = errno_status(&r, e as i32);
            assert_eq!(st, Status::NS_NOT_READY.with_crd(1));
            assert!(!st.dnr, "an unreachable store is retried, after CRDT1");
        }
        let st = errno_status(&w, Errno::ETIMEDOUT as i32);
        assert_eq!(st.code(), Status::WRITE_FAULT.code());
        assert!(st.dnr, "a write that may still land is not retried");
        for p in [w, r] {
            assert_eq!(
                errno_status(&p, Errno::ESHUTDOWN as i32),
                Status::ANA_INACCESSIBLE,
                "a fenced gateway's host goes to another path"
            );
        }
    }
}
