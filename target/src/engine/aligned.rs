//! Page-aligned, zeroed memory: the data pools and capsule buffers of a
//! transport whose memory needs no registration (NVMe/TCP, the loopback).
//! O_DIRECT reads and writes need the alignment.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use crate::PAGE;

/// A page-aligned allocation.
pub struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    /// `len` zeroed bytes (at least one page), page-aligned.
    pub fn new(len: usize) -> Aligned {
        let layout = Layout::from_size_align(len.max(PAGE), PAGE).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Aligned { ptr, layout }
    }

    /// The start of the memory.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

// SAFETY: an `Aligned` owns its allocation alone (no other handle to it);
// moving it to another thread moves that ownership.
unsafe impl Send for Aligned {}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}
