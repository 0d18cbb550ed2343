//! System shared memory (Triton's `system_shared_memory` extension): clients register POSIX
//! shared-memory regions (`shm_open` keys) by name; inputs are then read from, and outputs written
//! to, byte ranges of those regions, every range checked against the region's bounds. As in recent
//! tritonserver it is off unless the server runs with `--allow-client-shm`.
//!
//! The object belongs to the client, which may truncate, unlink or replace it at any moment.
//! tritonserver maps it, and a read of a mapped page past a shrunk object's end kills the whole
//! process with SIGBUS. Nereus never maps it: a region keeps the object's file descriptor, and each
//! access first checks (one `stat` of the object's name) that the name still leads to the same object
//! and that the object still holds the range, then copies with `pread`/`pwrite`, which report a range
//! that vanished in between as a short count, never as a signal. Either way the request gets an
//! error naming the region, and every other request carries on.
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::error::{ErrorKind, InferError};

/// Where Linux's `shm_open` keeps its objects (glibc's SHMDIR).
const SHM_DIR: &str = "/dev/shm";

/// The prefix tritonserver reserves for regions it creates itself (its python backend's).
const RESERVED_KEY_PREFIX: &str = "triton_python_backend_shm_region_";

/// tritonserver's message when client shared memory is off.
pub const DISABLED_MESSAGE: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// One registered region: `byte_size` bytes at `offset` of the shared-memory object `key`.
pub struct Region {
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
}

impl Region {
    /// The absolute position in the object of `len` bytes at `offset` of the region, checked against
    /// the region as registered and against the object as it is now.
    fn place(&self, offset: u64, len: u64) -> Result<u64, InferError> {
        let end = self.end_of(offset, len)?;
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

    /// The end of `len` bytes at `offset` of the region, when they lie inside it as registered;
    /// tritonserver's checks and messages (`SharedMemoryManager::GetMemoryInfo`).
    fn end_of(&self, offset: u64, len: u64) -> Result<u64, InferError> {
        let name = &self.name;
        if offset >= self.byte_size {
            return Err(InferError::invalid(format!("Invalid offset for shared memory region: '{name}'")));
        }
        let end = offset.checked_add(len).ok_or_else(|| {
            InferError::invalid(format!(
                "Integer overflow detected: byte_size ({len}) + offset ({offset}) exceeds maximum value ({}) for region '{name}'",
                u64::MAX
            ))
        })?;
        if end > self.byte_size {
            return Err(InferError::invalid(format!("Invalid offset + byte size for shared memory region: '{name}'")));
        }
        Ok(end)
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
}

/// Status of a region, as the status endpoints report it.
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// The regions clients have registered.
pub struct SystemShm {
    enabled: bool,
    regions: RwLock<BTreeMap<String, Arc<Region>>>,
}

/// The file of the shared-memory object `key`, as glibc's `shm_open` names it: leading slashes
/// dropped, and no other slash (so a key cannot reach outside the shared-memory folder).
fn object_path(key: &str) -> Option<PathBuf> {
    let name = key.trim_start_matches('/');
    (!name.is_empty() && !name.contains('/') && name != "." && name != "..").then(|| PathBuf::from(SHM_DIR).join(name))
}

impl SystemShm {
    pub fn new(enabled: bool) -> Self {
        SystemShm { enabled, regions: RwLock::new(BTreeMap::new()) }
    }

    /// Registration and unregistration need `--allow-client-shm` (tritonserver's UNSUPPORTED).
    fn check_enabled(&self) -> Result<(), InferError> {
        if self.enabled { Ok(()) } else { Err(InferError::unsupported(DISABLED_MESSAGE)) }
    }

    /// Registers `byte_size` bytes at `offset` of the shared-memory object `key` as region `name`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<(), InferError> {
        self.check_enabled()?;
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
        if self.regions.read().contains_key(name) {
            return Err(InferError::new(
                ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
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
        let region = Region {
            name: name.into(),
            key: key.into(),
            offset,
            byte_size,
            file,
            path,
            identity: (meta.dev(), meta.ino()),
        };
        let mut regions = self.regions.write();
        if regions.contains_key(name) {
            return Err(InferError::new(
                ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        regions.insert(name.to_string(), Arc::new(region));
        Ok(())
    }

    /// Unregisters `name`, or every region when `None` (an unknown name is not an error, as Triton).
    pub fn unregister(&self, name: Option<&str>) -> Result<(), InferError> {
        self.check_enabled()?;
        let mut regions = self.regions.write();
        match name {
            Some(n) => {
                regions.remove(n);
            }
            None => regions.clear(),
        }
        Ok(())
    }

    /// Every region, or the one named. With client shared memory off there are none, and the
    /// status says so (an empty list), as tritonserver's does.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, InferError> {
        let regions = self.regions.read();
        let status = |r: &Region| RegionStatus {
            name: r.name.clone(),
            key: r.key.clone(),
            offset: r.offset,
            byte_size: r.byte_size,
        };
        match name {
            Some(n) => regions
                .get(n)
                .map(|r| vec![status(r)])
                .ok_or_else(|| InferError::not_found(format!("Unable to find system shared memory region: '{n}'"))),
            None => Ok(regions.values().map(|r| status(r)).collect()),
        }
    }

    fn region(&self, name: &str) -> Result<Arc<Region>, InferError> {
        self.regions
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| InferError::invalid(format!("Unable to find shared memory region: '{name}'")))
    }

    /// Checks that `place` (an output's) lies inside its region as registered, when the request
    /// arrives, as tritonserver checks it then.
    pub fn check(&self, place: &ShmPlace) -> Result<(), InferError> {
        self.region(&place.region)?.end_of(place.offset, place.byte_size).map(drop)
    }

    /// A copy of `len` bytes at `offset` of region `name` (an input's data).
    pub fn read(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, InferError> {
        let region = self.region(name)?;
        let at = region.place(offset, len)?;
        let len = usize::try_from(len).map_err(|_| InferError::invalid("shared memory range too large"))?;
        let mut data = vec![0u8; len];
        region.file.read_exact_at(&mut data, at).map_err(|_| region.shrunk(region.current_size()))?;
        Ok(data.into())
    }

    /// Writes `data` at `offset` of region `name`, within `limit` bytes (an output's place).
    pub fn write(&self, name: &str, offset: u64, limit: u64, data: &[u8]) -> Result<(), InferError> {
        let region = self.region(name)?;
        if data.len() as u64 > limit {
            return Err(InferError::invalid(format!(
                "output of {} bytes does not fit the {limit} bytes given in shared memory region '{name}'",
                data.len()
            )));
        }
        let at = region.place(offset, data.len() as u64)?;
        region
            .file
            .write_all_at(data, at)
            .map_err(|e| InferError::invalid(format!("shared memory region '{name}': writing the output failed: {e}")))
    }
}

/// CUDA shared memory (Triton's `cuda_shared_memory` extension) is not implemented yet; its
/// endpoints answer as a tritonserver built without GPU support does, so clients that clear both
/// kinds of regions before they start (Triton's shared-memory examples do) carry on.
impl SystemShm {
    /// No CUDA region ever exists: an empty list, or NOT_FOUND for a named one.
    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, InferError> {
        match name {
            Some(n) => Err(InferError::not_found(format!("Unable to find cuda shared memory region: '{n}'"))),
            None => Ok(Vec::new()),
        }
    }

    pub fn cuda_register(&self, name: &str) -> Result<(), InferError> {
        self.check_enabled()?;
        Err(InferError::invalid(format!("failed to register CUDA shared memory region: '{name}', GPUs not supported")))
    }

    /// Nothing to unregister: succeeds whenever client shared memory is on.
    pub fn cuda_unregister(&self, _name: Option<&str>) -> Result<(), InferError> {
        self.check_enabled()
    }
}

/// Where a request puts an input or output: Triton's `shared_memory_region`,
/// `shared_memory_offset` (default 0) and `shared_memory_byte_size` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmPlace {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}
