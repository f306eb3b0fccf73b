//! Page-aligned, zero-initialized anonymous memory, suitable for RDMA
//! registration and for O_DIRECT I/O (io_uring fixed buffers).

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

use crate::error::{Error, Result};

/// An owned anonymous mapping. Its address never changes while it lives.
pub struct Buffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through
// &/&mut (or raw pointers whose users uphold the aliasing rules).
unsafe impl Send for Buffer {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Maps `len` bytes (rounded up to the page size), zeroed.
    pub fn new(len: usize) -> Result<Buffer> {
        let len = len.max(1).next_multiple_of(4096);
        let size = NonZeroUsize::new(len).expect("at least one page");
        // SAFETY: a new anonymous private mapping with no address hint aliases
        // nothing; it is unmapped only in Drop.
        let p = unsafe {
            mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|e| Error::Os {
            call: "mmap",
            source: e.into(),
        })?;
        Ok(Buffer {
            ptr: p.as_ptr() as *mut u8,
            len,
        })
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty (never: at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The whole buffer.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is a live mapping owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    /// The whole buffer, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(p) = NonNull::new(self.ptr as *mut std::ffi::c_void) {
            // SAFETY: unmapping exactly the mapping created in `new`, which
            // nothing borrows any more (self is being dropped).
            let _ = unsafe { munmap(p, self.len) };
        }
    }
}
