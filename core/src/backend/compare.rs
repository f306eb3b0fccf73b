//! Compare, and Compare and Write, for every backend: blocking calls, run
//! on the offload thread. A file or block device compares and writes with
//! its namespace's [`WriteGate`](crate::request::write_gate::WriteGate) closed,
//! which makes the pair atomic against every other write of this target; an
//! RBD image does both in the cluster (`rbd_compare_and_write`), atomic
//! against every client of the image, other gateways included.

use nvme::Status;

use super::Storage;
use crate::request::write_gate::WriteGate;
use crate::PAGE;

/// The result of a compare that found the data different (errors are
/// negative errnos, success 0).
pub const MISCOMPARE: i32 = 1;

/// Added to the status field of a Compare and Write whose host's access
/// was refused (a Preempt and Abort ran first; a gateway unsure of a shared
/// reservation state): nothing compared or written.
const REFUSED: i32 = 1 << 20;

/// The result of a Compare and Write refused with `st`.
pub fn refused(st: Status) -> i32 {
    REFUSED + st.to_field() as i32
}

/// The status a Compare and Write was refused with, if `res` says so.
pub fn refusal(res: i32) -> Option<Status> {
    (res >= REFUSED).then(|| Status::from_field((res - REFUSED) as u16))
}

/// Added to the (negative) errno of a Compare and Write whose compare
/// matched and whose write failed: the host is told the write's status.
pub const WRITE_FAILED: i32 = -(1 << 16);

/// The errno of a failed write of a Compare and Write, if `res` says so.
pub fn write_failure(res: i32) -> Option<i32> {
    (res <= WRITE_FAILED).then(|| res - WRITE_FAILED)
}

/// A zeroed buffer of `len` bytes at an aligned address, inside `store`.
pub fn aligned(store: &mut Vec<u8>, len: usize) -> &mut [u8] {
    *store = vec![0u8; len + PAGE];
    let off = store.as_ptr().align_offset(PAGE);
    &mut store[off..off + len]
}

/// The negative errno of an I/O error.
pub fn errno_of(e: &std::io::Error) -> i32 {
    -e.raw_os_error().unwrap_or(nix::libc::EIO)
}

/// Compares `cmp` with the data of `backend` at byte `offset`: 0 when equal,
/// [`MISCOMPARE`], or a negative errno. Blocks.
pub fn compare(backend: &dyn Storage, offset: u64, cmp: &[u8]) -> i32 {
    let mut store = Vec::new();
    let buf = aligned(&mut store, cmp.len());
    match backend.read_at(offset, buf) {
        Ok(()) if *buf == *cmp => 0,
        Ok(()) => MISCOMPARE,
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
/// and the write), before the call on the others; [`refused`] with its
/// status when denied.
pub fn compare_and_write(
    backend: &dyn Storage,
    gate: &WriteGate,
    offset: u64,
    cmp: &[u8],
    data: &[u8],
    fua: bool,
    allowed: impl Fn() -> Result<(), Status>,
) -> i32 {
    if cmp.len() != data.len() {
        return -nix::libc::EINVAL;
    }
    backend.compare_and_write(gate, offset, cmp, data, fua, &allowed)
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
        assert_eq!(compare(&*backend, 4096, &zero), 0);
        assert_eq!(compare(&*backend, 4096, &a), MISCOMPARE);
        assert_eq!(
            compare_and_write(&*backend, &gate, 4096, &zero, &a, true, || Ok(())),
            0
        );
        assert_eq!(
            compare_and_write(&*backend, &gate, 4096, &zero, &b, false, || Ok(())),
            MISCOMPARE
        );
        assert_eq!(
            compare(&*backend, 4096, &a),
            0,
            "the miscompare wrote nothing"
        );
        assert_eq!(
            compare_and_write(&*backend, &gate, 4096, &a, &b, false, || Ok(())),
            0
        );
        assert_eq!(compare(&*backend, 4096, &b), 0);
        drop(backend);
        std::fs::remove_file(&path).unwrap();
    }
}
