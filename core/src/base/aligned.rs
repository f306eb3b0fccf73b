//! Page-aligned, zeroed memory: the data pools and capsule buffers of a
//! transport whose memory needs no registration (NVMe/TCP, the loopback).
//! O_DIRECT reads and writes need the alignment.
//!
//! Anonymous mappings: the kernel gives zeroed pages as they are first
//! touched, so a pool costs nothing until used (an allocator's zeroed
//! aligned allocation writes every page at once: 1 s of a restart under
//! emulation, and the whole pool resident from the start).

use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

use crate::PAGE;

/// A page-aligned allocation.
pub struct Aligned {
    ptr: NonNull<std::ffi::c_void>,
    len: NonZeroUsize,
}

impl Aligned {
    /// `len` zeroed bytes (at least one page), page-aligned.
    pub fn new(len: usize) -> Aligned {
        let len =
            NonZeroUsize::new(len.max(PAGE).next_multiple_of(PAGE)).unwrap_or(NonZeroUsize::MIN);
        // SAFETY: a new private anonymous mapping aliases no memory of ours.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        };
        match ptr {
            Ok(ptr) => Aligned { ptr, len },
            Err(_) => std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len.get(), PAGE).expect("a valid layout"),
            ),
        }
    }

    /// The start of the memory.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr().cast()
    }
}

// SAFETY: an `Aligned` owns its mapping alone (no other handle to it);
// moving it to another thread moves that ownership.
unsafe impl Send for Aligned {}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length, unmapped once; nothing
        // borrows it past its owner.
        let _ = unsafe { munmap(self.ptr, self.len.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_writable() {
        for len in [0, 1, PAGE, 3 * PAGE + 5, 8 << 20] {
            let a = Aligned::new(len);
            assert_eq!(a.ptr() as usize % PAGE, 0);
            let n = len.max(1);
            // SAFETY: `n` bytes are mapped (at least `len`, at least a page).
            let s = unsafe { std::slice::from_raw_parts_mut(a.ptr(), n) };
            assert!(s.iter().all(|&b| b == 0));
            s[n - 1] = 7;
            assert_eq!(s[n - 1], 7);
        }
    }
}
