//! Asymmetric Namespace Access (NVMe base specification 2.0, 8.1): the
//! state of an ANA group at a controller, and the ANA log page (LID 0x0C)
//! that reports the groups and their namespaces.

use crate::bytes::*;
use crate::{need, WireError};

/// Highest ANA group id a target supports (ANAGRPMAX, NANAGRPID), as nvmet.
pub const MAX_GROUPS: u32 = 128;

/// Size of the ANA log page header.
pub const HEADER_SIZE: usize = 16;
/// Size of a group descriptor without its namespace list.
pub const DESC_SIZE: usize = 32;

/// Bits of ANACAP (Identify Controller byte 344): the states a controller
/// reports.
pub const ANACAP_ALL_STATES: u8 = 0x1F;

/// The access state of an ANA group at a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AnaState {
    /// ANA Optimized: the preferred path.
    Optimized,
    /// ANA Non-Optimized: usable, not preferred.
    NonOptimized,
    /// ANA Inaccessible: commands fail with the ANA Inaccessible status.
    Inaccessible,
    /// ANA Persistent Loss: the namespaces are gone at this controller.
    PersistentLoss,
    /// ANA Change: in transition.
    Change,
}

impl AnaState {
    /// The wire value (ANA group descriptor byte 16, bits 3:0).
    pub fn code(self) -> u8 {
        match self {
            AnaState::Optimized => 0x1,
            AnaState::NonOptimized => 0x2,
            AnaState::Inaccessible => 0x3,
            AnaState::PersistentLoss => 0x4,
            AnaState::Change => 0xF,
        }
    }

    /// The state of a wire value.
    pub fn from_code(c: u8) -> Option<AnaState> {
        Some(match c & 0xF {
            0x1 => AnaState::Optimized,
            0x2 => AnaState::NonOptimized,
            0x3 => AnaState::Inaccessible,
            0x4 => AnaState::PersistentLoss,
            0xF => AnaState::Change,
            _ => return None,
        })
    }

    /// The name used in configuration files and by nvme-cli.
    pub fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    /// The state named `s` (see [`AnaState::name`]).
    pub fn from_name(s: &str) -> Option<AnaState> {
        [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
            AnaState::PersistentLoss,
            AnaState::Change,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }

    /// The status of a command to a namespace of a group in this state, if
    /// it may not run (a path-related status: the host tries another path).
    pub fn refusal(self) -> Option<crate::Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(crate::Status::ANA_INACCESSIBLE),
            AnaState::PersistentLoss => Some(crate::Status::ANA_PERSISTENT_LOSS),
            AnaState::Change => Some(crate::Status::ANA_TRANSITION),
        }
    }
}

/// One ANA group in the log page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaGroup {
    /// ANA group id (1..=[`MAX_GROUPS`]).
    pub id: u32,
    /// Its state at the controller the log is read from.
    pub state: AnaState,
    /// Its namespaces (listed unless only the groups are asked for).
    pub nsids: Vec<u32>,
}

/// Encodes the ANA log page: `change_count`, then each group with its
/// change count (the same) and, unless `groups_only` (LSP bit 0, RGO), its
/// namespace ids.
pub fn encode_log(change_count: u64, groups: &[AnaGroup], groups_only: bool) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_SIZE];
    put_u64(&mut b, 0, change_count);
    put_u16(&mut b, 8, groups.len() as u16);
    for g in groups {
        let mut d = [0u8; DESC_SIZE];
        let n = if groups_only { 0 } else { g.nsids.len() };
        put_u32(&mut d, 0, g.id);
        put_u32(&mut d, 4, n as u32);
        put_u64(&mut d, 8, change_count);
        d[16] = g.state.code();
        b.extend_from_slice(&d);
        for &id in &g.nsids[..n] {
            b.extend_from_slice(&id.to_le_bytes());
        }
    }
    b
}

/// Parses an ANA log page: its change count and groups (a state the
/// specification does not define reads as [`AnaState::Change`]).
pub fn parse_log(b: &[u8]) -> Result<(u64, Vec<AnaGroup>), WireError> {
    need("ANA log header", b, HEADER_SIZE)?;
    let count = u64_at(b, 0);
    let n = u16_at(b, 8) as usize;
    let mut off = HEADER_SIZE;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        need("ANA group descriptor", b, off + DESC_SIZE)?;
        let id = u32_at(b, off);
        let nn = u32_at(b, off + 4) as usize;
        let state = AnaState::from_code(b[off + 16]).unwrap_or(AnaState::Change);
        off += DESC_SIZE;
        need("ANA group namespace list", b, off + nn * 4)?;
        let nsids = (0..nn).map(|i| u32_at(b, off + i * 4)).collect();
        off += nn * 4;
        groups.push(AnaGroup { id, state, nsids });
    }
    Ok((count, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn states() {
        for s in [
            AnaState::Optimized,
            AnaState::NonOptimized,
            AnaState::Inaccessible,
            AnaState::PersistentLoss,
            AnaState::Change,
        ] {
            assert_eq!(AnaState::from_code(s.code()), Some(s));
            assert_eq!(AnaState::from_name(s.name()), Some(s));
        }
        assert_eq!(AnaState::from_code(0), None);
        assert_eq!(AnaState::from_name("optimised"), None);
        assert_eq!(AnaState::Optimized.refusal(), None);
        let st = AnaState::Inaccessible.refusal().unwrap();
        assert_eq!((st.sct, st.sc, st.dnr), (3, 0x02, false));
    }

    #[test]
    fn log_layout() {
        let g = [
            AnaGroup {
                id: 1,
                state: AnaState::Optimized,
                nsids: vec![1, 3],
            },
            AnaGroup {
                id: 2,
                state: AnaState::Inaccessible,
                nsids: vec![2],
            },
        ];
        let b = encode_log(7, &g, false);
        assert_eq!(b.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(u64_at(&b, 0), 7);
        assert_eq!(u16_at(&b, 8), 2);
        assert_eq!(u32_at(&b, 16), 1, "ANAGRPID");
        assert_eq!(u32_at(&b, 20), 2, "NNSIDS");
        assert_eq!(u64_at(&b, 24), 7, "change count");
        assert_eq!(b[32], 0x1, "state");
        assert_eq!(u32_at(&b, 48), 1);
        assert_eq!(u32_at(&b, 52), 3);
        assert_eq!(b[56 + 16], 0x3);
        let r = encode_log(7, &g, true);
        assert_eq!(r.len(), 16 + 32 * 2, "RGO: no namespace lists");
        assert_eq!(parse_log(&r).unwrap().1[1].nsids, Vec::<u32>::new());
        assert!(parse_log(&b[..b.len() - 1]).is_err());
    }

    proptest! {
        #[test]
        fn log_roundtrip(count in any::<u64>(), groups in proptest::collection::vec(
            (1u32..=MAX_GROUPS, 0usize..5, proptest::collection::vec(1u32..1025, 0..8)), 0..6)) {
            let states = [AnaState::Optimized, AnaState::NonOptimized, AnaState::Inaccessible,
                          AnaState::PersistentLoss, AnaState::Change];
            let g: Vec<AnaGroup> = groups.into_iter()
                .map(|(id, s, nsids)| AnaGroup { id, state: states[s], nsids }).collect();
            let (c, back) = parse_log(&encode_log(count, &g, false)).unwrap();
            prop_assert_eq!(c, count);
            prop_assert_eq!(back, g);
        }
    }
}
