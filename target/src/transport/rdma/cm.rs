//! The RDMA-CM private data of a connection request (NVMe/RDMA): the queue
//! it asks for, checked before anything is allocated for it.

use nvme::cm::{CmRequest, RejectStatus};

use crate::queue::QueueParams;

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
        sgl: crate::request::data::SglKind::Keyed,
    })
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
                sgl: crate::request::data::SglKind::Keyed,
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
}
