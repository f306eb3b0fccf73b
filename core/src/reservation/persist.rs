//! The state file of a namespace whose reservations persist through a power
//! loss (PTPL): written whole to a temporary file, fsynced, renamed over the
//! old one and the directory fsynced, before the command that changed the
//! state completes; removed when PTPL is cleared.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::Reservations;

/// Errors of the state file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading, writing or syncing failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What was attempted.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The new file is in place but its directory could not be synced: it
    /// may not survive a power loss (the state it holds is the current one).
    #[error("{path}: syncing the directory: {source}")]
    Unsynced {
        /// The directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file holds no state this target wrote.
    #[error("{path}: not a reservation state ({reason}); move it away to start without the namespace's reservations")]
    Invalid {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The file's format version.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    state: Reservations,
}

/// A state as it is kept, in a file or a cluster object.
pub fn encode(st: &Reservations) -> Vec<u8> {
    serde_json::to_vec(&OnDisk {
        version: VERSION,
        state: st.clone(),
    })
    .expect("a reservation state always encodes")
}

/// A kept state, checked: its format version and its invariants.
pub fn decode(body: &[u8]) -> Result<Reservations, String> {
    let d: OnDisk = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if d.version != VERSION {
        return Err(format!(
            "version {} (this target writes {VERSION})",
            d.version
        ));
    }
    if !d.state.valid() {
        return Err("inconsistent registrants or holder".into());
    }
    Ok(d.state)
}

/// Where one namespace's state is kept.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
}

fn io_err<'a>(
    path: &'a Path,
    what: &'static str,
) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        what,
        source,
    }
}

impl FileStore {
    /// The store of the namespace identified by `id` (its NGUID), under
    /// `dir`/reservations (created, root only, when missing).
    pub fn open(dir: &Path, id: &[u8; 16]) -> Result<FileStore, StoreError> {
        let dir = dir.join("reservations");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(&dir, "creating the state directory"))?;
        let name: String = id.iter().map(|b| format!("{b:02x}")).collect();
        Ok(FileStore {
            path: dir.join(format!("{name}.json")),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state kept, if any (with PTPL set: a file is only kept then).
    pub fn load(&self) -> Result<Option<Reservations>, StoreError> {
        let text = match fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&self.path, "reading")(e)),
        };
        let state = decode(&text).map_err(|reason| StoreError::Invalid {
            path: self.path.display().to_string(),
            reason,
        })?;
        Ok(state.ptpl.then_some(state))
    }

    /// Makes `st` the state kept: written and synced when PTPL is set,
    /// removed otherwise.
    pub fn save(&self, st: &Reservations) -> Result<(), StoreError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        if !st.ptpl {
            match fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_err(&self.path, "removing")(e)),
            }
        } else {
            let tmp = self.path.with_extension("json.tmp");
            let body = encode(st);
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io_err(&tmp, "creating"))?;
            f.write_all(&body).map_err(io_err(&tmp, "writing"))?;
            f.sync_all().map_err(io_err(&tmp, "syncing"))?;
            fs::rename(&tmp, &self.path).map_err(io_err(&self.path, "renaming into place"))?;
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| StoreError::Unsynced {
                path: dir.display().to_string(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::state::{Holder, Registrant};

    #[test]
    fn kept_only_with_ptpl_and_refused_when_corrupt() {
        let dir = std::env::temp_dir().join(format!("nvmf-resv-{}", std::process::id()));
        let s = FileStore::open(&dir, &[0xAB; 16]).unwrap();
        assert!(s
            .path()
            .ends_with("reservations/abababababababababababababababab.json"));
        assert_eq!(s.load().unwrap(), None);
        let mut st = Reservations {
            registrants: vec![Registrant {
                host: [1; 16],
                key: 7,
                nqn: [0; 16],
            }],
            holder: Some(Holder {
                rtype: 1,
                host: [1; 16],
            }),
            generation: 3,
            ptpl: true,
        };
        s.save(&st).unwrap();
        assert_eq!(s.load().unwrap(), Some(st.clone()));
        st.ptpl = false;
        s.save(&st).unwrap();
        assert!(!s.path().exists());
        assert_eq!(s.load().unwrap(), None);
        fs::write(s.path(), b"{\"version\":1,\"state\":{").unwrap();
        assert!(matches!(s.load(), Err(StoreError::Invalid { .. })));
        let mut bad = st.clone();
        bad.ptpl = true;
        bad.registrants.push(bad.registrants[0]);
        fs::write(
            s.path(),
            serde_json::to_vec(&OnDisk {
                version: 1,
                state: bad,
            })
            .unwrap(),
        )
        .unwrap();
        assert!(matches!(s.load(), Err(StoreError::Invalid { .. })));
        fs::remove_dir_all(&dir).unwrap();
    }
}
