//! A client's shared-memory object mapped into the server, made safe against the client shrinking it.
//!
//! Mapping the object is what makes shared memory cheap: a backend reads an input straight from the
//! client's pages (wasmtime lowers it into the guest from there, ONNX Runtime reads it in place), one
//! copy fewer than `pread` into a buffer of the server's. But the object belongs to the client, which may
//! truncate it at any moment, and touching a mapped page past a shrunk object's end raises SIGBUS:
//! tritonserver dies of it. Here every mapping is entered in a fixed table that a SIGBUS handler of
//! this module reads. A fault inside a mapping of the table replaces that mapping's pages, from the
//! faulting one to its end, with anonymous zero pages (the interrupted access then completes on them:
//! a read sees zeros, a write lands where no one looks) and counts a fault against the mapping. A
//! request that used a mapping checks, once the backend is done with its inputs, that no fault was
//! counted ([`Mapping::intact`]; `system.rs` also checks that the object still reaches the input's
//! end, since a shrink within the last page faults nothing) and fails otherwise; the region maps its
//! object afresh for the next request. A SIGBUS anywhere else goes to the handler installed before this one (wasmtime's, which
//! passes a fault outside Wasm code on to the default action): the process dies of it as it would
//! have.
//!
//! The table is a process-wide static because a signal handler can reach nothing else; it holds
//! address ranges and counters, no request state.
#![allow(unsafe_code)] // mmap, munmap and sigaction; each block says why it is sound.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// How many mappings can be guarded at once (one per registered system region). A region that finds
/// the table full is read and written with `pread`/`pwrite` instead.
const SLOTS: usize = 1024;

/// One entry of the table: a mapping's address range (`start` 0 when the entry is free) and the
/// faults the handler counted in it.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    faults: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // the initialiser of each element, not a shared value
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), faults: AtomicU64::new(0) };
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// Serialises taking and freeing entries (never taken by the signal handler).
static TAKING: Mutex<()> = Mutex::new(());
/// The SIGBUS disposition before this module's handler, which faults outside the table go to.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
static INSTALL: Once = Once::new();

/// The system's page size, read once (the signal handler reads it from here).
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

fn page_size() -> usize {
    match PAGE_SIZE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let size = usize::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096);
            PAGE_SIZE.store(size, Ordering::Relaxed);
            size
        }
        size => size,
    }
}

/// `len` bytes at `offset` of a file, mapped shared, readable and writable, and guarded (module
/// documentation). Unmapped when dropped.
pub struct Mapping {
    /// The start of the mapping (page-aligned, at or before the range asked for).
    base: *mut u8,
    /// The length of the mapping, from `base`.
    mapped: usize,
    /// Where the range asked for starts, from `base`.
    skip: usize,
    len: usize,
    slot: usize,
}

// SAFETY: the mapping is plain memory shared with another process; `Mapping` hands out no reference
// that outlives it, and every access goes through raw copies or slices whose aliasing is the
// client's to respect, as with any shared memory.
unsafe impl Send for Mapping {}
// SAFETY: as above; the only state that changes (the fault count) is atomic.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes at `offset` of `file`. `None` when the guard's table is full, the range does not
    /// fit the address space or `mmap` fails (the caller then keeps to `pread`/`pwrite`).
    pub fn new(file: &File, offset: u64, len: usize) -> Option<Mapping> {
        if len == 0 {
            return None;
        }
        install();
        let page = page_size();
        let skip = usize::try_from(offset % page as u64).ok()?;
        let mapped = len.checked_add(skip)?.checked_next_multiple_of(page)?;
        let file_offset = libc::off_t::try_from(offset - skip as u64).ok()?;
        let _taking = TAKING.lock().unwrap_or_else(|e| e.into_inner());
        let slot = TABLE.iter().position(|s| s.start.load(Ordering::Acquire) == 0)?;
        // SAFETY: a fresh shared mapping of a file this process opened read-write; the kernel picks
        // the address, so no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let entry = &TABLE[slot];
        entry.faults.store(0, Ordering::Relaxed);
        entry.len.store(mapped, Ordering::Relaxed);
        // Published last: the handler matches an entry only once its start is set.
        entry.start.store(base as usize, Ordering::Release);
        Some(Mapping { base: base.cast(), mapped, skip, len, slot })
    }

    /// Whether no access to the mapping has faulted: while it is, every byte read from it was the
    /// object's and every byte written went to the object.
    pub fn intact(&self) -> bool {
        TABLE[self.slot].faults.load(Ordering::Acquire) == 0
    }

    /// The `len` bytes at `offset` of the mapped range (`offset + len` within it), as a slice that the
    /// client may change or shrink under it (the module documentation).
    pub fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "range outside the mapping");
        // SAFETY: within the mapping (asserted above), which lives as long as `self`; a page the
        // client shrinks away is replaced by a zero page by the handler, never left unmapped.
        unsafe { std::slice::from_raw_parts(self.base.add(self.skip + offset), len) }
    }

    /// The start of the `len` bytes at `offset` of the mapped range (`offset + len` within it), for
    /// a writer outside Rust (ONNX Runtime writing an output there): valid while `self` lives, and a
    /// page the client shrinks away becomes a zero page under the writer, as for [`Mapping::write`].
    pub fn as_mut_ptr(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "range outside the mapping");
        // SAFETY: within the mapping (asserted above); computing the address reads nothing.
        unsafe { self.base.add(self.skip + offset) }
    }

    /// Copies `data` to `offset` of the mapped range (`offset + data.len()` within it), streamed
    /// past the caches when it is megabytes ([`crate::bulk_copy`]).
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len), "range outside the mapping");
        // SAFETY: the destination lies within the mapping (asserted), which is writable and lives as
        // long as `self`, and cannot overlap `data`, a buffer of the server's.
        unsafe { crate::bulk_copy::copy_nonoverlapping(data.as_ptr(), self.base.add(self.skip + offset), data.len()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _taking = TAKING.lock().unwrap_or_else(|e| e.into_inner());
        // The entry goes first: no access to the mapping can fault any more (its last owner is here),
        // and once unmapped its addresses may be reused by mappings the handler must not touch.
        TABLE[self.slot].start.store(0, Ordering::Release);
        // SAFETY: unmaps exactly what `new` mapped, which nothing references any more.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

/// Installs the SIGBUS handler once, keeping the disposition it replaces.
fn install() {
    INSTALL.call_once(|| {
        // SAFETY: reads the current disposition into a zeroed struct, then installs a handler that
        // only reads the table and `PREVIOUS` (set before it).
        unsafe {
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return;
            }
            PREVIOUS.store(Box::into_raw(Box::new(previous)), Ordering::Release);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// The SIGBUS handler (module documentation). Does only what is safe in a signal handler: atomic
/// loads and stores, and the `mmap`/`sigaction` system calls.
extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO.
    let address = unsafe { (*info).si_addr() } as usize;
    for entry in &TABLE {
        let start = entry.start.load(Ordering::Acquire);
        let len = entry.len.load(Ordering::Relaxed);
        if start == 0 || address < start || address >= start + len {
            continue;
        }
        // Set before any mapping was made, so before any entry matched.
        let page = address & !(PAGE_SIZE.load(Ordering::Relaxed) - 1);
        // SAFETY: replaces pages of a mapping this module made and still owns (its entry is set) with
        // anonymous ones at the same addresses; nothing else lives there.
        let replaced = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                start + len - page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            entry.faults.fetch_add(1, Ordering::AcqRel);
            return;
        }
        break;
    }
    forward(signal, info, context);
}

/// Passes a SIGBUS this module does not handle to the disposition before it.
fn forward(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: `previous` was set, from a valid disposition, before this handler was installed.
    unsafe {
        let previous = &*previous;
        let handler = previous.sa_sigaction;
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // The default action, on return: the faulting access runs again and the kernel, finding
            // no handler, ends the process as it would have without this module.
            libc::sigaction(signal, previous, std::ptr::null_mut());
        } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            handler(signal, info, context);
        } else {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            handler(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn object(bytes: &[u8]) -> (File, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("nereus-mapping-{}-{}", std::process::id(), bytes.len()));
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.write_all(bytes).unwrap();
        (file, path)
    }

    #[test]
    fn reads_and_writes_through_the_mapping() {
        let content: Vec<u8> = (0..=255u8).cycle().take(4 * 4096 + 100).collect();
        let (file, path) = object(&content);
        let map = Mapping::new(&file, 5000, 8000).unwrap();
        assert_eq!(map.slice(0, 8000), &content[5000..13_000]);
        map.write(10, b"nereus");
        drop(map);
        let now = std::fs::read(&path).unwrap();
        assert_eq!(&now[5010..5016], b"nereus");
        assert_eq!(now[..5010], content[..5010]);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn an_object_that_shrinks_under_the_mapping_is_a_counted_fault_not_a_signal() {
        let content = vec![7u8; 8 * 4096];
        let (file, path) = object(&content);
        let map = Mapping::new(&file, 0, content.len()).unwrap();
        assert!(map.intact());
        file.set_len(4096).unwrap();
        // The first page is still the object's; the rest is gone: reading it would be SIGBUS.
        let read = map.slice(0, content.len()).to_vec();
        assert!(!map.intact());
        assert!(read[..4096].iter().all(|&b| b == 7));
        assert!(read[4096..].iter().all(|&b| b == 0));
        map.write(5 * 4096, b"lost");
        // Another mapping of the same file is untouched by the first one's fault.
        let again = Mapping::new(&file, 0, 4096).unwrap();
        assert!(again.intact());
        assert_eq!(again.slice(0, 4096), &content[..4096]);
        std::fs::remove_file(path).unwrap();
    }
}
