//! The null backend: every operation succeeds at once, writes are dropped and
//! reads return zeroes, as from a device that was never written. A read fills
//! its whole buffer: a pool buffer last held another request's data (another
//! host's, another subsystem's), and the transport sends what the buffer holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{compare, DataRef, Executor, Storage, Submitted};
use crate::request::plan::IoPlan;
use crate::request::write_gate::WriteGate;

/// The null store. Its size is the configuration's (0: fixed by whoever
/// built the namespace, as tests do); a resize sets it.
#[derive(Debug, Default)]
pub struct Null {
    size: AtomicU64,
}

impl Null {
    /// A null store of `bytes`.
    pub fn sized(bytes: u64) -> Null {
        Null {
            size: AtomicU64::new(bytes),
        }
    }
}

impl Storage for Null {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn describe(&self) -> String {
        "null".into()
    }

    fn status(&self) -> (&'static str, Option<String>) {
        ("null", None)
    }

    fn size_now(&self) -> std::io::Result<Option<u64>> {
        Ok(match self.size.load(Ordering::Acquire) {
            0 => None,
            n => Some(n),
        })
    }

    fn grow(&self, bytes: u64) -> Result<(), String> {
        self.size.store(bytes, Ordering::Release);
        Ok(())
    }

    fn gated(&self) -> bool {
        false
    }

    unsafe fn submit(
        &self,
        _gate: &Arc<WriteGate>,
        plan: &IoPlan,
        data: DataRef,
        _ranges: &[(u64, u64)],
        _io: &mut dyn Executor,
        _ud: u64,
    ) -> Submitted {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { execute(plan, data) }
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn read_at(&self, _offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        buf.fill(0);
        Ok(())
    }

    fn compare_and_write(
        &self,
        _gate: &WriteGate,
        _offset: u64,
        cmp: &[u8],
        _data: &[u8],
        _fua: bool,
        allowed: &dyn Fn() -> Result<(), nvme::Status>,
    ) -> i32 {
        if let Err(st) = allowed() {
            compare::refused(st)
        } else if cmp.iter().all(|&b| b == 0) {
            0
        } else {
            compare::MISCOMPARE
        }
    }
}

/// Runs `plan` at once: a read zeroes its `len` bytes at `data` and counts
/// them as moved; everything else is a no-op.
///
/// # Safety
/// For a read, `data.ptr` must be valid for writes of the plan's length and
/// not aliased while this runs.
pub unsafe fn execute(plan: &IoPlan, data: DataRef) -> Submitted {
    let done = match *plan {
        IoPlan::Read { len, .. } if len > 0 => {
            // SAFETY: the caller's guarantee: the request's own buffer of at
            // least `len` bytes, used by nothing else.
            unsafe { std::ptr::write_bytes(data.ptr, 0, len as usize) };
            len
        }
        IoPlan::Write { len, .. } => len,
        _ => 0,
    };
    Submitted {
        in_flight: 0,
        errno: 0,
        done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_zeroes_its_whole_buffer() {
        let mut buf = vec![0xA5u8; 8192];
        let data = DataRef {
            ptr: buf.as_mut_ptr(),
            fixed: None,
        };
        let plan = IoPlan::Read {
            offset: 0,
            len: 4096,
        };
        // SAFETY: `buf` holds 8192 bytes and nothing else uses it.
        let s = unsafe { execute(&plan, data) };
        assert_eq!(
            s,
            Submitted {
                in_flight: 0,
                errno: 0,
                done: 4096
            }
        );
        assert!(
            buf[..4096].iter().all(|&b| b == 0),
            "stale bytes left in a null read"
        );
        assert!(
            buf[4096..].iter().all(|&b| b == 0xA5),
            "wrote past the read"
        );
    }

    #[test]
    fn writes_and_the_rest_complete_without_touching_data() {
        let plan = IoPlan::Write {
            offset: 0,
            len: 512,
            fua: true,
        };
        // SAFETY: a write reads nothing here (the null backend drops it).
        let s = unsafe { execute(&plan, DataRef::NONE) };
        assert_eq!(s.done, 512);
        // SAFETY: a flush uses no data.
        assert_eq!(
            unsafe { execute(&IoPlan::Flush, DataRef::NONE) },
            Submitted::default()
        );
    }
}
