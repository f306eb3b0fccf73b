//! Where a command's data is, from its SGL (sans-IO): in the capsule, to
//! fetch from the host's memory, or to send there.

use nvme::opcode::DataDirection;
use nvme::sgl::{kind, subtype};
use nvme::{Command, Sgl, Status};

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

/// How a transport carries data that is not in the capsule: RDMA by keyed
/// SGLs (the host's memory windows), NVMe/TCP by transport SGL data blocks
/// (R2T and H2CData, C2HData).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SglKind {
    /// Keyed data blocks (RDMA, the loopback).
    #[default]
    Keyed,
    /// Transport SGL data blocks, subtype 0xA (NVMe/TCP).
    Transport,
}

impl SglKind {
    /// The fabric that carries data this way, as metrics and status name
    /// it: `rdma` (the loopback too) or `tcp`.
    pub fn fabric(self) -> &'static str {
        match self {
            SglKind::Keyed => "rdma",
            SglKind::Transport => "tcp",
        }
    }
}

/// Checks a command's transfer fields and SGL. `in_capsule` is how many data
/// bytes arrived after the 64-byte command; `max_len` the largest transfer;
/// `kind` the SGLs the transport carries data by (the other kind is an SGL
/// Descriptor Type Invalid). Returns the data plan and, for keyed SGLs with
/// subtype 0xF, the key to invalidate with the response.
pub fn data_plan(
    cmd: &Command,
    in_capsule: u32,
    max_len: u32,
    kind: SglKind,
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
    let from_to = |addr: u64, len: u32, key: u32| {
        if len > max_len {
            return Err(Status::SGL_INVALID_DATA);
        }
        Ok(match dir {
            DataDirection::HostToController => DataPlan::FromHost { addr, len, key },
            DataDirection::ControllerToHost => DataPlan::ToHost { addr, len, key },
            DataDirection::None => DataPlan::None,
            DataDirection::Bidirectional => return Err(Status::INVALID_FIELD),
        })
    };
    let other_transports = match sgl {
        Sgl::Keyed { .. } => kind != SglKind::Keyed,
        Sgl::Transport { .. } => kind != SglKind::Transport,
        _ => false,
    };
    if other_transports {
        return Err(Status::SGL_INVALID_TYPE);
    }
    let plan = match sgl {
        Sgl::Transport { len: 0 } => DataPlan::None,
        Sgl::Transport { len } => from_to(0, len, 0)?,
        Sgl::Keyed { len: 0, .. } => DataPlan::None,
        Sgl::Keyed { addr, len, key, .. } => from_to(addr, len, key)?,
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
            data_plan(&cmd(0x01, k(4096, true)), 0, 131072, SglKind::Keyed),
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
            data_plan(&cmd(0x02, k(4096, false)), 0, 131072, SglKind::Keyed),
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
            data_plan(&cmd(0x02, k(262144, false)), 0, 131072, SglKind::Keyed),
            Err(Status::SGL_INVALID_DATA)
        );
        assert_eq!(
            data_plan(&cmd(0x00, k(0, false)), 0, 131072, SglKind::Keyed),
            Ok((DataPlan::None, None))
        );
        let ic = Sgl::InCapsule {
            offset: 0,
            len: 4096,
        };
        assert_eq!(
            data_plan(&cmd(0x01, ic), 4096, 131072, SglKind::Keyed),
            Ok((
                DataPlan::InCapsule {
                    offset: 0,
                    len: 4096
                },
                None
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x01, ic), 4095, 131072, SglKind::Keyed),
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
                131072,
                SglKind::Keyed
            ),
            Err(Status::SGL_INVALID_OFFSET)
        );
        assert_eq!(
            data_plan(&cmd(0x02, ic), 4096, 131072, SglKind::Keyed),
            Err(Status::INVALID_FIELD)
        );
        let mut raw = [0u8; 16];
        raw[15] = 0x45;
        assert_eq!(
            data_plan(
                &cmd(0x01, Sgl::parse(&raw).unwrap()),
                0,
                131072,
                SglKind::Keyed
            ),
            Err(Status::INVALID_FIELD)
        );
        raw[15] = 0x00;
        assert_eq!(
            data_plan(
                &cmd(0x01, Sgl::parse(&raw).unwrap()),
                0,
                131072,
                SglKind::Keyed
            ),
            Err(Status::INVALID_FIELD)
        );
        raw[15] = 0x20;
        assert_eq!(
            data_plan(
                &cmd(0x01, Sgl::parse(&raw).unwrap()),
                0,
                131072,
                SglKind::Keyed
            ),
            Err(Status::SGL_INVALID_TYPE)
        );
        // Fused commands are planned (their command set checks them); the
        // reserved FUSE value is not.
        let mut fused = cmd(0x05, k(512, false));
        fused.raw[1] |= 1;
        assert!(data_plan(&fused, 0, 131072, SglKind::Keyed).is_ok());
        fused.raw[1] |= 3;
        assert_eq!(
            data_plan(&fused, 0, 131072, SglKind::Keyed),
            Err(Status::INVALID_FIELD)
        );
        // Each transport its own kind of SGL.
        let t = Sgl::Transport { len: 8192 };
        assert_eq!(
            data_plan(&cmd(0x01, t), 0, 131072, SglKind::Transport),
            Ok((
                DataPlan::FromHost {
                    addr: 0,
                    len: 8192,
                    key: 0
                },
                None
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x02, t), 0, 131072, SglKind::Transport),
            Ok((
                DataPlan::ToHost {
                    addr: 0,
                    len: 8192,
                    key: 0
                },
                None
            ))
        );
        assert_eq!(
            data_plan(&cmd(0x01, t), 0, 131072, SglKind::Keyed),
            Err(Status::SGL_INVALID_TYPE)
        );
        assert_eq!(
            data_plan(&cmd(0x01, k(512, false)), 0, 131072, SglKind::Transport),
            Err(Status::SGL_INVALID_TYPE)
        );
        assert_eq!(
            data_plan(
                &cmd(0x02, Sgl::Transport { len: 1 << 20 }),
                0,
                131072,
                SglKind::Transport
            ),
            Err(Status::SGL_INVALID_DATA)
        );
        assert_eq!(
            data_plan(&cmd(0x01, ic), 4096, 131072, SglKind::Transport).map(|p| p.0),
            Ok(DataPlan::InCapsule {
                offset: 0,
                len: 4096
            })
        );
        let mut prp = cmd(0x02, k(512, false));
        prp.raw[1] = 0;
        assert_eq!(
            data_plan(&prp, 0, 131072, SglKind::Keyed),
            Err(Status::INVALID_FIELD)
        );
    }
}
