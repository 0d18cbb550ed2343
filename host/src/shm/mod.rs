//! Client shared memory: Triton's `system_shared_memory` and `cuda_shared_memory` extensions.
//! Clients register regions by name (POSIX shared-memory objects, or device memory exported with a
//! CUDA IPC handle); inputs are then read from, and outputs written to, byte ranges of those
//! regions, every range checked against the region's bounds. As in recent tritonserver both are off
//! unless the server runs with `--allow-client-shm`.
//!
//! One name space holds both kinds, as tritonserver's `SharedMemoryManager` does: a name taken by a
//! system region cannot be registered as a CUDA one; the status of one kind does not list the other;
//! unregistering a name of the other kind does nothing. A request holds its regions (`Arc`), so a
//! region unregistered while requests use it goes away when the last of them finishes.
mod cuda;
mod mapping;
mod system;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use cuda::CudaRegion;
pub use cuda::DeviceSpan;
pub use cuda::HANDLE_SIZE as CUDA_HANDLE_SIZE;
pub use system::{HostSpan, OutputPlace};
use system::{InputLease, SystemRegion};

use crate::error::{ErrorKind, InferError};

/// tritonserver's message when client shared memory is off.
pub const DISABLED_MESSAGE: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/// The two kinds of region, as the endpoints name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmKind {
    System,
    Cuda,
}

/// A registered region of either kind.
#[derive(Clone)]
enum Region {
    System(Arc<SystemRegion>),
    Cuda(Arc<CudaRegion>),
}

impl Region {
    fn kind(&self) -> ShmKind {
        match self {
            Region::System(_) => ShmKind::System,
            Region::Cuda(_) => ShmKind::Cuda,
        }
    }
}

/// A system region's status entry.
#[derive(Debug, PartialEq, Eq)]
pub struct SystemStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// A CUDA region's status entry.
#[derive(Debug, PartialEq, Eq)]
pub struct CudaStatus {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
}

/// The end of `len` bytes at `offset` of region `name` (`byte_size` bytes), when they lie inside
/// it as registered; tritonserver's checks and messages (`SharedMemoryManager::GetMemoryInfo`).
fn end_of(name: &str, byte_size: u64, offset: u64, len: u64) -> Result<u64, InferError> {
    if offset >= byte_size {
        return Err(InferError::invalid(format!("Invalid offset for shared memory region: '{name}'")));
    }
    let end = offset.checked_add(len).ok_or_else(|| {
        InferError::invalid(format!(
            "Integer overflow detected: byte_size ({len}) + offset ({offset}) exceeds maximum value ({}) for region '{name}'",
            u64::MAX
        ))
    })?;
    if end > byte_size {
        return Err(InferError::invalid(format!("Invalid offset + byte size for shared memory region: '{name}'")));
    }
    Ok(end)
}

/// The regions clients have registered, of both kinds.
pub struct SharedMemory {
    enabled: bool,
    regions: RwLock<BTreeMap<String, Region>>,
}

impl SharedMemory {
    pub fn new(enabled: bool) -> Self {
        SharedMemory { enabled, regions: RwLock::new(BTreeMap::new()) }
    }

    /// Registration and unregistration need `--allow-client-shm` (tritonserver's UNSUPPORTED,
    /// answered before anything of the request is read).
    pub fn check_enabled(&self) -> Result<(), InferError> {
        if self.enabled { Ok(()) } else { Err(InferError::unsupported(DISABLED_MESSAGE)) }
    }

    fn taken(name: &str) -> InferError {
        InferError::new(ErrorKind::AlreadyExists, format!("shared memory region '{name}' already in manager"))
    }

    /// Adds the region `open` makes, unless the name is taken (checked before opening, so a taken
    /// name costs no `shm_open` or IPC mapping, and again after, for a concurrent registration).
    fn insert(&self, name: &str, open: impl FnOnce() -> Result<Region, InferError>) -> Result<(), InferError> {
        self.check_enabled()?;
        if self.regions.read().contains_key(name) {
            return Err(Self::taken(name));
        }
        let region = open()?;
        let mut regions = self.regions.write();
        if regions.contains_key(name) {
            return Err(Self::taken(name));
        }
        regions.insert(name.to_string(), region);
        Ok(())
    }

    /// Registers `byte_size` bytes at `offset` of the shared-memory object `key` as region `name`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<(), InferError> {
        self.insert(name, || Ok(Region::System(Arc::new(SystemRegion::open(name, key, offset, byte_size)?))))
    }

    /// Registers the first `byte_size` bytes of the device memory the CUDA IPC `handle` exports, on
    /// GPU `device_id`, as region `name`.
    pub fn cuda_register(&self, name: &str, handle: &[u8], device_id: u64, byte_size: u64) -> Result<(), InferError> {
        self.insert(name, || Ok(Region::Cuda(Arc::new(CudaRegion::open(name, handle, device_id, byte_size)?))))
    }

    /// Unregisters the region `name` of `kind`, or every region of `kind` when `None` (an unknown
    /// name, or one of the other kind, is not an error, as in tritonserver).
    pub fn unregister(&self, kind: ShmKind, name: Option<&str>) -> Result<(), InferError> {
        self.check_enabled()?;
        // Dropped after the lock: closing a CUDA mapping calls the driver.
        let removed: Vec<Region> = {
            let mut regions = self.regions.write();
            match name {
                Some(n) if regions.get(n).is_some_and(|r| r.kind() == kind) => regions.remove(n).into_iter().collect(),
                Some(_) => Vec::new(),
                None => regions.extract_if(.., |_, r| r.kind() == kind).map(|(_, r)| r).collect(),
            }
        };
        drop(removed);
        Ok(())
    }

    /// Every system region, or the one named. With client shared memory off there are none, and
    /// the status says so (an empty list), as tritonserver's does.
    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<SystemStatus>, InferError> {
        self.status(ShmKind::System, name, |r| match r {
            Region::System(r) => Some(SystemStatus {
                name: r.name.clone(),
                key: r.key.clone(),
                offset: r.offset,
                byte_size: r.byte_size,
            }),
            Region::Cuda(_) => None,
        })
    }

    /// Every CUDA region, or the one named.
    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaStatus>, InferError> {
        self.status(ShmKind::Cuda, name, |r| match r {
            Region::Cuda(r) => {
                Some(CudaStatus { name: r.name.clone(), device_id: r.device_id, byte_size: r.byte_size })
            }
            Region::System(_) => None,
        })
    }

    /// The entries `entry` gives for the regions of `kind` (it answers `None` for the other kind),
    /// with tritonserver's messages for a name that is unknown or of the other kind.
    fn status<T>(
        &self,
        kind: ShmKind,
        name: Option<&str>,
        entry: impl Fn(&Region) -> Option<T>,
    ) -> Result<Vec<T>, InferError> {
        let regions = self.regions.read();
        let Some(n) = name else {
            return Ok(regions.values().filter_map(entry).collect());
        };
        match (regions.get(n).map(&entry), kind) {
            (Some(Some(status)), _) => Ok(vec![status]),
            (Some(None), ShmKind::System) => Err(InferError::not_found(format!(
                "The region named '{n}' is registered as CUDA shared memory, not system shared memory"
            ))),
            (Some(None), ShmKind::Cuda) => Err(InferError::not_found(format!(
                "The region named '{n}' is registered as system shared memory, not CUDA shared memory"
            ))),
            (None, ShmKind::System) => {
                Err(InferError::not_found(format!("Unable to find system shared memory region: '{n}'")))
            }
            (None, ShmKind::Cuda) => {
                Err(InferError::not_found(format!("Unable to find cuda shared memory region: '{n}'")))
            }
        }
    }

    fn region(&self, name: &str) -> Result<Region, InferError> {
        self.regions
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| InferError::invalid(format!("Unable to find shared memory region: '{name}'")))
    }

    /// Checks that `place` (an output's) lies inside its region as registered, when the request
    /// arrives, as tritonserver checks it then. Returns where it lies: on a GPU when the region is
    /// CUDA memory (a `KIND_GPU` instance on that GPU then writes the output there itself), or in a
    /// system region (which a sandbox writes from its own memory).
    pub fn check(&self, place: &ShmPlace) -> Result<OutputSpan, InferError> {
        match self.region(&place.region)? {
            Region::System(r) => {
                end_of(&place.region, r.byte_size, place.offset, place.byte_size)?;
                Ok(OutputSpan::Host(HostSpan::new(r, place.offset, place.byte_size)))
            }
            Region::Cuda(r) => r.span(place.offset, place.byte_size).map(OutputSpan::Device),
        }
    }

    /// The `len` bytes at `offset` of region `name` (an input's data): a system region's read in
    /// place, with a lease added to `leases` (checked once the backend is done); a CUDA region's
    /// left on the device (the server copies it to the host only for a model that does not read
    /// that GPU's memory, [`crate::device_io`]). `before_copy` runs before a system region that
    /// could not be mapped is copied out of: the copy is `len` bytes, a size the client chose.
    pub fn read(
        &self,
        name: &str,
        offset: u64,
        len: u64,
        leases: &mut ShmInputs,
        before_copy: impl FnOnce() -> Result<(), InferError>,
    ) -> Result<ShmData, InferError> {
        match self.region(name)? {
            Region::System(r) => {
                let (data, lease) = r.read(offset, len, before_copy)?;
                leases.0.extend(lease);
                Ok(ShmData::Host(data))
            }
            Region::Cuda(r) => Ok(ShmData::Device(r.span(offset, len)?)),
        }
    }
}

pub(crate) fn does_not_fit(len: usize, limit: u64, region: &str) -> InferError {
    InferError::invalid(format!(
        "output of {len} bytes does not fit the {limit} bytes given in shared memory region '{region}'"
    ))
}

/// Where an output placed in shared memory lies (see [`SharedMemory::check`]). It holds its
/// region: a region unregistered while the request runs, and a new one registered under its name,
/// do not redirect the output (tritonserver refuses the name until the request is done).
#[derive(Clone)]
pub enum OutputSpan {
    Device(DeviceSpan),
    Host(HostSpan),
}

impl OutputSpan {
    /// Writes `data` (an output the backend did not write in place) into its place.
    pub fn write(&self, data: &[u8]) -> Result<(), InferError> {
        match self {
            OutputSpan::Device(span) => span.write(data),
            OutputSpan::Host(span) => span.write(data),
        }
    }
}

/// An input's bytes in shared memory: host memory (a system region, read in place) or device memory
/// (a CUDA region, not copied yet).
pub enum ShmData {
    Host(Bytes),
    Device(DeviceSpan),
}

/// The system shared memory a request's inputs are read from in place: after the backend is done
/// with them, [`ShmInputs::check`] says whether the client shrank an object while they were read
/// (`system.rs`).
#[derive(Clone, Default)]
pub struct ShmInputs(Vec<InputLease>);

impl ShmInputs {
    /// Whether no input was read in place.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// An error naming the region when a client shrank an object an input was read from while it
    /// was read: the backend then saw zeros in place of the lost bytes, and its answer is void.
    pub fn check(&self) -> Result<(), InferError> {
        self.0.iter().try_for_each(|lease| lease.check())
    }
}

impl std::fmt::Debug for ShmInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShmInputs({})", self.0.len())
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
