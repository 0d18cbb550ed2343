//! The server's global allocator: glibc's `malloc` for everything but megabyte blocks, which it maps
//! itself on transparent huge pages and keeps a few of for reuse.
//!
//! A megabyte tensor passes through a few buffers on its way (the joined request body, a shared-memory
//! input, the ONNX Runtime input and output, gRPC's encode buffer), and glibc serves each block of
//! 32 MiB or more with a fresh `mmap` that it unmaps on free: every page of every such buffer faulted
//! in again on every request, the kernel zeroing each. A 64 MiB identity over HTTP spent a quarter of
//! the server's CPU in page faults and `clear_page` (perf, bench/tensors.sh). So blocks of
//! [`THRESHOLD`] bytes or more are
//! - mapped with `MADV_HUGEPAGE`: a 2 MiB page faults in at once, 512 times fewer faults (glibc's own
//!   switch for this, `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, measured 184 → 135 ms of server CPU per
//!   64 MiB ONNX identity, 120 → 99 ms Wasm);
//! - grown in place with `mremap` (a `BytesMut` doubling moves page tables, not bytes);
//! - kept on free, a few of them (at most [`CACHE_SLOTS`] blocks and [`CACHE_BYTES`] bytes), and handed
//!   to the next allocation of the same rounded size with their pages still in: a stream of same-sized
//!   tensors stops faulting. A kept block goes back to the kernel once unused for [`IDLE`]
//!   ([`release_idle`], called every second by a task the server starts, and on every large allocation), so a
//!   burst leaves no memory behind.
//!
//! Where the kernel's THP mode is `never` the advice is ignored; the reuse still holds.
#![allow(unsafe_code)] // A global allocator is unsafe by definition; each block says why it is sound.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The blocks this allocator maps itself: a megabyte and more (each mapped as whole huge pages). It
/// was 4 MiB until 2026-11-28: glibc then served a 1 MiB tensor's buffers from its arenas, which it
/// trims on free, so their pages faulted in and were cleared again on every request (9% of the
/// server's CPU on a 1 MiB HTTP identity). At 1 MiB, an A/B of 3 rounds at c=4 measured 0.99–1.16 →
/// 1.20–1.44 GB/s and server CPU 1.23–1.41 → 0.87–1.02 ms a request. The price: a 1 MiB buffer maps 2
/// MiB, and a request body of 1–4 MiB that stalls holds a huge page where glibc held what was written.
pub const THRESHOLD: usize = 1 << 20;
/// How many freed blocks are kept for reuse. It was 8 until 2026-11-28: HTTP/2 reads each frame of
/// up to 1 MiB (the gRPC endpoint's `max_frame_size`) into a block of its own, and at c=4 those blocks
/// took the slots, so a 16 MiB tensor's buffers were unmapped on free and faulted in again (12% of the
/// server's CPU in `clear_page` on a 16 MiB gRPC identity, perf). With 32 slots an A/B of 2 rounds
/// had the server's CPU a request 19.4–22.8 → 16.3–16.7 ms there.
pub const CACHE_SLOTS: usize = 32;
/// How many bytes of freed blocks are kept for reuse.
pub const CACHE_BYTES: usize = 512 << 20;
/// How long a kept block may wait for reuse before it is unmapped.
pub const IDLE: Duration = Duration::from_secs(2);

const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;

/// glibc's allocator, with megabyte blocks mapped, advised and reused as the module says.
pub struct LargePages;

/// A freed block kept for reuse: its address, mapped length, and when it was freed (ms, monotonic).
#[derive(Clone, Copy)]
struct Kept {
    ptr: usize,
    len: usize,
    freed_ms: u64,
}

/// The kept blocks. A fixed array: the allocator must not allocate while it allocates.
static KEPT: Mutex<[Option<Kept>; CACHE_SLOTS]> = Mutex::new([None; CACHE_SLOTS]);

/// Bytes of the blocks handed out and not yet freed (mapped lengths): how many megabyte buffers
/// the process holds at once, which `bulk_copy` reads as the pressure on the caches.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Bytes of this allocator's blocks in use now (mapped lengths; kept blocks not counted). Zero
/// where it is not the global allocator and nothing calls it directly.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Counts a block handed out (`ptr` not null) and returns it.
fn handed_out(ptr: *mut u8, len: usize) -> *mut u8 {
    if !ptr.is_null() {
        LIVE.fetch_add(len, Ordering::Relaxed);
    }
    ptr
}

/// Whether a block of `layout` is this allocator's own (else glibc's).
fn ours(layout: &Layout) -> bool {
    layout.size() >= THRESHOLD && layout.align() <= PAGE
}

/// The mapped length of a block of `size` bytes: whole huge pages, so that blocks of nearly the same
/// size share a length and can be reused for each other.
fn mapped_len(size: usize) -> usize {
    size.next_multiple_of(HUGE_PAGE)
}

fn now_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the current time into a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn unmap(ptr: usize, len: usize) {
    // SAFETY: `ptr..ptr + len` is a whole mapping this allocator made and nothing references any more.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
}

/// Takes out of `kept` the blocks that have waited `idle` or longer, to be unmapped after the lock.
fn take_stale(kept: &mut [Option<Kept>; CACHE_SLOTS], idle: Duration) -> [Option<Kept>; CACHE_SLOTS] {
    let now = now_ms();
    let mut stale = [None; CACHE_SLOTS];
    for (slot, out) in kept.iter_mut().zip(stale.iter_mut()) {
        if slot.is_some_and(|k| now.saturating_sub(k.freed_ms) >= idle.as_millis() as u64) {
            *out = slot.take();
        }
    }
    stale
}

fn unmap_all(blocks: [Option<Kept>; CACHE_SLOTS]) {
    for k in blocks.into_iter().flatten() {
        unmap(k.ptr, k.len);
    }
}

/// A kept block of exactly `len` mapped bytes, if any; unmaps the kept blocks idle past [`IDLE`].
fn take_kept(len: usize) -> Option<usize> {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let found = kept.iter_mut().find(|s| s.is_some_and(|k| k.len == len)).and_then(Option::take).map(|k| k.ptr);
    let stale = take_stale(&mut kept, IDLE);
    drop(kept);
    unmap_all(stale);
    found
}

/// Keeps a freed block for reuse when there is room, else unmaps it.
fn keep(ptr: usize, len: usize) {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let held: usize = kept.iter().flatten().map(|k| k.len).sum();
    if held + len <= CACHE_BYTES
        && let Some(slot) = kept.iter_mut().find(|s| s.is_none())
    {
        *slot = Some(Kept { ptr, len, freed_ms: now_ms() });
        return;
    }
    drop(kept);
    unmap(ptr, len);
}

/// Unmaps the kept blocks that have waited `idle` or longer. The server calls it every second.
pub fn release_idle(idle: Duration) {
    let stale = take_stale(&mut KEPT.lock().unwrap_or_else(|e| e.into_inner()), idle);
    unmap_all(stale);
}

/// Bytes kept for reuse now.
pub fn kept_bytes() -> usize {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten().map(|k| k.len).sum()
}

/// A new block of `len` mapped bytes on huge pages, zeroed by the kernel; null when out of memory.
fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping of our own; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    // SAFETY: advice on the mapping just made; a failure only loses the advice.
    unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
    ptr as *mut u8
}

// SAFETY: a block is this allocator's own exactly when `ours(layout)` (the layout given back on free
// and realloc is the one it was allocated with), and then it is a whole page-aligned mapping of
// `mapped_len(size)` bytes, so it satisfies the layout (align ≤ a page) and is unmapped or kept whole;
// every other block goes to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for LargePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !ours(&layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc(layout) };
        }
        let len = mapped_len(layout.size());
        handed_out(take_kept(len).map_or_else(|| map(len), |p| p as *mut u8), len)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !ours(&layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        }
        let len = mapped_len(layout.size());
        let block = match take_kept(len) {
            Some(p) => {
                // SAFETY: a kept block of `len` bytes, ours alone now.
                unsafe { std::ptr::write_bytes(p as *mut u8, 0, layout.size()) };
                p as *mut u8
            }
            None => map(len),
        };
        handed_out(block, len)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !ours(&layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.dealloc(ptr, layout) };
        }
        let len = mapped_len(layout.size());
        LIVE.fetch_sub(len, Ordering::Relaxed);
        keep(ptr as usize, len);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: a non-zero size within isize, with the block's alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (ours(&layout), ours(&new_layout)) {
            // SAFETY: the caller's contract, passed on.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                let (old_len, new_len) = (mapped_len(layout.size()), mapped_len(new_size));
                if old_len == new_len {
                    return ptr;
                }
                // SAFETY: our own whole mapping, moved or resized by the kernel; the result is checked.
                let moved = unsafe { libc::mremap(ptr as *mut libc::c_void, old_len, new_len, libc::MREMAP_MAYMOVE) };
                if moved == libc::MAP_FAILED {
                    return std::ptr::null_mut();
                }
                if new_len > old_len {
                    // SAFETY: advice on the grown part of our mapping.
                    unsafe { libc::madvise(moved, new_len, libc::MADV_HUGEPAGE) };
                    LIVE.fetch_add(new_len - old_len, Ordering::Relaxed);
                } else {
                    LIVE.fetch_sub(old_len - new_len, Ordering::Relaxed);
                }
                moved as *mut u8
            }
            _ => {
                // SAFETY: from one allocator to the other: a new block, the contents copied, the old
                // one freed with its own layout (nothing is freed when the new block cannot be had).
                unsafe {
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with<R>(size: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let p = LargePages.alloc_zeroed(layout);
            assert!(!p.is_null());
            let r = f(p);
            LargePages.dealloc(p, layout);
            r
        }
    }

    #[test]
    fn blocks_are_zeroed_usable_resizable_and_reused() {
        for size in [16, THRESHOLD - 1, THRESHOLD, 9 << 20] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: non-zero layouts; each block freed with the layout it has then.
            unsafe {
                let p = LargePages.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert!(std::slice::from_raw_parts(p, size).iter().all(|b| *b == 0));
                p.write_bytes(7, size);
                let q = LargePages.realloc(p, layout, size * 3);
                assert!(!q.is_null());
                assert_eq!(*q.add(size - 1), 7, "realloc keeps the contents");
                let r = LargePages.realloc(q, Layout::from_size_align(size * 3, 8).unwrap(), size / 2);
                assert_eq!(*r, 7, "shrinking keeps the contents");
                LargePages.dealloc(r, Layout::from_size_align(size / 2, 8).unwrap());
            }
        }
        // A freed large block is handed out again, zeroed when asked, and released once idle.
        let size = 6 << 20;
        let first = with(size, |p| {
            // SAFETY: inside the block.
            unsafe { p.write_bytes(9, size) };
            p as usize
        });
        let again = with(size, |p| {
            // SAFETY: inside the block.
            assert!(unsafe { std::slice::from_raw_parts(p, size) }.iter().all(|b| *b == 0));
            p as usize
        });
        assert_eq!(first, again, "the kept block is reused");
        // Held blocks count as live (other tests' blocks may count too: at least ours).
        with(size, |_| assert!(live_bytes() >= mapped_len(size), "a held block is live"));
        assert!(kept_bytes() >= mapped_len(size));
        release_idle(Duration::ZERO);
        assert_eq!(kept_bytes(), 0, "idle blocks go back to the kernel");
    }
}
