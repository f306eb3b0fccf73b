//! The reservation state of one namespace, as a pure state machine: who is
//! registered with which key, who holds the reservation and of which type,
//! and what each Register, Acquire and Release does to it (NVMe Base,
//! "Reservations"). Hosts are named by their host identifier, so a host
//! with several controllers (multipath, several gateways) is one registrant.

use nvme::reservation::{notice, racqa, rrega, rrela, ResvType};
use nvme::Status;
use serde::{Deserialize, Serialize};

/// A host identifier (the Connect command's 128-bit HOSTID).
pub type HostId = [u8; 16];

/// Registrants a namespace keeps at most: a host with access could
/// otherwise register under ever new host identifiers (a host chooses its
/// own) and grow the state, and every report and persisted copy with it.
pub const MAX_REGISTRANTS: usize = 128;

/// What a registration keeps of the host NQN that made it: the first 16
/// bytes of its SHA-256 (all zero: not known, a state from before).
pub type NqnTag = [u8; 16];

/// The tag of host NQN `nqn`.
pub fn nqn_tag(nqn: &str) -> NqnTag {
    use sha2::Digest;
    let d = sha2::Sha256::digest(nqn.as_bytes());
    let mut t = [0; 16];
    t.copy_from_slice(&d[..16]);
    t
}

fn is_unknown(t: &NqnTag) -> bool {
    *t == [0; 16]
}

/// A registered host and its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registrant {
    /// The host.
    pub host: HostId,
    /// Its reservation key.
    pub key: u64,
    /// The host NQN that registered it: the host identifier stays bound
    /// to it while the registration lasts, on every gateway that shares
    /// the state.
    #[serde(default, skip_serializing_if = "is_unknown")]
    pub nqn: NqnTag,
}

/// The reservation and the host that acquired it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The type.
    pub rtype: u8,
    /// The host that acquired it (for the All Registrants types, every
    /// registrant holds it; this is the one that took it).
    pub host: HostId,
}

/// The state of one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reservations {
    /// Registered hosts, in the order they registered.
    pub registrants: Vec<Registrant>,
    /// The reservation, if one is held.
    pub holder: Option<Holder>,
    /// Generation: counts the changes of registrations (register,
    /// unregister, replace, preempt, clear); wraps.
    pub generation: u32,
    /// Persist Through Power Loss: the state outlives a restart.
    pub ptpl: bool,
}

/// A notice for a host's Reservation Notification log.
pub type Notice = (HostId, u8);

/// What a command that succeeded did, beyond its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// The state changed (to persist and share).
    pub changed: bool,
    /// Notices for other hosts' controllers.
    pub notices: Vec<Notice>,
    /// Hosts whose registrations were preempted by Preempt and Abort: their
    /// commands to the namespace are aborted.
    pub aborted: Vec<HostId>,
    /// The host NQN tag each notice's host was registered under before the
    /// change (where bound): a notice reaches only controllers of it.
    pub bindings: Vec<(HostId, NqnTag)>,
}

impl Effects {
    /// The tag `host`'s notices are bound to, if any.
    pub fn binding(&self, host: &HostId) -> Option<&NqnTag> {
        binding(&self.bindings, host)
    }
}

/// The tag `host` is bound to in `bindings`, if any.
pub fn binding<'a>(bindings: &'a [(HostId, NqnTag)], host: &HostId) -> Option<&'a NqnTag> {
    bindings.iter().find(|(h, _)| h == host).map(|(_, t)| t)
}

/// The fields of a Register, Acquire or Release command.
pub use nvme::reservation::ResvCommand as Request;

/// How a host may access a namespace, for the conflict check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A command of the read group (Read, Compare).
    Read,
    /// A command of the write group (Write, Write Zeroes, Dataset
    /// Management, Flush).
    Write,
}

impl Reservations {
    fn find(&self, host: &HostId) -> Option<usize> {
        self.registrants.iter().position(|r| &r.host == host)
    }

    /// Whether `host` is registered by another host NQN than the one
    /// `nqn` tags.
    pub fn bound_elsewhere(&self, host: &HostId, nqn: &NqnTag) -> bool {
        self.find(host).is_some_and(|i| {
            !is_unknown(&self.registrants[i].nqn) && self.registrants[i].nqn != *nqn
        })
    }

    /// Binds `host`'s registration, if any, to the host NQN `nqn` tags
    /// (where none is known yet). Returns whether that changed the state.
    pub fn bind(&mut self, host: &HostId, nqn: &NqnTag) -> bool {
        match self.find(host) {
            Some(i) if is_unknown(&self.registrants[i].nqn) => {
                self.registrants[i].nqn = *nqn;
                true
            }
            _ => false,
        }
    }

    /// Whether `host` is registered.
    pub fn is_registered(&self, host: &HostId) -> bool {
        self.find(host).is_some()
    }

    /// The reservation's type, if one is held.
    pub fn rtype(&self) -> Option<ResvType> {
        self.holder.and_then(|h| ResvType::from_u8(h.rtype))
    }

    /// Whether `host` holds the reservation (for the All Registrants types:
    /// is registered).
    pub fn holds(&self, host: &HostId) -> bool {
        match (self.holder, self.rtype()) {
            (Some(_), Some(t)) if t.all_registrants() => self.is_registered(host),
            (Some(h), _) => &h.host == host,
            _ => false,
        }
    }

    /// Whether `host`, connected under the host NQN `nqn` tags, may run a
    /// command of kind `access` now. A registration that another host NQN
    /// made is not this host's: a peer that took the identifier on another
    /// gateway before the registration was made there has no part in it.
    pub fn allows(&self, host: &HostId, nqn: &NqnTag, access: Access) -> bool {
        let Some(t) = self.rtype() else {
            return true;
        };
        let own = !self.bound_elsewhere(host, nqn);
        if own && (self.holds(host) || (t.registrants_allowed() && self.is_registered(host))) {
            return true;
        }
        access == Access::Read && !t.excludes_reads()
    }

    /// The registered host that `host` is, if it is registered with `key`
    /// (or `iekey` says not to check).
    fn check_key(&self, host: &HostId, key: u64, iekey: bool) -> Result<usize, Status> {
        match self.find(host) {
            Some(i) if iekey || self.registrants[i].key == key => Ok(i),
            _ => Err(Status::RESERVATION_CONFLICT),
        }
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Hosts registered, but `host`.
    fn others(&self, host: &HostId) -> impl Iterator<Item = HostId> + '_ {
        let host = *host;
        self.registrants
            .iter()
            .map(|r| r.host)
            .filter(move |h| *h != host)
    }

    /// Removes `host`'s registration; a reservation it held alone goes with
    /// it (the others registered hear of it when registrants had access).
    fn unregister(&mut self, i: usize, fx: &mut Effects) {
        let host = self.registrants.remove(i).host;
        if let (Some(h), Some(t)) = (self.holder, self.rtype()) {
            let last = self.registrants.is_empty();
            if (t.all_registrants() && last) || (!t.all_registrants() && h.host == host) {
                self.holder = None;
                if t.registrants_allowed() {
                    self.notify_others(&host, notice::RESERVATION_RELEASED, fx);
                }
            }
        }
    }

    /// Registers `host` with `key` (within the cap).
    fn add(&mut self, host: &HostId, key: u64, fx: &mut Effects) -> Result<(), Status> {
        if self.registrants.len() >= MAX_REGISTRANTS {
            return Err(Status::CAPACITY_EXCEEDED);
        }
        self.registrants.push(Registrant {
            host: *host,
            key,
            nqn: [0; 16],
        });
        self.bump();
        fx.changed = true;
        Ok(())
    }

    /// Reservation Register. `ptpl_capable`: the state can persist, and
    /// CPTPL is honoured; otherwise it is ignored (RESCAP says PTPL is not
    /// supported; the Linux host sends "set" with every registration).
    pub fn register(
        &mut self,
        host: &HostId,
        req: &Request,
        ptpl_capable: bool,
    ) -> Result<Effects, Status> {
        use nvme::reservation::cptpl;
        let ptpl = match req.cptpl {
            _ if !ptpl_capable => None,
            cptpl::NO_CHANGE => None,
            cptpl::CLEAR => Some(false),
            cptpl::SET => Some(true),
            _ => return Err(Status::INVALID_FIELD),
        };
        let mut fx = Effects::default();
        let nrkey = req.key2;
        match req.action {
            rrega::REGISTER => match self.find(host) {
                // Registered again with its key: nothing changes, but the
                // command succeeded, and every successful Register counts.
                Some(i) if self.registrants[i].key == nrkey => {
                    self.bump();
                    fx.changed = true;
                }
                Some(_) => return Err(Status::RESERVATION_CONFLICT),
                None => self.add(host, nrkey, &mut fx)?,
            },
            rrega::UNREGISTER => {
                let i = self.check_key(host, req.crkey, req.iekey)?;
                self.unregister(i, &mut fx);
                self.bump();
                fx.changed = true;
            }
            // Replace, ignoring the key, by a host not registered yet:
            // registers it with the new key (which may not be 0 then).
            rrega::REPLACE if req.iekey && self.find(host).is_none() => {
                if nrkey == 0 {
                    return Err(Status::INVALID_FIELD);
                }
                self.add(host, nrkey, &mut fx)?;
            }
            rrega::REPLACE => {
                let i = self.check_key(host, req.crkey, req.iekey)?;
                self.registrants[i].key = nrkey;
                self.bump();
                fx.changed = true;
            }
            _ => return Err(Status::INVALID_FIELD),
        }
        if let Some(p) = ptpl {
            fx.changed |= self.ptpl != p;
            self.ptpl = p;
        }
        Ok(fx)
    }

    /// Unregisters every host registered with `key` but `host`; returns them.
    fn remove_key(&mut self, host: &HostId, key: u64) -> Vec<HostId> {
        let mut gone = Vec::new();
        self.registrants.retain(|r| {
            let out = r.key == key && &r.host != host;
            if out {
                gone.push(r.host);
            }
            !out
        });
        gone
    }

    /// Reservation Acquire.
    pub fn acquire(&mut self, host: &HostId, req: &Request) -> Result<Effects, Status> {
        // IEKEY is reserved in Acquire and Release since NVMe 1.3 (RESCAP
        // bit 7 says so).
        if req.iekey || req.action > racqa::PREEMPT_ABORT {
            return Err(Status::INVALID_FIELD);
        }
        let rtype = ResvType::from_u8(req.rtype).ok_or(Status::INVALID_FIELD)?;
        self.check_key(host, req.crkey, false)?;
        let mut fx = Effects::default();
        let take = Holder {
            rtype: rtype as u8,
            host: *host,
        };
        if req.action == racqa::ACQUIRE {
            return match self.rtype() {
                None => {
                    self.holder = Some(take);
                    fx.changed = true;
                    Ok(fx)
                }
                Some(t) if t == rtype && self.holds(host) => Ok(fx),
                Some(_) => Err(Status::RESERVATION_CONFLICT),
            };
        }
        let prkey = req.key2;
        let holder_key = self
            .holder
            .and_then(|h| self.find(&h.host))
            .map(|i| self.registrants[i].key);
        let gone = match self.rtype() {
            // All Registrants with PRKEY 0: every other registration goes,
            // and the issuer holds a reservation of the new type.
            Some(t) if t.all_registrants() && prkey == 0 => {
                let gone: Vec<HostId> = self.others(host).collect();
                self.registrants.retain(|r| &r.host == host);
                self.holder = Some(take);
                gone
            }
            // The holder's key: the holder (and every other host registered
            // with that key) is preempted and the issuer holds the new type;
            // a holder that names its own key changes the type.
            Some(t) if !t.all_registrants() && holder_key == Some(prkey) => {
                let gone = self.remove_key(host, prkey);
                self.holder = Some(take);
                if t != rtype {
                    self.notify_others(host, notice::RESERVATION_RELEASED, &mut fx);
                }
                gone
            }
            // PRKEY 0 names nobody while another host holds the reservation.
            Some(t) if !t.all_registrants() && prkey == 0 => {
                return Err(Status::INVALID_FIELD);
            }
            // Otherwise only registrations go (the reservation stays): PRKEY
            // must name one.
            _ => {
                let gone = self.remove_key(host, prkey);
                if gone.is_empty() {
                    return Err(Status::RESERVATION_CONFLICT);
                }
                gone
            }
        };
        fx.notices
            .extend(gone.iter().map(|&g| (g, notice::REGISTRATION_PREEMPTED)));
        if req.action == racqa::PREEMPT_ABORT {
            fx.aborted = gone;
        }
        if self.registrants.is_empty() {
            self.holder = None;
        }
        self.bump();
        fx.changed = true;
        Ok(fx)
    }

    /// Adds a notice of `kind` for every registered host but `host`.
    fn notify_others(&self, host: &HostId, kind: u8, fx: &mut Effects) {
        fx.notices.extend(self.others(host).map(|o| (o, kind)));
    }

    /// Reservation Release.
    pub fn release(&mut self, host: &HostId, req: &Request) -> Result<Effects, Status> {
        if req.iekey || req.action > rrela::CLEAR {
            return Err(Status::INVALID_FIELD);
        }
        self.check_key(host, req.crkey, false)?;
        let mut fx = Effects::default();
        match req.action {
            rrela::RELEASE => {
                let Some(t) = self.rtype() else {
                    return Ok(fx);
                };
                if !self.holds(host) {
                    return Ok(fx);
                }
                if t as u8 != req.rtype {
                    return Err(Status::INVALID_FIELD);
                }
                self.holder = None;
                fx.changed = true;
                if t.registrants_allowed() {
                    self.notify_others(host, notice::RESERVATION_RELEASED, &mut fx);
                }
            }
            rrela::CLEAR => {
                self.notify_others(host, notice::RESERVATION_PREEMPTED, &mut fx);
                self.registrants.clear();
                self.holder = None;
                self.bump();
                fx.changed = true;
            }
            _ => return Err(Status::INVALID_FIELD),
        }
        Ok(fx)
    }

    /// Applies a Register, Acquire or Release (`ptpl_capable`: see
    /// [`Reservations::register`]).
    pub fn apply(
        &mut self,
        host: &HostId,
        req: &Request,
        ptpl_capable: bool,
    ) -> Result<Effects, Status> {
        use nvme::opcode::io;
        let before = self.registrants.clone();
        let mut fx = match req.opcode {
            io::RESV_REGISTER => self.register(host, req, ptpl_capable),
            io::RESV_ACQUIRE => self.acquire(host, req),
            io::RESV_RELEASE => self.release(host, req),
            _ => Err(Status::INVALID_OPCODE),
        }?;
        fx.bindings = fx
            .notices
            .iter()
            .filter_map(|(h, _)| {
                before
                    .iter()
                    .find(|r| r.host == *h && !is_unknown(&r.nqn))
                    .map(|r| (*h, r.nqn))
            })
            .collect();
        Ok(fx)
    }

    /// Checks the invariants a state must keep (loaded from a file or the
    /// cluster, it may not): registrants unique and within the cap, a held
    /// reservation of a valid type whose acquirer is registered.
    pub fn valid(&self) -> bool {
        let mut hosts: Vec<&HostId> = self.registrants.iter().map(|r| &r.host).collect();
        hosts.sort();
        hosts.dedup();
        hosts.len() == self.registrants.len()
            && self.registrants.len() <= MAX_REGISTRANTS
            && self.holder.is_none_or(|h| {
                ResvType::from_u8(h.rtype).is_some()
                    && (ResvType::from_u8(h.rtype).is_some_and(|t| t.all_registrants())
                        || self.is_registered(&h.host))
            })
    }
}
