//! Command opcodes and related identifiers.

/// Admin command set opcodes.
pub mod admin {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set (I/O queue) opcodes.
pub mod io {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Compare.
    pub const COMPARE: u8 = 0x05;
    /// Reservation Register.
    pub const RESV_REGISTER: u8 = 0x0D;
    /// Reservation Report.
    pub const RESV_REPORT: u8 = 0x0E;
    /// Reservation Acquire.
    pub const RESV_ACQUIRE: u8 = 0x11;
    /// Reservation Release.
    pub const RESV_RELEASE: u8 = 0x15;
}

/// The fabrics command opcode; the command type is in byte 4 (`fctype`).
pub const FABRICS: u8 = 0x7F;

/// Fabrics command types.
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECEIVE: u8 = 0x06;
    /// Disconnect (NVMe-oF 1.1).
    pub const DISCONNECT: u8 = 0x08;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Namespace (CSI in CDW11 31:24).
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O Command Set specific Identify Controller (CSI in CDW11 31:24).
    pub const CS_CONTROLLER: u8 = 0x06;
}

/// Command Set Identifier of the NVM command set.
pub const CSI_NVM: u8 = 0x00;

/// Log page identifiers.
pub mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const CMD_EFFECTS: u8 = 0x05;
    /// Asymmetric Namespace Access.
    pub const ANA: u8 = 0x0C;
    /// Reservation Notification.
    pub const RESV_NOTIFICATION: u8 = 0x80;
    /// Discovery.
    pub const DISCOVERY: u8 = 0x70;
}

/// Feature identifiers.
pub mod fid {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MGMT: u8 = 0x02;
    /// Temperature Threshold.
    pub const TEMP_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WC: u8 = 0x06;
    /// Number of Queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const IRQ_COALESCE: u8 = 0x08;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Host Identifier.
    pub const HOST_ID: u8 = 0x81;
    /// Reservation Notification Mask.
    pub const RESV_MASK: u8 = 0x82;
    /// Reservation Persistence.
    pub const RESV_PERSIST: u8 = 0x83;
    /// Host Behavior Support (ACRE: the host honours Command Retry Delay).
    pub const HOST_BEHAVIOR: u8 = 0x16;
}

/// Direction of the data transfer of a command, from opcode bits 1:0
/// (for fabrics commands, from `fctype` bits 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    /// No data.
    None,
    /// Host to controller (the target reads host memory).
    HostToController,
    /// Controller to host (the target writes host memory).
    ControllerToHost,
    /// Bidirectional (not used by this transport).
    Bidirectional,
}

impl DataDirection {
    /// Direction encoded in the two low bits of an opcode or fctype.
    pub fn from_bits(op: u8) -> Self {
        match op & 3 {
            0 => DataDirection::None,
            1 => DataDirection::HostToController,
            2 => DataDirection::ControllerToHost,
            _ => DataDirection::Bidirectional,
        }
    }
}
