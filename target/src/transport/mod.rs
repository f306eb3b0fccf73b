//! Transport-level command checks (sans-IO): queue connection parameters from
//! the RDMA-CM private data, and where a command's data comes from or goes to,
//! from its SGL.

pub mod abort;
pub mod loopback;
pub mod rdma;

use nvme::cm::{CmRequest, RejectStatus};
use nvme::opcode::DataDirection;
use nvme::sgl::{kind, subtype};
use nvme::{Command, Sgl, Status};

/// Parameters of a queue accepted at the RDMA-CM level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueParams {
    /// Queue id (0 = admin).
    pub qid: u16,
    /// Submission queue entries (hsqsize + 1): receive buffers to post.
    pub sq_size: u16,
    /// Responses the host can take at once.
    pub host_rq_size: u16,
}

/// Checks a connect request's private data.
pub fn check_cm_request(private: &[u8]) -> Result<QueueParams, RejectStatus> {
    if private.len() < nvme::cm::REQ_SIZE {
        return Err(RejectStatus::InvalidLen);
    }
    let r = CmRequest::parse(private).map_err(|_| RejectStatus::InvalidLen)?;
    if r.recfmt != 0 {
        return Err(RejectStatus::InvalidRecfmt);
    }
    let max = if r.qid == 0 {
        crate::ADMIN_QUEUE_SIZE
    } else {
        crate::MAX_QUEUE_SIZE
    };
    if r.hsqsize == 0 || r.hsqsize >= max {
        return Err(RejectStatus::InvalidHsqsize);
    }
    if r.hrqsize == 0 {
        return Err(RejectStatus::InvalidHrqsize);
    }
    if r.qid > crate::MAX_IO_QUEUES {
        return Err(RejectStatus::InvalidQid);
    }
    Ok(QueueParams {
        qid: r.qid,
        sq_size: r.hsqsize + 1,
        host_rq_size: r.hrqsize,
    })
}

/// Where a command's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPlan {
    /// No data.
    None,
    /// Host to target: already in the capsule at `offset` of the in-capsule area.
    InCapsule {
        /// Offset into the in-capsule data.
        offset: u32,
        /// Length.
        len: u32,
    },
    /// Host to target (a host write): fetched by RDMA READ from the host's
    /// window.
    FromHost {
        /// Remote address.
        addr: u64,
        /// Length.
        len: u32,
        /// Remote key.
        key: u32,
    },
    /// Target to host (a host read): sent by RDMA WRITE to the host's
    /// window.
    ToHost {
        /// Remote address.
        addr: u64,
        /// Length.
        len: u32,
        /// Remote key.
        key: u32,
    },
}

impl DataPlan {
    /// Data length.
    pub fn len(&self) -> u32 {
        match *self {
            DataPlan::None => 0,
            DataPlan::InCapsule { len, .. }
            | DataPlan::FromHost { len, .. }
            | DataPlan::ToHost { len, .. } => len,
        }
    }
    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Checks a command's transfer fields and SGL. `in_capsule` is how many data
/// bytes arrived after the 64-byte command; `max_len` the largest transfer.
/// Returns the data plan and, for keyed SGLs with subtype 0xF, the key to
/// invalidate with the response.
pub fn data_plan(
    cmd: &Command,
    in_capsule: u32,
    max_len: u32,
) -> Result<(DataPlan, Option<u32>), Status> {
    // Fused commands (Compare and Write) are checked with their command set.
    if cmd.fuse() == 3 || cmd.psdt() != nvme::command::PSDT_SGL {
        return Err(Status::INVALID_FIELD);
    }
    let dir = cmd.data_direction();
    let sgl = cmd.sgl();
    // Responding with invalidation is owed whatever the command's outcome.
    let inv = match sgl {
        Sgl::Keyed {
            invalidate: true,
            key,
            ..
        } => Some(key),
        _ => None,
    };
    let plan = match sgl {
        Sgl::Keyed { len: 0, .. } => DataPlan::None,
        Sgl::Keyed { addr, len, key, .. } => {
            if len > max_len {
                return Err(Status::SGL_INVALID_DATA);
            }
            match dir {
                DataDirection::HostToController => DataPlan::FromHost { addr, len, key },
                DataDirection::ControllerToHost => DataPlan::ToHost { addr, len, key },
                DataDirection::None => DataPlan::None,
                DataDirection::Bidirectional => return Err(Status::INVALID_FIELD),
            }
        }
        Sgl::InCapsule { len: 0, .. } => DataPlan::None,
        Sgl::InCapsule { offset, len } => {
            if dir != DataDirection::HostToController {
                return Err(Status::INVALID_FIELD);
            }
            match offset.checked_add(len as u64) {
                Some(end) if end <= in_capsule as u64 => DataPlan::InCapsule {
                    offset: offset as u32,
                    len,
                },
                _ => return Err(Status::SGL_INVALID_OFFSET),
            }
        }
        Sgl::Other {
            kind: k,
            subtype: st,
            ..
        } => {
            return Err(match k {
                kind::DATA_BLOCK if st != subtype::OFFSET => Status::INVALID_FIELD,
                kind::KEYED_DATA_BLOCK => Status::INVALID_FIELD,
                _ => Status::SGL_INVALID_TYPE,
            })
        }
    };
    Ok((plan, inv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::cm::CmRequest;

    fn req(qid: u16, hrq: u16, hsq: u16) -> Vec<u8> {
        CmRequest {
            recfmt: 0,
            qid,
            hrqsize: hrq,
            hsqsize: hsq,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn cm_requests() {
        assert_eq!(
            check_cm_request(&req(0, 32, 31)),
            Ok(QueueParams {
                qid: 0,
                sq_size: 32,
                host_rq_size: 32
            })
        );
        assert_eq!(check_cm_request(&req(1, 128, 127)).unwrap().sq_size, 128);
        assert_eq!(
            check_cm_request(&req(0, 64, 63)),
            Err(RejectStatus::InvalidHsqsize)
        );
        assert_eq!(
            check_cm_request(&req(1, 256, 255)),
            Err(RejectStatus::InvalidHsqsize)
        );
        assert_eq!(
            check_cm_request(&req(1, 0, 127)),
            Err(RejectStatus::InvalidHrqsize)
        );
        assert_eq!(
            check_cm_request(&req(1, 1, 0)),
            Err(RejectStatus::InvalidHsqsize)
        );
        assert_eq!(
            check_cm_request(&req(1000, 128, 127)),
            Err(RejectStatus::InvalidQid)
        );
        assert_eq!(
            check_cm_request(&req(1, 128, 127)[..8]),
            Err(RejectStatus::InvalidLen)
        );
        let mut r = req(1, 128, 127);
        r[0] = 1;
        assert_eq!(check_cm_request(&r), Err(RejectStatus::InvalidRecfmt));
    }

    fn cmd(opc: u8, sgl: Sgl) -> Command {
        let mut c = Command::new(opc, 1);
        c.set_sgl(&sgl);
        c
    }

    #[test]
    fn sgl_plans() {
        let k = |len, inv| Sgl::Keyed {
            addr: 0x1000,
            len,
            key: 0xAB,
            invalidate: inv,
        };
        assert_eq!(
            data_plan(&cmd(0x01, k(4096, true)), 0, 131072),
            Ok((
                DataPlan::FromHost {
                    addr: 0x1000,
                    len: 4096,
                    key: 0xAB
                },
                Some(0xAB)
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x02, k(4096, false)), 0, 131072),
            Ok((
                DataPlan::ToHost {
                    addr: 0x1000,
                    len: 4096,
                    key: 0xAB
                },
                None
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x02, k(262144, false)), 0, 131072),
            Err(Status::SGL_INVALID_DATA)
        );
        assert_eq!(
            data_plan(&cmd(0x00, k(0, false)), 0, 131072),
            Ok((DataPlan::None, None))
        );
        let ic = Sgl::InCapsule {
            offset: 0,
            len: 4096,
        };
        assert_eq!(
            data_plan(&cmd(0x01, ic), 4096, 131072),
            Ok((
                DataPlan::InCapsule {
                    offset: 0,
                    len: 4096
                },
                None
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x01, ic), 4095, 131072),
            Err(Status::SGL_INVALID_OFFSET)
        );
        assert_eq!(
            data_plan(
                &cmd(
                    0x01,
                    Sgl::InCapsule {
                        offset: u64::MAX,
                        len: 1
                    }
                ),
                4096,
                131072
            ),
            Err(Status::SGL_INVALID_OFFSET)
        );
        assert_eq!(
            data_plan(&cmd(0x02, ic), 4096, 131072),
            Err(Status::INVALID_FIELD)
        );
        let mut raw = [0u8; 16];
        raw[15] = 0x45;
        assert_eq!(
            data_plan(&cmd(0x01, Sgl::parse(&raw).unwrap()), 0, 131072),
            Err(Status::INVALID_FIELD)
        );
        raw[15] = 0x00;
        assert_eq!(
            data_plan(&cmd(0x01, Sgl::parse(&raw).unwrap()), 0, 131072),
            Err(Status::INVALID_FIELD)
        );
        raw[15] = 0x20;
        assert_eq!(
            data_plan(&cmd(0x01, Sgl::parse(&raw).unwrap()), 0, 131072),
            Err(Status::SGL_INVALID_TYPE)
        );
        // Fused commands are planned (their command set checks them); the
        // reserved FUSE value is not.
        let mut fused = cmd(0x05, k(512, false));
        fused.raw[1] |= 1;
        assert!(data_plan(&fused, 0, 131072).is_ok());
        fused.raw[1] |= 3;
        assert_eq!(data_plan(&fused, 0, 131072), Err(Status::INVALID_FIELD));
        let mut prp = cmd(0x02, k(512, false));
        prp.raw[1] = 0;
        assert_eq!(data_plan(&prp, 0, 131072), Err(Status::INVALID_FIELD));
    }
}
