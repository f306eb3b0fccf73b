//! The target the fuzz targets run against, built afresh for each input (so a
//! crash reproduces from its input alone): an open subsystem with two null
//! namespaces (4 KiB and 512-byte blocks), a closed one, and discovery.
//! (Each target uses part of it.)
#![allow(dead_code)]
use std::sync::Arc;

use nvmf_target::backend::null::Null;
use nvmf_target::model::namespace::Namespace;
use nvmf_target::model::subsystem::{Subsystem, SubsystemKind};
use nvmf_target::model::target::Target;

/// The open subsystem's NQN.
pub const OPEN: &str = "nqn.2026-11.io.fuzz:open";
/// The host the closed subsystem allows.
pub const HOST: &str = "nqn.2026-11.io.fuzz:host";

#[allow(dead_code)]
pub fn namespace(nsid: u32, bytes: u64, block: u32) -> Arc<Namespace> {
    Arc::new(Namespace::new(OPEN, nsid, Box::new(Null::default()), bytes, block, false))
}

pub fn target() -> Target {
    let open = Arc::new(Subsystem::new(
        OPEN.into(),
        SubsystemKind::Nvm,
        true,
        vec![],
        None,
        "fuzz".into(),
        vec![namespace(1, 1 << 30, 4096), namespace(5, 1 << 20, 512)],
    ));
    let closed = Arc::new(Subsystem::new(
        "nqn.2026-11.io.fuzz:closed".into(),
        SubsystemKind::Nvm,
        false,
        vec![HOST.into()],
        None,
        "fuzz".into(),
        vec![],
    ));
    Target::new(vec![open, closed], vec!["10.0.0.1:4420".parse().unwrap()], 0)
}
