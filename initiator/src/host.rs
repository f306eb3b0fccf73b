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
    /// nvme-cli uses them, overridden by the arguments when given.
    pub fn system(nqn: Option<String>, id: Option<[u8; 16]>) -> HostIdentity {
        let nqn = nqn.or_else(|| read_trimmed("/etc/nvme/hostnqn"));
        let id = id.or_else(|| read_trimmed("/etc/nvme/hostid").and_then(|s| parse_uuid(&s)));
        HostIdentity::from_parts(nqn, id)
    }
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
}
