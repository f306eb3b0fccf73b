//! Page-aligned, zero-initialized anonymous memory, suitable for RDMA
//! registration and for O_DIRECT I/O (io_uring fixed buffers).

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
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last("mmap"));
        }
        Ok(Buffer {
            ptr: p as *mut u8,
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
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}
