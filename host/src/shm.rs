//! System shared memory (Triton's `system_shared_memory` extension): clients register POSIX
//! shared-memory regions (`shm_open` keys) by name; inputs are then read from, and outputs written
//! to, byte ranges of those regions, every range checked against the region's bounds. As in recent
//! tritonserver it is off unless the server runs with `--allow-client-shm`.
#![allow(unsafe_code)] // POSIX shm_open/mmap; each block says why it is sound.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::error::InferError;

/// One registered region: `byte_size` bytes at `offset` of the shared-memory object `key`.
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    base: *mut u8,
    mapped: usize,
}

// SAFETY: the mapping is owned by the region and unmapped only on drop; reads and writes copy
// through bounds-checked ranges. Concurrent use of one region by several requests is the client's
// arrangement, as in Triton.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` come from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

impl Region {
    /// The region's bytes `[offset, offset + len)` (relative to the region), checked.
    fn range(&self, offset: u64, len: u64) -> Result<std::ops::Range<usize>, InferError> {
        let end = offset.checked_add(len).filter(|end| *end <= self.byte_size).ok_or_else(|| {
            InferError::invalid(format!(
                "shared memory region '{}' has {} bytes; {len} bytes at offset {offset} do not fit",
                self.name, self.byte_size
            ))
        })?;
        let start = self.offset + offset;
        Ok(start as usize..(self.offset + end) as usize)
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

impl SystemShm {
    pub fn new(enabled: bool) -> Self {
        SystemShm { enabled, regions: RwLock::new(BTreeMap::new()) }
    }

    fn check_enabled(&self) -> Result<(), InferError> {
        if self.enabled {
            Ok(())
        } else {
            Err(InferError::unavailable(
                "client shared memory is disabled: start the server with --allow-client-shm=true",
            ))
        }
    }

    /// Maps `byte_size` bytes at `offset` of the shared-memory object `key` as region `name`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<(), InferError> {
        self.check_enabled()?;
        if self.regions.read().contains_key(name) {
            return Err(InferError::new(
                crate::error::ErrorKind::InvalidArg,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        let open_error = || InferError::invalid(format!("Unable to open shared memory region: '{key}'"));
        let c_key = CString::new(key).map_err(|_| open_error())?;
        // SAFETY: a NUL-terminated name; the descriptor is closed below on every path.
        let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(open_error());
        }
        // SAFETY: `stat` is plain data filled by fstat on the open descriptor.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        let size = if unsafe { libc::fstat(fd, &mut stat) } == 0 { stat.st_size as u64 } else { 0 };
        let wanted = offset.checked_add(byte_size).filter(|end| *end <= size && byte_size > 0);
        let Some(mapped) = wanted.and_then(|w| usize::try_from(w).ok()) else {
            // SAFETY: closing the descriptor opened above.
            unsafe { libc::close(fd) };
            return Err(InferError::invalid(format!(
                "shared memory region '{name}': {byte_size} bytes at offset {offset} do not fit in '{key}' ({size} bytes)"
            )));
        };
        // SAFETY: maps `mapped` bytes of the object, which is at least that large (checked above).
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), mapped, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        // SAFETY: the mapping (if any) keeps the object alive; the descriptor is no longer needed.
        unsafe { libc::close(fd) };
        if base == libc::MAP_FAILED {
            return Err(InferError::invalid(format!("Unable to map shared memory region: '{key}'")));
        }
        let region = Region { name: name.into(), key: key.into(), offset, byte_size, base: base.cast(), mapped };
        self.regions.write().insert(name.to_string(), Arc::new(region));
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

    /// Every region, or the one named.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, InferError> {
        self.check_enabled()?;
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
        self.check_enabled()?;
        self.regions
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| InferError::invalid(format!("Unable to find shared memory region: '{name}'")))
    }

    /// A copy of `len` bytes at `offset` of region `name` (an input's data).
    pub fn read(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, InferError> {
        let region = self.region(name)?;
        let range = region.range(offset, len)?;
        // SAFETY: `range` lies within the mapping (checked by `Region::range`).
        let bytes = unsafe { std::slice::from_raw_parts(region.base.add(range.start), range.len()) };
        Ok(Bytes::copy_from_slice(bytes))
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
        let range = region.range(offset, data.len() as u64)?;
        // SAFETY: `range` lies within the writable shared mapping (checked by `Region::range`).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.base.add(range.start), range.len()) };
        Ok(())
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

impl ShmPlace {
    /// The place a tensor's parameters give (`region` present), checked: `byte_size` is required.
    pub fn from_parameters(
        tensor: &str,
        region: Option<&str>,
        byte_size: Option<u64>,
        offset: Option<u64>,
    ) -> Result<Option<ShmPlace>, InferError> {
        let Some(region) = region else { return Ok(None) };
        let byte_size = byte_size.ok_or_else(|| {
            InferError::invalid(format!(
                "'{tensor}' names shared memory region '{region}' without a 'shared_memory_byte_size'"
            ))
        })?;
        Ok(Some(ShmPlace { region: region.to_string(), offset: offset.unwrap_or(0), byte_size }))
    }
}
