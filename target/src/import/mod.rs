//! Import of a kernel target (nvmet) configuration: converts the JSON that
//! `nvmetcli save` writes (by default [`NVMETCLI_DEFAULT_FILE`]) into the TOML
//! of nvmf-target's configuration file, so nvmet users can migrate.
//!
//! The conversion is sans-IO: [`import`] takes the JSON text and returns the
//! TOML text and the notes, the things that could not be carried over. The
//! notes are also written as `# NOTE:` comments at the top of the TOML.
//!
//! What `nvmetcli save` writes (`json.dumps(root.dump(), sort_keys=True,
//! indent=2)` in `nvmet/nvme.py`): an object with `hosts` (`nqn`, `dhchap`),
//! `ports` (`portid`, `addr` {`trtype`, `adrfam`, `traddr`, `trsvcid`, `treq`,
//! `tsas`}, `param`, `subsystems` (NQNs), `referrals`, `ana_groups`),
//! `subsystems` (`nqn`, `attr` {`allow_any_host`, `serial`, `model`, ...},
//! `allowed_hosts` (NQNs), `namespaces` [{`nsid`, `enable`, `device` {`path`,
//! `nguid`, `uuid`}, `ana_grpid`, `ana`, `resv`}], `passthru`) and, on newer
//! kernels, `discovery` {`nqn`}. Attribute values (`attr`, `param`, `addr`,
//! `device`, ...) are strings; `portid`, `nsid`, `enable` and `ana_grpid` are
//! integers.
//!
//! Mapping:
//! - every port with `trtype` "rdma" becomes a `[[listener]]` (`traddr`,
//!   `trsvcid`, default 4420); other transports are skipped, ports with the
//!   same address and port are emitted once. nvmf-target exports every
//!   subsystem on every listener, so differing port/subsystem links are noted.
//! - every subsystem becomes a `[[subsystem]]` (`nqn`, `allow_any_host`,
//!   `hosts` from `allowed_hosts`, `serial`, `model`), whether or not an rdma
//!   port links it.
//! - every enabled namespace becomes a `[[subsystem.namespace]]` (`nsid`,
//!   `path`); a disabled one (`enable` 0 or absent: `nvmetcli restore` leaves
//!   it disabled) is written commented out.
//! - every host with a DH-HMAC-CHAP key becomes a `[[host]]` (`dhchap_key`,
//!   `dhchap_ctrl_key`, `dhchap_hash`, `dhchap_dhgroup`: nvmet's names); a
//!   note says the file now holds secrets.
//! - a port's ANA groups become its listener's `ana` states, a namespace's
//!   `ana_grpid` its `ana_group`; a group the namespaces use that a port does
//!   not have is written inaccessible there (as nvmet reports it).
//! - NGUID/UUID, reservations, passthru, referrals, protection information
//!   and non-default tuning attributes are not supported: each is named in a
//!   note. The subsystem's `attr.firmware` is
//!   dropped silently (it defaults to the kernel release, so it says nothing
//!   about the setup).
//!
//! Missing optional fields are fine; a value of the wrong type, a missing NQN,
//! nsid or device path of an enabled namespace is an [`ImportError`] naming
//! its JSON path, e.g. `subsystems[0].namespaces[1].device.path`.

use serde_json::Value;

mod json;
mod ports;
mod render;
mod subsystems;
#[cfg(test)]
mod tests;

use json::Cx;
use ports::{check_discovery, complete_ana, merge_listeners, parse_hosts, parse_ports};
use render::render;
use subsystems::{link_listeners, parse_subsystems};

/// Where `nvmetcli save` writes the configuration by default.
pub const NVMETCLI_DEFAULT_FILE: &str = "/etc/nvmet/config.json";

/// Result of an import: the TOML text and the notes (things that could not be
/// carried over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The configuration in nvmf-target's TOML format, notes included as
    /// `# NOTE:` comments at the top.
    pub toml: String,
    /// What could not be carried over (or changes behavior), one sentence each.
    pub notes: Vec<String>,
}

/// Why an nvmetcli JSON file could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The text is not JSON.
    #[error("{source_name}: invalid JSON at line {line}, column {column}: {reason}")]
    Json {
        /// The file.
        source_name: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// A field is missing or has the wrong type or value.
    #[error("{source_name}: {path}: {reason}")]
    Field {
        /// The file.
        source_name: String,
        /// The JSON path, e.g. `subsystems[0].namespaces[1].device.path`
        /// (`top level` for the document itself).
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Converts the JSON written by `nvmetcli save` into nvmf-target's TOML.
/// `source_name` names the input in the errors and in the TOML header.
pub fn import(json: &str, source_name: &str) -> Result<Import, ImportError> {
    let cx = Cx { src: source_name };
    let value: Value = serde_json::from_str(json).map_err(|e| {
        let msg = e.to_string();
        let reason = msg
            .rsplit_once(" at line ")
            .map_or(msg.as_str(), |(m, _)| m)
            .to_string();
        ImportError::Json {
            source_name: source_name.to_string(),
            line: e.line(),
            column: e.column(),
            reason,
        }
    })?;
    let root = cx.object(&value, "")?;
    let mut notes = Vec::new();
    check_discovery(&cx, root, &mut notes)?;
    let hosts = parse_hosts(&cx, root, &mut notes)?;
    let ports = parse_ports(&cx, root, &mut notes)?;
    let mut listeners = merge_listeners(&ports, &mut notes);
    let mut subsystems = parse_subsystems(&cx, root, &mut notes)?;
    link_listeners(&ports, &listeners, &mut subsystems, &mut notes);
    complete_ana(&mut listeners, &subsystems, &mut notes);
    let toml = render(source_name, &listeners, &subsystems, &hosts, &notes);
    Ok(Import { toml, notes })
}
