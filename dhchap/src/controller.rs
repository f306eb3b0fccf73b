//! One queue's authentication as the controller runs it: Negotiate in,
//! Challenge out, Reply in, Success1 (or Failure1) out, and with
//! bidirectional authentication Success2 (or Failure2) in.
//!
//! The transport hands each Authentication Send's data to [`Transaction::send`]
//! and answers each Authentication Receive with [`Transaction::receive`];
//! the events returned say when the queue became authenticated and when
//! the association must end (after a failure message was exchanged).

use nvme::auth::{
    auth_id, reason, Message, MessageError, AUTHID_DHCHAP, DESCRIPTOR, FAILURE_SIZE,
    NEGOTIATE_HEADER, RESCODE_FAILED,
};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::group::{GroupId, KeyPair};
use crate::hash::HashId;
use crate::response::{self, Transcript};
use crate::secret::Secret;

/// What the controller requires of one host, read when a transaction starts
/// (so a new configuration applies to the next authentication).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The hash function the host must use (a host that does not offer it
    /// is refused with Hash Unusable; nvmet 7.x falls back to the host's
    /// first usable one, which lets a rewritten Negotiate pick the weakest).
    pub hash: HashId,
    /// The Diffie-Hellman group the host must accept.
    pub group: GroupId,
    /// The secret the host proves it holds.
    pub host_key: Secret,
    /// The secret the controller proves it holds, when the host asks.
    pub ctrl_key: Option<Secret>,
}

/// The two names every response covers.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    /// Host NQN of the association.
    pub hostnqn: &'a str,
    /// Subsystem NQN.
    pub subnqn: &'a str,
}

/// What a message changed for the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Nothing the queue must act on.
    None,
    /// The queue is authenticated (first time or again).
    Authenticated,
    /// Authentication failed with this reason ([`nvme::auth::reason`]):
    /// once the command that carried the failure completes, the
    /// association ends.
    Failed(u8),
}

/// An Authentication Receive whose allocation length cannot hold the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooSmall {
    /// Bytes the message needs.
    pub need: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for AUTH_Negotiate.
    Negotiate,
    /// Negotiated: the next Receive gets the Challenge.
    Challenge,
    /// Waiting for the Reply.
    Reply,
    /// The next Receive gets Success1.
    Success1,
    /// Waiting for Success2.
    Success2,
    /// The next Receive gets Failure1 with this reason.
    Failure1(u8),
}

/// What was agreed for the transaction (and, once authenticated, the last
/// successful one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreed {
    /// Hash function.
    pub hash: HashId,
    /// Diffie-Hellman group.
    pub group: GroupId,
    /// The controller proved its key too.
    pub bidirectional: bool,
}

/// Per-transaction values, dropped (and zeroed) when it ends.
struct Exchange {
    policy: Policy,
    hash: HashId,
    group: GroupId,
    s1: u32,
    c1: Zeroizing<Vec<u8>>,
    keys: Option<KeyPair>,
    shared: Option<Zeroizing<Vec<u8>>>,
    /// The host's challenge C2 and sequence number S2 (bidirectional).
    c2: Option<(Zeroizing<Vec<u8>>, u32)>,
}

/// One queue's authentication state.
pub struct Transaction {
    step: Step,
    t_id: u16,
    exchange: Option<Exchange>,
    authenticated: Option<Agreed>,
}

impl Default for Transaction {
    fn default() -> Self {
        Transaction::new()
    }
}

impl Transaction {
    /// A queue that has not authenticated.
    pub fn new() -> Transaction {
        Transaction {
            step: Step::Negotiate,
            t_id: 0,
            exchange: None,
            authenticated: None,
        }
    }

    /// Whether the queue authenticated (and no transaction failed since).
    pub fn authenticated(&self) -> Option<Agreed> {
        self.authenticated
    }

    /// Whether a transaction is under way (a deadline should run).
    pub fn in_progress(&self) -> bool {
        self.step != Step::Negotiate
    }

    fn fail(&mut self, why: u8) -> Event {
        self.step = Step::Failure1(why);
        self.exchange = None;
        Event::None
    }

    /// The data of an Authentication Send. `policy` gives the host's current
    /// requirements when a Negotiate starts a transaction (`None`: the host
    /// has no key configured).
    pub fn send(
        &mut self,
        data: &[u8],
        names: Names<'_>,
        policy: impl FnOnce() -> Option<Policy>,
    ) -> Event {
        let msg = match Message::parse(data) {
            Ok(m) => m,
            Err(MessageError::Unknown { .. }) => return self.fail(reason::INCORRECT_MESSAGE),
            Err(_) => return self.fail(reason::INCORRECT_PAYLOAD),
        };
        if let Message::Negotiate {
            t_id,
            sc_c,
            protocols,
            napd,
        } = msg
        {
            self.t_id = t_id;
            self.exchange = None;
            if data.len() < NEGOTIATE_HEADER + DESCRIPTOR || napd == 0 {
                return self.fail(reason::INCORRECT_PAYLOAD);
            }
            // Secure channel concatenation needs TLS, which RDMA has not.
            if sc_c != 0 {
                return self.fail(reason::CONCAT_MISMATCH);
            }
            let Some(p) = protocols.iter().find(|p| p.authid == AUTHID_DHCHAP) else {
                return self.fail(reason::INCORRECT_PAYLOAD);
            };
            let Some(policy) = policy() else {
                return self.fail(reason::FAILED);
            };
            // The configured hash is required, as the group is: a host (or
            // whoever rewrites its Negotiate) must not choose a weaker one.
            if !p.hashes.contains(&(policy.hash as u8)) {
                return self.fail(reason::HASH_UNUSABLE);
            }
            let hash = policy.hash;
            // The configured group is a floor, not a preference.
            if !p.groups.contains(&(policy.group as u8)) {
                return self.fail(reason::DHGROUP_UNUSABLE);
            }
            let group = policy.group;
            self.exchange = Some(Exchange {
                policy,
                hash,
                group,
                s1: 0,
                c1: Zeroizing::new(Vec::new()),
                keys: None,
                shared: None,
                c2: None,
            });
            self.step = Step::Challenge;
            return Event::None;
        }
        if let Message::Failure {
            from_host: true,
            t_id,
            explanation,
            ..
        } = msg
        {
            if self.step != Step::Negotiate && t_id == self.t_id {
                self.step = Step::Negotiate;
                self.exchange = None;
                self.authenticated = None;
                return Event::Failed(explanation);
            }
            return self.fail(reason::INCORRECT_MESSAGE);
        }
        let expected = match self.step {
            Step::Reply => auth_id::REPLY,
            Step::Success2 => auth_id::SUCCESS2,
            _ => return self.fail(reason::INCORRECT_MESSAGE),
        };
        if msg.auth_id() != expected {
            return self.fail(reason::INCORRECT_MESSAGE);
        }
        if msg.t_id() != self.t_id {
            return self.fail(reason::INCORRECT_PAYLOAD);
        }
        match msg {
            Message::Reply {
                cvalid,
                seqnum,
                response,
                challenge,
                dhv,
                ..
            } => match self.check_reply(names, cvalid, seqnum, &response, challenge, &dhv) {
                Ok(ev) => {
                    self.step = Step::Success1;
                    ev
                }
                Err(why) => self.fail(why),
            },
            Message::Success2 { .. } => self.finish(true),
            _ => self.fail(reason::INCORRECT_MESSAGE),
        }
    }

    fn check_reply(
        &mut self,
        names: Names<'_>,
        cvalid: bool,
        seqnum: u32,
        response: &[u8],
        challenge: Vec<u8>,
        dhv: &[u8],
    ) -> Result<Event, u8> {
        let x = self.exchange.as_mut().ok_or(reason::FAILED)?;
        if response.len() != x.hash.len() {
            return Err(reason::INCORRECT_PAYLOAD);
        }
        if x.group == GroupId::Null {
            if !dhv.is_empty() {
                return Err(reason::INCORRECT_PAYLOAD);
            }
        } else {
            let keys = x.keys.as_ref().ok_or(reason::FAILED)?;
            x.shared = Some(keys.shared(dhv).map_err(|_| reason::DHGROUP_UNUSABLE)?);
        }
        let c1 = response::challenge(x.hash, x.shared.as_deref().map(|s| s.as_slice()), &x.c1);
        let key = x.policy.host_key.transformed(names.hostnqn);
        let expect = Transcript {
            challenge: &c1,
            seqnum: x.s1,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: names.hostnqn,
            subnqn: names.subnqn,
        }
        .host(x.hash, &key);
        if !bool::from(expect.as_slice().ct_eq(response)) {
            return Err(reason::FAILED);
        }
        // S2 of 0 asks for no controller authentication even with a challenge.
        if cvalid && seqnum != 0 {
            x.c2 = Some((Zeroizing::new(challenge), seqnum));
            return Ok(Event::None);
        }
        self.authenticated = Some(Agreed {
            hash: x.hash,
            group: x.group,
            bidirectional: false,
        });
        Ok(Event::Authenticated)
    }

    fn finish(&mut self, bidirectional: bool) -> Event {
        if let Some(x) = self.exchange.take() {
            self.authenticated = Some(Agreed {
                hash: x.hash,
                group: x.group,
                bidirectional,
            });
        }
        self.step = Step::Negotiate;
        Event::Authenticated
    }

    /// The message for an Authentication Receive of `al` bytes.
    pub fn receive(&mut self, al: usize, names: Names<'_>) -> Result<(Vec<u8>, Event), TooSmall> {
        match self.step {
            Step::Challenge => {
                let x = self.exchange.as_mut().expect("negotiated");
                let need = nvme::auth::HEADER + x.hash.len() + x.group.value_len();
                if al < need {
                    return Err(TooSmall { need });
                }
                let mut c1 = Zeroizing::new(vec![0u8; x.hash.len()]);
                crate::random(&mut c1);
                x.s1 = crate::seqnum();
                x.keys = x.group.generate();
                let msg = Message::Challenge {
                    t_id: self.t_id,
                    hash: x.hash as u8,
                    group: x.group as u8,
                    seqnum: x.s1,
                    challenge: c1.to_vec(),
                    dhv: x
                        .keys
                        .as_ref()
                        .map(|k| k.public.clone())
                        .unwrap_or_default(),
                };
                x.c1 = c1;
                self.step = Step::Reply;
                Ok((msg.encode(), Event::None))
            }
            Step::Success1 => {
                let x = self.exchange.as_ref().expect("replied");
                let hl = x.hash.len();
                let need = nvme::auth::HEADER + if x.c2.is_some() { hl } else { 0 };
                if al < need {
                    return Err(TooSmall { need });
                }
                let response = match &x.c2 {
                    None => None,
                    Some((c2, s2)) => {
                        let Some(ck) = &x.policy.ctrl_key else {
                            // Asked to prove a key the controller was not given.
                            self.step = Step::Failure1(reason::FAILED);
                            return self.receive(al, names);
                        };
                        let c = response::challenge(
                            x.hash,
                            x.shared.as_deref().map(|s| s.as_slice()),
                            c2,
                        );
                        let key = ck.transformed(names.subnqn);
                        let r = Transcript {
                            challenge: &c,
                            seqnum: *s2,
                            t_id: self.t_id,
                            sc_c: 0,
                            hostnqn: names.hostnqn,
                            subnqn: names.subnqn,
                        }
                        .controller(x.hash, &key);
                        Some(r.to_vec())
                    }
                };
                let msg = Message::Success1 {
                    t_id: self.t_id,
                    hl: hl as u8,
                    response: response.clone(),
                };
                if response.is_some() {
                    self.step = Step::Success2;
                } else {
                    // Authenticated at the Reply already (the event was given then).
                    self.finish(false);
                }
                Ok((msg.encode(), Event::None))
            }
            Step::Failure1(why) => self.failure1(al, why),
            // Nothing to say now (no transaction, or one waiting for the
            // host's message): as nvmet, the transaction fails.
            Step::Negotiate | Step::Reply | Step::Success2 => self.failure1(al, reason::FAILED),
        }
    }

    fn failure1(&mut self, al: usize, why: u8) -> Result<(Vec<u8>, Event), TooSmall> {
        if al < FAILURE_SIZE {
            return Err(TooSmall { need: FAILURE_SIZE });
        }
        let msg = Message::Failure {
            from_host: false,
            t_id: self.t_id,
            rescode: RESCODE_FAILED,
            explanation: why,
        };
        self.step = Step::Negotiate;
        self.exchange = None;
        self.authenticated = None;
        Ok((msg.encode(), Event::Failed(why)))
    }
}
