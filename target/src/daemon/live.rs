//! Live changes from the control socket, on the daemon's main thread: a
//! change edits the configuration file's text ([`crate::config::edit`]), is
//! validated as the whole new file, applied through the reload path (hosts
//! see namespace-changed events, removed access disconnects at once) and
//! written back atomically. A change that cannot apply leaves the running
//! target and the file as they were.

use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tracing::{info, warn};

use super::rpc::{self, Changed, ConfigText, ControllerRef, RpcError};
use super::Daemon;
use crate::config::edit::{self, Edit, EditError, NamespaceResize};
use crate::config::TargetConfig;
use crate::model::subsystem::SubsystemKind;

/// The file the running configuration came from, and its text then.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Its text when it was last loaded or written.
    pub text: String,
}

/// Why a live change was not made.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Started with the quick form.
    #[error("the daemon was started with the quick form (--listen/--nqn): there is no configuration file to keep a change in (start it with --config)")]
    NoFile,
    /// Someone edited the file since the daemon loaded it.
    #[error("{0} was edited since the daemon loaded it: reload it first (systemctl reload nvmf-target) or undo the edit")]
    FileChanged(PathBuf),
    /// The file could not be read.
    #[error("{0}")]
    Read(String),
    /// The edit itself is impossible.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The new configuration is invalid or cannot be applied.
    #[error("{0}")]
    Refused(String),
    /// The file could not be written; the change was undone.
    #[error("{path}: the change could not be saved ({reason}), so it was undone")]
    NotSaved {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No such controller.
    #[error("subsystem '{nqn}' has no controller {cntlid} (nvmf-target status lists them)")]
    NoController {
        /// The subsystem.
        nqn: String,
        /// The controller id.
        cntlid: u16,
    },
}

impl LiveError {
    fn code(&self) -> i64 {
        match self {
            LiveError::NoFile | LiveError::FileChanged(_) | LiveError::Read(_) => rpc::UNAVAILABLE,
            LiveError::NotSaved { .. } => rpc::NOT_SAVED,
            LiveError::Edit(EditError::Invalid(_)) => rpc::INVALID_PARAMS,
            _ => rpc::REFUSED,
        }
    }
}

impl From<LiveError> for RpcError {
    fn from(e: LiveError) -> RpcError {
        RpcError::new(e.code(), e.to_string())
    }
}

/// A new file's text waiting beside the file, renamed over it to commit;
/// removed if dropped uncommitted.
struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl Staged {
    /// Writes `text` beside `path` (the real file if `path` is a symlink),
    /// with the file's mode and owner, synced.
    fn write(path: &Path, text: &str) -> std::io::Result<Staged> {
        let path = std::fs::canonicalize(path)?;
        let meta = std::fs::metadata(&path)?;
        let dir = path.parent().unwrap_or(Path::new("/"));
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = dir.join(format!(".{name}.nvmf-target-{}", std::process::id()));
        let staged = Staged {
            tmp,
            path,
            committed: false,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staged.tmp)?;
        f.write_all(text.as_bytes())?;
        nix::unistd::fchown(
            f.as_raw_fd(),
            Some(nix::unistd::Uid::from_raw(meta.uid())),
            Some(nix::unistd::Gid::from_raw(meta.gid())),
        )
        .or_else(|e| match e {
            // Not root: the file stays ours, as the original must be.
            nix::errno::Errno::EPERM => Ok(()),
            e => Err(e),
        })?;
        // A file that holds a host key (validated: every key is a
        // DHHC-1 secret) is its owner's only, whatever mode it had.
        let mut mode = meta.mode() & 0o7777;
        if text.contains("DHHC-1:") || text.contains("NVMeTLSkey-") {
            mode &= 0o700;
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        Ok(staged)
    }

    /// Renames the new text over the file, durably.
    fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.tmp, &self.path)?;
        self.committed = true;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl Daemon {
    /// Readable while the control socket has requests for this thread.
    pub fn control_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inbox.as_ref().map(|i| i.fd())
    }

    /// Answers the control socket's waiting requests. Returns whether
    /// something changed.
    pub fn serve_control(&mut self) -> bool {
        let Some(jobs) = self.inbox.as_ref().map(|i| i.take()) else {
            return false;
        };
        let mut changed = false;
        for job in jobs {
            // Answered once drained.
            let started = match &job.method[..] {
                "drain" => rpc::params(&job.method, job.params)
                    .map(|p| self.drain_start(p, job.reply.clone())),
                "listener_del" => rpc::params(&job.method, job.params)
                    .map(|p| self.listener_del_start(p, job.reply.clone())),
                _ => {
                    let r = self.call(&job.method, job.params);
                    changed |=
                        r.is_ok() && !matches!(&job.method[..], "config_show" | "ok_to_stop");
                    let _ = job.reply.send(r);
                    continue;
                }
            };
            if let Err(e) = started {
                let _ = job.reply.send(Err(e));
            }
            // A removal made at once (no host connected there) shows at
            // once.
            changed = true;
        }
        changed
    }

    fn call(&mut self, method: &str, p: Value) -> Result<Value, RpcError> {
        let edit = match method {
            "config_show" => {
                return self
                    .config_text()
                    .map_err(RpcError::from)
                    .and_then(|t| to_value(&t))
            }
            "undrain" => return to_value(&self.undrain()),
            "ok_to_stop" => {
                let p = match p {
                    Value::Null => rpc::StopParams::default(),
                    p => rpc::params(method, p)?,
                };
                return to_value(&self.ok_to_stop(&p));
            }
            "controller_disconnect" => {
                let r = rpc::params::<ControllerRef>(method, p)?;
                let res = self.disconnect_controller(&r);
                return self.counted(method, res);
            }
            "subsystem_add" => Edit::SubsystemAdd(rpc::params(method, p)?),
            "subsystem_listener_add" => Edit::SubsystemListenerAdd(rpc::params(method, p)?),
            "subsystem_del" | "namespace_del" | "subsystem_listener_del" => {
                let mut p = p;
                let force = take_force(method, &mut p)?;
                let edit = match method {
                    "subsystem_del" => Edit::SubsystemDel(rpc::params(method, p)?),
                    "subsystem_listener_del" => Edit::SubsystemListenerDel(rpc::params(method, p)?),
                    _ => Edit::NamespaceDel(rpc::params(method, p)?),
                };
                if !force {
                    if let Some(hosts) = self.connected_to(&edit) {
                        return self.counted(method, Err(LiveError::Refused(hosts)));
                    }
                }
                edit
            }
            "namespace_add" => Edit::NamespaceAdd(rpc::params(method, p)?),
            "namespace_attach" => Edit::NamespaceAttach(rpc::params(method, p)?),
            "namespace_detach" => Edit::NamespaceDetach(rpc::params(method, p)?),
            "namespace_qos" => Edit::NamespaceQos(rpc::params(method, p)?),
            "namespace_resize" => {
                let r = rpc::params(method, p)?;
                let res = self.resize(&r);
                return self.counted(method, res);
            }
            "host_add" => Edit::HostAdd(rpc::params(method, p)?),
            "host_del" => Edit::HostDel(rpc::params(method, p)?),
            "host_key_set" => Edit::HostKeySet(rpc::params(method, p)?),
            "host_key_del" => Edit::HostKeyDel(rpc::params(method, p)?),
            "listener_ana" => Edit::ListenerAna(rpc::params(method, p)?),
            "listener_add" if self.draining_or_stopping() => {
                return self.counted(
                    method,
                    Err(LiveError::Refused(
                        "a drain is under way, or the daemon is stopping: add the listener once it ends".into(),
                    )),
                )
            }
            "listener_add" => Edit::ListenerAdd(rpc::params(method, p)?),
            m => {
                return Err(RpcError::new(
                    rpc::METHOD_NOT_FOUND,
                    format!("unknown method '{m}'"),
                ))
            }
        };
        let res = self.change(&edit);
        self.counted(method, res)
    }

    /// Who would lose what `edit` removes: the hosts connected to the
    /// subsystem (for a namespace, those it is shown to), said as a
    /// refusal; `None` when no host is.
    fn connected_to(&self, edit: &Edit) -> Option<String> {
        let (nqn, nsid, via) = match edit {
            Edit::SubsystemDel(r) => (r.nqn.as_str(), None, None),
            Edit::NamespaceDel(r) => (r.subsystem.as_str(), Some(r.nsid), None),
            Edit::SubsystemListenerDel(r) => (
                r.subsystem.as_str(),
                None,
                Some(crate::model::port::PortName::parse(&r.listener).ok()?),
            ),
            _ => return None,
        };
        let sub = self.target.subsystem(nqn)?;
        let ns = nsid.and_then(|n| sub.namespace(n));
        let mut hosts: Vec<&str> = Vec::new();
        let ctrls = sub.controllers();
        let through = |c: &crate::model::controller::Controller| {
            via.is_none_or(|v| {
                c.listener()
                    .and_then(|s| self.target.listeners.get(s))
                    .is_some_and(|p| v.names(&p))
            })
        };
        for c in &ctrls {
            let sees = ns.as_ref().is_none_or(|n| n.visible_to(&c.hostnqn)) && through(c);
            if sees && !c.is_revoked() && !hosts.contains(&c.hostnqn.as_str()) {
                hosts.push(&c.hostnqn);
            }
        }
        if hosts.is_empty() {
            return None;
        }
        let what = match (nsid, via) {
            (Some(n), _) => format!("namespace {n} of {nqn} is in use"),
            (_, Some(v)) => format!("{nqn} is in use through {v}"),
            _ => format!("{nqn} is in use"),
        };
        Some(format!(
            "{what}: {} host(s) connected ({}); --force {} anyway",
            hosts.len(),
            hosts.join(", "),
            if via.is_some() {
                "takes it off (they are disconnected)"
            } else {
                "removes it"
            }
        ))
    }

    pub(super) fn counted(
        &self,
        method: &str,
        r: Result<Changed, LiveError>,
    ) -> Result<Value, RpcError> {
        let m = crate::telemetry::metrics::metrics();
        match &r {
            Ok(c) => {
                m.control_changes.with_label_values(&[method, "ok"]).inc();
                info!(
                    method,
                    "live change: {}{}",
                    c.summary,
                    c.applied
                        .as_deref()
                        .map(|a| format!(" ({a})"))
                        .unwrap_or_default()
                );
            }
            Err(e) => {
                m.control_changes
                    .with_label_values(&[method, "refused"])
                    .inc();
                warn!(method, error = %e, "live change refused; nothing changed");
            }
        }
        r.map_err(RpcError::from).and_then(|c| to_value(&c))
    }

    /// The running configuration, as its file's text.
    pub fn config_text(&self) -> Result<ConfigText, LiveError> {
        let s = self.source.as_ref().ok_or(LiveError::NoFile)?;
        // Host keys stay in the file (root's only); never in an answer.
        let toml = edit::without_secrets(&s.text)
            .ok_or_else(|| LiveError::Read(format!("{} does not parse", s.path.display())))?;
        Ok(ConfigText {
            path: s.path.display().to_string(),
            toml,
        })
    }

    /// `edit` made to the file's text, and the configuration it says
    /// (validated; nothing applied).
    fn edited(&self, edit: &Edit) -> Result<(Source, edit::Edited, TargetConfig), LiveError> {
        let src = self.source.clone().ok_or(LiveError::NoFile)?;
        let on_disk =
            TargetConfig::read_file(&src.path).map_err(|e| LiveError::Read(e.to_string()))?;
        if on_disk != src.text {
            return Err(LiveError::FileChanged(src.path));
        }
        let edited = edit::apply(&src.text, edit)?;
        let cfg = TargetConfig::from_file_text(&edited.text, &src.path, None).map_err(|e| {
            LiveError::Refused(format!("the changed configuration is refused: {e}"))
        })?;
        Ok((src, edited, cfg))
    }

    /// The slot of the listener `edit` (a removal) would remove.
    pub(super) fn removed_slot(&self, edit: &Edit) -> Result<usize, LiveError> {
        let (_, _, cfg) = self.edited(edit)?;
        let plan = super::reload::plan(&self.config, &cfg)
            .map_err(|e| LiveError::Refused(e.to_string()))?;
        plan.listeners_removed
            .first()
            .and_then(|l| self.slot(l))
            .ok_or_else(|| LiveError::Refused("the listener is not running".into()))
    }

    /// Makes `edit`: the file's new text validated, applied, then saved.
    pub fn change(&mut self, edit: &Edit) -> Result<Changed, LiveError> {
        let (src, edited, cfg) = self.edited(edit)?;
        let not_saved = |e: std::io::Error| LiveError::NotSaved {
            path: src.path.clone(),
            reason: e.to_string(),
        };
        let staged = Staged::write(&src.path, &edited.text).map_err(not_saved)?;
        let old = self.config.clone();
        let plan = self.reload(cfg).map_err(LiveError::Refused)?;
        if let Err(e) = staged.commit() {
            if let Err(back) = self.reload(old) {
                warn!("undoing a change that could not be saved failed: {back}");
            }
            return Err(not_saved(e));
        }
        if let Some(s) = &mut self.source {
            s.text = edited.text;
        }
        Ok(Changed {
            summary: edited.summary,
            nsid: edited.nsid,
            applied: Some(plan.summary()),
            saved: Some(src.path.display().to_string()),
        })
    }

    /// Disconnects a controller: its queues go at once and none may join
    /// it again; the host reconnects as a new controller, as after a
    /// transport error.
    pub fn disconnect_controller(&self, r: &ControllerRef) -> Result<Changed, LiveError> {
        let missing = || LiveError::NoController {
            nqn: r.subsystem.clone(),
            cntlid: r.cntlid,
        };
        let sub = self
            .target
            .subsystems()
            .iter()
            .find(|s| s.nqn == r.subsystem && s.kind == SubsystemKind::Nvm)
            .cloned()
            .ok_or_else(|| LiveError::Edit(EditError::NoSubsystem(r.subsystem.clone())))?;
        let ctrl = sub
            .controllers()
            .into_iter()
            .find(|c| c.cntlid == r.cntlid)
            .ok_or_else(missing)?;
        ctrl.revoke();
        Ok(Changed {
            summary: format!(
                "controller {} of {} (host {}) disconnected",
                r.cntlid, r.subsystem, ctrl.hostnqn
            ),
            nsid: None,
            applied: None,
            saved: None,
        })
    }

    /// Resizes a namespace: to `r.size` (a null store's size is the
    /// file's; a file grows; a block device or an image sets its own), or,
    /// without one, to its store's size now (grown by the operator). Hosts
    /// get a namespace-changed event and read the new size. A namespace
    /// only grows: shrinking would cut off data a host wrote.
    pub fn resize(&mut self, r: &NamespaceResize) -> Result<Changed, LiveError> {
        let sub = self
            .target
            .subsystem(&r.subsystem)
            .filter(|s| s.kind == SubsystemKind::Nvm)
            .ok_or_else(|| LiveError::Edit(EditError::NoSubsystem(r.subsystem.clone())))?;
        let ns = sub.namespace(r.nsid).ok_or_else(|| {
            LiveError::Edit(EditError::NoNamespace {
                nqn: r.subsystem.clone(),
                nsid: r.nsid,
            })
        })?;
        let bs = u64::from(ns.block_size);
        let before = ns.blocks() * bs;
        let what = format!("namespace {} of {}", r.nsid, r.subsystem);
        let resized = |from: u64, to: u64| Changed {
            summary: format!(
                "{what} resized from {} to {}",
                sizes::format(from),
                sizes::format(to)
            ),
            nsid: Some(r.nsid),
            applied: None,
            saved: None,
        };
        let Some(text) = &r.size else {
            return match Self::refresh_size(&sub, &ns) {
                Some((old, new)) => Ok(resized(old * bs, new * bs)),
                None => Err(LiveError::Edit(EditError::AlreadySo(format!(
                    "{what} is {} already, the size of its store",
                    sizes::format(before)
                )))),
            };
        };
        let invalid = |m: String| LiveError::Edit(EditError::Invalid(m));
        let bytes = sizes::parse(text).map_err(invalid)?;
        if bytes == 0 || bytes % bs != 0 {
            return Err(invalid(format!(
                "size {bytes} is not a non-zero multiple of the block size {bs}"
            )));
        }
        match bytes.cmp(&before) {
            std::cmp::Ordering::Less => {
                return Err(LiveError::Refused(format!(
                    "{what} is {}: a namespace only grows (shrinking it would cut off what \
                     hosts wrote past {})",
                    sizes::format(before),
                    sizes::format(bytes)
                )))
            }
            std::cmp::Ordering::Equal => {
                return Err(LiveError::Edit(EditError::AlreadySo(format!(
                    "{what} is {} already",
                    sizes::format(before)
                ))))
            }
            std::cmp::Ordering::Greater => {}
        }
        let in_file = self
            .config
            .subsystems
            .iter()
            .find(|s| s.nqn == r.subsystem)
            .and_then(|s| s.namespaces.iter().find(|n| n.nsid == r.nsid))
            .is_some_and(|n| matches!(n.backend, crate::config::BackendConfig::Null { .. }));
        if in_file {
            let mut c = self.change(&Edit::NamespaceResize(r.clone()))?;
            c.summary = resized(before, bytes).summary;
            return Ok(c);
        }
        ns.backend.grow(bytes).map_err(LiveError::Refused)?;
        Self::refresh_size(&sub, &ns);
        Ok(resized(before, ns.blocks() * bs))
    }

    /// Reloads the configuration file (SIGHUP): the file's text becomes
    /// what live changes edit.
    pub fn reload_file(&mut self) -> Result<super::reload::Plan, String> {
        let path = self
            .source
            .as_ref()
            .map(|s| s.path.clone())
            .ok_or("the quick form (--listen/--nqn) has no configuration file to reload")?;
        let (cfg, text) = TargetConfig::load_text(&path).map_err(|e| e.to_string())?;
        let plan = self.reload(cfg)?;
        self.source = Some(Source { path, text });
        Ok(plan)
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Result<Value, RpcError> {
    serde_json::to_value(t).map_err(|e| RpcError::new(rpc::UNAVAILABLE, e.to_string()))
}

/// The `force` flag of a removal (absent: false), taken out of its
/// parameters so that the rest parse as the edit's.
fn take_force(method: &str, p: &mut Value) -> Result<bool, RpcError> {
    match p.as_object_mut().and_then(|o| o.remove("force")) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(v) => Err(RpcError::new(
            rpc::INVALID_PARAMS,
            format!("{method}: force must be true or false, not {v}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_is_taken_out_of_a_removal_s_parameters() {
        use serde_json::json;
        let mut p = json!({"subsystem": "nqn.a", "nsid": 2, "force": true});
        assert!(take_force("namespace_del", &mut p).unwrap());
        assert_eq!(p, json!({"subsystem": "nqn.a", "nsid": 2}));
        let mut p = json!({"nqn": "nqn.a"});
        assert!(!take_force("subsystem_del", &mut p).unwrap());
        let mut p = json!({"nqn": "nqn.a", "force": "yes"});
        let e = take_force("subsystem_del", &mut p).unwrap_err();
        assert_eq!(e.code, rpc::INVALID_PARAMS);
    }

    #[test]
    fn a_staged_file_replaces_the_old_one_only_when_committed() {
        let d = std::env::temp_dir().join(format!("nvmf-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("t.toml");
        std::fs::write(&f, "old\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.join("link.toml");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        // Dropped: nothing changes, nothing is left behind.
        drop(Staged::write(&link, "new\n").unwrap());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "old\n");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        // Committed through the symlink: the file it names changes, with its
        // mode; the symlink stays a symlink.
        Staged::write(&link, "new\n").unwrap().commit().unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new\n");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        // A key written into it: its owner's only.
        Staged::write(&link, "k = \"DHHC-1:00:x:\"\n")
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
