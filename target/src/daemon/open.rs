//! Opening what a configured namespace names: its store (a file or block
//! device, an RBD image, or nothing), its identifiers and where its
//! reservation state lives. The configuration's meaning for the core's
//! types is the daemon's; the core builds a namespace from an open store.

use std::sync::Arc;

use crate::backend::{file, null, Backend, BackendError};
use crate::config::{BackendConfig, NamespaceConfig};
use crate::model::namespace::Namespace;
use crate::rbd;
use crate::reservation::persist::FileStore;
use crate::reservation::{NsReservations, Store};

/// Opens the store of a configured namespace and builds the namespace:
/// its write gate needs ownership of an RBD image (unless read-only),
/// and its reservation state persists in the state directory (a local
/// store) or in the image's cluster.
pub fn namespace(subnqn: &str, cfg: &NamespaceConfig) -> Result<Namespace, BackendError> {
    let (backend, size, bs) = backend(cfg)?;
    let mut ns = Namespace::new(subnqn, cfg.nsid, backend, size, bs, cfg.readonly);
    let (ids, basis) = crate::model::identity::assign(
        cfg.state_dir.as_deref(),
        subnqn,
        cfg.nsid,
        &cfg.ids,
        &ns.backend.identity(),
        &ns.backend.path_identity(),
    )
    .map_err(|e| BackendError::Invalid {
        path: ns.backend.describe(),
        reason: format!("identifiers: {e}"),
    })?;
    if basis == crate::model::identity::Basis::Legacy {
        tracing::info!(subsys = %subnqn, nsid = cfg.nsid, "identifiers kept from the path as the version before derived them");
    }
    (ns.nguid, ns.uuid, ns.eui64) = (ids.nguid, ids.uuid, ids.eui64);
    ns.ana_group = cfg.ana_group;
    ns.set_hosts(cfg.hosts.clone());
    ns.set_qos(subnqn, cfg.qos, &cfg.host_qos);
    if let Some(img) = crate::rbd::image(&*ns.backend) {
        if !cfg.readonly {
            img.own_through(&ns.gate)
                .map_err(|e| BackendError::Invalid {
                    path: ns.backend.describe(),
                    reason: format!("ownership: {e}"),
                })?;
        }
    }
    // The reservation state persists where the namespace's store is local
    // (a file or block device, or nothing) and a state directory exists; an
    // RBD image's lives in its cluster, shared by every gateway.
    let invalid = |ns: &Namespace, e: String| BackendError::Invalid {
        path: ns.backend.describe(),
        reason: format!("reservations: {e}"),
    };
    let store = match (&cfg.state_dir, crate::rbd::image(&*ns.backend)) {
        _ if !cfg.reservations => None,
        (Some(dir), None) => Some(Store::File(
            FileStore::open(dir, &ns.store_id()).map_err(|e| invalid(&ns, e.to_string()))?,
        )),
        (_, Some(img)) => Some(Store::Shared(Arc::new(
            img.reservation_store()
                .map_err(|e| invalid(&ns, e.to_string()))?,
        ))),
        _ => None,
    };
    ns.resv = NsReservations::new(cfg.reservations, store).map_err(|e| invalid(&ns, e))?;
    Ok(ns)
}

/// Opens the store a namespace's configuration names: the backend, its
/// size in bytes and its block size.
pub fn backend(cfg: &NamespaceConfig) -> Result<(Backend, u64, u32), BackendError> {
    let (backend, size, bs) = match &cfg.backend {
        BackendConfig::Null { size } => (
            Box::new(null::Null::sized(*size)) as Backend,
            *size,
            cfg.block_size.unwrap_or(512),
        ),
        BackendConfig::File { path } => file::open(path, cfg.block_size, cfg.readonly)?,
        BackendConfig::Rbd(rbd) => {
            let (backend, size) = rbd::open(rbd, cfg.ana_group)?;
            (backend, size, cfg.block_size.unwrap_or(512))
        }
    };
    if size < bs as u64 {
        return Err(BackendError::Invalid {
            path: backend.describe(),
            reason: format!("size {size} is smaller than one block ({bs} bytes)"),
        });
    }
    Ok((backend, size, bs))
}
