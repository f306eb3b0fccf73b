//! In-band authentication: the Authentication Send / Receive command fields
//! and the DH-HMAC-CHAP messages they carry (NVMe Base 2.x, "DH-HMAC-CHAP
//! Protocol"; TP 8006). Layouts only: the protocol lives in the `dhchap` crate.

use crate::bytes::*;
use crate::command::Command;
use crate::opcode;

/// Security protocol (SECP) of NVMe in-band authentication.
pub const SECP_NVME: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;
/// Authentication protocol identifier of DH-HMAC-CHAP in a protocol descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;
/// Size of the header of every message but Negotiate and Failure.
pub const HEADER: usize = 16;
/// Size of a Negotiate message without its protocol descriptors.
pub const NEGOTIATE_HEADER: usize = 8;
/// Size of one protocol descriptor.
pub const DESCRIPTOR: usize = 64;
/// Size of a Failure1 / Failure2 message.
pub const FAILURE_SIZE: usize = 8;
/// Identifiers a descriptor lists at most, of each kind.
pub const MAX_IDS: usize = 30;

/// Message types (AUTH_TYPE).
pub mod auth_type {
    /// Messages common to every protocol: Negotiate, Failure1/2.
    pub const COMMON: u8 = 0x00;
    /// DH-HMAC-CHAP messages.
    pub const DHCHAP: u8 = 0x01;
}

/// Message identifiers (AUTH_ID).
pub mod auth_id {
    /// AUTH_Negotiate (common).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (common, host to controller).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (common, controller to host).
    pub const FAILURE1: u8 = 0xF1;
}

/// Reason code of a failure message: authentication failed.
pub const RESCODE_FAILED: u8 = 0x01;

/// Reason code explanations of a failure message.
pub mod reason {
    /// Authentication failed (a response did not match).
    pub const FAILED: u8 = 0x01;
    /// The authentication protocol is not usable.
    pub const NOT_USABLE: u8 = 0x02;
    /// Secure channel concatenation mismatch.
    pub const CONCAT_MISMATCH: u8 = 0x03;
    /// No usable hash function.
    pub const HASH_UNUSABLE: u8 = 0x04;
    /// No usable Diffie-Hellman group.
    pub const DHGROUP_UNUSABLE: u8 = 0x05;
    /// A message's payload is wrong (length, transaction, values).
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    /// A message came out of order or is unknown.
    pub const INCORRECT_MESSAGE: u8 = 0x07;

    /// A short name, for logs and metrics.
    pub fn name(code: u8) -> &'static str {
        match code {
            FAILED => "failed",
            NOT_USABLE => "not_usable",
            CONCAT_MISMATCH => "concat_mismatch",
            HASH_UNUSABLE => "hash_unusable",
            DHGROUP_UNUSABLE => "dhgroup_unusable",
            INCORRECT_PAYLOAD => "incorrect_payload",
            INCORRECT_MESSAGE => "incorrect_message",
            _ => "other",
        }
    }
}

/// The fields of an Authentication Send or Receive command (SQE bytes 40..48).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthCommand {
    /// Security protocol.
    pub secp: u8,
    /// SP specific 0.
    pub spsp0: u8,
    /// SP specific 1.
    pub spsp1: u8,
    /// Transfer length (Send) or allocation length (Receive).
    pub len: u32,
}

impl AuthCommand {
    /// The DH-HMAC-CHAP fields for `len` bytes.
    pub fn dhchap(len: u32) -> AuthCommand {
        AuthCommand {
            secp: SECP_NVME,
            spsp0: SPSP_DHCHAP,
            spsp1: SPSP_DHCHAP,
            len,
        }
    }
    /// Reads the fields from a command.
    pub fn from_command(c: &Command) -> AuthCommand {
        let r = &c.raw;
        AuthCommand {
            spsp0: r[41],
            spsp1: r[42],
            secp: r[43],
            len: u32_at(r, 44),
        }
    }
    /// Builds an Authentication Send (`receive == false`) or Receive command.
    pub fn to_command(&self, cid: u16, receive: bool) -> Command {
        let mut c = Command::new(opcode::FABRICS, cid);
        c.raw[4] = if receive {
            opcode::fctype::AUTH_RECEIVE
        } else {
            opcode::fctype::AUTH_SEND
        };
        c.raw[41] = self.spsp0;
        c.raw[42] = self.spsp1;
        c.raw[43] = self.secp;
        put_u32(&mut c.raw, 44, self.len);
        c
    }
    /// Byte offset in the SQE of the first field that is not DH-HMAC-CHAP's,
    /// or of the length when it is zero (`None`: the fields are usable).
    pub fn invalid_field(&self) -> Option<u16> {
        if self.secp != SECP_NVME {
            Some(43)
        } else if self.spsp0 != SPSP_DHCHAP {
            Some(41)
        } else if self.spsp1 != SPSP_DHCHAP {
            Some(42)
        } else if self.len == 0 {
            Some(44)
        } else {
            None
        }
    }
}

/// The identifiers one DH-HMAC-CHAP protocol descriptor lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Protocol {
    /// Authentication protocol identifier (1: DH-HMAC-CHAP).
    pub authid: u8,
    /// Hash function identifiers, in the host's order of preference.
    pub hashes: Vec<u8>,
    /// Diffie-Hellman group identifiers, likewise.
    pub groups: Vec<u8>,
}

/// One authentication message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate: the host offers protocols, hashes and groups.
    Negotiate {
        /// Transaction identifier.
        t_id: u16,
        /// Secure channel concatenation.
        sc_c: u8,
        /// The descriptors the message carries (NAPD of them).
        protocols: Vec<Protocol>,
        /// NAPD as sent.
        napd: u8,
    },
    /// DH-HMAC-CHAP_Challenge.
    Challenge {
        /// Transaction identifier.
        t_id: u16,
        /// Hash function.
        hash: u8,
        /// Diffie-Hellman group.
        group: u8,
        /// Sequence number S1.
        seqnum: u32,
        /// Challenge C1 (HL bytes).
        challenge: Vec<u8>,
        /// The controller's DH value.
        dhv: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Reply.
    Reply {
        /// Transaction identifier.
        t_id: u16,
        /// The host asks the controller to authenticate (bidirectional).
        cvalid: bool,
        /// Sequence number S2 (0: no controller authentication).
        seqnum: u32,
        /// Response R1 (HL bytes).
        response: Vec<u8>,
        /// Challenge C2 (HL bytes; meaningful with `cvalid`).
        challenge: Vec<u8>,
        /// The host's DH value.
        dhv: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Success1.
    Success1 {
        /// Transaction identifier.
        t_id: u16,
        /// Hash length.
        hl: u8,
        /// The controller's response R2, when the host asked for it.
        response: Option<Vec<u8>>,
    },
    /// DH-HMAC-CHAP_Success2.
    Success2 {
        /// Transaction identifier.
        t_id: u16,
    },
    /// AUTH_Failure1 (controller) or AUTH_Failure2 (host).
    Failure {
        /// Failure2 (from the host) rather than Failure1.
        from_host: bool,
        /// Transaction identifier.
        t_id: u16,
        /// Reason code.
        rescode: u8,
        /// Reason code explanation ([`reason`]).
        explanation: u8,
    },
}

/// Why a message could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageError {
    /// Shorter than its fields say.
    Short,
    /// A length field larger than the field it counts.
    Invalid,
    /// An AUTH_TYPE / AUTH_ID pair no message has.
    Unknown {
        /// AUTH_TYPE.
        auth_type: u8,
        /// AUTH_ID.
        auth_id: u8,
    },
}

impl Message {
    /// AUTH_Negotiate with one DH-HMAC-CHAP descriptor listing these hash
    /// and group identifiers, without secure channel concatenation.
    pub fn negotiate(t_id: u16, hashes: &[u8], groups: &[u8]) -> Message {
        Message::Negotiate {
            t_id,
            sc_c: 0,
            napd: 1,
            protocols: vec![Protocol {
                authid: AUTHID_DHCHAP,
                hashes: hashes.to_vec(),
                groups: groups.to_vec(),
            }],
        }
    }

    /// The message's AUTH_ID.
    pub fn auth_id(&self) -> u8 {
        match self {
            Message::Negotiate { .. } => auth_id::NEGOTIATE,
            Message::Challenge { .. } => auth_id::CHALLENGE,
            Message::Reply { .. } => auth_id::REPLY,
            Message::Success1 { .. } => auth_id::SUCCESS1,
            Message::Success2 { .. } => auth_id::SUCCESS2,
            Message::Failure {
                from_host: true, ..
            } => auth_id::FAILURE2,
            Message::Failure { .. } => auth_id::FAILURE1,
        }
    }

    /// The message's transaction identifier.
    pub fn t_id(&self) -> u16 {
        match self {
            Message::Negotiate { t_id, .. }
            | Message::Challenge { t_id, .. }
            | Message::Reply { t_id, .. }
            | Message::Success1 { t_id, .. }
            | Message::Success2 { t_id }
            | Message::Failure { t_id, .. } => *t_id,
        }
    }

    /// Reads a message. Bytes past its end (a Receive's padding) are ignored.
    pub fn parse(b: &[u8]) -> Result<Message, MessageError> {
        if b.len() < 2 {
            return Err(MessageError::Short);
        }
        let (ty, id) = (b[0], b[1]);
        let short = |n: usize| {
            if b.len() < n {
                Err(MessageError::Short)
            } else {
                Ok(())
            }
        };
        match (ty, id) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => {
                short(NEGOTIATE_HEADER)?;
                let napd = b[7];
                short(NEGOTIATE_HEADER + napd as usize * DESCRIPTOR)?;
                let mut protocols = Vec::new();
                for i in 0..napd as usize {
                    let o = NEGOTIATE_HEADER + i * DESCRIPTOR;
                    let d = &b[o..o + DESCRIPTOR];
                    let (halen, dhlen) = (d[2] as usize, d[3] as usize);
                    if halen > MAX_IDS || dhlen > MAX_IDS {
                        return Err(MessageError::Invalid);
                    }
                    protocols.push(Protocol {
                        authid: d[0],
                        hashes: d[4..4 + halen].to_vec(),
                        groups: d[4 + MAX_IDS..4 + MAX_IDS + dhlen].to_vec(),
                    });
                }
                Ok(Message::Negotiate {
                    t_id: u16_at(b, 4),
                    sc_c: b[6],
                    protocols,
                    napd,
                })
            }
            (auth_type::DHCHAP, auth_id::CHALLENGE) => {
                short(HEADER)?;
                let hl = b[6] as usize;
                let dhvlen = u16_at(b, 10) as usize;
                short(HEADER + hl + dhvlen)?;
                Ok(Message::Challenge {
                    t_id: u16_at(b, 4),
                    hash: b[8],
                    group: b[9],
                    seqnum: u32_at(b, 12),
                    challenge: b[HEADER..HEADER + hl].to_vec(),
                    dhv: b[HEADER + hl..HEADER + hl + dhvlen].to_vec(),
                })
            }
            (auth_type::DHCHAP, auth_id::REPLY) => {
                short(HEADER)?;
                let hl = b[6] as usize;
                let dhvlen = u16_at(b, 10) as usize;
                short(HEADER + 2 * hl + dhvlen)?;
                let v = &b[HEADER..];
                Ok(Message::Reply {
                    t_id: u16_at(b, 4),
                    cvalid: b[8] != 0,
                    seqnum: u32_at(b, 12),
                    response: v[..hl].to_vec(),
                    challenge: v[hl..2 * hl].to_vec(),
                    dhv: v[2 * hl..2 * hl + dhvlen].to_vec(),
                })
            }
            (auth_type::DHCHAP, auth_id::SUCCESS1) => {
                short(HEADER)?;
                let hl = b[6];
                let response = if b[8] != 0 {
                    short(HEADER + hl as usize)?;
                    Some(b[HEADER..HEADER + hl as usize].to_vec())
                } else {
                    None
                };
                Ok(Message::Success1 {
                    t_id: u16_at(b, 4),
                    hl,
                    response,
                })
            }
            (auth_type::DHCHAP, auth_id::SUCCESS2) => {
                short(HEADER)?;
                Ok(Message::Success2 { t_id: u16_at(b, 4) })
            }
            // Linux hosts send Failure2 with the DH-HMAC-CHAP type; the
            // specification files both failures among the common messages.
            (auth_type::COMMON | auth_type::DHCHAP, auth_id::FAILURE1 | auth_id::FAILURE2) => {
                short(FAILURE_SIZE)?;
                Ok(Message::Failure {
                    from_host: id == auth_id::FAILURE2,
                    t_id: u16_at(b, 4),
                    rescode: b[6],
                    explanation: b[7],
                })
            }
            _ => Err(MessageError::Unknown {
                auth_type: ty,
                auth_id: id,
            }),
        }
    }

    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let header = |ty: u8, id: u8, t_id: u16, len: usize| {
            let mut b = vec![0u8; len];
            b[0] = ty;
            b[1] = id;
            put_u16(&mut b, 4, t_id);
            b
        };
        match self {
            Message::Negotiate {
                t_id,
                sc_c,
                protocols,
                napd,
            } => {
                let mut b = header(
                    auth_type::COMMON,
                    auth_id::NEGOTIATE,
                    *t_id,
                    NEGOTIATE_HEADER + protocols.len() * DESCRIPTOR,
                );
                b[6] = *sc_c;
                b[7] = *napd;
                for (i, p) in protocols.iter().enumerate() {
                    let d = &mut b[NEGOTIATE_HEADER + i * DESCRIPTOR..][..DESCRIPTOR];
                    let (h, g) = (p.hashes.len().min(MAX_IDS), p.groups.len().min(MAX_IDS));
                    d[0] = p.authid;
                    d[2] = h as u8;
                    d[3] = g as u8;
                    d[4..4 + h].copy_from_slice(&p.hashes[..h]);
                    d[4 + MAX_IDS..4 + MAX_IDS + g].copy_from_slice(&p.groups[..g]);
                }
                b
            }
            Message::Challenge {
                t_id,
                hash,
                group,
                seqnum,
                challenge,
                dhv,
            } => {
                let hl = challenge.len().min(255);
                let mut b = header(
                    auth_type::DHCHAP,
                    auth_id::CHALLENGE,
                    *t_id,
                    HEADER + hl + dhv.len(),
                );
                b[6] = hl as u8;
                b[8] = *hash;
                b[9] = *group;
                put_u16(&mut b, 10, dhv.len() as u16);
                put_u32(&mut b, 12, *seqnum);
                b[HEADER..HEADER + hl].copy_from_slice(&challenge[..hl]);
                b[HEADER + hl..].copy_from_slice(dhv);
                b
            }
            Message::Reply {
                t_id,
                cvalid,
                seqnum,
                response,
                challenge,
                dhv,
            } => {
                let hl = response.len().min(255);
                let mut b = header(
                    auth_type::DHCHAP,
                    auth_id::REPLY,
                    *t_id,
                    HEADER + 2 * hl + dhv.len(),
                );
                b[6] = hl as u8;
                b[8] = *cvalid as u8;
                put_u16(&mut b, 10, dhv.len() as u16);
                put_u32(&mut b, 12, *seqnum);
                b[HEADER..HEADER + hl].copy_from_slice(&response[..hl]);
                let c = challenge.len().min(hl);
                b[HEADER + hl..HEADER + hl + c].copy_from_slice(&challenge[..c]);
                b[HEADER + 2 * hl..].copy_from_slice(dhv);
                b
            }
            Message::Success1 { t_id, hl, response } => {
                let n = response.as_ref().map_or(0, |r| r.len());
                let mut b = header(auth_type::DHCHAP, auth_id::SUCCESS1, *t_id, HEADER + n);
                b[6] = *hl;
                if let Some(r) = response {
                    b[8] = 1;
                    b[HEADER..].copy_from_slice(r);
                }
                b
            }
            Message::Success2 { t_id } => {
                header(auth_type::DHCHAP, auth_id::SUCCESS2, *t_id, HEADER)
            }
            Message::Failure {
                from_host,
                t_id,
                rescode,
                explanation,
            } => {
                let (ty, id) = if *from_host {
                    (auth_type::DHCHAP, auth_id::FAILURE2)
                } else {
                    (auth_type::COMMON, auth_id::FAILURE1)
                };
                let mut b = header(ty, id, *t_id, FAILURE_SIZE);
                b[6] = *rescode;
                b[7] = *explanation;
                b
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all() -> Vec<Message> {
        vec![
            Message::Negotiate {
                t_id: 7,
                sc_c: 0,
                napd: 1,
                protocols: vec![Protocol {
                    authid: AUTHID_DHCHAP,
                    hashes: vec![1, 2, 3],
                    groups: vec![0, 1, 2, 3, 4, 5],
                }],
            },
            Message::Challenge {
                t_id: 7,
                hash: 1,
                group: 1,
                seqnum: 0xdead_beef,
                challenge: vec![9; 32],
                dhv: vec![3; 256],
            },
            Message::Reply {
                t_id: 7,
                cvalid: true,
                seqnum: 5,
                response: vec![1; 48],
                challenge: vec![2; 48],
                dhv: vec![],
            },
            Message::Success1 {
                t_id: 7,
                hl: 64,
                response: Some(vec![4; 64]),
            },
            Message::Success1 {
                t_id: 7,
                hl: 32,
                response: None,
            },
            Message::Success2 { t_id: 7 },
            Message::Failure {
                from_host: false,
                t_id: 7,
                rescode: RESCODE_FAILED,
                explanation: reason::HASH_UNUSABLE,
            },
            Message::Failure {
                from_host: true,
                t_id: 7,
                rescode: RESCODE_FAILED,
                explanation: reason::FAILED,
            },
        ]
    }

    #[test]
    fn round_trip_and_layout() {
        for m in all() {
            let b = m.encode();
            assert_eq!(Message::parse(&b).unwrap(), m, "{m:?}");
            // Padding after a message (a Receive's allocation length) is ignored.
            let mut padded = b.clone();
            padded.resize(4096, 0);
            assert_eq!(Message::parse(&padded).unwrap(), m);
            // One byte short is refused, never read past.
            assert_eq!(
                Message::parse(&b[..b.len() - 1]),
                Err(MessageError::Short),
                "{m:?}"
            );
        }
        // The layout Linux sends: Negotiate is 8 + 64 bytes, ids at 4 and 34.
        let n = all()[0].encode();
        assert_eq!(n.len(), 72);
        assert_eq!((n[7], n[8], n[10], n[11]), (1, 1, 3, 6));
        assert_eq!(&n[12..15], &[1, 2, 3]);
        assert_eq!(&n[42..48], &[0, 1, 2, 3, 4, 5]);
        let f = all()[6].encode();
        assert_eq!(f, vec![0, 0xF1, 0, 0, 7, 0, 1, 4]);
    }

    #[test]
    fn command_fields() {
        let c = AuthCommand::dhchap(72).to_command(3, false);
        assert_eq!(c.fctype(), opcode::fctype::AUTH_SEND);
        assert_eq!((c.raw[41], c.raw[42], c.raw[43]), (1, 1, 0xE9));
        assert_eq!(AuthCommand::from_command(&c), AuthCommand::dhchap(72));
        assert_eq!(AuthCommand::dhchap(72).invalid_field(), None);
        assert_eq!(AuthCommand::dhchap(0).invalid_field(), Some(44));
        let bad = AuthCommand {
            secp: 0xEA,
            ..AuthCommand::dhchap(8)
        };
        assert_eq!(bad.invalid_field(), Some(43));
        let r = AuthCommand::dhchap(4096).to_command(4, true);
        assert_eq!(r.fctype(), opcode::fctype::AUTH_RECEIVE);
    }

    proptest! {
        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Message::parse(&b);
        }
    }
}
