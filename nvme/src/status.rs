//! NVMe status field (Status Code Type, Status Code, More, Do Not Retry).

/// An NVMe completion status, without the phase bit.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status Code Type (3 bits).
    pub sct: u8,
    /// Status Code.
    pub sc: u8,
    /// Command Retry Delay: which of the controller's CRDT1..3 the host
    /// waits before retrying (0: none; only when the host enabled ACRE).
    pub crd: u8,
    /// More information in the error log.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

/// Status code types.
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0;
    /// Command specific status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 2;
    /// Path related status.
    pub const PATH: u8 = 3;
}

macro_rules! statuses {
    ($($(#[$m:meta])* $name:ident = ($sct:expr, $sc:expr, $dnr:expr);)*) => {
        impl Status {
            $($(#[$m])* pub const $name: Status = Status { sct: $sct, sc: $sc, crd: 0, more: false, dnr: $dnr };)*

            /// The specification's name of this status, or `None` for codes this crate does not name.
            pub fn name(&self) -> Option<&'static str> {
                $(if self.sct == $sct && self.sc == $sc { return Some(stringify!($name)); })*
                None
            }
        }
    };
}

statuses! {
    /// Successful completion.
    SUCCESS = (0, 0x00, false);
    /// Invalid command opcode.
    INVALID_OPCODE = (0, 0x01, true);
    /// Invalid field in command.
    INVALID_FIELD = (0, 0x02, true);
    /// Command ID conflict.
    CID_CONFLICT = (0, 0x03, true);
    /// Data transfer error.
    DATA_TRANSFER_ERROR = (0, 0x04, false);
    /// Transient transport error (the command may succeed if retried): on
    /// NVMe/TCP, the host's data failed its data digest.
    TRANSIENT_TRANSPORT_ERROR = (0, 0x22, false);
    /// Commands aborted due to power loss notification.
    POWER_LOSS = (0, 0x05, false);
    /// Internal error.
    INTERNAL = (0, 0x06, false);
    /// Command abort requested.
    ABORT_REQ = (0, 0x07, false);
    /// Command aborted due to a failed fused command (its partner failed).
    FUSED_FAILED = (0, 0x09, true);
    /// Command aborted due to a missing fused command.
    FUSED_MISSING = (0, 0x0A, true);
    /// Command aborted due to SQ deletion.
    ABORT_QUEUE = (0, 0x08, false);
    /// Invalid namespace or format.
    INVALID_NS = (0, 0x0B, true);
    /// Command sequence error.
    CMD_SEQ_ERROR = (0, 0x0C, true);
    /// Invalid SGL segment descriptor.
    SGL_INVALID_LAST = (0, 0x0D, true);
    /// Invalid number of SGL descriptors.
    SGL_INVALID_COUNT = (0, 0x0E, true);
    /// Data SGL length invalid.
    SGL_INVALID_DATA = (0, 0x0F, true);
    /// Metadata SGL length invalid.
    SGL_INVALID_METADATA = (0, 0x10, true);
    /// SGL descriptor type invalid.
    SGL_INVALID_TYPE = (0, 0x11, true);
    /// SGL offset invalid.
    SGL_INVALID_OFFSET = (0, 0x16, true);
    /// SGL sub type invalid.
    SGL_INVALID_SUBTYPE = (0, 0x17, true);
    /// Host identifier inconsistent format (a report without the extended
    /// structure, to a host with a 128-bit host identifier).
    HOST_ID_INCONSISTENT = (0, 0x18, true);
    /// Keep alive timer expired.
    KEEP_ALIVE_EXPIRED = (0, 0x19, false);
    /// Namespace is write protected.
    NS_WRITE_PROTECTED = (0, 0x20, true);
    /// Command interrupted (retry).
    COMMAND_INTERRUPTED = (0, 0x21, false);
    /// LBA out of range.
    LBA_RANGE = (0, 0x80, true);
    /// Capacity exceeded.
    CAPACITY_EXCEEDED = (0, 0x81, true);
    /// Namespace not ready.
    NS_NOT_READY = (0, 0x82, false);
    /// Reservation conflict.
    RESERVATION_CONFLICT = (0, 0x83, true);
    /// Completion queue invalid / abort command limit etc. (command specific 0x01).
    CQ_INVALID = (1, 0x00, true);
    /// Invalid queue identifier.
    QID_INVALID = (1, 0x01, true);
    /// Asynchronous event request limit exceeded.
    AER_LIMIT_EXCEEDED = (1, 0x05, true);
    /// Invalid log page.
    INVALID_LOG_PAGE = (1, 0x09, true);
    /// Feature identifier not saveable.
    FEATURE_NOT_SAVEABLE = (1, 0x0D, true);
    /// Feature not changeable.
    FEATURE_NOT_CHANGEABLE = (1, 0x0E, true);
    /// Fabrics: incompatible command format.
    CONNECT_FORMAT = (1, 0x80, true);
    /// Fabrics: controller busy.
    CONNECT_CTRL_BUSY = (1, 0x81, false);
    /// Fabrics: connect invalid parameters.
    CONNECT_INVALID_PARAM = (1, 0x82, true);
    /// Fabrics: connect restart discovery.
    CONNECT_RESTART_DISC = (1, 0x83, false);
    /// Fabrics: connect invalid host.
    CONNECT_INVALID_HOST = (1, 0x84, true);
    /// Fabrics: the queue must authenticate before this command.
    AUTH_REQUIRED = (1, 0x91, true);
    /// Unrecovered read error.
    UNRECOVERED_READ_ERROR = (2, 0x81, false);
    /// Compare failure: the data differs.
    COMPARE_FAILURE = (2, 0x85, true);
    /// Write fault.
    WRITE_FAULT = (2, 0x80, false);
    /// Access denied.
    ACCESS_DENIED = (2, 0x86, true);
    /// Path: internal path error.
    PATH_INTERNAL = (3, 0x00, false);
    /// Path: the namespace's ANA group is in Persistent Loss at this controller.
    ANA_PERSISTENT_LOSS = (3, 0x01, false);
    /// Path: the namespace's ANA group is Inaccessible at this controller.
    ANA_INACCESSIBLE = (3, 0x02, false);
    /// Path: the namespace's ANA group is changing state at this controller.
    ANA_TRANSITION = (3, 0x03, false);
    /// Path: controller pathing error (host should retry elsewhere).
    CTRL_PATH_ERROR = (3, 0x60, false);
    /// Path: host pathing error.
    HOST_PATH_ERROR = (3, 0x70, false);
    /// Path: command aborted by host.
    HOST_ABORTED = (3, 0x71, false);
}

impl Status {
    /// The 15-bit status field as it sits in CQE bits 31:17 (`sf << 1 | phase`).
    pub fn to_field(self) -> u16 {
        (self.sc as u16)
            | ((self.sct as u16 & 7) << 8)
            | ((self.crd as u16 & 3) << 11)
            | ((self.more as u16) << 13)
            | ((self.dnr as u16) << 14)
    }

    /// Parses the 15-bit status field (phase bit already removed).
    pub fn from_field(f: u16) -> Status {
        Status {
            sc: (f & 0xFF) as u8,
            sct: ((f >> 8) & 7) as u8,
            crd: ((f >> 11) & 3) as u8,
            more: f & (1 << 13) != 0,
            dnr: f & (1 << 14) != 0,
        }
    }

    /// Whether this is a success.
    pub fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The same status with DNR cleared (a retryable variant).
    pub fn retryable(self) -> Status {
        Status { dnr: false, ..self }
    }

    /// The same status asking the host to wait CRDT`crd` before a retry.
    pub fn with_crd(self, crd: u8) -> Status {
        Status {
            crd: crd & 3,
            ..self
        }
    }

    /// The same status with DNR set.
    pub fn no_retry(self) -> Status {
        Status { dnr: true, ..self }
    }

    /// `SCT<<8 | SC`, the form status codes are usually quoted in.
    pub fn code(self) -> u16 {
        ((self.sct as u16) << 8) | self.sc as u16
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({:#05x}", self.code())?,
            None => write!(f, "status {:#05x}", self.code())?,
        }
        if self.dnr {
            write!(f, ", DNR")?;
        }
        if self.name().is_some() {
            write!(f, ")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_codes() {
        assert_eq!(Status::INVALID_FIELD.to_field(), 0x4002);
        assert_eq!(Status::CONNECT_INVALID_HOST.code(), 0x184);
        assert_eq!(Status::CONNECT_INVALID_PARAM.code(), 0x182);
        assert_eq!(Status::SGL_INVALID_DATA.code(), 0x0F);
        assert_eq!(Status::LBA_RANGE.to_field(), 0x4080);
        assert_eq!(Status::SUCCESS.to_field(), 0);
        assert_eq!(Status::ACCESS_DENIED.code(), 0x286);
        assert_eq!(
            Status::INVALID_FIELD.to_string(),
            "INVALID_FIELD (0x002, DNR)"
        );
        assert_eq!(Status::from_field(0x4084 & 0x7FFF).code(), 0x084);
        let st = Status::NS_NOT_READY.with_crd(1);
        assert_eq!(st.to_field(), 0x0882, "CRD in bits 12:11");
        assert_eq!(Status::from_field(0x0882).crd, 1);
    }

    proptest! {
        #[test]
        fn field_roundtrip(f in 0u16..0x8000) {
            prop_assert_eq!(Status::from_field(f).to_field(), f);
        }
    }
}
