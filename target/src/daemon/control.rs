//! The control socket: a Unix stream socket (default
//! `/run/nvmf-target/control.sock`) on which the daemon answers
//! `nvmf-target status` and takes live changes.
//!
//! Protocol ([`super::rpc`]): the client sends one JSON-RPC 2.0 request
//! line, the daemon answers with one line and closes the connection. Status
//! is answered on the socket's thread; a change goes to the daemon's main
//! thread (which also applies reloads, so changes and reloads never
//! interleave) through an [`Inbox`]. Only root, or the daemon's own user,
//! may connect: the socket is mode 0600 in a 0700 directory, and the peer's
//! credentials are checked on every connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::rpc::{self, RpcError};
use super::status::Status;
use crate::model::target::Target;

/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request line accepted (a namespace's path is at most 4 KiB).
const MAX_REQUEST: u64 = 16 * 1024;

/// A request for the daemon's main thread, and where its answer goes.
pub struct Job {
    /// The method.
    pub method: String,
    /// Its parameters.
    pub params: Value,
    /// The answer.
    pub reply: mpsc::Sender<Result<Value, RpcError>>,
}

/// The main thread's side of the hand-off: jobs, and a descriptor that is
/// readable while jobs wait.
pub struct Inbox {
    jobs: mpsc::Receiver<Job>,
    wake: Arc<EventFd>,
}

/// The socket thread's side.
#[derive(Clone)]
pub struct Outbox {
    jobs: mpsc::Sender<Job>,
    wake: Arc<EventFd>,
}

/// A connected inbox and outbox.
pub fn mailbox() -> std::io::Result<(Inbox, Outbox)> {
    let wake = Arc::new(EventFd::from_value_and_flags(
        0,
        EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
    )?);
    let (tx, rx) = mpsc::channel();
    Ok((
        Inbox {
            jobs: rx,
            wake: wake.clone(),
        },
        Outbox { jobs: tx, wake },
    ))
}

impl Inbox {
    /// Readable while jobs wait.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.wake.as_fd()
    }

    /// The jobs waiting now.
    pub fn take(&self) -> Vec<Job> {
        let _ = self.wake.read();
        self.jobs.try_iter().collect()
    }
}

impl Outbox {
    /// Hands `method` to the main thread and waits for its answer.
    fn ask(&self, method: String, params: Value) -> Result<Value, RpcError> {
        let (tx, rx) = mpsc::channel();
        let job = Job {
            method,
            params,
            reply: tx,
        };
        let gone = || RpcError::new(rpc::UNAVAILABLE, "the daemon is stopping");
        self.jobs.send(job).map_err(|_| gone())?;
        let _ = self.wake.write(1);
        match rx.recv_timeout(rpc::CHANGE_TIMEOUT) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(RpcError::new(
                rpc::UNAVAILABLE,
                "the daemon did not answer in time (it may still apply the change: see its log)",
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(gone()),
        }
    }
}

/// Why the control socket could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another daemon answers on the socket.
    #[error("{0}: another nvmf-target is running there (give this one its own [control] socket, or set enabled = false)")]
    InUse(PathBuf),
    /// Creating, binding or connecting failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The daemon answered with an error or something unreadable.
    #[error("{path}: {reason}")]
    Answer {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

pub(super) fn io<'a>(
    path: &'a Path,
    what: &'static str,
) -> impl FnOnce(std::io::Error) -> ControlError + 'a {
    move |source| ControlError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// The running control socket.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    /// The listening socket (the thread accepts on a clone): shut down to
    /// wake the thread at stop.
    listener: UnixListener,
    /// Device and inode of the socket file we bound, so stop removes only
    /// ours (not one another daemon bound at the same path since).
    file_id: (u64, u64),
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl ControlServer {
    /// Binds `path` and answers status requests about `target` on a thread
    /// of its own. A stale socket left by a killed daemon is replaced; one a
    /// live daemon answers on is not.
    /// Changes go to `outbox` (none: only status is answered).
    pub fn start(
        path: &Path,
        target: Arc<Target>,
        started: Instant,
        outbox: Option<Outbox>,
    ) -> Result<ControlServer, ControlError> {
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io(dir, "create directory"))?;
            }
        }
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                return Err(ControlError::Answer {
                    path: path.into(),
                    reason:
                        "exists and is not a socket; remove it or choose another [control] socket"
                            .into(),
                });
            }
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse(path.into()));
            }
            std::fs::remove_file(path).map_err(io(path, "remove stale socket"))?;
        }
        let listener = UnixListener::bind(path).map_err(io(path, "bind"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(path, "chmod 0600"))?;
        let file_id = file_id(path).unwrap_or_default();
        let accepting = listener.try_clone().map_err(io(path, "dup"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || serve(accepting, target, started, flag, outbox))
            .map_err(io(path, "spawn thread"))?;
        info!(socket = %path.display(), "control socket ready (nvmf-target status)");
        Ok(ControlServer {
            path: path.into(),
            listener,
            file_id,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the server thread runs.
    pub fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Shutting the listening socket down fails the blocked accept (Linux),
        // whatever became of the path; the thread sees the flag and returns.
        let _ =
            nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if file_id(&self.path) == Some(self.file_id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether the peer is root or runs as this process's user.
fn peer_allowed(s: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(s, PeerCredentials) {
        Ok(c) => c.uid() == 0 || c.uid() == nix::unistd::geteuid().as_raw(),
        Err(_) => false,
    }
}

fn serve(
    listener: UnixListener,
    target: Arc<Target>,
    started: Instant,
    stop: Arc<AtomicBool>,
    outbox: Option<Outbox>,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut s = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "control socket: accept");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if !peer_allowed(&s) {
            warn!("control socket: refused a client that is neither root nor our user");
            let _ = s.write_all(
                rpc::response(
                    Value::Null,
                    Err(RpcError::new(rpc::INVALID_REQUEST, "permission denied")),
                )
                .as_bytes(),
            );
            continue;
        }
        let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
        let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
        let mut line = String::new();
        if let Err(e) = BufReader::new((&s).take(MAX_REQUEST)).read_line(&mut line) {
            debug!("control socket: read: {e}");
            continue;
        }
        let status = || {
            serde_json::to_value(Status::of(&target, started))
                .map_err(|e| RpcError::new(rpc::UNAVAILABLE, format!("status: {e}")))
        };
        let answer = if line.trim() == "status" {
            // The first protocol: the status alone.
            match status() {
                Ok(v) => v.to_string(),
                Err(e) => serde_json::json!({ "error": e.message }).to_string(),
            }
        } else {
            match rpc::Request::parse(line.trim()) {
                Err((id, e)) => rpc::response(id, Err(e)),
                Ok(r) => {
                    let result = match (r.method.as_str(), &outbox) {
                        ("status", _) => status(),
                        (m, _) if !rpc::METHODS.contains(&m) => Err(RpcError::new(
                            rpc::METHOD_NOT_FOUND,
                            format!(
                                "unknown method '{}' (the daemon has: {})",
                                m.escape_debug(),
                                rpc::METHODS.join(", ")
                            ),
                        )),
                        (_, None) => Err(RpcError::new(
                            rpc::UNAVAILABLE,
                            "this daemon takes no changes on its control socket",
                        )),
                        ("drain" | "listener_del", Some(o)) => {
                            // A drain answers once drained: its client waits
                            // on a thread of its own, so that status,
                            // ok-to-stop and undrain answer meanwhile.
                            let o = o.clone();
                            let spawned = std::thread::Builder::new()
                                .name("control-drain".into())
                                .spawn(move || {
                                    let _ = s.set_write_timeout(Some(rpc::CHANGE_TIMEOUT));
                                    let answer = rpc::response(r.id, o.ask(r.method, r.params));
                                    let _ = s
                                        .write_all(answer.as_bytes())
                                        .and_then(|_| s.write_all(b"\n"));
                                });
                            if let Err(e) = spawned {
                                warn!(error = %e, "control socket: a thread for a drain");
                            }
                            continue;
                        }
                        (_, Some(o)) => {
                            // A change may take a while (opening a store).
                            let _ = s.set_write_timeout(Some(rpc::CHANGE_TIMEOUT));
                            o.ask(r.method, r.params)
                        }
                    };
                    rpc::response(r.id, result)
                }
            }
        };
        if let Err(e) = s
            .write_all(answer.as_bytes())
            .and_then(|_| s.write_all(b"\n"))
        {
            debug!("control socket: write: {e}");
        }
    }
}

/// Asks the daemon at `path` for its status.
pub fn query_status(path: &Path) -> Result<Status, rpc::CallError> {
    let v = rpc::call(path, "status", Value::Null, Duration::from_secs(10))?;
    serde_json::from_value(v).map_err(|e| {
        ControlError::Answer {
            path: path.into(),
            reason: format!("unexpected status format: {e}"),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Arc<Target> {
        Arc::new(Target::new(
            vec![],
            vec!["10.0.0.1:4420".parse().unwrap()],
            0,
        ))
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvmf-ctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn answers_status_and_refuses_a_second_daemon() {
        let d = dir("a");
        let path = d.join("sub/control.sock");
        let srv = ControlServer::start(&path, target(), Instant::now(), None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let st = query_status(&path).unwrap();
        assert_eq!(st.listeners[0].port, 4420);
        assert_eq!(st.daemon.pid, std::process::id());
        match ControlServer::start(&path, target(), Instant::now(), None) {
            Err(ControlError::InUse(p)) => assert_eq!(p, path),
            other => panic!("second server: {other:?}"),
        }
        // An unknown request gets an error line, and the server keeps serving.
        let ask = |line: &str| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(line.as_bytes()).unwrap();
            let mut answer = String::new();
            BufReader::new(&s).read_line(&mut answer).unwrap();
            answer
        };
        let a = ask("reboot\n");
        assert!(a.contains(r#""code":-32700"#), "{a}");
        let a = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"reboot\"}\n");
        assert!(
            a.contains("unknown method 'reboot'") && a.contains(r#""id":3"#),
            "{a}"
        );
        // Changes need the daemon's main thread, which this one lacks.
        let a = ask("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"host_add\"}\n");
        assert!(a.contains("takes no changes"), "{a}");
        // The first protocol's bare line.
        let a = ask("status\n");
        assert!(a.contains(r#""daemon":"#) && !a.contains("jsonrpc"), "{a}");
        assert!(query_status(&path).is_ok());
        drop(srv);
        assert!(!path.exists(), "the socket is removed at stop");
        // Stop does not depend on the path: another daemon's socket there
        // (bound after ours was unlinked) is neither needed nor removed.
        let srv = ControlServer::start(&path, target(), Instant::now(), None).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = UnixListener::bind(&path).unwrap();
        drop(srv);
        assert!(path.exists(), "another daemon's socket was removed");
        drop(other);
        std::fs::remove_file(&path).unwrap();
        let e = query_status(&path).unwrap_err().to_string();
        assert!(e.contains("connect"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced() {
        let d = dir("b");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("control.sock");
        drop(UnixListener::bind(&path).unwrap()); // a killed daemon's leftover
        assert!(path.exists());
        let _srv = ControlServer::start(&path, target(), Instant::now(), None).unwrap();
        assert!(query_status(&path).is_ok());
        std::fs::write(d.join("plain"), b"x").unwrap();
        let e = ControlServer::start(&d.join("plain"), target(), Instant::now(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a socket"), "{e}");
        drop(_srv);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
