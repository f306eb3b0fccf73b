//! The host's identity: host NQN and host identifier, as nvme-cli finds them.

/// Host NQN and host identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host NQN.
    pub nqn: String,
    /// Host identifier (16 bytes).
    pub id: [u8; 16],
}

pub use nvme::fabrics::{format_uuid, parse_uuid};

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn random_uuid() -> [u8; 16] {
    read_trimmed("/proc/sys/kernel/random/uuid")
        .and_then(|s| parse_uuid(&s))
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            (t ^ (std::process::id() as u128) << 64).to_le_bytes()
        })
}

impl HostIdentity {
    /// Builds an identity from an optional host NQN and host id: a missing id
    /// is taken from a `...:uuid:<uuid>` NQN, a missing NQN from the id.
    pub fn from_parts(nqn: Option<String>, id: Option<[u8; 16]>) -> HostIdentity {
        let id = id
            .or_else(|| {
                nqn.as_deref()
                    .and_then(|n| n.rsplit_once(":uuid:"))
                    .and_then(|(_, u)| parse_uuid(u))
            })
            .unwrap_or_else(random_uuid);
        let nqn =
            nqn.unwrap_or_else(|| format!("nqn.2014-08.org.nvmexpress:uuid:{}", format_uuid(&id)));
        HostIdentity { nqn, id }
    }

    /// The system's identity: `/etc/nvme/hostnqn` and `/etc/nvme/hostid`, as
    /// nvme-cli uses them, overridden by the arguments when given. A host
    /// NQN other than the system's never takes the system's host ID (a
    /// target binds an ID to the NQN that uses it, and the Linux host
    /// refuses the pairing too): without an ID of its own, it takes the one
    /// its `...:uuid:` NQN names, else one derived from the NQN.
    pub fn system(nqn: Option<String>, id: Option<[u8; 16]>) -> HostIdentity {
        let system_nqn = read_trimmed("/etc/nvme/hostnqn");
        let own = nqn.is_some() && nqn != system_nqn;
        let nqn = nqn.or(system_nqn);
        let id = match (id, own, &nqn) {
            (Some(id), _, _) => Some(id),
            (None, false, _) => read_trimmed("/etc/nvme/hostid").and_then(|s| parse_uuid(&s)),
            (None, true, Some(n)) if n.contains(":uuid:") => None,
            (None, true, Some(n)) => Some(derived_id(n)),
            (None, true, None) => None,
        };
        HostIdentity::from_parts(nqn, id)
    }
}

/// A host ID derived from a host NQN (the same for the same NQN): two
/// 64-bit FNV-1a digests with different seeds, in the layout of a UUID of
/// version 8 (vendor-defined).
pub fn derived_id(nqn: &str) -> [u8; 16] {
    let fnv = |seed: u64| {
        nqn.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0x6e76_6d66).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x686f_7374).to_be_bytes());
    id[6] = (id[6] & 0x0F) | 0x80;
    id[8] = (id[8] & 0x3F) | 0x80;
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_parts() {
        let n = "nqn.2014-08.org.nvmexpress:uuid:48ffc9b4-77a6-42da-9477-ef5ebf9e6038";
        let h = HostIdentity::from_parts(Some(n.into()), None);
        assert_eq!(format_uuid(&h.id), "48ffc9b4-77a6-42da-9477-ef5ebf9e6038");
        let h2 = HostIdentity::from_parts(None, Some(h.id));
        assert_eq!(h2.nqn, n);
        let h3 = HostIdentity::from_parts(Some("nqn.2026-11.io.example:host1".into()), None);
        assert_eq!(h3.nqn, "nqn.2026-11.io.example:host1");
    }

    /// A named host other than the system's gets an ID of its own, the
    /// same each time; the system's NQN keeps the system's ID.
    #[test]
    fn a_named_host_never_takes_the_systems_id() {
        let a = HostIdentity::system(Some("nqn.2026-11.io.example:a".into()), None);
        let again = HostIdentity::system(Some("nqn.2026-11.io.example:a".into()), None);
        let b = HostIdentity::system(Some("nqn.2026-11.io.example:b".into()), None);
        assert_eq!(a.id, again.id);
        assert_ne!(a.id, b.id);
        if let Some(sys) = read_trimmed("/etc/nvme/hostid").and_then(|s| parse_uuid(&s)) {
            assert_ne!(a.id, sys);
        }
        let u = "nqn.2014-08.org.nvmexpress:uuid:48ffc9b4-77a6-42da-9477-ef5ebf9e6038";
        assert_eq!(
            format_uuid(&HostIdentity::system(Some(u.into()), None).id),
            "48ffc9b4-77a6-42da-9477-ef5ebf9e6038"
        );
        assert_eq!(derived_id("x"), derived_id("x"));
        assert_eq!(derived_id("x")[6] >> 4, 8, "version 8");
    }
}
