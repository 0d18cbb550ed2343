//! A cache of small freed blocks in front of the system allocator, for the plugin's heap.
//!
//! Why: a request crosses into a plugin as many small allocations (the host allocates every string
//! and list of the request's records through the component's `cabi_realloc`: names, shapes, each
//! tensor's bytes), and the plugin's answer makes as many again (shapes, names, the outputs' bytes),
//! all freed once the request is answered. On `wasm32-wasip2` the system allocator is wasi-libc's
//! dlmalloc, whose every `malloc` and `free` walks its bins: about 40 of them a request for Triton's
//! `simple`, the largest single cost in the sandbox after the plugin's own code. Here a freed block of
//! up to [`LARGEST`] bytes goes onto a list for its size class, and the next allocation of that class
//! takes it back: a pointer popped, no search. At most [`KEPT`] blocks a class are kept (34 KiB in
//! all); the rest go back to dlmalloc, as does everything larger or more aligned.
//!
//! Sound only without threads: the lists are not synchronised. `wasm32-wasip2` components have one
//! thread; the cache is compiled only where the target has no atomics (no shared memory).
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Size classes are multiples of this, and so is every cached block's alignment.
const STEP: usize = 16;
/// Size classes: blocks of 16, 32, …, 256 bytes.
const CLASSES: usize = 16;
/// The largest size served from the cache.
pub const LARGEST: usize = STEP * CLASSES;
/// Blocks kept a class.
pub const KEPT: u16 = 16;

struct Lists {
    /// Each class's first free block; a free block's first word points to the next.
    heads: [*mut u8; CLASSES],
    counts: [u16; CLASSES],
}

/// The cache; install with `#[global_allocator]` (the SDK does, see the crate's `small-block-cache`
/// feature).
pub struct SmallBlocks(UnsafeCell<Lists>);

impl SmallBlocks {
    pub const fn new() -> Self {
        SmallBlocks(UnsafeCell::new(Lists { heads: [ptr::null_mut(); CLASSES], counts: [0; CLASSES] }))
    }
}

impl Default for SmallBlocks {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: installed only on targets without threads (see the module's doc): there is never a second
// thread to share the lists with. (The unit tests build it on the host too, each test's cache used by
// that test's thread alone.)
unsafe impl Sync for SmallBlocks {}

/// The class of `layout`, if the cache serves it.
fn class(layout: Layout) -> Option<usize> {
    (layout.size() != 0 && layout.size() <= LARGEST && layout.align() <= STEP).then(|| (layout.size() - 1) / STEP)
}

/// The layout every block of class `c` has in the system allocator.
fn block(c: usize) -> Layout {
    // SAFETY: the size is a non-zero multiple of the alignment, a power of two, far from overflow.
    unsafe { Layout::from_size_align_unchecked((c + 1) * STEP, STEP) }
}

// SAFETY: every block handed out is either the system allocator's, of at least the size and
// alignment asked for (a class's block layout covers every layout of that class), or one such block
// freed before and not handed out since (each is on one list at most, popped once). Blocks go back
// to the system allocator with the layout they were allocated with.
unsafe impl GlobalAlloc for SmallBlocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class(layout) else {
            // SAFETY: the caller's contract is the system allocator's.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: no other thread (see `Sync`), and no reentrancy: nothing here allocates.
        let lists = unsafe { &mut *self.0.get() };
        let head = lists.heads[c];
        if head.is_null() {
            // SAFETY: a valid non-zero layout.
            return unsafe { System.alloc(block(c)) };
        }
        // SAFETY: a cached block is at least a pointer in size and aligned for one, and holds the
        // next block's address in its first word.
        lists.heads[c] = unsafe { head.cast::<*mut u8>().read() };
        lists.counts[c] -= 1;
        head
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(c) = class(layout) else {
            // SAFETY: allocated by the system allocator with this layout (`alloc` above).
            return unsafe { System.dealloc(ptr, layout) };
        };
        // SAFETY: as in `alloc`.
        let lists = unsafe { &mut *self.0.get() };
        if lists.counts[c] >= KEPT {
            // SAFETY: every block of the class was allocated with the class's layout.
            return unsafe { System.dealloc(ptr, block(c)) };
        }
        // SAFETY: the block is ours again, at least 16 bytes and 16-aligned.
        unsafe { ptr.cast::<*mut u8>().write(lists.heads[c]) };
        lists.heads[c] = ptr;
        lists.counts[c] += 1;
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new)) {
            // The block already has room for the new size.
            (Some(a), Some(b)) if a == b => ptr,
            // Neither is cached: the system allocator may grow in place.
            // SAFETY: as for `realloc` on the system allocator, with the block's own layout.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: a valid layout (above).
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold at least the smaller size, and are distinct.
                    unsafe {
                        ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_block_serves_the_next_allocation_of_its_class() {
        let cache = SmallBlocks::new();
        let small = Layout::from_size_align(24, 8).unwrap();
        unsafe {
            let a = cache.alloc(small);
            a.write_bytes(0xab, 24);
            cache.dealloc(a, small);
            let b = cache.alloc(Layout::from_size_align(32, 16).unwrap());
            assert_eq!(a, b, "the same class (17–32 bytes) takes the freed block back");
            cache.dealloc(b, Layout::from_size_align(32, 16).unwrap());
        }
    }

    #[test]
    fn large_and_overaligned_blocks_and_the_surplus_go_to_the_system() {
        let cache = SmallBlocks::new();
        assert_eq!(class(Layout::from_size_align(LARGEST + 1, 8).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(64, 32).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(0, 1).unwrap()), None);
        let layout = Layout::from_size_align(100, 4).unwrap();
        let blocks: Vec<*mut u8> = (0..KEPT as usize + 5).map(|_| unsafe { cache.alloc(layout) }).collect();
        for b in &blocks {
            unsafe { cache.dealloc(*b, layout) };
        }
        let lists = unsafe { &*cache.0.get() };
        assert_eq!(lists.counts[class(layout).unwrap()], KEPT);
    }

    #[test]
    fn realloc_keeps_the_bytes_across_classes() {
        let cache = SmallBlocks::new();
        let layout = Layout::from_size_align(10, 1).unwrap();
        unsafe {
            let p = cache.alloc(layout);
            for i in 0..10 {
                p.add(i).write(i as u8);
            }
            let same = cache.realloc(p, layout, 16);
            assert_eq!(same, p, "room in the block already");
            let grown = cache.realloc(same, Layout::from_size_align(16, 1).unwrap(), 1000);
            let bytes: Vec<u8> = (0..10).map(|i| grown.add(i).read()).collect();
            assert_eq!(bytes, (0..10).collect::<Vec<u8>>());
            let shrunk = cache.realloc(grown, Layout::from_size_align(1000, 1).unwrap(), 5);
            assert_eq!((0..5).map(|i| shrunk.add(i).read()).collect::<Vec<u8>>(), vec![0, 1, 2, 3, 4]);
            cache.dealloc(shrunk, Layout::from_size_align(5, 1).unwrap());
        }
    }
}
