//! Compare, and Compare and Write, for every backend: blocking calls, run
//! on the offload thread. A file or block device compares and writes with
//! its namespace's [`WriteGate`](crate::core::write_gate::WriteGate) closed,
//! which makes the pair atomic against every other write of this target; an
//! RBD image does both in the cluster (`rbd_compare_and_write`), atomic
//! against every client of the image, other gateways included.

use std::os::unix::fs::FileExt;

use super::Backend;
use crate::core::write_gate::WriteGate;
use crate::PAGE;

/// The result of a compare that found the data different (errors are
/// negative errnos, success 0).
pub const MISCOMPARE: i32 = 1;

/// The result of a Compare and Write whose host lost its access to the
/// namespace (a Preempt and Abort ran first): nothing compared or written.
pub const CONFLICT: i32 = 2;

/// Added to the (negative) errno of a Compare and Write whose compare
/// matched and whose write failed: the host is told the write's status.
pub const WRITE_FAILED: i32 = -(1 << 16);

/// The errno of a failed write of a Compare and Write, if `res` says so.
pub fn write_failure(res: i32) -> Option<i32> {
    (res <= WRITE_FAILED).then(|| res - WRITE_FAILED)
}

/// How long a Compare and Write on an RBD image waits for this gateway to
/// own the image: what a takeover of a gateway that does not answer takes,
/// with room to spare, and below the host's 30 s command timeout.
const OWNERSHIP_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A zeroed buffer of `len` bytes at an aligned address, inside `store`.
fn aligned(store: &mut Vec<u8>, len: usize) -> &mut [u8] {
    *store = vec![0u8; len + PAGE];
    let off = store.as_ptr().align_offset(PAGE);
    &mut store[off..off + len]
}

fn errno_of(e: &std::io::Error) -> i32 {
    -e.raw_os_error().unwrap_or(nix::libc::EIO)
}

/// Reads `len` bytes at `offset` (blocking); the read buffer is `store`'s.
fn read_at<'a>(
    backend: &Backend,
    offset: u64,
    store: &'a mut Vec<u8>,
    len: usize,
) -> Result<&'a [u8], i32> {
    let buf = aligned(store, len);
    match backend {
        Backend::File { file, .. } => file.read_exact_at(buf, offset).map_err(|e| errno_of(&e))?,
        Backend::Rbd(img) => match img.image().read(offset, buf) {
            Ok(n) if n == len => {}
            Ok(n) => buf[n..].fill(0), // a hole at the end of a sparse image
            Err(e) => return Err(e),
        },
        Backend::Null => {}
    }
    Ok(buf)
}

/// Compares `cmp` with the data of `backend` at byte `offset`: 0 when equal,
/// [`MISCOMPARE`], or a negative errno. Blocks.
pub fn compare(backend: &Backend, offset: u64, cmp: &[u8]) -> i32 {
    let mut store = Vec::new();
    match read_at(backend, offset, &mut store, cmp.len()) {
        Ok(have) if have == cmp => 0,
        Ok(_) => MISCOMPARE,
        Err(e) => e,
    }
}

/// Compares `cmp` with the data at byte `offset` and, when equal, writes
/// `data` there (durable before returning when `fua`), with no other write
/// of this target (of any client, on RBD) between the two. 0, [`MISCOMPARE`]
/// (nothing written), a negative errno, or [`WRITE_FAILED`] plus one when
/// the compare matched and the write failed (a file or block device; an RBD
/// image fails the pair as one). Blocks.
/// `allowed` checks the host's reservation access: with the gate closed on
/// a local store (so that no Preempt and Abort can pass between the check
/// and the write), before the call on the others; [`CONFLICT`] when denied.
pub fn compare_and_write(
    backend: &Backend,
    gate: &WriteGate,
    offset: u64,
    cmp: &[u8],
    data: &[u8],
    fua: bool,
    allowed: impl Fn() -> bool,
) -> i32 {
    if cmp.len() != data.len() {
        return -nix::libc::EINVAL;
    }
    if !matches!(backend, Backend::File { .. }) && !allowed() {
        return CONFLICT;
    }
    match backend {
        Backend::Rbd(img) => {
            // An image that needs ownership is written by its owner only:
            // wait for it as a write at the gate does.
            let gated = backend.gated();
            if gated && !gate.enter_wait(OWNERSHIP_WAIT) {
                return -nix::libc::EAGAIN;
            }
            // Again: a Preempt and Abort may have passed while it waited.
            if gated && !allowed() {
                gate.leave();
                return CONFLICT;
            }
            let r = match img.image().compare_and_write(offset, cmp, data) {
                Ok(()) if fua => img.flush().map_or_else(|e| errno_of(&e), |_| 0),
                Ok(()) => 0,
                Err(e) if e == -nix::libc::EILSEQ => MISCOMPARE,
                Err(e) => e,
            };
            if gated {
                if r == -nix::libc::ETIMEDOUT {
                    gate.mark_uncertain();
                }
                if r == -nix::libc::ESHUTDOWN {
                    img.conn().suspect();
                }
                gate.leave();
            }
            r
        }
        Backend::Null => {
            if cmp.iter().all(|&b| b == 0) {
                0
            } else {
                MISCOMPARE
            }
        }
        Backend::File { file, .. } => {
            let _closed = gate.close();
            if !allowed() {
                return CONFLICT;
            }
            let mut store = Vec::new();
            match read_at(backend, offset, &mut store, cmp.len()) {
                Ok(have) if have == cmp => {}
                Ok(_) => return MISCOMPARE,
                Err(e) => return e,
            }
            let mut out = Vec::new();
            let buf = aligned(&mut out, data.len());
            buf.copy_from_slice(data);
            if let Err(e) = file.write_all_at(buf, offset) {
                return WRITE_FAILED + errno_of(&e);
            }
            if fua {
                if let Err(e) = file.sync_data() {
                    return WRITE_FAILED + errno_of(&e);
                }
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_write_on_a_file() {
        let path = std::env::temp_dir().join(format!("nvmf-caw-{}", std::process::id()));
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let (backend, _, _) = super::super::file::open(&path, Some(4096), false).unwrap();
        let gate = WriteGate::default();
        let zero = vec![0u8; 4096];
        let a = vec![0xAAu8; 4096];
        let b = vec![0xBBu8; 4096];
        assert_eq!(compare(&backend, 4096, &zero), 0);
        assert_eq!(compare(&backend, 4096, &a), MISCOMPARE);
        assert_eq!(
            compare_and_write(&backend, &gate, 4096, &zero, &a, true, || true),
            0
        );
        assert_eq!(
            compare_and_write(&backend, &gate, 4096, &zero, &b, false, || true),
            MISCOMPARE
        );
        assert_eq!(
            compare(&backend, 4096, &a),
            0,
            "the miscompare wrote nothing"
        );
        assert_eq!(
            compare_and_write(&backend, &gate, 4096, &a, &b, false, || true),
            0
        );
        assert_eq!(compare(&backend, 4096, &b), 0);
        drop(backend);
        std::fs::remove_file(&path).unwrap();
    }
}
