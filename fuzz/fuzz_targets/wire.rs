//! Every parser of the wire formats (nvme/), on the same bytes: none may panic,
//! and where a format has one exact encoding, parse → encode → parse is stable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::cm::{CmReject, CmReply, CmRequest};
use nvme::command::Command;
use nvme::completion::Completion;
use nvme::discovery::{DiscoveryEntry, DiscoveryHeader};
use nvme::fabrics::{ConnectCommand, ConnectData, PropertyCommand};
use nvme::identify::{parse_ns_descriptors, parse_ns_list, IdentifyController, IdentifyNamespace};
use nvme::log::{copy_window, ErrorLogEntry, GetLogPage, SmartLog};
use nvme::sgl::Sgl;
use nvme::status::Status;

fuzz_target!(|b: &[u8]| {
    if let Ok(c) = Command::parse(b) {
        assert_eq!(&c.raw[..], &b[..64]);
        let _ = (c.sgl(), c.data_direction(), c.slba(), c.nlb(), c.fua(), c.fctype());
        let _ = GetLogPage::from_command(&c);
        let _ = ConnectCommand::from_command(&c);
        let _ = PropertyCommand::from_command(&c);
    }
    if let Ok(c) = Completion::parse(b) {
        assert_eq!(Completion::parse(&c.encode()).unwrap(), c);
    }
    if b.len() >= 2 {
        let s = Status::from_field(u16::from_le_bytes([b[0], b[1]]));
        assert_eq!(Status::from_field(s.to_field()), s);
        let _ = (s.name(), s.to_string());
    }
    if let Ok(s) = Sgl::parse(b) {
        assert_eq!(Sgl::parse(&s.encode()).unwrap(), s);
        let _ = s.len();
    }
    if let Ok(r) = CmRequest::parse(b) {
        assert_eq!(CmRequest::parse(&r.encode()).unwrap(), r);
    }
    if let Ok(r) = CmReply::parse(b) {
        assert_eq!(CmReply::parse(&r.encode()).unwrap(), r);
    }
    if let Ok(r) = CmReject::parse(b) {
        assert_eq!(CmReject::parse(&r.encode()).unwrap(), r);
    }
    let _ = ConnectData::parse(b);
    let _ = IdentifyController::parse(b);
    if let Ok(n) = IdentifyNamespace::parse(b) {
        let _ = n.block_size();
    }
    let _ = parse_ns_descriptors(b);
    let _ = parse_ns_list(b);
    let _ = DiscoveryHeader::parse(b);
    let _ = DiscoveryEntry::parse(b);
    let _ = ErrorLogEntry::parse(b);
    let _ = SmartLog::parse(b);
    let _ = nvme::ana::parse_log(b);
    if b.len() >= 10 {
        // A log page read at any offset into a buffer of any size.
        let offset = u64::from_le_bytes(b[..8].try_into().unwrap());
        let mut out = vec![0u8; u16::from_le_bytes([b[8], b[9]]) as usize % 8192];
        let _ = copy_window(&b[10..], offset, &mut out);
    }
});
