//! The control socket: a Unix stream socket (default
//! `/run/nvmf-target/control.sock`) on which the daemon answers
//! `nvmf-target status`.
//!
//! Protocol: the client sends one request line (`status`), the daemon answers
//! with one line of JSON ([`super::status::Status`], or `{"error": "..."}`)
//! and closes the connection. Only root, or the daemon's own user, may
//! connect: the socket is mode 0600 in a 0700 directory, and the peer's
//! credentials are checked on every connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::status::Status;
use crate::model::subsystem::Target;

/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request line accepted.
const MAX_REQUEST: u64 = 256;

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

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> ControlError + 'a {
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
    pub fn start(
        path: &Path,
        target: Arc<Target>,
        started: Instant,
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
            .spawn(move || serve(accepting, target, started, flag))
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

fn serve(listener: UnixListener, target: Arc<Target>, started: Instant, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut s = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!("control socket: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if !peer_allowed(&s) {
            warn!("control socket: refused a client that is neither root nor our user");
            let _ = s.write_all(b"{\"error\":\"permission denied\"}\n");
            continue;
        }
        let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
        let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
        let mut line = String::new();
        let read = BufReader::new((&s).take(MAX_REQUEST)).read_line(&mut line);
        let answer = match (read, line.trim()) {
            (Err(e), _) => {
                debug!("control socket: read: {e}");
                continue;
            }
            (Ok(_), "status") => match serde_json::to_string(&Status::of(&target, started)) {
                Ok(j) => j,
                Err(e) => error_json(&format!("status: {e}")),
            },
            (Ok(_), other) => error_json(&format!(
                "unknown request '{}' (the daemon understands: status)",
                other.escape_debug()
            )),
        };
        if let Err(e) = s
            .write_all(answer.as_bytes())
            .and_then(|_| s.write_all(b"\n"))
        {
            debug!("control socket: write: {e}");
        }
    }
}

fn error_json(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

/// Asks the daemon at `path` for its status.
pub fn query_status(path: &Path) -> Result<Status, ControlError> {
    let mut s = UnixStream::connect(path).map_err(io(path, "connect"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io(path, "set timeout"))?;
    s.write_all(b"status\n").map_err(io(path, "send"))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(io(path, "read"))?;
    let answer = |reason: String| ControlError::Answer {
        path: path.into(),
        reason,
    };
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| answer(format!("the daemon's answer is not JSON: {e}")))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(answer(format!("the daemon refused: {e}")));
    }
    serde_json::from_value(v).map_err(|e| answer(format!("unexpected status format: {e}")))
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
        let srv = ControlServer::start(&path, target(), Instant::now()).unwrap();
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
        match ControlServer::start(&path, target(), Instant::now()) {
            Err(ControlError::InUse(p)) => assert_eq!(p, path),
            other => panic!("second server: {other:?}"),
        }
        // An unknown request gets an error line, and the server keeps serving.
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"reboot\n").unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert!(line.contains("unknown request 'reboot'"), "{line}");
        assert!(query_status(&path).is_ok());
        drop(srv);
        assert!(!path.exists(), "the socket is removed at stop");
        // Stop does not depend on the path: another daemon's socket there
        // (bound after ours was unlinked) is neither needed nor removed.
        let srv = ControlServer::start(&path, target(), Instant::now()).unwrap();
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
        let _srv = ControlServer::start(&path, target(), Instant::now()).unwrap();
        assert!(query_status(&path).is_ok());
        std::fs::write(d.join("plain"), b"x").unwrap();
        let e = ControlServer::start(&d.join("plain"), target(), Instant::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a socket"), "{e}");
        drop(_srv);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
