//! RDMA-CM private data exchanged when a queue pair connects (NVMe/RDMA transport).

use crate::bytes::*;
use crate::{need, WireError};

/// Size of the connect request private data.
pub const REQ_SIZE: usize = 32;
/// Size of the accept private data.
pub const REP_SIZE: usize = 32;
/// Size of the reject private data.
pub const REJ_SIZE: usize = 4;

/// Connect request private data (`nvme_rdma_cm_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format (must be 0).
    pub recfmt: u16,
    /// Queue identifier (0 = admin).
    pub qid: u16,
    /// Host receive queue size (responses the host can take).
    pub hrqsize: u16,
    /// Host send queue size, 0-based (SQ entries).
    pub hsqsize: u16,
}

impl CmRequest {
    /// Parses the private data of a connect request.
    pub fn parse(b: &[u8]) -> Result<CmRequest, WireError> {
        need("RDMA-CM request private data", b, 8)?;
        Ok(CmRequest {
            recfmt: u16_at(b, 0),
            qid: u16_at(b, 2),
            hrqsize: u16_at(b, 4),
            hsqsize: u16_at(b, 6),
        })
    }
    /// Encodes into 32 bytes.
    pub fn encode(&self) -> [u8; REQ_SIZE] {
        let mut b = [0u8; REQ_SIZE];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.qid);
        put_u16(&mut b, 4, self.hrqsize);
        put_u16(&mut b, 6, self.hsqsize);
        b
    }
}

/// Accept private data (`nvme_rdma_cm_rep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReply {
    /// Record format (0).
    pub recfmt: u16,
    /// Controller receive queue size.
    pub crqsize: u16,
}

impl CmReply {
    /// Parses accept private data.
    pub fn parse(b: &[u8]) -> Result<CmReply, WireError> {
        need("RDMA-CM reply private data", b, 4)?;
        Ok(CmReply {
            recfmt: u16_at(b, 0),
            crqsize: u16_at(b, 2),
        })
    }
    /// Encodes into 32 bytes.
    pub fn encode(&self) -> [u8; REP_SIZE] {
        let mut b = [0u8; REP_SIZE];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.crqsize);
        b
    }
}

/// Reasons a target rejects a queue connection (`nvme_rdma_cm_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectStatus {
    /// Private data length invalid.
    InvalidLen = 1,
    /// Record format invalid.
    InvalidRecfmt = 2,
    /// Queue identifier invalid.
    InvalidQid = 3,
    /// Host send queue size invalid.
    InvalidHsqsize = 4,
    /// Host receive queue size invalid.
    InvalidHrqsize = 5,
    /// Out of resources.
    NoResources = 6,
    /// Invalid IRD.
    InvalidIrd = 7,
    /// Invalid ORD.
    InvalidOrd = 8,
}

impl RejectStatus {
    const ALL: [RejectStatus; 8] = [
        RejectStatus::InvalidLen,
        RejectStatus::InvalidRecfmt,
        RejectStatus::InvalidQid,
        RejectStatus::InvalidHsqsize,
        RejectStatus::InvalidHrqsize,
        RejectStatus::NoResources,
        RejectStatus::InvalidIrd,
        RejectStatus::InvalidOrd,
    ];

    /// The status with this wire code, if it is one.
    pub fn from_code(code: u16) -> Option<RejectStatus> {
        Self::ALL.into_iter().find(|s| *s as u16 == code)
    }

    /// What it means, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            RejectStatus::InvalidLen => "invalid private data length",
            RejectStatus::InvalidRecfmt => "invalid record format",
            RejectStatus::InvalidQid => "invalid queue id",
            RejectStatus::InvalidHsqsize => "invalid host SQ size",
            RejectStatus::InvalidHrqsize => "invalid host RQ size",
            RejectStatus::NoResources => "no resources",
            RejectStatus::InvalidIrd => "invalid IRD",
            RejectStatus::InvalidOrd => "invalid ORD",
        }
    }
}

/// Reject private data (`nvme_rdma_cm_rej`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReject {
    /// Record format (0).
    pub recfmt: u16,
    /// Status (a [`RejectStatus`] value).
    pub status: u16,
}

impl CmReject {
    /// Reject with `status`.
    pub fn new(status: RejectStatus) -> CmReject {
        CmReject {
            recfmt: 0,
            status: status as u16,
        }
    }
    /// Parses reject private data.
    pub fn parse(b: &[u8]) -> Result<CmReject, WireError> {
        need("RDMA-CM reject private data", b, REJ_SIZE)?;
        Ok(CmReject {
            recfmt: u16_at(b, 0),
            status: u16_at(b, 2),
        })
    }
    /// Encodes into 4 bytes.
    pub fn encode(&self) -> [u8; REJ_SIZE] {
        let mut b = [0u8; REJ_SIZE];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.status);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reject_codes() {
        for code in 1..=8u16 {
            assert_eq!(RejectStatus::from_code(code).map(|s| s as u16), Some(code));
        }
        assert_eq!(RejectStatus::from_code(0), None);
        assert_eq!(RejectStatus::from_code(9), None);
        assert_eq!(RejectStatus::NoResources.describe(), "no resources");
    }

    #[test]
    fn layouts() {
        let r = CmRequest {
            recfmt: 0,
            qid: 3,
            hrqsize: 128,
            hsqsize: 127,
        };
        let b = r.encode();
        assert_eq!(&b[..8], &[0, 0, 3, 0, 128, 0, 127, 0]);
        assert!(b[8..].iter().all(|&x| x == 0));
        assert_eq!(CmRequest::parse(&b).unwrap(), r);
        assert!(CmRequest::parse(&b[..7]).is_err());
        let a = CmReply {
            recfmt: 0,
            crqsize: 32,
        };
        assert_eq!(&a.encode()[..4], &[0, 0, 32, 0]);
        let j = CmReject::new(RejectStatus::InvalidHsqsize);
        assert_eq!(j.encode(), [0, 0, 4, 0]);
        assert_eq!(CmReject::parse(&j.encode()).unwrap(), j);
    }

    proptest! {
        #[test]
        fn req_roundtrip(recfmt: u16, qid: u16, hrqsize: u16, hsqsize: u16) {
            let r = CmRequest { recfmt, qid, hrqsize, hsqsize };
            prop_assert_eq!(CmRequest::parse(&r.encode()).unwrap(), r);
        }
        #[test]
        fn rep_roundtrip(recfmt: u16, crqsize: u16) {
            let r = CmReply { recfmt, crqsize };
            prop_assert_eq!(CmReply::parse(&r.encode()).unwrap(), r);
        }
        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = CmRequest::parse(&b);
            let _ = CmReply::parse(&b);
            let _ = CmReject::parse(&b);
        }
    }
}
