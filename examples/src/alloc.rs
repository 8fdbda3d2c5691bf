//! An allocator that counts the bytes allocated and not freed, for the benchmarks that report
//! memory per pending key: install it with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;`, read it with [`live_bytes`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting what is live.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is the system allocator's, with the same arguments; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Bytes allocated through [`Counting`] and not freed yet.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}
