//! One queue's authentication as the host runs it: Negotiate out, Challenge
//! in, Reply out, Success1 in, and with bidirectional authentication
//! Success2 (or Failure2) out.

use nvme::auth::{reason, Message, RESCODE_FAILED};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::group::GroupId;
use crate::hash::HashId;
use crate::response::{self, Transcript};
use crate::secret::Secret;

/// Why the host's side of a transaction ended without success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The controller sent AUTH_Failure1 with this reason.
    #[error("the controller refused: {}", reason::name(*.0))]
    Refused(u8),
    /// The controller's message was wrong: the host sends Failure2 with
    /// this reason ([`Transaction::failure2`]).
    #[error("the controller's message is not usable: {}", reason::name(*.0))]
    Protocol(u8),
    /// The controller did not prove its key.
    #[error("the controller did not prove it holds the controller key")]
    ControllerNotAuthenticated,
}

impl HostError {
    /// The reason a Failure2 carries for this error, if one is owed.
    pub fn failure2_reason(&self) -> Option<u8> {
        match self {
            HostError::Refused(_) => None,
            HostError::Protocol(r) => Some(*r),
            HostError::ControllerNotAuthenticated => Some(reason::FAILED),
        }
    }
}

/// The host's side of one transaction.
pub struct Transaction {
    key: Secret,
    ctrl_key: Option<Secret>,
    hostnqn: String,
    subnqn: String,
    t_id: u16,
    /// What the host offers, in order of preference.
    pub hashes: Vec<HashId>,
    /// Likewise.
    pub groups: Vec<GroupId>,
    hash: Option<HashId>,
    shared: Option<Zeroizing<Vec<u8>>>,
    c2: Option<(Zeroizing<Vec<u8>>, u32)>,
}

impl Transaction {
    /// A transaction for `hostnqn` holding `key`; with `ctrl_key`, the
    /// controller must prove it holds that key (bidirectional).
    pub fn new(
        key: Secret,
        ctrl_key: Option<Secret>,
        hostnqn: &str,
        subnqn: &str,
        t_id: u16,
    ) -> Transaction {
        Transaction {
            key,
            ctrl_key,
            hostnqn: hostnqn.into(),
            subnqn: subnqn.into(),
            t_id,
            hashes: HashId::ALL.to_vec(),
            groups: GroupId::ALL.to_vec(),
            hash: None,
            shared: None,
            c2: None,
        }
    }

    /// The hash and group the controller chose (after its Challenge).
    pub fn agreed(&self) -> Option<HashId> {
        self.hash
    }

    /// AUTH_Negotiate, offering every hash and group (as Linux).
    pub fn negotiate(&self) -> Vec<u8> {
        let hashes: Vec<u8> = self.hashes.iter().map(|h| *h as u8).collect();
        let groups: Vec<u8> = self.groups.iter().map(|g| *g as u8).collect();
        Message::negotiate(self.t_id, &hashes, &groups).encode()
    }

    fn expect(&self, data: &[u8]) -> Result<Message, HostError> {
        let m = Message::parse(data).map_err(|_| HostError::Protocol(reason::INCORRECT_PAYLOAD))?;
        if let Message::Failure {
            from_host: false,
            explanation,
            ..
        } = m
        {
            return Err(HostError::Refused(explanation));
        }
        if m.t_id() != self.t_id {
            return Err(HostError::Protocol(reason::INCORRECT_PAYLOAD));
        }
        Ok(m)
    }

    /// The controller's Challenge (or Failure1) in, the Reply out.
    pub fn challenge(&mut self, data: &[u8]) -> Result<Vec<u8>, HostError> {
        let Message::Challenge {
            hash,
            group,
            seqnum,
            challenge,
            dhv,
            ..
        } = self.expect(data)?
        else {
            return Err(HostError::Protocol(reason::INCORRECT_MESSAGE));
        };
        let hash = HashId::from_id(hash)
            .filter(|h| self.hashes.contains(h))
            .ok_or(HostError::Protocol(reason::HASH_UNUSABLE))?;
        if challenge.len() != hash.len() {
            return Err(HostError::Protocol(reason::HASH_UNUSABLE));
        }
        let group = GroupId::from_id(group)
            .filter(|g| self.groups.contains(g))
            .ok_or(HostError::Protocol(reason::DHGROUP_UNUSABLE))?;
        let mut host_dhv = Vec::new();
        if group == GroupId::Null {
            if !dhv.is_empty() {
                return Err(HostError::Protocol(reason::DHGROUP_UNUSABLE));
            }
        } else {
            let keys = group.generate().expect("a DH group");
            self.shared = Some(
                keys.shared(&dhv)
                    .map_err(|_| HostError::Protocol(reason::DHGROUP_UNUSABLE))?,
            );
            host_dhv = keys.public.clone();
        }
        self.hash = Some(hash);
        let c1 = response::challenge(
            hash,
            self.shared.as_deref().map(|s| s.as_slice()),
            &challenge,
        );
        let key = self.key.transformed(&self.hostnqn);
        let r1 = Transcript {
            challenge: &c1,
            seqnum,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
        }
        .host(hash, &key);
        let (cvalid, s2, c2) = if self.ctrl_key.is_some() {
            let mut c2 = Zeroizing::new(vec![0u8; hash.len()]);
            crate::random(&mut c2);
            (true, crate::seqnum(), c2)
        } else {
            (false, 0, Zeroizing::new(vec![0u8; hash.len()]))
        };
        let msg = Message::Reply {
            t_id: self.t_id,
            cvalid,
            seqnum: s2,
            response: r1.to_vec(),
            challenge: c2.to_vec(),
            dhv: host_dhv,
        };
        if cvalid {
            self.c2 = Some((c2, s2));
        }
        Ok(msg.encode())
    }

    /// Success1 (or Failure1) in. With bidirectional authentication, the
    /// controller's response is checked and Success2 comes out.
    pub fn success1(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        let hash = self
            .hash
            .ok_or(HostError::Protocol(reason::INCORRECT_MESSAGE))?;
        let Message::Success1 { hl, response, .. } = self.expect(data)? else {
            return Err(HostError::Protocol(reason::INCORRECT_MESSAGE));
        };
        if hl as usize != hash.len() {
            return Err(HostError::Protocol(reason::HASH_UNUSABLE));
        }
        let Some((c2, s2)) = &self.c2 else {
            return Ok(None);
        };
        let ck = self.ctrl_key.as_ref().expect("asked for with a key");
        let Some(r2) = response else {
            return Err(HostError::ControllerNotAuthenticated);
        };
        let c = response::challenge(hash, self.shared.as_deref().map(|s| s.as_slice()), c2);
        let expect = Transcript {
            challenge: &c,
            seqnum: *s2,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
        }
        .controller(hash, &ck.transformed(&self.subnqn));
        if !bool::from(expect.as_slice().ct_eq(r2.as_slice())) {
            return Err(HostError::ControllerNotAuthenticated);
        }
        Ok(Some(Message::Success2 { t_id: self.t_id }.encode()))
    }

    /// AUTH_Failure2 with `why`.
    pub fn failure2(&self, why: u8) -> Vec<u8> {
        Message::Failure {
            from_host: true,
            t_id: self.t_id,
            rescode: RESCODE_FAILED,
            explanation: why,
        }
        .encode()
    }
}
