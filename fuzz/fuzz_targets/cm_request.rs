//! The RDMA-CM private data of a queue connection request, as the target checks it:
//! never a panic, and an accepted queue always has a size the target can hold.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvmf_target::transport::rdma::cm::check_cm_request;

fuzz_target!(|b: &[u8]| {
    if let Ok(p) = check_cm_request(b) {
        let max = if p.qid == 0 {
            nvmf_target::ADMIN_QUEUE_SIZE
        } else {
            nvmf_target::MAX_QUEUE_SIZE
        };
        assert!(p.sq_size >= 2 && p.sq_size <= max, "{p:?}");
        assert!(p.qid <= nvmf_target::MAX_IO_QUEUES);
    }
});
