//! A system shared-memory region: a byte range of a POSIX shared-memory object (`shm_open` key).
//!
//! The object belongs to the client, which may truncate, unlink or replace it at any moment.
//! tritonserver maps it, and a read of a mapped page past a shrunk object's end kills the whole
//! process with SIGBUS. A region keeps the object's file descriptor, and each access first checks
//! (one `stat` of the object's name) that the name still leads to the same object and that the
//! object still holds the range. Then an input is a view of the region's mapping ([`Mapping`]: a
//! page that the client shrinks away under it becomes a counted fault, not a signal), which the
//! backend reads in place, and an output is copied into the mapping; the request checks, when the
//! backend is done, that its mappings saw no fault ([`InputLease`]). Where no mapping could be made,
//! `pread`/`pwrite` copy instead, which report a range that vanished as a short count. Either way a
//! shrunk object fails the request with an error naming the region, and every other request carries
//! on.
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::end_of;
use super::mapping::Mapping;
use crate::error::InferError;

/// Where Linux's `shm_open` keeps its objects (glibc's SHMDIR).
const SHM_DIR: &str = "/dev/shm";

/// The prefix tritonserver reserves for regions it creates itself (its python backend's).
const RESERVED_KEY_PREFIX: &str = "triton_python_backend_shm_region_";

/// One registered region: `byte_size` bytes at `offset` of the shared-memory object `key`.
pub struct SystemRegion {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    /// The object as it was at registration; reads and writes go through it.
    file: File,
    /// Where the object's name lives, to see whether it was unlinked or replaced.
    path: PathBuf,
    /// The object's identity at registration: (device, inode).
    identity: (u64, u64),
    /// The region mapped, while no access to it faulted; replaced after one (`None` where no mapping
    /// could be made: the copies then go through `pread`/`pwrite`).
    mapping: Mutex<Option<Arc<Mapping>>>,
}

/// A mapping a request's input was read from, to check once the backend is done with the input.
#[derive(Clone)]
pub struct InputLease {
    mapping: Arc<Mapping>,
    region: Arc<SystemRegion>,
    /// The end of the input in the object.
    end: u64,
}

impl InputLease {
    /// An error when the client shrank the object while the input was being read: an access
    /// faulted (the backend saw zeros for the lost pages), or the object now ends before the input
    /// does (a shrink within the last page faults nothing; the kernel shows zeros past the end).
    pub fn check(&self) -> Result<(), InferError> {
        self.region.check_mapped(&self.mapping, self.end)
    }
}

/// An input's bytes, read in place from the region's mapping.
struct View {
    mapping: Arc<Mapping>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        self.mapping.slice(self.offset, self.len)
    }
}

/// The region of `byte_size` bytes at `offset` of `file`, mapped; `None` where it cannot be.
fn map(file: &File, offset: u64, byte_size: u64) -> Option<Arc<Mapping>> {
    usize::try_from(byte_size).ok().and_then(|len| Mapping::new(file, offset, len)).map(Arc::new)
}

/// The file of the shared-memory object `key`, as glibc's `shm_open` names it: leading slashes
/// dropped, and no other slash (so a key cannot reach outside the shared-memory folder).
fn object_path(key: &str) -> Option<PathBuf> {
    let name = key.trim_start_matches('/');
    (!name.is_empty() && !name.contains('/') && name != "." && name != "..").then(|| PathBuf::from(SHM_DIR).join(name))
}

impl SystemRegion {
    /// Opens `byte_size` bytes at `offset` of the shared-memory object `key` as region `name`,
    /// with tritonserver's checks and messages.
    pub fn open(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Self, InferError> {
        if key.trim_start_matches('/').is_empty() {
            return Err(InferError::invalid(format!(
                "cannot register shared memory region '{name}' - invalid shm key '{key}'"
            )));
        }
        if key.trim_start_matches('/').starts_with(RESERVED_KEY_PREFIX) {
            return Err(InferError::invalid(format!(
                "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_KEY_PREFIX}'"
            )));
        }
        // tritonserver answers INTERNAL when shm_open fails (HTTP 500), whatever the cause.
        let open_error = || InferError::internal(format!("Unable to open shared memory region: '{key}'"));
        let path = object_path(key).ok_or_else(open_error)?;
        // O_NONBLOCK: a FIFO planted under the name must not stall the request; O_NOFOLLOW: nor may
        // a symbolic link lead elsewhere. Only a regular file is a shared-memory object.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|_| open_error())?;
        let meta = file.metadata().map_err(|_| open_error())?;
        if !meta.is_file() {
            return Err(open_error());
        }
        let size = meta.size();
        if offset.checked_add(byte_size).is_none_or(|end| end > size) || byte_size == 0 {
            return Err(InferError::invalid(format!(
                "failed to register shared memory region '{name}': invalid args ({byte_size} bytes at offset {offset} do not fit in '{key}', {size} bytes)"
            )));
        }
        let mapping = map(&file, offset, byte_size);
        Ok(SystemRegion {
            name: name.into(),
            key: key.into(),
            offset,
            byte_size,
            file,
            path,
            identity: (meta.dev(), meta.ino()),
            mapping: Mutex::new(mapping),
        })
    }

    /// The region's mapping, made afresh when an access to the last one faulted (the object was
    /// shrunk and, once `place` has passed, has grown back); `None` where none can be made.
    fn mapping(&self) -> Option<Arc<Mapping>> {
        let mut current = self.mapping.lock();
        if current.as_ref().is_some_and(|m| !m.intact()) {
            *current = map(&self.file, self.offset, self.byte_size);
        }
        current.clone()
    }

    /// The absolute position in the object of `len` bytes at `offset` of the region, checked against
    /// the region as registered and against the object as it is now.
    fn place(&self, offset: u64, len: u64) -> Result<u64, InferError> {
        let end = end_of(&self.name, self.byte_size, offset, len)?;
        let now = std::fs::metadata(&self.path).map_err(|_| {
            InferError::invalid(format!(
                "shared memory region '{}': its object '{}' no longer exists (unlinked after registration)",
                self.name, self.key
            ))
        })?;
        if (now.dev(), now.ino()) != self.identity {
            return Err(InferError::invalid(format!(
                "shared memory region '{}': its object '{}' was replaced after registration; register it again",
                self.name, self.key
            )));
        }
        if now.size() < self.offset + end {
            return Err(self.shrunk(now.size()));
        }
        Ok(self.offset + offset)
    }

    /// Whether the accesses to `mapping` up to `end` (in the object) reached the object: none
    /// faulted and the object still reaches `end`.
    fn check_mapped(&self, mapping: &Mapping, end: u64) -> Result<(), InferError> {
        let size = self.current_size();
        if mapping.intact() && size >= end { Ok(()) } else { Err(self.shrunk(size)) }
    }

    fn shrunk(&self, size: u64) -> InferError {
        InferError::invalid(format!(
            "shared memory region '{}': its object '{}' shrank to {size} bytes after registration ({} bytes at offset {} registered)",
            self.name, self.key, self.byte_size, self.offset
        ))
    }

    /// The object's current size, for the message when it shrank during a copy.
    fn current_size(&self) -> u64 {
        self.file.metadata().map_or(0, |m| m.size())
    }

    /// The `len` bytes at `offset` of the region: a view of its mapping, with the lease to check
    /// once the backend is done with them, or, without a mapping, a copy, made once `before_copy`
    /// (the caller's check of `len`) has passed.
    pub fn read(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
        before_copy: impl FnOnce() -> Result<(), InferError>,
    ) -> Result<(Bytes, Option<InputLease>), InferError> {
        let at = self.place(offset, len)?;
        let len = usize::try_from(len).map_err(|_| InferError::invalid("shared memory range too large"))?;
        if let Some(mapping) = self.mapping() {
            let offset = usize::try_from(offset).map_err(|_| InferError::invalid("shared memory range too large"))?;
            let data = Bytes::from_owner(View { mapping: mapping.clone(), offset, len });
            return Ok((data, Some(InputLease { mapping, region: self.clone(), end: at + len as u64 })));
        }
        before_copy()?;
        self.copy(at, len).map(|data| (data, None))
    }

    /// A copy of `len` bytes at `at` of the object, read into a buffer that is not zeroed first:
    /// `pread` fills it. Zeroing was a whole pass more over a megabyte tensor (its buffer is a kept
    /// huge-page block, `large_pages.rs`, which a zeroed allocation must clear).
    /// The client sizes this buffer (a region that could not be mapped may be of any size the
    /// object has, a sparse one terabytes): an allocation the system refuses is the request's
    /// error, never the process's abort.
    fn copy(&self, at: u64, len: usize) -> Result<Bytes, InferError> {
        let mut data: Vec<u8> = Vec::new();
        data.try_reserve_exact(len).map_err(|_| {
            InferError::invalid(format!(
                "shared memory region '{}': cannot allocate {len} bytes to copy an input out of it (it could not be \
                 mapped)",
                self.name
            ))
        })?;
        read_exact_at(&self.file, &mut data.spare_capacity_mut()[..len], at)
            .map_err(|_| self.shrunk(self.current_size()))?;
        // SAFETY: `read_exact_at` returned Ok, so it initialised all `len` bytes.
        #[allow(unsafe_code)]
        unsafe {
            data.set_len(len)
        };
        Ok(data.into())
    }

    /// Writes `data` at `offset` of the region: into its mapping, checked afterwards for a fault
    /// (the object shrunk meanwhile), or without one with `pwrite`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), InferError> {
        let at = self.place(offset, data.len() as u64)?;
        if let Some(mapping) = self.mapping() {
            let offset = usize::try_from(offset).map_err(|_| InferError::invalid("shared memory range too large"))?;
            mapping.write(offset, data);
            return self.check_mapped(&mapping, at + data.len() as u64);
        }
        self.file.write_all_at(data, at).map_err(|e| {
            InferError::invalid(format!("shared memory region '{}': writing the output failed: {e}", self.name))
        })
    }
}

/// An output's place in a system region, held by the request from its arrival: a backend that
/// can write an output there itself (a sandbox, straight from its memory: `backend/wasm/lift.rs`)
/// saves the copy into a buffer of the server's that the frontend would then write. It holds the
/// region, as a [`super::DeviceSpan`] holds a CUDA one.
#[derive(Clone)]
pub struct HostSpan {
    region: Arc<SystemRegion>,
    offset: u64,
    limit: u64,
}

impl HostSpan {
    pub(super) fn new(region: Arc<SystemRegion>, offset: u64, limit: u64) -> Self {
        HostSpan { region, offset, limit }
    }

    /// The bytes the client gave the output.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Writes `data` at the place, as the frontend would have: the same checks and messages.
    pub fn write(&self, data: &[u8]) -> Result<(), InferError> {
        if data.len() as u64 > self.limit {
            return Err(super::does_not_fit(data.len(), self.limit, &self.region.name));
        }
        self.region.write(self.offset, data)
    }
}

impl HostSpan {
    /// The first `len` bytes of the place, lent to a backend that writes the output there itself
    /// (ONNX Runtime, as the output's buffer), with the lease to check once it is written. `None`
    /// when `len` exceeds the place, the object no longer holds it, or the region has no mapping:
    /// the backend then answers with a buffer of its own and the frontend writes it (with its
    /// messages for each of these).
    pub fn lend(&self, len: usize) -> Option<OutputPlace> {
        if len == 0 || len as u64 > self.limit {
            return None;
        }
        let at = self.region.place(self.offset, len as u64).ok()?;
        let mapping = self.region.mapping()?;
        let offset = usize::try_from(self.offset).ok()?;
        Some(OutputPlace { mapping, region: self.region.clone(), offset, len, end: at + len as u64 })
    }
}

/// An output's bytes in a region's mapping, lent for writing ([`HostSpan::lend`]).
pub struct OutputPlace {
    /// Keeps the pages mapped while the place is lent.
    mapping: Arc<Mapping>,
    region: Arc<SystemRegion>,
    /// Where the place starts in the region (and its mapping).
    offset: usize,
    len: usize,
    /// The end of the place in the object.
    end: u64,
}

impl OutputPlace {
    /// Where the output's bytes go: `len` writable bytes, valid while the place lives.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.mapping.as_mut_ptr(self.offset, self.len)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An error naming the region when the client shrank its object while the output was being
    /// written: a write faulted (it landed on a zero page no one reads), or the object now ends
    /// before the output does.
    pub fn check(&self) -> Result<(), InferError> {
        self.region.check_mapped(&self.mapping, self.end)
    }
}

impl std::fmt::Debug for HostSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostSpan({} at {}, {} bytes)", self.region.name, self.offset, self.limit)
    }
}

/// `FileExt::read_exact_at` into memory not yet initialised: fills all of `buf` from `at` on, or
/// fails (a short read past the object's end is `UnexpectedEof`).
fn read_exact_at(file: &File, mut buf: &mut [std::mem::MaybeUninit<u8>], mut at: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        let offset = libc::off_t::try_from(at).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes, and `pread` writes at most that
        // many into it; what it writes is initialised, and only that part is skipped below.
        #[allow(unsafe_code)]
        let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) };
        match n {
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                let n = n as usize;
                buf = &mut buf[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::mem::MaybeUninit;

    use super::*;

    #[test]
    fn reads_a_range_whole_and_reports_one_past_the_end() {
        let path = std::env::temp_dir().join(format!("nereus-read-exact-at-{}", std::process::id()));
        let mut file = File::create(&path).unwrap();
        let content: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        file.write_all(&content).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let mut buf = vec![MaybeUninit::new(0xAAu8); 9_000];
        read_exact_at(&file, &mut buf, 1_000).unwrap();
        // SAFETY (test): every element was initialised above.
        #[allow(unsafe_code)]
        let read: Vec<u8> = buf.iter().map(|b| unsafe { b.assume_init() }).collect();
        assert_eq!(read, content[1_000..]);

        let mut past = vec![MaybeUninit::new(0u8); 2];
        let e = read_exact_at(&file, &mut past, 9_999).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
